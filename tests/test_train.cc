// Training (include/metajit/train.h, include/metajit/composite.h): SGD and Adam against
// torch.optim's formulas computed on the host in double, through step(), jit_step() and update()
// in a hand-written jit function; Var::assign; log_softmax, cross_entropy, mse_loss, argmax and
// argmin against host references; a small MLP that converges; flat memory, no compiles on an lr
// change, no traces or compiles on replay; the optimizers' argument errors; and a small model on
// CUDA (the [cuda-emu] cases also run with METAJIT_DEVICE=cuda, on the host emulation and on a
// GPU: tests/CMakeLists.txt).
//
// Compile time is the cost of this suite: the optimizer cases share one loss and one pair of
// parameter shapes, and the model cases share one MLP.
#include <metajit/metajit.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/capture_stderr.h"
#include "support/exceptions.h"
#include "support/text.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::message_of;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

using Vec = std::vector<double>;

// Every value of a Var as double (evaluating it first).
Vec values_of(const Var& v) {
  switch (v.dtype()) {
    case DType::Float64:
      return v.to_vector<double>();
    case DType::Float32: {
      std::vector<float> f = v.to_vector<float>();
      return Vec(f.begin(), f.end());
    }
    case DType::Int32: {
      std::vector<int32_t> i = v.to_vector<int32_t>();
      return Vec(i.begin(), i.end());
    }
    case DType::Int64: {
      std::vector<int64_t> i = v.to_vector<int64_t>();
      return Vec(i.begin(), i.end());
    }
    default:
      FAIL("values_of: unexpected dtype " << dtype_name(v.dtype()));
      return {};
  }
}

// A Var of dtype `dt` (Float32 or Float64) holding `v`.
Var make(const Vec& v, Shape shape, DType dt = DType::Float32) {
  if (dt == DType::Float64) return array<double>(v, std::move(shape));
  return array<float>(std::vector<float>(v.begin(), v.end()), std::move(shape));
}

// `v` as `dt` stores it: what the host reference starts from.
Vec rounded(const Vec& v, DType dt) {
  if (dt == DType::Float64) return v;
  Vec out;
  for (double x : v) out.push_back(double(float(x)));
  return out;
}

// |got - want| <= rel * |want| + abs_tol elementwise, with an infinity only equal to itself and
// NaN only to NaN.
void check_near(const Vec& got, const Vec& want, double rel, double abs_tol,
                const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want[i])) {
      CHECK(got[i] == want[i]);
    } else {
      CHECK(std::abs(got[i] - want[i]) <= rel * std::abs(want[i]) + abs_tol);
    }
  }
}

// |got - want| <= rel * |want| elementwise (the values compared are kept away from 0), with an
// infinity only equal to itself and NaN only to NaN.
void check_close(const Vec& got, const Vec& want, double rel, const std::string& what) {
  check_near(got, want, rel, 0, what);
}

// ---------------------------------------------------------------- the optimizer problem
//
// Two parameters, a [2, 3] and b [3], and the loss 0.5 * sum((a - t)^2) + sum(b * c): the
// gradients are a - t (changing every step, computed on the host from the current a) and c
// (constant). Every value involved stays away from 0, so relative tolerances apply.

const Vec kA0 = {1.0, 1.25, 1.5, 1.75, 2.0, 1.125};
const Vec kT = {3.0, 3.5, 4.0, 3.25, 3.75, 3.125};
const Vec kB0 = {2.0, -2.5, 3.0};
const Vec kC = {0.5, -0.75, 1.0};

Var problem_loss(const Var& a, const Var& b, const Var& t, const Var& c) {
  Var d = a - t;
  return sum(d * d) * 0.5 + sum(b * c);
}

// torch.optim.SGD / torch.optim.Adam on the host, in double.
// AdamW (decoupled decay) and global-norm clipping (torch.nn.utils.clip_grad_norm_) too.
struct Hyper {
  bool adam = false;
  double lr = 0.1, momentum = 0, weight_decay = 0;
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool adamw = false;   // with adam: torch.optim.AdamW
  double max_norm = 0;  // set_max_grad_norm
};

// clip_grad_norm_: the raw gradients times min(1, max_norm / (total 2-norm + 1e-6)).
std::vector<Vec> host_clip(std::vector<Vec> grads, double max_norm) {
  double total = 0;
  for (const Vec& g : grads)
    for (double x : g) total += x * x;
  const double coef = std::min(1.0, max_norm / (std::sqrt(total) + 1e-6));
  for (Vec& g : grads)
    for (double& x : g) x *= coef;
  return grads;
}

struct HostOptimizer {
  explicit HostOptimizer(const Hyper& hyper) : h(hyper) {}
  Hyper h;
  std::vector<Vec> buf, m, v;  // per parameter
  int64_t t = 0;

  void step(std::vector<Vec>& params, std::vector<Vec> grads, double lr) {
    ++t;
    if (h.max_norm > 0) grads = host_clip(std::move(grads), h.max_norm);
    if (buf.empty()) {
      for (const Vec& p : params) {
        buf.emplace_back(p.size(), 0.0);
        m.emplace_back(p.size(), 0.0);
        v.emplace_back(p.size(), 0.0);
      }
    }
    for (size_t k = 0; k < params.size(); ++k) {
      Vec& p = params[k];
      for (size_t i = 0; i < p.size(); ++i) {
        double g = grads[k][i] + (h.adamw ? 0.0 : h.weight_decay * p[i]);
        if (h.adamw) p[i] *= 1 - lr * h.weight_decay;  // torch.optim.AdamW, before the update
        if (!h.adam) {
          if (h.momentum != 0) {
            buf[k][i] = t == 1 ? g : h.momentum * buf[k][i] + g;  // PyTorch: buf = g at first
            g = h.nesterov ? g + h.momentum * buf[k][i] : buf[k][i];
          }
          p[i] -= lr * g;
        } else {
          m[k][i] = h.beta1 * m[k][i] + (1 - h.beta1) * g;
          v[k][i] = h.beta2 * v[k][i] + (1 - h.beta2) * g * g;
          const double bc1 = 1 - std::pow(h.beta1, double(t));
          const double bc2 = 1 - std::pow(h.beta2, double(t));
          const double denom = std::sqrt(v[k][i]) / std::sqrt(bc2) + h.eps;
          p[i] -= lr / bc1 * m[k][i] / denom;
        }
      }
    }
  }
  // The state in Optimizer::state()'s order.
  std::vector<Vec> state() const {
    std::vector<Vec> s;
    if (h.adam) {
      s.insert(s.end(), m.begin(), m.end());
      s.insert(s.end(), v.begin(), v.end());
    } else if (h.momentum != 0) {
      s = buf;
    }
    return s;
  }
};

Vec host_grad_a(const Vec& a, const Vec& t) {
  Vec g;
  for (size_t i = 0; i < a.size(); ++i) g.push_back(a[i] - t[i]);
  return g;
}

double host_loss(const Vec& a, const Vec& b, const Vec& t, const Vec& c) {
  double l = 0;
  for (size_t i = 0; i < a.size(); ++i) l += 0.5 * (a[i] - t[i]) * (a[i] - t[i]);
  for (size_t i = 0; i < b.size(); ++i) l += b[i] * c[i];
  return l;
}

