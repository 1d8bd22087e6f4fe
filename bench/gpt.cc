// The GPT of samples/gpt_model.h and samples/train_gpt.cc at bench size (bench/README.md "GPT"):
// 4 pre-LayerNorm blocks of d_model 128 with 4 causal heads of 32 (nn::MultiheadAttention) and
// an exact-GELU MLP of 512, context 64, batch 16, the 60-character vocabulary of the Book of
// Genesis (data/kjv/), dropout 0. Two rows: the train step of train_gpt (one jit_step: forward,
// cross-entropy over all B*T positions, backward, global-norm clipping at 1.0, AdamW lr 1e-3,
// betas (0.9, 0.95), eps 1e-8, weight decay 0.1) on one fixed batch, and the forward logits (one
// jit function).
//
// The initial weights come from metajit's own initialisers (manual_seed(kSeed)); they and the
// batch are written with save_safetensors to gpt_bench_init.safetensors beside this executable,
// under the model's state_dict names (torch's: wte.weight, blocks.0.attn.in_proj_weight, ...)
// plus batch.inputs and batch.targets (Int32 [B, T]). bench/peers_gpt.py loads that file into
// PyTorch (eager, torch.compile) and JAX, checks the first loss this file records against a
// float64 numpy forward, and the first kCheckSteps losses against PyTorch eager's.
#include "bench/gpt.h"

#include <metajit/metajit.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/model_rows.h"
#include "bench/timing.h"
#include "gpt_model.h"  // samples/, on the bench's include path
#include "text_data.h"

namespace bench {
namespace {

using metajit::Var;

constexpr int64_t kL = 4, kD = 128, kH = 4, kT = 64, kB = 16;
constexpr uint64_t kSeed = 1;  // manual_seed before the model is built: its initial weights
// Train steps before the timing whose losses the row records (CHECK_STEPS in
// bench/peers_gpt.py).
constexpr int kCheckSteps = 20;

// B windows of T + 1 characters of the text, from mt19937_64(7): inputs [B, T] and the
// characters that follow each position [B, T] (train_gpt's batch()).
std::pair<Var, Var> fixed_batch(const std::vector<int32_t>& ids) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> pick(0, int64_t(ids.size()) - kT - 1);
  std::vector<int32_t> x(size_t(kB * kT)), y(size_t(kB * kT));
  for (int64_t r = 0; r < kB; ++r) {
    const int64_t p = pick(rng);
    std::copy(ids.begin() + p, ids.begin() + p + kT, x.begin() + r * kT);
    std::copy(ids.begin() + p + 1, ids.begin() + p + kT + 1, y.begin() + r * kT);
  }
  return {metajit::array(x, {kB, kT}), metajit::array(y, {kB, kT})};
}

void add_note(Row& r, const std::string& note) {
  r.note += (r.note.empty() ? "" : "; ") + note;
}

// One block of single calls of f for about budget_s, through measure() (bench/timing.h): idle
// 0.1 s first (the other process's thread pool stops spinning), a warm-up and an estimate, then
// between 5 and 1000 timed calls; the median and the count.
std::pair<double, int> time_block(const std::function<void()>& f, double budget_s) {
  Impl im;
  im.name = "metajit";
  im.run = f;
  std::vector<Impl> one = {im};
  Schedule block;
  block.budget_s = budget_s, block.min_reps = 5, block.max_reps = 1000, block.passes = 1;
  block.settle_s = 0.1;
  const Timing t = measure(one, block, 0)[0];
  if (!t.error.empty()) throw std::runtime_error(t.error);
  return {t.median_s, t.reps};
}

// --serve-gpt's request loop (bench/gpt.h).
void serve(const std::function<void()>& step, const std::function<void()>& forward) {
  std::cout << "ready" << std::endl;
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::string what;
    double budget = 0;
    in >> what >> budget;
    if (what == "quit") return;
    const std::function<void()>* f =
        what == "step" ? &step : what == "forward" ? &forward : nullptr;
    if (!f || !(budget > 0)) {
      std::cout << "error: expected 'step SECONDS', 'forward SECONDS' or 'quit', got '" << line
                << "'" << std::endl;
      continue;
    }
    try {
      const auto [seconds, reps] = time_block(*f, budget);
      std::cout << std::setprecision(9) << seconds << " " << reps << std::endl;
    } catch (const std::exception& e) {
      std::cout << "error: " << e.what() << std::endl;
    }
  }
}

}  // namespace

