// A decoder-only transformer (GPT) trained on the King James Version's Book of Genesis
// (data/kjv/), character by character: token and learned position embeddings, pre-LayerNorm
// blocks of causal multi-head attention and a GELU MLP, dropout, an untied output head. The whole
// train step (forward, backward, gradient clipping, AdamW with decoupled weight decay) is one
// jit function; the learning rate follows cosine_lr with warmup. It prints the unigram entropy,
// the training and held-out loss in nats per character, milliseconds per step, traces and
// compiles; saves a safetensors checkpoint (the model, the optimizer's state and its step
// count), can resume from one, and samples text (README "The GPT sample").
//
//   ./train_gpt [--steps N] [--layers L] [--d-model D] [--heads H] [--context T] [--batch B]
//               [--lr LR] [--dropout P] [--save FILE] [--resume FILE]
//               [--autocast bfloat16|float16] [--compare] [--distributed] [--check]
//   mpirun --oversubscribe --bind-to none -np 2 ./train_gpt --distributed --check
//
// --distributed: data-parallel over the ranks of an mpirun world (README "Distributed
// training"): every step draws the same global batch of B windows on every rank, and each rank
// trains on its B / world_size of them, the gradients averaged over the ranks; dropout draws
// from a stream seeded by (step, rank). Only rank 0 prints; every rank checks.
// --autocast: the step, the held-out loss and sampling under metajit::autocast (float16 with
// loss scaling). --compare: trains the model twice from the same initial weights, in float32
// and under --autocast (bfloat16 unless given), and reports both held-out losses and the bytes
// of one step; with --check (the registered test sample_train_gpt_autocast), exit status 1
// unless the half run's held-out loss is within kCompareLoss of float32's, the bytes its step
// allocates beyond its results (the new parameters and state) at most kCompareBytes of
// float32's, and neither run compiled after its first step.
//
// Reproducible: batch s is drawn from a generator seeded with s, and the random stream (dropout)
// is reseeded with s before step s, so a run resumed from a checkpoint takes exactly the steps
// the uninterrupted run takes.
//
// --check (the registered test): a short run of a small model that trains half the steps, saves
// a checkpoint, trains the rest; then a second model, initialised differently, resumes from the
// checkpoint and trains the same second half. Exit status 1 unless the resumed losses equal the
// uninterrupted ones exactly, the held-out loss is at least kMargin below the unigram entropy,
// nothing compiled after the first step (held-out evaluations and the resumed run included), and
// nothing while sampling after the first character.
#include <metajit/metajit.h>
#include <unistd.h>
#ifdef METAJIT_SAMPLE_DISTRIBUTED
#include <metajit/distributed.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gpt_model.h"
#include "text_data.h"

using namespace metajit;
using gpt::GPT;
using gpt::lm_loss;

namespace {

constexpr double kMargin = 0.5;  // --check: held-out loss <= unigram entropy - kMargin
constexpr int64_t kHeldBatches = 4;
constexpr double kCompareLoss = 0.01, kCompareBytes = 0.6;  // --compare --check

struct Options : gpt::GPTConfig {
  int64_t steps = 600, batch = 16;
  double lr = 3e-3, weight_decay = 0.1, clip = 1.0;
  std::string save, resume;
  bool check = false, compare = false, distributed = false;
  std::optional<DType> autocast;  // --autocast
  int rank = 0, ranks = 1;        // --distributed: this rank, and the world's size
};

// For its lifetime, an autocast of o's dtype when o has one.
class AutocastOf {
 public:
  explicit AutocastOf(const Options& o) {
    if (o.autocast) scope_.emplace(*o.autocast);
  }

