// CUDA code generation without a GPU: for every op kind and fusion pattern the emitted .cu is
// compiled by the real nvcc through the kernel cache (kernel.cu, a "cuda" backend in meta.json,
// checksums, the architecture in the key), and the objects load. Running them needs a GPU: that
// is test_cuda_runtime and the suites registered again with METAJIT_DEVICE=cuda (CMakeLists).
// This executable reports itself skipped (exit 77) where no nvcc is found.
#include <dlfcn.h>
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "base/checksum.h"
#include "base/config.h"
#include "cache/cache_store.h"
#include "codegen/cuda_emitter.h"
#include "codegen/cuda_emulation.h"
#include "codegen/cuda_schedule.h"
#include "codegen/pipeline.h"
#include "runtime/cache_warm.h"
#include "runtime/cuda_toolchain.h"
#include "runtime/kernel_library.h"
#include "support/files.h"
#include "support/processes.h"
#include "support/scoped_env.h"
#include "support/skip.h"

using namespace metajit;
using metajit_test::ScopedEnv;
using metajit_test::TempDir;

namespace {

// The lowered kernels eval(vars) would run (the pipeline, no device involved).
struct Planned {
  PipelinePlan plan;
  std::vector<const KernelIR*> irs() const {
    std::vector<const KernelIR*> out;
    for (const LoweredKernel& k : plan.kernels) out.push_back(&k.ir);
    return out;
  }
};

Planned planned(const std::vector<Var>& vars) {
  std::vector<NodePtr> nodes;
  for (const Var& v : vars) nodes.push_back(v.node());
  std::lock_guard<std::recursive_mutex> lock(graph_mutex());
  return Planned{build_pipeline(nodes)};
}

// One graph per op kind and fusion pattern the planner produces.
std::vector<std::pair<std::string, std::vector<Var>>> every_pattern() {
  std::vector<std::pair<std::string, std::vector<Var>>> out;
  Var a = rand({24, 40}, 1), b = rand({24, 40}, 2), w = rand({40, 16}, 3);
  Var ai = cast(a * 10.0, DType::Int32), bi = cast(b * 10.0, DType::Int64);
  Var ad = cast(a, DType::Float64);
  eval({a, b, w, ai, bi, ad});
  std::vector<Var> unary;
  for (Var x : {a, ad}) {
    unary.push_back(-x + abs(x) + exp(x) + log(x) + sqrt(x) + sin(x) + cos(x) + tanh(x) +
                    sigmoid(x) + relu(x) + floor(x));
  }
  unary.push_back(-ai + abs(ai) + relu(ai) + floor(ai));
  unary.push_back(-bi + abs(bi));
  unary.push_back(logical_not(a > 0.5));
  out.push_back({"unary ops, float32/float64/int32/int64/bool", unary});
  std::vector<Var> binary;
  for (Var x : {a, ad}) {
    Var y = x * 0.5 + 0.25;
    binary.push_back(x + y - x * y / y + pow(x, y) + maximum(x, y) + minimum(x, y));
    binary.push_back(logical_or(logical_and(x == y, x != y), logical_and(x < y, x <= y)));
  }
  binary.push_back(ai / (ai + 1.0) + pow(ai, 2.0) + maximum(ai, ai * 2.0) - minimum(ai, 3.0));
  binary.push_back(bi / 3.0 + pow(bi, 2.0) + bi * 7.0);
  binary.push_back(logical_or(a > b, a >= b));
  out.push_back({"binary ops on every dtype, comparisons, logical ops", binary});
  out.push_back(
      {"where, cast between dtypes, numpy broadcasting",
       {where(a > b, a, b * 2.0), cast(ad, DType::Int32) + cast(ai, DType::Bool),
        a + sum(b, {0}, true), broadcast_to(sum(a, {1}), {3, 24}), cast(a > 0.5, DType::Float64)}});
  out.push_back({"reindex with overflow value and conditions; iota",
                 {reindex(a, {26, 42}, {"i0-1", "i1-1"}, -1.0, {"(i0+i1)%5==0"}),
                  cast(arange(50), DType::Float32) * 0.5}});
  std::vector<Var> scatter;
  for (ReduceOp op : {ReduceOp::Add, ReduceOp::Mul, ReduceOp::Max, ReduceOp::Min}) {
    scatter.push_back(reindex_reduce(a, op, {12}, {"i0/2"}));
    scatter.push_back(reindex_reduce(ad, op, {12}, {"i0/2"}));
    scatter.push_back(reindex_reduce(ai, op, {12}, {"i0/2"}));
    scatter.push_back(reindex_reduce(bi, op, {12}, {"i0/2"}));
    scatter.push_back(reindex_reduce(a > 0.5, op, {12}, {"i0/2"}));
  }
  out.push_back({"reindex_reduce: add/mul/max/min on every dtype (atomics)", scatter});
  std::vector<Var> reduces;
  for (ReduceOp op : {ReduceOp::Add, ReduceOp::Mul, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean})
    for (std::vector<int64_t> dims : std::vector<std::vector<int64_t>>{{1}, {0}, {}})
      reduces.push_back(reduce(a, op, dims));
  reduces.push_back(sum(ai, {1}));
  reduces.push_back(max(bi, {0}));
  reduces.push_back(sum(a > 0.5));
  out.push_back({"reduce over the inner axis, the outer axis and everything", reduces});
  out.push_back({"fused row reductions (softmax, layer norm), a total fused into its consumer",
                 {softmax(a, 1), softmax(a, 0),
                  (a - mean(a, {1}, true)) / sqrt(mean(a * a, {1}, true) + 1e-5), a - mean(a),
                  sum(exp(a * b + 1.0)) / 7.0}});
  // __half / __nv_bfloat16 buffers computed in float, 8- and 16-bit integers, their atomics on
  // the containing word (codegen/cuda_scatter.cc).
  Var h = cast(a, DType::Float16), g = cast(b, DType::BFloat16);
  Var i8 = cast(ai, DType::Int8), u8 = cast(ai, DType::UInt8), s16 = cast(bi, DType::Int16);
  std::vector<Var> narrow = {exp(h) * 2.0 + g,
                             h * 3.0 + 1.0,
                             sum(g, {1}),
                             max(h, {0}),
                             softmax(h, 1),
                             i8 + u8,
                             s16 * 3.0,
                             cast(h, DType::Int8),
                             cast(i8, DType::BFloat16) + cast(bi, DType::Float16),
                             matmul(h, cast(w, DType::Float16)),
                             matmul(g, cast(w, DType::BFloat16))};
  for (ReduceOp op : {ReduceOp::Add, ReduceOp::Max})
    for (Var v : {h, g, i8, u8, s16}) narrow.push_back(reindex_reduce(v, op, {12}, {"i0/2"}));
  out.push_back(
      {"float16, bfloat16, int8, uint8, int16: ops, reductions, scatters, matmul", narrow});
  Var x = rand({2, 3, 9, 9}, 4), k = rand({4, 3, 3, 3}, 5);
  out.push_back(
      {"matmul (plain, batched, with epilogue), conv2d, max_pool2d",
       {matmul(a, w), relu(matmul(a, w) + 0.5), matmul(rand({3, 5, 7}, 6), rand({7, 4}, 7)),
        conv2d(x, k, 2, 1), max_pool2d(x, 3, 2, 1)}});
  return out;
}

std::set<std::string> keys_of(const std::vector<KernelHandle>& hs) {
  std::set<std::string> out;
  for (const KernelHandle& h : hs) out.insert(h.key);
  return out;
}

}  // namespace

