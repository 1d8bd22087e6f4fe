// Schedules follow the target the kernel is compiled for (codegen/cpu_target.h): every vector
// width is forced through METAJIT_CXXFLAGS whatever this machine is, and checked. Widths this
// CPU can run are run against the reference interpreter at awkward sizes; the others are
// compiled (so their source is at least valid for the compiler: a real, partial check) and a
// warning names them as checked by compiling only.
#include <dlfcn.h>
#include <metajit/metajit.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>

#include "base/checksum.h"
#include "base/config.h"
#include "cache/cache_store.h"
#include "codegen/cpp_emitter.h"
#include "codegen/cpu_schedule.h"
#include "codegen/cpu_target.h"
#include "codegen/kernel_key.h"
#include "codegen/pipeline.h"
#include "runtime/compiler_driver.h"
#include "runtime/toolchain.h"
#include "support/files.h"
#include "support/processes.h"
#include "support/reference_check.h"
#include "support/scoped_env.h"
#include "support/shared_object.h"
#include "support/skip.h"
#include "support/text.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::ScopedEnv;
using metajit_test::TempDir;

namespace {

struct Width {
  CpuIsa isa;
  int floats;         // floats per vector
  const char* flags;  // METAJIT_CXXFLAGS that select it
  bool runs;          // this CPU executes it
};

std::vector<Width> widths() {
  __builtin_cpu_init();
  return {{CpuIsa::Portable, 4, "-march=x86-64", true},
          {CpuIsa::Avx2, 8, "-march=x86-64-v3",
           __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")},
          {CpuIsa::Avx512, 16, "-march=x86-64-v4", __builtin_cpu_supports("avx512f") != 0}};
}

// Compiles `vars`' kernels with the current toolchain without running them.
void compile_only(const std::vector<Var>& vars) {
  TempDir dir;
  int n = 0;
  for (const KernelInfo& k : plan(vars)) {
    const std::filesystem::path src = dir.path() / ("k" + std::to_string(n) + ".cc");
    const std::filesystem::path so = dir.path() / ("k" + std::to_string(n++) + ".so");
    FILE* f = std::fopen(src.c_str(), "w");
    REQUIRE(f);
    std::fputs(k.source.c_str(), f);
    std::fclose(f);
    CompileOutcome r = run_compiler(host_toolchain().compile_command(src, so), 300);
    INFO(r.command << "\n" << r.output);
    CHECK(r.ok);
  }
}

// The matrix products of the schedule: odd sizes, more rows / columns / reduction steps than
// one block of any target, an epilogue, a transposed (strided) operand, broadcast batches,
// an operand shared by the batch (packed once), conv2d with stride, padding and dilation.
// Operands of dtype `t`.
std::vector<std::vector<Var>> contraction_cases(DType t = DType::Float32) {
  std::vector<std::vector<Var>> out;
  uint64_t seed = 1;
  auto r = [&](Shape s) { return cast(rand(s, seed++) - 0.5, t); };
  for (int64_t n : {1, 7, 17, 63, 65, 129})
    for (int64_t m : {1, 7, 17, 63, 65, 129})
      for (int64_t k : {1, 7, 17, 63, 65, 129})
        out.push_back({relu(matmul(r({n, k}), r({k, m})) + 0.25)});
  out.push_back({matmul(r({150, 300}), r({300, 530}))});  // > mc rows, > kc steps, > nc columns
  out.push_back({matmul(transpose(r({65, 17}), {1, 0}), r({65, 33}))});
  out.push_back({matmul(r({3, 1, 17, 9}), r({2, 9, 33}))});  // batch broadcasting
  out.push_back({matmul(r({5, 63, 17}), r({17, 65}))});      // B shared by the batch
  out.push_back({matmul(r({65, 17}), r({4, 17, 7}))});       // A shared by the batch
  // Either side of the column count where AVX-512 switches to its wide tile (cpp_contraction.cc).
  out.push_back({matmul(r({7, 9}), r({9, 255}))});
  out.push_back({matmul(r({7, 9}), r({9, 256}))});
  for (int64_t hw : {1, 7, 17, 33})
    for (int64_t o : {1, 9, 17}) {
      Var x = r({2, 3, hw, hw}), w = r({o, 3, 3, 3});
      out.push_back({conv2d(x, w, 1, 1), conv2d(x, w, 2, 1)});
    }
  Var x = r({2, 5, 19, 13}), w = r({7, 5, 3, 3});
  out.push_back({conv2d(x, w, 1, 2, 2), conv2d(x, w, 2, 0, 1)});
  // Columns over two output loops with B packed once: out[i,p,q] = sum_k A[i,k] * B[k,p,q].
  for (int64_t q : {1, 5, 70}) {
    Var a = r({9, 13}), b = r({13, 6, q});
    const Shape s4 = {9, 13, 6, q};
    out.push_back({sum(broadcast_to(a, s4, {2, 3}) * broadcast_to(b, s4, {0}), {1})});
  }
  return out;
}

}  // namespace

TEST_CASE("the target's ISA comes from the full flag list", "[targets]") {
  for (const Width& w : widths()) {
    ScopedEnv flags("METAJIT_CXXFLAGS", w.flags);
    const Toolchain& tc = host_toolchain();
    INFO(w.flags);
    CHECK(tc.target.isa == w.isa);
    CHECK(tc.identity().find(std::string("isa[") +
                             std::to_string(std::string(tc.target.name()).size()) +
                             "]=" + tc.target.name()) != std::string::npos);
  }
}

TEST_CASE("contraction schedules of every width at awkward sizes",
          "[targets][matmul][conv][slow]") {
  for (const Width& w : widths()) {
    ScopedEnv flags("METAJIT_CXXFLAGS", w.flags);
    const std::string name = CpuTarget{w.isa}.name();
    INFO("target " << name << " (" << w.flags << ")");
    const std::vector<std::vector<Var>> cases = contraction_cases();
    for (size_t c = 0; c < cases.size(); ++c) {
      INFO("case " << c);
      const std::vector<KernelInfo> k = plan(cases[c]);
      REQUIRE(!k.empty());
      CHECK(k.back().source.find("// target: " + name) != std::string::npos);
      CHECK(k.back().source.find("mj_micro(") != std::string::npos);
      // AVX-512 has a second, narrow tile for few columns, chosen at run time.
      CHECK((k.back().source.find("mj_micro_narrow(") != std::string::npos) ==
            (w.isa == CpuIsa::Avx512));
    }
    // The last cases take the two-loop column path with B packed once; conv2d takes it too.
    const std::string merged = plan(cases.back()).back().source;
    CHECK_THAT(merged, Catch::Contains("B packed once per launch; columns span two output loops"));
    CHECK_THAT(plan(cases[cases.size() - 5]).back().source,
               Catch::Contains("columns span two output loops"));
    if (!w.runs) {
      // A partial check, not a skip: the schedule's source is checked above and must compile
      // (asserted in compile_only); its values cannot be checked without a CPU that runs it.
      WARN("target " << name << " (" << w.flags << "): checked by compiling only, values not "
                     << "checked: this CPU cannot run " << name << " code");
      compile_only(cases.front());
      compile_only(cases.back());
      continue;
    }
    for (size_t c = 0; c < cases.size(); ++c) {
      INFO("case " << c);
      check_against_reference(cases[c]);
    }
  }
}

// The target id (kernel keys, the toolchain record): the ISA, then its dot-product features in
// one order; read from the predefined macros, parsed back, anything else refused.
TEST_CASE("target ids name the ISA and its dot-product features, and parse back", "[targets]") {
  const std::string avx512 = "#define __AVX512F__ 1\n#define __AVX2__ 1\n#define __FMA__ 1\n";
  CHECK(cpu_target_from_macros(avx512).id() == "avx512");
  CHECK(cpu_target_from_macros(avx512 + "#define __AVX512BF16__ 1\n").id() == "avx512+bf16");
  CHECK(cpu_target_from_macros(avx512 + "#define __AVX512VNNI__ 1\n").id() == "avx512+vnni");
  CHECK(cpu_target_from_macros(avx512 + "#define __AVX512VNNI__ 1\n#define __AVX512BF16__ 1\n")
            .id() == "avx512+bf16+vnni");
  // Without AVX-512 the features are not used (vdpbf16ps and vpdpbusd here are EVEX forms).
  CHECK(cpu_target_from_macros("#define __AVX2__ 1\n#define __FMA__ 1\n#define __AVX512VNNI__ 1\n")
            .id() == "avx2");
  for (const char* id :
       {"portable", "avx2", "avx512", "avx512+bf16", "avx512+vnni", "avx512+bf16+vnni"}) {
    CpuTarget t;
    INFO(id);
    REQUIRE(parse_cpu_target(id, t));
    CHECK(t.id() == id);
  }
  for (const char* bad : {"", "avx2+bf16", "portable+vnni", "avx512+vnni+bf16", "avx512+bf16+bf16",
                          "avx512+", "avx512+amx", "avx512 +bf16"}) {
    CpuTarget t;
    INFO(bad);
    CHECK_FALSE(parse_cpu_target(bad, t));
  }
  ScopedEnv flags("METAJIT_CXXFLAGS", "-march=x86-64-v4 -mavx512bf16 -mavx512vnni");
  const Toolchain& tc = host_toolchain();
  CHECK(tc.target.id() == "avx512+bf16+vnni");
  CHECK_THAT(tc.identity(), Contains("isa[16]=avx512+bf16+vnni"));
}

// bfloat16 contractions on a target with AVX512_BF16 (ContractionSchedule::bf16_pairs): the
// panels paired in place, vdpbf16ps micro-kernels on both tiles, even reduction blocks, odd
// reductions padded, operands packed once or per block; conv2d and its gradients through the
// packed schedule. Values against the reference interpreter where this CPU runs the code;
// float16 and mixed operands keep float32 panels.
TEST_CASE("bfloat16 contractions multiply pairs with vdpbf16ps where the target has AVX512_BF16",
          "[targets][matmul][conv][precision]") {
  __builtin_cpu_init();
  ScopedEnv flags("METAJIT_CXXFLAGS", "-march=x86-64-v4 -mavx512bf16");
  REQUIRE(host_toolchain().target.id() == "avx512+bf16");
  std::vector<std::vector<Var>> cases = contraction_cases(DType::BFloat16);
  uint64_t seed = 70;
  auto r = [&](Shape s) { return cast(rand(s, seed++) - 0.5, DType::BFloat16); };
  {
    // The reference rounds each product to bfloat16 before it sums (op by op, docs/design.md
    // §3): the weight gradient's reduction is short enough (162 steps) to stay within its
    // tolerance.
    Var x = r({2, 6, 9, 9}), w = r({8, 6, 3, 3}), t = r({2, 8, 9, 9});
    Var a = r({200, 301}), b = r({301, 600});  // both packed once, an odd last block
    eval({x, w, t, a, b});
    cases.push_back(grad(sum(conv2d(x, w, 1, 1) * t), {x, w}));
    cases.push_back({matmul(a, b)});
  }
  for (size_t c = 0; c < cases.size(); ++c) {
    INFO("case " << c);
    const std::string src = plan(cases[c]).back().source;
    CHECK_THAT(src, Contains("bfloat16 pairs multiplied by vdpbf16ps"));
    CHECK_THAT(src, Contains("mj_dpbf16(c"));
  }
  Var h = cast(rand({9, 33}, 1), DType::Float16), b = r({33, 17});
  for (const Var& v : {matmul(h, cast(b, DType::Float16)), matmul(h, b)}) {
    const std::string src = plan({v}).back().source;
    CHECK_THAT(src, Contains("// schedule: contraction"));
    CHECK(src.find("mj_dpbf16(c") == std::string::npos);
  }
  if (!__builtin_cpu_supports("avx512bf16")) {
    WARN(
        "bfloat16 pairs: checked by compiling only, values not checked: this CPU has no "
        "AVX512_BF16");
    compile_only(cases.front());
    compile_only(cases.back());
    return;
  }
  for (size_t c = 0; c < cases.size(); ++c) {
    INFO("case " << c);
    check_against_reference(cases[c]);
  }
  check_against_reference({matmul(r({5, 0}), r({0, 7})) + 1.0, matmul(r({0, 4}), r({4, 3}))});
}

// Int32 sums of 8-bit products (matmul of Int8 / UInt8 operands) on every width: byte quads by
// vpdpbusd with AVX512-VNNI and an Int8 B (ContractionSchedule::int8_quads: an Int8 A shifted
// to unsigned and taken back through B's column sums), int16 pairs by vpmaddwd otherwise on
// AVX2 and AVX-512 (int16_pairs), the plain loop nest on the portable target. Groups made in
// place, reduction blocks of whole groups, reductions that are no multiple of the group padded,
// operands packed once or per block, an epilogue (a dequantising scale), extremes. Exact
// against the reference interpreter on every width this CPU runs; compiled otherwise.
TEST_CASE("8-bit matmuls: byte quads with VNNI, int16 pairs on AVX2 and AVX-512, exact",
          "[targets][matmul][precision]") {
  __builtin_cpu_init();
  struct IntWidth {
    const char* flags;
    const char* id;
    bool runs;
    const char* signed_b;    // the schedule of an Int8 B
    const char* unsigned_b;  // ... of a UInt8 B
  };
  const char* quads = "byte quads multiplied by vpdpbusd";
  const char* pairs = "int16 pairs multiplied by vpmaddwd";
  const std::vector<IntWidth> widths = {
      {"-march=x86-64", "portable", true, nullptr, nullptr},
      {"-march=x86-64-v3", "avx2", __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
       pairs, pairs},
      {"-march=x86-64-v4", "avx512", __builtin_cpu_supports("avx512bw") != 0, pairs, pairs},
      {"-march=x86-64-v4 -mavx512vnni", "avx512+vnni",
       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni"), quads, pairs}};
  uint64_t seed = 90;
  // Evaluated: fused into the product, rand * 255 - 128 computes in float32 where the reference
  // computes in double, and a value on a boundary truncates to a neighbour.
  auto values = [&](Shape s, double scale, double shift, DType t) {
    Var v = cast(rand(s, seed++) * scale + shift, t);
    eval({v});
    return v;
  };
  auto s8 = [&](Shape s) { return values(s, 255.0, -128.0, DType::Int8); };
  auto u8 = [&](Shape s) { return values(s, 256.0, 0.0, DType::UInt8); };
  // The operands, evaluated once; the products built again for each width (a product
  // evaluated on one width would not be planned again on the next).
  std::vector<std::pair<Var, Var>> signed_ops, unsigned_ops;
  for (int64_t n : {1, 7, 65})
    for (int64_t m : {1, 17, 129})
      for (int64_t k : {1, 3, 5, 63, 129}) {
        signed_ops.push_back({s8({n, k}), s8({k, m})});
        signed_ops.push_back({u8({n, k}), s8({k, m})});
        unsigned_ops.push_back({s8({n, k}), u8({k, m})});
        unsigned_ops.push_back({u8({n, k}), u8({k, m})});
      }
  Var a = s8({100, 1031}), b = s8({1031, 530}), ua = u8({100, 1031}), ub = u8({1031, 530});
  Var lo = full({7, 1030}, -128.0, DType::Int8), hi = full({1030, 40}, 127.0, DType::Int8);
  Var top = full({1030, 40}, 255.0, DType::UInt8);
  Var x = s8({3, 17, 9}), y = s8({3, 9, 33}), p = s8({9, 40}), q = s8({40, 70});
  eval({a, b, ua, ub, lo, hi, top});
  auto products = [&](bool signed_b) {
    std::vector<std::vector<Var>> out;
    for (const auto& [l, r] : signed_b ? signed_ops : unsigned_ops)
      out.push_back({matmul(l, r) + 5.0});
    if (signed_b) {
      out.push_back({matmul(a, b), matmul(ua, b)});  // packed once, several blocks, a short last
      out.push_back({matmul(lo, hi), matmul(lo, transpose(lo, {1, 0}))});  // extremes
      out.push_back({matmul(x, y)});                                       // batched
      out.push_back({cast(matmul(p, q), DType::Float32) * 0.01});          // dequantised
    } else {
      out.push_back({matmul(a, ub), matmul(ua, ub), matmul(lo, top)});
    }
    return out;
  };
  for (const IntWidth& w : widths) {
    ScopedEnv flags("METAJIT_CXXFLAGS", w.flags);
    INFO(w.flags);
    REQUIRE(host_toolchain().target.id() == w.id);
    const std::vector<std::vector<Var>> signed_b = products(true), unsigned_b = products(false);
    for (auto [cases, schedule] : {std::pair{&signed_b, w.signed_b}, {&unsigned_b, w.unsigned_b}})
      for (size_t c = 0; c < cases->size(); ++c) {
        INFO("case " << c);
        const std::vector<KernelInfo> k = plan((*cases)[c]);
        REQUIRE(!k.empty());
        if (schedule)
          CHECK_THAT(k.back().source, Contains(schedule));
        else
          CHECK(k.back().source.find("// schedule: contraction") == std::string::npos);
      }
    if (!w.runs) {
      WARN(w.flags << ": 8-bit matmuls checked by compiling only, values not checked: this CPU "
                   << "cannot run the code");
      compile_only(signed_b.front());
      compile_only(unsigned_b.back());
      continue;
    }
    for (const auto* cases : {&signed_b, &unsigned_b})
      for (size_t c = 0; c < cases->size(); ++c) {
        INFO("case " << c);
        check_against_reference((*cases)[c]);
      }
    // Empty reductions and products.
    check_against_reference({matmul(s8({5, 0}), s8({0, 7})) + 1.0, matmul(s8({0, 4}), s8({4, 3})),
                             matmul(u8({5, 0}), u8({0, 7}))});
  }
}

// Merged columns of short rows pack a panel at a time through column tables where the loads
// are contiguous along the columns (CppEmitter::pack_merged_flat), else row piece by row piece:
// both sides of each run-time condition, on every width, against the reference interpreter.
TEST_CASE("short merged rows pack by column tables where contiguous, else by row pieces",
          "[targets][conv]") {
  uint64_t seed = 40;
  auto r = [&](Shape s) { return rand(s, seed++) - 0.5; };
  Var x4 = r({3, 2, 4, 4}), w4 = r({5, 2, 3, 3}), x8 = r({2, 3, 8, 8}), w8 = r({4, 3, 3, 3});
  Var x20 = r({2, 2, 20, 20}), w20 = r({3, 2, 3, 3});
  eval({x4, w4, x8, w8, x20, w20});
  for (const Width& w : widths()) {
    ScopedEnv flags("METAJIT_CXXFLAGS", w.flags);
    INFO(w.flags);
    const std::vector<Var> cases = {
        conv2d(x4, w4, 1, 1),                                             // 4-column rows
        grad(sum(conv2d(x4, w4, 1, 1) * conv2d(x4, w4, 1, 1)), {x4})[0],  // transposed
        conv2d(x8, w8, 1, 1) + 0.5,                                       // 8-column rows
        conv2d(x8, w8, 2, 1),    // stride 2: not contiguous, row pieces
        conv2d(x4, w4, 1, 0),    // 2-column rows read from rows of 4: row pieces
        conv2d(x20, w20, 1, 1),  // 20-column rows: row pieces
        grad(sum(conv2d(x8, w8, 1, 1) * conv2d(x8, w8, 1, 1)), {w8})[0]};
    const std::vector<KernelInfo> first = plan({cases[0]});
    REQUIRE(!first.empty());
    CHECK_THAT(first.back().source, Catch::Contains("mj_cv"));
    if (!w.runs) {
      WARN("target " << CpuTarget{w.isa}.name() << ": checked by compiling only, values not "
                     << "checked: this CPU cannot run its code");
      compile_only({cases[0], cases[1]});
      continue;
    }
    for (size_t c = 0; c < cases.size(); ++c) {
      INFO("case " << c);
      check_against_reference(cases[c]);
    }
  }
}

// The direct tiles (ContractionSchedule::direct and direct_steps, codegen/cpp_direct_columns.cc):
// a convolution's B read from a table of its input over the windows. Each case runs it at run time
// (rows of 14 and more for 3 columns of kernel, 256 columns and more or nearly whole panels),
// against the reference interpreter on every width: padding 0, 1 and 2, kernels 3x3, 5x5, 1x3
// and 3x1, channels that fill no tile, an element-wise producer inside B, a bias after, the
// transposed convolution of the input's gradient (B reads row - tap), and rows too short for it
// (the packed tile), strides of 2, weight gradients (B packed once for every tap).
TEST_CASE("convolutions read B from a table of the input's windows on every width",
          "[targets][conv]") {
  uint64_t seed = 60;
  auto r = [&](Shape s) { return rand(s, seed++) - 0.5; };
  Var x = r({2, 5, 16, 16}), w3 = r({7, 5, 3, 3}), x40 = r({1, 2, 40, 40}), w5 = r({3, 2, 5, 5});
  Var w13 = r({4, 5, 1, 3}), w31 = r({4, 5, 3, 1}), bias = r({1, 7, 1, 1}), x8 = r({2, 5, 8, 8});
  // Weight gradients over 64 input channels (the wide tile): B packed once for every tap.
  Var x64 = r({2, 64, 12, 12}), w8 = r({8, 64, 3, 3}), g12 = r({2, 8, 12, 12}),
      g10 = r({2, 8, 10, 10}), wt = r({64, 8, 3, 3});
  // Strided: a plane per phase of the taps.
  Var x32 = r({2, 5, 32, 32}), x48 = r({1, 3, 48, 48}), w7 = r({8, 3, 7, 7}), w1 = r({8, 64, 1, 1});
  eval({x, w3, x40, w5, w13, w31, bias, x8, x64, w8, g12, g10, wt, x32, x48, w7, w1});
  for (const Width& w : widths()) {
    ScopedEnv flags("METAJIT_CXXFLAGS", w.flags);
    INFO(w.flags);
    const std::vector<Var> cases = {
        conv2d(x, w3, 1, 1),                     // 0: rows of 16 (widened to 18)
        conv2d(x, w3, 1, 0),                     // 1: rows of 14, 196 columns
        conv2d(x40, w5, 1, 2),                   // 2: 5x5, padding 2
        conv2d(x, w13, 1, 1),                    // 3: 1x3 (rows 18 wide)
        conv2d(x, w31, 1, 1),                    // 4: 3x1
        conv2d(relu(x - 0.1), w3, 1, 1) + bias,  // 5: producer and epilogue
        grad(sum(conv2d(x, w3, 1, 1) * conv2d(x, w3, 1, 1)), {x})[0],  // 6: transposed
        conv2d(x8, w3, 1, 1),                                          // 7: rows of 8: packed
        grad(sum(conv2d(x64, w8, 1, 1) * g12), {w8})[0],               // 8: step + tap
        grad(sum(conv2d(x64, w8, 1, 0) * g10), {w8})[0],               // 9: no padding
        grad(sum(conv_transpose2d(x64, wt, 1, 1) * g12), {wt})[0],     // 10
        conv2d(x32, w3, 2, 1),                                         // 11: stride 2, padding 1
        conv2d(x32, w3, 2, 0),                                         // 12: stride 2, no padding
        conv2d(x48, w7, 2, 3),                                         // 13: a 7x7 stride-2 stem
        grad(sum(conv2d(x64, w1, 1, 0) * g12), {w1})[0]};              // 14: one tap
    const std::vector<KernelInfo> first = plan({cases[0]});
    REQUIRE(!first.empty());
    CHECK_THAT(first.back().source, Catch::Contains("mj_micro_direct"));
    const std::vector<KernelInfo> steps = plan({cases[8]});
    CHECK(std::any_of(steps.begin(), steps.end(), [](const KernelInfo& k) {
      return k.source.find("mj_goff") != std::string::npos;
    }));
    if (!w.runs) {
      WARN("target " << CpuTarget{w.isa}.name() << ": checked by compiling only, values not "
                     << "checked: this CPU cannot run its code");
      compile_only({cases[0], cases[6]});
      continue;
    }
    for (size_t c = 0; c < cases.size(); ++c) {
      INFO("case " << c);
      check_against_reference(cases[c]);
    }
  }
}

TEST_CASE("explain() and the kernel source name the schedule chosen", "[targets]") {
  Var a = rand({40, 30}, 1), b = rand({30, 20}, 2);
  const std::string text = explain({matmul(a, b)});
  CHECK_THAT(text, Catch::Contains("target: " + std::string(host_toolchain().target.name())));
  CHECK_THAT(text, Catch::Contains("schedule: contraction"));
  CHECK_THAT(plan({matmul(a, b)}).back().source, Catch::Contains("// schedule: contraction"));
  // The target once, however many kernels (issue 26: it was repeated on every kernel).
  const std::string two = explain({matmul(a, b), sum(exp(a), {1})});
  INFO(two);
  REQUIRE(plan({matmul(a, b), sum(exp(a), {1})}).size() >= 2);
  size_t targets = 0;
  for (size_t at = two.find("target: "); at != std::string::npos; at = two.find("target: ", at + 1))
    ++targets;
  CHECK(targets == 1);
}

// Skips the test where objdump (binutils) is missing.
void require_objdump() {
  if (metajit_test::run_command("objdump --version").exit_code != 0)
    metajit_test::skip_test("objdump (binutils) not found: the object code cannot be inspected");
}

// `so` disassembled by objdump ("" where objdump fails).
std::string disassembly(const std::filesystem::path& so) {
  const metajit_test::ProcessResult d = metajit_test::run_command("objdump -d " + so.string());
  return d.exit_code == 0 ? d.output : "";
}

// `source` compiled with the current toolchain, disassembled by objdump ("" where objdump fails).
std::string object_code(const std::string& source) {
  TempDir dir;
  const std::filesystem::path src = dir.path() / "k.cc", so = dir.path() / "k.so";
  FILE* f = std::fopen(src.c_str(), "w");
  REQUIRE(f);
  std::fputs(source.c_str(), f);
  std::fclose(f);
  REQUIRE(run_compiler(host_toolchain().compile_command(src, so), 300).ok);
  return disassembly(so);
}

// GCC's tree-sink pass would move SELU's exp into the branch of the where that uses it, and
// the loop would go scalar (toolchain.cc). The float32 exp is the prelude's own polynomial
// (mj_expf in codegen/cpp_kernel_prelude.h), so on every vector width the loop must evaluate it
// with vector FMAs of the width's registers and call no exp at all (not libm's expf, not
// libmvec's _ZGV..._expf).
TEST_CASE("SELU's exp is computed in vector registers on every vector width", "[targets][math]") {
  require_objdump();
  for (const Width& w : widths()) {
    if (w.isa == CpuIsa::Portable)
      continue;  // SSE2: glibc has vector variants, but keep to
                 // both vector widths and the portable path
    ScopedEnv flags("METAJIT_CXXFLAGS", w.flags);
    INFO(w.flags);
    Var x = randn({1000}, 3);
    Var y = 1.05 * where(x > 0.0, x, 1.67 * exp(x) - 1.67);
    const std::vector<KernelInfo> k = plan({y});
    REQUIRE(k.size() == 1);
    if (w.runs) check_against_reference({y});
    const std::string d =
        w.runs ? disassembly(CacheStore(config().cache_dir).entry_dir(k[0].key) / "kernel.so")
               : object_code(k[0].source);
    REQUIRE(!d.empty());
    const std::string reg = w.isa == CpuIsa::Avx512 ? "%zmm" : "%ymm";
    const std::regex vector_fma("vfn?m(add|sub)[0-9]+ps");
    int vector_fmas = 0, exp_calls = 0;
    std::istringstream lines(d);
    for (std::string l; std::getline(lines, l);) {
      if (std::regex_search(l, vector_fma) && l.find(reg) != std::string::npos) ++vector_fmas;
      if (l.find("call") != std::string::npos && l.find("exp") != std::string::npos) ++exp_calls;
    }
    INFO(d);
    CHECK(exp_calls == 0);
    // The range reduction (2) and the polynomial (5) are FMAs on every target with FMA.
    CHECK(vector_fmas >= 7);
  }
}

// Half-precision loads and stores are vector code (docs/design.md §3): a bfloat16 SELU's
// object code has vector shifts on the target's registers (codegen/cpp_narrow_prelude.h's
// element conversions), a float16 one F16C's vcvtph2ps and vcvtps2ph on them (its strips,
// codegen/half_strips.h), and neither calls anything per element.
TEST_CASE("half-precision conversions are vector code on every vector width",
          "[targets][precision]") {
  require_objdump();
  for (const Width& w : widths()) {
    if (w.isa == CpuIsa::Portable) continue;
    for (DType t : {DType::Float16, DType::BFloat16}) {
      ScopedEnv flags("METAJIT_CXXFLAGS", w.flags);
      INFO(w.flags << " " << dtype_name(t));
      Var x = cast(randn({1000}, 3), t);
      eval({x});
      Var y = 1.05 * where(x > 0.0, x, 1.67 * exp(x) - 1.67);
      const std::vector<KernelInfo> k = plan({y});
      REQUIRE(k.size() == 1);
      const std::string d = object_code(k[0].source);
      REQUIRE(!d.empty());
      const std::string reg = w.isa == CpuIsa::Avx512 ? "%zmm" : "%ymm";
      const std::regex vector_shift("vps(ll|rl)d ");
      int vector_shifts = 0, calls = 0, widens = 0, narrows = 0;
      std::istringstream lines(d);
      for (std::string l; std::getline(lines, l);) {
        if (std::regex_search(l, vector_shift) && l.find(reg) != std::string::npos) ++vector_shifts;
        if (l.find("vcvtph2ps ") != std::string::npos && l.find(reg) != std::string::npos) ++widens;
        if (l.find("vcvtps2ph ") != std::string::npos && l.find(reg) != std::string::npos)
          ++narrows;
        if (l.find("call") != std::string::npos && l.find("GOMP") == std::string::npos &&
            l.find("omp_") == std::string::npos && l.find("__cxa_finalize") == std::string::npos &&
            l.find("tm_clones") == std::string::npos && l.find("*%rax") == std::string::npos)
          ++calls;
      }
      INFO(d);
      CHECK(calls == 0);
      if (t == DType::BFloat16) {
        CHECK(vector_shifts >= 2);  // the load's widening shift and the store's narrowing one
      } else {
        // Float16 strips (codegen/half_strips.h): F16C's conversions, a full vector at a time.
        CHECK(widens >= 1);
        CHECK(narrows >= 1);
      }
    }
  }
}

// A float16 element read under a guard (a padded window: the padding is the fill value) widens
// through integer arithmetic and one float multiply (a subnormal's value, mj_f16_to_float in
// codegen/cpp_narrow_prelude.h). With g++'s default -ftrapping-math the multiply may not run in
// the lanes the guard excludes, so the loop stayed scalar: a float16 convolution's packing of its
// padded 7x7 images ran one element at a time (the digits CNN, 252 against bfloat16's 128 us a
// call). The kernels are compiled with -fno-trapping-math (runtime/toolchain.cc): on AVX-512
// the padded read's widening is vector code (the int -> float of the subnormal path, vcvtdq2ps
// on zmm registers, where the scalar loop had vcvtsi2ss alone). Not on AVX2: it has no masked
// 16-bit load (vpmaskmov moves 32- and 64-bit lanes), and that loop stays scalar.
TEST_CASE("a float16 read under a padding guard is vector code on AVX-512",
          "[targets][precision]") {
  require_objdump();
  for (const Width& w : widths()) {
    if (w.isa != CpuIsa::Avx512) continue;
    ScopedEnv flags("METAJIT_CXXFLAGS", w.flags);
    INFO(w.flags);
    Var x = cast(randn({3, 50, 70}, 5), DType::Float16);
    eval({x});
    Var y = reindex(x, {3, 52, 72}, {"i0", "i1-1", "i2-1"}, 0.5) * 3.0;
    const std::vector<KernelInfo> k = plan({y});
    REQUIRE(k.size() == 1);
    INFO(k[0].source);
    if (w.runs) check_against_reference({y});
    const std::string d = object_code(k[0].source);
    REQUIRE(!d.empty());
    const std::string reg = w.isa == CpuIsa::Avx512 ? "%zmm" : "%ymm";
    int vector_converts = 0;
    std::istringstream lines(d);
    for (std::string l; std::getline(lines, l);)
      if (l.find("vcvtdq2ps") != std::string::npos && l.find(reg) != std::string::npos)
        ++vector_converts;
    INFO(d);
    CHECK(vector_converts >= 1);
  }
}

// The step-grouped micro-kernels' object code (codegen/cpp_step_groups.cc), compiled for
// AVX-512 with AVX512_BF16 and AVX512-VNNI whatever this CPU is: a bfloat16 matmul multiplies
// with vdpbf16ps and an Int8 one with vpdpbusd, on zmm registers, at least a 6x64 tile's 24 per
// loop, and no zmm register goes to the stack beside them (the first version's inline assembly,
// unrolled, spilled half the accumulators: 1.29x float32's speed where rolled it ran 1.67x).
TEST_CASE(
    "bfloat16 pairs and byte quads compile to vdpbf16ps and vpdpbusd, accumulators in "
    "registers",
    "[targets][precision]") {
  require_objdump();
  ScopedEnv flags("METAJIT_CXXFLAGS", "-march=x86-64-v4 -mavx512bf16 -mavx512vnni");
  Var a = rand({70, 90}, 1), b = rand({90, 300}, 2);
  eval({a, b});
  const std::vector<std::pair<Var, std::string>> cases = {
      {matmul(cast(a, DType::BFloat16), cast(b, DType::BFloat16)), "vdpbf16ps"},
      {matmul(cast(a * 100.0, DType::Int8), cast(b * 100.0, DType::Int8)), "vpdpbusd"}};
  for (const auto& [v, op] : cases) {
    INFO(op);
    const std::vector<KernelInfo> k = plan({v});
    REQUIRE(!k.empty());
    const std::string d = object_code(k.back().source);
    REQUIRE(!d.empty());
    std::vector<std::string> lines;
    std::istringstream in(d);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    int products = 0, spills = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].find(op + " ") == std::string::npos ||
          lines[i].find("%zmm") == std::string::npos)
        continue;
      ++products;
      for (size_t j = i >= 3 ? i - 3 : 0; j < std::min(lines.size(), i + 4); ++j)
        if (lines[j].find("%zmm") != std::string::npos &&
            (lines[j].find("(%rsp)") != std::string::npos ||
             lines[j].find("(%rbp)") != std::string::npos))
          ++spills;
    }
    INFO(d);
    CHECK(products >= 24 + 6);  // the 6x64 loop's 24 and the 6x16 loop's 6
    CHECK(spills == 0);
  }
}