 private:
  std::optional<autocast> scope_;
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--steps N] [--layers L] [--d-model D] [--heads H] [--context T] "
               "[--batch B] [--lr LR] [--dropout P] [--save FILE] [--resume FILE] "
               "[--autocast bfloat16|float16] [--compare] [--distributed] [--check]\n",
               argv0);
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    auto integer = [&] { return has_value ? std::atoll(argv[++i]) : (usage(argv[0]), 0LL); };
    auto number = [&] { return has_value ? std::atof(argv[++i]) : (usage(argv[0]), 0.0); };
    if (a == "--check") {
      o.check = true;
      o.steps = 160, o.layers = 2, o.d_model = 64, o.context = 32;
    } else if (a == "--steps") {
      o.steps = integer();
    } else if (a == "--layers") {
      o.layers = integer();
    } else if (a == "--d-model") {
      o.d_model = integer();
    } else if (a == "--heads") {
      o.heads = integer();
    } else if (a == "--context") {
      o.context = integer();
    } else if (a == "--batch") {
      o.batch = integer();
    } else if (a == "--lr") {
      o.lr = number();
    } else if (a == "--dropout") {
      o.dropout = number();
    } else if (a == "--save" && has_value) {
      o.save = argv[++i];
    } else if (a == "--resume" && has_value) {
      o.resume = argv[++i];
    } else if (a == "--compare") {
      o.compare = true;
    } else if (a == "--distributed") {
      o.distributed = true;
    } else if (a == "--autocast" && has_value &&
               (argv[i + 1] == std::string("bfloat16") || argv[i + 1] == std::string("float16"))) {
      o.autocast = argv[++i] == std::string("bfloat16") ? DType::BFloat16 : DType::Float16;
    } else {
      usage(argv[0]);
    }
  }
  if (o.steps < 2 || o.layers < 1 || o.d_model < 1 || o.heads < 1 || o.d_model % o.heads != 0 ||
      o.context < 2 || o.batch < 1)
    usage(argv[0]);
  if (o.compare && !o.autocast) o.autocast = DType::BFloat16;
  if (o.distributed) {
#ifdef METAJIT_SAMPLE_DISTRIBUTED
    o.rank = dist::rank();
    o.ranks = dist::world_size();
    if (o.batch % o.ranks != 0 || o.compare) {
      std::fprintf(stderr,
                   "%s: --distributed needs a batch (%lld) that divides among the %d ranks, "
                   "and no --compare\n",
                   argv[0], (long long)o.batch, o.ranks);
      std::exit(2);
    }
#else
    std::fprintf(stderr, "%s: --distributed: built without MPI (metajit::distributed)\n", argv[0]);
    std::exit(2);
#endif
  }
  return o;
}

// B windows of T + 1 characters of `ids` starting where `rng` says: inputs [B, T] and the
// characters that follow each position [B, T].
// Only windows [first, first + rows) are kept (every window is drawn, so that they are the same
// windows whatever part a rank keeps).
std::pair<Var, Var> batch(const std::vector<int32_t>& ids, int64_t b, int64_t t,
                          std::mt19937_64& rng, int64_t first = 0, int64_t rows = -1) {
  if (rows < 0) rows = b;
  std::uniform_int_distribution<int64_t> pick(0, int64_t(ids.size()) - t - 1);
  std::vector<int32_t> x(size_t(rows * t)), y(size_t(rows * t));
  for (int64_t r = 0; r < b; ++r) {
    const int64_t p = pick(rng);
    if (r < first || r >= first + rows) continue;
    std::copy(ids.begin() + p, ids.begin() + p + t, x.begin() + (r - first) * t);
    std::copy(ids.begin() + p + 1, ids.begin() + p + t + 1, y.begin() + (r - first) * t);
  }
  return {array(x, {rows, t}), array(y, {rows, t})};
}

