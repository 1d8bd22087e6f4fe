// A character-level language model trained on the King James Version's Book of Genesis
// (data/kjv/): each character is predicted from the 8 before it by an MLP over their embeddings
// (embedding -> concat -> tanh hidden layer -> logits over the vocabulary), trained with Adam on
// batches of random windows, the whole step (forward, backward, update) one jit function. It
// prints the unigram entropy of the text, per epoch the training and held-out loss in nats per
// character, microseconds per step, traces and compiles, and at the end text sampled from the
// model (README "Training").
//
//   ./train_charlm [--epochs N] [--lr LR] [--temperature T] [--check]
//
// --check (the registered test): a short run; exit status 1 unless the held-out loss is at least
// 0.5 nats/char below the unigram entropy and nothing compiled after the first epoch, nor while
// sampling after the first character.
#include <metajit/metajit.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "text_data.h"

using namespace metajit;

namespace {

constexpr int64_t kContext = 8;      // characters the model sees
constexpr int64_t kEmbed = 24;       // dimensions per character
constexpr int64_t kHidden = 512;     // tanh units
constexpr int64_t kBatch = 128;      // windows per training step
constexpr int64_t kEvalRows = 1024;  // windows per held-out evaluation call
constexpr double kDecay = 0.7;       // learning rate per epoch
constexpr double kMargin = 0.5;      // --check: held-out loss <= unigram entropy - kMargin

struct Options {
  int epochs = 12;
  double lr = 2e-3;  // the first epoch's; each later one uses kDecay times the one before
  double temperature = 0.8;
  bool check = false;
};

Options parse_options(int argc, char** argv) {
  Options o;
  bool epochs_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--check") {
      o.check = true;
    } else if (a == "--epochs" && i + 1 < argc) {
      o.epochs = std::atoi(argv[++i]);
      epochs_given = true;
    } else if (a == "--lr" && i + 1 < argc) {
      o.lr = std::atof(argv[++i]);
    } else if (a == "--temperature" && i + 1 < argc) {
      o.temperature = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--epochs N] [--lr LR] [--temperature T] [--check]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  if (o.check && !epochs_given) o.epochs = 3;
  if (o.epochs < 1) o.epochs = 1;
  if (!(o.temperature > 0)) o.temperature = 1;
  return o;
}

Var init_weight(Shape shape, double stddev, uint64_t seed) {
  Var w = randn(std::move(shape), seed) * stddev;
  eval({w});
  return w;
}

// ids [n, kContext] (Int32) -> logits [n, vocab]: the characters' rows of the embedding table,
// side by side, through a tanh layer to one logit per character of the vocabulary.
Var logits(const Var& ids, const Var& table, const Var& w1, const Var& b1, const Var& w2,
           const Var& b2) {
  const int64_t n = ids.shape()[0];
  const Var e = embedding(table, ids);  // [n, kContext, kEmbed]
  const Var h = tanh(matmul(reshape(e, {n, kContext * kEmbed}), w1) + b1);
  return matmul(h, w2) + b2;
}

struct CharMLP {
  Var table, w1, b1, w2, b2;
  explicit CharMLP(int64_t vocab, uint64_t seed = 1)
      : table(init_weight({vocab, kEmbed}, 1.0, seed)),
        w1(init_weight({kContext * kEmbed, kHidden}, 1.0 / std::sqrt(double(kContext * kEmbed)),
                       seed + 1)),
        b1(zeros({kHidden})),
        w2(init_weight({kHidden, vocab}, 0.1 / std::sqrt(double(kHidden)), seed + 2)),
        b2(zeros({vocab})) {}
  std::vector<Var> params() const { return {table, w1, b1, w2, b2}; }
  Var operator()(const Var& ids) const { return logits(ids, table, w1, b1, w2, b2); }
};

// The windows ending before positions[first..first+count) of `ids`: contexts [count, kContext]
// and the characters that follow them [count].
std::pair<Var, Var> windows(const std::vector<int32_t>& ids, const std::vector<int64_t>& positions,
                            size_t first, int64_t count) {
  std::vector<int32_t> x(static_cast<size_t>(count * kContext)), y(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t p = positions[first + size_t(i)];
    std::copy(ids.begin() + (p - kContext), ids.begin() + p, x.begin() + i * kContext);
    y[size_t(i)] = ids[size_t(p)];
  }
  return {array(x, {count, kContext}), array(y, {count})};
}

}  // namespace

