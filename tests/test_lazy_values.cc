// Lazy values are computed at most twice, a variable's chain of updates once (README "Lazy
// evaluation", api/kept_values.h). Checked: Jittor's lazy training loop (parameters updated
// with assign, only the loss read) keeps its graph, its memory and its kernels per step flat
// for 1,000 steps, with SGD and with Adam written by hand, and its losses match a
// double-precision loop; a held value needed again is stored by its second computation;
// temporaries stay fused, constants and views are never stored, nor the product inside a
// matmul; grad() still differentiates through a held value an evaluation stored; the stats()
// counts of the lazy graph; and the same over random graphs, against the reference
// interpreter.
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "api/kept_values.h"
#include "codegen/graph.h"
#include "support/random_graph.h"
#include "support/reference_check.h"
#include "support/reference_compare.h"
#include "support/reference_interpreter.h"

using namespace metajit;

namespace {

constexpr int kSteps = 1000, kBatch = 50, kHidden = 10;

bool evaluated(const Var& v) {
  return explain({v}).rfind("nothing to compute", 0) == 0;
}

// The lazy graph's counts and the memory in use, the numbers that must not grow per step.
struct Snapshot {
  uint64_t live_vars, pending_nodes, realized_nodes, bytes_in_use;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot() {
  const Stats s = stats();
  return {s.live_vars, s.pending_nodes, s.realized_nodes, s.bytes_in_use};
}

std::string describe(const Snapshot& s) {
  return std::to_string(s.live_vars) + " live Vars, " + std::to_string(s.pending_nodes) +
         " pending, " + std::to_string(s.realized_nodes) + " realized, " +
         std::to_string(s.bytes_in_use) + " bytes";
}

// The MLP 1-10-1 of the issue in double precision, trained by plain SGD (lr 0.1) on the same
// batches: the loss of each step, computed before that step's update.
struct HostMlp {
  std::vector<double> w1, b1, w2, b2;