// A model, its optimizer and its train step, created once.
struct Trainer {
  GPT model;
  AdamW opt;
  const Options& o;
  decltype(opt.jit_step(std::function<Var(const Var&, const Var&)>())) step;
  Trainer(int64_t vocab, const Options& options)
      : model(vocab, options),
        opt(model.parameters(), options.lr, 0.9, 0.95, 1e-8, options.weight_decay),
        o(options),
        step(opt.jit_step(
            std::function<Var(const Var&, const Var&)>([this](const Var& x, const Var& y) {
              const AutocastOf scope(o);
              return lm_loss(model(x), y);
            }),
            "gpt_step")) {
    opt.set_max_grad_norm(options.clip);
    if (options.autocast == DType::Float16) opt.set_loss_scaling(LossScaling{});
    if (options.distributed) opt.set_data_parallel();  // rank 0's weights on every rank
  }
  // Step s (1-based): its batch, its dropout masks and its learning rate depend on s alone (and
  // on the rank, distributed).
  double train_step(int64_t s, const std::vector<int32_t>& ids) {
    std::mt19937_64 rng{uint64_t(s)};
    const int64_t rows = o.batch / o.ranks;
    auto [x, y] = batch(ids, o.batch, o.context, rng, o.rank * rows, rows);
    manual_seed(uint64_t(s) * uint64_t(o.ranks) + uint64_t(o.rank));
    opt.set_lr(cosine_lr(s - 1, o.lr, o.steps / 10, o.steps, o.lr / 10));
    return step(x, y).item<float>();
  }
};

void save_checkpoint(const std::string& path, const Trainer& t) {
  nn::StateDict all = t.model.state_dict();
  for (size_t k = 0; k < t.opt.state().size(); ++k)
    all["optimizer.state." + std::to_string(k)] = t.opt.state()[k];
  save_safetensors(path, all, {{"steps", std::to_string(t.opt.steps())}});
}

void load_checkpoint(const std::string& path, Trainer& t) {
  std::map<std::string, std::string> meta;
  nn::StateDict all = load_safetensors(path, &meta);
  nn::StateDict model;
  for (auto& [name, v] : all)
    if (name.rfind("optimizer.state.", 0) != 0) model.emplace(name, v);
  t.model.load_state_dict(model);
  for (size_t k = 0; k < t.opt.state().size(); ++k) {
    Var s = t.opt.state()[k];  // a copy is the same variable
    s.assign(all.at("optimizer.state." + std::to_string(k)));
  }
  t.opt.set_steps(std::stoll(meta.at("steps")));
}

// The mean loss over kHeldBatches fixed batches of the held-out text, in eval mode (no dropout):
// plain lazy evaluation, whose programs are remembered (README "Repeated evaluation").
double held_out_loss(GPT& model, const std::vector<int32_t>& ids, const Options& o) {
  model.eval();
  std::mt19937_64 rng(12345);
  double sum = 0;
  for (int64_t k = 0; k < kHeldBatches; ++k) {
    auto [x, y] = batch(ids, o.batch, o.context, rng);
    const AutocastOf scope(o);
    sum += lm_loss(model(x), y).item<float>();
  }
  model.train();
  return sum / double(kHeldBatches);
}

// `n` characters after `prompt`, drawn at temperature 0.8 from the model's logits on the last
// `context` characters, padded on the right to one shape (causal attention: padding after the
// last real character cannot change its logits). The window is row 0 of a batch of the training
// shape, [B, T]. The first character compiles the sampling graph's kernels (the logits are an
// output here, not fused into a loss); `*compiles_after_first` counts those compiled later.
std::string sample(GPT& model, const text::Vocab& vocab, const std::string& prompt, int n,
                   const Options& o, uint64_t* compiles_after_first) {
  uint64_t compiled_at_first = 0;
  model.eval();
  std::vector<int32_t> ids = vocab.encode(prompt);
  std::mt19937_64 rng(2024);
  for (int i = 0; i < n; ++i) {
    if (i == 1) compiled_at_first = stats().kernels_compiled;
    const int64_t len = std::min<int64_t>(int64_t(ids.size()), o.context);
    std::vector<int32_t> window(size_t(o.batch * o.context), 0);
    std::copy(ids.end() - len, ids.end(), window.begin());
    Var logits;
    {
      const AutocastOf scope(o);
      logits = model(array(window, {o.batch, o.context}));
    }
    // Every position's distribution, row len - 1 picked on the host: a slice at len - 1 would
    // put len into the index expressions, and compile a kernel for each length.
    const std::vector<float> all =
        softmax(reshape(logits, {o.batch * o.context, vocab.size()}) * (1 / 0.8), 1)
            .to_vector<float>();
    const std::vector<float> p(all.begin() + (len - 1) * vocab.size(),
                               all.begin() + len * vocab.size());
    double u = double(rng() >> 11) * 0x1p-53;
    size_t c = 0;
    while (c + 1 < p.size() && u >= p[c]) u -= p[c++];
    ids.push_back(int32_t(c));
  }
  *compiles_after_first = stats().kernels_compiled - compiled_at_first;
  model.train();
  std::string out;
  for (const int32_t c : ids) out.push_back(vocab.chars[size_t(c)]);
  return out;
}

