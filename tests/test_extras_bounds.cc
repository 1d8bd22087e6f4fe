// Data-dependent indexing at the edges (docs/design.md, "Data-dependent indexing"): extras whose
// values lie far outside every axis (INT64_MIN, INT64_MAX, -1, the size, 2^40, the Int32
// extremes), read at positions outside the extras themselves, in reindex, reindex_reduce,
// gather, scatter_add, index_select, embedding and one_hot. Every result matches the reference
// interpreter and the values the overflow rule gives, and no kernel ever reads outside an
// array: in a sanitizer build (make test-asan) the kernels are compiled with AddressSanitizer,
// which this suite checks, and it also checks that such a kernel does report an out-of-bounds
// read, so that a missing bounds check could not pass unnoticed.
#include <fcntl.h>
#include <metajit/metajit.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "codegen/extra_bounds.h"
#include "codegen/kernel_ir.h"
#include "codegen/verify_kernel_ir.h"
#include "runtime/kernel_library.h"
#include "support/files.h"
#include "support/reference_check.h"
#include "support/scoped_env.h"
#include "support/skip.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::ScopedEnv;
using metajit_test::TempDir;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsanBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsanBuild = true;
#else
constexpr bool kAsanBuild = false;
#endif
#else
constexpr bool kAsanBuild = false;
#endif

bool flags_have_asan() {
  const char* flags = std::getenv("METAJIT_CXXFLAGS");
  return flags && std::string(flags).find("-fsanitize=address") != std::string::npos;
}

// In an AddressSanitizer build, the kernels of each test compiled with AddressSanitizer too.
// make test-asan does that for every suite (tests/test_main.cc appends the build's sanitizer
// flags to METAJIT_CXXFLAGS); a build instrumented some other way (CMAKE_CXX_FLAGS) gets the
// flag here, with a kernel cache of its own so that its kernels stay apart from plain ones.
class AsanKernels {
 public:
  AsanKernels() {
    if (!kAsanBuild || flags_have_asan()) return;
    dir_.emplace();
    cache_.emplace("METAJIT_CACHE_DIR", (dir_->path() / "cache").string());
    flags_.emplace(
        "METAJIT_CXXFLAGS",
        ScopedEnv::appended("METAJIT_CXXFLAGS", "-fsanitize=address -fno-omit-frame-pointer"));
  }

 private:
  std::optional<TempDir> dir_;
  std::optional<ScopedEnv> cache_, flags_;
};

constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
constexpr int64_t kHuge = int64_t(1) << 40;

// Positions along an axis of `n` elements that are all outside it but `n - 1` and 0, each at a
// different distance and direction.
std::vector<int64_t> far_positions(int64_t n) {
  return {0, n - 1, -1, n, n + 1, kHuge, -kHuge, kMin64, kMax64, kMin64 + 1, kMax64 - 1, 2 * n};
}
std::vector<int32_t> far_positions32(int32_t n) {
  return {0, n - 1, -1, n, n + 1, kMin32, kMax32, kMin32 + 1, kMax32 - 1, 1 << 30, -(1 << 30)};
}

Var floats(const Shape& shape, float scale = 1.f) {
  std::vector<float> v;
  for (int64_t k = 0; k < numel_of(shape); ++k) v.push_back(scale * float(k + 1));
  return array(v, shape);
}

// Checks every Var against the reference interpreter, at O1 (fused) and O0 (every node its own
// kernel), and with shapes compiled in as constants.
void check_all_ways(const std::function<std::vector<Var>()>& build) {
  for (const char* mode : {"default", "O0", "specialized"}) {
    INFO("mode " << mode);
    std::optional<ScopedEnv> env;
    if (std::string(mode) == "O0") env.emplace("METAJIT_OPT_LEVEL", "0");
    if (std::string(mode) == "specialized") env.emplace("METAJIT_SPECIALIZE_SHAPES", "1");
    check_against_reference(build());
  }
}

}  // namespace

