// One pre-norm transformer block as a language model (bench/README.md "Transformer"): token and
// position embeddings, LayerNorm, 2-head causal self-attention out of a packed qkv, a tanh-GELU
// FFN, a final LayerNorm and the vocabulary projection, cross-entropy over every position;
// B16 T64 D128 H2 FFN512 vocab 64, as issue 24 measured it. Two rows: an Adam train step (one
// jit_step) and the forward (one jit function). bench/peers_transformer.py builds the same
// model in PyTorch (eager, torch.compile) and JAX from the same weights and data, and checks
// the first loss and forward values this file records against a float64 numpy forward.
#include "bench/transformer.h"

#include <metajit/metajit.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/model_rows.h"

namespace bench {
namespace {

using metajit::Shape;
using metajit::Var;

constexpr int64_t kB = 16, kT = 64, kD = 128, kH = 2, kF = 512, kV = 64;
// Train steps before the timing whose losses the row records (CHECK_STEPS in
// bench/peers_transformer.py: the peers' loss_after_check is taken after as many).
constexpr int kCheckSteps = 20;

// Weights and data from a formula numpy computes bit for bit (bench/peers_transformer.py
// `hashed_uniform` / `hashed_ids`, bench/README.md "Transformer"), so that every framework
// starts from the same values: element i of stream s is splitmix64((s << 32) + i).
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// u = the hash's top 24 bits / 2^24 in [0, 1), then (2u - 1) * std * sqrt(3): uniform with
// standard deviation `std`. 2u - 1 is exact in double, so the product and the cast to float are
// the only roundings, the same in numpy.
Var hashed_uniform(uint64_t stream, Shape shape, double std) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const double a = std * std::sqrt(3.0);
  std::vector<float> v(size_t(n), 0.f);
  for (int64_t i = 0; i < n; ++i) {
    const double u = double(splitmix64((stream << 32) + uint64_t(i)) >> 40) * 0x1p-24;
    v[size_t(i)] = float((2.0 * u - 1.0) * a);
  }
  return metajit::array(v, std::move(shape));
}

// Class / token ids in [0, 64): the hash's top 6 bits.
Var hashed_ids(uint64_t stream, Shape shape) {
  static_assert(kV == 64, "the ids are the hash's top 6 bits");
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<int32_t> v(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = int32_t(splitmix64((stream << 32) + uint64_t(i)) >> 58);
  return metajit::array(v, std::move(shape));
}

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

// Parameter p of Block::params() is stream p: matrices uniform with std 0.02, LayerNorm gains
// 1, biases 0. The ids are stream 17, the targets stream 18.
Block make_block() {
  auto w = [](uint64_t p, Shape s) { return hashed_uniform(p, std::move(s), 0.02); };
  Block p{w(0, {kV, kD}),       w(1, {kT, kD}),       metajit::ones({kD}),
          metajit::zeros({kD}), w(4, {kD, 3 * kD}),   metajit::zeros({3 * kD}),
          w(6, {kD, kD}),       metajit::zeros({kD}), metajit::ones({kD}),
          metajit::zeros({kD}), w(10, {kD, kF}),      metajit::zeros({kF}),
          w(12, {kF, kD}),      metajit::zeros({kD}), metajit::ones({kD}),
          metajit::zeros({kD}), w(16, {kD, kV}),      Var()};
  std::vector<float> m(size_t(kT * kT));
  for (int64_t i = 0; i < kT; ++i)
    for (int64_t j = 0; j < kT; ++j) m[size_t(i * kT + j)] = j <= i ? 0.f : -1e9f;
  p.mask = metajit::array(m, {kT, kT});
  std::vector<Var> all = p.params();
  all.push_back(p.mask);
  metajit::eval(all);
  return p;
}

// The first kCheckSteps steps on the fixed batch, not timed: peers.py checks the first loss
// against its float64 reference (the steps change the weights, so they come after the
// forward's probe, and before measure()'s warm-up calls). Returns the note for the row.
std::string check_steps(Row& r, const std::function<float()>& step) {
  try {
    for (int s = 0; s < kCheckSteps; ++s) {
      const double loss = step();
      if (s == 0) r.loss_first = loss;
      r.loss_after_check = loss;
    }
  } catch (const std::exception& e) {
    return std::string("check steps failed: ") + e.what();
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "weights: splitmix64 formula; loss %.4f -> %.4f over %d steps",
                r.loss_first, r.loss_after_check, kCheckSteps);
  return buf;
}

void add_note(Row& r, const std::string& note) {
  r.note += (r.note.empty() ? "" : "; ") + note;
}

}  // namespace

void run_transformer(Report& report, const Options& opt) {
  const std::string step_name = "transformer block B16 T64 D128 H2 FFN512 adam train step";
  const std::string fwd_name = "transformer block B16 T64 D128 H2 FFN512 forward";
  if (!opt.wanted(step_name) && !opt.wanted(fwd_name)) return;
  std::cerr << "bench: transformer block ..." << std::endl;
  auto p = std::make_shared<Block>(make_block());
  Var ids = hashed_ids(17, {kB, kT});
  Var tgt = hashed_ids(18, {kB * kT});
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
  // From the initial weights: before any train step.
  std::vector<double> probe;
  std::string probe_note = "weights: splitmix64 formula; logits of 3 positions recorded";
  try {
    if (opt.wanted(fwd_name)) probe = logits_probe((*fwd)(ids));
  } catch (const std::exception& e) {
    probe_note = std::string("forward failed before timing: ") + e.what();
  }
  if (opt.wanted(step_name)) {
    auto run = [step, ids, tgt] { return (*step)(ids, tgt).item<float>(); };
    Row checked;
    const std::string note = check_steps(checked, run);
    Impl im;
    im.name = "metajit";
    im.run = [run] { run(); };
    std::vector<Impl> impls = {im};
    Row r = metajit_row(step_name, measure(impls, opt.schedule, 1e-3)[0]);
    r.loss_first = checked.loss_first;
    r.loss_after_check = checked.loss_after_check;
    add_note(r, note);
    report.rows.push_back(r);
  }
  if (opt.wanted(fwd_name)) {
    Impl im;
    im.name = "metajit";
    im.run = [fwd, ids] { metajit::eval({(*fwd)(ids)}); };
    std::vector<Impl> impls = {im};
    Row r = metajit_row(fwd_name, measure(impls, opt.schedule, 1e-3)[0]);
    r.logits_probe = probe;
    add_note(r, probe_note);
    report.rows.push_back(r);
  }
}

}  // namespace bench
