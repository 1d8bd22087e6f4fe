// The CUDA backend at run time: values against the reference interpreter for every schedule of
// the CUDA emitter at sizes that take each path (block rows, split columns, grid-wide totals,
// both matmul tiles, atomics), values moving between host and device, device memory stats and
// jit replays on the GPU. Registered by CMakeLists to run with METAJIT_DEVICE=cuda (on a GPU;
// reported skipped elsewhere) and with METAJIT_CUDA_EMULATE=1 (the host emulation, everywhere).
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "cache/manifest.h"
#include "meta_ops/node.h"
#include "runtime/cuda_runtime.h"
#include "support/files.h"
#include "support/reference_check.h"
#include "support/scoped_env.h"
#include "support/threads.h"

using namespace metajit;

namespace {

// Every case runs on CUDA; the sizes are smaller under the (slow) host emulation.
bool on_cuda() {
  REQUIRE(cuda_available());
  set_device(Device::CUDA);
  return true;
}
int64_t scaled(int64_t gpu, int64_t emulated) {
  return cuda_runtime()->emulated() ? emulated : gpu;
}

}  // namespace

TEST_CASE("results live on the device until the host asks for them", "[cuda][residency]") {
  on_cuda();
  Var x = array<float>({1, -2, 3, -4, 5, -6}, {2, 3});  // made on the host
  Var y = exp(x) * 2.0;
  reset_stats();
  eval({y});
  Stats s = stats();
  CHECK(s.cuda_kernels_launched == 1);
  CHECK(s.kernels_launched == 1);
  REQUIRE(y.node()->data);
  CHECK(y.node()->data->device() == Device::CUDA);
  CHECK(s.cuda_bytes_in_use >= 2 * 6 * sizeof(float));  // x's copy and y
  // x moved to the device once and keeps that copy; a second use does not copy again.
  REQUIRE(x.node()->mirror);
  CHECK(x.node()->mirror->device() == Device::CUDA);
  const void* copy = x.node()->mirror->data();
  eval({x + 1.0});
  CHECK(x.node()->mirror->data() == copy);
  // to_vector brings the value back (and keeps the host copy with the node).
  std::vector<float> v = y.to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i)
    CHECK(v[i] == Approx(2 * std::exp(x.to_vector<float>()[i])).epsilon(1e-6));
  REQUIRE(y.node()->mirror);
  CHECK(y.node()->mirror->device() == Device::CPU);
}

TEST_CASE("a value computed on the GPU and used on the CPU is moved, not recomputed",
          "[cuda][residency]") {
  on_cuda();
  Var x = rand({64, 33}, 1);
  Var y = softmax(x, 1);
  eval({y});
  REQUIRE(y.node()->data->device() == Device::CUDA);
  set_device(Device::CPU);
  reset_stats();
  Var z = sum(y, {1});  // rows of a softmax sum to 1
  eval({z});
  CHECK(stats().cuda_kernels_launched == 0);
  CHECK(stats().kernels_launched == 1);
  for (float r : z.to_vector<float>()) CHECK(r == Approx(1.0f).epsilon(1e-5));
  set_device(Device::CUDA);
  reset_stats();
  Var w = z * 2.0;  // a CPU result used on the GPU
  eval({w});
  CHECK(stats().cuda_kernels_launched == 1);
  for (float r : w.to_vector<float>()) CHECK(r == Approx(2.0f).epsilon(1e-5));
}

TEST_CASE("element-wise: SELU, 32- and 64-bit index paths agree with the reference",
          "[cuda][elementwise]") {
  on_cuda();
  const int64_t n = scaled(1 << 20, 5000) + 7;
  Var x = randn({n}, 3);
  const double alpha = 1.6732632423543772, scale = 1.0507009873554805;
  check_against_reference({where(x > 0.0, x, alpha * (exp(x) - 1.0)) * scale});
  Var a = rand({37, 1, 5}, 4), b = rand({1, 29, 5}, 5);
  check_against_reference({a * b + 1.0, cast(a > b, DType::Int32), maximum(a, b)});
}

// Contiguous 4-byte element-wise kernels move 16 bytes per access (codegen/cuda_emitter.cc,
// vec4_kernel), with the last n % 4 elements one per thread; a guarded read (a window of a
// larger array) keeps the whole kernel on the one-element path.
TEST_CASE("element-wise: 16-byte accesses and their tail agree with the reference",
          "[cuda][elementwise]") {
  on_cuda();
  for (int64_t n : {1, 3, 4, 5, 8, 4099}) {
    INFO("n " << n);
    Var x = randn({n}, 7);
    Var i = arange(n, DType::Int32);
    check_against_reference({x * 2.0 + 1.0, i * 3 - 1, where(x > 0.0, i, i * 2)});
  }
  Var a = rand({64, 48}, 8), big = rand({64, 50}, 9);
  Var window = reindex(big, {64, 48}, {"i0", "i1"});
  check_against_reference({a * 2.0 + 1.0, window * 2.0, a + window});
}