std::unique_ptr<Optimizer> make_optimizer(const Hyper& h, std::vector<Var> params) {
  std::unique_ptr<Optimizer> o;
  if (h.adamw)
    o = std::make_unique<AdamW>(std::move(params), h.lr, h.beta1, h.beta2, h.eps, h.weight_decay);
  else if (h.adam)
    o = std::make_unique<Adam>(std::move(params), h.lr, h.beta1, h.beta2, h.eps, h.weight_decay);
  else
    o = std::make_unique<SGD>(std::move(params), h.lr, h.momentum, h.weight_decay, h.nesterov);
  o->set_max_grad_norm(h.max_norm);
  return o;
}

enum class Mode { Eager, JitStep, HandWrittenJit };
const char* mode_name(Mode m) {
  return m == Mode::Eager ? "step(loss)" : m == Mode::JitStep ? "jit_step" : "update() in jit";
}

constexpr int kSteps = 4;
constexpr int kSetLrBefore = 2;  // set_lr(lr / 2) before this (0-based) step

// Runs kSteps steps of the optimizer `h` in `mode` (halving the learning rate before step
// kSetLrBefore) and checks the loss, the parameters and the state after every step against
// HostOptimizer. For Adam, also the first step against the bias-corrected closed form
// p1 = p0 - lr * g / (|g| + eps).
int hand_steps_created = 0;

void check_optimizer(const Hyper& h, Mode mode, DType dt, double rel) {
  INFO(mode_name(mode) << ", " << dtype_name(dt));
  Var a = make(kA0, {2, 3}, dt), b = make(kB0, {3}, dt);
  const Var t = make(kT, {2, 3}, dt), c = make(kC, {3}, dt);
  std::unique_ptr<Optimizer> opt = make_optimizer(h, {a, b});
  HostOptimizer host(h);
  std::vector<Vec> hp = {rounded(kA0, dt), rounded(kB0, dt)};
  const Vec ht = rounded(kT, dt), hc = rounded(kC, dt);
  const size_t ns = opt->state().size();
  CHECK(ns == (h.adam ? 4u : h.momentum != 0 ? 2u : 0u));

  auto jit_step = opt->jit_step([&](const Var& target) { return problem_loss(a, b, target, c); },
                                "problem_step");
  // update() used by hand: the parameters, the state (padded to 4 with a dummy), lr and step.
  const Optimizer& o = *opt;
  auto hand = jit(
      [&o, &c, ns](const Var& pa, const Var& pb, const Var& target, const Var& s0, const Var& s1,
                   const Var& s2, const Var& s3, const Var& lr, const Var& step) {
        Var loss = problem_loss(pa, pb, target, c);
        std::vector<Var> g = grad(loss, {pa, pb});
        std::vector<Var> state{s0, s1, s2, s3};
        state.resize(ns);
        OptimizerUpdate u = o.update({pa, pb}, g, state, lr, step);
        std::vector<Var> out{loss};
        out.insert(out.end(), u.params.begin(), u.params.end());
        out.insert(out.end(), u.state.begin(), u.state.end());
        return out;
      },
      // A name of its own per call: each captures another optimizer (a new function, not one
      // re-created).
      "hand_step " + std::to_string(++hand_steps_created));
  const Var dummy = zeros({1}, dt);

  double lr = h.lr;
  for (int k = 0; k < kSteps; ++k) {
    INFO("step " << k + 1);
    if (k == kSetLrBefore) {
      lr = h.lr / 2;
      opt->set_lr(lr);
      CHECK(opt->lr() == lr);
    }
    const double want_loss = host_loss(hp[0], hp[1], ht, hc);
    const std::vector<Vec> before = hp;
    host.step(hp, {host_grad_a(hp[0], ht), hc}, lr);
    Var loss;
    switch (mode) {
      case Mode::Eager:
        loss = problem_loss(a, b, t, c);
        opt->step(loss);
        CHECK(opt->steps() == k + 1);
        break;
      case Mode::JitStep:
        loss = jit_step(t);
        CHECK(opt->steps() == k + 1);
        break;
      case Mode::HandWrittenJit: {
        std::vector<Var> s = opt->state();
        while (s.size() < 4) s.push_back(dummy);
        const Var lr_var = scalar(lr, DType::Float64),
                  step_var = scalar(double(k + 1), DType::Float64);
        std::vector<Var> out = hand(a, b, t, s[0], s[1], s[2], s[3], lr_var, step_var);
        REQUIRE(out.size() == 3 + ns);
        loss = out[0];
        a.assign(out[1]);
        b.assign(out[2]);
        for (size_t j = 0; j < ns; ++j) {
          Var sj = opt->state()[j];  // a copy: assign is seen through opt->state()[j] too
          sj.assign(out[3 + j]);
        }
        CHECK(opt->steps() == 0);  // update() is a pure function
        break;
      }
    }
    check_close(values_of(loss), {want_loss}, rel, "loss");
    check_close(values_of(a), hp[0], rel, "parameter a");
    check_close(values_of(b), hp[1], rel, "parameter b");
    const std::vector<Vec> hs = host.state();
    REQUIRE(opt->state().size() == hs.size());
    for (size_t j = 0; j < hs.size(); ++j)
      check_close(values_of(opt->state()[j]), hs[j], rel, "state " + std::to_string(j));
    if (h.adam && !h.adamw && h.max_norm == 0 && k == 0) {
      // bias correction: the first update is lr * g / (|g| + eps)
      const std::vector<Vec> g = {host_grad_a(before[0], ht), hc};
      for (size_t p = 0; p < 2; ++p) {
        Vec want;
        for (size_t i = 0; i < g[p].size(); ++i) {
          const double gi = g[p][i] + h.weight_decay * before[p][i];
          want.push_back(before[p][i] - lr * gi / (std::abs(gi) + h.eps));
        }
        check_close(values_of(p == 0 ? a : b), want, rel, "first Adam step, closed form");
      }
    }
  }
  if (mode == Mode::JitStep) CHECK(jit_step.traces() == 1);
  if (mode == Mode::HandWrittenJit) CHECK(hand.traces() == 1);
}

void check_optimizer_all_modes(const Hyper& h, DType dt = DType::Float32, double rel = 1e-5) {
  for (Mode m : {Mode::Eager, Mode::JitStep, Mode::HandWrittenJit})
    if (m != Mode::HandWrittenJit || h.max_norm == 0)  // update() does not clip
      check_optimizer(h, m, dt, rel);
}

}  // namespace

// ---------------------------------------------------------------- optimizers vs PyTorch's formulas

TEST_CASE("SGD without momentum subtracts lr times the gradient, set_lr changes the next update",
          "[train][sgd]") {
  check_optimizer_all_modes(Hyper{});
}

TEST_CASE("SGD with momentum: the buffer starts as the first gradient", "[train][sgd]") {
  check_optimizer_all_modes(Hyper{.momentum = 0.9});
}

TEST_CASE("SGD with Nesterov momentum", "[train][sgd]") {
  check_optimizer_all_modes(Hyper{.momentum = 0.8, .nesterov = true});
}

TEST_CASE("SGD with weight decay adds weight_decay times p to the gradient", "[train][sgd]") {
  check_optimizer_all_modes(Hyper{.weight_decay = 0.1});
  check_optimizer(Hyper{.momentum = 0.5, .weight_decay = 0.2, .nesterov = true}, Mode::JitStep,
                  DType::Float32, 1e-5);
}

TEST_CASE("Adam with its defaults, bias correction visible at step 1", "[train][adam]") {
  check_optimizer_all_modes(Hyper{.adam = true});
}

