// Training beyond one process, the part built so far (issue 30; include/metajit/distributed.h):
// the world, the collectives on host buffers with their cross-rank check and deadline, and
// dist::shard. A plain start is checked in-process (a world of one); the rest runs
// tests/mpi/dist_worker under a real `mpirun` (OpenMPI, oversubscribed on this machine's cores)
// and checks each rank's own verdict ("ok ..." lines), the messages of the faults, how long a
// fault takes to end the job, and that no rank is left running.
#include <metajit/distributed.h>
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/buffer_collectives.h"
#include "meta_ops/collective_nodes.h"
#include "support/files.h"
#include "support/processes.h"
#include "support/remote_runs.h"
#include "support/skip.h"
#include "train/optimizer_core.h"

namespace fs = std::filesystem;
using metajit_test::occurrences;
using metajit_test::ProgramRun;
using metajit_test::RunEnv;
using namespace metajit;

namespace {

// A 1-d float32 Var of `v`.
Var floats(const std::vector<float>& v) {
  return array(v, {int64_t(v.size())});
}

std::string mpirun_path() {
  for (const char* p : {"/usr/bin/mpirun", "/usr/local/bin/mpirun"})
    if (fs::exists(p)) return p;
  return "";
}

// `dist_worker CASE` on `ranks` ranks under mpirun (as root too: the CI machines run tests as
// root), with `env` added; killed after `bound` seconds.
ProgramRun run_ranks(int ranks, const std::string& c, RunEnv env, double bound) {
  const std::string mpirun = mpirun_path();
  if (mpirun.empty()) metajit_test::skip_test("mpirun (openmpi-bin) is not installed");
  env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT", "1");
  env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  // Containers often forbid the cross-process reads of OpenMPI's shared-memory single copy.
  env.emplace_back("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
  static metajit_test::TempDir out;
  const fs::path output = out.path() / (c + "-" + std::to_string(ranks) + ".out");
  return metajit_test::run_program(
      {mpirun, "--oversubscribe", "--bind-to", "none", "-np", std::to_string(ranks),
       metajit_test::test_program("dist_worker"), c},
      env, output, bound);
}

// No process of `dist_worker CASE` is left (the launcher has reaped or killed every rank).
bool no_rank_left(const std::string& c) {
  const metajit_test::ProcessResult r =
      metajit_test::run_command("pgrep -f " + metajit_test::shell_quote("dist_worker " + c + "$"));
  return r.output.empty();
}

}  // namespace

TEST_CASE("a plain start is a world of one: rank 0, collectives are the identity", "[dist]") {
  CHECK(dist::rank() == 0);
  CHECK(dist::world_size() == 1);
  std::vector<float> v = {1.5f, -2.0f, 3.0f};
  dist::all_reduce_buffer(v.data(), 3, DType::Float32, ReduceOp::Mean, "float32[3]");
  CHECK(v == std::vector<float>{1.5f, -2.0f, 3.0f});
  dist::broadcast_buffer(v.data(), 3, DType::Float32, 0, "float32[3]");
  CHECK(v == std::vector<float>{1.5f, -2.0f, 3.0f});
  std::vector<float> all(3);
  dist::all_gather_buffer(v.data(), all.data(), 3, DType::Float32, "float32[3]");
  CHECK(all == v);
  dist::barrier();
  CHECK_THROWS_WITH(dist::broadcast_buffer(v.data(), 3, DType::Float32, 1, "float32[3]"),
                    Catch::Matchers::Contains("root 1 is not a rank"));
  uint8_t b[1] = {1};
  CHECK_THROWS_AS(dist::all_reduce_buffer(b, 1, DType::Bool, ReduceOp::Mean, "bool[1]"),
                  DTypeError);
}

TEST_CASE("collectives on Vars are graph nodes: kernels before and after, never compiled",
          "[dist]") {
  const Var x = arange(8, DType::Float32);
  const Var y = dist::all_reduce(x * 2.0 + 1.0);
  const Var z = exp(y * 0.1) * 3.0;
  // The kernel that writes the collective's input, then the one that reads its result.
  const std::vector<KernelInfo> kernels = plan({z});
  REQUIRE(kernels.size() == 2);
  for (const KernelInfo& k : kernels) CHECK(k.source.find("collective") == std::string::npos);
  CHECK(explain({z}).find("collective.all_reduce(add)") != std::string::npos);
  reset_stats();
  const std::vector<float> got = z.to_vector<float>();
  CHECK(stats().kernels_launched == 2);
  for (int i = 0; i < 8; ++i) CHECK(got[size_t(i)] == Approx(3 * std::exp(0.1 * (2 * i + 1))));
  // Requested itself, and beside a value that reads its input too (not in place).
  const Var a = arange(5, DType::Int64) * int64_t(3);
  const Var b = dist::broadcast(a, 0), c = a + int64_t(1);
  eval({b, c});
  CHECK(b.to_vector<int64_t>() == std::vector<int64_t>{0, 3, 6, 9, 12});
  CHECK(c.to_vector<int64_t>() == std::vector<int64_t>{1, 4, 7, 10, 13});
  const Var g = dist::all_gather(reshape(arange(6, DType::Float32), {3, 2}));
  CHECK(g.shape() == Shape{3, 2});
  CHECK(g.to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
  // Mean of a float value: the all_reduce by Add, its division by world_size in the kernel
  // that reads the result, which is still the second of two kernels.
  const Var m = exp(dist::all_reduce(x * 2.0 + 1.0, ReduceOp::Mean) * 0.1);
  CHECK(plan({m}).size() == 2);
  CHECK(explain({m}).find("collective.all_reduce(add)") != std::string::npos);
  CHECK(explain({m}).find("collective.all_reduce(mean)") == std::string::npos);
  CHECK(m.to_vector<float>()[3] == Approx(std::exp(0.7)));
  // Of a leaf: out of place, the leaf keeps its value.
  const Var leaf = floats({1, 2, 3});
  CHECK(dist::all_reduce(leaf, ReduceOp::Max).to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK(leaf.to_vector<float>() == std::vector<float>{1, 2, 3});
}

TEST_CASE("a jit function replays its collectives without tracing or compiling", "[dist]") {
  auto f = jit([](const Var& v) { return dist::all_reduce(v * v, ReduceOp::Mean) + 1.0; },
               "dist_mean_square");
  CHECK(f(floats({1, 2})).to_vector<float>() == std::vector<float>{2, 5});
  reset_stats();
  CHECK(f(floats({3, -4})).to_vector<float>() == std::vector<float>{10, 17});
  CHECK(stats().kernels_compiled == 0);
  CHECK(stats().kernels_launched == 2);
}

TEST_CASE("gradients through the collectives (a world of one)", "[dist]") {
  const Var w = floats({1, 2, 3});
  const Var x = floats({0.5f, -1, 2});
  const std::vector<Var> gs = grad(sum(dist::all_reduce(w * x)) + sum(dist::broadcast(w * w)) +
                                       sum(dist::all_gather(reshape(w, {3, 1}))),
                                   {w});
  // x + 2w + 1, each collective passing the gradient on unchanged in a world of one.
  CHECK(gs[0].to_vector<float>() == std::vector<float>{3.5f, 4, 9});
  CHECK_THROWS_WITH(grad(sum(dist::all_reduce(w, ReduceOp::Max)), {w}),
                    Catch::Matchers::Contains("all_reduce by max has no gradient"));
}

TEST_CASE("collectives on Vars refuse what they cannot do, naming it", "[dist]") {
  const Var x = floats({1, 2});
  CHECK_THROWS_WITH(dist::all_reduce(x, ReduceOp::Mul),
                    Catch::Matchers::Contains("valid ops are Add, Mean, Max and Min"));
  CHECK_THROWS_AS(dist::all_reduce(array<bool>(std::vector<bool>{true}, {1}), ReduceOp::Mean),
                  DTypeError);
  CHECK_THROWS_WITH(dist::broadcast(x, 1), Catch::Matchers::Contains("root 1 is not a rank"));
  CHECK_THROWS_AS(dist::all_gather(scalar(1.0, DType::Float32)), ShapeError);
  CHECK_THROWS_WITH(dist::all_reduce(Var()), Catch::Matchers::Contains("empty"));
}

TEST_CASE("a bucket's values are reduced as one buffer, laid end to end between kernels",
          "[dist]") {
  dist::init();
  const Var a = arange(6, DType::Float32) * 2.0;
  const Var b = reshape(arange(4, DType::Float32), {2, 2}) + 1.0, c = floats({7});
  const Var mean = all_reduce_flat({a, b, c}, ReduceOp::Mean, dist::rank(), dist::world_size());
  CHECK(mean.shape() == Shape{11});
  const Var after = mean * 3.0;
  // One collective of the three values; no kernel reads all three to join them: a's, b's and
  // the one after the collective (which also divides by world_size).
  const std::string e = explain({after});
  INFO(e);
  CHECK(occurrences(e, "between kernels") == 1);
  CHECK(e.find("collective.all_reduce(add) of %") != std::string::npos);
  CHECK(plan({after}).size() == 3);
  const std::vector<float> want = {0, 6, 12, 18, 24, 30, 3, 6, 9, 12, 21};
  CHECK(after.to_vector<float>() == want);
  // A value of the bucket that a kernel reads after the collective too (b), and one that only
  // the collective reads (a's kernel value): every result as computed one by one.
  const Var joined = all_reduce_flat({a, b}, ReduceOp::Add, dist::rank(), dist::world_size());
  const Var later = sum(b * 2.0);
  eval({joined, later});
  CHECK(joined.to_vector<float>() == std::vector<float>{0, 2, 4, 6, 8, 10, 1, 2, 3, 4});
  CHECK(later.item<float>() == 20.0f);
  CHECK_THROWS_WITH(grad(sum(mean), {c}), Catch::Matchers::Contains("no gradient here"));
}

namespace {

// What explain() says of a collective: the kernel after which it starts (the last that writes
// its inputs) and the first kernel that reads its result.
struct CollectiveSpan {
  std::string shape;
  int starts_after = -1, read_first_by = -1;
};
std::vector<CollectiveSpan> collective_spans(const std::string& explained) {
  std::vector<CollectiveSpan> spans;
  const std::regex line(R"(between kernels: %\d+ (\S+) = [^\n]*)");
  const std::regex kernel(R"(\(kernel (\d+)\))"), reader(R"(read first by kernel (\d+))");
  for (std::sregex_iterator it(explained.begin(), explained.end(), line), end; it != end; ++it) {
    CollectiveSpan span{(*it)[1], -1, -1};
    const std::string text = (*it)[0];
    for (std::sregex_iterator k(text.begin(), text.end(), kernel); k != end; ++k)
      span.starts_after = std::max(span.starts_after, std::stoi((*k)[1]));
    std::smatch m;
    if (std::regex_search(text, m, reader)) span.read_first_by = std::stoi(m[1]);
    spans.push_back(span);
  }
  return spans;
}

}  // namespace

TEST_CASE("gradient buckets start as their gradients exist, the last layer's first, kernels "
          "running between",
          "[dist]") {
  dist::init();
  const std::vector<Var> w = {randn({8, 16}, 1), randn({16, 16}, 2), randn({16, 4}, 3)};
  const Var x = randn({32, 8}, 4), y = randn({32, 4}, 5);
  const Var d = matmul(relu(matmul(relu(matmul(x, w[0])), w[1])), w[2]) - y;
  const std::vector<Var> grads = grad(mean(d * d), w);
  const std::vector<Var> mean_grads = detail::average_over_ranks(grads, 4);  // one per bucket
  std::vector<Var> updated;
  for (size_t i = 0; i < 3; ++i) updated.push_back(w[i] - mean_grads[i] * 0.1);
  const std::string e = explain(updated);
  INFO(e);
  const std::vector<CollectiveSpan> spans = collective_spans(e);
  REQUIRE(spans.size() == 3);
  auto span_of = [&](const std::string& shape) {
    for (const CollectiveSpan& s : spans)
      if (s.shape == shape) return s;
    FAIL("no collective of " << shape);
    return CollectiveSpan{};
  };
  const CollectiveSpan g1 = span_of("float32[128]"), g2 = span_of("float32[256]"),
                       g3 = span_of("float32[64]");
  // The graph's own order (from w1's update) put w1's bucket first and read each bucket at once.
  CHECK(g3.starts_after < g2.starts_after);
  CHECK(g2.starts_after < g1.starts_after);
  // w2's and w1's gradients are computed while w3's travels; the updates come after them all.
  CHECK(g3.read_first_by > g2.starts_after);
  CHECK(g2.read_first_by > g1.starts_after);
  // The same values as the step without buckets (a world of one: the mean is the gradient).
  for (size_t i = 0; i < 3; ++i)
    CHECK(updated[i].to_vector<float>() == (w[i] - grads[i] * 0.1).to_vector<float>());
}

TEST_CASE("set_data_parallel needs the distributed world, then averages in a world of one",
          "[dist]") {
  Var w = floats({1, 2}), w2 = floats({1, 2});
  SGD opt({w}, 0.5), plain({w2}, 0.5);
  CHECK_THROWS_WITH(opt.set_data_parallel(), Catch::Matchers::Contains("call dist::init() first"));
  dist::init();
  CHECK_THROWS_WITH(opt.set_data_parallel(true, 0), Catch::Matchers::Contains("bucket_bytes 0"));
  opt.set_data_parallel(true, 4);  // one gradient a bucket
  CHECK(opt.data_parallel());
  const Var x = floats({3, -1});
  for (int i = 0; i < 2; ++i) {
    opt.step(sum(w * w * x));
    plain.step(sum(w2 * w2 * x));
  }
  CHECK(w.to_vector<float>() == w2.to_vector<float>());
  CHECK(explain({sum(w * x)}).find("all_reduce") == std::string::npos);  // only in steps
}

TEST_CASE("shard deals an epoch like DistributedSampler: seeded, every index once", "[dist]") {
  const std::vector<int64_t> a = dist::shard(1000, 7, 0), again = dist::shard(1000, 7, 0);
  CHECK(a == again);
  CHECK(a != dist::shard(1000, 7, 1));  // a new epoch, a new order
  CHECK(a != dist::shard(1000, 8, 0));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) REQUIRE(sorted[size_t(i)] == i);
  std::vector<int64_t> in_order = dist::shard(5, 7, 0, false);
  CHECK(in_order == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(dist::shard(0, 1, 0).empty());
  CHECK_THROWS_WITH(dist::shard(-1, 1, 0), Catch::Matchers::Contains("n = -1"));
  CHECK_THROWS_WITH(dist::shard(3, 1, -2), Catch::Matchers::Contains("epoch -2"));
}

TEST_CASE("collectives on 2 and 3 ranks give the hand-computed values of every dtype",
          "[process][mpi]") {
  for (int ranks : {2, 3}) {
    const ProgramRun r = run_ranks(ranks, "collectives", {}, 120);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(occurrences(r.output, "ok collectives rank=") == size_t(ranks));
    CHECK(occurrences(r.output, "FAIL") == 0);
    CHECK(r.output.find("fork()") == std::string::npos);
  }
}

TEST_CASE("different collectives on two ranks are an error on every rank naming both",
          "[process][mpi]") {
  const ProgramRun r = run_ranks(2, "mismatch", {}, 120);
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK(occurrences(r.output, "error: metajit::dist: ranks issued different collectives") == 2);
  CHECK(occurrences(r.output, "rank 0 issued all_reduce(add) float32[4] as its collective #1") ==
        2);
  CHECK(occurrences(r.output, "rank 1 issued all_reduce(add) float32[5] as its collective #1") ==
        2);
  CHECK(occurrences(r.output, "unnoticed") == 0);
}

TEST_CASE("a rank that never comes ends the others after METAJIT_DIST_TIMEOUT, naming it",
          "[process][mpi]") {
  const ProgramRun r = run_ranks(3, "hang", {{"METAJIT_DIST_TIMEOUT", "2"}}, 120);
  INFO(r.output);
  CHECK(r.exit_code != 0);
  CHECK(r.seconds < 30);  // 2 s of timeout, then the job ends (the sleeper would take 120)
  CHECK(occurrences(r.output,
                    "all_reduce(add) float32[1] (collective #1) timed out after 2 s: "
                    "rank 2 did not arrive (METAJIT_DIST_TIMEOUT)") == 2);
  CHECK(no_rank_left("hang"));
  WARN("a missing rank ended a 3-rank job in " << r.seconds << " s (timeout 2 s)");
}

TEST_CASE("a rank that throws or is killed ends the job at once, not at the timeout",
          "[process][mpi]") {
  for (const char* c : {"throw", "kill"}) {
    const ProgramRun r = run_ranks(2, c, {{"METAJIT_DIST_TIMEOUT", "300"}}, 120);
    INFO(c << ":\n" << r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.seconds < 60);
    if (std::string(c) == "throw")
      CHECK(r.output.find("rank 1 of 2: uncaught: worker failure on purpose; aborting the job") !=
            std::string::npos);
    CHECK(occurrences(r.output, "unnoticed") == 0);
    CHECK(no_rank_left(c));
    WARN("a rank that did '" << c << "' ended the job in " << r.seconds << " s");
  }
}

TEST_CASE("ranks on one machine compile each kernel once, through the shared disk cache",
          "[process][mpi]") {
  metajit_test::TempDir cache;
  const ProgramRun r =
      run_ranks(2, "compile_once", {{"METAJIT_CACHE_DIR", cache.path().string()}}, 300);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto f = metajit_test::line_fields(r.output, "ok compile_once");
  REQUIRE(f.count("kernels"));
  CHECK(f.at("kernels") >= 1);
  CHECK(f.at("compiled_total") == f.at("kernels"));  // once on the machine, not once a rank
  CHECK(f.at("compiled_total") + f.at("disk_hits_total") == 2 * f.at("kernels"));
  CHECK(r.output.find("fork()") == std::string::npos);  // OpenMPI's fork warning
}

TEST_CASE("collectives on Vars across 2 and 3 ranks: values, jit replays, gradients",
          "[process][mpi]") {
  for (int ranks : {2, 3}) {
    const ProgramRun r = run_ranks(ranks, "graph", {}, 180);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(occurrences(r.output, "ok graph rank=") == size_t(ranks));
    CHECK(occurrences(r.output, "FAIL") == 0);
  }
}

TEST_CASE("data-parallel training on 2 and 3 ranks equals one process with the whole batch",
          "[process][mpi]") {
  for (int ranks : {2, 3}) {
    const ProgramRun r = run_ranks(ranks, "train", {}, 300);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(occurrences(r.output, "ok train rank=") == size_t(ranks));
    CHECK(occurrences(r.output, "FAIL") == 0);
  }
}

TEST_CASE("on 2 ranks the gradient all-reduces run beside the backward's kernels, same bits",
          "[process][mpi]") {
  // Each rank's "overlap rank=R collectives=C beside=B compiled=K weights=D" line.
  auto lines = [](const ProgramRun& r) {
    std::vector<std::smatch> out;
    static const std::regex line(
        R"(overlap rank=(\d) collectives=(\d+) beside=(\d+) compiled=(\d+) weights=(\w+))");
    for (std::sregex_iterator it(r.output.begin(), r.output.end(), line), end; it != end; ++it)
      out.push_back(*it);
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a[1] < b[1]; });
    return out;
  };
  const ProgramRun overlapped = run_ranks(2, "overlap", {}, 180);
  const ProgramRun in_order = run_ranks(2, "overlap", {{"METAJIT_DIST_OVERLAP", "0"}}, 180);
  INFO(overlapped.output << "\n--- METAJIT_DIST_OVERLAP=0:\n" << in_order.output);
  REQUIRE(overlapped.exit_code == 0);
  REQUIRE(in_order.exit_code == 0);
  const auto a = lines(overlapped), b = lines(in_order);
  REQUIRE(a.size() == 2);
  REQUIRE(b.size() == 2);
  for (size_t r = 0; r < 2; ++r) {
    // Three replayed steps, three buckets each, nothing compiled; w2's and w1's gradient
    // kernels ran while the buckets before them travelled.
    CHECK(a[r][2] == "9");
    CHECK(a[r][4] == "0");
    CHECK(std::stoi(a[r][3]) >= 3);
    CHECK(b[r][2] == "9");
    CHECK(b[r][3] == "0");  // each collective done before the next kernel
    CHECK(a[r][5] == b[r][5]);  // the same weights, bit for bit
    CHECK(a[r][5] == a[0][5]);  // on every rank
  }
  // A mismatch found on the collective thread, rethrown where the evaluation waits for it.
  CHECK(occurrences(overlapped.output, "mismatch: metajit::dist: ranks issued different collectives") == 2);
  CHECK(occurrences(overlapped.output, "ok overlap rank=") == 2);
}

TEST_CASE("shard on 3 ranks: disjoint shares that cover every sample", "[process][mpi]") {
  const ProgramRun r = run_ranks(3, "shard", {}, 120);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(occurrences(r.output, "ok shard rank=") == 3);
  CHECK(r.output.find("shard drop_last=0 share=4 total=12 distinct=11") != std::string::npos);
  CHECK(r.output.find("shard drop_last=1 share=3 total=9 distinct=9") != std::string::npos);
}
