// concat, stack, split, slice and pad: the data-movement composites of the models issue, each a
// reindex (a guarded gather) or a sum of them, so they add no node kind, fuse into their readers
// and get their gradients from the meta-ops (a reindex's is the reindex_reduce with the same
// indexes: slices of the output gradient). docs/design.md §3.
#include <metajit/composite.h>
#include <metajit/error.h>

#include <algorithm>
#include <limits>
#include <string>

#include "meta_ops/ops.h"

namespace metajit {
namespace {

std::vector<IndexExprPtr> identity_indexes(size_t rank) {
  std::vector<IndexExprPtr> idx;
  for (size_t k = 0; k < rank; ++k) idx.push_back(ix_var(int(k)));
  return idx;
}

IndexExprPtr shifted(int axis, int64_t by) {
  return ix_binary(IxKind::Add, ix_var(axis), ix_const(by));
}

std::string shapes_of(const std::vector<Var>& xs) {
  std::string s;
  for (size_t k = 0; k < xs.size(); ++k) s += (k ? ", " : "") + shape_str(xs[k].shape());
  return s;
}

// Checks concat's inputs: defined, one rank, equal extents off `axis`; returns the promoted dtype.
DType check_concat_inputs(const std::vector<Var>& xs, int64_t axis, const char* op) {
  DType dt = xs[0].dtype();
  for (size_t k = 0; k < xs.size(); ++k) {
    bool same = xs[k].ndim() == xs[0].ndim();
    for (int64_t d = 0; same && d < xs[0].ndim(); ++d)
      same = d == axis || xs[k].shape()[size_t(d)] == xs[0].shape()[size_t(d)];
    if (!same)
      throw ShapeError(std::string(op) + ": shapes " + shapes_of(xs) + " along dim " +
                       std::to_string(axis) + ": input " + std::to_string(k) +
                       " differs; expected one rank and equal extents on every other axis");
    dt = promote(dt, xs[k].dtype());
  }
  return dt;
}

}  // namespace

Var concat(const std::vector<Var>& xs, int64_t dim) {
  if (xs.empty()) throw ShapeError("concat: no inputs; expected at least one Var");
  for (size_t k = 0; k < xs.size(); ++k)
    require_defined(xs[k], "concat", ("input " + std::to_string(k)).c_str());
  if (xs[0].ndim() == 0)
    throw ShapeError("concat: inputs of shape " + shape_str(xs[0].shape()) +
                     " are 0-d; expected at least one axis (stack joins scalars)");
  const int64_t axis = norm_axis(dim, xs[0].ndim(), "concat", xs[0].shape());
  const DType dt = check_concat_inputs(xs, axis, "concat");
  Shape out = xs[0].shape();
  int64_t total = 0;
  for (const Var& x : xs)
    if (__builtin_add_overflow(total, x.shape()[size_t(axis)], &total))
      throw ShapeError("concat: shapes " + shapes_of(xs) + ": the joined extent overflows int64");
  out[size_t(axis)] = total;
  check_shape_fits("concat", dt, out);
  // Each input placed at its offset by a guarded gather that reads -0.0 (0 for integers, false
  // for Bool) elsewhere; the pieces are added. x + -0.0 is x for every float, -0.0 and NaN
  // included, so the join is exact.
  const double elsewhere = is_float(dt) ? -0.0 : 0.0;
  Var joined;
  int64_t offset = 0;
  for (const Var& x : xs) {
    const int64_t n = x.shape()[size_t(axis)];
    if (n == 0 && total != 0) continue;
    std::vector<IndexExprPtr> idx = identity_indexes(out.size());
    idx[size_t(axis)] = shifted(int(axis), -offset);
    Var piece = xs.size() == 1 ? cast(x, dt)
                               : reindex_tree(cast(x, dt), out, std::move(idx), elsewhere, {});
    joined = !joined.defined()   ? piece
             : dt == DType::Bool ? logical_or(joined, piece)
                                 : joined + piece;
    offset += n;
  }
  return joined;
}

Var stack(const std::vector<Var>& xs, int64_t dim) {
  if (xs.empty()) throw ShapeError("stack: no inputs; expected at least one Var");
  for (size_t k = 0; k < xs.size(); ++k)
    require_defined(xs[k], "stack", ("input " + std::to_string(k)).c_str());
  for (const Var& x : xs)
    if (x.shape() != xs[0].shape())
      throw ShapeError("stack: shapes " + shapes_of(xs) + " differ; expected equal shapes");
  const int64_t rank = xs[0].ndim() + 1;
  Shape shape = xs[0].shape();
  const int64_t axis = norm_axis(dim, rank, "stack", shape);
  shape.insert(shape.begin() + axis, 1);
  std::vector<Var> pieces;
  for (const Var& x : xs) pieces.push_back(reshape(x, shape));
  return concat(pieces, axis);
}

Var slice(const Var& x, int64_t dim, int64_t start, int64_t stop, int64_t step) {
  require_defined(x, "slice");
  if (x.ndim() == 0) throw ShapeError("slice: the input is 0-d; it needs at least one axis");
  const int64_t axis = norm_axis(dim, x.ndim(), "slice", x.shape());
  if (step < 1)
    throw ShapeError("slice: step " + std::to_string(step) + " along dim " + std::to_string(dim) +
                     " of shape " + shape_str(x.shape()) + " is not valid; expected step >= 1");
  // Python's rule: a negative bound counts from the end, then both are clamped to [0, n].
  const int64_t n = x.shape()[size_t(axis)];
  auto bound = [n](int64_t b) {
    if (b < 0) b = b < -n ? 0 : b + n;
    return b > n ? n : b;
  };
  const int64_t from = bound(start), to = bound(stop);
  const int64_t count = to > from ? (to - from - 1) / step + 1 : 0;
  Shape shape = x.shape();
  shape[size_t(axis)] = count;
  if (count == n) return x;  // step 1 over the whole axis
  std::vector<IndexExprPtr> idx = identity_indexes(shape.size());
  idx[size_t(axis)] = ix_binary(
      IxKind::Add, ix_binary(IxKind::Mul, ix_var(int(axis)), ix_const(step)), ix_const(from));
  return reindex_tree(x, std::move(shape), std::move(idx), 0, {});
}

std::vector<Var> split(const Var& x, std::vector<int64_t> sizes, int64_t dim) {
  require_defined(x, "split");
  if (x.ndim() == 0) throw ShapeError("split: the input is 0-d; it needs at least one axis");
  const int64_t axis = norm_axis(dim, x.ndim(), "split", x.shape());
  const int64_t n = x.shape()[size_t(axis)];
  std::string listed;
  int64_t total = 0;
  bool valid = true;
  for (int64_t s : sizes) {
    listed += (listed.empty() ? "" : ", ") + std::to_string(s);
    valid = valid && s >= 0 && !__builtin_add_overflow(total, s, &total);
  }
  if (!valid || total != n)
    throw ShapeError("split: sizes [" + listed + "] along dim " + std::to_string(dim) +
                     " of shape " + shape_str(x.shape()) + ": expected sizes >= 0 adding up to " +
                     std::to_string(n));
  std::vector<Var> parts;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    parts.push_back(slice(x, axis, offset, offset + s));
    offset += s;
  }
  return parts;
}