TEST_CASE("Adam with weight decay (L2 added to the gradient)", "[train][adam]") {
  check_optimizer_all_modes(Hyper{.adam = true, .weight_decay = 0.1});
}

TEST_CASE("AdamW decays the parameters before the update, not through the gradient",
          "[train][adam]") {
  Hyper h;
  h.adam = h.adamw = true;
  h.lr = 0.05;
  h.weight_decay = 0.3;
  check_optimizer_all_modes(h);
  check_optimizer_all_modes(h, DType::Float64, 1e-12);
  // torch's defaults: weight_decay 1e-2.
  Var w = ones({2}, DType::Float64);
  AdamW opt({w});
  opt.step(sum(w * 0.0));  // zero gradient: only the decay moves w
  CHECK(values_of(w) == Vec{1 - 1e-3 * 1e-2, 1 - 1e-3 * 1e-2});
}

TEST_CASE("set_max_grad_norm clips the raw gradients by their global norm", "[train][clip]") {
  Hyper h;
  h.adam = true;
  h.weight_decay = 0.1;  // after clipping
  h.max_norm = 0.5;      // the problem's gradients have norm ~2: clipped
  check_optimizer_all_modes(h);
  h.adam = false;
  h.momentum = 0.9;
  h.max_norm = 0.25;
  check_optimizer_all_modes(h, DType::Float64, 1e-12);
  h.max_norm = 100;  // larger than the norm: no change (the coefficient is clamped at 1)
  check_optimizer_all_modes(h);
}

TEST_CASE("a new clipping norm compiles nothing, turning clipping on or off traces once more",
          "[train][clip][counts]") {
  Var a = make(kA0, {2, 3}, DType::Float32), b = make(kB0, {3}, DType::Float32);
  const Var t = make(kT, {2, 3}, DType::Float32), c = make(kC, {3}, DType::Float32);
  Adam opt({a, b}, 0.01);
  auto step = opt.jit_step([&](const Var& target) { return problem_loss(a, b, target, c); },
                           "clip_counts_step");
  step(t);
  opt.set_max_grad_norm(0.5);
  step(t);
  CHECK(step.traces() == 2);
  const uint64_t compiles = stats().kernels_compiled;
  for (double norm : {0.25, 1.0, 3.0}) {
    opt.set_max_grad_norm(norm);
    step(t);
  }
  CHECK(stats().kernels_compiled == compiles);
  CHECK(step.traces() == 2);
  opt.set_max_grad_norm(0);
  step(t);
  CHECK(step.traces() == 2);  // off again: the first call's trace is replayed
  CHECK(opt.max_grad_norm() == 0);
  CHECK_THROWS_WITH(opt.set_max_grad_norm(-1), Contains("Adam: max_grad_norm"));
  CHECK_THROWS_WITH(opt.set_max_grad_norm(std::nan("")), Contains("max_grad_norm"));
}

// ---------------------------------------------------------------- loss scaling

namespace {

// Steps of Adam with loss scaling on the optimizer problem, in `mode` (Eager or JitStep), the
// target of each step given: a target holding inf makes a gradient inf. After every step the
// parameters, the state, steps(), loss_scale() and skipped_steps() are checked against the host:
// a finite step is the unscaled step (the scales are powers of two, so unscaling is exact), a
// skipped one changes nothing but the scale.
void check_scaled_steps(Mode mode) {
  INFO(mode_name(mode));
  const Hyper h{.adam = true, .lr = 0.05};
  Var a = make(kA0, {2, 3}, DType::Float32), b = make(kB0, {3}, DType::Float32);
  const Var c = make(kC, {3}, DType::Float32);
  std::unique_ptr<Optimizer> opt = make_optimizer(h, {a, b});
  opt->set_loss_scaling(LossScaling{.init_scale = 1024, .growth_interval = 2});
  auto jit_step = opt->jit_step([&](const Var& target) { return problem_loss(a, b, target, c); },
                                "scaled_problem_step");
  HostOptimizer host(h);
  std::vector<Vec> hp = {rounded(kA0, DType::Float32), rounded(kB0, DType::Float32)};
  Vec bad_t = kT;
  bad_t[4] = kInf;
  // finite, finite (grows), inf (skipped, backs off), finite, finite (grows), finite
  const std::vector<bool> inf_step = {false, false, true, false, false, false};
  const std::vector<double> scale_after = {1024, 2048, 1024, 1024, 2048, 2048};
  uint64_t compiles = 0;
  int64_t steps = 0, skipped = 0;
  for (size_t k = 0; k < inf_step.size(); ++k) {
    INFO("step " << k + 1);
    const Var t = make(inf_step[k] ? bad_t : kT, {2, 3}, DType::Float32);
    if (inf_step[k]) {
      ++skipped;
    } else {
      host.step(hp, {host_grad_a(hp[0], rounded(kT, DType::Float32)), kC}, h.lr);
      ++steps;
    }
    if (mode == Mode::Eager)
      opt->step(problem_loss(a, b, t, c));
    else
      jit_step(t);
    // The first eager step's state is zeros() (lazy), the second's a leaf: from then on every
    // step is one program.
    if (k == 1) compiles = stats().kernels_compiled;
    CHECK(opt->steps() == steps);
    CHECK(opt->skipped_steps() == skipped);
    CHECK(opt->loss_scale() == scale_after[k]);
    check_close(values_of(a), hp[0], 1e-5, "parameter a");
    check_close(values_of(b), hp[1], 1e-5, "parameter b");
    const std::vector<Vec> hs = host.state();
    for (size_t j = 0; j < hs.size(); ++j)
      check_close(values_of(opt->state()[j]), hs[j], 1e-5, "state " + std::to_string(j));
  }
  CHECK(stats().kernels_compiled == compiles);  // the skipped step ran the same kernels
  if (mode == Mode::JitStep) CHECK(jit_step.traces() == 1);
}

}  // namespace

TEST_CASE("loss scaling: finite steps are the unscaled steps, an inf gradient skips the step",
          "[train][scaling]") {
  check_scaled_steps(Mode::Eager);
  check_scaled_steps(Mode::JitStep);
}

TEST_CASE("loss scaling: the scale backs off until the scaled gradients are finite",
          "[train][scaling][counts]") {
  // A scale of 2^127 times gradients of about 2 overflows float32: every step is skipped and
  // halves the scale until the gradients fit, then the steps go on as without scaling.
  Var a = make(kA0, {2, 3}, DType::Float32), b = make(kB0, {3}, DType::Float32);
  const Var t = make(kT, {2, 3}, DType::Float32), c = make(kC, {3}, DType::Float32);
  SGD opt({a, b}, 0.1);
  opt.set_loss_scaling(LossScaling{.init_scale = std::ldexp(1.0, 127)});
  CHECK(opt.loss_scale() == std::ldexp(1.0, 127));
  auto step = opt.jit_step([&](const Var& target) { return problem_loss(a, b, target, c); },
                           "backoff_step");
  int calls = 0;
  while (opt.steps() == 0 && calls < 10) {
    const Var loss = step(t);
    ++calls;
    // The loss returned is the unscaled one, finite whether or not the step was skipped.
    CHECK(std::isfinite(loss.item<float>()));
  }
  CHECK(opt.skipped_steps() >= 1);
  CHECK(opt.steps() == 1);
  CHECK(calls == opt.skipped_steps() + 1);
  CHECK(opt.loss_scale() == std::ldexp(1.0, 127 - int(opt.skipped_steps())));
  HostOptimizer host(Hyper{});
  std::vector<Vec> hp = {rounded(kA0, DType::Float32), rounded(kB0, DType::Float32)};
  host.step(hp, {host_grad_a(hp[0], rounded(kT, DType::Float32)), kC}, 0.1);
  check_close(values_of(a), hp[0], 1e-5, "parameter a after the first step taken");
  check_close(values_of(b), hp[1], 1e-5, "parameter b after the first step taken");
  CHECK(step.traces() == 1);
}

