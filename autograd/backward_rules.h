// The backward rule of each meta-op (README "Autograd", the rules and conventions): given a
// node y = op(inputs) and the gradient g of sum(loss) with respect to y, the gradient with
// respect to each input, built from meta-ops. grad() (autograd/grad.cc) walks the graph and
// calls these.
#pragma once
#include <vector>

#include "meta_ops/node.h"

namespace metajit {

// True when a gradient flows from `n` to its input `k`: both float, and not a floor, a
// comparison or logical op, a where's condition, a cast to or from an integer, or stop_grad.
bool is_differentiable_edge(const Node& n, size_t k);

// Why the edge n -> input k carries no gradient, for grad()'s warning ("floor", "stop_grad",
// "a cast to int32", "a comparison (lt)", ...).
std::string cut_reason(const Node& n, size_t k);

// Gradients for the inputs of `y` whose `wanted` entry is true (others are left undefined),
// given g (y's dtype and shape). Each has its input's dtype and shape.
std::vector<Var> backward(const NodePtr& y, const Var& g, const std::vector<bool>& wanted);

}  // namespace metajit
