// One rank of the distributed tests (tests/test_distributed.cc starts it under mpirun):
//   dist_worker CASE
// Each case checks its values against hand-computed ones and prints "ok CASE rank=R ..." on
// success; a failed check prints "FAIL: ..." and exits 1; a metajit::Error caught prints
// "error: MESSAGE" and exits 3. The fault cases (hang, throw, kill) end some rank on purpose.
#include <metajit/distributed.h>
#include <metajit/metajit.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "distributed/buffer_collectives.h"

using namespace metajit;
namespace {

// A 1-d float32 Var of `v`.
Var floats(const std::vector<float>& v) {
  return array(v, {int64_t(v.size())});
}

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::printf("FAIL: rank %d: %s\n", dist::rank(), what.c_str());
}

// Element i of rank r's input: small integers, exact in every dtype (Int8 sums of 3 ranks too),
// from -2 to 4 (from 0 to 6 for an unsigned type: `offset` 2).
template <typename T>
double input(int r, int64_t i) {
  const double offset = std::is_same_v<T, uint8_t> ? 2.0 : 0.0;
  return double((r * 3 + i) % 7) - 2.0 + offset;
}

template <typename T>
std::vector<T> values(int r, int64_t n) {
  std::vector<T> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(T(float(input<T>(r, i))));
  return v;
}

template <typename T>
double expected_reduce(ReduceOp op, int64_t i, int ranks, bool is_integer) {
  double acc = input<T>(0, i);
  for (int r = 1; r < ranks; ++r) {
    const double x = input<T>(r, i);
    acc = op == ReduceOp::Max ? std::max(acc, x) : op == ReduceOp::Min ? std::min(acc, x) : acc + x;
  }
  if (op != ReduceOp::Mean) return acc;
  return is_integer ? std::trunc(acc / ranks) : acc / ranks;
}

template <typename T>
int check_dtype(DType dt, bool is_integer) {
  const int me = dist::rank(), ranks = dist::world_size();
  const int64_t n = 37;
  int checked = 0;
  for (ReduceOp op : {ReduceOp::Add, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min}) {
    std::vector<T> v = values<T>(me, n);
    dist::all_reduce_buffer(v.data(), n, dt, op, std::string(dtype_name(dt)) + "[37]");
    for (int64_t i = 0; i < n; ++i) {
      const double want = double(float(T(float(expected_reduce<T>(op, i, ranks, is_integer)))));
      expect(double(float(v[size_t(i)])) == want,
             std::string("all_reduce ") + dtype_name(dt) + " op " + std::to_string(int(op)) +
                 " element " + std::to_string(i) + ": " +
                 std::to_string(double(float(v[size_t(i)]))) + " != " + std::to_string(want));
    }
    ++checked;
  }
  const int root = ranks - 1;
  std::vector<T> b = values<T>(me, n);
  dist::broadcast_buffer(b.data(), n, dt, root, std::string(dtype_name(dt)) + "[37]");
  expect(std::memcmp(b.data(), values<T>(root, n).data(), b.size() * sizeof(T)) == 0,
         std::string("broadcast ") + dtype_name(dt));
  std::vector<T> all(size_t(n * ranks));
  const std::vector<T> mine = values<T>(me, n);
  dist::all_gather_buffer(mine.data(), all.data(), n, dt, std::string(dtype_name(dt)) + "[37]");
  for (int r = 0; r < ranks; ++r)
    expect(std::memcmp(all.data() + r * n, values<T>(r, n).data(), size_t(n) * sizeof(T)) == 0,
           std::string("all_gather ") + dtype_name(dt) + " part of rank " + std::to_string(r));
  return checked + 2;
}

int check_bool() {
  const int me = dist::rank(), ranks = dist::world_size();
  // element 0: only rank 0 true; element 1: all true; element 2: none.
  uint8_t v[3] = {uint8_t(me == 0), 1, 0};
  uint8_t w[3] = {v[0], v[1], v[2]};
  dist::all_reduce_buffer(v, 3, DType::Bool, ReduceOp::Add, "bool[3]");
  dist::all_reduce_buffer(w, 3, DType::Bool, ReduceOp::Min, "bool[3]");
  expect(v[0] == 1 && v[1] == 1 && v[2] == 0, "bool any");
  expect(w[0] == (ranks == 1 ? 1 : 0) && w[1] == 1 && w[2] == 0, "bool all");
  return 2;
}

