// The UCI optical-digits data shipped in data/digits/ (1797 8x8 images, pixels 0..16, labels
// 0..9; credits in data/digits/README.md), and the two models trained on it by
// samples/train_digits and samples/train_cnn (and timed by `make bench`'s training rows).
#pragma once
#include <metajit/metajit.h>
#include <zlib.h>
#ifdef METAJIT_SAMPLE_DISTRIBUTED
#include <metajit/distributed.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace digits {

#ifndef METAJIT_DIGITS_CSV
#define METAJIT_DIGITS_CSV "data/digits/digits.csv.gz"
#endif

struct Split {
  std::vector<float> x;    // [n, 64], pixels / 16
  std::vector<int32_t> y;  // [n]
  int64_t n = 0;
};
struct Data {
  Split train, held_out;  // held out: every fifth image (index % 5 == 4), 359 of 1797
};

// Reads the gzip CSV (64 pixels then the label per line); throws std::runtime_error naming the
// file and the line on anything malformed.
inline Data load(const std::string& path = METAJIT_DIGITS_CSV) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path + " (the digits data, data/digits/)");
  Data d;
  char line[1024];
  int64_t row = 0;
  while (gzgets(f, line, sizeof line)) {
    Split& s = row % 5 == 4 ? d.held_out : d.train;
    const char* p = line;
    for (int k = 0; k < 65; ++k) {
      char* end;
      const long v = std::strtol(p, &end, 10);
      if (end == p || v < 0 || v > 16 || (k == 64 && v > 9)) {
        gzclose(f);
        throw std::runtime_error(path + ": line " + std::to_string(row + 1) +
                                 " is not 64 pixels 0..16 and a label 0..9");
      }
      if (k < 64)
        s.x.push_back(float(v) / 16.0f);
      else
        s.y.push_back(int32_t(v));
      p = *end == ',' ? end + 1 : end;
    }
    ++s.n;
    ++row;
  }
  gzclose(f);
  if (row != 1797)
    throw std::runtime_error(path + ": " + std::to_string(row) + " images, not 1797");
  return d;
}

// Rows [first, first + count) of a split as Vars: images [count, 64] and labels [count].
inline std::pair<metajit::Var, metajit::Var> batch(const Split& s,
                                                   const std::vector<int64_t>& order, int64_t first,
                                                   int64_t count) {
  std::vector<float> x(static_cast<size_t>(count * 64));
  std::vector<int32_t> y(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int64_t r = order[size_t(first + i)];
    std::copy(s.x.begin() + r * 64, s.x.begin() + r * 64 + 64, x.begin() + i * 64);
    y[size_t(i)] = s.y[size_t(r)];
  }
  return {metajit::array(x, {count, 64}), metajit::array(y, {count})};
}

// y + b, with b in y's dtype when y is a half product (under autocast): a float32 bias would
// make the activation float32 again. nn's layers do the same (nn/linear.cc).
inline metajit::Var plus_bias(const metajit::Var& y, const metajit::Var& b) {
  return metajit::is_half(y.dtype()) ? y + metajit::cast(b, y.dtype()) : y + b;
}

// He-style initialisation (normal, std sqrt(2 / fan_in)); biases start at zero.
inline metajit::Var init_weight(metajit::Shape shape, int64_t fan_in, uint64_t seed) {
  metajit::Var w = metajit::randn(std::move(shape), seed) * std::sqrt(2.0 / double(fan_in));
  metajit::eval({w});
  return w;
}

// A multi-layer perceptron: relu between layers, none after the last.
struct MLP {
  std::vector<metajit::Var> weights, biases;
  explicit MLP(const std::vector<int64_t>& sizes, uint64_t seed = 1) {
    for (size_t l = 0; l + 1 < sizes.size(); ++l) {
      weights.push_back(init_weight({sizes[l], sizes[l + 1]}, sizes[l], seed + l));
      biases.push_back(metajit::zeros({sizes[l + 1]}));
    }
  }
  std::vector<metajit::Var> params() const {
    std::vector<metajit::Var> p;
    for (size_t l = 0; l < weights.size(); ++l) p.insert(p.end(), {weights[l], biases[l]});
    return p;
  }
  // x: [n, sizes[0]] -> logits [n, sizes.back()]
  metajit::Var operator()(const metajit::Var& x) const {
    metajit::Var h = x;
    for (size_t l = 0; l < weights.size(); ++l) {
      h = plus_bias(metajit::matmul(h, weights[l]), biases[l]);
      if (l + 1 < weights.size()) h = metajit::relu(h);
    }
    return h;
  }
};