TEST_CASE("every op kind and fusion pattern compiles with nvcc into the cache", "[cuda][nvcc]") {
  const CudaToolchain& tc = cuda_toolchain();
  REQUIRE_FALSE(tc.emulated);
  CacheStore store(config().cache_dir);
  for (auto& [what, vars] : every_pattern()) {
    SECTION(what) {
      Planned p = planned(vars);
      REQUIRE(!p.plan.kernels.empty());
      std::vector<KernelHandle> hs = obtain_kernels(p.irs(), Device::CUDA);
      REQUIRE(hs.size() == p.plan.kernels.size());
      for (size_t i = 0; i < hs.size(); ++i) {
        INFO(what << ", kernel " << i << " (" << hs[i].key << ")");
        CHECK(hs[i].fn != nullptr);  // the object loaded and exports metajit_kernel
        CHECK(hs[i].key == key_of(*p.irs()[i], Device::CUDA));
        CHECK(hs[i].key != key_of(*p.irs()[i], Device::CPU));
        nlohmann::json meta = store.read_meta(hs[i].key);
        CHECK(meta["backend"] == "cuda");
        CHECK(meta["source_file"] == "kernel.cu");
        CHECK(meta["target"] == tc.arch);
        const std::filesystem::path dir = store.entry_dir(hs[i].key);
        CHECK(std::filesystem::is_regular_file(dir / "kernel.cu"));
        CHECK(std::filesystem::is_regular_file(dir / "kernel.so"));
        CHECK_FALSE(std::filesystem::exists(dir / "kernel.cc"));
        const std::string text = metajit_test::read_file(dir / "kernel.cu");
        CHECK(text.find("__global__") != std::string::npos);
        CHECK(text.find("extern \"C\" void metajit_kernel(") != std::string::npos);
        const bool has_arch =
            std::find(tc.flags.begin(), tc.flags.end(), "-arch=" + tc.arch) != tc.flags.end();
        CHECK(has_arch);
      }
      // A second request is a memory hit: no compile, the same objects.
      reset_stats();
      std::vector<KernelHandle> again = obtain_kernels(p.irs(), Device::CUDA);
      CHECK(stats().kernels_compiled == 0);
      CHECK(keys_of(again) == keys_of(hs));
    }
  }
}