TEST_CASE("row reductions: one block per row, fused softmax and layer norm", "[cuda][reduce]") {
  on_cuda();
  // Rows whose length is a multiple of 4 are read 16 bytes at a time (row_reduce_vec4); others
  // one value at a time.
  for (int64_t cols : {scaled(4096, 300), scaled(4099, 301)}) {
    INFO("cols " << cols);
    Var x = randn({scaled(64, 9), cols}, 6);
    check_against_reference({sum(x, {1}), max(x, {1}), min(x, {1}), mean(x, {1}), softmax(x, 1),
                             (x - mean(x, {1}, true)) / sqrt(mean(x * x, {1}, true) + 1e-5)});
  }
  const int64_t cols = scaled(4099, 300);
  Var x = randn({scaled(64, 9), cols}, 6);
  // Rows too short for a block: one thread per output instead.
  Var t = randn({scaled(5000, 700), 3}, 7);
  check_against_reference({sum(t, {1}), softmax(t, 1)});
  Var xi = cast(x * 100.0, DType::Int32);
  check_against_reference({sum(xi, {1}), max(xi, {1}), sum(x > 0.0, {1})});
}

TEST_CASE("column reductions: strips of 32 columns, tall inputs split across blocks",
          "[cuda][reduce]") {
  on_cuda();
  Var tall = randn({scaled(4096, 600), 70}, 8);  // split: partials combined by a second kernel
  Var wide = randn({40, scaled(3000, 100)}, 9);  // one block row per strip
  check_against_reference({sum(tall, {0}), max(tall, {0}), mean(tall, {0}), sum(wide, {0}),
                           min(wide, {0}), prod(wide * 0.01 + 1.0, {0})});
  Var narrow = randn({500, 5}, 10);  // fewer than 32 columns: block rows
  check_against_reference({sum(narrow, {0})});
  Var three = randn({6, 300, 40}, 11);  // a middle axis
  check_against_reference({sum(three, {1}), sum(three, {0, 1})});
}

TEST_CASE("reductions over everything: grid-wide partials, fused into their consumer",
          "[cuda][reduce]") {
  on_cuda();
  Var x = randn({scaled(1 << 20, 4000) + 3}, 12);
  check_against_reference({sum(x), max(x), min(x), mean(x), x - mean(x), sum(x > 0.0)});
  Var e = zeros({0, 4});
  check_against_reference({sum(e), max(e, {0})});
}

TEST_CASE("matmul and conv2d: tiled kernels, both tile sizes, with an epilogue", "[cuda][matmul]") {
  on_cuda();
  Var a = rand({scaled(300, 130), 70}, 13), b = rand({70, scaled(260, 131)}, 14);
  check_against_reference({matmul(a, b), relu(matmul(a, b) - 10.0)});
  Var c = rand({40, 33}, 15), d = rand({33, 50}, 16);
  check_against_reference({matmul(c, d)});
  Var e = rand({3, 20, 9}, 17), f = rand({9, 18}, 18);  // batched, small k
  check_against_reference({matmul(e, f)});
  Var x = rand({2, 8, 21, 21}, 19), w = rand({16, 8, 3, 3}, 20);
  check_against_reference({conv2d(x, w, 1, 1), conv2d(x, w, 2, 0, 2), max_pool2d(x, 3, 2, 1)});
}

TEST_CASE("matmul with an operand prologue: a layer norm and a softmax staged per element",
          "[cuda][matmul]") {
  on_cuda();
  Var x = rand({3, scaled(70, 20), 33}, 21), w = rand({33, scaled(90, 40)}, 22);
  Var xc = x - mean(x, {2}, true);
  check_against_reference({matmul(xc / sqrt(mean(xc * xc, {2}, true) + 1e-5) * 2.0 + 1.0, w)});
  Var s = rand({4, scaled(64, 24), 40}, 23), v = rand({4, 40, 16}, 24);
  check_against_reference({matmul(softmax(s, 2), v)});
}

