// Gradient checks against central finite differences of metajit's own forward, shared by the
// autograd suites and the op suites (tests/test_autograd.cc, tests/test_model_ops.cc).
//
// Compile time matters (each distinct kernel is a g++ run): a check evaluates every perturbed
// input with the same graph as the gradient it checks (the loss and its gradients together), so
// the program cache replays the plan already compiled and the perturbations compile nothing.
#pragma once
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "support/reference_compare.h"

namespace metajit_test {

using namespace metajit;

// An input of a gradient check: a leaf of `dtype` holding `values`.
struct In {
  Shape shape;
  std::vector<double> values;
  DType dtype = DType::Float64;
};

inline Var leaf(const In& in) {
  REQUIRE(int64_t(in.values.size()) == numel_of(in.shape));
  if (in.dtype == DType::Float32)
    return array(std::vector<float>(in.values.begin(), in.values.end()), in.shape);
  REQUIRE(in.dtype == DType::Float64);
  return array(in.values, in.shape);
}

// The value `v` holds once stored in an input of `dtype`.
inline double stored(double v, DType dtype) {
  return dtype == DType::Float32 ? double(float(v)) : v;
}

// ---------------------------------------------------------------- finite differences

using LossFn = std::function<Var(const std::vector<Var>&)>;

struct FdOptions {
  double h = 1e-6;    // the step (float64 inputs; float32 inputs need a larger one)
  double tol = 1e-5;  // |grad - fd| <= tol * (1 + |fd|)
};

// Checks grad(f(xs), xs) (f's loss has any shape: sum(loss) is differentiated) against central
// differences (sum f(x + h e_j) - sum f(x - h e_j)) / 2h for every element of every input,
// all computed by metajit. Each perturbed point evaluates {loss, grads...} as the gradient
// itself did: one graph structure, so the program cache replays the compiled plan.
inline void check_gradients_or_throw(const std::string& name, const LossFn& f,
                                     const std::vector<In>& inputs, FdOptions opt) {
  std::vector<Var> xs;
  for (const In& in : inputs) xs.push_back(leaf(in));
  Var loss = f(xs);
  REQUIRE(is_float(loss.dtype()));
  std::vector<Var> g = grad(loss, xs);
  REQUIRE(g.size() == xs.size());
  std::vector<Var> all{loss};
  all.insert(all.end(), g.begin(), g.end());
  eval(all);
  {
    std::vector<double> lv = metajit_test_detail::eval_values_as_double(loss);
    for (size_t k = 0; k < lv.size(); ++k) {
      INFO("loss[" << k << "] = " << lv[k]);
      REQUIRE(std::isfinite(lv[k]));  // a check at a non-finite point checks nothing
    }
  }
  auto sum_at = [&](size_t i, size_t j, double value) {
    std::vector<Var> p = xs;
    In moved = inputs[i];
    moved.values[j] = value;
    p[i] = leaf(moved);
    Var l = f(p);
    std::vector<Var> pg = grad(l, p);
    std::vector<Var> outs{l};
    outs.insert(outs.end(), pg.begin(), pg.end());
    eval(outs);
    double s = 0;
    for (double v : metajit_test_detail::eval_values_as_double(l)) s += v;
    return s;
  };
  int failures = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("input " << i << " " << shape_str(inputs[i].shape));
    CHECK(g[i].shape() == xs[i].shape());
    CHECK(g[i].dtype() == xs[i].dtype());
    const std::vector<double> got = metajit_test_detail::eval_values_as_double(g[i]);
    REQUIRE(got.size() == inputs[i].values.size());
    for (size_t j = 0; j < got.size(); ++j) {
      const DType dt = inputs[i].dtype;
      const double x = stored(inputs[i].values[j], dt);
      const double up = stored(x + opt.h, dt), down = stored(x - opt.h, dt);
      const double fd = (sum_at(i, j, up) - sum_at(i, j, down)) / (up - down);
      const bool ok =
          std::isfinite(got[j]) && std::fabs(got[j] - fd) <= opt.tol * (1 + std::fabs(fd));
      if (!ok && ++failures <= 8)  // enough to see the pattern
        FAIL_CHECK(name << ": d sum(loss) / d input" << i << "[" << j << "] (x = " << x
                        << "): grad " << got[j] << ", central difference " << fd);
    }
  }
  CHECK(failures == 0);
}

// check_gradients_or_throw, where an exception (a kernel that does not compile, say) fails this
// check only: the next checks of the test case still run.
inline void check_gradients(const std::string& name, const LossFn& f, const std::vector<In>& inputs,
                            FdOptions opt = {}) {
  INFO("gradient check: " << name);
  try {
    check_gradients_or_throw(name, f, inputs, opt);
  } catch (const std::exception& e) {
    FAIL_CHECK(name << ": threw " << e.what());
  }
}

}  // namespace metajit_test