// Backward graphs are lazy graphs of meta-ops like any other, but with patterns forward code
// rarely makes: gathers with division/modulo conditions (conv2d's input gradient), max
// reductions compared back against their inputs, scatters of counts (atomics).
TEST_CASE("backward kernels of softmax, matmul, conv2d and a reindex_reduce max compile with nvcc",
          "[cuda][nvcc][autograd]") {
  const CudaToolchain& tc = cuda_toolchain();
  REQUIRE_FALSE(tc.emulated);
  CacheStore store(config().cache_dir);
  Var a = rand({24, 40}, 1), w = rand({40, 16}, 2), c = rand({24, 16}, 3);
  Var x = rand({2, 3, 9, 9}, 4), k = rand({4, 3, 3, 3}, 5), s = rand({30}, 6);
  Var ad = cast(a, DType::Float64);
  eval({a, w, c, x, k, s, ad});
  std::vector<std::pair<std::string, std::vector<Var>>> cases;
  cases.push_back(
      {"softmax, float32 and float64",
       {grad(sum(softmax(a, 1) * a), {a})[0], grad(sum(softmax(ad, 0) * ad), {ad})[0]}});
  {
    Var loss = sum(matmul(a, w) * c);
    cases.push_back({"matmul", grad(loss, {a, w})});
  }
  for (int64_t stride : {1, 2}) {
    Var y = conv2d(x, k, stride, 1);
    cases.push_back({"conv2d stride " + std::to_string(stride), grad(sum(y * y), {x, k})});
  }
  {
    Var r = reindex_reduce(s, ReduceOp::Max, {8}, {"i0%8"});
    cases.push_back({"reindex_reduce max", grad(sum(r * r), {s})});
  }
  for (auto& [what, vars] : cases) {
    SECTION(what) {
      const std::vector<KernelInfo> ks = plan(vars, Device::CUDA);
      REQUIRE(!ks.empty());
      for (const KernelInfo& ki : ks) CHECK(ki.source.find("__global__") != std::string::npos);
      Planned p = planned(vars);
      std::vector<KernelHandle> hs = obtain_kernels(p.irs(), Device::CUDA);
      REQUIRE(hs.size() == ks.size());
      std::set<std::string> planned_keys;
      for (const KernelInfo& ki : ks) planned_keys.insert(ki.key);
      CHECK(keys_of(hs) == planned_keys);  // plan(vars, CUDA) names the kernels compiled here
      for (size_t i = 0; i < hs.size(); ++i) {
        INFO(what << ", kernel " << i << " (" << hs[i].key << ")");
        CHECK(hs[i].fn != nullptr);  // nvcc compiled it and the object loaded
        const nlohmann::json meta = store.read_meta(hs[i].key);
        CHECK(meta["backend"] == "cuda");
        CHECK(meta["target"] == tc.arch);
      }
    }
  }
}