  double step(const std::vector<float>& xf, double lr) {
    std::vector<double> z(size_t(kBatch * kHidden)), h(z.size()), pred(kBatch), d(kBatch);
    double loss = 0;
    for (int n = 0; n < kBatch; ++n) {
      const double x = xf[size_t(n)];
      pred[size_t(n)] = b2[0];
      for (int j = 0; j < kHidden; ++j) {
        const size_t k = size_t(n * kHidden + j);
        z[k] = x * w1[size_t(j)] + b1[size_t(j)];
        h[k] = z[k] > 0 ? z[k] : 0;
        pred[size_t(n)] += h[k] * w2[size_t(j)];
      }
      const double e = pred[size_t(n)] - x * x;
      loss += e * e / kBatch;
      d[size_t(n)] = 2 * e / kBatch;
    }
    std::vector<double> gw1(kHidden, 0), gb1(kHidden, 0), gw2(kHidden, 0);
    double gb2 = 0;
    for (int n = 0; n < kBatch; ++n) {
      gb2 += d[size_t(n)];
      for (int j = 0; j < kHidden; ++j) {
        const size_t k = size_t(n * kHidden + j);
        gw2[size_t(j)] += h[k] * d[size_t(n)];
        const double dz = z[k] > 0 ? d[size_t(n)] * w2[size_t(j)] : 0;
        gw1[size_t(j)] += xf[size_t(n)] * dz;
        gb1[size_t(j)] += dz;
      }
    }
    for (int j = 0; j < kHidden; ++j) {
      w1[size_t(j)] -= lr * gw1[size_t(j)];
      b1[size_t(j)] -= lr * gb1[size_t(j)];
      w2[size_t(j)] -= lr * gw2[size_t(j)];
    }
    b2[0] -= lr * gb2;
    return loss;
  }
};

std::vector<double> as_double(const Var& v) {
  const std::vector<float> f = v.to_vector<float>();
  return {f.begin(), f.end()};
}

// The initial parameters of the loop, evaluated.
std::vector<Var> initial_parameters() {
  std::vector<Var> ps = {randn({1, kHidden}, 11) * 0.5, zeros({kHidden}),
                         randn({kHidden, 1}, 12) * 0.5, zeros({1})};
  eval(ps);
  return ps;
}

Var mlp_loss(const std::vector<Var>& ps, const Var& x, const Var& y) {
  Var pred = matmul(relu(matmul(x, ps[0]) + ps[1]), ps[2]) + ps[3];
  return mean((pred - y) * (pred - y));
}

// How an update rule changes the parameters (and its own state) from their gradients, lazily.
using UpdateRule = void (*)(std::vector<Var>& ps, const std::vector<Var>& gs,
                            std::vector<Var>& state, int step);

void sgd_update(std::vector<Var>& ps, const std::vector<Var>& gs, std::vector<Var>&, int) {
  for (size_t k = 0; k < ps.size(); ++k) ps[k].assign(ps[k] - gs[k] * 0.1);
}

// Adam by hand (lr 1e-2, betas 0.9 / 0.999, eps 1e-8), its moments updated with assign as well.
void adam_update(std::vector<Var>& ps, const std::vector<Var>& gs, std::vector<Var>& state,
                 int step) {
  if (state.empty())
    for (const Var& p : ps) {
      state.push_back(zeros(p.shape()));
      state.push_back(zeros(p.shape()));
    }
  const double c1 = 1 - std::pow(0.9, step + 1), c2 = 1 - std::pow(0.999, step + 1);
  for (size_t k = 0; k < ps.size(); ++k) {
    Var& m = state[2 * k];
    Var& v = state[2 * k + 1];
    m.assign(m * 0.9 + gs[k] * 0.1);
    v.assign(v * 0.999 + gs[k] * gs[k] * 0.001);
    ps[k].assign(ps[k] - (m / c1) / (sqrt(v / c2) + 1e-8) * 0.01);
  }
}

// Runs the loop for kSteps steps with `update`: checks that from step 3 on the lazy
// graph, the memory in use and the kernels launched per step stay what they were at step 3,
// and returns the losses.
std::vector<float> run_lazy_loop(UpdateRule update) {
  std::vector<Var> ps = initial_parameters(), state;
  std::vector<float> losses;
  Snapshot at_step3{};
  uint64_t kernels_at_step3 = 0;
  for (int i = 0; i < kSteps; ++i) {
    const uint64_t launched_before = stats().kernels_launched;
    Var x = rand({kBatch, 1}, uint64_t(1000 + i)), y = x * x;
    Var loss = mlp_loss(ps, x, y);
    std::vector<Var> gs = grad(loss, ps);
    update(ps, gs, state, i);
    losses.push_back(loss.item<float>());  // only the loss is read
    const uint64_t launched = stats().kernels_launched - launched_before;
    const Snapshot now = snapshot();
    if (i == 3) {
      at_step3 = now;
      kernels_at_step3 = launched;
    } else if (i > 3 && (now != at_step3 || launched != kernels_at_step3)) {
      INFO("step " << i << ": " << describe(now) << ", " << launched
                   << " kernels launched; step 3: " << describe(at_step3) << ", "
                   << kernels_at_step3 << " kernels");
      FAIL("the lazy loop grew");
    }
  }
  eval(ps);
  eval(state);
  return losses;
}

}  // namespace

TEST_CASE("the lazy training loop keeps its graph, memory and kernels per step flat (SGD)",
          "[lazy]") {
  // The reference: the same initial values and batches in double precision.
  const std::vector<Var> init = initial_parameters();
  HostMlp host{as_double(init[0]), as_double(init[1]), as_double(init[2]), as_double(init[3])};
  std::vector<double> want;
  for (int i = 0; i < kSteps; ++i)
    want.push_back(host.step(rand({kBatch, 1}, uint64_t(1000 + i)).to_vector<float>(), 0.1));

  const std::vector<float> got = run_lazy_loop(sgd_update);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("step " << i);
    CHECK(std::fabs(double(got[i]) - want[i]) <= 1e-5 + 2e-3 * std::fabs(want[i]));
  }
  CHECK(got.back() < 0.5f * got.front());  // it trains
}

