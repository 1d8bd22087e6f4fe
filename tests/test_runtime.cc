// Runtime pieces: the caching allocator, stats()/reset_stats(), eval() semantics (realized
// Vars, shared inputs, several outputs), and evaluation from several threads.
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <thread>

#include "base/buffer.h"
#include "cache/cache_store.h"
#include "meta_ops/collective_nodes.h"
#include "runtime/collective_runner.h"
#include "support/files.h"
#include "support/reference_check.h"
#include "support/scoped_env.h"
#include "support/threads.h"

using namespace metajit;

TEST_CASE("the allocator reuses freed blocks and tracks bytes in use and peak", "[allocator]") {
  const uint64_t base = allocator_stats().bytes_in_use;
  void* first;
  {
    BufferPtr a = allocate_buffer(1000);
    first = a->data();
    CHECK(allocator_stats().bytes_in_use == base + 1000);
    CHECK(reinterpret_cast<uintptr_t>(first) % 64 == 0);
  }
  CHECK(allocator_stats().bytes_in_use == base);
  BufferPtr b = allocate_buffer(900);  // same 1024-byte bin: the freed block comes back
  CHECK(b->data() == first);
  reset_allocator_peak();
  CHECK(allocator_stats().peak_bytes == allocator_stats().bytes_in_use);
  { BufferPtr c = allocate_buffer(5000); }
  CHECK(allocator_stats().peak_bytes >= allocator_stats().bytes_in_use + 5000);
  BufferPtr empty = allocate_buffer(0);
  CHECK(empty->data() != nullptr);
}

TEST_CASE("intermediates are freed once their last reader has run", "[runtime]") {
  Var x = rand({256, 256}, 1);
  eval({x});
  const uint64_t before = stats().bytes_in_use;
  Var m = max(x, {1}, true);     // stored intermediate (read through a broadcast)
  Var y = sum(exp(x - m), {1});  // output: 256 floats
  eval({y});
  CHECK(stats().bytes_in_use == before + 256 * 4);
}

TEST_CASE("stats count launches and reset_stats zeroes them", "[runtime]") {
  Var x = rand({4, 4}, 2);
  eval({x});
  reset_stats();
  CHECK(stats().kernels_launched == 0);
  eval({x + 1.0, x * 2.0});
  CHECK(stats().kernels_launched == 2);
  eval({x});  // already realized: nothing runs
  CHECK(stats().kernels_launched == 2);
}

TEST_CASE("eval of several outputs sharing work, and of realized inputs", "[runtime]") {
  Var x = rand({6, 5}, 3);
  Var e = exp(x);
  Var a = e + 1.0, b = sum(e, {0}), c = e;
  check_against_reference({a, b, c});
  // Evaluated Vars become leaves: later graphs read them without recomputing.
  reset_stats();
  Var d = c * 2.0;
  check_against_reference({d});
  CHECK(stats().kernels_launched == 1);
}

TEST_CASE("0-d and zero-size values", "[runtime]") {
  Var s = full({}, 3.5);
  CHECK(s.item<float>() == 3.5f);
  Var z = zeros({0, 3});
  CHECK((z + 1.0).to_vector<float>().empty());
  CHECK(sum(z).item<float>() == 0.0f);
  CHECK(max(z, {0}).to_vector<float>().size() == 3);
}

TEST_CASE("eval from several threads", "[runtime][threads]") {
  std::vector<int> ok(4, 0);
  const std::vector<std::string> thrown = metajit_test::run_threads(4, [&](int t) {
    for (int i = 0; i < 20; ++i) {
      Var x = full({16}, double(t));
      float v = sum(x * 2.0 + 1.0).item<float>();
      ok[t] += v == 16.0f * (2.0f * float(t) + 1.0f);
    }
  });
  CHECK(thrown == std::vector<std::string>(4));
  CHECK(ok == std::vector<int>(4, 20));
}