// Data-dependent indexing (extras): every read of an index array goes through the bounds-checked
// mj_read<r> reader, and scatter_add's colliding targets are combined atomically (several
// threads add into one element), never by a plain read-modify-write.
TEST_CASE("gather, embedding, scatter_add, index_select and one_hot compile with nvcc",
          "[cuda][nvcc][extras]") {
  const CudaToolchain& tc = cuda_toolchain();
  REQUIRE_FALSE(tc.emulated);
  CacheStore store(config().cache_dir);
  Var x = rand({6, 5}, 11), w = rand({10, 4}, 12), xd = cast(x, DType::Float64);
  Var xi = cast(x * 100.0, DType::Int32), xl = cast(x * 100.0, DType::Int64);
  // Far and colliding positions: every row of index hits row 1 or 2 of x, or none.
  Var idx = array(std::vector<int64_t>{1, 2, 1, -1, 1, 9, 2, 1, 1, 2}, {2, 5});
  Var idx32 = array(std::vector<int32_t>{3, 0, 3, 3, -5, 2147483647, 0, 3}, {8});
  Var src = rand({2, 5}, 13);
  eval({x, w, xd, xi, xl, idx, idx32, src});
  struct Case {
    std::string what;
    std::vector<Var> vars;
    bool scatter;  // has a reindex_reduce kernel (atomics)
  };
  const std::vector<Case> cases = {
      {"gather, float32 and float64, int64 and int32 indices",
       {gather(x, 0, idx), gather(xd, 1, cast(idx, DType::Int32))},
       false},
      {"embedding of int64 and int32 ids", {embedding(w, idx), embedding(w, idx32)}, false},
      {"index_select", {index_select(x, 1, idx32), index_select(x, 0, idx32)}, false},
      {"one_hot float32 and int64", {one_hot(idx, 4), one_hot(idx32, 6, DType::Int64)}, false},
      {"scatter_add float32, colliding targets", {scatter_add(x, 0, idx, src)}, true},
      {"scatter_add float64, int32, int64",
       {scatter_add(xd, 0, idx, cast(src, DType::Float64)),
        scatter_add(xi, 1, cast(idx, DType::Int32), cast(src * 10.0, DType::Int32)),
        scatter_add(xl, 0, idx, cast(src * 10.0, DType::Int64))},
       true},
  };
  for (const Case& c : cases) {
    SECTION(c.what) {
      const std::vector<KernelInfo> ks = plan(c.vars, Device::CUDA);
      REQUIRE(!ks.empty());
      size_t reading = 0, scatters = 0;
      for (const KernelInfo& k : ks) {
        INFO(k.source);
        const bool reads = k.source.find("mj_read") != std::string::npos;
        reading += reads;
        // Host and device functions (CFamilyEmitter::integer_prelude, extra_readers).
        if (reads) CHECK(k.source.find("MJ_FN i64 mj_read") != std::string::npos);
        if (reads) CHECK(k.source.find("#define MJ_FN MJ_HD\n") != std::string::npos);
        if (k.source.find(") mj_scatter(const mj_args a") == std::string::npos) continue;
        ++scatters;
        // The combine of a scatter is atomic: atomicAdd (or the CAS loop of mj_atomic_combine),
        // guarded by the target's validity (in range, every extra read inside its array).
        const size_t combine = k.source.find("void mj_atomic_combine(");
        REQUIRE(combine != std::string::npos);
        const std::string body =
            k.source.substr(combine, k.source.find("\n}\n", combine) - combine);
        CHECK(body.find("atomicAdd(") != std::string::npos);
        CHECK(k.source.find(") mj_atomic_combine(&out[") != std::string::npos);
        CHECK(reads);
      }
      CHECK(reading > 0);
      CHECK((scatters > 0) == c.scatter);
      Planned p = planned(c.vars);
      std::vector<KernelHandle> hs = obtain_kernels(p.irs(), Device::CUDA);
      REQUIRE(hs.size() == ks.size());
      for (size_t i = 0; i < hs.size(); ++i) {
        INFO(c.what << ", kernel " << i << " (" << hs[i].key << ")");
        CHECK(hs[i].fn != nullptr);  // nvcc compiled it and the object loaded
        const nlohmann::json meta = store.read_meta(hs[i].key);
        CHECK(meta["backend"] == "cuda");
        CHECK(meta["target"] == tc.arch);
      }
    }
  }
}