TEST_CASE("reindex: extras far outside every axis read the overflow value", "[extras]") {
  AsanKernels asan;
  const Var x = floats({5, 3});
  const std::vector<int64_t> pos = far_positions(5);
  const int64_t n = int64_t(pos.size());
  const Var e = array(pos, {n});
  // Row i0 of x where e[i0] is inside it; two rows past the end of e read it outside.
  Var r = reindex(x, {n + 2, 3}, {"@e0(i0)", "i1"}, -1.5, {}, {e});
  std::vector<float> want;
  for (int64_t i = 0; i < n + 2; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      const bool inside = i < n && pos[size_t(i)] >= 0 && pos[size_t(i)] < 5;
      want.push_back(inside ? float(pos[size_t(i)] * 3 + j + 1) : -1.5f);
    }
  CHECK(r.to_vector<float>() == want);

  check_all_ways([&] {
    const Var e2 = array(std::vector<int64_t>{2, kMax64, -1, 4, kMin64, 0}, {2, 3});
    const Var e32 = array(far_positions32(3), {11});
    return std::vector<Var>{
        // Reads of e at positions outside it: before, after, far after, wrapped.
        reindex(x, {4, 3}, {"@e0(i0-1)", "i1"}, 9.0, {}, {e}),
        reindex(x, {4, 3}, {"@e0(i0*4611686018427387904)", "i1"}, 9.0, {}, {e}),
        reindex(x, {4, 3}, {"@e0(i0+9223372036854775807)", "i1"}, 9.0, {}, {e}),
        reindex(x, {4, 3}, {"@e0(-i0-1)", "i1"}, 9.0, {}, {e}),
        // Arithmetic on the far values wraps: INT64_MAX * 2 is -2, INT64_MIN * 2 is 0, and
        // INT64_MAX + 1 is INT64_MIN.
        reindex(x, {n, 3}, {"@e0(i0)*2", "i1"}, 0.0, {}, {e}),
        reindex(x, {n, 3}, {"@e0(i0)+1", "i1"}, 0.0, {}, {e}),
        reindex(x, {n, 3}, {"@e0(i0)/-1", "i1"}, 0.0, {}, {e}),
        reindex(x, {n, 3}, {"-@e0(i0)", "i1"}, 0.0, {}, {e}),
        reindex(x, {n, 3}, {"@e0(i0)%5", "i1"}, 0.0, {}, {e}),
        reindex(x, {n, 3}, {"i1 / @e0(i0)", "i1"}, 0.0, {}, {e}),
        // Nested: a far value as the position of another read.
        reindex(x, {n, 3}, {"@e0(@e0(i0))", "i1"}, 0.0, {}, {e}),
        reindex(x, {n, 3}, {"@e0(@e0(@e0(i0)+i1))", "i1"}, 0.0, {}, {e}),
        // Two extras, a 2-D one read at far positions too, and Int32 extremes.
        reindex(x, {3, 4}, {"@e1(i0, i1)", "@e0(i1+i0)%3"}, -2.0, {}, {e, e2}),
        reindex(x, {2, 3}, {"@e1(@e0(i0+2), i1)", "i1"}, -2.0, {}, {e, e2}),
        reindex(x, {11, 3}, {"@e0(i0)", "@e0(i1+3)"}, -2.0, {}, {e32}),
        reindex(x, {11, 3}, {"@e0(i0)+@e0(i1+5)", "i1"}, -2.0, {}, {e32}),
        // In overflow conditions only: the read outside makes the element overflow too.
        reindex(x, {5, 3}, {"i0", "i1"}, 7.0, {"@e0(i0+i1*4) < 0"}, {e}),
        reindex(x, {5, 3}, {"i0", "i1"}, 7.0, {"0 && @e0(i0*3+i1) == 1"}, {e}),
        reindex(x, {5, 3}, {"i0", "i1"}, 7.0, {"@e1(i1, i0) > 1000 || i0 == 3"}, {e, e2}),
    };
  });
}

