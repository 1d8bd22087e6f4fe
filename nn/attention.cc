// nn::MultiheadAttention (include/metajit/nn.h): torch's parameters (in_proj_weight,
// in_proj_bias, out_proj), batch_first, the heads attended with scaled_dot_product_attention.
#include <metajit/composite.h>
#include <metajit/error.h>
#include <metajit/nn.h>

#include <cmath>
#include <string>

#include "meta_ops/autocast.h"
#include "nn/init.h"

namespace metajit::nn {
namespace {

// Error naming the three inputs' shapes unless they are [N, T, E], [N, S, E], [N, S, E] (or the
// same without N, all three).
void check_inputs(const Var& q, const Var& k, const Var& v, int64_t e) {
  for (const Var* x : {&q, &k, &v})
    if (!x->defined())
      throw Error("MultiheadAttention: an input is an undefined Var (default-constructed)");
  const std::string shapes = "MultiheadAttention(embed_dim = " + std::to_string(e) + "): query " +
                             shape_str(q.shape()) + ", key " + shape_str(k.shape()) + ", value " +
                             shape_str(v.shape());
  const int64_t r = q.ndim();
  bool ok = (r == 2 || r == 3) && k.ndim() == r && v.ndim() == r;
  for (const Var* x : {&q, &k, &v}) ok = ok && x->shape().back() == e;
  if (ok && r == 3) ok = k.shape()[0] == q.shape()[0] && v.shape()[0] == q.shape()[0];
  if (ok) ok = k.shape()[size_t(r - 2)] == v.shape()[size_t(r - 2)];
  if (!ok)
    throw ShapeError(shapes + "; expected [N, T, " + std::to_string(e) + "], [N, S, " +
                     std::to_string(e) + "], [N, S, " + std::to_string(e) +
                     "] (batch_first), or the same without N");
  for (const Var* x : {&q, &k, &v})
    if (!is_float(x->dtype()))
      throw DTypeError(shapes + ": dtype " + dtype_name(x->dtype()) +
                       "; expected float32 or float64");
}

// x [.., L] -> [1, .., L]: an unbatched input as a batch of one.
Var batched(const Var& x) {
  Shape s = x.shape();
  s.insert(s.begin(), 1);
  return reshape(x, s);
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, bool bias,
                                       std::optional<uint64_t> seed)
    : embed_dim_(embed_dim), num_heads_(num_heads) {
  if (embed_dim < 1 || num_heads < 1 || embed_dim % num_heads != 0)
    throw Error("MultiheadAttention(embed_dim = " + std::to_string(embed_dim) +
                ", num_heads = " + std::to_string(num_heads) +
                "): expected embed_dim >= 1 divisible by num_heads >= 1");
  Init init(seed);
  const int64_t e = embed_dim;
  // xavier_uniform_ on [3E, E]: fan_in E, fan_out 3E.
  in_proj_weight_ = register_parameter("in_proj_weight",
                                       init.uniform({3 * e, e}, std::sqrt(6.0 / double(4 * e))));
  if (bias) in_proj_bias_ = register_parameter("in_proj_bias", filled({3 * e}, 0));
  out_proj_ = register_module("out_proj", std::make_shared<Linear>(e, e, bias, init.child_seed()));
  if (bias) {
    Var out_bias = out_proj_->bias();  // torch zeroes it after Linear's initialisation
    out_bias.assign(filled({e}, 0));
  }
}

// Rows [part E, (part + 1) E) of the in-projection (0: q, 1: k, 2: v) applied to x [N, L, E].
Var MultiheadAttention::project(const Var& x, int64_t part) const {
  const int64_t e = embed_dim_;
  const Var w = slice(in_proj_weight_, 0, part * e, (part + 1) * e);
  const Var y = matmul(x, transpose(w, {1, 0}));
  return in_proj_bias_.defined()
             ? y + autocast_operand(slice(in_proj_bias_, 0, part * e, (part + 1) * e))
             : y;
}

// [N, L, E] -> [N, H, L, E / H].
Var MultiheadAttention::split_heads(const Var& x) const {
  const Shape& s = x.shape();
  return transpose(reshape(x, {s[0], s[1], num_heads_, embed_dim_ / num_heads_}), {0, 2, 1, 3});
}

Var MultiheadAttention::operator()(const Var& query, const Var& key, const Var& value,
                                   bool causal) const {
  check_inputs(query, key, value, embed_dim_);
  if (query.ndim() == 2) {
    const Var y = (*this)(batched(query), batched(key), batched(value), causal);
    return reshape(y, {y.shape()[1], y.shape()[2]});
  }
  Var q, k, v;
  if (query.node() == key.node() && key.node() == value.node()) {
    // Self-attention: one packed projection [N, L, 3E] then three slices, as torch does: one
    // product of 3E columns instead of three of E. (Three projections of one input once made
    // the planner store that input broadcast over the output features, a [N, L, E, E] tensor:
    // a GPT train step 10x slower, bench/README.md "GPT"; it stores the input since 682824c.)
    const Var w = transpose(in_proj_weight_, {1, 0});
    // The biases in the product's dtype under autocast, as in Linear (nn/linear.cc).
    const Var qkv = in_proj_bias_.defined() ? matmul(query, w) + autocast_operand(in_proj_bias_)
                                            : matmul(query, w);
    const int64_t e = embed_dim_;
    q = slice(qkv, 2, 0, e), k = slice(qkv, 2, e, 2 * e), v = slice(qkv, 2, 2 * e, 3 * e);
  } else {
    q = project(query, 0), k = project(key, 1), v = project(value, 2);
  }
  const Var heads =
      scaled_dot_product_attention(split_heads(q), split_heads(k), split_heads(v), causal);
  const Shape& n_l = query.shape();
  return (*out_proj_)(reshape(transpose(heads, {0, 2, 1, 3}), {n_l[0], n_l[1], embed_dim_}));
}

}  // namespace metajit::nn