int case_collectives() {
  int checked = 0;
  checked += check_dtype<float>(DType::Float32, false);
  checked += check_dtype<double>(DType::Float64, false);
  checked += check_dtype<int32_t>(DType::Int32, true);
  checked += check_dtype<int64_t>(DType::Int64, true);
  checked += check_dtype<int16_t>(DType::Int16, true);
  checked += check_dtype<int8_t>(DType::Int8, true);
  checked += check_dtype<uint8_t>(DType::UInt8, true);
  checked += check_dtype<float16>(DType::Float16, false);
  checked += check_dtype<bfloat16>(DType::BFloat16, false);
  checked += check_bool();
  dist::barrier();
  // Larger than one piece of the polling's tight phase: 1M floats.
  std::vector<float> big(size_t(1) << 20, float(dist::rank() + 1));
  dist::all_reduce_buffer(big.data(), int64_t(big.size()), DType::Float32, ReduceOp::Add,
                          "float32[1048576]");
  const float sum = float(dist::world_size() * (dist::world_size() + 1) / 2);
  expect(std::all_of(big.begin(), big.end(), [&](float x) { return x == sum; }), "1M-element sum");
  if (failures) return 1;
  std::printf("ok collectives rank=%d size=%d checked=%d\n", dist::rank(), dist::world_size(),
              checked + 1);
  return 0;
}

// Rank 0 reduces 4 floats, the others 5.
int case_mismatch() {
  std::vector<float> v(dist::rank() == 0 ? 4 : 5, 1.0f);
  dist::all_reduce_buffer(v.data(), int64_t(v.size()), DType::Float32, ReduceOp::Add,
                          "float32[" + std::to_string(v.size()) + "]");
  std::printf("FAIL: rank %d: the mismatch went unnoticed\n", dist::rank());
  return 1;
}

// The last rank never issues its collective (it sleeps); the others time out.
int case_hang() {
  if (dist::rank() == dist::world_size() - 1) {
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return 0;
  }
  float x = 1;
  dist::all_reduce_buffer(&x, 1, DType::Float32, ReduceOp::Add, "float32[1]");
  std::printf("FAIL: rank %d: the missing rank went unnoticed\n", dist::rank());
  return 1;
}

// The last rank throws (uncaught) or kills itself before its collective.
int case_rank_dies(bool kill) {
  float x = 1;
  dist::barrier();
  if (dist::rank() == dist::world_size() - 1) {
    if (kill) ::raise(SIGKILL);
    throw std::runtime_error("worker failure on purpose");
  }
  dist::all_reduce_buffer(&x, 1, DType::Float32, ReduceOp::Add, "float32[1]");
  std::printf("FAIL: rank %d: the dead rank went unnoticed\n", dist::rank());
  return 1;
}

// Every rank evaluates the same new graph on a cache directory of their own machine: the
// kernels compile once on the machine (the cache's locks), whichever rank gets there first.
int case_compile_once() {
  const Var x = arange(1000, DType::Float32);
  const Var y = exp(sin(x) * 0.5) + cos(x * 0.25);
  const size_t kernels = plan({y}).size();
  reset_stats();
  eval({y});
  int64_t compiled[2] = {int64_t(stats().kernels_compiled), int64_t(stats().disk_hits)};
  dist::all_reduce_buffer(compiled, 2, DType::Int64, ReduceOp::Add, "int64[2]");
  if (dist::rank() == 0)
    std::printf("ok compile_once compiled_total=%lld disk_hits_total=%lld kernels=%zu ranks=%d\n",
                (long long)compiled[0], (long long)compiled[1], kernels, dist::world_size());
  return 0;
}