// codegen/extra_bounds.h: a read of an extra at the output's own index needs no bounds test
// when the output's extents fit the extra's, which the kernel checks once per launch. One
// kernel (shapes are parameters) serves a launch where they fit, whose reads load directly, and
// one where they do not, whose reads keep their tests; in a sanitizer build a wrong condition
// would show as an out-of-bounds read of the extra.
TEST_CASE("extras read at the output's index load without tests when the extents fit", "[extras]") {
  AsanKernels asan;
  const Var x = floats({5, 3});
  auto rows_of = [&](std::vector<int64_t> pos, int64_t rows) {
    const int64_t n = int64_t(pos.size());
    return reindex(x, {rows, 3}, {"@e0(i0)", "i1"}, -1.5, {}, {array(pos, {n})});
  };
  const Var fits = rows_of({4, -1, 0, 7, 2}, 5);  // e has the output's 5 rows
  const Var beyond = rows_of({3, 1, 4}, 5);       // rows 3 and 4 read past the end of e
  const std::vector<KernelInfo> k = plan({fits}), k2 = plan({beyond});
  REQUIRE(k.size() == 1);
  REQUIRE(k2.size() == 1);
  CHECK(k[0].key == k2[0].key);
  const std::string& src = k[0].source;
  CHECK_THAT(src, Contains("extra reads and reindex guards without bounds tests where every index"));
  CHECK_THAT(src, Contains("(i64)in0[i0]"));  // the version that loads directly
  CHECK_THAT(src, Contains("mj_read1(in0"));  // and the one that tests
  std::vector<float> want;
  for (int64_t r : {4, -1, 0, 7, 2})
    for (int64_t j = 0; j < 3; ++j) want.push_back(r >= 0 && r < 5 ? float(r * 3 + j + 1) : -1.5f);
  CHECK(fits.to_vector<float>() == want);
  want.clear();
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j)
      want.push_back(i < 3 ? float(std::vector<int64_t>{3, 1, 4}[size_t(i)] * 3 + j + 1) : -1.5f);
  CHECK(beyond.to_vector<float>() == want);
  check_against_reference({fits, beyond});
  // gather's index has the output's shape: its kernel has the unchecked version too.
  const Var g = gather(x, 1, array(std::vector<int64_t>{2, 0, -1, 1, 1, 0}, {2, 3}));
  CHECK_THAT(plan({g})[0].source, Contains("extra reads and reindex guards without bounds tests"));
  check_against_reference(g);
}

TEST_CASE("reindex_reduce: far targets and far reads are skipped", "[extras]") {
  AsanKernels asan;
  const std::vector<int64_t> pos = far_positions(4);
  const int64_t n = int64_t(pos.size());
  const Var e = array(pos, {n});
  const Var y = floats({n});
  // Targets e[i0] of a [4] output: only 0 and 3 are inside (each once).
  Var r = reindex_reduce(y, ReduceOp::Add, {4}, {"@e0(i0)"}, {}, {e});
  CHECK(r.to_vector<float>() == std::vector<float>{1.f, 0.f, 0.f, 2.f});
  check_all_ways([&] {
    const Var yi = array(std::vector<int32_t>{5, -7, 9, 11, 13, 17}, {6});
    const Var e32 = array(std::vector<int32_t>{kMin32, 1, kMax32, 1, -1, 0}, {6});
    const Var e2 = array(std::vector<int64_t>{1, kMin64, 2, kMax64, 0, 2}, {3, 2});
    std::vector<Var> out;
    for (ReduceOp op : {ReduceOp::Add, ReduceOp::Mul, ReduceOp::Max, ReduceOp::Min}) {
      out.push_back(reindex_reduce(y, op, {4}, {"@e0(i0)"}, {}, {e}));
      out.push_back(reindex_reduce(y, op, {4}, {"@e0(i0+3)"}, {}, {e}));   // reads past e
      out.push_back(reindex_reduce(yi, op, {3}, {"@e0(i0)"}, {}, {e32}));  // collisions at 1
      out.push_back(reindex_reduce(yi, op, {3}, {"@e0(@e0(i0)+4)"}, {}, {e32}));
      out.push_back(reindex_reduce(yi, op, {3, 2}, {"@e0(i0)", "@e1(i0/2, i0%2)"}, {}, {e32, e2}));
      out.push_back(reindex_reduce(y, op, {4}, {"i0%4"}, {"@e0(i0+i0) <= 0"}, {e}));
    }
    return out;
  });
}