double unigram_entropy(const std::vector<int32_t>& ids, int64_t vocab) {
  std::vector<double> count(size_t(vocab), 0.0);
  for (const int32_t c : ids) count[size_t(c)] += 1;
  double h = 0;
  for (const double k : count)
    if (k > 0) h -= k / double(ids.size()) * std::log(k / double(ids.size()));
  return h;
}

// --compare: the same training in float32 and under o.autocast, from the same initial weights
// and batches. Returns the exit status (with --check, 1 unless kCompareLoss and kCompareBytes
// hold and neither run compiled after its first step).
int compare_precision(const Options& o, int64_t vocab, const std::vector<int32_t>& train_ids,
                      const std::vector<int32_t>& held_ids) {
  struct Run {
    double held = 0;
    // The most bytes alive during one step above those alive before it, and the part of them
    // that are the step's results (the new parameters and optimizer state, float32 in both
    // runs): the rest is what the step computes on the way, activations above all.
    uint64_t step_bytes = 0, result_bytes = 0, compiles_after_first = 0;
    int64_t skipped = 0;
  };
  std::vector<Options> plans{o, o};
  plans[0].autocast.reset();
  std::vector<Run> runs;
  for (const Options& p : plans) {
    manual_seed(1);  // the same initial weights
    Trainer run(vocab, p);
    Run r;
    held_out_loss(run.model, held_ids, p);  // its kernels compiled before step 1, as in main
    uint64_t compiled_at_step1 = 0;
    for (int64_t s = 1; s <= p.steps; ++s) {
      run.train_step(s, train_ids);
      if (s == 1) compiled_at_step1 = stats().kernels_compiled;
    }
    r.held = held_out_loss(run.model, held_ids, p);
    r.compiles_after_first = stats().kernels_compiled - compiled_at_step1;
    reset_stats();  // one more step, its bytes above those alive before it
    const uint64_t before = stats().bytes_in_use;
    run.train_step(p.steps, train_ids);
    r.step_bytes = stats().peak_bytes - before;
    for (const Var& v : run.opt.params())
      r.result_bytes += uint64_t(v.numel()) * dtype_size(v.dtype());
    for (const Var& v : run.opt.state())
      r.result_bytes += uint64_t(v.numel()) * dtype_size(v.dtype());
    r.compiles_after_first += stats().kernels_compiled;
    r.skipped = run.opt.skipped_steps();
    std::printf(
        "%s: held-out loss %.4f after %lld steps; bytes of one step %llu (%llu of them "
        "its results); compiles after step 1: %llu%s\n",
        p.autocast ? dtype_name(*p.autocast) : "float32", r.held, (long long)p.steps,
        (unsigned long long)r.step_bytes, (unsigned long long)r.result_bytes,
        (unsigned long long)r.compiles_after_first,
        p.autocast == DType::Float16 ? (", steps skipped " + std::to_string(r.skipped) +
                                        ", loss scale " + std::to_string(run.opt.loss_scale()))
                                           .c_str()
                                     : "");
    runs.push_back(r);
  }
  auto computed = [](const Run& r) { return double(r.step_bytes - r.result_bytes); };
  const double loss_ratio = runs[1].held / runs[0].held,
               bytes_ratio = double(runs[1].step_bytes) / double(runs[0].step_bytes),
               computed_ratio = computed(runs[1]) / computed(runs[0]);
  std::printf(
      "compare: held-out loss %.4f vs float32 %.4f (%+.2f%%); bytes of a step %.2fx, "
      "without its results %.2fx\n",
      runs[1].held, runs[0].held, 100 * (loss_ratio - 1), bytes_ratio, computed_ratio);
  if (!o.check) return 0;
  if (loss_ratio > 1 + kCompareLoss || computed_ratio > kCompareBytes ||
      runs[0].compiles_after_first + runs[1].compiles_after_first != 0) {
    std::printf(
        "CHECK FAILED: need the half run's held-out loss within %.0f%% of float32's, the "
        "bytes its step computes on the way at most %.1fx, no compiles after step 1\n",
        100 * kCompareLoss, kCompareBytes);
    return 1;
  }
  std::printf("check passed\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  try {
    const auto t_start = Clock::now();
    const Options o = parse_options(argc, argv);
    if (o.rank != 0) std::freopen("/dev/null", "w", stdout);  // only rank 0 prints
    const std::string text = text::read_gz(METAJIT_KJV_TEXT);
    const text::Vocab vocab(text);
    // Held out: the last tenth of the text, one stretch the model never sees.
    const size_t cut = text.rfind('\n', text.size() - text.size() / 10) + 1;
    const std::vector<int32_t> train_ids = vocab.encode(text.substr(0, cut));
    const std::vector<int32_t> held_ids = vocab.encode(text.substr(cut));
    const double unigram = unigram_entropy(train_ids, vocab.size());
    std::printf(
        "train_gpt: %s: vocabulary %lld, training %zu characters, held out %zu\n"
        "model: %lld layers, d_model %lld, %lld heads, context %lld, batch %lld, dropout %g; "
        "AdamW lr %g (cosine, warmup %lld), weight decay %g, clip %g%s; %s\n"
        "unigram entropy of the training split: %.4f nats/char\n",
        METAJIT_KJV_TEXT, (long long)vocab.size(), train_ids.size(), held_ids.size(),
        (long long)o.layers, (long long)o.d_model, (long long)o.heads, (long long)o.context,
        (long long)o.batch, o.dropout, o.lr, (long long)(o.steps / 10), o.weight_decay, o.clip,
        !o.autocast                     ? ""
        : o.autocast == DType::BFloat16 ? "; autocast bfloat16"
                                        : "; autocast float16 with loss scaling",
        describe_device(device()).c_str(), unigram);

    if (o.compare) return compare_precision(o, vocab.size(), train_ids, held_ids);
    manual_seed(1);  // the initial weights
    Trainer run(vocab.size(), o);
    std::printf("parameters: %zu tensors\n", run.model.parameters().size());
    if (o.distributed)
      std::printf("data-parallel on %d ranks: %lld windows each of every global batch of %lld\n",
                  o.ranks, (long long)(o.batch / o.ranks), (long long)o.batch);
    int64_t first = 1;
    if (!o.resume.empty()) {
      load_checkpoint(o.resume, run);
      first = run.opt.steps() + 1;
      std::printf("resumed from %s at step %lld\n", o.resume.c_str(), (long long)first);
    }
    const double held0 = held_out_loss(run.model, held_ids, o);
    std::printf("held-out loss before training: %.4f\n", held0);
    const int64_t save_at = o.check ? o.steps / 2 : o.steps;
    const std::string checkpoint =
        !o.save.empty() ? o.save
                        : (std::filesystem::temp_directory_path() /
                           ("train_gpt_check_" + std::to_string(::getpid()) + ".safetensors"))
                              .string();

    std::printf(" step  train loss  held-out  ms/step  traces  compiles\n");
    uint64_t compiled_at_step1 = 0;
    std::vector<double> losses(size_t(o.steps + 1), 0.0);
    double held = held0, window_sum = 0;
    std::vector<double> ms;
    for (int64_t s = first; s <= o.steps; ++s) {
      const auto t0 = Clock::now();
      losses[size_t(s)] = run.train_step(s, train_ids);
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      window_sum += losses[size_t(s)];
      if (s == first) {
        compiled_at_step1 = stats().kernels_compiled;
        std::printf("step %lld: %llu kernels compiled so far (%.1f s)\n", (long long)s,
                    (unsigned long long)compiled_at_step1,
                    std::chrono::duration<double>(Clock::now() - t_start).count());
      }
      if (s == save_at && (o.check || !o.save.empty())) save_checkpoint(checkpoint, run);
      if (s % 40 == 0 || s == o.steps) {
        held = held_out_loss(run.model, held_ids, o);
        std::vector<double> sorted = ms;
        std::sort(sorted.begin(), sorted.end());
        std::printf("%5lld  %10.4f  %8.4f  %7.2f  %6llu  %8llu\n", (long long)s,
                    window_sum / double(ms.size()), held, sorted[sorted.size() / 2],
                    (unsigned long long)run.step.traces(),
                    (unsigned long long)(stats().kernels_compiled - compiled_at_step1));
        std::fflush(stdout);
        window_sum = 0;
        ms.clear();
      }
    }
    // Compiles after step 1 while training: none expected (sampling is counted apart).
    uint64_t train_compiles = stats().kernels_compiled - compiled_at_step1, sample_compiles = 0;
    const std::string text_out =
        sample(run.model, vocab, "In the beginning", 120, o, &sample_compiles);
    std::printf(
        "sample (temperature 0.8, seed 2024; %llu compiles after the first character):\n%s\n",
        (unsigned long long)sample_compiles, text_out.c_str());
    const uint64_t compiled_after_sampling = stats().kernels_compiled;
    std::printf("held-out loss %.4f against the unigram entropy %.4f (%.4f below); %.1f s\n", held,
                unigram, unigram - held,
                std::chrono::duration<double>(Clock::now() - t_start).count());
    if (!o.check) return 0;

    // The resume check: a differently initialised model loads the checkpoint and retakes the
    // second half.
    manual_seed(99);
    Trainer resumed(vocab.size(), o);
    load_checkpoint(checkpoint, resumed);
    std::filesystem::remove(checkpoint);
    int64_t mismatches = 0;
    for (int64_t s = save_at + 1; s <= o.steps; ++s) {
      const double l = resumed.train_step(s, train_ids);
      if (l != losses[size_t(s)]) {
        if (mismatches++ == 0)
          std::printf("CHECK FAILED: resumed step %lld loss %.9g, uninterrupted %.9g\n",
                      (long long)s, l, losses[size_t(s)]);
      }
    }
    const uint64_t resumed_compiles = stats().kernels_compiled - compiled_after_sampling;
    train_compiles += resumed_compiles;
    std::printf(
        "resumed at step %lld: %lld of %lld losses differ; training compiles after step 1: %llu "
        "(%llu in the resumed run)\n",
        (long long)save_at + 1, (long long)mismatches, (long long)(o.steps - save_at),
        (unsigned long long)train_compiles, (unsigned long long)resumed_compiles);
    bool ok = mismatches == 0;
    if (!(held <= unigram - kMargin)) {
      std::printf("CHECK FAILED: held-out loss %.4f is not %.1f nats/char below %.4f\n", held,
                  kMargin, unigram);
      ok = false;
    }
    if (train_compiles != 0 || sample_compiles != 0 || run.step.traces() != 1) {
      std::printf(
          "CHECK FAILED: %llu training compiles after step 1, %llu while sampling after the "
          "first character, %llu traces; expected 0, 0 and 1\n",
          (unsigned long long)train_compiles, (unsigned long long)sample_compiles,
          (unsigned long long)run.step.traces());
      ok = false;
    }
    if (!ok) return 1;
    std::printf("check passed\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: %s\n", e.what());
    return 2;
  }
}