int main(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  try {
    const auto t_start = Clock::now();
    const Options o = parse_options(argc, argv);
    const std::string text = text::read_gz(METAJIT_KJV_TEXT);
    const text::Vocab vocab(text);
    const int64_t V = vocab.size();
    // Held out: the last tenth of the verses (lines), one stretch of text the model never sees
    // (not verses scattered among the training ones, whose neighbours it would have seen).
    int64_t lines = std::count(text.begin(), text.end(), '\n');
    size_t cut = 0;
    for (int64_t l = 0; l < lines - lines / 10; ++l) cut = text.find('\n', cut) + 1;
    const std::vector<int32_t> train_ids = vocab.encode(text.substr(0, cut));
    const std::vector<int32_t> held_ids = vocab.encode(text.substr(cut));

    // The unigram entropy of the training split: the loss of a model that knows only how often
    // each character occurs.
    std::vector<double> count(static_cast<size_t>(V), 0.0);
    for (const int32_t c : train_ids) count[size_t(c)] += 1;
    double unigram = 0;
    for (const double k : count)
      if (k > 0) unigram -= k / double(train_ids.size()) * std::log(k / double(train_ids.size()));
    std::printf(
        "train_charlm: %s: %zu characters (%lld verses), vocabulary %lld; training %zu, held out "
        "%zu (the last %lld verses)\n",
        METAJIT_KJV_TEXT, text.size(), (long long)lines, (long long)V, train_ids.size(),
        held_ids.size(), (long long)(lines / 10));
    std::printf(
        "model: context %lld, embedding %lld, tanh hidden %lld, batch %lld, Adam lr %g (x%g per "
        "epoch), %s\n",
        (long long)kContext, (long long)kEmbed, (long long)kHidden, (long long)kBatch, o.lr, kDecay,
        describe_device(device()).c_str());
    std::printf("unigram entropy of the training split: %.4f nats/char (%.4f bits/char)\n", unigram,
                unigram / std::log(2.0));

    CharMLP model(V);
    Adam opt(model.params(), o.lr);
    // The whole step (forward, backward, every update) is one jit function, created once.
    auto step = opt.jit_step([&](const Var& x, const Var& y) { return cross_entropy(model(x), y); },
                             "charlm_step");
    // The held-out loss of each window: -log p(next char), picked out of log_softmax by gather.
    // A plain jit function bakes in the Vars it captures (README "jit"), so the parameters are
    // arguments: each call sees their current values.
    auto window_loss = jit(
        [](const Var& x, const Var& y, const Var& table, const Var& w1, const Var& b1,
           const Var& w2, const Var& b2) {
          const int64_t n = y.shape()[0];
          const Var logp = log_softmax(logits(x, table, w1, b1, w2, b2), 1);
          return -reshape(gather(logp, 1, reshape(y, {n, 1})), {n});
        },
        "charlm_held_out");
    std::vector<int64_t> held_positions;
    for (int64_t p = kContext; p < int64_t(held_ids.size()); ++p) held_positions.push_back(p);
    const int64_t n_held = int64_t(held_positions.size());
    // Mean over every held-out window, in calls of kEvalRows windows (the last call starts
    // kEvalRows before the end and counts only the windows not counted yet: one shape).
    auto held_out_loss = [&] {
      double sum = 0;
      for (int64_t first = 0; first < n_held; first += kEvalRows) {
        const int64_t start = std::min(first, n_held - kEvalRows);
        auto [x, y] = windows(held_ids, held_positions, size_t(start), kEvalRows);
        const std::vector<float> loss =
            window_loss(x, y, model.table, model.w1, model.b1, model.w2, model.b2)
                .to_vector<float>();
        for (int64_t i = first - start; i < kEvalRows; ++i) sum += loss[size_t(i)];
      }
      return sum / double(n_held);
    };

    std::mt19937_64 rng(7);
    std::uniform_int_distribution<int64_t> pick(kContext, int64_t(train_ids.size()) - 1);
    // An epoch: as many random windows as the training split has characters.
    const int64_t steps_per_epoch = int64_t(train_ids.size()) / kBatch;
    std::vector<int64_t> positions(static_cast<size_t>(kBatch));
    uint64_t compiles_after_first = 0;
    double held = 0;
    std::printf("epoch  train loss  held-out loss  us/step  traces  compiles  seconds\n");
    for (int e = 1; e <= o.epochs; ++e) {
      const auto t0 = Clock::now();
      opt.set_lr(o.lr * std::pow(kDecay, e - 1));  // compiles nothing: lr is a kernel argument
      const uint64_t compiled_before = stats().kernels_compiled;
      double loss_sum = 0;
      std::vector<double> us;
      for (int64_t s = 0; s < steps_per_epoch; ++s) {
        for (auto& p : positions) p = pick(rng);
        auto [x, y] = windows(train_ids, positions, 0, kBatch);
        eval({x, y});
        const auto ts = Clock::now();
        const Var loss = step(x, y);
        us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - ts).count());
        loss_sum += loss.item<float>();
      }
      held = held_out_loss();
      const uint64_t compiled = stats().kernels_compiled - compiled_before;
      if (e > 1) compiles_after_first += compiled;
      std::sort(us.begin(), us.end());
      std::printf("%5d  %10.4f  %13.4f  %7.1f  %6llu  %8llu  %7.1f\n", e,
                  loss_sum / double(steps_per_epoch), held, us[us.size() / 2],
                  (unsigned long long)step.traces(), (unsigned long long)compiled,
                  std::chrono::duration<double>(Clock::now() - t0).count());
      std::fflush(stdout);
    }

    // Sampling: the model on one window [1, kContext] at a time (one shape, so one trace and the
    // same kernels for every character), the next character drawn on the host.
    auto next_probs =
        jit([](const Var& x, const Var& table, const Var& w1, const Var& b1, const Var& w2,
               const Var& b2) { return softmax(logits(x, table, w1, b1, w2, b2), 1); },
            "charlm_sample");
    const std::string prompt = "In the beginning";
    std::vector<int32_t> context = vocab.encode(std::string(size_t(kContext), '\n') + prompt);
    context.erase(context.begin(), context.end() - kContext);
    std::mt19937_64 sample_rng(2024);
    std::string generated = prompt;
    uint64_t sample_compiles = 0, compiled_before = 0;
    for (int i = 0; i < 200; ++i) {
      if (i == 1) compiled_before = stats().kernels_compiled;
      const std::vector<float> p = next_probs(array(context, {1, kContext}), model.table, model.w1,
                                              model.b1, model.w2, model.b2)
                                       .to_vector<float>();
      std::vector<double> w(p.size());
      double total = 0;
      for (size_t c = 0; c < p.size(); ++c)
        total += w[c] = std::pow(double(p[c]), 1 / o.temperature);
      double u = double(sample_rng() >> 11) * 0x1p-53 * total;
      size_t c = 0;
      while (c + 1 < w.size() && u >= w[c]) u -= w[c++];
      generated.push_back(vocab.chars[c]);
      context.erase(context.begin());
      context.push_back(int32_t(c));
    }
    sample_compiles = stats().kernels_compiled - compiled_before;
    std::printf(
        "sample (temperature %g, seed 2024, prompt \"%s\"; %llu compiles after the first "
        "character, %llu traces):\n%s\n",
        o.temperature, prompt.c_str(), (unsigned long long)sample_compiles,
        (unsigned long long)next_probs.traces(), generated.c_str());

    const double seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
    std::printf(
        "held-out loss %.4f nats/char (%.4f bits/char) against the unigram entropy %.4f "
        "(%.4f below); compiles after epoch 1: %llu; traces: %llu; %.1f s\n",
        held, held / std::log(2.0), unigram, unigram - held,
        (unsigned long long)compiles_after_first, (unsigned long long)step.traces(), seconds);
    if (!o.check) return 0;
    bool ok = true;
    if (!(held <= unigram - kMargin)) {
      std::printf(
          "CHECK FAILED: held-out loss %.4f is not %.1f nats/char below the unigram "
          "entropy %.4f\n",
          held, kMargin, unigram);
      ok = false;
    }
    if (compiles_after_first != 0 || step.traces() != 1 || window_loss.traces() != 1) {
      std::printf(
          "CHECK FAILED: %llu compiles after epoch 1, %llu traces of the step and %llu of the "
          "held-out loss; expected 0, 1 and 1\n",
          (unsigned long long)compiles_after_first, (unsigned long long)step.traces(),
          (unsigned long long)window_loss.traces());
      ok = false;
    }
    if (sample_compiles != 0 || next_probs.traces() != 1) {
      std::printf(
          "CHECK FAILED: sampling compiled %llu kernels after the first character and "
          "traced %llu times; expected 0 and 1\n",
          (unsigned long long)sample_compiles, (unsigned long long)next_probs.traces());
      ok = false;
    }
    if (!ok) return 1;
    std::printf("check passed\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_charlm: %s\n", e.what());
    return 2;
  }
}