TEST_CASE("loss scaling: on and off trace a jit step once more each, a new scale compiles nothing",
          "[train][scaling][counts][errors]") {
  Var a = make(kA0, {2, 3}, DType::Float32), b = make(kB0, {3}, DType::Float32);
  const Var t = make(kT, {2, 3}, DType::Float32), c = make(kC, {3}, DType::Float32);
  Adam opt({a, b}, 0.01);
  CHECK(opt.loss_scale() == 1);
  auto step = opt.jit_step([&](const Var& target) { return problem_loss(a, b, target, c); },
                           "scaling_counts_step");
  step(t);
  opt.set_loss_scaling(LossScaling{});
  CHECK(opt.loss_scale() == 65536);  // GradScaler's default
  step(t);
  CHECK(step.traces() == 2);
  const uint64_t compiles = stats().kernels_compiled;
  opt.set_loss_scaling(LossScaling{.init_scale = 8});
  step(t);
  CHECK(stats().kernels_compiled == compiles);
  opt.set_loss_scaling(std::nullopt);
  CHECK(opt.loss_scale() == 1);
  step(t);
  CHECK(step.traces() == 2);
  CHECK(opt.steps() == 4);
  CHECK(opt.skipped_steps() == 0);
  CHECK_THROWS_WITH(opt.set_loss_scaling(LossScaling{.init_scale = 0}),
                    Contains("Adam.set_loss_scaling: init_scale"));
  CHECK_THROWS_WITH(opt.set_loss_scaling(LossScaling{.init_scale = 1e39}), Contains("init_scale"));
  CHECK_THROWS_WITH(opt.set_loss_scaling(LossScaling{.growth_factor = 1}),
                    Contains("growth_factor") && Contains("> 1"));
  CHECK_THROWS_WITH(opt.set_loss_scaling(LossScaling{.backoff_factor = 1}),
                    Contains("backoff_factor") && Contains("(0, 1)"));
  CHECK_THROWS_WITH(opt.set_loss_scaling(LossScaling{.backoff_factor = kNaN}),
                    Contains("backoff_factor"));
  CHECK_THROWS_WITH(opt.set_loss_scaling(LossScaling{.growth_interval = 0}),
                    Contains("growth_interval"));
  CHECK(opt.loss_scale() == 1);  // a refused setting changes nothing
}

TEST_CASE("cosine_lr: linear warmup, half cosine to min_lr, then min_lr", "[train][schedule]") {
  CHECK(cosine_lr(0, 1.0, 10, 110) == 0);
  CHECK(cosine_lr(5, 1.0, 10, 110) == 0.5);
  CHECK(cosine_lr(10, 1.0, 10, 110) == 1.0);
  CHECK(cosine_lr(60, 1.0, 10, 110, 0.2) == Approx(0.6).epsilon(1e-15));  // halfway
  CHECK(cosine_lr(35, 2.0, 10, 110) == Approx(1 + std::cos(M_PI / 4)).epsilon(1e-15));
  CHECK(cosine_lr(110, 1.0, 10, 110, 0.1) == 0.1);
  CHECK(cosine_lr(500, 1.0, 10, 110, 0.1) == 0.1);
  CHECK(cosine_lr(0, 3e-4, 0, 100) == 3e-4);  // no warmup
  CHECK(cosine_lr(7, 3e-4, 0, 0, 1e-5) == 1e-5);
  CHECK_THROWS_WITH(cosine_lr(-1, 1.0, 10, 110), Contains("cosine_lr") && Contains("step -1"));
  CHECK_THROWS_WITH(cosine_lr(0, 1.0, 20, 10), Contains("warmup_steps <= total_steps"));
  CHECK_THROWS_AS(cosine_lr(0, -1.0, 0, 10), Error);
  CHECK_THROWS_AS(cosine_lr(0, 1.0, 0, 10, std::nan("")), Error);
}

TEST_CASE("Adam and SGD on float64 parameters agree with the host to 1e-12", "[train][adam]") {
  check_optimizer_all_modes(
      Hyper{.adam = true, .lr = 0.05, .weight_decay = 0.01, .beta1 = 0.8, .beta2 = 0.99},
      DType::Float64, 1e-12);
  check_optimizer(Hyper{.momentum = 0.9, .nesterov = true}, Mode::JitStep, DType::Float64, 1e-12);
}

TEST_CASE("step() on an evaluated loss is an Error and changes nothing", "[train][errors]") {
  Var a = make(kA0, {2, 3}), b = make(kB0, {3});
  const Var t = make(kT, {2, 3}), c = make(kC, {3});
  SGD opt({a, b}, 0.1, 0.9);
  Var loss = problem_loss(a, b, t, c);
  eval({loss});
  CHECK_THROWS_AS(opt.step(loss), Error);
  CHECK(opt.steps() == 0);
  check_close(values_of(a), rounded(kA0, DType::Float32), 0, "a unchanged");
  CHECK_THROWS_AS(opt.step(Var()), Error);
  // A fresh loss works afterwards.
  opt.step(problem_loss(a, b, t, c));
  CHECK(opt.steps() == 1);
}

TEST_CASE("update() checks its arguments", "[train][errors]") {
  Var a = make(kA0, {2, 3}), b = make(kB0, {3});
  Adam opt({a, b});
  const Var lr = scalar(0.1, DType::Float64), step = scalar(1, DType::Float64);
  const std::vector<Var> g = {a, b};
  std::vector<Var> st = opt.state();
  CHECK_THROWS_AS(opt.update({a}, g, st, lr, step), ShapeError);
  CHECK_THROWS_AS(opt.update({a, b}, {a}, st, lr, step), ShapeError);
  CHECK_THROWS_AS(opt.update({a, b}, g, {}, lr, step), ShapeError);
  CHECK_THROWS_AS(opt.update({b, a}, g, st, lr, step), ShapeError);
  CHECK_THROWS_AS(opt.update({a, b}, g, st, zeros({2}, DType::Float64), step), ShapeError);
  CHECK_THROWS_AS(opt.update({a, b}, g, st, lr, scalar(1, DType::Int32)), ShapeError);
  CHECK_NOTHROW(opt.update({a, b}, g, st, lr, step));
}

// ---------------------------------------------------------------- Var::assign