TEST_CASE("each schedule of the CUDA emitter is used where it belongs", "[cuda][codegen]") {
  Var a = rand({64, 48}, 1), w = rand({48, 32}, 2);
  eval({a, w});
  auto source_of = [](const Var& v) {
    std::vector<KernelInfo> ks = plan({v}, Device::CUDA);
    REQUIRE(ks.size() == 1);
    return ks[0].source;
  };
  std::string ew = source_of(a * 2.0 + 1.0);
  CHECK(ew.find("mj_map32") != std::string::npos);
  // Contiguous 4-byte element-wise work also gets 16-byte accesses; a transposed read does not.
  CHECK(ew.find("mj_vec4") != std::string::npos);
  CHECK(ew.find("((const float4*)in0)[mj_q]") != std::string::npos);
  CHECK(source_of(cast(a, DType::Float64) * 2.0).find("mj_vec4") == std::string::npos);
  CHECK(source_of(transpose(a, {1, 0}) * 2.0).find("mj_vec4") == std::string::npos);
  CHECK(ew.find("mj_rows") == std::string::npos);
  std::string rows = source_of(softmax(a, 1));
  CHECK(rows.find("mj_rows") != std::string::npos);
  CHECK(rows.find("mj_block_reduce") != std::string::npos);
  CHECK(rows.find("__shfl_down_sync") != std::string::npos);
  CHECK(rows.find("*(const float4*)(in0 + ") != std::string::npos);  // 16-byte row reads
  std::string cols = source_of(sum(a, {0}));
  CHECK(cols.find("mj_cols") != std::string::npos);
  CHECK(cols.find("mj_colfin") != std::string::npos);
  std::string total = source_of(sum(a));
  CHECK(total.find("mj_gpart") != std::string::npos);
  CHECK(total.find("mj_gfin") != std::string::npos);
  std::string mm = source_of(matmul(a, w));
  CHECK(mm.find("mj_mm_large") != std::string::npos);
  CHECK(mm.find("__shared__ float mj_as") != std::string::npos);
  std::string sc = source_of(reindex_reduce(a, ReduceOp::Max, {8}, {"i0%8"}));
  CHECK(sc.find("atomicCAS") != std::string::npos);
  std::string sa = source_of(reindex_reduce(a, ReduceOp::Add, {8}, {"i0%8"}));
  CHECK(sa.find("atomicAdd") != std::string::npos);
  // No heavy headers in GPU sources: compile latency is a product feature.
  CHECK(ew.find("#include") == std::string::npos);
  // Host emulation: the same kernels behind another prelude.
  std::string emu =
      emit_cuda(planned({a * 2.0 + 1.0}).plan.kernels[0].ir, CudaTarget::HostEmulation);
  CHECK(emu.find("mj_map32") != std::string::npos);
  CHECK(emu.find("MJ_LAUNCH") != std::string::npos);
}