TEST_CASE("threads needing the same new kernels compile each once", "[runtime][threads][cache]") {
  // A fresh cache directory, so that the kernels below are new to the disk as well.
  metajit_test::TempDir dir;
  metajit_test::ScopedEnv cache("METAJIT_CACHE_DIR", dir.path().string());
  // Structures no other test builds: 4-D inputs through a chain of rarely combined ops.
  auto build = [](double s) {
    Var x = full({2, 3, 2, 2}, s);
    return std::vector<Var>{sum(floor(tanh(x) * 3.0 + cos(x)), {0, 3}),
                            max(sigmoid(x) - abs(x), {1, 2})};
  };
  std::vector<HostTensor> want = interpret(build(0.5));
  reset_stats();
  std::vector<int> ok(8, 0);
  const std::vector<std::string> thrown = metajit_test::run_threads(8, [&](int t) {
    std::vector<Var> outs = build(0.5);
    eval(outs);
    auto close = [](const std::vector<float>& got, const std::vector<float>& ref) {
      if (got.size() != ref.size()) return false;
      for (size_t i = 0; i < got.size(); ++i)
        if (!(std::fabs(got[i] - ref[i]) <= 1e-5f * std::max(1.0f, std::fabs(ref[i]))))
          return false;
      return true;
    };
    ok[t] = close(outs[0].to_vector<float>(), want[0].as<float>()) &&
            close(outs[1].to_vector<float>(), want[1].as<float>());
  });
  CHECK(thrown == std::vector<std::string>(8));
  CHECK(ok == std::vector<int>(8, 1));
  Stats s = stats();
  CHECK(s.kernels_compiled == 2);
  CHECK(s.kernels_launched == 16);
  CHECK(s.memory_hits + s.disk_hits == 14);
}

TEST_CASE("memory hits reach the persistent cache statistics", "[runtime][cache]") {
  metajit_test::TempDir dir;
  metajit_test::ScopedEnv cache("METAJIT_CACHE_DIR", dir.path().string());
  auto f = [](double s) { return sum(exp(full({3, 5}, s)) * 0.5, {1}); };
  f(1.0).to_vector<float>();                                  // compiled (or found on disk)
  for (int i = 0; i < 3; ++i) f(2.0 + i).to_vector<float>();  // memory hits, not yet written
  // The next miss writes the pending memory hits with its own counters.
  sum(sqrt(full({3, 5, 2}, 4.0)) - 1.0, {0, 2}).to_vector<float>();
  CHECK(CacheStore(dir.path()).read_counters().memory_hits >= 3);
}

namespace {

// A stand-in for the distributed layer's runner (runtime/collective_runner.h): an all_reduce
// over two ranks holding the same values (every element doubled), slow enough that the kernels
// beside it run first; a 3-element one fails as a mismatch would.
void doubling_runner(const CollectiveCall& call, const void* in, void* out) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (call.count == 3) throw Error("fake collective of " + call.what + " failed");
  const float* from = static_cast<const float*>(in);
  float* to = static_cast<float*>(out);
  for (int64_t i = 0; i < call.count; ++i) to[i] = from[i] * 2;
}

struct OverlappingRunner {
  OverlappingRunner() : before(collective_runner()) {
    set_collective_runner(&doubling_runner);
    set_collective_overlap(true);
  }
  ~OverlappingRunner() {
    set_collective_overlap(false);
    set_collective_runner(before);
  }
  CollectiveRunner before;
};

}  // namespace

TEST_CASE("collectives run on the collective thread beside the kernels that do not need them",
          "[runtime]") {
  OverlappingRunner installed;
  const Var a = arange(1000, DType::Float32) * 0.5;
  const Var reduced = collective_node(CollectiveKind::AllReduce, a, ReduceOp::Add, 0, 0, 2);
  const Var after = reduced * 3.0 + 1.0;
  const Var beside = sum(randn({256, 256}, 7) * 3.0);  // needs no collective
  const Var beside_ref = sum(randn({256, 256}, 7) * 3.0);
  reset_stats();
  eval({beside, after});  // beside's kernel comes after a's in the plan, before after's
  const Stats s = stats();
  CHECK(s.collectives_run == 1);
  CHECK(s.kernels_during_collectives >= 1);
  const std::vector<float> got = after.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == float(i) * 0.5f * 2 * 3 + 1);
  CHECK(beside.item<float>() == beside_ref.item<float>());
  // An error on the collective thread is the evaluation's, and the runtime goes on.
  const Var bad = collective_node(CollectiveKind::AllReduce, arange(3, DType::Float32) + 1.0,
                                  ReduceOp::Add, 0, 0, 2) * 2.0;
  CHECK_THROWS_WITH(eval({sum(randn({64, 64}, 8)), bad}),
                    Catch::Matchers::Contains("fake collective of float32[3] failed"));
  const Var again = collective_node(CollectiveKind::AllReduce, arange(4, DType::Float32),
                                    ReduceOp::Add, 0, 0, 2) + 1.0;
  CHECK(again.to_vector<float>() == std::vector<float>{1, 3, 5, 7});
}