TEST_CASE("gather, scatter_add, index_select, embedding, one_hot with far indices", "[extras]") {
  AsanKernels asan;
  const Var x = floats({4, 3});
  const Var idx64 = array(far_positions(4), {12});
  const Var idx32 = array(far_positions32(4), {11});
  check_all_ways([&] {
    std::vector<Var> out;
    for (const Var& idx : {idx64, idx32}) {
      const int64_t n = idx.shape()[0];
      // gather along dim 0 of x: index [n, 1]; along dim 1: index [1, n].
      const Var col = reshape(idx, {n, 1}), row = reshape(idx, {1, n});
      out.push_back(gather(floats({n, 3}), 0, col));
      out.push_back(gather(floats({2, n}), 1, row));
      out.push_back(scatter_add(x, 0, col, floats({n, 1}, 0.5f)));
      out.push_back(scatter_add(x, 1, row, floats({1, n}, 0.25f)));
      out.push_back(index_select(x, 0, idx));
      out.push_back(index_select(x, 1, idx));
      out.push_back(embedding(x, reshape(idx, {1, n})));
      out.push_back(one_hot(idx, 4));
      out.push_back(one_hot(idx, 4, DType::Int32));
    }
    return out;
  });
  // The values the overflow rule gives: 0 for a gather / index_select / embedding outside, a
  // dropped element for scatter_add, a row of zeros for one_hot; the first three and one_hot
  // count -4..-1 from the end first (numpy's rule), scatter_add does not.
  const std::vector<int64_t> pos = far_positions(4);
  std::vector<float> sel, hot;
  for (int64_t p : pos) {
    const int64_t q = p < 0 && p >= -4 ? p + 4 : p;
    for (int64_t j = 0; j < 3; ++j) sel.push_back(q >= 0 && q < 4 ? float(q * 3 + j + 1) : 0.f);
    for (int64_t c = 0; c < 4; ++c) hot.push_back(q == c ? 1.f : 0.f);
  }
  CHECK(index_select(x, 0, idx64).to_vector<float>() == sel);
  CHECK(embedding(x, idx64).to_vector<float>() == sel);
  CHECK(one_hot(idx64, 4).to_vector<float>() == hot);
  std::vector<float> added = x.to_vector<float>();
  const std::vector<float> src = floats({12, 1}, 0.5f).to_vector<float>();
  for (size_t k = 0; k < pos.size(); ++k)
    if (pos[k] >= 0 && pos[k] < 4)
      for (int64_t j = 0; j < 1; ++j) added[size_t(pos[k] * 3 + j)] += src[k];
  CHECK(scatter_add(x, 0, reshape(idx64, {12, 1}), floats({12, 1}, 0.5f)).to_vector<float>() ==
        added);
}

TEST_CASE("0-d, empty and computed extras", "[extras]") {
  AsanKernels asan;
  const Var x = floats({3, 2});
  check_all_ways([&] {
    std::vector<Var> out;
    // 0-d extras (a leaf array and a scalar) holding a position far outside.
    for (int64_t v : {int64_t(1), int64_t(-1), int64_t(3), kMin64, kMax64}) {
      out.push_back(reindex(x, {2, 2}, {"@e0()", "i1"}, -3.0, {}, {array<int64_t>({v}, {})}));
      out.push_back(reindex(x, {2, 2}, {"@e0()+i0", "i1"}, -3.0, {}, {array<int64_t>({v}, {})}));
    }
    out.push_back(reindex(x, {2, 2}, {"@e0()", "i1"}, -3.0, {}, {scalar(2.0, DType::Int32)}));
    out.push_back(reindex(x, {2, 2}, {"@e0()", "i1"}, -3.0, {}, {scalar(-2.0, DType::Int64)}));
    out.push_back(reindex(x, {2, 2}, {"@e0()", "i1"}, -3.0, {}, {scalar(3.0, DType::Int64)}));
    // Empty extras: every read is outside.
    const Var none = array(std::vector<int64_t>{}, {0});
    const Var none2 = array(std::vector<int32_t>{}, {2, 0});
    out.push_back(reindex(x, {3, 2}, {"@e0(i0)", "i1"}, 4.0, {}, {none}));
    out.push_back(reindex(x, {3, 2}, {"i0", "i1"}, 4.0, {"@e0(0, i1) == 0"}, {none2}));
    out.push_back(reindex_reduce(x, ReduceOp::Add, {3}, {"@e0(i0)"}, {}, {none}));
    // Extras computed by the graph: stored for the reads, far values included.
    const Var big = cast(floats({4}), DType::Int64) * 1e15 - 2e15;  // -1e15, 0, 1e15, 2e15
    out.push_back(reindex(x, {4, 2}, {"@e0(i0)", "i1"}, 0.0, {}, {big}));
    const Var rev = arange(6, DType::Int64) * -1 + 4.0;  // 4 3 2 1 0 -1
    out.push_back(reindex(x, {6, 2}, {"@e0(i0)", "i1"}, 0.0, {}, {rev}));
    out.push_back(reindex_reduce(floats({6}), ReduceOp::Max, {3}, {"@e0(i0)"}, {}, {rev}));
    return out;
  });
}

