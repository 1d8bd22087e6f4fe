#include "bench/timing.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <thread>

namespace bench {

double median(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double max_rel_err(const std::vector<float>& peer, const std::vector<float>& reference) {
  if (peer.size() != reference.size()) return std::numeric_limits<double>::infinity();
  double ss = 0;
  for (float r : reference) ss += double(r) * r;
  const double scale = 1e-2 * std::sqrt(ss / std::max<size_t>(1, reference.size()));
  double worst = 0;
  for (size_t i = 0; i < peer.size(); ++i) {
    double r = reference[i], d = std::abs(double(peer[i]) - r);
    if (std::isnan(peer[i]) != std::isnan(reference[i]))
      return std::numeric_limits<double>::infinity();
    worst = std::max(worst, d / std::max({std::abs(r), scale, 1e-30}));
  }
  return worst;
}

namespace {

void settle(double s) {
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

// Runs f, turning an exception into `error`.
template <class F>
bool guarded(F&& f, std::string& error, const std::string& what) {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    error = what + " threw: " + e.what();
  } catch (...) {
    error = what + " threw a non-standard exception";
  }
  return false;
}

}  // namespace

std::vector<Timing> measure(std::vector<Impl>& impls, const Schedule& schedule, double tol) {
  std::vector<Timing> out(impls.size());
  std::vector<double> estimate(impls.size(), 0.0);
  std::vector<float> reference;

  // Warm-up (the first call compiles), then one timed call that also yields the result for
  // verification (metajit's result() evaluates the graph again; a peer's reads its buffer after
  // run()), which serves as the estimate of the impl's time.
  for (size_t i = 0; i < impls.size(); ++i) {
    Impl& im = impls[i];
    Timing& t = out[i];
    if (!im.skipped.empty()) continue;
    bool ok = guarded(
        [&] {
          if (im.prepare) im.prepare();
          im.run();
          clobber_memory();
          std::vector<float> r;
          auto t0 = Clock::now();
          if (im.result && i == 0) {
            r = im.result();
          } else {
            im.run();
            clobber_memory();
            if (im.result) r = im.result();
          }
          estimate[i] = seconds_since(t0);
          if (im.result) {
            if (i == 0) {
              reference = std::move(r);
            } else if (!reference.empty()) {
              t.max_rel_err = max_rel_err(r, reference);
              const double limit = std::isnan(im.tol) ? tol : im.tol;
              if (!(t.max_rel_err <= limit)) {
                char buf[160];
                std::snprintf(buf, sizeof buf,
                              "wrong result: max rel err %.3g vs metajit (tolerance %.0e); not "
                              "timed",
                              t.max_rel_err, limit);
                t.error = buf;
              }
            }
          }
          if (im.finish) im.finish();
        },
        t.error, im.name);
    if (!ok && im.finish) guarded(im.finish, t.error, im.name + " (finish)");
    if (!t.error.empty()) std::fprintf(stderr, "  %s: %s\n", im.name.c_str(), t.error.c_str());
  }

  // Each runnable impl gets an equal share of the budget, and at least min_reps calls.
  size_t runnable = 0;
  for (size_t i = 0; i < impls.size(); ++i)
    runnable += impls[i].skipped.empty() && out[i].error.empty();
  const double share = schedule.budget_s / double(std::max<size_t>(1, runnable));
  const int passes = std::max(1, schedule.passes);
  std::vector<int> per_block(impls.size(), 0);
  for (size_t i = 0; i < impls.size(); ++i) {
    int reps = estimate[i] > 0 ? int(share / estimate[i]) : schedule.max_reps;
    reps = std::clamp(reps, schedule.min_reps, schedule.max_reps);
    per_block[i] = (reps + passes - 1) / passes;
  }

  std::vector<std::vector<double>> samples(impls.size());
  for (int p = 0; p < passes; ++p) {
    for (size_t k = 0; k < impls.size(); ++k) {
      size_t i = p % 2 == 0 ? k : impls.size() - 1 - k;
      Impl& im = impls[i];
      if (!im.skipped.empty() || !out[i].error.empty()) continue;
      settle(schedule.settle_s);
      guarded(
          [&] {
            if (im.prepare) im.prepare();
            for (int r = 0; r < per_block[i]; ++r) {
              auto t0 = Clock::now();
              im.run();
              clobber_memory();
              samples[i].push_back(seconds_since(t0));
            }
            if (im.finish) im.finish();
          },
          out[i].error, im.name);
    }
  }
  for (size_t i = 0; i < impls.size(); ++i) {
    if (!out[i].error.empty() || samples[i].empty()) continue;
    out[i].reps = int(samples[i].size());
    out[i].median_s = median(samples[i]);
    out[i].min_s = *std::min_element(samples[i].begin(), samples[i].end());
  }
  return out;
}

}  // namespace bench
