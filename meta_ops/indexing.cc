// gather, scatter_add, index_select, embedding and one_hot: data-dependent indexing written with
// reindex / reindex_reduce and extras (@e0 reads the index array), as Jittor writes them. They
// add no node kind; their gradients are those of the meta-ops (a gather's is a scatter-add with
// the same extras, and the reverse), docs/design.md "Data-dependent indexing".
//
// gather, index_select, embedding and one_hot count a negative index from the end (numpy's rule,
// shared/api.md). An index still outside its axis follows the overflow rule instead of raising:
// it cannot be checked without reading the data, and nothing is read before a value is needed.
// gather, index_select and embedding read 0 there; scatter_add drops the element (negative
// indices included: torch refuses them); one_hot gives a row of zeros.
#include <metajit/composite.h>
#include <metajit/error.h>

#include "base/dtype.h"
#include "meta_ops/ops.h"

namespace metajit {
namespace {

void need(const Var& x, const char* op, const char* what) {
  if (!x.defined())
    throw Error(std::string(op) + ": " + what + " is an undefined Var (default-constructed)");
}

void need_integer(const Var& index, const char* op, const char* what) {
  if (!is_index_dtype(index.dtype()))
    throw DTypeError(std::string(op) + ": " + what + " has dtype " + dtype_name(index.dtype()) +
                     " and shape " + shape_str(index.shape()) + "; expected " + kIndexDTypes);
}

int64_t axis_of(int64_t dim, const Var& x, const char* op) {
  const int64_t nd = x.ndim();
  if (dim < -nd || dim >= nd || nd == 0)
    throw ShapeError(std::string(op) + ": dim " + std::to_string(dim) +
                     " is out of range for shape " + shape_str(x.shape()) + "; expected " +
                     (nd == 0 ? std::string("an input with at least one axis")
                              : "-" + std::to_string(nd) + " <= dim < " + std::to_string(nd)));
  return dim < 0 ? dim + nd : dim;
}

std::vector<IndexExprPtr> vars(size_t from, size_t to) {
  std::vector<IndexExprPtr> out;
  for (size_t k = from; k < to; ++k) out.push_back(ix_var(int(k)));
  return out;
}

// PyTorch's rule for gather and scatter_add: index has x's rank and is no larger than `bound`
// along every axis but `dim`.
void check_index_shape(const Var& index, const Shape& bound, int64_t dim, const char* op,
                       const char* bound_name) {
  bool ok = index.ndim() == int64_t(bound.size());
  for (size_t k = 0; ok && k < bound.size(); ++k)
    ok = int64_t(k) == dim || index.shape()[k] <= bound[k];
  if (!ok)
    throw ShapeError(std::string(op) + ": index of shape " + shape_str(index.shape()) +
                     " does not fit " + bound_name + " of shape " + shape_str(bound) + " at dim " +
                     std::to_string(dim) + "; expected the same rank and index.shape[d] <= " +
                     bound_name + ".shape[d] for every d != dim");
}

// The position `e` reads along axis `axis` of the indexed array, a negative one counted from the
// end as numpy does (-1 is the last). One still outside the axis keeps the overflow rule. The
// extent is an Extent leaf, a shape parameter of the kernel: keys keep no shape.
IndexExprPtr from_end(IndexExprPtr e, int axis) {
  // e + n * (e < 0), not a select: arithmetic that g++ sees as invariant in the inner loops, so
  // a gathered row is still copied with vector loads (a select made them gathers: a plain
  // embedding ran 4x slower).
  return ix_binary(IxKind::Add, e,
                   ix_binary(IxKind::Mul, ix_extent(axis), ix_binary(IxKind::Lt, e, ix_const(0))));
}

}  // namespace

Var gather(const Var& x, int64_t dim, const Var& index) {
  need(x, "gather", "x");
  need(index, "gather", "index");
  need_integer(index, "gather", "index");
  const int64_t d = axis_of(dim, x, "gather");
  check_index_shape(index, x.shape(), d, "gather", "x");
  std::vector<IndexExprPtr> idx = vars(0, size_t(x.ndim()));
  idx[size_t(d)] = from_end(ix_extra(0, vars(0, size_t(x.ndim()))), int(d));
  return reindex_tree(x, index.shape(), std::move(idx), 0, {}, {index});
}

Var scatter_add(const Var& x, int64_t dim, const Var& index, const Var& src) {
  need(x, "scatter_add", "x");
  need(index, "scatter_add", "index");
  need(src, "scatter_add", "src");
  need_integer(index, "scatter_add", "index");
  const int64_t d = axis_of(dim, x, "scatter_add");
  check_index_shape(index, x.shape(), d, "scatter_add", "x");
  bool fits = src.ndim() == index.ndim();
  for (size_t k = 0; fits && k < src.shape().size(); ++k) fits = index.shape()[k] <= src.shape()[k];
  if (!fits)
    throw ShapeError("scatter_add: index of shape " + shape_str(index.shape()) +
                     " is larger than src of shape " + shape_str(src.shape()) +
                     "; expected the same rank and index.shape[d] <= src.shape[d]");
  // Only src's first index.shape elements along each axis are scattered (PyTorch).
  Var y = src.shape() == index.shape()
              ? src
              : reindex_tree(src, index.shape(), vars(0, size_t(src.ndim())), 0, {});
  std::vector<IndexExprPtr> target = vars(0, size_t(x.ndim()));
  target[size_t(d)] = ix_extra(0, vars(0, size_t(x.ndim())));
  Var added = reindex_reduce_tree(cast(y, x.dtype()), ReduceOp::Add, x.shape(), std::move(target),
                                  {}, {index});
  return x + added;
}

Var index_select(const Var& x, int64_t dim, const Var& index) {
  need(x, "index_select", "x");
  need(index, "index_select", "index");
  need_integer(index, "index_select", "index");
  const int64_t d = axis_of(dim, x, "index_select");
  if (index.ndim() != 1)
    throw ShapeError("index_select: index of shape " + shape_str(index.shape()) +
                     " is not 1-D; expected a vector of positions along dim " + std::to_string(d) +
                     " of shape " + shape_str(x.shape()));
  Shape shape = x.shape();
  shape[size_t(d)] = index.shape()[0];
  std::vector<IndexExprPtr> idx = vars(0, size_t(x.ndim()));
  idx[size_t(d)] = from_end(ix_extra(0, {ix_var(int(d))}), int(d));
  return reindex_tree(x, std::move(shape), std::move(idx), 0, {}, {index});
}

Var embedding(const Var& weight, const Var& ids) {
  need(weight, "embedding", "weight");
  need(ids, "embedding", "ids");
  need_integer(ids, "embedding", "ids");
  if (weight.ndim() != 2)
    throw ShapeError("embedding: weight of shape " + shape_str(weight.shape()) +
                     " is not a table; expected [num_embeddings, dim]");
  Shape shape = ids.shape();
  shape.push_back(weight.shape()[1]);
  const size_t n = size_t(ids.ndim());
  return reindex_tree(weight, std::move(shape),
                      {from_end(ix_extra(0, vars(0, n)), 0), ix_var(int(n))}, 0, {}, {ids});
}

Var one_hot(const Var& ids, int64_t num_classes, DType dtype) {
  need(ids, "one_hot", "ids");
  need_integer(ids, "one_hot", "ids");
  if (num_classes < 0)
    throw ShapeError("one_hot: num_classes " + std::to_string(num_classes) +
                     " is negative; expected >= 0");
  Shape shape = ids.shape();
  shape.push_back(num_classes);
  const size_t n = size_t(ids.ndim());
  // A 1 (of a broadcast constant, whose extent is the class count) read where the class index
  // equals the id at the same position, the overflow value 0 elsewhere: one kernel, no
  // comparison array.
  IndexExprPtr differs =
      ix_binary(IxKind::Ne, from_end(ix_extra(0, vars(0, n)), 0), ix_var(int(n)));
  return reindex_tree(broadcast_to(scalar(1.0, dtype), {num_classes}), std::move(shape),
                      {ix_var(int(n))}, 0, {differs}, {ids});
}

}  // namespace metajit