// Collectives on Vars: values, a jit function's replays (nothing compiled), gradients.
int case_graph() {
  const int me = dist::rank(), ranks = dist::world_size();
  const double sum_ranks = ranks * (ranks + 1) / 2.0;  // of (rank + 1)
  const Var x = full({4, 3}, me + 1.0);
  const double total = sum(dist::all_reduce(x * 2.0)).item<float>();
  expect(total == 2 * sum_ranks * 12, "all_reduce then sum: " + std::to_string(total));
  const Var b = dist::broadcast(arange(5, DType::Int32) + me, ranks - 1);
  expect(b.to_vector<int32_t>() ==
             std::vector<int32_t>{ranks - 1, ranks, ranks + 1, ranks + 2, ranks + 3},
         "broadcast from the last rank");
  const std::vector<float> g = dist::all_gather(full({2}, double(me))).to_vector<float>();
  for (int r = 0; r < ranks; ++r)
    expect(g.size() == size_t(2 * ranks) && g[size_t(2 * r)] == r && g[size_t(2 * r + 1)] == r,
           "all_gather part of rank " + std::to_string(r));
  // A leaf is reduced out of place: the result is the sum, the leaf keeps its values.
  const Var leaf = array(std::vector<float>(5, float(me + 1)), {5});
  expect(dist::all_reduce(leaf).to_vector<float>() == std::vector<float>(5, float(sum_ranks)),
         "all_reduce of a leaf");
  expect(leaf.to_vector<float>() == std::vector<float>(5, float(me + 1)),
         "the all_reduce wrote into the leaf it read");
  // Mean of an integer type divides in the node, truncating like `/`; of a float type in the
  // kernel after it (meta_ops/collective_nodes.h mean_over_ranks).
  const int32_t isum = int32_t(3 * sum_ranks - 2 * ranks);  // of 3 * rank + 1
  expect(dist::all_reduce(array(std::vector<int32_t>{3 * me + 1}, {1}), ReduceOp::Mean)
                 .item<int32_t>() == isum / ranks,
         "all_reduce Mean of an int32 value");
  auto f = jit([](const Var& v) { return dist::all_reduce(v * v, ReduceOp::Mean); }, "mean_square");
  for (int call = 0; call < 3; ++call) {
    reset_stats();
    const std::vector<float> y = f(full({3}, me + call + 0.0)).to_vector<float>();
    double want = 0;
    for (int r = 0; r < ranks; ++r) want += double(r + call) * (r + call);
    want /= ranks;
    expect(y.size() == 3 && y[0] == float(want),
           "jit call " + std::to_string(call) + ": " + std::to_string(y.empty() ? -1.0 : y[0]));
    if (call > 0) expect(stats().kernels_compiled == 0, "a jit replay compiled");
  }
  // L = sum(all_reduce(w * x)) on every rank: dL/dw on rank r is world_size * x_r.
  const Var w = floats({1, 2}), xr = floats({float(me + 1), -1.0f});
  const std::vector<float> dw = grad(sum(dist::all_reduce(w * xr)), {w})[0].to_vector<float>();
  expect(dw == std::vector<float>{float(ranks * (me + 1)), float(-ranks)}, "all_reduce gradient");
  if (failures) return 1;
  std::printf("ok graph rank=%d\n", me);
  return 0;
}

// Data-parallel training equals one process with the whole batch: each rank trains on its rows
// of a global batch with set_data_parallel; beside it, the same model trained here on all the
// rows without it. Parameters start different on each rank: rank 0's are broadcast.
struct Model {
  Var w, b;
};
Model make_model(double start) {
  std::vector<float> w(4 * 2);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(start + 0.1 * double(i));
  return {array(w, {4, 2}), array(std::vector<float>{float(start), -float(start)}, {2})};
}
// Row r of the global batch: inputs and targets, the same on every rank.
Var batch_x(int64_t first, int64_t rows) {
  return reshape(sin(cast(arange(rows * 4, DType::Int64) + first * 4, DType::Float32) * 0.37),
                 {rows, 4});
}
Var batch_y(int64_t first, int64_t rows) {
  return reshape(cos(cast(arange(rows * 2, DType::Int64) + first * 2, DType::Float32) * 0.21),
                 {rows, 2});
}
Var loss_of(const Model& m, const Var& x, const Var& y) {
  const Var d = matmul(x, m.w) + m.b - y;
  return mean(d * d);
}