Var pad(const Var& x, std::vector<int64_t> before, std::vector<int64_t> after, double value) {
  require_defined(x, "pad");
  const size_t rank = size_t(x.ndim());
  auto list = [](const std::vector<int64_t>& v) {
    std::string s;
    for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
    return "[" + s + "]";
  };
  if (before.size() != rank || after.size() != rank)
    throw ShapeError("pad: before " + list(before) + " and after " + list(after) + " for shape " +
                     shape_str(x.shape()) + ": expected one entry per axis (" +
                     std::to_string(rank) + ")");
  Shape shape = x.shape();
  std::vector<IndexExprPtr> idx = identity_indexes(rank);
  for (size_t k = 0; k < rank; ++k) {
    int64_t extent = 0;
    const bool overflows = __builtin_add_overflow(shape[k], before[k], &extent) ||
                           __builtin_add_overflow(extent, after[k], &extent) ||
                           before[k] == std::numeric_limits<int64_t>::min();
    if (overflows || extent < 0)
      throw ShapeError("pad: before " + list(before) + " and after " + list(after) + " for shape " +
                       shape_str(x.shape()) + ": axis " + std::to_string(k) +
                       " would have extent " +
                       (overflows ? std::string("beyond int64") : std::to_string(extent)) +
                       "; expected the crops (negative pads) to leave >= 0 elements");
    shape[k] = extent;
    idx[k] = shifted(int(k), -before[k]);
  }
  check_shape_fits("pad", x.dtype(), shape);
  if (shape == x.shape() &&
      std::all_of(before.begin(), before.end(), [](int64_t b) { return b == 0; }))
    return x;
  return reindex_tree(x, std::move(shape), std::move(idx), value, {});
}

}  // namespace metajit
