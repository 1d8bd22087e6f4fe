// reshape, transpose, matmul, softmax, log_softmax, argmax and argmin, each written with meta-ops
// only (reindex, broadcast_to, reduce, element-wise), so the fusion planner sees one pattern and
// never a special node. matmul becomes a broadcast-multiply-reduce group that fuses into one
// kernel without materialising the [n,k,m] product. Convolutions and pooling are in
// meta_ops/convolution.cc.
#include <metajit/composite.h>
#include <metajit/error.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>

#include "meta_ops/autocast.h"
#include "meta_ops/ops.h"

namespace metajit {
namespace {

IndexExprPtr add(IndexExprPtr a, IndexExprPtr b) {
  return ix_binary(IxKind::Add, a, b);
}
IndexExprPtr mul(IndexExprPtr a, int64_t c) {
  return ix_binary(IxKind::Mul, a, ix_const(c));
}

}  // namespace

Var reshape(const Var& x, Shape shape) {
  require_defined(x, "reshape");
  int64_t known = 1, infer = -1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == -1) {
      if (infer >= 0)
        throw ShapeError("reshape: more than one -1 in " + shape_str(shape) + "; at most one");
      infer = int64_t(k);
    } else if (shape[k] < 0) {
      throw ShapeError("reshape: negative dimension in " + shape_str(shape));
    } else if (__builtin_mul_overflow(known, shape[k], &known) &&
               std::find(shape.begin(), shape.end(), int64_t(0)) == shape.end()) {
      // No Var has that many elements; with a 0 among the extents the shape is empty instead.
      throw ShapeError("reshape: cannot reshape " + shape_str(x.shape()) + " (" +
                       std::to_string(x.numel()) + " elements) to " + shape_str(shape) +
                       ", whose element count overflows int64");
    }
  }
  if (std::find(shape.begin(), shape.end(), int64_t(0)) != shape.end()) known = 0;
  if (infer >= 0) {
    if (known == 0 || x.numel() % known != 0)
      throw ShapeError("reshape: cannot infer -1 in " + shape_str(shape) + " for " +
                       std::to_string(x.numel()) + " elements of " + shape_str(x.shape()));
    shape[size_t(infer)] = x.numel() / known;
  }
  if (numel_of(shape) != x.numel())
    throw ShapeError("reshape: cannot reshape " + shape_str(x.shape()) + " (" +
                     std::to_string(x.numel()) + " elements) to " + shape_str(shape) + " (" +
                     std::to_string(numel_of(shape)) + " elements)");
  if (shape == x.shape()) return x;
  std::vector<IndexExprPtr> idx = reshape_indexes(x.shape(), shape);
  return reindex_tree(x, std::move(shape), std::move(idx), 0, {});
}

namespace {

// The input indexes of one group of dims: from[f0, f1) hold the same elements as to[t0, t1)
// (equal products). The row-major position within the group, then the input index that has it;
// the group's first input dim needs no modulo (the position is below the group's size).
void reshape_group(const Shape& from, const Shape& to, size_t f0, size_t f1, size_t t0, size_t t1,
                   std::vector<IndexExprPtr>& idx) {
  IndexExprPtr flat = ix_const(0);
  for (size_t k = t0; k < t1; ++k)
    flat = k == t0 ? ix_var(int(k)) : add(mul(flat, to[k]), ix_var(int(k)));
  int64_t stride = 1;
  for (size_t j = f1; j-- > f0;) {
    IndexExprPtr e = stride == 1 ? flat : ix_binary(IxKind::Div, flat, ix_const(stride));
    if (j > f0) e = ix_binary(IxKind::Mod, e, ix_const(std::max<int64_t>(from[j], 1)));
    idx[j] = e;
    stride *= std::max<int64_t>(from[j], 1);
  }
}

}  // namespace

std::vector<IndexExprPtr> reshape_indexes(const Shape& from, const Shape& to) {
  // Dims are matched in groups of equal products, as numpy does for views: [16,64,64] ->
  // [1024,64] is (16,64 | 1024) and (64 | 64), so the last index is the output's own and only
  // the first needs a division. A kernel then reads the merged rows' innermost dim with a
  // contiguous vector load instead of dividing and bounds-testing every element (the
  // transformer's cross-entropy over reshaped logits: 3.6 ns per element, scalar).
  std::vector<IndexExprPtr> idx(from.size());
  const bool empty = std::find(from.begin(), from.end(), 0) != from.end();
  size_t i = 0, j = 0;
  while (!empty && (i < from.size() || j < to.size())) {
    const size_t i0 = i, j0 = j;
    int64_t pf = i < from.size() ? from[i++] : 1, pt = j < to.size() ? to[j++] : 1;
    while (pf != pt && ((pf < pt && i < from.size()) || (pt < pf && j < to.size())))
      (pf < pt ? pf *= from[i++] : pt *= to[j++]);
    if (pf != pt) break;
    reshape_group(from, to, i0, i, j0, j, idx);
  }
  if (empty || i < from.size() || j < to.size())  // one group of all dims, as a fallback
    reshape_group(from, to, 0, from.size(), 0, to.size(), idx);
  return idx;
}