// Found while writing this suite: a read whose value is multiplied by 0 still reads, and a read
// outside its extra makes the element overflow (docs/design.md, "Data-dependent indexing"),
// however the read's value is used. ix_extra_reads_in_range says so for "@e0(i0)*0"; the
// kernels must agree.
TEST_CASE("a read whose value is unused still follows the overflow rule", "[extras]") {
  AsanKernels asan;
  const Var x = floats({3});
  const Var e = array(std::vector<int64_t>{0, 1}, {2});
  // e has 2 elements: at i0 = 2 the read is outside, so the element overflows (-1).
  Var a = reindex(x, {3}, {"@e0(i0)*0"}, -1.0, {}, {e});
  Var b = reindex(x, {3}, {"i0 + 0*@e0(i0)"}, -1.0, {}, {e});
  Var c = reindex(x, {3}, {"i0"}, -1.0, {"0 && @e0(i0)"}, {e});
  check_against_reference({a, b, c});
  CHECK(a.to_vector<float>() == std::vector<float>{1.f, 1.f, -1.f});
  CHECK(b.to_vector<float>() == std::vector<float>{1.f, 2.f, -1.f});
  CHECK(c.to_vector<float>() == std::vector<float>{1.f, 2.f, -1.f});
}

// Found by the random graphs of test_differential (support/random_graph.h): a reindex with
// extras that reads a reindex fused into its kernel. The outer node's index expressions, with
// their reads already turned into reads of the kernel's buffers, are substituted into the inner
// node's expressions; when the inner node has extras too, those substituted reads must not be
// lowered once more as if they were reads of the inner node's own extras (wrong values, an
// std::out_of_range, or a read of the wrong rank that does not compile).
TEST_CASE("a reindex with extras reading a fused reindex", "[extras]") {
  AsanKernels asan;
  const Var x = array<float>({1, 2, 3, 4}, {4});
  const Var e = array<int64_t>({2, 0, 3, 1, 9}, {5});
  const Var f = array<int64_t>({1, 1, 0, 2}, {4});
  const Var g = array<int64_t>({3, 3, 3, 3}, {4});
  SECTION("the inner node has no extras") {
    const Var r = reindex(reindex(x, {4}, {"3-i0"}) * 2.0, {5}, {"@e0(i0)"}, 7.0, {}, {e});
    check_against_reference(r);
    CHECK(r.to_vector<float>() == std::vector<float>{4.f, 8.f, 2.f, 6.f, 7.f});
  }
  SECTION("both have extras: the outer reads are not reads of the inner node's extras") {
    const Var inner = reindex(x, {4}, {"@e0(i0)"}, -1.0, {}, {f});  // 2 2 1 3
    const Var r = reindex(inner, {5}, {"@e0(i0)"}, 7.0, {}, {e});
    check_against_reference(r);
    CHECK(r.to_vector<float>() == std::vector<float>{1.f, 2.f, 3.f, 2.f, 7.f});
    const Var inner2 = reindex(x, {4}, {"@e1(i0)"}, -1.0, {}, {g, f});
    const Var r2 = reindex(inner2, {5}, {"@e1(i0)"}, 7.0, {}, {g, e});
    check_against_reference(r2);
    CHECK(r2.to_vector<float>() == std::vector<float>{1.f, 2.f, 3.f, 2.f, 7.f});
  }
  SECTION("the outer extra has another rank than the inner node's") {
    const Var inner = reindex(x, {4}, {"@e0(i0)"}, -1.0, {}, {f});  // 2 2 1 3
    const Var e2 = array<int64_t>({3, 0, 9, 2}, {2, 2});
    const Var r = reindex(inner, {2, 2}, {"@e0(i0, i1)"}, 7.0, {}, {e2});
    check_against_reference(r);
    CHECK(r.to_vector<float>() == std::vector<float>{3.f, 2.f, 7.f, 1.f});
  }
  SECTION("gather and embedding of a transposed table (transpose is a reindex)") {
    const Var t = transpose(array<float>({1, 2, 3, 4, 5, 6}, {2, 3}), {1, 0});
    const Var gt = gather(t, 1, array<int64_t>({1, 0, 1, 1, 0, 0}, {3, 2}));
    check_against_reference(gt);
    CHECK(gt.to_vector<float>() == std::vector<float>{4.f, 1.f, 5.f, 5.f, 3.f, 3.f});
    const Var m = embedding(t, array<int32_t>({2, 0}, {2}));
    check_against_reference(m);
    CHECK(m.to_vector<float>() == std::vector<float>{3.f, 6.f, 1.f, 4.f});
  }
}