// conv(1->8, 3x3, pad 1)-relu-maxpool 2, conv(8->16, 3x3, pad 1)-relu-maxpool 2, linear 64->10.
struct CNN {
  metajit::Var c1, b1, c2, b2, w, b;
  explicit CNN(uint64_t seed = 1)
      : c1(init_weight({8, 1, 3, 3}, 9, seed)),
        b1(metajit::zeros({1, 8, 1, 1})),
        c2(init_weight({16, 8, 3, 3}, 72, seed + 1)),
        b2(metajit::zeros({1, 16, 1, 1})),
        w(init_weight({64, 10}, 64, seed + 2)),
        b(metajit::zeros({10})) {}
  std::vector<metajit::Var> params() const { return {c1, b1, c2, b2, w, b}; }
  // x: [n, 64] (flat 8x8 images) -> logits [n, 10]
  metajit::Var operator()(const metajit::Var& x) const {
    using namespace metajit;
    const int64_t n = x.shape()[0];
    Var h = reshape(x, {n, 1, 8, 8});
    h = max_pool2d(relu(plus_bias(conv2d(h, c1, 1, 1), b1)), 2, 2);  // [n, 8, 4, 4]
    h = max_pool2d(relu(plus_bias(conv2d(h, c2, 1, 1), b2)), 2, 2);  // [n, 16, 2, 2]
    return plus_bias(matmul(reshape(h, {n, 64}), w), b);
  }
};

}  // namespace digits

namespace digits {

struct TrainOptions {
  int epochs = 30;
  int64_t batch = 64;
  bool sgd = false;    // SGD (momentum 0.9) instead of Adam
  double lr = 0;       // 0: 0.05 for SGD, 3e-3 for Adam
  bool check = false;  // exit status 1 unless the bounds below hold
  double min_accuracy = 0.95;
  // --autocast bfloat16|float16: the step and the held-out evaluation under metajit::autocast;
  // float16 with loss scaling (GradScaler's defaults).
  std::optional<metajit::DType> autocast;
  // --compare: a float32 run, then the --autocast run (bfloat16 unless given) from the same
  // initial weights and batches; with --check also held-out accuracy within kCompareAccuracy of
  // float32's and the bytes a step allocates beyond its results at most kCompareBytes of
  // float32's (TrainResult).
  bool compare = false;
  // --distributed: data-parallel over the ranks of an mpirun world (README "Distributed
  // training"): each rank trains on its batch / world_size rows of every global batch of `batch`
  // rows, the gradients averaged over the ranks; only rank 0 prints. The same global batches as
  // one process, so the same accuracy up to rounding.
  bool distributed = false;
};
constexpr double kCompareAccuracy = 0.01, kCompareBytes = 0.6;

inline TrainOptions parse_options(int argc, char** argv, int default_epochs) {
  TrainOptions o;
  o.epochs = default_epochs;
  auto usage = [&] {
    std::fprintf(stderr,
                 "usage: %s [--sgd|--adam] [--lr LR] [--epochs N] [--autocast bfloat16|float16] "
                 "[--compare] [--distributed] [--check]\n",
                 argv[0]);
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string value = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--sgd") {
      o.sgd = true;
    } else if (a == "--adam") {
      o.sgd = false;
    } else if (a == "--check") {
      o.check = true;
    } else if (a == "--compare") {
      o.compare = true;
    } else if (a == "--distributed") {
      o.distributed = true;
    } else if (a == "--epochs" && i + 1 < argc) {
      o.epochs = std::atoi(argv[++i]);
    } else if (a == "--lr" && i + 1 < argc) {
      o.lr = std::atof(argv[++i]);
    } else if (a == "--autocast" && (value == "bfloat16" || value == "float16")) {
      o.autocast = value == "bfloat16" ? metajit::DType::BFloat16 : metajit::DType::Float16;
      ++i;
    } else {
      usage();
    }
  }
  if (o.epochs < 1) o.epochs = 1;
#ifndef METAJIT_SAMPLE_DISTRIBUTED
  if (o.distributed) {
    std::fprintf(stderr, "%s: --distributed: built without MPI (metajit::distributed)\n", argv[0]);
    std::exit(2);
  }
#endif
  if (o.compare && !o.autocast) o.autocast = metajit::DType::BFloat16;
  return o;
}

