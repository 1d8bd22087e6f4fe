// Bad input raises a typed metajit::Error whose message names the op, the shapes and what is
// valid, and leaves nothing behind (no compile, no cache entry).
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cache/cache_store.h"
#include "base/check.h"
#include "codegen/cuda_emulation_abi.h"
#include "meta_ops/index_expr.h"
#include "runtime/loader.h"
#include "support/exceptions.h"
#include "support/files.h"
#include "support/scoped_env.h"
#include "support/skip.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::message_of;

TEST_CASE("mismatched shapes in a binary op", "[errors]") {
  Var a = zeros({2, 3}), b = zeros({4});
  std::string m = message_of<ShapeError>([&] { a + b; });
  CHECK_THAT(m, Contains("add") && Contains("[2, 3]") && Contains("[4]") && Contains("equal or 1"));
  CHECK_THROWS_AS(where(zeros({2}) > 0.0, a, b), ShapeError);
  CHECK_THROWS_AS(matmul(zeros({2, 3}), zeros({4, 5})), ShapeError);
  CHECK_THAT(message_of<ShapeError>([&] {
               matmul(zeros({2, 3}), zeros({4, 5}));
             }),
             Contains("matmul") && Contains("inner dimensions 3 and 4"));
  CHECK_THROWS_AS(broadcast_to(zeros({3}), {4, 2}), ShapeError);
  CHECK_THROWS_AS(reshape(zeros({2, 3}), {4, 2}), ShapeError);
  CHECK_THROWS_AS(conv2d(zeros({1, 3, 8, 8}), zeros({4, 2, 3, 3})), ShapeError);
  CHECK_THROWS_AS(full({2, -1}, 1.0), ShapeError);
}

TEST_CASE("axis out of range", "[errors]") {
  Var x = zeros({2, 3});
  std::string m = message_of<ShapeError>([&] { sum(x, {2}); });
  CHECK_THAT(m,
             Contains("reduce") && Contains("axis 2") && Contains("[2, 3]") && Contains("-2..1"));
  CHECK_THROWS_AS(sum(x, {-3}), ShapeError);
  CHECK_THROWS_AS(sum(x, {1, -1}), ShapeError);  // the same axis twice
  CHECK_THROWS_AS(softmax(x, 5), ShapeError);
  CHECK_THROWS_AS(transpose(x, {0, 0}), ShapeError);
  CHECK_THROWS_AS(broadcast_to(x, {2, 3, 4}, {7}), ShapeError);
}

TEST_CASE("reindex with the wrong number of indexes", "[errors]") {
  Var x = zeros({2, 3});
  std::string m = message_of<IndexExprError>([&] { reindex(x, {3, 2}, {"i1"}); });
  CHECK_THAT(m, Contains("reindex") && Contains("[2, 3]") && Contains("expected 2"));
  CHECK_THROWS_AS(reindex_reduce(x, ReduceOp::Add, {3}, {"i0", "i1"}), IndexExprError);
}