TEST_CASE("the lazy training loop keeps its graph, memory and kernels per step flat (Adam)",
          "[lazy]") {
  const std::vector<float> got = run_lazy_loop(adam_update);
  for (float l : got) REQUIRE(std::isfinite(l));
  CHECK(got.back() < 0.5f * got.front());
}

TEST_CASE("a held value needed again is stored by its second computation, never a third",
          "[lazy]") {
  Var x = rand({64, 32}, 1);
  eval({x});
  const std::vector<float> xv = x.to_vector<float>();
  Var h = exp(x) * 2.0;  // held
  reset_stats();
  eval({sum(h, {1})});
  CHECK(stats().kernels_launched == 1);  // the first time, fused as ever
  CHECK_FALSE(evaluated(h));
  // Needed again: explain() says it will be stored, and this evaluation stores it.
  CHECK(explain({h + 1.0}).find("also stored, needed again") != std::string::npos);
  reset_stats();
  Var z = h + 1.0;
  eval({z});
  // One kernel writes h and h + 1 from it in registers (codegen/output_merging.h).
  CHECK(stats().kernels_launched == 1);
  CHECK(evaluated(h));
  // A third expression over h reads it: exp is not computed again.
  Var u = h * 3.0;
  const std::vector<KernelInfo> kernels = plan({u});
  REQUIRE(kernels.size() == 1);
  for (const std::string& op : kernels[0].ops) CHECK(op.find("exp") == std::string::npos);
  const std::vector<float> zv = z.to_vector<float>(), hv = h.to_vector<float>(),
                           uv = u.to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    const double e = 2 * std::exp(double(xv[i]));
    CHECK(hv[i] == Approx(e).epsilon(1e-6));
    CHECK(zv[i] == Approx(e + 1).epsilon(1e-6));
    CHECK(uv[i] == Approx(3 * e).epsilon(1e-6));
  }
}

TEST_CASE("temporaries stay fused, constants and views of stored values are never stored",
          "[lazy]") {
  Var x = rand({64, 32}, 2);
  eval({x});
  for (int k = 0; k < 3; ++k) {
    reset_stats();
    eval({sum(exp(x) * 2.0, {1})});  // the intermediates are temporaries, new each time
    CHECK(stats().kernels_launched == 1);
  }
  Var b = broadcast_to(x, {4, 64, 32});  // held, a view of a stored value
  Var c = full({64, 32}, 3.0);           // held, a constant
  for (int k = 0; k < 3; ++k) {
    reset_stats();
    eval({sum(b * c)});
    CHECK(stats().kernels_launched == 1);
  }
  CHECK_FALSE(evaluated(b));
  CHECK_FALSE(evaluated(c));
  // The product inside a matmul is larger than what it reads: its inputs are kept instead.
  Var a = exp(x), w = exp(rand({32, 16}, 3));
  Var p = matmul(a, w);
  eval({sum(p)});
  eval({sum(p * 2.0)});
  CHECK(evaluated(p));
  CHECK(evaluated(a));
  CHECK(evaluated(w));
}