// What one training run measured.
struct TrainResult {
  double accuracy = 0;  // held out, after the last epoch
  uint64_t compiles_after_first = 0, traces = 0;
  // One more step after the last epoch: the most bytes alive during it above those alive before
  // it (stats().peak_bytes - bytes_in_use), and the part of them that are its results (the new
  // parameters and optimizer state, float32 in every run): the rest is what the step computes
  // on the way, activations above all.
  uint64_t step_bytes = 0, result_bytes = 0;
  int64_t skipped_steps = 0;  // loss scaling's (float16)
};

// The held-out accuracy of `model` (under an autocast of `scope_dtype` when set).
template <class Model>
double held_out_accuracy(const Model& model, const metajit::Var& hx, const Split& held_out,
                         std::optional<metajit::DType> scope_dtype) {
  using namespace metajit;
  std::optional<autocast> scope;
  if (scope_dtype) scope.emplace(*scope_dtype);
  const Var predicted_var = argmax(model(hx), 1);
  scope.reset();
  const std::vector<int32_t> predicted = predicted_var.to_vector<int32_t>();
  int64_t right = 0;
  for (size_t i = 0; i < predicted.size(); ++i) right += predicted[i] == held_out.y[i];
  return double(right) / double(held_out.n);
}

// The optimizer o asks for, over `params`: Adam or SGD, loss scaling under float16 autocast.
inline std::unique_ptr<metajit::Optimizer> make_optimizer(const TrainOptions& o,
                                                          std::vector<metajit::Var> params) {
  using namespace metajit;
  std::unique_ptr<Optimizer> opt;
  const double lr = o.lr > 0 ? o.lr : (o.sgd ? 0.05 : 3e-3);
  if (o.sgd)
    opt = std::make_unique<SGD>(std::move(params), lr, 0.9);
  else
    opt = std::make_unique<Adam>(std::move(params), lr);
  if (o.autocast == DType::Float16) opt->set_loss_scaling(LossScaling{});
  return opt;
}

// Trains `model` (a callable [n, 64] -> logits [n, 10] with params()) on the training split with
// the whole step as one jit function, printing per epoch the mean loss, the held-out accuracy,
// the median time per step, and the traces and compiles so far.
template <class Model>
TrainResult train_once(const char* title, const Model& model, const TrainOptions& o,
                       const Data& data) {
  using namespace metajit;
  using Clock = std::chrono::steady_clock;
  const std::unique_ptr<Optimizer> opt = make_optimizer(o, model.params());
  // Data-parallel: this rank's share of every global batch (rows [rank * rows, ...) of it).
  int64_t rows = o.batch, first_row = 0;
#ifdef METAJIT_SAMPLE_DISTRIBUTED
  if (o.distributed) {
    if (o.batch % dist::world_size() != 0)
      throw std::runtime_error("--distributed: the batch of " + std::to_string(o.batch) +
                               " rows does not divide among " + std::to_string(dist::world_size()) +
                               " ranks");
    rows = o.batch / dist::world_size();
    first_row = dist::rank() * rows;
    opt->set_data_parallel();
    std::printf("data-parallel on %d ranks: %lld rows each of every global batch of %lld\n",
                dist::world_size(), (long long)rows, (long long)o.batch);
  }
#endif
  std::printf("%s: %lld training images, %lld held out (every fifth), batch %lld, %s lr %g, %s%s\n",
              title, (long long)data.train.n, (long long)data.held_out.n, (long long)o.batch,
              o.sgd ? "SGD momentum 0.9" : "Adam", opt->lr(), describe_device(device()).c_str(),
              !o.autocast                     ? ""
              : o.autocast == DType::BFloat16 ? ", autocast bfloat16"
                                              : ", autocast float16 with loss scaling");
  // The whole step (forward, backward, the update of every parameter and of the optimizer's
  // state) is one jit function, created once.
  const std::optional<DType> scope_dtype = o.autocast;
  auto step = opt->jit_step(
      [&](const Var& x, const Var& y) {
        std::optional<autocast> scope;
        if (scope_dtype) scope.emplace(*scope_dtype);
        return cross_entropy(model(x), y);
      },
      "train_step");
  std::vector<int64_t> order(size_t(data.train.n)), all(size_t(data.held_out.n));
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
  auto [hx, hy] = batch(data.held_out, all, 0, data.held_out.n);
  std::mt19937_64 rng(7);
  const int64_t steps_per_epoch = data.train.n / o.batch;  // the last partial batch is dropped
  TrainResult r;
  std::printf("epoch  loss     held-out  us/step  traces  compiles\n");
  for (int e = 1; e <= o.epochs; ++e) {
    std::shuffle(order.begin(), order.end(), rng);
    const uint64_t compiled_before = stats().kernels_compiled;
    double loss_sum = 0;
    std::vector<double> us;
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      auto [x, y] = batch(data.train, order, s * o.batch + first_row, rows);
      eval({x, y});
      const auto t0 = Clock::now();
      Var loss = step(x, y);
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      loss_sum += loss.item<float>();
    }
    r.accuracy = held_out_accuracy(model, hx, data.held_out, scope_dtype);
    const uint64_t compiled = stats().kernels_compiled - compiled_before;
    if (e > 1) r.compiles_after_first += compiled;
    std::sort(us.begin(), us.end());
    std::printf("%5d  %.4f   %6.2f%%  %7.1f  %6llu  %8llu\n", e, loss_sum / double(steps_per_epoch),
                100 * r.accuracy, us[us.size() / 2], (unsigned long long)step.traces(),
                (unsigned long long)compiled);
  }
  {  // one more step, its bytes measured (reset_stats: peak_bytes restarts from bytes_in_use)
    auto [x, y] = batch(data.train, order, first_row, rows);
    eval({x, y});
    reset_stats();
    const uint64_t before = stats().bytes_in_use;
    step(x, y);
    r.step_bytes = stats().peak_bytes - before;
    r.compiles_after_first += stats().kernels_compiled;
    for (const std::vector<Var>* vs : {&opt->params(), &opt->state()})
      for (const Var& v : *vs) r.result_bytes += uint64_t(v.numel()) * dtype_size(v.dtype());
  }
  r.traces = step.traces();
  r.skipped_steps = opt->skipped_steps();
  std::printf(
      "held-out accuracy %.2f%% (%lld images); compiles after epoch 1: %llu; traces: %llu; "
      "bytes of one step %llu (%llu of them its results)",
      100 * r.accuracy, (long long)data.held_out.n, (unsigned long long)r.compiles_after_first,
      (unsigned long long)r.traces, (unsigned long long)r.step_bytes,
      (unsigned long long)r.result_bytes);
  if (o.autocast == DType::Float16)
    std::printf("; steps skipped: %lld, loss scale %g", (long long)r.skipped_steps,
                opt->loss_scale());
  std::printf("\n");
  return r;
}