void run_gpt(Report& report, const Options& opt) {
  const std::string step_name = "GPT L4 D128 H4 T64 B16 adamw train step";
  const std::string fwd_name = "GPT L4 D128 H4 T64 B16 forward";
  if (!opt.wanted(step_name) && !opt.wanted(fwd_name)) return;
  std::cerr << "bench: GPT ..." << std::endl;
  Var x, y;
  std::shared_ptr<gpt::GPT> model;
  int64_t vocab = 0;
  std::string file;
  try {
    const std::string text = text::read_gz(METAJIT_KJV_TEXT);
    const text::Vocab chars(text);
    vocab = chars.size();
    std::tie(x, y) = fixed_batch(chars.encode(text));
    gpt::GPTConfig cfg;
    cfg.layers = kL, cfg.d_model = kD, cfg.heads = kH, cfg.context = kT, cfg.dropout = 0;
    metajit::manual_seed(kSeed);
    model = std::make_shared<gpt::GPT>(vocab, cfg);
    metajit::nn::StateDict all = model->state_dict();
    all["batch.inputs"] = x;
    all["batch.targets"] = y;
    const std::filesystem::path dir = std::filesystem::path(opt.probe_path).parent_path();
    file = std::filesystem::absolute(dir / "gpt_bench_init.safetensors").string();
    save_safetensors(file, all, {{"vocab", std::to_string(vocab)}, {"text", METAJIT_KJV_TEXT}});
  } catch (const std::exception& e) {
    for (const std::string& name : {step_name, fwd_name}) {
      if (!opt.wanted(name)) continue;
      Row r;
      r.workload = name;
      r.impl = "metajit";
      r.note = std::string("set-up failed: ") + e.what();
      report.rows.push_back(r);
    }
    return;
  }
  auto adamw = std::make_shared<metajit::AdamW>(model->parameters(), 1e-3, 0.9, 0.95, 1e-8, 0.1);
  adamw->set_max_grad_norm(1.0);
  using LossFn = std::function<Var(const Var&, const Var&)>;
  auto step = std::make_shared<decltype(adamw->jit_step(LossFn()))>(adamw->jit_step(
      LossFn([model](const Var& i, const Var& t) { return gpt::lm_loss((*model)(i), t); }),
      "gpt train step"));
  // The forward captures the model, whose parameters are the Vars the train step assigns: the
  // forward row is timed on whatever weights they hold (the values are irrelevant to its time);
  // its probe is taken from the initial weights, before any step.
  auto fwd = std::make_shared<decltype(metajit::jit(std::function<Var(Var)>()))>(
      metajit::jit(std::function<Var(Var)>([model](Var i) { return (*model)(i); }), "gpt forward"));
  if (opt.serve_gpt) {
    serve([step, x, y] { (*step)(x, y).item<float>(); },
          [fwd, x] { metajit::eval({(*fwd)(x)}); });
    return;
  }
  std::vector<double> probe;
  std::string probe_note =
      "weights: metajit's initialisers, manual_seed(1); logits of 3 "
      "positions recorded";
  try {
    if (opt.wanted(fwd_name)) probe = logits_probe((*fwd)(x));
  } catch (const std::exception& e) {
    probe_note = std::string("forward failed before timing: ") + e.what();
  }
  if (opt.wanted(step_name)) {
    auto run = [step, x, y] { return (*step)(x, y).item<float>(); };
    Row checked;
    std::string note;
    try {
      for (int s = 0; s < kCheckSteps; ++s) checked.losses.push_back(run());
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "weights: metajit's initialisers, manual_seed(1); loss %.4f -> %.4f over %d "
                    "steps",
                    checked.losses.front(), checked.losses.back(), kCheckSteps);
      note = buf;
    } catch (const std::exception& e) {
      note = std::string("check steps failed: ") + e.what();
    }
    Impl im;
    im.name = "metajit";
    im.run = [run] { run(); };
    std::vector<Impl> impls = {im};
    Row r = metajit_row(step_name, measure(impls, opt.schedule, 1e-3)[0]);
    if (!checked.losses.empty()) {
      r.loss_first = checked.losses.front();
      r.loss_after_check = checked.losses.back();
    }
    r.losses = checked.losses;
    r.weights_file = file;
    add_note(r, note);
    report.rows.push_back(r);
  }
  if (opt.wanted(fwd_name)) {
    Impl im;
    im.name = "metajit";
    im.run = [fwd, x] { metajit::eval({(*fwd)(x)}); };
    std::vector<Impl> impls = {im};
    Row r = metajit_row(fwd_name, measure(impls, opt.schedule, 1e-3)[0]);
    r.logits_probe = probe;
    r.weights_file = file;
    add_note(r, probe_note);
    report.rows.push_back(r);
  }
}

}  // namespace bench