// Kernel keys do not hash the source (docs/design.md §5): a change to what the C++ emitter writes
// must come with a new kCodegenVersion, or caches keep serving kernels built from the old
// source (tests included). This digest of the emitter's output for a fixed set of graphs, on
// every target, is recorded next to the version it belongs to; when the output changes, bump
// kCodegenVersion in codegen/kernel_key.h and record the new pair here. When it changes because
// an op builds a different graph (the keys, which hash the graph, change with it), only the
// digest is recorded again: gather, index_select, embedding and one_hot counting a negative
// index from the end changed their index expressions under cpp-26; lowering one keepdims
// reduction once per row (codegen/lowering.cc memo_key) changed softmax's IR under cpp-28.
// Graphs added change only the digest: the half and 8-bit ones came with those dtypes, whose
// kernels no cache held before (cpp-60; the other graphs' output did not change); so do targets
// added: AVX-512 with AVX512_BF16 and VNNI, a target id no key held before (cpp-62). Float16
// strips (codegen/half_strips.h) changed the vector targets' float16 kernels (cpp-63); half
// elements gathered by a flat strip's lanes as 32-bit words, pooling's (cpp-64); Bool, Int8 and
// UInt8 values cast to a half type without a rounding call, exact there (cpp-65); a shifted half
// read (i - 1) read contiguously, not gathered (cpp-66); float16 elements outside SIMD loops
// converted one at a time by F16C (cpp-67).
TEST_CASE("the C++ emitter's output is pinned to the codegen version", "[targets]") {
  ScopedEnv fused("METAJIT_OPT_LEVEL", "1"), generic("METAJIT_SPECIALIZE_SHAPES", "0");
  const char* kRecordedVersion = "cpp-67";
  const char* kRecordedDigest = "a168d102b728d408e4ad9970fb6cd02b";
  Var a = rand({5, 7}, 1), b = rand({7, 3}, 2), x = rand({2, 3, 9, 9}, 3),
      w = rand({4, 3, 3, 3}, 4);
  Var ids = array(std::vector<int32_t>{4, 0, 2, 4}, {4}), rows = rand({4, 7}, 5),
      cols = array(std::vector<int64_t>{6, 0, 1, 2, 3, 4, 5, 6, 0, 1}, {5, 2});
  Var x16 = rand({1, 16, 6, 6}, 8), w16 = rand({16, 16, 3, 3}, 9);
  Var h = rand({5, 7}, 10, DType::Float16), hb = rand({5, 7}, 11, DType::BFloat16);
  eval({a, b, x, w, ids, rows, cols, x16, w16, h, hb});
  const Var nested =
      reindex(reindex(rows, {4, 9}, {"i0", "i1-1"}, 0.5), {4, 7}, {"i0", "i1+1"}, -1.0);
  const std::vector<Var> graphs = {
      relu(matmul(a, b) + 0.5), conv2d(x, w, 1, 1), softmax(a, 1), sum(a, {0}), sum(a, {1}),
      1.05 * where(a > 0.0, a, 1.67 * exp(a) - 1.67), max_pool2d(x, 2, 2, 1),
      // integer arithmetic (wrapping, docs/design.md §3) and sums
      sum(-cast(a * 100.0, DType::Int32) * 3.0, {1}),
      // conv2d's two gradients: a transposed convolution (gather) and columns over 3 loops
      grad(sum(conv2d(x, w, 1, 1)), {x})[0], grad(sum(conv2d(x, w, 1, 1)), {w})[0],
      // scatters (sequential, and split by an independent target loop) and extras reads
      reindex_reduce(a, ReduceOp::Add, {3}, {"i0 % 3"}), embedding(a, ids) * 2.0,
      grad(sum(embedding(a, ids) * rows), {a})[0], gather(a, 1, cols),
      // contraction operands with a prologue: hoisted row values, packed along the reduction
      matmul((a - mean(a, {1}, true)) * 2.0, b), matmul(softmax(a, 1), b),
      // ... and a transcendental one packed across the rows (softmax's P^T in dB = P^T dY)
      grad(sum(matmul(softmax(a, 1), b) * rand({5, 3}, 6)), {b})[0],
      // ... and a gather, packed along the reduction with its column bounds in the loop
      matmul(embedding(a, ids), b),
      // the innermost index divided by a constant: run in chunks (codegen/division_chunks.h)
      reindex(rows, {4, 30}, {"i0", "(i1-8)%8"}, 0.5) * 2.0,
      // ... read only inside a piece's bounds test (a slice's gradient around a head merge)
      reindex(reindex(a, {4, 16}, {"i1/8", "i1%8"}, 0.5), {4, 40}, {"i0", "i1-16"}, 0.0),
      // operands under nested guards, along the reduction and across the rows
      matmul(nested, b), matmul(transpose(nested, {1, 0}), rand({4, 3}, 7)),
      // an unpadded pooling and its gradient: bounds tests proven once per launch, the
      // gradient's i/2 in int (codegen/extra_bounds.h); a bias gradient's coalesced loops
      grad(sum(max_pool2d(relu(x), 2, 2) * 3.0), {x})[0], sum(x, {0, 2, 3}),
      // a weight gradient whose B is packed once over the widened reduction, every tap run
      // inside each reduction block (ContractionSchedule::direct_steps, cpp-60)
      grad(sum(conv2d(x16, w16, 1, 1)), {w16})[0],
      // half and 8-bit values: 16-bit buffers, float32 arithmetic, rounding casts and stores,
      // float32 accumulation, narrow integer casts (codegen/cpp_narrow_prelude.h)
      1.05 * where(h > 0.0, h, 1.67 * exp(h) - 1.67),
      sum(hb * 2.0, {1}) + sum(cast(a, DType::BFloat16), {1}),
      cast(a * 300.0, DType::Int8) + cast(a * 3.0, DType::UInt8), cast(h, DType::Int16) * 3.0,
      // bfloat16 pairs and byte quads where AVX-512 has AVX512_BF16 and VNNI, int16 pairs
      // elsewhere (cpp-62)
      matmul(hb, cast(b, DType::BFloat16)),
      // half elements gathered across SIMD lanes as 32-bit words: a pooling in a flat strip and
      // its gradient's i / 2 reads (cpp-64)
      grad(sum(max_pool2d(relu(cast(x, DType::Float16)), 2, 2) * 3.0), {x})[0],
      // a shifted float16 read under its padding test: contiguous, not a gather (cpp-66)
      reindex(h, {5, 9}, {"i0", "i1-1"}, 0.5) * 3.0,
      matmul(cast(a * 100.0, DType::Int8), cast(b * 100.0, DType::Int8)) + 1.0};
  std::string all;
  for (const Var& g : graphs) {
    PipelinePlan p = build_pipeline({g.node()});
    for (const LoweredKernel& k : p.kernels)
      for (const CpuTarget& t : {CpuTarget{CpuIsa::Portable}, CpuTarget{CpuIsa::Avx2},
                                 CpuTarget{CpuIsa::Avx512}, CpuTarget{CpuIsa::Avx512, true, true}})
        all += emit_cpp(k.ir, t);
  }
  const std::string digest = xxh3_128_hex(all);
  INFO("emitter output digest " << digest << " under " << kCodegenVersion);
  CHECK(std::string(kCodegenVersion) == kRecordedVersion);
  CHECK(digest == kRecordedDigest);
}

