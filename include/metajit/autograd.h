// Reverse-mode automatic differentiation (docs/api.md "Autograd", README "Autograd").
//
// The gradient of every meta-op is built from meta-ops (reindex <-> reindex_reduce,
// broadcast_to <-> reduce, element-wise rules), so backward graphs are lazy graphs like any
// other: they are fused, compiled and cached by the same pipeline, and evaluating
// `eval({loss, g...})` runs forward and backward as one plan.
//
//   Var loss = sum(tanh(matmul(x, w)));
//   auto g = grad(loss, {w});          // lazy; nothing runs yet
//   eval({loss, g[0]});                // one plan for both
//
// - A loss of any shape is differentiated as sum(loss) (Jittor's convention).
// - A non-float loss or wrt is a DTypeError. Gradients have the dtype and shape of their wrt.
// - wrt may hold leaves or any intermediate Var of the loss's graph. A Var the loss does not
//   depend on gets zeros and one warning naming it (and the op that cut the path: a cast to an
//   integer type or to bool (logical ops cast their operands), a comparison, floor or
//   stop_grad).
// - Evaluating a Var drops the graph behind it (docs/design.md §1). grad() of a loss that was
//   already evaluated is an Error saying so: build grad() before evaluating (then evaluate the
//   loss and its gradients together) or use value_and_grad. A gradient that stops at some other
//   evaluated value is zeros, and the warning says it may be why.
// - Gradients of gradients are ordinary graphs: grad(grad(y, {x})[0], {x}) works.
#pragma once
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "var.h"
#include "var_args.h"

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit {

// d sum(loss) / d w for each w in wrt, as lazy Vars.
std::vector<Var> grad(const Var& loss, const std::vector<Var>& wrt);

// The identity on values whose gradient is zero (JAX's stop_gradient).
Var stop_grad(const Var& x);

namespace detail {

// "value_and_grad: argnums[k] = v is out of range for a function of n arguments" and the like.
void check_argnums(const std::vector<int>& argnums, size_t num_args);

template <class F, class Args>
struct ValueAndGrad;

template <class F, class... A>
struct ValueAndGrad<F, std::tuple<A...>> {
  F fn;
  std::vector<int> argnums;
  // Exactly fn's parameters, so jit() can trace it.
  std::vector<Var> operator()(A... args) const {
    Var value = fn(args...);  // lvalues: the Vars `flat` points at must stay valid
    const FlatArgs flat = flatten_all(args...);
    const ParamSpans<A...> spans(flat.list_lengths);
    std::vector<Var> wrt;
    for (int i : argnums)
      for (size_t k = 0; k < spans.length[size_t(i)]; ++k)
        wrt.push_back(*flat.vars[spans.offset[size_t(i)] + k]);
    std::vector<Var> out = grad(value, wrt);
    out.insert(out.begin(), std::move(value));
    return out;
  }
};

template <class F>
struct CallSignature {
  using type = typename CallSignature<decltype(&F::operator())>::type;
};
template <class R, class... A>
struct CallSignature<R (*)(A...)> {
  using type = std::tuple<A...>;
  using result = R;
};
template <class R, class... A>
struct CallSignature<R(A...)> : CallSignature<R (*)(A...)> {};
template <class C, class R, class... A>
struct CallSignature<R (C::*)(A...) const> : CallSignature<R (*)(A...)> {};
template <class C, class R, class... A>
struct CallSignature<R (C::*)(A...)> : CallSignature<R (*)(A...)> {};

}  // namespace detail

// A callable with exactly fn's parameters (each a Var, by value or const Var&, or a
// std::vector<Var>) that returns {fn(args...), d fn / d args[argnums[0]], ...}, a list
// parameter contributing the gradient of each of its elements in order. fn must return a Var.
// jit() accepts it:
//   auto step = jit(value_and_grad(loss_fn, {1, 2}), "step");
//   auto step = jit(value_and_grad([](const Var& x, const std::vector<Var>& params) {...}, {1}));
template <class F>
auto value_and_grad(F fn, std::vector<int> argnums = {0}) {
  using Fn = std::decay_t<F>;
  using Args = typename detail::CallSignature<std::conditional_t<
      std::is_function_v<std::remove_pointer_t<Fn>>, std::remove_pointer_t<Fn>, Fn>>::type;
  detail::check_argnums(argnums, std::tuple_size_v<Args>);
  return detail::ValueAndGrad<Fn, Args>{std::move(fn), std::move(argnums)};
}

}  // namespace metajit
#pragma GCC visibility pop
