// Keys depend neither on values nor (by default) on shapes: a new size or a new scalar reuses
// the loaded kernel. METAJIT_SPECIALIZE_SHAPES=1 bakes shapes in.
#include <metajit/metajit.h>

#include <catch2/catch.hpp>

#include "support/reference_check.h"
#include "support/scoped_env.h"

using namespace metajit;

namespace {

Var selu(const Var& x) {
  return 1.05 * where(x > 0.0, x, 1.67 * exp(x) - 1.67);
}

}  // namespace

TEST_CASE("SELU at 1000 then 3000 elements compiles once", "[dynamic]") {
  Var a = randn({1000}, 1), b = randn({3000}, 2);
  eval({a, b});
  REQUIRE(plan({selu(a)}).size() == 1);
  CHECK(plan({selu(a)})[0].key == plan({selu(b)})[0].key);
  reset_stats();
  check_against_reference({selu(a)});
  const uint64_t compiled = stats().kernels_compiled, disk = stats().disk_hits;
  CHECK(compiled + disk == 1);  // compiled now, or found from an earlier run
  check_against_reference({selu(b)});
  CHECK(stats().kernels_compiled == compiled);
  CHECK(stats().disk_hits == disk);
  CHECK(stats().memory_hits >= 1);
}

TEST_CASE("x*2 then x*3 share one kernel", "[dynamic]") {
  Var x = rand({4, 5}, 3);
  eval({x});
  CHECK(plan({x * 2.0})[0].key == plan({x * 3.0})[0].key);
  reset_stats();
  std::vector<float> two = (x * 2.0).to_vector<float>();
  const uint64_t compiled = stats().kernels_compiled;
  std::vector<float> three = (x * 3.0).to_vector<float>();
  CHECK(stats().kernels_compiled == compiled);
  std::vector<float> xs = x.to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    CHECK(two[i] == xs[i] * 2.0f);
    CHECK(three[i] == xs[i] * 3.0f);
  }
}

TEST_CASE("batch sizes share kernels through broadcasting and reductions", "[dynamic]") {
  Var w = rand({8, 4}, 1), b = rand({4}, 2);
  for (int64_t batch : {1, 4, 8}) {
    Var x = rand({batch, 8}, uint64_t(batch));
    eval({x});
    INFO("batch " << batch);
    check_against_reference({relu(matmul(x, w) + b)});
  }
  Var x1 = rand({1, 8}, 5), x8 = rand({8, 8}, 6);
  CHECK(plan({relu(matmul(x1, w) + b)})[0].key == plan({relu(matmul(x8, w) + b)})[0].key);
}

TEST_CASE("METAJIT_SPECIALIZE_SHAPES=1 puts shapes into the key", "[dynamic]") {
  Var a = rand({10}, 1), b = rand({20}, 2);
  std::string generic = plan({a * 2.0})[0].key;
  CHECK(generic == plan({b * 2.0})[0].key);
  metajit_test::ScopedEnv spec("METAJIT_SPECIALIZE_SHAPES", "1");
  std::string ka = plan({a * 2.0})[0].key, kb = plan({b * 2.0})[0].key;
  CHECK(ka != kb);
  CHECK(ka != generic);
  check_against_reference({sqrt(a) * 2.0});
}
