// Initial parameter values (nn/init.h).
#include "nn/init.h"

#include <metajit/ops.h>

#include <cmath>

namespace metajit::nn {
namespace {

// SplitMix64's finaliser (Steele et al., "Fast splittable pseudorandom number generators",
// OOPSLA 2014): consecutive inputs give unrelated outputs, so the seeds of draw k of seed s and
// of draw k + 1 of seed s - 1 (or any other nearby pair) share no pattern.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

std::optional<uint64_t> Init::next() {
  const uint64_t k = drawn_++;
  if (!seed_) return std::nullopt;
  return mix(mix(*seed_) + k * 0x9E3779B97F4A7C15ULL);
}

Var Init::uniform(const Shape& shape, double bound) {
  const std::optional<uint64_t> s = next();
  const Var u = s ? rand(shape, *s) : rand(shape);
  return u * (2 * bound) - bound;
}

Var Init::normal(const Shape& shape) {
  const std::optional<uint64_t> s = next();
  return s ? randn(shape, *s) : randn(shape);
}

std::optional<uint64_t> Init::child_seed() {
  return next();
}

double fan_in_bound(int64_t fan_in) {
  return fan_in > 0 ? 1 / std::sqrt(double(fan_in)) : 0;
}

}  // namespace metajit::nn