// The choices above are data of the schedule pass (codegen/cuda_schedule.h) before any source:
// each is tested here on the schedule, and the source holds exactly the kernels it lists.
TEST_CASE("the CUDA schedule pass decides a group's kernels as data, which the emitter prints",
          "[cuda][codegen]") {
  Var a = rand({64, 48}, 1), w = rand({48, 32}, 2);
  eval({a, w});
  auto scheduled = [](const Var& v) {
    const Planned p = planned({v});
    REQUIRE(p.plan.kernels.size() == 1);
    const KernelIR& ir = p.plan.kernels[0].ir;
    return std::make_pair(schedule_cuda_kernel(ir), emit_cuda(ir));
  };
  auto has = [](const std::string& src, const std::string& kernel) {
    return src.find(" " + kernel + "(const mj_args a") != std::string::npos;
  };
  const auto [ew, ew_src] = scheduled(a * 2.0 + 1.0);
  REQUIRE(ew.vec4);
  CHECK(ew.vec4_buffers == std::set<int>{0});
  CHECK_FALSE(ew.rows);
  CHECK_FALSE(ew.column);
  CHECK_FALSE(ew.contraction);
  CHECK(ew.globals.empty());
  CHECK(has(ew_src, "mj_vec4"));
  CHECK_FALSE(has(ew_src, "mj_rows"));
  const auto [tr, tr_src] = scheduled(transpose(a, {1, 0}) * 2.0);
  CHECK_FALSE(tr.vec4);
  CHECK_FALSE(has(tr_src, "mj_vec4"));
  const auto [sm, sm_src] = scheduled(softmax(a, 1));
  CHECK(sm.rows);
  CHECK(sm.row_level == 0);
  CHECK(sm.cooperative.size() == 2);  // the row max and the row sum
  CHECK_FALSE(sm.row_vec4.empty());
  CHECK(has(sm_src, "mj_rows"));
  CHECK(sm_src.find("*(const float4*)(in0 + ") != std::string::npos);
  CHECK_THAT(dump_cuda_schedule(sm), Catch::Matchers::Contains("a block per row"));
  const auto [cs, cs_src] = scheduled(sum(a, {0}));
  CHECK(cs.column);
  CHECK(cs.rows);  // narrow columns take the row kernel at launch
  CHECK(has(cs_src, "mj_cols"));
  CHECK(has(cs_src, "mj_colfin"));
  const auto [all, all_src] = scheduled(sum(a));
  CHECK(all.globals.size() == 1);
  CHECK(has(all_src, "mj_gpart" + std::to_string(all.ir.body.stmts[all.globals[0]].id)));
  const auto [mm, mm_src] = scheduled(matmul(a, w));
  REQUIRE(mm.contraction);
  CHECK_FALSE(mm.rows);
  CHECK(mm_src.find("mj_mm_large(const mj_args a)") != std::string::npos);
  const auto [sc, sc_src] = scheduled(reindex_reduce(a, ReduceOp::Add, {8}, {"i0%8"}));
  CHECK(sc.ir.kind == KernelKind::Scatter);
  CHECK(sc.levels.empty());
  CHECK(has(sc_src, "mj_scatter"));
  CHECK_THAT(dump_cuda_schedule(sc), Catch::Matchers::Contains("atomic scatter"));
}

// As the C++ emitter's (test_cpu_targets.cc): kernel keys do not hash the source (docs/design.md
// §5), so a change to what the CUDA emitter writes must come with a new kCudaCodegenVersion
// (codegen/cuda_emitter.h), or caches keep serving kernels built from the old source. This digest
// of the emitter's output for every graph of every_pattern(), for the GPU and the host emulation,
// is recorded next to the version it belongs to; when the output changes, bump the version and
// record the new pair here (a graph added to every_pattern() changes only the digest). The
// emulation prelude is left out: its own hash is part of every emulated kernel's key. cuda-10:
// Bool, Int8 and UInt8 values cast to a half type without a rounding call (CFamilyEmitter::
// cast_expr, shared with the C++ emitter).
TEST_CASE("the CUDA emitter's output is pinned to the CUDA codegen version", "[cuda][codegen]") {
  ScopedEnv fused("METAJIT_OPT_LEVEL", "1"), generic("METAJIT_SPECIALIZE_SHAPES", "0");
  const char* kRecordedVersion = "cuda-10";
  const char* kRecordedDigest = "8c94e070f2d1dd0d53009010faa7757d";
  const std::string prelude = kCudaEmulationPrelude;
  std::string all;
  for (const auto& [what, vars] : every_pattern()) {
    Planned p = planned(vars);
    for (const KernelIR* ir : p.irs()) {
      all += emit_cuda(*ir, CudaTarget::Gpu);
      std::string emu = emit_cuda(*ir, CudaTarget::HostEmulation);
      const size_t at = emu.find(prelude);
      REQUIRE(at != std::string::npos);
      all += emu.erase(at, prelude.size());
    }
  }
  const std::string digest = xxh3_128_hex(all);
  INFO("CUDA emitter output digest " << digest << " under " << kCudaCodegenVersion);
  CHECK(std::string(kCudaCodegenVersion) == kRecordedVersion);
  CHECK(digest == kRecordedDigest);
}