// Runs the training o asks for on a new Model(args...) (two with --compare: the float32 one and
// the autocast one, from the same initial weights and batches) and returns the exit status:
// with --check, 1 unless the final accuracy reaches o.min_accuracy, nothing compiled after
// epoch 1 and the step traced once (and, comparing, TrainOptions::compare's bounds hold).
template <class Model, class... Args>
int train(const char* title, const TrainOptions& o, const Args&... args) {
#ifdef METAJIT_SAMPLE_DISTRIBUTED
  // Only rank 0 prints; every rank trains and checks.
  if (o.distributed && metajit::dist::rank() != 0) std::freopen("/dev/null", "w", stdout);
#endif
  const Data data = load();
  std::vector<TrainOptions> plans{o};
  if (o.compare) {
    plans.insert(plans.begin(), o);
    plans.front().autocast.reset();  // float32 first
  }
  std::vector<TrainResult> runs;
  for (const TrainOptions& p : plans) {
    const Model model(args...);
    runs.push_back(train_once(title, model, p, data));
  }
  bool ok = true;
  for (const TrainResult& r : runs)
    ok = ok && r.accuracy >= o.min_accuracy && r.compiles_after_first == 0 && r.traces == 1;
  if (o.compare) {
    const TrainResult &f32 = runs[0], &half = runs[1];
    auto computed = [](const TrainResult& r) { return double(r.step_bytes - r.result_bytes); };
    const double bytes_ratio = double(half.step_bytes) / double(f32.step_bytes),
                 computed_ratio = computed(half) / computed(f32);
    std::printf(
        "compare: held-out accuracy float32 %.2f%%, %s %.2f%%; bytes of a step %.2fx, without "
        "its results %.2fx\n",
        100 * f32.accuracy, metajit::dtype_name(*o.autocast), 100 * half.accuracy, bytes_ratio,
        computed_ratio);
    ok = ok && half.accuracy >= f32.accuracy - kCompareAccuracy && computed_ratio <= kCompareBytes;
  }
  if (!o.check) return 0;
  if (!ok) {
    std::printf("CHECK FAILED: need accuracy >= %.0f%%, no compiles after epoch 1, one trace%s\n",
                100 * o.min_accuracy,
                o.compare ? ", the half run's accuracy within 1% of float32's and the bytes its "
                            "step computes on the way at most 0.6x float32's"
                          : "");
    return 1;
  }
  std::printf("check passed\n");
  return 0;
}

}  // namespace digits
