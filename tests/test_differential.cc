// Differential testing: random valid graphs (support/random_graph.h), evaluated by the compiled
// kernels and by the reference interpreter (support/reference_check.h), must agree.
//
// Each graph comes from std::mt19937_64 seeded with its number, so a failure is reproduced
// by its seed alone:
//   METAJIT_DIFF_SEED=1234 test_differential "[diff-seed]"
// runs graph 1234 and prints it as C++. METAJIT_DIFF_GRAPHS=N changes how many graphs each
// batch runs (default 50; six batches, so ctest can run them in parallel). N must be a whole
// number of at least 1: anything else fails the batch, which never passes having checked no
// graph, and each batch asserts that it checked all N.
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "support/random_graph.h"
#include "support/reference_check.h"

using namespace metajit;

namespace {
using metajit_test::GraphGenerator;

// Builds graph `seed` and checks its outputs against the reference. Failures name the seed
// and print the graph as C++. Returns whether the outputs were compared with the reference
// (false: building the graph or evaluating it threw, a failure reported here).
bool run_graph(uint64_t seed, bool print = false) {
  GraphGenerator gen(seed);
  std::vector<Var> outs;
  try {
    outs = gen.build();
  } catch (const std::exception& e) {
    FAIL_CHECK("seed " << seed << ": building the graph threw: " << e.what() << "\n"
                       << gen.listing());
    return false;
  }
  if (print) std::cout << "seed " << seed << ":\n" << gen.listing() << std::flush;
  INFO("seed " << seed << " (rerun: METAJIT_DIFF_SEED=" << seed
               << " test_differential \"[diff-seed]\")\n"
               << gen.listing());
  try {
    // Sometimes an intermediate is evaluated (and checked) first: the outputs' graph then
    // reads it as a realized leaf in the middle of the graph.
    if (gen.staged()) {
      INFO("stage 1: evaluating " << gen.staged_name() << " first");
      check_against_reference(std::vector<Var>{*gen.staged()});
    }
    check_against_reference(outs);
  } catch (const std::exception& e) {
    FAIL_CHECK("evaluation threw: " << e.what());
    return false;
  }
  return true;
}

// The whole number `text` spells (decimal digits only); nullopt for anything else: missing,
// empty, signs, spaces, other characters, or too large for 64 bits.
std::optional<uint64_t> whole_number(const char* text) {
  if (!text || !*text) return std::nullopt;
  uint64_t n = 0;
  for (const char* c = text; *c; ++c) {
    if (*c < '0' || *c > '9') return std::nullopt;
    const uint64_t digit = uint64_t(*c - '0');
    if (n > (std::numeric_limits<uint64_t>::max() - digit) / 10) return std::nullopt;
    n = n * 10 + digit;
  }
  return n;
}

// Graphs per batch: METAJIT_DIFF_GRAPHS, 50 when unset. A value that would make the batch check
// nothing (0, not a number) ends the test with a failure that says so.
constexpr uint64_t kMaxGraphsPerBatch = 100000;  // seeds of batch b are b * 100000 + k
int graphs_per_batch() {
  const char* env = std::getenv("METAJIT_DIFF_GRAPHS");
  if (!env) return 50;
  const std::optional<uint64_t> n = whole_number(env);
  if (!n || *n < 1 || *n > kMaxGraphsPerBatch)
    FAIL("METAJIT_DIFF_GRAPHS='" << env << "': expected the number of random graphs per batch, a "
                                 << "whole number from 1 to " << kMaxGraphsPerBatch
                                 << " (unset: 50)");
  return int(*n);
}

void run_batch(int batch) {
  const int n = graphs_per_batch();
  int checked = 0;
  for (int k = 0; k < n; ++k) checked += run_graph(uint64_t(batch) * 100000 + uint64_t(k));
  INFO("batch " << batch << ": graphs compared with the reference interpreter");
  CHECK(checked == n);
}

}  // namespace

// Six batches of 50 graphs (seeds batch*100000 + k) so that ctest runs them in parallel.
TEST_CASE("differential: random graphs, batch 0", "[differential][slow]") {
  run_batch(0);
}
TEST_CASE("differential: random graphs, batch 1", "[differential][slow]") {
  run_batch(1);
}
TEST_CASE("differential: random graphs, batch 2", "[differential][slow]") {
  run_batch(2);
}
TEST_CASE("differential: random graphs, batch 3", "[differential][slow]") {
  run_batch(3);
}
TEST_CASE("differential: random graphs, batch 4", "[differential][slow]") {
  run_batch(4);
}
TEST_CASE("differential: random graphs, batch 5", "[differential][slow]") {
  run_batch(5);
}

// Hidden (not run by default): reruns one graph, METAJIT_DIFF_SEED=N, and prints it.
TEST_CASE("differential: one seed from METAJIT_DIFF_SEED", "[.][diff-seed]") {
  const char* env = std::getenv("METAJIT_DIFF_SEED");
  const std::optional<uint64_t> seed = whole_number(env);
  if (!seed)
    FAIL("METAJIT_DIFF_SEED='" << (env ? env : "") << "': expected the seed of one graph, a whole "
                               << "number (the failure message of a batch names it)");
  CHECK(run_graph(*seed, true));
}

// The generator itself: same seed, same graph; it really produces the ops it is meant to.
TEST_CASE("differential: the generator is deterministic and covers every op", "[differential]") {
  GraphGenerator a(42), b(42);
  a.build();
  b.build();
  CHECK(a.listing() == b.listing());
  std::string all;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    GraphGenerator g(seed);
    g.build();
    all += g.listing();
  }
  for (const char* op : {"reindex(",
                         "reindex_reduce(",
                         "reduce(",
                         "broadcast_to(",
                         "transpose(",
                         "reshape(",
                         "where(",
                         "cast(",
                         "exp(",
                         "floor(",
                         "logical_and(",
                         "pow(",
                         " / ",
                         " < ",
                         "maximum(",
                         "erf(",
                         "expm1(",
                         "log1p(",
                         "asin(",
                         "ReduceOp::Mean",
                         "%2",
                         "&&",
                         "DType::Bool",
                         "DType::Int8",
                         "DType::Float16",
                         "DType::BFloat16",
                         "array<float16>",
                         "array<bfloat16>"})
    CHECK(all.find(op) != std::string::npos);
  // Extras: leaf arrays of both dtypes with far values, integer values of the graph, reads in
  // indexes and in conditions, nested reads, and reindex_reduce targets that read them.
  for (const char* extras : {"// extra, int32", "// extra, int64", "INT64_MIN", "2147483647",
                             "@e0(", "@e1(", "(@e", ", {e0, e1})", ", {v", "<0 || @e", ")==i"})
    CHECK(all.find(extras) != std::string::npos);
  size_t reindex_reduce_reads = 0;
  for (size_t at = 0; (at = all.find("= reindex_reduce(", at)) != std::string::npos; ++at) {
    const std::string line = all.substr(at, all.find('\n', at) - at);
    reindex_reduce_reads += line.find("@e") != std::string::npos;
  }
  CHECK(reindex_reduce_reads >= 5);
}
