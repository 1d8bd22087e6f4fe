// Initial parameter values (nn/init.h).
#include "nn/init.h"

#include <metajit/eval.h>
#include <metajit/ops.h>

#include <cmath>
#include <vector>

#include "meta_ops/node.h"

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

// `flat` [n], evaluated, as a leaf of `shape` (n elements) holding the same buffer: a reshape
// without a kernel. Safe because a realized buffer is never written again.
Var realized_as(const Var& flat, const Shape& shape) {
  metajit::eval({flat});
  NodePtr leaf = new_node(OpKind::Leaf, flat.dtype(), shape);
  leaf->data = flat.node()->data;
  return Var(std::move(leaf));
}

}  // namespace

std::optional<uint64_t> Init::next() {
  const uint64_t k = drawn_++;
  if (!seed_) return std::nullopt;
  return mix(mix(*seed_) + k * 0x9E3779B97F4A7C15ULL);
}

Var Init::uniform(const Shape& shape, double bound) {
  const std::optional<uint64_t> s = next();
  const Shape flat{numel_of(shape)};
  if (flat[0] == 0) return filled(shape, 0);
  const Var u = s ? rand(flat, *s) : rand(flat);
  return realized_as(u * (2 * bound) - bound, shape);
}

Var Init::normal(const Shape& shape) {
  const std::optional<uint64_t> s = next();
  const Shape flat{numel_of(shape)};
  if (flat[0] == 0) return filled(shape, 0);
  return realized_as(s ? randn(flat, *s) : randn(flat), shape);
}

std::optional<uint64_t> Init::child_seed() {
  return next();
}

Var filled(const Shape& shape, double value, DType dtype) {
  const size_t n = size_t(numel_of(shape));
  if (dtype == DType::Int64) return array(std::vector<int64_t>(n, int64_t(value)), shape);
  return array(std::vector<float>(n, float(value)), shape);
}

double fan_in_bound(int64_t fan_in) {
  return fan_in > 0 ? 1 / std::sqrt(double(fan_in)) : 0;
}

}  // namespace metajit::nn
