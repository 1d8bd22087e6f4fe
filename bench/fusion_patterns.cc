// The fusion guard (bench/README.md "Fusion patterns"): model patterns that put element-wise
// work, normalisations, a softmax or a gather in front of a contraction, each timed as one jit
// function against the same function split at every contraction input by fusion_barrier(),
// in the same run. The planner's cost model (codegen/fusion_cost.h) must make the fused form
// never slower than the split one; the backward of each pattern is a row too.
#include "bench/fusion_patterns.h"

#include <metajit/metajit.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>

namespace bench {
namespace {

using metajit::Shape;
using metajit::Var;

// Up to five arguments; a pattern ignores the ones it does not use.
using PatternFn = std::function<Var(const std::vector<Var>&, bool split)>;

struct Pattern {
  std::string name;
  std::vector<Var> args;       // realized inputs
  std::vector<int> grad_args;  // the arguments the backward row differentiates
  PatternFn fn;                // the forward; `split` puts a barrier at every contraction input
};

Var at(const Var& v, bool split) {
  return split ? metajit::fusion_barrier(v) : v;
}

Var layer_norm_rows(const Var& x, const Var& g, const Var& b) {
  const int64_t last = x.ndim() - 1;
  Var xc = x - metajit::mean(x, {last}, true);
  return xc / metajit::sqrt(metajit::mean(xc * xc, {last}, true) + 1e-5) * g + b;
}

Var gelu_tanh(const Var& x) {
  return 0.5 * x * (1.0 + metajit::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

Var input(Shape s, uint64_t seed) {
  Var v = metajit::randn(std::move(s), seed);
  metajit::eval({v});
  return v;
}

std::vector<Pattern> patterns() {
  std::vector<Pattern> out;
  out.push_back({"LayerNorm -> Linear [16,64,128]x[128,512]",
                 {input({16, 64, 128}, 1), input({128, 512}, 2), input({128}, 3), input({128}, 4)},
                 {0, 1, 2, 3},
                 [](const std::vector<Var>& a, bool s) {
                   return metajit::matmul(at(layer_norm_rows(a[0], a[2], a[3]), s), at(a[1], s));
                 }});
  // Attention's q, k and v as three Linears of one normalised input: after CSE their operands
  // are one broadcast of the norm, which the planner once stored (64 MiB; the backward 17x
  // slower than split).
  out.push_back({"LayerNorm -> q, k, v Linears [16,64,128]x3x[128,128]",
                 {input({16, 64, 128}, 17), input({128, 128}, 18), input({128, 128}, 19),
                  input({128, 128}, 20)},
                 {0, 1, 2, 3},
                 [](const std::vector<Var>& a, bool s) {
                   const Var h =
                       at(layer_norm_rows(a[0], metajit::ones({128}), metajit::zeros({128})), s);
                   auto linear = [&](const Var& w) {
                     return metajit::matmul(h, at(metajit::transpose(w, {1, 0}), s));
                   };
                   return linear(a[1]) * linear(a[2]) + linear(a[3]);
                 }});
  out.push_back({"softmax -> matmul (attention @ v) 32x[64,64]x[64,64]",
                 {input({32, 64, 64}, 5), input({32, 64, 64}, 6)},
                 {0, 1},
                 [](const std::vector<Var>& a, bool s) {
                   return metajit::matmul(at(metajit::softmax(a[0], 2), s), at(a[1], s));
                 }});
  {
    Var ids = metajit::cast(metajit::rand({1024}, 7) * 999.0, metajit::DType::Int32);
    metajit::eval({ids});
    out.push_back({"embedding gather -> matmul 1024 of [1000,128] x [128,512]",
                   {input({1000, 128}, 8), ids, input({128, 512}, 9)},
                   {0, 2},
                   [](const std::vector<Var>& a, bool s) {
                     return metajit::matmul(at(metajit::embedding(a[0], a[1]), s), at(a[2], s));
                   }});
  }
  out.push_back(
      {"GELU MLP [1024,128]x[128,512]x[512,128]",
       {input({1024, 128}, 10), input({128, 512}, 11), input({512}, 12), input({512, 128}, 13)},
       {1, 2, 3},
       [](const std::vector<Var>& a, bool s) {
         Var h = gelu_tanh(metajit::matmul(at(a[0], s), at(a[1], s)) + a[2]);
         return metajit::matmul(at(h, s), at(a[3], s));
       }});
  out.push_back({"batch-norm normalisation -> conv2d 3x3 8x32x16x16",
                 {input({8, 32, 16, 16}, 14), input({32, 32, 3, 3}, 15)},
                 {0, 1},
                 [](const std::vector<Var>& a, bool s) {
                   Var mu = metajit::mean(a[0], {0, 2, 3}, true);
                   Var xc = a[0] - mu;
                   Var xn = xc / metajit::sqrt(metajit::mean(xc * xc, {0, 2, 3}, true) + 1e-5);
                   return metajit::conv2d(at(xn, s), at(a[1], s), 1, 1);
                 }});
  out.push_back(
      {"q k^T from a packed qkv [16,64,384], 2 heads",
       {input({16, 64, 384}, 16)},
       {0},
       [](const std::vector<Var>& a, bool s) {
         Var q = metajit::reindex(a[0], {16, 2, 64, 64}, {"i0", "i2", "i1*64+i3"});
         Var k = metajit::reindex(a[0], {16, 2, 64, 64}, {"i0", "i2", "128+i1*64+i3"});
         return metajit::matmul(at(q, s), at(metajit::transpose(k, {0, 1, 3, 2}), s)) * 0.125;
       }});
  return out;
}

// One jit function per form: the forward, or the gradients of sum(forward * r) for a fixed r.
Impl pattern_impl(const Pattern& p, bool split, bool backward, const Var& r) {
  auto fn = [p, split, backward, r](Var a0, Var a1, Var a2, Var a3) {
    std::vector<Var> a = {a0, a1, a2, a3};
    a.resize(p.args.size());
    Var y = p.fn(a, split);
    if (!backward) return std::vector<Var>{y};
    std::vector<Var> wrt;
    for (int k : p.grad_args) wrt.push_back(a[size_t(k)]);
    return metajit::grad(metajit::sum(y * r), wrt);
  };
  auto jitted = std::make_shared<decltype(metajit::jit(fn))>(metajit::jit(fn, p.name));
  std::vector<Var> args = p.args;
  while (args.size() < 4) args.push_back(metajit::zeros({1}));
  Impl im;
  im.name = split ? "metajit split" : "metajit";
  im.run = [jitted, args] {
    std::vector<Var> out = (*jitted)(args[0], args[1], args[2], args[3]);
    metajit::eval(out);
  };
  im.result = [jitted, args] {
    std::vector<float> all;
    for (const Var& v : (*jitted)(args[0], args[1], args[2], args[3])) {
      std::vector<float> part = v.to_vector<float>();
      all.insert(all.end(), part.begin(), part.end());
    }
    return all;
  };
  return im;
}

void run_pattern(const Pattern& p, bool backward, Report& report, const Options& opt) {
  const std::string name = "pattern: " + p.name + (backward ? " backward" : "");
  if (!opt.wanted(name)) return;
  std::cerr << "bench: " << name << " ..." << std::endl;
  Var y = p.fn(p.args, false);
  Var r = input(y.shape(), 99);
  std::vector<Impl> impls = {pattern_impl(p, false, backward, r),
                             pattern_impl(p, true, backward, r)};
  std::vector<Timing> t = measure(impls, opt.schedule, 1e-3);
  std::vector<Row> rows(2);
  for (size_t i = 0; i < 2; ++i) {
    rows[i].workload = name;
    rows[i].impl = impls[i].name;
    rows[i].reps = t[i].reps;
    rows[i].max_rel_err = t[i].max_rel_err;
    if (t[i].ok())
      rows[i].seconds = t[i].median_s;
    else
      rows[i].note = t[i].error.empty() ? "not measured" : t[i].error;
  }
  rows[0].metajit_over_impl = 1;
  rows[1].metajit_over_impl = rows[0].seconds / rows[1].seconds;
  rows[0].target = "<= 1.0x split";
  if (!std::isnan(rows[1].metajit_over_impl)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2fx split", rows[1].metajit_over_impl);
    rows[0].measured = buf;
    // Timing noise on a shared machine: within 5% counts as equal.
    rows[0].met = rows[1].metajit_over_impl <= 1.05;
  }
  for (Row& row : rows) report.rows.push_back(std::move(row));
}

}  // namespace

void run_fusion_patterns(Report& report, const Options& opt) {
  for (const Pattern& p : patterns())
    for (bool backward : {false, true}) {
      try {
        run_pattern(p, backward, report, opt);
      } catch (const std::exception& e) {
        Row r;
        r.workload = "pattern: " + p.name + (backward ? " backward" : "");
        r.impl = "metajit";
        r.note = std::string("failed: ") + e.what();
        report.rows.push_back(r);
        std::cerr << "bench: " << r.workload << " failed: " << e.what() << std::endl;
      }
    }
}

}  // namespace bench