Var transpose(const Var& x, std::vector<int64_t> perm) {
  require_defined(x, "transpose");
  const int64_t nd = x.ndim();
  auto bad = [&](const std::string& why) {
    std::string p = "[";
    for (size_t k = 0; k < perm.size(); ++k) p += (k ? ", " : "") + std::to_string(perm[k]);
    throw ShapeError("transpose: perm " + p + "] is not valid for shape " + shape_str(x.shape()) +
                     ": " + why + " (expected a permutation of 0.." + std::to_string(nd - 1) + ")");
  };
  if (int64_t(perm.size()) != nd) bad("wrong length");
  std::vector<bool> seen(static_cast<size_t>(nd), false);
  for (auto& p : perm) {
    if (p < -nd || p >= nd) bad("axis out of range");
    if (p < 0) p += nd;
    if (seen[p]) bad("axis repeated");
    seen[p] = true;
  }
  Shape out(static_cast<size_t>(nd));
  std::vector<IndexExprPtr> idx(static_cast<size_t>(nd));
  for (int64_t k = 0; k < nd; ++k) {
    out[k] = x.shape()[perm[k]];
    idx[perm[k]] = ix_var(int(k));
  }
  bool identity = true;
  for (int64_t k = 0; k < nd; ++k) identity = identity && perm[k] == k;
  if (identity) return x;
  return reindex_tree(x, std::move(out), std::move(idx), 0, {});
}

namespace {

// numpy's rule for 1-D operands: a [k] is a row [1, k], b [k] a column [k, 1], and the axis
// added is removed from the product (two vectors give their 0-d dot product).
Var matmul_vectors(const Var& a, const Var& b) {
  const bool va = a.ndim() == 1, vb = b.ndim() == 1;
  const Var pa = va ? reshape(a, {1, a.shape()[0]}) : a;
  const Var pb = vb ? reshape(b, {b.shape()[0], 1}) : b;
  const Var y = matmul(pa, pb);
  Shape s = y.shape();
  if (vb) s.pop_back();
  if (va) s.erase(s.end() - (vb ? 1 : 2));
  return reshape(y, s);
}

}  // namespace

Var matmul(const Var& a_in, const Var& b_in) {
  require_defined(a_in, "matmul");
  require_defined(b_in, "matmul");
  const Var a = autocast_operand(a_in), b = autocast_operand(b_in);
  if (a.ndim() == 0 || b.ndim() == 0)
    throw ShapeError("matmul: shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape()) +
                     ": a 0-d operand has no axis to multiply along; expected [.., n, k] x "
                     "[.., k, m], or a vector [k] on either side");
  if (a.ndim() == 1 || b.ndim() == 1) {
    const int64_t k = a.shape()[a.ndim() - 1], k2 = b.shape()[b.ndim() == 1 ? 0 : b.ndim() - 2];
    if (k != k2)
      throw ShapeError("matmul: shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape()) +
                       ": inner dimensions " + std::to_string(k) + " and " + std::to_string(k2) +
                       " differ");
    return matmul_vectors(a, b);
  }
  int64_t n = a.shape()[a.ndim() - 2], k = a.shape()[a.ndim() - 1];
  int64_t k2 = b.shape()[b.ndim() - 2], m = b.shape()[b.ndim() - 1];
  if (k != k2)
    throw ShapeError("matmul: shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape()) +
                     ": inner dimensions " + std::to_string(k) + " and " + std::to_string(k2) +
                     " differ");
  // a gains the m axis (last), b the n axis; the sum runs over k, the middle one. Two 8-bit
  // integer operands multiply into Int32 sums (shared/api.md "Precision"), as quantised
  // inference needs: their Int16 or 8-bit products would wrap.
  const auto eight_bit = [](DType t) { return t == DType::Int8 || t == DType::UInt8; };
  if (eight_bit(a.dtype()) && eight_bit(b.dtype()))
    return batched_contraction(cast(a, DType::Int32), cast(b, DType::Int32), {n, k, m}, 2, 0, 1,
                               "matmul");
  return batched_contraction(a, b, {n, k, m}, 2, 0, 1, "matmul");
}

