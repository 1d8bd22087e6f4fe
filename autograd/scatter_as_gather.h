// The gradient of reindex as a gather when the reindex's index map can be inverted
// (docs/architecture.md, autograd). reindex's adjoint is a reindex_reduce(Add) scatter; when
// each input axis reads an affine function of output indices that no other axis reads
// (conv2d's `oh*stride - pad + r*dil`, transpose's bare `i2`), every input element's sources
// can be enumerated instead: solve each axis for one output index and sum over the rest (or,
// when an axis's terms are the digits of a mixed radix, `i1*64+i3`, solve it for all of them:
// attention's heads split out of a packed qkv have one source each, not 64 candidates). That
// is the transposed convolution: a reindex of the output gradient with overflow conditions
// (indivisible or out-of-range solutions), then a reduce, which fuses into one contraction
// kernel with no atomics and no 7-D buffer.
#pragma once
#include <optional>
#include <vector>

#include "meta_ops/index_expr.h"
#include "meta_ops/node.h"

namespace metajit {

// reindex_reduce(g, Add, x_shape, indexes, conditions) computed as a gather, or nullopt when
// the map is not of that form (an index shared by two axes, division, modulo, ...).
std::optional<Var> scatter_as_gather(const Var& g, const Shape& x_shape,
                                     const std::vector<IndexExprPtr>& indexes,
                                     const std::vector<IndexExprPtr>& conditions);

}  // namespace metajit