TEST_CASE("Var::assign: copies see the new value, earlier graphs keep the old one",
          "[train][assign]") {
  Var x = array<float>({1, 2, 3}, {3});
  Var copy = x;
  Var y = x * 2;  // lazy, built before the assign
  x.assign(array<float>({4, 5, 6}, {3}));
  CHECK(values_of(copy) == Vec{4, 5, 6});
  CHECK(values_of(x) == Vec{4, 5, 6});
  CHECK(values_of(y) == Vec{2, 4, 6});
  CHECK(values_of(x * 2) == Vec{8, 10, 12});

  SECTION("assigning a lazy value") {
    Var z = x;
    x.assign(x * 10 + 1);  // x's current value (4, 5, 6) goes into the graph
    CHECK(values_of(z) == Vec{41, 51, 61});
    CHECK(values_of(x) == Vec{41, 51, 61});
    copy.assign(copy - 1);  // through another copy
    CHECK(values_of(x) == Vec{40, 50, 60});
  }
  SECTION("a wrong shape is a ShapeError, a wrong dtype a DTypeError; nothing changes") {
    CHECK_THROWS_AS(x.assign(array<float>({1, 2}, {2})), ShapeError);
    CHECK_THROWS_AS(x.assign(array<float>({1, 2, 3}, {1, 3})), ShapeError);
    CHECK_THROWS_AS(x.assign(array<double>({1, 2, 3}, {3})), DTypeError);
    CHECK_THROWS_AS(x.assign(array<int32_t>({1, 2, 3}, {3})), DTypeError);
    CHECK(x.shape() == Shape{3});
    CHECK(x.dtype() == DType::Float32);
    CHECK(values_of(copy) == Vec{4, 5, 6});
  }
  SECTION("an undefined Var or value is an Error") {
    Var u;
    CHECK_THROWS_AS(u.assign(x), Error);
    CHECK_FALSE(u.defined());
    CHECK_THROWS_AS(x.assign(Var()), Error);
    CHECK(values_of(x) == Vec{4, 5, 6});
  }
  SECTION("assign inside a jit function: the captured Var is state, assigned by every call") {
    auto f = jit(
        [&](const Var& v) {
          copy.assign(v);
          return v + 1;
        },
        "assigning");
    CHECK(values_of(f(array<float>({7, 8, 9}, {3}))) == Vec{8, 9, 10});
    CHECK(values_of(x) == Vec{7, 8, 9});
    CHECK(values_of(f(array<float>({1, 1, 2}, {3}))) == Vec{2, 2, 3});
    CHECK(values_of(x) == Vec{1, 1, 2});
    CHECK(f.traces() == 1);
  }
  SECTION("assigning an argument inside a jit function is an Error; nothing changes") {
    auto f = jit(
        [](const Var& v) {
          Var(v).assign(v * 2);
          return v + 1;
        },
        "assigning_argument");
    const std::string msg = message_of<Error>([&] { f(array<float>({7, 8, 9}, {3})); });
    CHECK_THAT(msg, Contains("assign") && Contains("argument"));
    CHECK(values_of(x) == Vec{4, 5, 6});
    // Tracing state was restored: eager evaluation and assign work again.
    x.assign(array<float>({0, 1, 2}, {3}));
    CHECK(values_of(copy) == Vec{0, 1, 2});
  }
}

// ---------------------------------------------------------------- losses

