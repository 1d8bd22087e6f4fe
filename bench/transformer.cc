// One pre-norm transformer block as a language model (bench/README.md "Transformer"): token and
// position embeddings, LayerNorm, 2-head causal self-attention out of a packed qkv, a tanh-GELU
// FFN, a final LayerNorm and the vocabulary projection, cross-entropy over every position;
// B16 T64 D128 H2 FFN512 vocab 64, as issue 24 measured it. Two rows: an Adam train step (one
// jit_step) and the forward (one jit function). metajit's rows only for now: the PyTorch, JAX
// peers from identical weights are still to be written (bench/README.md).
#include "bench/transformer.h"

#include <metajit/metajit.h>

#include <iostream>
#include <memory>

namespace bench {
namespace {

using metajit::Shape;
using metajit::Var;

constexpr int64_t kB = 16, kT = 64, kD = 128, kH = 2, kF = 512, kV = 64;

struct Block {
  Var tok, pos, g1, b1, wqkv, bqkv, wo, bo, g2, b2, w1, c1, w2, c2, gf, bf, wout, mask;
  std::vector<Var> params() const {
    return {tok, pos, g1, b1, wqkv, bqkv, wo, bo, g2, b2, w1, c1, w2, c2, gf, bf, wout};
  }
};

Var layer_norm(const Var& x, const Var& g, const Var& b) {
  Var xc = x - metajit::mean(x, {2}, true);
  return xc / metajit::sqrt(metajit::mean(xc * xc, {2}, true) + 1e-5) * g + b;
}

Var gelu_tanh(const Var& x) {
  return 0.5 * x * (1.0 + metajit::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// Heads of 64 out of the packed [B, T, 3D] projection: q and v as [B, H, T, 64], k transposed.
Var logits(const Block& p, const Var& ids) {
  using metajit::matmul;
  using metajit::reindex;
  Var x =
      metajit::reshape(metajit::embedding(p.tok, metajit::reshape(ids, {kB * kT})), {kB, kT, kD}) +
      p.pos;
  Var qkv = matmul(layer_norm(x, p.g1, p.b1), p.wqkv) + p.bqkv;
  Var q = reindex(qkv, {kB, kH, kT, 64}, {"i0", "i2", "i1*64+i3"});
  Var kt = reindex(qkv, {kB, kH, 64, kT}, {"i0", "i3", "128+i1*64+i2"});
  Var v = reindex(qkv, {kB, kH, kT, 64}, {"i0", "i2", "256+i1*64+i3"});
  Var att = metajit::softmax(matmul(q, kt) * 0.125 + p.mask, 3);
  Var o = reindex(matmul(att, v), {kB, kT, kD}, {"i0", "i2/64", "i1", "i2%64"});
  Var h = x + matmul(o, p.wo) + p.bo;
  h = h + matmul(gelu_tanh(matmul(layer_norm(h, p.g2, p.b2), p.w1) + p.c1), p.w2) + p.c2;
  return matmul(layer_norm(h, p.gf, p.bf), p.wout);
}

Block make_block() {
  uint64_t seed = 31;
  auto normal = [&](Shape s, double scale) {
    Var v = metajit::randn(std::move(s), seed++) * scale;
    metajit::eval({v});
    return v;
  };
  Block p{normal({kV, kD}, 0.02), normal({kT, kD}, 0.02),     metajit::ones({kD}),
          metajit::zeros({kD}),   normal({kD, 3 * kD}, 0.02), metajit::zeros({3 * kD}),
          normal({kD, kD}, 0.02), metajit::zeros({kD}),       metajit::ones({kD}),
          metajit::zeros({kD}),   normal({kD, kF}, 0.02),     metajit::zeros({kF}),
          normal({kF, kD}, 0.02), metajit::zeros({kD}),       metajit::ones({kD}),
          metajit::zeros({kD}),   normal({kD, kV}, 0.02),     Var()};
  std::vector<float> m(size_t(kT * kT));
  for (int64_t i = 0; i < kT; ++i)
    for (int64_t j = 0; j < kT; ++j) m[size_t(i * kT + j)] = j <= i ? 0.f : -1e9f;
  p.mask = metajit::array(m, {kT, kT});
  std::vector<Var> all = p.params();
  all.push_back(p.mask);
  metajit::eval(all);
  return p;
}

Row row_of(const std::string& workload, const Timing& t) {
  Row r;
  r.workload = workload;
  r.impl = "metajit";
  r.reps = t.reps;
  if (t.ok())
    r.seconds = t.median_s;
  else
    r.note = t.error.empty() ? "not measured" : t.error;
  r.note += (r.note.empty() ? "" : "; ") + std::string("peers not written yet");
  return r;
}

}  // namespace

void run_transformer(Report& report, const Options& opt) {
  const std::string step_name = "transformer block B16 T64 D128 H2 FFN512 adam train step";
  const std::string fwd_name = "transformer block B16 T64 D128 H2 FFN512 forward";
  if (!opt.wanted(step_name) && !opt.wanted(fwd_name)) return;
  std::cerr << "bench: transformer block ..." << std::endl;
  auto p = std::make_shared<Block>(make_block());
  Var ids = metajit::cast(metajit::rand({kB, kT}, 91) * double(kV - 1), metajit::DType::Int32);
  Var tgt = metajit::cast(metajit::rand({kB * kT}, 92) * double(kV - 1), metajit::DType::Int32);
  metajit::eval({ids, tgt});
  auto adam = std::make_shared<metajit::Adam>(p->params(), 1e-3);
  auto step =
      std::make_shared<decltype(adam->jit_step(std::function<Var(const Var&, const Var&)>()))>(
          adam->jit_step(
              std::function<Var(const Var&, const Var&)>([p](const Var& i, const Var& t) {
                return metajit::cross_entropy(metajit::reshape(logits(*p, i), {kB * kT, kV}), t);
              }),
              "transformer train step"));
  auto fwd = std::make_shared<decltype(metajit::jit(std::function<Var(Var)>()))>(metajit::jit(
      std::function<Var(Var)>([p](Var i) { return logits(*p, i); }), "transformer forward"));
  if (opt.wanted(step_name)) {
    Impl im;
    im.name = "metajit";
    im.run = [step, ids, tgt] { (*step)(ids, tgt).item<float>(); };
    std::vector<Impl> impls = {im};
    report.rows.push_back(row_of(step_name, measure(impls, opt.schedule, 1e-3)[0]));
  }
  if (opt.wanted(fwd_name)) {
    Impl im;
    im.name = "metajit";
    im.run = [fwd, ids] { metajit::eval({(*fwd)(ids)}); };
    std::vector<Impl> impls = {im};
    report.rows.push_back(row_of(fwd_name, measure(impls, opt.schedule, 1e-3)[0]));
  }
}

}  // namespace bench