namespace {

// The kernels build_pipeline lowers for `outputs` (nothing compiled).
std::vector<KernelIR> lowered(const std::vector<Var>& outputs) {
  std::vector<NodePtr> nodes;
  for (const Var& v : outputs) nodes.push_back(v.node());
  std::vector<KernelIR> out;
  for (const LoweredKernel& k : build_pipeline(nodes).kernels) out.push_back(k.ir);
  return out;
}

// The source's "// schedule: " line, without the tag; empty without one.
std::string schedule_comment(const std::string& src) {
  const size_t at = src.find("// schedule: ");
  if (at == std::string::npos) return {};
  return src.substr(at + 13, src.find('\n', at) - at - 13);
}

}  // namespace

TEST_CASE(
    "the C++ schedule pass decides a contraction's blocking as data, which the source and "
    "explain() print",
    "[targets]") {
  Var a = rand({40, 24}, 1), b = rand({24, 36}, 2), batched = rand({3, 40, 24}, 3);
  Var x = rand({2, 3, 8, 8}, 4), w = rand({5, 3, 3, 3}, 5);
  eval({a, b, batched, x, w});
  const std::vector<KernelIR> mm = lowered({matmul(a, b)});
  const std::vector<KernelIR> bmm = lowered({matmul(batched, b)});
  const std::vector<KernelIR> conv = lowered({conv2d(x, w, 1, 1)});
  const std::vector<KernelIR> map = lowered({exp(a) + 1.0});
  REQUIRE(mm.size() == 1);
  REQUIRE(bmm.size() == 1);
  REQUIRE(conv.size() == 1);
  REQUIRE(map.size() == 1);
  for (CpuIsa isa : {CpuIsa::Portable, CpuIsa::Avx2, CpuIsa::Avx512}) {
    const CpuTarget t{isa};
    INFO(t.name());
    const CpuSchedule s = schedule_cpu_kernel(mm[0], t);
    REQUIRE(s.contraction);
    CHECK(s.contraction->wide == t.contraction_tile());
    CHECK(s.contraction->narrow == t.narrow_contraction_tile());
    CHECK(s.contraction->a_once);  // no batch: both operands serve every block
    CHECK(s.contraction->b_once);
    CHECK(s.contraction->merged_outer_vars.empty());
    CHECK(s.contraction->pack_functions);  // each operand packed by one function
    CHECK_THAT(dump_schedule(s, t), Contains("operands packed by shared functions"));
    CHECK(s.levels.size() == s.ir.body.stmts.size());
    // A batched A changes with the batch loop; the shared B does not.
    const CpuSchedule sb = schedule_cpu_kernel(bmm[0], t);
    REQUIRE(sb.contraction);
    CHECK_FALSE(sb.contraction->a_once);
    CHECK(sb.contraction->b_once);
    // conv2d: the output row joins the output column as one column dimension.
    const CpuSchedule sc = schedule_cpu_kernel(conv[0], t);
    REQUIRE(sc.contraction);
    CHECK(sc.contraction->merged_outer_vars.size() == 1);
    CHECK_FALSE(sc.contraction->pack_functions);  // merged columns pack in place
    CHECK_THAT(describe_schedule(sc, t), Contains("columns span two output loops"));
    // ... and its input's loads are affine in both: short rows may pack by column tables.
    CHECK(sc.contraction->flat_columns);
    CHECK_FALSE(s.contraction->flat_columns);
    CHECK_THAT(dump_schedule(sc, t),
               Contains("short merged rows packed by column tables where contiguous"));
    // Stride 1: B reads row + kh and column + kw, so it may come from the window table.
    REQUIRE(sc.contraction->direct);
    CHECK(sc.contraction->direct->row_var == sc.contraction->merged_outer_vars[0]);
    CHECK(sc.contraction->direct->col_var == sc.contraction->match.j_var);
    CHECK_FALSE(sc.contraction->direct->row_flipped);
    CHECK_FALSE(sc.contraction->direct->col_flipped);
    CHECK_THAT(dump_schedule(sc, t), Contains("direct: rows i"));
    CHECK_FALSE(s.contraction->direct);
    CHECK_FALSE(sb.contraction->direct);
    // A plain loop nest has no contraction and no schedule line.
    const CpuSchedule sm = schedule_cpu_kernel(map[0], t);
    CHECK_FALSE(sm.contraction);
    CHECK(describe_schedule(sm, t).empty());
    // The emitter prints the schedule it was given: the same line as the data.
    for (const KernelIR* ir : {&mm[0], &bmm[0], &conv[0], &map[0]})
      CHECK(schedule_comment(emit_cpp(*ir, t)) ==
            describe_schedule(schedule_cpu_kernel(*ir, t), t));
    CHECK_THAT(dump_schedule(s, t),
               Contains("rows i") && Contains("in loop i") && Contains("reduce.add"));
  }
  // explain() reads the schedule of the machine's target, without generating source.
  const std::string text = explain({matmul(a, b)});
  CHECK_THAT(text, Contains("  schedule: contraction, packed A and B panels, "));
  CHECK_THAT(text, Contains("target: "));
}

