// scaled_dot_product_attention (include/metajit/composite.h): softmax(q k^T / sqrt(D)) v, built
// from two contractions (scores_of, matmul), softmax and one reindex for the causal mask, so it
// fuses like its parts and its gradient is theirs. Not a fused flash-attention kernel: the
// scores [.., T, S] are an ordinary intermediate, which the planner keeps or fuses as it does
// any other.
#include <metajit/composite.h>
#include <metajit/error.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "meta_ops/ops.h"

namespace metajit {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// The leading (batch) axes of a [.., L, D] operand.
Shape batch_of(const Var& x) {
  return Shape(x.shape().begin(), x.shape().end() - 2);
}

// q [.., T, D], k [.., S, D], v [.., S, Dv], float, batch axes broadcasting: else a typed error
// naming the op and all three shapes.
void check_operands(const Var& q, const Var& k, const Var& v) {
  require_defined(q, kOp, "q");
  require_defined(k, kOp, "k");
  require_defined(v, kOp, "v");
  const std::string shapes = std::string(kOp) + ": q " + shape_str(q.shape()) + ", k " +
                             shape_str(k.shape()) + ", v " + shape_str(v.shape());
  for (const Var* x : {&q, &k, &v})
    if (!is_float(x->dtype()))
      throw DTypeError(shapes + ": dtype " + dtype_name(x->dtype()) +
                       " is not supported; expected float32 or float64");
  if (q.ndim() < 2 || k.ndim() < 2 || v.ndim() < 2)
    throw ShapeError(shapes + ": each needs at least 2 axes ([.., L, D])");
  const int64_t d = q.shape().back();
  if (k.shape().back() != d)
    throw ShapeError(shapes + ": the last axes of q and k (" + std::to_string(d) + " and " +
                     std::to_string(k.shape().back()) + ") must be equal");
  if (d == 0) throw ShapeError(shapes + ": the head dimension D is 0; expected D >= 1");
  if (k.shape()[k.shape().size() - 2] != v.shape()[v.shape().size() - 2])
    throw ShapeError(shapes + ": k and v must have the same length S (axis -2)");
  broadcast_shapes(broadcast_shapes(batch_of(q), batch_of(k), kOp), batch_of(v), kOp);
}

// scores [.., T, S] with -inf where key j > query i (torch's top-left alignment: query i sees
// keys 0..i, whatever T and S are). One reindex with an overflow condition: no mask array.
Var causal_mask(const Var& scores) {
  const int r = int(scores.ndim());
  std::vector<IndexExprPtr> identity;
  for (int k = 0; k < r; ++k) identity.push_back(ix_var(k));
  IndexExprPtr future = ix_binary(IxKind::Gt, ix_var(r - 1), ix_var(r - 2));
  return reindex_tree(scores, scores.shape(), std::move(identity),
                      -std::numeric_limits<double>::infinity(), {std::move(future)});
}

// q k^T [.., T, S] as the sum over D of q [.., T, 1, D] * k [.., 1, S, D]: a contraction whose
// operands both run along D, so that the gradient of k is a product written [.., S, D] as k is.
// matmul(q, transpose(k)) wrote it [.., D, S], and the kernel that gathers the heads' q, k and
// v gradients back into a packed projection read it transposed, element by element (a GPT's
// qkv gradient: 777 us for 3 MiB, bench/README.md "GPT").
Var scores_of(const Var& q, const Var& k) {
  const int64_t t = q.shape()[size_t(q.ndim() - 2)], s = k.shape()[size_t(k.ndim() - 2)];
  return batched_contraction(q, k, {t, s, q.shape().back()}, 1, 0, 2, kOp);
}

}  // namespace

Var scaled_dot_product_attention(const Var& q, const Var& k, const Var& v, bool causal) {
  check_operands(q, k, v);
  Var scores = scores_of(q, k) * (1.0 / std::sqrt(double(q.shape().back())));
  if (causal) scores = causal_mask(scores);
  return matmul(softmax(scores, -1), v);
}

}  // namespace metajit