// Found by the random graphs of test_differential: a read no loop variable changes, which the
// C++ emitter hoists out of the loops, in kernels with one parallel loop or none (it was once
// written between the parallel pragma and its loop).
TEST_CASE("reads that no loop variable changes", "[extras]") {
  AsanKernels asan;
  const Var x = array<int32_t>({1, 2, 3, 4}, {4});
  const Var e = array<int64_t>({2, 0, kMax64}, {3});
  check_all_ways([&] {
    return std::vector<Var>{
        reindex(x, {4}, {"@e0(1)"}, 6.0, {}, {e}),                   // one loop
        reindex(x, {4}, {"@e0(2)"}, 6.0, {}, {e}),                   // a far value
        reindex(x, {4}, {"@e0(@e0(1)+5)"}, 6.0, {}, {e}),            // a read outside
        x >= reindex(x, {}, {"@e0(@e0(0)-2)"}, 6.0, {}, {e}),        // 0-d, fused
        reindex(x, {3, 4}, {"@e0(i0)"}, 6.0, {}, {e}),               // invariant inside
        reindex(x, {2, 4}, {"i1"}, 6.0, {"@e0(1) == i0"}, {e}),      // in a condition
        reindex_reduce(x, ReduceOp::Add, {3}, {"@e0(0)"}, {}, {e}),  // a scatter to one place
    };
  });
}

// make test-asan: the kernels the suites compile carry AddressSanitizer (tests/test_main.cc adds
// the build's sanitizer flags to METAJIT_CXXFLAGS; AsanKernels above where they are missing).
TEST_CASE("in an AddressSanitizer build the kernels are compiled with AddressSanitizer",
          "[extras][asan]") {
  if (!kAsanBuild)
    metajit_test::skip_test("not an AddressSanitizer build (make test-asan checks this)");
  AsanKernels asan;
  REQUIRE(flags_have_asan());
  const Var x = floats({5, 3});
  const Var e = array(far_positions(5), {12});
  const Var r = reindex(x, {12, 3}, {"@e0(i0)", "i1"}, -1.0, {}, {e});
  const std::vector<KernelInfo> kernels = plan({r});
  REQUIRE(!kernels.empty());
  check_against_reference(r);
  for (const KernelInfo& k : kernels) {
    INFO(k.key);
    const nlohmann::json meta =
        nlohmann::json::parse(metajit_test::read_file(cache_entry_dir(k.key) / "meta.json"));
    const std::string command = meta["compile_command"].dump();
    CHECK_THAT(command, Contains("-fsanitize=address"));
  }
}

namespace {

// in0 int64[p0] -> out int64[p0]: out[i0] = in0[i0 + p1] (a plain load, which no bounds check
// guards: the planner only makes loads inside their buffer), or with `extra_read`
// out[i0] = @in0(i0 + p1), the bounds-checked read extras lower to.
KernelIR shifted_copy(bool extra_read) {
  KernelIR ir;
  ir.kind = KernelKind::Map;
  ir.inputs.push_back({DType::Int64, {ix_param(0)}});
  ir.output = {DType::Int64, {ix_param(0)}};
  ir.loops.push_back({0, ix_param(0)});
  const IndexExprPtr at = ix_binary(IxKind::Add, ix_var(0), ix_param(1));
  KStmt st;
  st.id = 0;
  st.dtype = DType::Int64;
  if (extra_read) {
    st.kind = KOp::Iota;
    st.index = {ix_extra(0, {at})};
  } else {
    st.kind = KOp::Load;
    st.buffer = 0;
    st.index = {at};
  }
  ir.body.stmts = {st};
  ir.body.result = 0;
  ir.num_params = 2;
  ir.num_vars = 1;
  ir.ops = {"reindex"};
  return ir;
}

// in0 int64[p0] -> out int64[p0]: out[i0] = sum over i1 < `extent` of @in0(i1).
KernelIR prefix_of_extra(const IndexExprPtr& extent) {
  KernelIR ir = shifted_copy(true);
  KStmt read = ir.body.stmts[0];
  read.index = {ix_extra(0, {ix_var(1)})};
  KStmt red;
  red.kind = KOp::Reduce;
  red.id = 1;
  red.dtype = DType::Int64;
  red.op = int(ReduceOp::Add);
  red.loops.push_back({1, extent});
  red.body = std::make_shared<KBlock>();
  red.body->stmts = {read};
  red.body->result = 0;
  ir.body.stmts = {red};
  ir.body.result = 1;
  ir.num_vars = 2;
  return ir;
}

}  // namespace

