// eval()'s program cache (runtime/program_cache.h): a repeated graph structure reuses its
// program, and anything that changes the plan -- a scalar constant, a shape, an input's
// dtype, how nodes connect, the configuration -- does not.
#include <metajit/metajit.h>

#include <catch2/catch.hpp>

#include "support/reference_check.h"
#include "support/scoped_env.h"

using namespace metajit;

TEST_CASE("a repeated structure reuses its program with new leaves", "[program_cache]") {
  Var a = rand({2, 3}, 1), b = rand({2, 3}, 2), c = rand({2, 3}, 3);
  eval({a, b, c});
  check_against_reference(a * b + c);  // plans, compiles if needed
  reset_stats();
  for (uint64_t seed = 10; seed < 15; ++seed) {
    Var x = rand({2, 3}, seed), y = rand({2, 3}, seed + 100), z = rand({2, 3}, seed + 200);
    eval({x, y, z});
    Var r = x * y + z;
    const std::vector<float> got = r.to_vector<float>(), xv = x.to_vector<float>(),
                             yv = y.to_vector<float>(), zv = z.to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i)
      CHECK(got[i] == Approx(xv[i] * yv[i] + zv[i]).epsilon(1e-6));  // FMA or not
  }
  const Stats s = stats();
  CHECK(s.kernels_compiled == 0);
  CHECK(s.disk_hits == 0);
  CHECK(s.memory_hits >= 5);
  CHECK(s.kernels_launched == 5);
}

TEST_CASE("what changes the plan is never served a stale program", "[program_cache]") {
  Var x = rand({4, 5}, 7);
  eval({x});
  const std::vector<float> xv = x.to_vector<float>();
  // Scalars are folded or passed as arguments: each value gives its own result.
  for (double k : {2.0, 3.0, -1.5, 0.0}) {
    const std::vector<float> got = (x * k).to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == float(xv[i] * float(k)));
  }
  // Shapes and dtypes.
  for (int64_t n : {1, 3, 8}) {
    Var y = rand({n, 5}, uint64_t(n));
    check_against_reference(sum(y * y, {1}));
    check_against_reference(sum(cast(y, DType::Float64) * 2.0, {1}));
  }
  // Connections: a*a and a*b have the same ops.
  Var b = rand({4, 5}, 8);
  check_against_reference(x * x);
  check_against_reference(x * b);
  check_against_reference(b * x);
  // The configuration: O0 plans one kernel per meta-op.
  Var u = rand({3, 3}, 9);
  eval({u});
  reset_stats();
  eval({exp(u) * 2.0 + 1.0});
  const uint64_t fused = stats().kernels_launched;
  {
    metajit_test::ScopedEnv o0("METAJIT_OPT_LEVEL", "0");
    reset_stats();
    check_against_reference(exp(u) * 2.0 + 1.0);
    CHECK(stats().kernels_launched > fused);
  }
  reset_stats();
  eval({exp(u) * 2.0 + 1.0});
  CHECK(stats().kernels_launched == fused);
}