bool close(const Var& a, const Var& b, const std::string& what) {
  const std::vector<float> u = a.to_vector<float>(), v = b.to_vector<float>();
  for (size_t i = 0; i < u.size(); ++i)
    if (std::fabs(u[i] - v[i]) > 2e-5f * (1 + std::fabs(v[i]))) {
      expect(false, what + " element " + std::to_string(i) + ": " + std::to_string(u[i]) +
                        " data-parallel, " + std::to_string(v[i]) + " whole batch");
      return false;
    }
  return true;
}

template <class Opt>
void train_both(const char* name, bool jit_steps, int64_t bucket_bytes,
                const std::function<Opt(std::vector<Var>)>& make) {
  const int me = dist::rank(), ranks = dist::world_size();
  const int64_t per_rank = 3;
  Model dp = make_model(1.0 + me), whole = make_model(1.0);
  Opt dp_opt = make({dp.w, dp.b}), whole_opt = make({whole.w, whole.b});
  dp_opt.set_data_parallel(true, bucket_bytes);
  expect(dp.w.to_vector<float>() == whole.w.to_vector<float>(), "parameters broadcast from rank 0");
  auto dp_step = dp_opt.jit_step([&](const Var& x, const Var& y) { return loss_of(dp, x, y); });
  auto whole_step =
      whole_opt.jit_step([&](const Var& x, const Var& y) { return loss_of(whole, x, y); });
  for (int step = 0; step < 4; ++step) {
    const int64_t first = step * per_rank * ranks;
    const Var x = batch_x(first + me * per_rank, per_rank),
              y = batch_y(first + me * per_rank, per_rank);
    const Var gx = batch_x(first, per_rank * ranks), gy = batch_y(first, per_rank * ranks);
    if (jit_steps) {
      dp_step(x, y);
      whole_step(gx, gy);
    } else {
      dp_opt.step(loss_of(dp, x, y));
      whole_opt.step(loss_of(whole, gx, gy));
    }
  }
  const std::string what = std::string(name) + (jit_steps ? " jit_step" : " step") + " bucket " +
                           std::to_string(bucket_bytes);
  close(dp.w, whole.w, what + " w");
  close(dp.b, whole.b, what + " b");
}

int case_train() {
  for (bool jit_steps : {false, true})
    for (int64_t bucket : {int64_t(16), int64_t(25) << 20}) {
      train_both<SGD>("SGD", jit_steps, bucket,
                      [](std::vector<Var> p) { return SGD(p, 0.1, 0.9); });
      train_both<Adam>("Adam", jit_steps, bucket, [](std::vector<Var> p) { return Adam(p, 0.05); });
    }
  if (failures) return 1;
  std::printf("ok train rank=%d\n", dist::rank());
  return 0;
}