// codegen/direct_columns.h: which convolutions may read B from the window table.
TEST_CASE("a contraction's B comes from the window table only where it reads row + tap",
          "[targets][conv]") {
  // shift_invariant: (i2, i5) only as i2 + i5 (or i2 - i5), under any function of that.
  auto parse = [](const char* e) { return parse_index_expr(e, 8, true, "test"); };
  CHECK(shift_invariant(*parse("i2+i5-1"), 2, 5, 1));
  CHECK(shift_invariant(*parse("((i2+i5)>=0)&&((i2+i5-1)<7)"), 2, 5, 1));
  CHECK(shift_invariant(*parse("(i2-i5+3)*4+i3"), 2, 5, -1));
  CHECK(shift_invariant(*parse("(i2+i5)/2+i6"), 2, 5, 1));
  CHECK(shift_invariant(*parse("i0*3+i1"), 2, 5, 1));  // reads neither
  CHECK_FALSE(shift_invariant(*parse("i2+i5"), 2, 5, -1));
  CHECK_FALSE(shift_invariant(*parse("i2*2+i5"), 2, 5, 1));  // stride 2 ...
  CHECK(shift_invariant(*parse("(i2*2+i5-3>=0)&&(i2*2+i5-3<9)"), 2, 5, 1, 2));
  CHECK_FALSE(shift_invariant(*parse("i2*2-i5"), 2, 5, 1, 2));
  CHECK_FALSE(shift_invariant(*parse("i2+i5*2"), 2, 5, 1));  // dilation 2
  CHECK_FALSE(shift_invariant(*parse("i2"), 2, 5, 1));
  CHECK_FALSE(shift_invariant(*parse("(i2+i5<4)&&(i2<3)"), 2, 5, 1));
  Var x = rand({2, 3, 16, 16}, 4), w = rand({5, 3, 3, 3}, 5), g = rand({2, 5, 16, 16}, 6);
  eval({x, w, g});
  const CpuTarget t{CpuIsa::Avx512};
  auto direct = [&](const Var& y) {
    const std::vector<KernelIR> ks = lowered({y});
    REQUIRE(ks.size() == 1);
    const CpuSchedule s = schedule_cpu_kernel(ks[0], t);
    REQUIRE(s.contraction);
    return s.contraction->direct;
  };
  CHECK(direct(conv2d(x, w, 1, 0)));
  const auto s2 = direct(conv2d(x, w, 2, 1));  // stride 2: a plane per phase
  REQUIRE(s2);
  CHECK(s2->row_stride == 2);
  CHECK(s2->col_stride == 2);
  CHECK_FALSE(direct(conv2d(x, w, 1, 2, 2)));  // dilation 2
  // The input's gradient, a transposed convolution: row - tap on both sides.
  const auto dx = direct(grad(sum(conv2d(x, w, 1, 1) * g), {x})[0]);
  REQUIRE(dx);
  CHECK(dx->row_flipped);
  CHECK(dx->col_flipped);
  CHECK(dx->row_tap != dx->col_tap);
  // A weight gradient: the taps are outer loops, each paired with a reduction loop.
  auto steps = [&](const Var& y) {
    const std::vector<KernelIR> ks = lowered({y});
    REQUIRE(!ks.empty());
    const CpuSchedule s = schedule_cpu_kernel(ks[0], t);
    REQUIRE(s.contraction);
    CHECK_FALSE(s.contraction->direct);
    return s.contraction->direct_steps;
  };
  // (With 64 input channels the gradient is [kh, kw, oc, ic], then transposed; with 3 its
  // columns merge ic, kh and kw, and neither direct form applies.)
  Var x64 = rand({2, 64, 12, 12}, 10), w64 = rand({8, 64, 3, 3}, 11),
      g64 = rand({2, 8, 12, 12}, 12);
  eval({x64, w64, g64});
  const auto dw = steps(grad(sum(conv2d(x64, w64, 1, 1) * g64), {w64})[0]);
  REQUIRE(dw);
  REQUIRE(dw->pairs.size() == 2);
  CHECK_FALSE(dw->pairs[0].flipped);
  CHECK(dw->pairs[0].step_var != dw->pairs[1].step_var);
  CHECK_FALSE(
      steps(grad(sum(conv2d(x64, w64, 2, 1) * rand({2, 8, 6, 6}, 7)), {w64})[0]));  // stride 2
  // A transposed convolution's weight gradient reads step - tap.
  Var wt = rand({64, 8, 3, 3}, 13);
  const auto dt = steps(grad(sum(conv_transpose2d(x64, wt, 1, 1) * g64), {wt})[0]);
  REQUIRE(dt);
  REQUIRE(dt->pairs.size() == 2);
  CHECK(dt->pairs[0].flipped);
  CHECK(dt->pairs[1].flipped);
  CHECK_FALSE(direct(matmul(rand({3, 4, 5}, 8), rand({5, 6}, 9))));
  CHECK_FALSE(steps(matmul(rand({3, 4, 5}, 8), rand({3, 5, 6}, 9))));  // batch, not a tap
}