// codegen/extra_bounds.h decides from the loops' extents, tested once before any loop runs: a
// reduction whose extent reads an outer loop's variable (kernel specs allow it) gives no
// unchecked version, since that extent has no value at launch; one over a parameter does, on
// the condition that it fits the array.
TEST_CASE("an extra read's bounds test is dropped only on extents known at launch", "[extras]") {
  const InBoundsVersion by_param = extra_reads_in_bounds(prefix_of_extra(ix_param(1)));
  REQUIRE(by_param.unchecked_reads.size() == 1);
  REQUIRE(by_param.conditions.size() == 1);
  CHECK(ix_to_string(*by_param.conditions[0].first) == "p1");
  CHECK(ix_to_string(*by_param.conditions[0].second) == "p0");
  const IndexExprPtr triangle = ix_binary(IxKind::Add, ix_var(0), ix_const(1));
  CHECK(extra_reads_in_bounds(prefix_of_extra(triangle)).empty());
  CHECK_FALSE(verify_kernel_ir(prefix_of_extra(triangle)).has_value());  // a valid kernel
}

// The other half of the argument: if a kernel did read outside an array, AddressSanitizer would
// say so. A hand-made kernel whose plain load runs past the end of its input is run in a child
// process, which must die with AddressSanitizer's report; the bounds-checked read of extras at
// the same positions reads nothing outside and gives 0.
TEST_CASE("an AddressSanitizer kernel that reads past its input is caught", "[extras][asan]") {
  if (!kAsanBuild)
    metajit_test::skip_test("not an AddressSanitizer build (make test-asan checks this)");
  AsanKernels asan;
  const KernelIR load = shifted_copy(false), read = shifted_copy(true);
  const std::vector<KernelHandle> hs = obtain_kernels({&load, &read}, Device::CPU);
  REQUIRE(hs.size() == 2);
  REQUIRE(hs[0].fn != nullptr);
  REQUIRE(hs[1].fn != nullptr);
  std::vector<int64_t> in = {10, 11, 12, 13}, out(4, -7);
  void* buffers[2] = {in.data(), out.data()};
  const double* no_scalars = nullptr;

  // In range (shift 0): both copy.
  const long long p0[2] = {4, 0};
  hs[0].fn(buffers, p0, no_scalars);
  CHECK(out == in);
  out.assign(4, -7);
  hs[1].fn(buffers, p0, no_scalars);
  CHECK(out == in);
  // Shifted by 2: the extra read gives 0 past the end, and reads nothing there.
  const long long p2[2] = {4, 2};
  hs[1].fn(buffers, p2, no_scalars);
  CHECK(out == std::vector<int64_t>{12, 13, 0, 0});
  const long long far[2] = {4, std::numeric_limits<long long>::min()};
  hs[1].fn(buffers, far, no_scalars);
  CHECK(out == std::vector<int64_t>{0, 0, 0, 0});

  // The plain load shifted by 2 reads in[4] and in[5], just past the end: a child process runs
  // it and must die with the report.
  TempDir dir;
  const std::filesystem::path log = dir.path() / "stderr.txt";
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) ::dup2(fd, 2);
    hs[0].fn(buffers, p2, no_scalars);
    ::_exit(0);  // not reached under AddressSanitizer
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  const std::string report = metajit_test::read_file(log);
  INFO(report);
  CHECK_FALSE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK_THAT(report, Contains("AddressSanitizer") && Contains("heap-buffer-overflow") &&
                         Contains("READ of size"));
}