TEST_CASE("the CUDA key follows the architecture, the nvcc flags and never the shapes",
          "[cuda][key]") {
  Var a = rand({8, 8}, 1);
  eval({a});
  const std::string base = plan({exp(a)}, Device::CUDA)[0].key;
  Var big = rand({80, 3}, 2);
  eval({big});
  CHECK(plan({exp(big)}, Device::CUDA)[0].key == base);  // shapes are launch arguments
  CHECK(plan({exp(a)}, Device::CPU)[0].key != base);     // another backend
  {
    // A GPU's own architecture wins over METAJIT_CUDA_ARCH (README, "Architectures and flags"):
    // the setting is for build machines warming a cache; this checked it on an H200 too.
    ScopedEnv arch("METAJIT_CUDA_ARCH", "sm_80");
    if (cuda_available())
      CHECK(plan({exp(a)}, Device::CUDA)[0].key == base);
    else
      CHECK(plan({exp(a)}, Device::CUDA)[0].key != base);
  }
  {
    ScopedEnv flags("METAJIT_NVCCFLAGS", "-lineinfo");
    CHECK(plan({exp(a)}, Device::CUDA)[0].key != base);
  }
  CHECK(plan({exp(a)}, Device::CUDA)[0].key == base);
}

TEST_CASE("a bad METAJIT_CUDA_ARCH or a missing nvcc is a clear error", "[cuda][errors]") {
  Var a = rand({4, 4}, 1);
  eval({a});
  {
    setenv("METAJIT_CUDA_ARCH", "ampere", 1);
    CHECK_THROWS_WITH(reload_config(),
                      Catch::Contains("METAJIT_CUDA_ARCH=ampere") && Catch::Contains("sm_90"));
    unsetenv("METAJIT_CUDA_ARCH");
    reload_config();
  }
  {
    ScopedEnv nvcc("METAJIT_NVCC", "/nonexistent/nvcc");
    CHECK_THROWS_AS(plan({exp(a)}, Device::CUDA), CompileError);
    CHECK_THROWS_WITH(plan({exp(a)}, Device::CUDA),
                      Catch::Contains("nvcc") && Catch::Contains("/nonexistent/nvcc"));
  }
}

TEST_CASE("an nvcc failure is a CompileError naming the command and keeping the .cu",
          "[cuda][errors]") {
  Var a = rand({4, 4}, 3);
  eval({a});
  ScopedEnv flags("METAJIT_NVCCFLAGS", "--no-such-nvcc-flag");
  Planned p = planned({a * 3.0});
  try {
    obtain_kernels(p.irs(), Device::CUDA);
    FAIL("expected a CompileError");
  } catch (const CompileError& e) {
    CHECK_THAT(e.command(), Catch::Contains("--no-such-nvcc-flag"));
    CHECK_THAT(e.source_path(), Catch::EndsWith("kernel.cu"));
    CHECK(std::filesystem::exists(e.source_path()));
  }
}

TEST_CASE("metajit cache warm compiles CUDA manifest entries without a GPU", "[cuda][cli]") {
  TempDir src, dst;
  Var a = rand({16, 16}, 9);
  eval({a});
  Planned p = planned({softmax(a, 1), sum(a, {0})});
  std::vector<KernelIR> irs;
  for (const KernelIR* ir : p.irs()) irs.push_back(*ir);
  {
    ScopedEnv dir("METAJIT_CACHE_DIR", src.path().string());
    WarmSummary w = warm_kernels(irs, 2, Device::CUDA);
    REQUIRE(w.failed == 0);
  }
  const std::string cli = metajit_test::cli_path().string();
  auto exported = metajit_test::run_command(cli + " --cache-dir " + src.path().string() +
                                            " cache export -o " + (src.path() / "m.json").string());
  REQUIRE(exported.exit_code == 0);
  std::ifstream m(src.path() / "m.json");
  nlohmann::json manifest = nlohmann::json::parse(m);
  REQUIRE(manifest["kernels"].size() == irs.size());
  for (const auto& k : manifest["kernels"]) CHECK(k["backend"] == "cuda");
  auto warm = metajit_test::run_command(cli + " --cache-dir " + dst.path().string() +
                                        " cache warm " + (src.path() / "m.json").string());
  INFO(warm.output);
  REQUIRE(warm.exit_code == 0);
  CHECK_THAT(warm.output,
             Catch::Contains(std::to_string(irs.size()) + " compiled") && Catch::Contains("CUDA"));
  auto list =
      metajit_test::run_command(cli + " --cache-dir " + dst.path().string() + " cache list");
  CHECK_THAT(list.output, Catch::Contains("cuda"));
  // The warmed entries are the ones this machine's program would look up.
  std::set<std::string> want, have;
  for (const KernelIR& ir : irs) want.insert(key_of(ir, Device::CUDA));
  for (const CacheEntryInfo& e : CacheStore(dst.path()).list()) {
    CHECK(e.backend == "cuda");
    have.insert(e.key);
  }
  CHECK(have == want);
  // `cache show` prints the CUDA source; `cache verify --fix` rebuilds a damaged CUDA entry with
  // nvcc from the spec in its meta.json.
  const std::string key = *want.begin();
  auto show = metajit_test::run_command(cli + " --cache-dir " + dst.path().string() +
                                        " cache show " + key.substr(0, 12));
  CHECK(show.exit_code == 0);
  CHECK_THAT(show.output, Catch::Contains("__global__") && Catch::Contains("metajit_kernel"));
  {
    std::ofstream so(CacheStore(dst.path()).entry_dir(key) / "kernel.so",
                     std::ios::binary | std::ios::trunc);
    so << "not an object";
  }
  auto verify =
      metajit_test::run_command(cli + " --cache-dir " + dst.path().string() + " cache verify");
  CHECK(verify.exit_code == 1);
  CHECK_THAT(verify.output, Catch::Contains(key));
  auto fix = metajit_test::run_command(cli + " --cache-dir " + dst.path().string() +
                                       " cache verify --fix");
  INFO(fix.output);
  CHECK(fix.exit_code == 0);
  CHECK_THAT(fix.output, Catch::Contains("(1 rebuilt)"));
  CHECK(CacheStore(dst.path()).find(key).has_value());
}