namespace {

// The one kernel of `outputs` with its schedule and source for `t`.
struct ScheduledKernel {
  CpuSchedule s;
  std::string source;
};
ScheduledKernel schedule_of(const Var& output, const CpuTarget& t) {
  const std::vector<KernelIR> ks = lowered({output});
  REQUIRE(ks.size() == 1);
  return {schedule_cpu_kernel(ks[0], t), emit_cpp(ks[0], t)};
}

}  // namespace

// Scratch memory (mj_take) is refused only where malloc fails: then a contraction runs the plain
// loop nest its schedule holds (CpuSchedule::nest), printed once for both tiles, its reductions
// without SIMD. Here the kernel's request is refused by hand.
TEST_CASE("a contraction whose scratch memory is refused runs its plain loop nest, same values",
          "[targets]") {
  Var a = rand({40, 24}, 1), b = rand({24, 300}, 2);
  eval({a, b});
  const Var y = relu(matmul(a, b) + 0.5);
  const PipelinePlan p = build_pipeline(std::vector<NodePtr>{y.node()});
  REQUIRE(p.kernels.size() == 1);
  const LoweredKernel& k = p.kernels[0];
  std::string src = emit_cpp(k.ir, host_toolchain().target);
  const CpuSchedule s = schedule_cpu_kernel(k.ir, host_toolchain().target);
  REQUIRE(s.contraction);
  const bool two_tiles = !(s.contraction->wide == s.contraction->narrow);
  CHECK(metajit_test::count_occurrences(src, "mj_blocked = true;") == (two_tiles ? 2u : 1u));
  REQUIRE(metajit_test::count_occurrences(src, "if (!mj_blocked) {") == 1);
  const std::string fallback = src.substr(src.find("if (!mj_blocked) {"));
  CHECK(fallback.find("omp simd") == std::string::npos);
  CHECK(fallback.find("omp parallel for") != std::string::npos);
  const std::string take = "float* mj_scratch = mj_take(2, ";
  REQUIRE(src.find(take) != std::string::npos);
  for (size_t at; (at = src.find(take)) != std::string::npos;)
    src.replace(at, take.size(), "float* mj_scratch = mj_refused(2, ");
  const std::string entry = "extern \"C\" void metajit_kernel(";
  src.insert(src.find(entry), "static float* mj_refused(int, unsigned long) { return 0; }\n");
  // Never unloaded: libgomp, which it brings, keeps its threads (as the runtime's loader does).
  void* so = dlopen(metajit_test::built_object(src).c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  REQUIRE(so);
  using KernelFn = void (*)(void* const*, const long long*, const double*);
  const auto fn = reinterpret_cast<KernelFn>(dlsym(so, "metajit_kernel"));
  REQUIRE(fn);
  std::vector<std::vector<float>> inputs;
  for (int node : k.input_nodes) {
    const NodePtr& leaf = p.graph.leaves[size_t(p.graph.nodes[size_t(node)].leaf)];
    inputs.push_back(leaf == a.node() ? a.to_vector<float>() : b.to_vector<float>());
  }
  std::vector<float> out(40 * 300, -1.0f);
  std::vector<void*> buffers;
  for (std::vector<float>& in : inputs) buffers.push_back(in.data());
  buffers.push_back(out.data());
  const std::vector<long long> params(k.args.params.begin(), k.args.params.end());
  fn(buffers.data(), params.data(), k.args.scalars.data());
  const std::vector<float> want = y.to_vector<float>();  // the blocked schedule's values
  for (size_t e = 0; e < want.size(); ++e) {
    INFO("element " << e);
    CHECK(out[e] == Approx(want[e]).epsilon(1e-5).margin(1e-6));
  }
}

TEST_CASE("the C++ schedule pass decides map kernels' loop nests as data, which the emitter prints",
          "[targets]") {
  Var a = rand({40, 24}, 1), v = rand({50}, 2), rows = rand({4, 7}, 3);
  Var cols = array(std::vector<int64_t>{6, 0, 1, 2, 3, 4, 5, 6, 0, 1}, {5, 2});
  eval({a, v, rows, cols});
  const CpuTarget t{CpuIsa::Avx512};
  // Two loops: the outer one parallel, the innermost a SIMD loop.
  const ScheduledKernel plain = schedule_of(exp(a) + 1.0, t);
  CHECK(plain.s.nest.collapse == 1);
  CHECK(plain.s.nest.inner_simd);
  CHECK_FALSE(plain.s.nest.single_simd);
  CHECK(plain.s.nest.strips.empty());
  CHECK_FALSE(plain.s.nest.chunks);
  CHECK_FALSE(plain.s.row_reuse);
  CHECK_THAT(plain.source, Contains("#pragma omp simd\n"));
  // One loop: the parallel loop is the SIMD loop.
  const ScheduledKernel single = schedule_of(exp(v) + 1.0, t);
  CHECK(single.s.nest.single_simd);
  CHECK_THAT(single.source, Contains("#pragma omp parallel for simd schedule(static)"));
  // softmax: exp(x - max) of the row sum is read back from the output row.
  const ScheduledKernel sm = schedule_of(softmax(a, 1), t);
  REQUIRE(sm.s.row_reuse);
  CHECK(sm.s.row_reuse->in_output);
  CHECK(sm.s.ir.body.stmts[sm.s.row_reuse->reduce_index].id == sm.s.row_reuse->reduce_id);
  CHECK_FALSE(sm.s.reuse_nest.chunks);
  CHECK_THAT(sm.source, Contains("* const mj_row = out + ("));
  CHECK_THAT(dump_schedule(sm.s, t), Contains("row reuse: v") && Contains("in the output row"));
  // A column sum: the reduction interchanged into strips along memory.
  const ScheduledKernel colsum = schedule_of(sum(a, {0}), t);
  CHECK(colsum.s.nest.strips.size() == 1);
  CHECK(colsum.s.nest.collapse == 1);  // the strips' loop is the parallel one
  CHECK_THAT(colsum.source, Contains("jb += mj_jw"));
  CHECK_THAT(dump_schedule(colsum.s, t), Contains("innermost loop in strips for v"));
  // 2x2 pooling: window strips from 16 columns on; below, in the version without bounds
  // tests, the loops after the first as one strip through tables, else the plain nest.
  Var img = rand({2, 3, 8, 8}, 7);
  eval({img});
  const ScheduledKernel pool = schedule_of(max_pool2d(img, 2, 2), t);
  CHECK(pool.s.nest.window_strips.size() == 1);
  REQUIRE(pool.s.narrow_nest);
  CHECK(pool.s.narrow_nest->strips.empty());
  REQUIRE(pool.s.flat_nest);
  CHECK(pool.s.flat_nest->flat);
  CHECK(pool.s.flat_nest->window_strips == pool.s.nest.window_strips);
  CHECK_FALSE(pool.s.in_bounds.empty());
  CHECK_THAT(pool.source, Contains("int mj_fl1[2048];"));
  CHECK_THAT(dump_schedule(pool.s, t), Contains("the loops after it as one strip through tables"));
  // A column sum has no window, so no flat strip.
  CHECK_FALSE(colsum.s.flat_nest);
  // The innermost index divided by a constant: division chunks of 8.
  const ScheduledKernel chunked =
      schedule_of(reindex(rows, {4, 30}, {"i0", "(i1-8)%8"}, 0.5) * 2.0, t);
  REQUIRE(chunked.s.nest.chunks);
  CHECK(chunked.s.nest.chunks->divisor == 8);
  CHECK_THAT(chunked.source, Contains("for (i64 mj_c0 = 0;"));
  CHECK_THAT(dump_schedule(chunked.s, t), Contains("division chunks of 8"));
  // A gather along the innermost loop is left to g++'s own cost model: no forced SIMD.
  const ScheduledKernel gathered = schedule_of(gather(a, 1, cols), t);
  CHECK_FALSE(gathered.s.nest.inner_simd);
  CHECK_FALSE(gathered.s.nest.chunks);
  // Scatters: embedding's backward splits its column loop between threads (each writes its
  // own columns); colliding targets accumulate in order on one thread.
  Var ids = array(std::vector<int32_t>{4, 0, 2, 4}, {4}), emb_rows = rand({4, 24}, 6);
  eval({ids, emb_rows});
  const std::vector<KernelIR> emb = lowered({grad(sum(embedding(a, ids) * emb_rows), {a})[0]});
  const auto scatter = std::find_if(emb.begin(), emb.end(),
                                    [](const KernelIR& k) { return k.kind != KernelKind::Map; });
  REQUIRE(scatter != emb.end());
  const CpuSchedule split = schedule_cpu_kernel(*scatter, t);
  REQUIRE(split.scatter.split_loop >= 0);
  CHECK(scatter->loops[size_t(split.scatter.split_loop)].var == scatter->loops.back().var);
  CHECK(split.scatter.simd);
  CHECK_THAT(emit_cpp(*scatter, t), Contains("mj_lo = mj_se * mj_c / mj_sc"));
  CHECK_THAT(dump_schedule(split, t), Contains("split between threads along i"));
  const ScheduledKernel colliding =
      schedule_of(reindex_reduce(a, ReduceOp::Add, {3}, {"i0 % 3"}), t);
  CHECK(colliding.s.scatter.split_loop == -1);
  CHECK_THAT(colliding.source, !Contains("mj_lo = "));
  CHECK_THAT(dump_schedule(colliding.s, t), Contains("accumulated in order on one thread"));
}