// The gradient all-reduces overlap the backward: a 3-layer MLP trained data-parallel, one
// bucket per weight, three jit steps. Prints the counters and a digest of the final weights'
// bytes, which the test compares with a run under METAJIT_DIST_OVERLAP=0.
int case_overlap() {
  const int me = dist::rank();
  std::vector<Var> w = {randn({8, 16}, 1) * 0.5, randn({16, 16}, 2) * 0.3, randn({16, 4}, 3) * 0.3};
  eval(w);
  SGD opt(w, 0.05, 0.9);
  opt.set_data_parallel(true, 4);
  auto step = opt.jit_step([&](const Var& x, const Var& y) {
    const Var d = matmul(relu(matmul(relu(matmul(x, w[0])), w[1])), w[2]) - y;
    return mean(d * d);
  });
  step(randn({16, 8}, 100 + uint64_t(me)), randn({16, 4}, 200 + uint64_t(me)));  // traced
  reset_stats();
  for (uint64_t s = 1; s < 4; ++s)
    step(randn({16, 8}, 100 + 7 * s + uint64_t(me)), randn({16, 4}, 200 + 7 * s + uint64_t(me)));
  const Stats st = stats();
  uint64_t digest = 1469598103934665603ull;  // FNV-1a over the weights' bytes
  for (const Var& v : w)
    for (float f : v.to_vector<float>()) {
      uint32_t bits = 0;
      std::memcpy(&bits, &f, sizeof bits);
      for (int b = 0; b < 4; ++b) digest = (digest ^ ((bits >> (8 * b)) & 0xff)) * 1099511628211ull;
    }
  std::printf("overlap rank=%d collectives=%llu beside=%llu compiled=%llu weights=%016llx\n", me,
              (unsigned long long)st.collectives_run,
              (unsigned long long)st.kernels_during_collectives,
              (unsigned long long)st.kernels_compiled, (unsigned long long)digest);
  // Collectives that differ across ranks, found on the collective thread: an Error where the
  // evaluation waits for it, on every rank.
  const Var mine = dist::all_reduce(randn({me == 0 ? 4 : 5}, 9) * 2.0) * 3.0;
  try {
    eval({mine, sum(randn({64, 64}, 10) * 3.0)});
    expect(false, "overlap: a mismatched collective went unnoticed");
  } catch (const metajit::Error& e) {
    const std::string what = e.what();
    expect(what.find("ranks issued different collectives") != std::string::npos,
           "overlap: mismatch message: " + what);
    std::printf("overlap rank=%d mismatch: %s\n", me, what.c_str());
  }
  if (failures) return 1;
  std::printf("ok overlap rank=%d\n", me);
  return 0;
}

// dist::shard: every rank's share gathered; rank 0 checks they cover 0..n-1.
int case_shard() {
  for (bool drop_last : {false, true}) {
    const int64_t n = 11;
    const std::vector<int64_t> mine = dist::shard(n, 1234, 3, true, drop_last);
    std::vector<int64_t> all(mine.size() * size_t(dist::world_size()));
    dist::all_gather_buffer(mine.data(), all.data(), int64_t(mine.size()), DType::Int64,
                            "int64 share");
    const std::set<int64_t> distinct(all.begin(), all.end());
    const int64_t ranks = dist::world_size();
    const int64_t want_total = drop_last ? n / ranks * ranks : (n + ranks - 1) / ranks * ranks;
    expect(int64_t(all.size()) == want_total, "shard total");
    expect(int64_t(distinct.size()) == std::min(n, want_total), "shard distinct");
    expect(*distinct.rbegin() < n && *distinct.begin() >= 0, "shard range");
    if (dist::rank() == 0)
      std::printf("shard drop_last=%d share=%zu total=%zu distinct=%zu\n", int(drop_last),
                  mine.size(), all.size(), distinct.size());
  }
  if (failures) return 1;
  std::printf("ok shard rank=%d\n", dist::rank());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(
        stderr,
        "usage: dist_worker "
        "collectives|graph|train|overlap|mismatch|hang|throw|kill|compile_once|shard\n");
    return 2;
  }
  const std::string c = argv[1];
  dist::init();
  try {
    int rc = 2;
    if (c == "collectives")
      rc = case_collectives();
    else if (c == "mismatch")
      rc = case_mismatch();
    else if (c == "hang")
      rc = case_hang();
    else if (c == "throw")
      rc = case_rank_dies(false);
    else if (c == "kill")
      rc = case_rank_dies(true);
    else if (c == "compile_once")
      rc = case_compile_once();
    else if (c == "shard")
      rc = case_shard();
    else if (c == "graph")
      rc = case_graph();
    else if (c == "train")
      rc = case_train();
    else if (c == "overlap")
      rc = case_overlap();
    std::fflush(stdout);
    return rc;
  } catch (const metajit::Error& e) {
    std::printf("error: %s\n", e.what());
    std::fflush(stdout);
    return 3;
  }
}