Var batched_contraction(const Var& a, const Var& b, const std::array<int64_t, 3>& axes, int a_new,
                        int b_new, int summed, const char* op) {
  const Shape ba(a.shape().begin(), a.shape().end() - 2),
      bb(b.shape().begin(), b.shape().end() - 2);
  Shape full = broadcast_shapes(ba, bb, op);
  const int64_t nb = int64_t(full.size());
  full.insert(full.end(), axes.begin(), axes.end());
  const DType dt = promote(a.dtype(), b.dtype());
  auto widen = [&](const Var& x, int64_t x_batch, int new_axis) {  // missing batch axes are new
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < nb - x_batch; ++i) dims.push_back(i);
    dims.push_back(nb + new_axis);
    return broadcast_to(cast(x, dt), full, dims);
  };
  return reduce(widen(a, int64_t(ba.size()), a_new) * widen(b, int64_t(bb.size()), b_new),
                ReduceOp::Add, {nb + summed});
}

Var softmax(const Var& x, int64_t dim) {
  require_defined(x, "softmax");
  if (x.ndim() == 0) throw ShapeError("softmax: the input is 0-d; it needs at least one axis");
  if (dim < -x.ndim() || dim >= x.ndim())  // named here, not by the reduction inside
    throw ShapeError("softmax: dim " + std::to_string(dim) + " out of range for shape " +
                     shape_str(x.shape()) + " (valid: -" + std::to_string(x.ndim()) + " to " +
                     std::to_string(x.ndim() - 1) + ")");
  Var in = is_float(x.dtype()) ? autocast_float32(x) : cast(x, DType::Float32);
  // The row max only keeps exp() in range: its gradient cancels exactly, so (as JAX does) none
  // flows through it, and the backward graph has no max-tie masks.
  Var m = identity_without_gradient(max(in, {dim}, true));
  Var e = exp(in - m);
  return e / sum(e, {dim}, true);
}

Var log_softmax(const Var& x, int64_t dim) {
  require_defined(x, "log_softmax");
  if (x.ndim() == 0) throw ShapeError("log_softmax: the input is 0-d; it needs at least one axis");
  if (dim < -x.ndim() || dim >= x.ndim())  // named here, not by the reduction inside
    throw ShapeError("log_softmax: dim " + std::to_string(dim) + " out of range for shape " +
                     shape_str(x.shape()) + " (valid: -" + std::to_string(x.ndim()) + " to " +
                     std::to_string(x.ndim() - 1) + ")");
  Var in = is_float(x.dtype()) ? autocast_float32(x) : cast(x, DType::Float32);
  Var shifted = in - identity_without_gradient(max(in, {dim}, true));  // as softmax
  return shifted - log(sum(exp(shifted), {dim}, true));
}

namespace {

// The first index along dim where x equals its extremum `ext` (keepdims), or a NaN is.
Var first_index_of(const Var& x, const Var& ext, int64_t dim, const char* op) {
  const int64_t nd = x.ndim();
  const int64_t axis = dim < 0 ? dim + nd : dim;
  if (axis < 0 || axis >= nd)
    throw ShapeError(std::string(op) + ": dim " + std::to_string(dim) +
                     " is out of range for shape " + shape_str(x.shape()) +
                     " (valid: " + std::to_string(-nd) + ".." + std::to_string(nd - 1) + ")");
  const int64_t extent = x.shape()[size_t(axis)];
  if (extent == 0)
    throw ShapeError(std::string(op) + ": axis " + std::to_string(dim) + " of shape " +
                     shape_str(x.shape()) + " is empty; there is no first extremum");
  Var hit = x == ext;
  if (is_float(x.dtype())) hit = logical_or(hit, x != x);
  std::vector<int64_t> other_axes;
  for (int64_t k = 0; k < nd; ++k)
    if (k != axis) other_axes.push_back(k);
  Var index = broadcast_to(arange(extent, DType::Int32), x.shape(), other_axes);
  return min(where(hit, index, full(x.shape(), double(extent), DType::Int32)), {axis});
}

}  // namespace

Var argmax(const Var& x, int64_t dim) {
  require_defined(x, "argmax");
  if (x.ndim() == 0) throw ShapeError("argmax: the input is 0-d; it needs at least one axis");
  return first_index_of(x, max(x, {dim}, true), dim, "argmax");
}

Var argmin(const Var& x, int64_t dim) {
  require_defined(x, "argmin");
  if (x.ndim() == 0) throw ShapeError("argmin: the input is 0-d; it needs at least one axis");
  return first_index_of(x, min(x, {dim}, true), dim, "argmin");
}

}  // namespace metajit
