// Composite ops built only from meta-ops, as in Jittor: they add no node kinds, so fusion
// and code generation see only meta-ops (docs/design.md §3).
#pragma once
#include "ops.h"

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit {

Var reshape(const Var& x, Shape shape);  // one -1 allowed
Var transpose(const Var& x, std::vector<int64_t> perm);
// [..,n,k] x [..,k,m]; leading batch dims broadcast. A 1-D operand follows numpy: a [k] is a
// row, b [k] a column, and that axis is dropped from the result ([k] x [k] is a 0-d dot).
Var matmul(const Var& a, const Var& b);

// ---- convolution and pooling (meta_ops/convolution.cc) ----
Var conv2d(const Var& x, const Var& w, int64_t stride = 1, int64_t padding = 0,
           int64_t dilation = 1);  // NCHW input, OIHW weight
// Grouped: w is [O, C / groups, KH, KW]; output channel o reads the input channels of group
// o / (O / groups) (torch.nn.Conv2d; groups == C is depthwise).
Var conv2d(const Var& x, const Var& w, int64_t stride, int64_t padding, int64_t dilation,
           int64_t groups);
// The adjoint of conv2d (torch.nn.ConvTranspose2d): w is [C_in, C_out, KH, KW]; the output is
// (in - 1) * stride - 2 * padding + kernel + output_padding along H and W.
Var conv_transpose2d(const Var& x, const Var& w, int64_t stride = 1, int64_t padding = 0,
                     int64_t output_padding = 0);
Var max_pool2d(const Var& x, int64_t kernel, int64_t stride, int64_t padding = 0);
// Mean of each window; padded cells count as zeros (count_include_pad, torch's default).
// Integer inputs give Float32.
Var avg_pool2d(const Var& x, int64_t kernel, int64_t stride, int64_t padding = 0);

// ---- joining, cutting and padding (meta_ops/shaping.cc) ----
// Joins xs (one rank, equal extents off dim) along dim; the dtype is the promotion of all.
Var concat(const std::vector<Var>& xs, int64_t dim);
// Joins xs (equal shapes) along a new axis dim (-rank-1 <= dim <= rank).
Var stack(const std::vector<Var>& xs, int64_t dim);
// Pieces of x along dim with the given extents (>= 0, adding up to x's extent).
std::vector<Var> split(const Var& x, std::vector<int64_t> sizes, int64_t dim);
// x[start:stop:step] along dim, Python's rule: negative bounds count from the end, bounds
// are clamped to the axis, an empty range gives an empty axis; step >= 1.
Var slice(const Var& x, int64_t dim, int64_t start, int64_t stop, int64_t step = 1);
// One before/after entry per axis in axis order, filled with `value`; a negative entry crops.
Var pad(const Var& x, std::vector<int64_t> before, std::vector<int64_t> after, double value = 0);

// ---- statistics (meta_ops/statistics.cc) ----
// Running sum along dim; integers and Bool add up in Int64 (torch). O(extent) work per element.
Var cumsum(const Var& x, int64_t dim);
// Variance over dims (all when empty) with divisor max(0, N - correction) (torch.var); integer
// inputs give Float32.
Var var(const Var& x, std::vector<int64_t> dims = {}, bool keepdims = false,
        int64_t correction = 1);
// Normalises over the last `normalized_dims` axes (biased variance, torch.nn.LayerNorm), then
// scales by weight and shifts by bias where they are defined (shape: those trailing axes).
Var layer_norm(const Var& x, int64_t normalized_dims, const Var& weight = {}, const Var& bias = {},
               double eps = 1e-5);
// Inverted dropout (torch.nn.functional.dropout): in training, each element is zeroed with
// probability p and the others scaled by 1 / (1 - p), the mask drawn from the random stream
// (new on every call and jit replay); not training, or p = 0, x itself. Error outside 0..1.
Var dropout(const Var& x, double p, bool training = true);
Var softmax(const Var& x, int64_t dim);
// softmax(q k^T / sqrt(D)) v over the last two axes (torch.nn.functional.
// scaled_dot_product_attention without mask or dropout; meta_ops/attention.cc): q is [.., T, D],
// k [.., S, D], v [.., S, Dv], their leading axes broadcast as matmul's do; the result is
// [.., T, Dv]. With `causal`, query i attends keys 0..i only (torch's top-left alignment, also
// when T != S: with T > S the last queries see every key). Built from matmul, softmax and a
// reindex, so it is differentiable in q, k and v. ShapeError for an operand with fewer than two
// axes, q and k with different D (or D = 0), k and v of different lengths S, or batch axes
// that do not broadcast; DTypeError for a non-float operand.
Var scaled_dot_product_attention(const Var& q, const Var& k, const Var& v, bool causal = false);
// log(softmax(x, dim)), computed as (x - max) - log(sum(exp(x - max))): finite for any finite
// logits, however extreme.
Var log_softmax(const Var& x, int64_t dim);
// The index (Int32) of the first maximum / minimum along dim; that axis is removed. A NaN counts
// as the maximum (and the minimum), as in PyTorch.
Var argmax(const Var& x, int64_t dim);
Var argmin(const Var& x, int64_t dim);

// ---- data-dependent indexing (meta_ops/indexing.cc) ----
// Built on reindex / reindex_reduce with extras; differentiable in x / src / weight (the index
// arrays get no gradient). Indices are Int32 or Int64 and are not checked when the op is built
// (that would read them). gather, index_select, embedding and one_hot count a negative position
// from the end, as numpy does (-1 is the last); a position still outside its axis reads 0
// (gather, index_select, embedding) or gives a row of zeros (one_hot). scatter_add drops an
// element whose position is outside, negative ones included (torch refuses them).
// out[i..] = x[i.. with axis dim replaced by index[i..]]; index has x's rank and
// index.shape[d] <= x.shape[d] for d != dim; out has index's shape (torch.gather,
// numpy.take_along_axis).
Var gather(const Var& x, int64_t dim, const Var& index);
// x plus src[i..] added at x[i.. with axis dim replaced by index[i..]] for every i.. of index;
// colliding positions add up (torch.Tensor.scatter_add).
Var scatter_add(const Var& x, int64_t dim, const Var& index, const Var& src);
// x with axis dim replaced by the positions listed in 1-D index (torch.index_select).
Var index_select(const Var& x, int64_t dim, const Var& index);
// Rows of the table weight [V, D] for ids of any shape: ids.shape + [D].
Var embedding(const Var& weight, const Var& ids);
// ids.shape + [num_classes]: 1 at the id's class, 0 elsewhere.
Var one_hot(const Var& ids, int64_t num_classes, DType dtype = DType::Float32);

// ---- losses (meta_ops/losses.cc) ----
// Mean over N of -log_softmax(logits)[n, labels[n]]: logits [N, C] float, labels [N] Int32 or
// Int64 class ids (the one-hot mask is an index comparison, as Jittor builds it). A label
// outside [0, C) cannot be checked without reading it: its row's loss is NaN, so the mean is NaN.
Var cross_entropy(const Var& logits, const Var& labels);
// Mean of (pred - target)^2 over every element; pred and target have the same shape.
Var mse_loss(const Var& pred, const Var& target);

}  // namespace metajit
#pragma GCC visibility pop