TEST_CASE("asking for CUDA where it cannot run is a CudaError that says why", "[cuda][errors]") {
  // Whether CUDA can be used is settled once per process, by the machine: where it can, this
  // error cannot happen (the cuda: suites check that set_device(cuda) works there).
  if (cuda_available())
    metajit_test::skip_test("a CUDA device can be used here; this checks the error where none can");
  const std::string why = cuda_unavailable_reason();
  CHECK_FALSE(why.empty());
  CHECK_THROWS_WITH(set_device(Device::CUDA),
                    Catch::Contains("set_device(cuda)") && Catch::Contains(why));
  CHECK(device() == Device::CPU);  // unchanged
  // Device buffers cannot be had either; the error names the reason, nothing crashes.
  CHECK_THROWS_AS(allocate_buffer(64, Device::CUDA), Error);
  // Planning for CUDA still works: it needs nvcc, not a GPU.
  Var a = rand({3, 3}, 1);
  CHECK(plan({a + 1.0}, Device::CUDA).size() == 1);
}

TEST_CASE("metajit doctor reports nvcc and the GPU (or why there is none)", "[cuda][cli]") {
  auto r = metajit_test::run_command(metajit_test::cli_path().string() + " doctor --json");
  INFO(r.output);
  nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  bool saw_nvcc = false, saw_gpu = false;
  for (const auto& c : j["checks"]) {
    if (c["name"] == "nvcc") {
      saw_nvcc = true;
      CHECK(c["status"] == "ok");
      CHECK_THAT(c["detail"].get<std::string>(), Catch::Contains(cuda_toolchain().arch));
    }
    if (c["name"] == "gpu") {
      saw_gpu = true;
      CHECK(c["status"] == (cuda_available() ? "ok" : "info"));
      if (!cuda_available())
        CHECK_THAT(c["detail"].get<std::string>(), Catch::Contains(cuda_unavailable_reason()));
    }
  }
  CHECK(saw_nvcc);
  CHECK(saw_gpu);
}

TEST_CASE("metajit doctor without a C++ compiler blames the compiler, not the CUDA toolkit",
          "[cuda][cli]") {
  auto r = metajit_test::run_command("METAJIT_CXX=/nonexistent/metajit-no-cc " +
                                     metajit_test::cli_path().string() + " doctor --json");
  INFO(r.output);
  nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  bool saw_nvcc = false;
  for (const auto& c : j["checks"])
    if (c["name"] == "nvcc") {
      saw_nvcc = true;
      CHECK(c["status"] == "problem");
      CHECK_THAT(c["detail"].get<std::string>(), Catch::Contains("host C++ compiler") &&
                                                     Catch::Contains("/nonexistent/metajit-no-cc"));
      CHECK_THAT(c["fix"].get<std::string>(),
                 Catch::Contains("install g++") && !Catch::Contains("CUDA toolkit"));
    }
  CHECK(saw_nvcc);
}