TEST_CASE("index expressions: unknown names, bad syntax, trailing garbage", "[errors]") {
  Var x = zeros({2, 3});
  std::string m = message_of<IndexExprError>([&] { reindex(x, {3, 2}, {"j1", "i0"}); });
  CHECK_THAT(m, Contains("unknown name 'j1'") && Contains("indexes[0]") && Contains("i0..i1"));
  CHECK_THAT(message_of<IndexExprError>([&] {
               reindex(x, {3, 2}, {"i1", "i0 i1"});
             }),
             Contains("unexpected 'i1'") && Contains("indexes[1]"));
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i1", "i0+"}), IndexExprError);
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i1", "(i0"}), IndexExprError);
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i1", ""}), IndexExprError);
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i2", "i0"}), IndexExprError);  // only i0, i1 exist
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i1/0", "i0"}), IndexExprError);
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i1<2", "i0"}), IndexExprError);  // conditions only
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i1", "i0"}, 0, {"i0 <"}), IndexExprError);
  CHECK_THROWS_AS(reindex(x, {3, 2}, {"i1", "99999999999999999999"}), IndexExprError);
}

TEST_CASE("code cannot be injected through an index string", "[errors]") {
  Var x = zeros({2, 3});
  reset_stats();
  const std::string attack = "i0); system(\"touch /tmp/metajit-pwned\"); (0";
  std::string m = message_of<IndexExprError>([&] { reindex(x, {2, 3}, {attack, "i1"}); });
  CHECK_THAT(m, Contains("reindex") && Contains("indexes[0]"));
  CHECK_THROWS_AS(reindex(x, {2, 3}, {"i0", "i1"}, 0, {"i0;exit(1)"}), IndexExprError);
  CHECK_THROWS_AS(reindex(x, {2, 3}, {"i0", "i1 /* */"}), IndexExprError);
  CHECK(stats().kernels_compiled == 0);
  CHECK_FALSE(std::filesystem::exists("/tmp/metajit-pwned"));
}

TEST_CASE("to_vector and item with the wrong type or size", "[errors]") {
  Var x = zeros({2, 3});
  std::string m = message_of<DTypeError>([&] { x.to_vector<int32_t>(); });
  CHECK_THAT(m, Contains("to_vector") && Contains("float32") && Contains("int32"));
  CHECK_THROWS_AS(arange(3).to_vector<float>(), DTypeError);
  CHECK_THROWS_AS((x > 0.0).to_vector<int32_t>(), DTypeError);
  CHECK_THROWS_AS(x.item<float>(), ShapeError);
  CHECK_THROWS_AS(sum(x).item<double>(), DTypeError);
}

TEST_CASE("array() with the wrong data size", "[errors]") {
  std::string m = message_of<ShapeError>([] { array<float>({1, 2, 3}, {2, 2}); });
  CHECK_THAT(m, Contains("array") && Contains("3 values") && Contains("[2, 2]") && Contains("4"));
}

TEST_CASE("undefined Vars are errors, not crashes", "[errors]") {
  Var undefined;
  CHECK_THROWS_AS(undefined + 1.0, Error);
  CHECK_THROWS_AS(eval({undefined}), Error);
  CHECK_THROWS_AS(sum(undefined), Error);
  // What it is, read without evaluating: these segfaulted (issue 26).
  for (const char* what : {"shape", "dtype", "ndim", "numel"}) {
    INFO(what);
    const std::string m = message_of<Error>([&] {
      const std::string w = what;
      if (w == "shape") (void)undefined.shape();
      if (w == "dtype") (void)undefined.dtype();
      if (w == "ndim") (void)undefined.ndim();
      if (w == "numel") (void)undefined.numel();
    });
    CHECK_THAT(m, Contains(what) && Contains("undefined (default-constructed)"));
  }
}

// Shapes whose size overflows are refused when built (issue 26: numel read 0 or negative, a sum
// over one crashed or never returned, a 2^64-element Var reshaped to {1, 0}); an allocation
// the system refuses is a typed Error naming the bytes, not std::bad_alloc.
TEST_CASE("shapes too large for memory are ShapeErrors when built", "[errors]") {
  const std::string m = message_of<ShapeError>([] { zeros({int64_t(1) << 33, int64_t(1) << 31}); });
  CHECK_THAT(m, Contains("zeros") && Contains("[8589934592, 2147483648]") &&
                    Contains("overflows int64") && Contains("float32"));
  CHECK_THROWS_AS(zeros({3037000500, 3037000500}), ShapeError);
  CHECK_THROWS_AS(randn({int64_t(1) << 40, int64_t(1) << 30}, 1), ShapeError);
  CHECK_THROWS_AS(broadcast_to(ones({1}), {int64_t(1) << 62, 4}), ShapeError);
  CHECK_THROWS_AS(reindex(ones({4}), {int64_t(1) << 61, 1 << 10}, {"i1 % 4"}), ShapeError);
  const std::string neg = message_of<ShapeError>([] { zeros({2, -3}); });
  CHECK_THAT(neg, Contains("zeros") && Contains("[2, -3]") && Contains(">= 0"));
  // Zero elements are fine whatever the other extents; the largest float64 shape still builds.
  CHECK(zeros({0, int64_t(1) << 62}).numel() == 0);
  // A zero after extents whose product overflows (found by fuzz_api_sequence: numel_of
  // multiplied 2^40 by 2^63-1 first, signed overflow that make test-asan's UBSan reports).
  const Shape empty_huge = {int64_t(1) << 40, INT64_MAX, 0};
  CHECK(zeros(empty_huge).numel() == 0);
  CHECK_THAT(message_of<ShapeError>([&] {
               array(std::vector<float>{1, 2}, empty_huge);
             }),
             Contains("which needs 0"));
  CHECK(sum(zeros({3, 0, int64_t(1) << 40})).item<float>() == 0);
  // reshape's known extents multiplied past int64 (fuzz_api_sequence; signed overflow, and a
  // message about inferring -1 from the wrapped product).
  CHECK_THAT(message_of<ShapeError>([] {
               reshape(zeros({6}), {int64_t(1) << 40, -1, int64_t(1) << 40});
             }),
             Contains("reshape") && Contains("[6]") && Contains("overflows int64"));
  CHECK(reshape(zeros({0}), {int64_t(1) << 40, int64_t(1) << 40, 0}).numel() == 0);  // empty
  // mean's count of reduced elements, likewise (UBSan in make test-asan): the result is empty.
  CHECK(mean(zeros({INT64_MAX, 7, 0}), {0, 1}).shape() == Shape{0});
  // conv2d's and max_pool2d's window arithmetic (fuzz_api_sequence): padding, dilation or a
  // kernel near int64's limit.
  CHECK_THAT(message_of<ShapeError>([] {
               conv2d(zeros({1, 1, 6, 6}), zeros({1, 1, 4, 4}), 1, 1, INT64_MAX / 2);
             }),
             Contains("conv2d") && Contains("overflows int64"));
  CHECK_THAT(message_of<ShapeError>([] {
               conv2d(zeros({1, 1, 6, 6}), zeros({1, 1, 1, 1}), 1, INT64_MAX / 2 + 1);
             }),
             Contains("conv2d") && Contains("overflows int64"));
  CHECK_THAT(message_of<ShapeError>([] {
               max_pool2d(zeros({1, 1, 6, 6}), INT64_MAX, 1, INT64_MAX / 2);
             }),
             Contains("max_pool2d") && Contains("overflows int64"));
  CHECK(conv2d(zeros({1, 1, 6, 6}), zeros({1, 1, 3, 3}), 2, 1, 2).shape() == Shape{1, 1, 2, 2});
  CHECK(zeros({int64_t(1) << 59}, DType::Float64).numel() == int64_t(1) << 59);
  CHECK_THROWS_AS(zeros({int64_t(1) << 60}, DType::Float64), ShapeError);
  // A derived shape is checked too: the outer product of two large vectors.
  Var big = zeros({int64_t(1) << 31});
  CHECK_THROWS_AS(reshape(big, {-1, 1}) * reshape(big, {1, -1}) * reshape(big, {1, 1, -1}),
                  ShapeError);
}

TEST_CASE("an allocation the system refuses is a typed Error with the byte count", "[errors]") {
#if defined(__SANITIZE_ADDRESS__)
  metajit_test::skip_test(
      "AddressSanitizer's allocator ends the process on a 4 PiB request "
      "instead of returning null (allocator_may_return_null=0)");
#endif
  // 2^50 floats (4 PiB): a valid shape, more memory than any machine here has.
  Var huge = zeros({int64_t(1) << 50});
  const std::string m = message_of<Error>([&] { eval({huge}); });
  CHECK_THAT(m, Contains("out of memory") && Contains(std::to_string(int64_t(1) << 52)) &&
                    Contains("bytes"));
}

TEST_CASE("softmax and log_softmax name themselves for a bad dim", "[errors]") {
  for (const char* op : {"softmax", "log_softmax"}) {
    const std::string m = message_of<ShapeError>([&] {
      std::string(op) == "softmax" ? softmax(zeros({2, 3}), 5) : log_softmax(zeros({2, 3}), -3);
    });
    CHECK_THAT(m, Contains(std::string(op) + ": dim") && Contains("[2, 3]") && Contains("-2 to 1"));
  }
}

TEST_CASE("bad operator arguments", "[errors]") {
  CHECK_THROWS_AS(conv2d(zeros({1, 1, 4, 4}), zeros({1, 1, 3, 3}), 0), ShapeError);
  CHECK_THROWS_AS(max_pool2d(zeros({1, 1, 4, 4}), 2, 2, 3), ShapeError);
  CHECK_THROWS_AS(arange(-1), ShapeError);
  CHECK_THROWS_AS(rand({2}, 0, DType::Int32), DTypeError);
  CHECK_THROWS_AS(reindex_reduce(zeros({2}), ReduceOp::Mean, {2}, {"i0"}), Error);
}

TEST_CASE("a missing compiler is a CompileError naming the command", "[errors][compiler]") {
  metajit_test::TempDir cache;
  metajit_test::ScopedEnv dir("METAJIT_CACHE_DIR", cache.path().string());
  metajit_test::ScopedEnv cxx("METAJIT_CXX", "/nonexistent/metajit-no-such-cc");
  Var y = exp(arange(5, DType::Float32)) * 3.0;
  CHECK_THAT(message_of<CompileError>([&] { eval({y}); }), Contains("metajit-no-such-cc"));
  CacheStore store(cache.path());
  CHECK(store.list().empty());
}

namespace {
// A fake compiler at `path`: answers the identity queries (--version, -E) like g++, then runs
// `compile` (shell) for every compilation.
std::filesystem::path fake_compiler(const std::filesystem::path& path, const std::string& compile) {
  {
    std::ofstream f(path);
    f << "#!/bin/sh\n"
         "for a in \"$@\"; do case \"$a\" in --version) exec g++ --version;; -E) exec g++ \"$@\";; "
         "esac; done\n"
      << compile;
  }
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}
}  // namespace

TEST_CASE("a compiler that fails is a CompileError with command, output and kept source",
          "[errors][compiler]") {
  metajit_test::TempDir cache;
  // Fails every compilation.
  const std::filesystem::path fake = fake_compiler(
      cache.path() / "fake-cc", "echo 'fake-cc: error: refusing to compile' >&2\nexit 3\n");
  metajit_test::ScopedEnv dir("METAJIT_CACHE_DIR", (cache.path() / "c").string());
  metajit_test::ScopedEnv cxx("METAJIT_CXX", fake.string());
  Var y = tanh(arange(7, DType::Float32)) - 0.5;
  try {
    eval({y});
    FAIL("expected CompileError");
  } catch (const CompileError& e) {
    CHECK_THAT(std::string(e.what()), Contains("fake-cc") && Contains("exit status 3"));
    CHECK_THAT(e.command(), Contains("fake-cc") && Contains("kernel.cc"));
    CHECK_THAT(e.output(), Contains("refusing to compile"));
    CHECK(std::filesystem::exists(e.source_path()));
  }
  CacheStore store(cache.path() / "c");
  CHECK(store.list().empty());  // nothing installed
}

TEST_CASE("a compiler that exits 0 without a shared object is a CompileError",
          "[errors][compiler]") {
  metajit_test::TempDir cache;
  // Writes an empty output file (the argument after -o) and reports success.
  const std::filesystem::path fake =
      fake_compiler(cache.path() / "empty-cc",
                    "out=; prev=; for a in \"$@\"; do [ \"$prev\" = -o ] && out=$a; prev=$a; done\n"
                    ": > \"$out\"\nexit 0\n");
  metajit_test::ScopedEnv dir("METAJIT_CACHE_DIR", (cache.path() / "c").string());
  metajit_test::ScopedEnv cxx("METAJIT_CXX", fake.string());
  Var y = tanh(arange(9, DType::Float32)) - 0.25;
  try {
    eval({y});
    FAIL("expected CompileError");
  } catch (const CompileError& e) {
    CHECK_THAT(std::string(e.what()), Contains("exited 0") && Contains("empty kernel.so"));
    CHECK_THAT(e.command(), Contains("empty-cc"));
    CHECK(std::filesystem::exists(e.source_path()));
  }
  CHECK(CacheStore(cache.path() / "c").list().empty());
}

namespace {
// Compiles `source` into a shared object in `dir` with the g++ on PATH.
std::filesystem::path shared_object(const std::filesystem::path& dir, const std::string& source) {
  const std::filesystem::path src = dir / "lib.cc", so = dir / "lib.so";
  std::ofstream(src) << source;
  const std::string cmd =
      "g++ -std=c++17 -shared -fPIC -o '" + so.string() + "' '" + src.string() + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  return so;
}
}  // namespace

TEST_CASE(
    "an emulated kernel library gets the scheduler when loaded, or is refused for another "
    "version of it",
    "[errors][cuda-emulation]") {
  metajit_test::TempDir dir;
  // Binds like codegen/cuda_emulation_prelude.h; the kernel reports the version it was handed.
  const std::string kernel = R"(
unsigned g_version = 0;
extern "C" int metajit_emulation_bind(const unsigned* runtime) {
  if (!runtime) return 0;
  g_version = *runtime;  // mjemu_runtime begins with its version
  return ACCEPT;
}
extern "C" void metajit_kernel(void* const* b, const long long*, const double*) {
  *static_cast<unsigned*>(b[0]) = g_version;
}
)";
  std::filesystem::create_directories(dir.path() / "ok");
  const KernelFn fn = load_kernel(shared_object(dir.path() / "ok", "#define ACCEPT 1\n" + kernel));
  unsigned version = 0;
  void* buffers[] = {&version};
  fn(buffers, nullptr, nullptr);
  CHECK(version == MJEMU_ABI_VERSION);

  std::filesystem::create_directories(dir.path() / "old");
  const std::filesystem::path old =
      shared_object(dir.path() / "old", "#define ACCEPT 0\n" + kernel);
  const std::string m = message_of<Error>([&] { load_kernel(old); });
  CHECK_THAT(m, Contains(old.string()) && Contains("another version of the CUDA host emulation") &&
                    Contains("version " + std::to_string(MJEMU_ABI_VERSION)));
}

// Internal invariants (base/check.h) throw InternalError, an Error a program can catch, naming
// the check and its place in the source tree; before, they were std::logic_error or an Error
// indistinguishable from bad input.
TEST_CASE("a failed internal invariant is an InternalError naming the check and its place",
          "[errors]") {
  const std::string m = message_of<InternalError>([] { METAJIT_CHECK(1 + 1 == 3, "arithmetic"); });
  CHECK_THAT(m, Contains("a bug; please report it") && Contains("arithmetic") &&
                    Contains("`1 + 1 == 3`") && Contains(" tests/test_errors.cc:"));
  // One of the library's own: an index expression still holding an extent leaf, evaluated.
  const IndexExprPtr e = ix_binary(IxKind::Add, ix_var(0), ix_extent(1));
  const int64_t vars[] = {3};
  const std::string u = message_of<InternalError>([&] { ix_eval(*e, vars); });
  CHECK_THAT(u, Contains("extent leaf not replaced") && Contains("meta_ops/index_expr.cc:") &&
                    !Contains("/meta_ops/index_expr.cc"));
  CHECK_THROWS_AS(METAJIT_UNREACHABLE("here"), Error);
}