TEST_CASE("grad() differentiates through a held value an evaluation stored", "[lazy]") {
  Var w = randn({8, 4}, 3), xin = randn({16, 8}, 4);
  eval({w, xin});
  const std::vector<float> wv = w.to_vector<float>(), xv = xin.to_vector<float>();
  Var pred = matmul(xin, w);  // held
  Var loss = sum(pred * pred);
  sum(pred).item<float>();
  sum(pred * 2.0).item<float>();  // computes pred again, which the loss still reads: stores it
  REQUIRE(evaluated(pred));
  std::vector<Var> g = grad(loss, {w, pred});
  const std::vector<float> gw = g[0].to_vector<float>(), gp = g[1].to_vector<float>(),
                           pv = pred.to_vector<float>();
  // d/dw sum((x w)^2) = 2 x^T (x w); d/dpred = 2 pred.
  for (int64_t k = 0; k < 8; ++k)
    for (int64_t j = 0; j < 4; ++j) {
      double want = 0;
      for (int64_t n = 0; n < 16; ++n) {
        double p = 0;
        for (int64_t q = 0; q < 8; ++q) p += double(xv[size_t(n * 8 + q)]) * wv[size_t(q * 4 + j)];
        want += 2 * double(xv[size_t(n * 8 + k)]) * p;
      }
      CHECK(gw[size_t(k * 4 + j)] == Approx(want).epsilon(1e-4).margin(1e-4));
    }
  for (size_t i = 0; i < gp.size(); ++i) CHECK(gp[i] == Approx(2 * pv[i]).epsilon(1e-6));
}

TEST_CASE("stats() counts live Vars, pending and realized nodes", "[lazy]") {
  const Stats before = stats();
  {
    Var a = array<float>({1, 2, 3}, {3});
    Var b = exp(a);
    Var c = b;  // a copy is the same Var
    const Stats mid = stats();
    CHECK(mid.live_vars == before.live_vars + 2);
    CHECK(mid.realized_nodes == before.realized_nodes + 1);
    CHECK(mid.pending_nodes == before.pending_nodes + 1);
    eval({c});
    const Stats after = stats();
    CHECK(after.pending_nodes == before.pending_nodes);
    CHECK(after.realized_nodes == before.realized_nodes + 2);
  }
  const Stats end = stats();
  CHECK(end.live_vars == before.live_vars);
  CHECK(end.pending_nodes == before.pending_nodes);
  CHECK(end.realized_nodes == before.realized_nodes);
  set_profiling(true);
  Var d = array<float>({1, 2}, {2});
  sum(exp(d)).item<float>();
  CHECK(profile_report().find("lazy graph: ") != std::string::npos);
  set_profiling(false);
}

// Over random graphs (support/random_graph.h): a held intermediate of the outputs is computed
// by their evaluation without being stored (fusion as ever), stored by the next evaluation that
// needs it, with the reference interpreter's values, and then read as a leaf: an expression
// over it computes nothing of its graph a third time.
TEST_CASE("random graphs: a held intermediate is computed at most twice", "[lazy][random]") {
  int checked = 0, skipped = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    metajit_test::GraphGenerator gen(seed);
    const std::vector<Var> outs = gen.build();
    const std::optional<Var> staged = gen.staged();
    if (!staged || staged->node()->realized()) continue;
    const Var held = *staged;
    bool requested = false;  // an output itself (broadcast_to to its own shape is the same node)
    for (const Var& o : outs) requested = requested || o.node() == held.node();
    if (requested) continue;
    if (!worth_storing(*held.node())) {
      ++skipped;  // a view or a value larger than what it reads: what it reads is kept instead
      continue;
    }
    INFO("seed " << seed << "\n" << gen.listing());
    const Var again = held == held;
    std::vector<Var> all = outs;
    all.push_back(held);
    all.push_back(again);
    const std::vector<HostTensor> refs = interpret(all);
    eval(outs);
    CHECK_FALSE(evaluated(held));
    eval({again});
    CHECK(evaluated(held));
    for (const std::string& m : metajit_test::compare_to_reference(all, refs)) FAIL_CHECK(m);
    const Graph g = capture_graph({(held != held).node()});
    CHECK(g.nodes.size() == 2);  // the stored value and the comparison
    ++checked;
  }
  CHECK(checked >= 20);
  WARN(checked << " held intermediates checked, " << skipped << " not worth storing");
}