namespace {

// Rows of 4 logits: ordinary values, extremes (+-1e4), and -inf not at the label.
const Vec kLogits = {0.5,   -1.0, 2.0,  0.25,  //
                     1e4,   -1e4, 3.0,  -2.0,  //
                     -kInf, 1.5,  -0.5, 0.0};
const std::vector<int32_t> kLabels = {2, 1, 3};

std::vector<Vec> host_log_softmax_rows(const Vec& x, size_t n, size_t c) {
  std::vector<Vec> out(n);
  for (size_t r = 0; r < n; ++r) {
    double m = -kInf;
    for (size_t k = 0; k < c; ++k) m = std::max(m, x[r * c + k]);
    double s = 0;
    for (size_t k = 0; k < c; ++k) s += std::exp(x[r * c + k] - m);
    for (size_t k = 0; k < c; ++k) out[r].push_back(x[r * c + k] - m - std::log(s));
  }
  return out;
}

Vec flat(const std::vector<Vec>& rows) {
  Vec out;
  for (const Vec& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

}  // namespace

TEST_CASE("log_softmax matches the host in double, for extreme and -inf logits",
          "[train][losses]") {
  const Vec want = flat(host_log_softmax_rows(rounded(kLogits, DType::Float32), 3, 4));
  Var x = make(kLogits, {3, 4});
  const Vec got = values_of(log_softmax(x, 1));
  check_near(got, want, 1e-6, 1e-6, "log_softmax(x, 1)");
  for (double v : got) CHECK_FALSE(std::isnan(v));
  // The same along dim 0 of the transpose, and with a negative dim.
  check_near(values_of(transpose(log_softmax(transpose(x, {1, 0}), 0), {1, 0})), want, 1e-6, 1e-6,
             "log_softmax(x^T, 0)^T");
  check_near(values_of(log_softmax(x, -1)), want, 1e-6, 1e-6, "log_softmax(x, -1)");
  // float64
  check_near(values_of(log_softmax(make(kLogits, {3, 4}, DType::Float64), 1)),
             flat(host_log_softmax_rows(kLogits, 3, 4)), 1e-14, 1e-14, "float64");
  // An integer input is computed in float32.
  Var ints = log_softmax(array<int32_t>({0, 1, 2, 3}, {1, 4}), 1);
  CHECK(ints.dtype() == DType::Float32);
  check_near(values_of(ints), flat(host_log_softmax_rows({0, 1, 2, 3}, 1, 4)), 1e-6, 1e-6, "int32");
  CHECK_THROWS_AS(log_softmax(scalar(1, DType::Float32), 0), ShapeError);
}

TEST_CASE("cross_entropy matches the host for Int32 and Int64 labels, finite at extremes",
          "[train][losses]") {
  const Vec x32 = rounded(kLogits, DType::Float32);
  const std::vector<Vec> ls = host_log_softmax_rows(x32, 3, 4);
  double want = 0;
  for (size_t r = 0; r < 3; ++r) want -= ls[r][size_t(kLabels[r])];
  want /= 3;
  REQUIRE(std::isfinite(want));
  REQUIRE(want > 1e3);  // the extreme row's label sits at -1e4 against a max of 1e4
  Var x = make(kLogits, {3, 4});
  const Var labels32 = array<int32_t>(kLabels, {3});
  const Var labels64 = array<int64_t>(std::vector<int64_t>(kLabels.begin(), kLabels.end()), {3});
  const Vec got32 = values_of(cross_entropy(x, labels32));
  const Vec got64 = values_of(cross_entropy(x, labels64));
  REQUIRE(got32.size() == 1);
  CHECK(std::isfinite(got32[0]));
  check_close(got32, {want}, 1e-6, "Int32 labels");
  check_close(got64, {want}, 1e-6, "Int64 labels");
  CHECK(cross_entropy(x, labels32).shape() == Shape{});
  CHECK(cross_entropy(x, labels32).dtype() == DType::Float32);

  SECTION("the gradient is (softmax - onehot) / N") {
    Var logits = make(kLogits, {3, 4});
    Var loss = cross_entropy(logits, labels32);
    std::vector<Var> g = grad(loss, {logits});
    eval({loss, g[0]});
    Vec want_g;
    for (size_t r = 0; r < 3; ++r)
      for (size_t k = 0; k < 4; ++k)
        want_g.push_back((std::exp(ls[r][k]) - (int32_t(k) == kLabels[r] ? 1.0 : 0.0)) / 3);
    const Vec got_g = values_of(g[0]);
    check_near(got_g, want_g, 1e-5, 1e-7, "d cross_entropy / d logits");
    for (double v : got_g) CHECK(std::isfinite(v));
  }
  SECTION("a label at a -inf logit gives +inf, as in PyTorch") {
    const Vec got = values_of(cross_entropy(x, array<int32_t>({2, 1, 0}, {3})));
    CHECK(got[0] == kInf);
  }
  SECTION("a label outside [0, C) gives NaN") {
    CHECK(std::isnan(values_of(cross_entropy(x, array<int32_t>({2, 4, 0}, {3})))[0]));
    CHECK(std::isnan(values_of(cross_entropy(x, array<int64_t>({-1, 1, 3}, {3})))[0]));
  }
  SECTION("errors") {
    CHECK_THROWS_AS(cross_entropy(make({1, 2, 3}, {3}), array<int32_t>({0}, {1})), ShapeError);
    CHECK_THROWS_AS(cross_entropy(x, make({0, 1, 2}, {3})), DTypeError);
    CHECK_THROWS_AS(cross_entropy(x, array<int32_t>({0, 1}, {2})), ShapeError);
    CHECK_THROWS_AS(cross_entropy(x, array<int32_t>({0, 1, 2}, {3, 1})), ShapeError);
    CHECK_THROWS_AS(
        cross_entropy(array<int32_t>({0, 1, 2, 3}, {2, 2}), array<int32_t>({0, 1}, {2})),
        DTypeError);
    CHECK_THROWS_AS(cross_entropy(Var(), labels32), Error);
  }
}

TEST_CASE("mse_loss matches the host, a shape mismatch is a ShapeError", "[train][losses]") {
  const Vec p = {1.5, -2.0, 0.25, 4.0, 3.0, -1.0}, q = {1.0, 2.0, -0.75, 4.5, 0.0, -1.0};
  double want = 0;
  for (size_t i = 0; i < p.size(); ++i) want += (p[i] - q[i]) * (p[i] - q[i]);
  want /= double(p.size());
  check_close(values_of(mse_loss(make(p, {2, 3}), make(q, {2, 3}))), {want}, 1e-6, "float32");
  check_close(values_of(mse_loss(make(p, {2, 3}, DType::Float64), make(q, {2, 3}, DType::Float64))),
              {want}, 1e-15, "float64");
  CHECK_THROWS_AS(mse_loss(make(p, {2, 3}), make(q, {3, 2})), ShapeError);
  CHECK_THROWS_AS(mse_loss(make(p, {2, 3}), make({1, 2, 3}, {3})), ShapeError);
  CHECK_THROWS_AS(mse_loss(Var(), make(q, {2, 3})), Error);
}

TEST_CASE("argmax and argmin: first index on ties, negative dims, NaN, ints, Int32 output",
          "[train][losses]") {
  // [2, 4]: row 0 has tied maxima (3 at 1 and 3) and tied minima (-1 at 0 and 2).
  Var x = make({-1, 3, -1, 3,  //
                2, 0, 5, 1},
               {2, 4});
  CHECK(argmax(x, 1).dtype() == DType::Int32);
  CHECK(argmax(x, 1).shape() == Shape{2});
  CHECK(values_of(argmax(x, 1)) == Vec{1, 2});
  CHECK(values_of(argmin(x, 1)) == Vec{0, 1});
  CHECK(values_of(argmax(x, -1)) == Vec{1, 2});
  CHECK(values_of(argmax(x, 0)) == Vec{1, 0, 1, 0});
  CHECK(values_of(argmin(x, -2)) == Vec{0, 1, 0, 1});
  CHECK(argmin(x, 0).shape() == Shape{4});

  // A NaN counts as the maximum and as the minimum, wherever the ordinary extremum is.
  Var n = make({5, kNaN, 1, 7,  //
                kNaN, 2, 9, -3},
               {2, 4});
  CHECK(values_of(argmax(n, 1)) == Vec{1, 0});
  CHECK(values_of(argmin(n, 1)) == Vec{1, 0});
  CHECK(values_of(argmax(n, 0)) == Vec{1, 0, 1, 0});  // column 1: NaN at 0; column 2: 9 at 1

  // Integer inputs, Int32 output.
  Var i = array<int32_t>({4, 9, 9, -2, 7, -2}, {2, 3});
  CHECK(argmax(i, 1).dtype() == DType::Int32);
  CHECK(values_of(argmax(i, 1)) == Vec{1, 1});
  CHECK(values_of(argmin(i, 1)) == Vec{0, 0});
  Var l = array<int64_t>({4, 9, 9, -2, 7, -2}, {2, 3});
  CHECK(argmax(l, 1).dtype() == DType::Int32);
  CHECK(values_of(argmin(l, 0)) == Vec{1, 1, 1});
  CHECK(values_of(argmax(l, 0)) == Vec{0, 0, 0});

  // Errors.
  CHECK_THROWS_AS(argmax(scalar(1, DType::Float32), 0), ShapeError);
  CHECK_THROWS_AS(argmin(scalar(1, DType::Float32), 0), ShapeError);
  CHECK_THROWS_AS(argmax(x, 2), ShapeError);
  CHECK_THROWS_AS(argmax(x, -3), ShapeError);
  CHECK_THROWS_AS(argmin(x, 2), ShapeError);
  CHECK_THROWS_AS(argmax(Var(), 0), Error);
}

// ---------------------------------------------------------------- a model that trains

namespace {

// Three well-separated Gaussian blobs in 4-D, 64 points: an MLP 4 -> 16 -> 3 fits them.
constexpr int64_t kN = 64, kD = 4, kH = 16, kClasses = 3;

struct Data {
  Var x, y;
  std::vector<int32_t> labels;
};

Data make_data(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.5);
  const double centers[kClasses][kD] = {{2, 0, 0, 1}, {-1, 2, 0, -1}, {0, -2, 2, 0}};
  std::vector<float> xs;
  std::vector<int32_t> ys;
  for (int64_t i = 0; i < kN; ++i) {
    const int32_t k = int32_t(i % kClasses);
    for (int64_t d = 0; d < kD; ++d) xs.push_back(float(centers[k][d] + noise(rng)));
    ys.push_back(k);
  }
  return {array<float>(xs, {kN, kD}), array<int32_t>(ys, {kN}), ys};
}

struct Mlp {
  Var w1, b1, w2, b2;
  explicit Mlp(uint64_t seed)
      : w1(randn({kD, kH}, seed) * 0.5),
        b1(zeros({kH})),
        w2(randn({kH, kClasses}, seed + 1) * 0.5),
        b2(zeros({kClasses})) {
    eval({w1, b1, w2, b2});
  }
  Var logits(const Var& x) const { return matmul(relu(matmul(x, w1) + b1), w2) + b2; }
  Var loss(const Var& x, const Var& y) const { return cross_entropy(logits(x), y); }
  std::vector<Var> params() const { return {w1, b1, w2, b2}; }
};

double accuracy(const Mlp& m, const Data& d) {
  const Vec pred = values_of(argmax(m.logits(d.x), 1));
  size_t right = 0;
  for (size_t i = 0; i < pred.size(); ++i) right += pred[i] == double(d.labels[i]);
  return double(right) / double(pred.size());
}

// Trains the test MLP with Adam (lr 0.05) through jit_step for 1 + `steps` steps on the current
// device and checks that it converged: the loss fell five-fold, accuracy > 95%, one trace.
void check_mlp_converges(int steps) {
  const Data d = make_data(7);
  Mlp m(11);
  Adam opt(m.params(), 0.05);
  auto step = opt.jit_step([&](const Var& x, const Var& y) { return m.loss(x, y); }, "mlp_step");
  const double first = step(d.x, d.y).item<float>();
  double last = first;
  for (int i = 0; i < steps; ++i) last = step(d.x, d.y).item<float>();
  INFO("loss " << first << " -> " << last);
  CHECK(std::isfinite(last));
  CHECK(last * 5 < first);
  CHECK(accuracy(m, d) > 0.95);
  CHECK(step.traces() == 1);
  CHECK(opt.steps() == steps + 1);
}

}  // namespace

TEST_CASE("an MLP trained with Adam through jit_step converges", "[train][model]") {
  check_mlp_converges(60);
}

TEST_CASE("memory is flat over 100 steps, eager and jit", "[train][model][memory]") {
  const Data d = make_data(3);
  Mlp m(21);
  Adam opt(m.params(), 0.01);
  std::function<void()> run_step;
  auto jstep = opt.jit_step([&](const Var& x, const Var& y) { return m.loss(x, y); }, "mem_step");
  SECTION("step(loss)") {
    run_step = [&] { opt.step(m.loss(d.x, d.y)); };
  }
  SECTION("jit_step") {
    run_step = [&] { jstep(d.x, d.y); };
  }
  uint64_t at10 = 0;
  for (int i = 1; i <= 100; ++i) {
    run_step();
    if (i == 10) at10 = stats().bytes_in_use;
  }
  const uint64_t at100 = stats().bytes_in_use;
  INFO("bytes in use after step 10: " << at10 << ", after step 100: " << at100);
  CHECK(at10 > 0);
  CHECK(at100 <= at10);
}

TEST_CASE("set_lr compiles nothing and traces nothing", "[train][model][counts]") {
  const Data d = make_data(3);
  Mlp m(21);
  SECTION("step(loss), Adam") {
    Adam opt(m.params(), 0.01);
    for (int i = 0; i < 2; ++i) opt.step(m.loss(d.x, d.y));
    reset_stats();
    opt.set_lr(0.003);
    opt.step(m.loss(d.x, d.y));
    opt.set_lr(0.5);
    opt.step(m.loss(d.x, d.y));
    CHECK(stats().kernels_compiled == 0);
    CHECK(stats().kernels_launched > 0);
  }
  SECTION("jit_step, SGD with momentum") {
    SGD opt(m.params(), 0.01, 0.9);
    auto step = opt.jit_step([&](const Var& x, const Var& y) { return m.loss(x, y); });
    for (int i = 0; i < 2; ++i) step(d.x, d.y);
    const uint64_t traces = step.traces();
    CHECK(traces == 1);
    reset_stats();
    opt.set_lr(0.003);
    step(d.x, d.y);
    opt.set_lr(0.5);
    step(d.x, d.y);
    CHECK(stats().kernels_compiled == 0);
    CHECK(stats().kernels_launched > 0);
    CHECK(step.traces() == traces);
  }
}

TEST_CASE("jit_step replays trace nothing and compile nothing", "[train][model][counts]") {
  const Data d = make_data(5);
  Mlp m(31);
  Adam opt(m.params(), 0.01);
  auto step = opt.jit_step([&](const Var& x, const Var& y) { return m.loss(x, y); }, "count_step");
  CHECK(step.traces() == 0);
  step(d.x, d.y);
  CHECK(step.traces() == 1);
  reset_stats();
  for (int i = 0; i < 20; ++i) step(d.x, d.y);
  CHECK(step.traces() == 1);
  CHECK(stats().kernels_compiled == 0);
  CHECK(stats().memory_hits == 0);  // replays do not even look kernels up
  CHECK(stats().kernels_launched >= 20);
  CHECK(opt.steps() == 21);
}

TEST_CASE("jit_step: a loss function that fails while traced leaves the model intact",
          "[train][errors]") {
  const Data d = make_data(5);
  Mlp m(31);
  const Vec w1 = values_of(m.w1);
  Adam opt(m.params(), 0.01);
  auto bad = opt.jit_step([&](const Var& x, const Var& y) {
    if (x.item<float>() > 1e30f) return Var();  // reads an argument: an Error while traced
    return m.loss(x, y);
  });
  CHECK_THROWS_AS(bad(d.x, d.y), Error);
  auto undefined = opt.jit_step([](const Var&, const Var&) { return Var(); });
  CHECK_THROWS_AS(undefined(d.x, d.y), Error);
  // A train step called while another jit function is traced would assign inside the trace.
  auto step = opt.jit_step([&](const Var& x, const Var& y) { return m.loss(x, y); });
  auto outer = jit([&](const Var& x, const Var& y) { return step(x, y); }, "outer");
  CHECK_THROWS_AS(outer(d.x, d.y), Error);
  CHECK(opt.steps() == 0);
  // The parameters are the model's Vars again (no placeholder left behind), unchanged.
  CHECK(values_of(m.w1) == w1);
  opt.step(m.loss(d.x, d.y));
  CHECK(opt.steps() == 1);
  CHECK(values_of(m.w1) != w1);
}

// ---------------------------------------------------------------- errors

TEST_CASE("set_steps resumes: a copied model and state continue exactly as the original",
          "[train][adam]") {
  const Data d = make_data(5);
  Mlp a(41), b(43);
  AdamW opt_a(a.params(), 0.01), opt_b(b.params(), 0.01);
  auto step_a = opt_a.jit_step([&](const Var& x, const Var& y) { return a.loss(x, y); });
  auto step_b = opt_b.jit_step([&](const Var& x, const Var& y) { return b.loss(x, y); });
  for (int i = 0; i < 3; ++i) step_a(d.x, d.y);
  // b takes a's parameters, moments and step count, as a checkpoint would give them.
  for (size_t k = 0; k < a.params().size(); ++k) Var(b.params()[k]).assign(a.params()[k] * 1.0);
  for (size_t k = 0; k < opt_a.state().size(); ++k)
    Var(opt_b.state()[k]).assign(opt_a.state()[k] * 1.0);
  opt_b.set_steps(opt_a.steps());
  CHECK(opt_b.steps() == 3);
  const float la = step_a(d.x, d.y).item<float>(), lb = step_b(d.x, d.y).item<float>();
  CHECK(la == lb);
  CHECK(values_of(a.w1) == values_of(b.w1));  // step 4's bias correction in both
  CHECK_THROWS_WITH(opt_b.set_steps(-1), Catch::Contains("set_steps") && Catch::Contains("-1"));
  CHECK(opt_b.steps() == 4);
}

TEST_CASE("optimizer construction errors", "[train][errors]") {
  Var w = zeros({3}), v = zeros({2, 2});
  CHECK_THROWS_AS(SGD(std::vector<Var>{}, 0.1), Error);
  CHECK_THROWS_AS(Adam(std::vector<Var>{}), Error);
  CHECK_THROWS_AS(SGD({w, v, w}, 0.1), Error);
  Var copy = w;
  CHECK_THROWS_AS(Adam({w, copy}), Error);  // a copy is the same parameter
  CHECK_THROWS_AS(SGD({w, zeros({3}, DType::Int32)}, 0.1), DTypeError);
  CHECK_THROWS_AS(Adam({array<int64_t>({1}, {1})}), DTypeError);
  CHECK_THROWS_AS(SGD({w, Var()}, 0.1), Error);
  CHECK_THROWS_AS(SGD({w}, -0.1), Error);
  CHECK_THROWS_AS(Adam({w}, -1e-3), Error);
  CHECK_THROWS_AS(Adam({w}, kNaN), Error);
  CHECK_THROWS_AS(Adam({w}, 1e-3, 1.0), Error);
  CHECK_THROWS_AS(Adam({w}, 1e-3, 1.5), Error);
  CHECK_THROWS_AS(Adam({w}, 1e-3, 0.9, 1.0), Error);
  CHECK_THROWS_AS(Adam({w}, 1e-3, -0.1), Error);
  CHECK_THROWS_AS(Adam({w}, 1e-3, 0.9, 0.999, -1e-8), Error);
  CHECK_THROWS_AS(SGD({w}, 0.1, -0.9), Error);
  CHECK_THROWS_AS(SGD({w}, 0.1, 0.9, -0.1), Error);
  const std::string msg = message_of<Error>([&] { SGD({w}, 0.1, 0, 0, true); });
  CHECK_THAT(msg, Contains("nesterov"));
  CHECK_THAT(message_of<Error>([&] { Adam({w}, 1e-3, 1.0); }), Contains("beta1"));
  CHECK_THAT(message_of<Error>([&] { SGD({w, w}, 0.1); }), Contains("twice"));
  CHECK_THAT(message_of<DTypeError>([&] { SGD({zeros({3}, DType::Int32)}, 0.1); }),
             Contains("int32"));
  // Accepted edge values, and set_lr's own check.
  SGD ok({w}, 0.0, 0.9, 0, true);
  CHECK_NOTHROW(Adam({w}, 1e-3, 0.0, 0.0, 0.0));
  CHECK_THROWS_AS(ok.set_lr(-1), Error);
  CHECK(ok.lr() == 0.0);
  ok.set_lr(0.25);
  CHECK(ok.lr() == 0.25);
}

// ---------------------------------------------------------------- on CUDA

namespace {

// A linear classifier (4 -> 3) trained for 3 steps with SGD + momentum by step() and by
// jit_step() on the current device, and with Adam by jit_step(). The SGD runs are checked
// against the host in double (softmax regression's gradient in closed form); the Adam run is
// returned for comparison across devices.
struct LinearRun {
  Vec sgd_eager, sgd_jit, adam_jit, losses;
};

LinearRun train_linear() {
  const Data d = make_data(9);
  const Vec x = values_of(d.x);
  const Vec w0 = {0.1, -0.2, 0.3, 0.05, 0.4, -0.1, -0.3, 0.2, 0.1, 0.25, -0.15, 0.35};
  const Vec b0 = {0.1, -0.1, 0.05};
  auto loss_of = [&](const Var& w, const Var& b) { return cross_entropy(matmul(d.x, w) + b, d.y); };
  LinearRun run;
  // The host reference: SGD, lr 0.5, momentum 0.9.
  std::vector<Vec> hp = {rounded(w0, DType::Float32), rounded(b0, DType::Float32)};
  HostOptimizer host(Hyper{.lr = 0.5, .momentum = 0.9});
  for (int s = 0; s < 3; ++s) {
    Vec gw(size_t(kD * kClasses), 0.0), gb(size_t(kClasses), 0.0);
    double loss = 0;
    for (int64_t n = 0; n < kN; ++n) {
      Vec z(kClasses);
      double mx = -kInf;
      for (int64_t k = 0; k < kClasses; ++k) {
        z[size_t(k)] = hp[1][size_t(k)];
        for (int64_t i = 0; i < kD; ++i)
          z[size_t(k)] += x[size_t(n * kD + i)] * hp[0][size_t(i * kClasses + k)];
        mx = std::max(mx, z[size_t(k)]);
      }
      double se = 0;
      for (double zk : z) se += std::exp(zk - mx);
      const int32_t label = d.labels[size_t(n)];
      loss -= z[size_t(label)] - mx - std::log(se);
      for (int64_t k = 0; k < kClasses; ++k) {
        const double dz = (std::exp(z[size_t(k)] - mx) / se - (k == label ? 1 : 0)) / double(kN);
        gb[size_t(k)] += dz;
        for (int64_t i = 0; i < kD; ++i) gw[size_t(i * kClasses + k)] += x[size_t(n * kD + i)] * dz;
      }
    }
    run.losses.push_back(loss / double(kN));
    host.step(hp, {gw, gb}, 0.5);
  }
  Vec want = hp[0];
  want.insert(want.end(), hp[1].begin(), hp[1].end());

  auto params_of = [](const Var& w, const Var& b) {
    Vec out = values_of(w);
    const Vec bb = values_of(b);
    out.insert(out.end(), bb.begin(), bb.end());
    return out;
  };
  {
    Var w = make(w0, {kD, kClasses}), b = make(b0, {kClasses});
    SGD opt({w, b}, 0.5, 0.9);
    for (int s = 0; s < 3; ++s) {
      Var loss = loss_of(w, b);
      opt.step(loss);
      check_near(values_of(loss), {run.losses[size_t(s)]}, 1e-5, 1e-6, "SGD step() loss");
    }
    run.sgd_eager = params_of(w, b);
    check_near(run.sgd_eager, want, 1e-5, 1e-6, "SGD step() vs the host");
  }
  {
    Var w = make(w0, {kD, kClasses}), b = make(b0, {kClasses});
    SGD opt({w, b}, 0.5, 0.9);
    auto step = opt.jit_step([&]() { return loss_of(w, b); }, "linear_sgd");
    for (int s = 0; s < 3; ++s)
      check_near(values_of(step()), {run.losses[size_t(s)]}, 1e-5, 1e-6, "SGD jit_step loss");
    run.sgd_jit = params_of(w, b);
    check_near(run.sgd_jit, want, 1e-5, 1e-6, "SGD jit_step vs the host");
    CHECK(step.traces() == 1);
  }
  {
    Var w = make(w0, {kD, kClasses}), b = make(b0, {kClasses});
    Adam opt({w, b}, 0.05);
    auto step = opt.jit_step(
        [&](const Var& xx, const Var& yy) { return cross_entropy(matmul(xx, w) + b, yy); });
    for (int s = 0; s < 3; ++s) step(d.x, d.y);
    run.adam_jit = params_of(w, b);
    for (const Var& s : opt.state()) {
      const Vec sv = values_of(s);
      run.adam_jit.insert(run.adam_jit.end(), sv.begin(), sv.end());
    }
  }
  return run;
}

}  // namespace

TEST_CASE("a small model trains on the current device and matches the CPU", "[train][cuda-emu]") {
  const Device dev = device();
  INFO(describe_device(dev));
  reset_stats();
  const LinearRun here = train_linear();
  check_near(here.sgd_jit, here.sgd_eager, 1e-5, 1e-6, "jit_step vs step()");
  if (dev == Device::CUDA) {
    CHECK(stats().cuda_kernels_launched > 0);  // it did train on CUDA
    set_device(Device::CPU);
    const LinearRun cpu = train_linear();
    set_device(Device::CUDA);
    check_near(here.sgd_eager, cpu.sgd_eager, 1e-5, 1e-6, "SGD step(): CUDA vs CPU");
    check_near(here.sgd_jit, cpu.sgd_jit, 1e-5, 1e-6, "SGD jit_step: CUDA vs CPU");
    check_near(here.adam_jit, cpu.adam_jit, 1e-5, 1e-7, "Adam jit_step: CUDA vs CPU");
  }
}

TEST_CASE("the MLP converges on the current device", "[train][cuda-emu][model]") {
  INFO(describe_device(device()));
  reset_stats();
  check_mlp_converges(30);
  if (device() == Device::CUDA) CHECK(stats().cuda_kernels_launched > 0);
}