TEST_CASE("reindex_reduce with colliding targets: atomics on every dtype", "[cuda][scatter]") {
  on_cuda();
  Var y = randn({scaled(20000, 900)}, 21);
  Var yi = cast(y * 50.0, DType::Int32), yl = cast(y * 50.0, DType::Int64);
  Var yd = cast(y, DType::Float64), yb = y > 0.5;
  std::vector<Var> out;
  for (ReduceOp op : {ReduceOp::Add, ReduceOp::Max, ReduceOp::Min})
    for (Var v : {y, yi, yl, yd, yb}) out.push_back(reindex_reduce(v, op, {7}, {"i0%7"}));
  out.push_back(reindex_reduce(y * 0.001 + 1.0, ReduceOp::Mul, {7}, {"i0%7"}));
  out.push_back(reindex_reduce(yb, ReduceOp::Mul, {7}, {"i0%7"}));
  out.push_back(reindex_reduce(y, ReduceOp::Add, {9}, {"i0%11-1"}, {"i0%3==0"}));
  check_against_reference(out);
}

TEST_CASE("jit on the GPU: trace once, replay with new buffers, CPU plans stay apart",
          "[cuda][jit]") {
  on_cuda();
  auto step = jit([](const Var& a, const Var& b) { return relu(matmul(a, b) + 0.5); }, "step");
  Var a = rand({20, 16}, 22), b = rand({16, 24}, 23);
  Var r1 = step(a, b);
  CHECK(r1.node()->data->device() == Device::CUDA);
  reset_stats();
  Var r2 = step(rand({20, 16}, 24), b);
  CHECK(stats().kernels_compiled == 0);
  CHECK(stats().cuda_kernels_launched >= 1);
  check_against_reference({relu(matmul(a, b) + 0.5)});
  CHECK(r1.to_vector<float>() == relu(matmul(a, b) + 0.5).to_vector<float>());
  set_device(Device::CPU);
  Var r3 = step(a, b);  // a CPU trace of its own
  CHECK(r3.node()->data->device() == Device::CPU);
  CHECK(step.traces() == 2);
  std::vector<float> g = r1.to_vector<float>(), c = r3.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(c[i]).epsilon(1e-5));
  set_device(Device::CUDA);
}

TEST_CASE("threads evaluating on the GPU at once: kernels sharing device scratch stay apart",
          "[cuda][threads]") {
  on_cuda();
  const int64_t n = scaled(1 << 18, 3000);
  std::vector<Var> xs;
  for (int t = 0; t < 4; ++t) xs.push_back(full({n}, double(t + 1)));
  eval(xs);
  // A total over everything uses per-module partials: launches from 4 threads must not mix.
  auto total = jit([](const Var& x) { return sum(x) + sum(x, {0}, true) * 0.0; }, "total");
  std::vector<std::vector<float>> got(4);
  const std::vector<std::string> thrown = metajit_test::run_threads(4, [&](int t) {
    for (int r = 0; r < 5; ++r) got[size_t(t)] = total(xs[size_t(t)]).to_vector<float>();
  });
  CHECK(thrown == std::vector<std::string>(4));
  for (int t = 0; t < 4; ++t) {
    REQUIRE(got[size_t(t)].size() == 1);
    CHECK(got[size_t(t)][0] == Approx(double(n) * (t + 1)).epsilon(1e-6));
  }
}

TEST_CASE("METAJIT_RECORD writes CUDA kernels as cuda manifest entries", "[cuda][record]") {
  on_cuda();
  metajit_test::TempDir dir;
  const std::filesystem::path manifest = dir.path() / "used.json";
  metajit_test::ScopedEnv record("METAJIT_RECORD", manifest.string());
  Var x = rand({9, 7}, 31);
  // A structure no other case of this suite uses, so this process meets it here first.
  Var y = minimum(tanh(x) * 3.0, cos(x)) - floor(x * 4.0);
  check_against_reference({y});
  std::vector<ManifestEntry> entries = read_manifest(manifest);
  REQUIRE_FALSE(entries.empty());
  for (const ManifestEntry& e : entries) CHECK(e.backend == "cuda");
}

TEST_CASE("device memory the device has not is a typed Error naming the bytes and what is free",
          "[cuda][errors]") {
  REQUIRE(on_cuda());
  // 2^50 floats (4 PiB): a valid shape, more than any device (or emulating host) has.
  Var huge = zeros({int64_t(1) << 50});
  try {
    eval({huge});
    FAIL("expected an out-of-memory Error");
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK_THAT(m, Catch::Contains("out of memory") &&
                      Catch::Contains(std::to_string(int64_t(1) << 52) + " bytes") &&
                      Catch::Contains("device memory") &&
                      Catch::Contains(cuda_runtime()->emulated() ? "emulated" : "GiB free of"));
  }
  // The device still works afterwards (no sticky error, nothing half-allocated in use).
  Var small = sum(arange(10, DType::Float32));
  CHECK(small.item<float>() == 45.0f);
}
