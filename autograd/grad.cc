// grad(): reverse-mode accumulation over the lazy graph (include/metajit/autograd.h). The
// graph is walked once from the loss; the nodes on a differentiable path to a wrt receive
// gradients in reverse topological order, each input's contributions summed (element-wise
// adds that fuse into their consumers). Everything built here is a lazy graph of meta-ops.
#include <metajit/autograd.h>
#include <metajit/error.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "autograd/backward_rules.h"
#include "base/log.h"
#include "meta_ops/ops.h"

namespace metajit {
namespace {

std::string describe(const Var& v) {
  return std::string(dtype_name(v.dtype())) + shape_str(v.shape());
}

// What grad() differentiates for `n`: a value an evaluation stored because the program held it
// is differentiated through the op and inputs it had (Node::history, api/kept_values.h).
const NodePtr& through(const NodePtr& n) {
  return n->history ? n->history : n;
}

// Where `n` (seen through its history) is in the order.
int position_of(const std::unordered_map<const Node*, int>& position, const NodePtr& n) {
  return position.at(through(n).get());
}

// The nodes `root` depends on, inputs before users (iterative: graphs can be deep); stored
// values with a history stand for their history.
std::vector<NodePtr> topological_order(const NodePtr& root,
                                       std::unordered_map<const Node*, int>& position) {
  std::vector<NodePtr> order;
  std::vector<std::pair<const NodePtr*, size_t>> stack{{&through(root), 0}};
  position.emplace(through(root).get(), -1);
  while (!stack.empty()) {
    auto& [n, next] = stack.back();
    if (next < (*n)->inputs.size()) {
      const NodePtr* in = &through((*n)->inputs[next++]);
      if (position.emplace(in->get(), -1).second) stack.push_back({in, 0});
      continue;
    }
    position[n->get()] = int(order.size());
    order.push_back(*n);
    stack.pop_back();
  }
  return order;
}

// The op nearest to `target` on a path from the loss that carries no gradient.
std::string find_cut(const std::vector<NodePtr>& order,
                     const std::unordered_map<const Node*, int>& position, const Node* target) {
  std::vector<bool> reaches(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    const Node& n = *order[i];
    if (&n == target) {
      reaches[i] = true;
      continue;
    }
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (!reaches[size_t(position_of(position, n.inputs[k]))]) continue;
      if (!is_differentiable_edge(n, k)) return cut_reason(n, k);
      reaches[i] = true;
    }
  }
  return "";
}

}  // namespace

namespace {

// Typed errors for an undefined or non-float loss or wrt.
void check_grad_arguments(const Var& loss, const std::vector<Var>& wrt) {
  if (!loss.defined()) throw Error("grad: the loss is undefined (default-constructed)");
  if (!is_float(loss.dtype()))
    throw DTypeError("grad: the loss " + describe(loss) +
                     " is not a float; gradients exist for float32 and float64 losses (cast it)");
  for (size_t k = 0; k < wrt.size(); ++k) {
    if (!wrt[k].defined())
      throw Error("grad: wrt[" + std::to_string(k) + "] is undefined (default-constructed)");
    if (!is_float(wrt[k].dtype()))
      throw DTypeError("grad: wrt[" + std::to_string(k) + "] " + describe(wrt[k]) +
                       " is not a float; gradients exist for float32 and float64 Vars");
  }
}

// An evaluated loss has no graph behind it (evaluating drops it): say what to do instead of
// returning zeros. Checked before anything is built.
void check_loss_has_graph(const Var& loss, const std::vector<Var>& wrt) {
  if (loss.node()->kind != OpKind::Leaf || !loss.node()->evaluated || loss.node()->history) return;
  for (size_t k = 0; k < wrt.size(); ++k)
    if (wrt[k].node() != loss.node())
      throw Error("grad: the loss " + describe(loss) +
                  " was already evaluated, which drops the graph behind it, so wrt[" +
                  std::to_string(k) + "] " + describe(wrt[k]) +
                  " cannot be reached from it; build grad() before evaluating and evaluate the "
                  "loss and its gradients together (eval({loss, g...})), or use "
                  "value_and_grad");
}

// The loss's graph in topological order (the loss last) and what backward needs of it.
struct GradGraph {
  std::unordered_map<const Node*, int> position;
  std::vector<NodePtr> order;
  std::vector<bool> needs;        // needs[i]: a gradient flows from node i to some wrt
  bool passes_evaluated = false;  // an evaluated leaf that is not a wrt lies on the way
  size_t at(const NodePtr& n) const { return size_t(position_of(position, n)); }
};

GradGraph grad_graph(const Var& loss, const std::vector<Var>& wrt) {
  GradGraph g;
  g.order = topological_order(loss.node(), g.position);
  const size_t count = g.order.size();
  std::vector<bool> is_wrt(count, false);
  for (const Var& w : wrt) {
    auto it = g.position.find(through(w.node()).get());
    if (it != g.position.end()) is_wrt[size_t(it->second)] = true;
  }
  g.needs.assign(count, false);
  for (size_t i = 0; i < count; ++i) {
    const Node& n = *g.order[i];
    g.needs[i] = is_wrt[i];
    if (n.kind == OpKind::Leaf && n.evaluated && !is_wrt[i]) g.passes_evaluated = true;
    for (size_t k = 0; k < n.inputs.size() && !g.needs[i]; ++k)
      g.needs[i] = g.needs[g.at(n.inputs[k])] && is_differentiable_edge(n, k);
  }
  return g;
}

// Every needed node's gradient, from the loss's (ones) back: each node's backward rule for the
// inputs that need one, summed where a node feeds several.
std::vector<Var> backward_pass(const GradGraph& g, const Var& loss) {
  const size_t count = g.order.size();
  std::vector<Var> grads(count);
  BackwardScope backward_nodes;
  const size_t last = count - 1;  // the loss: topological_order ends with its root
  if (g.needs[last]) grads[last] = full(loss.shape(), 1.0, loss.dtype());
  for (size_t i = count; i-- > 0;) {
    if (!g.needs[i] || !grads[i].defined()) continue;
    const Node& n = *g.order[i];
    if (n.inputs.empty()) continue;
    std::vector<bool> wanted(n.inputs.size(), false);
    bool any = false;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      wanted[k] = g.needs[g.at(n.inputs[k])] && is_differentiable_edge(n, k);
      any = any || wanted[k];
    }
    if (!any) continue;
    std::vector<Var> parts = backward(g.order[i], grads[i], wanted);
    for (size_t k = 0; k < parts.size(); ++k) {
      if (!parts[k].defined()) continue;
      Var& acc = grads[g.at(n.inputs[k])];
      acc = acc.defined() ? acc + parts[k] : parts[k];
    }
  }
  return grads;
}

// wrt[k]'s gradient, or zeros with a warning saying why none reaches it.
Var gradient_or_zeros(const GradGraph& g, const std::vector<Var>& grads,
                      const std::vector<Var>& wrt, size_t k) {
  auto it = g.position.find(through(wrt[k].node()).get());
  if (it != g.position.end() && grads[size_t(it->second)].defined())
    return grads[size_t(it->second)];
  std::string why =
      it == g.position.end() ? "" : find_cut(g.order, g.position, through(wrt[k].node()).get());
  std::string msg =
      "grad: wrt[" + std::to_string(k) + "] " + describe(wrt[k]) + " does not affect the loss" +
      (why.empty() ? "" : " (the path is cut by " + why + ")") + "; its gradient is zeros";
  if (why.empty() && g.passes_evaluated)
    msg +=
        " (if it is an input of a value evaluated since, that is why: evaluating drops the "
        "graph behind a value; build grad() before evaluating)";
  log_message(LogLevel::Warn, msg);
  return zeros(wrt[k].shape(), wrt[k].dtype());
}

}  // namespace

std::vector<Var> grad(const Var& loss, const std::vector<Var>& wrt) {
  check_grad_arguments(loss, wrt);
  // Evaluation realizes nodes (dropping their inputs) under this lock: the walk sees a stable
  // graph.
  std::lock_guard<std::recursive_mutex> lock(graph_mutex());
  const GradGraph g = grad_graph(loss, wrt);
  check_loss_has_graph(loss, wrt);
  const std::vector<Var> grads = backward_pass(g, loss);
  std::vector<Var> out;
  out.reserve(wrt.size());
  for (size_t k = 0; k < wrt.size(); ++k) out.push_back(gradient_or_zeros(g, grads, wrt, k));
  return out;
}

Var stop_grad(const Var& x) {
  return identity_without_gradient(x);
}

namespace detail {

void check_argnums(const std::vector<int>& argnums, size_t num_args) {
  if (argnums.empty())
    throw Error("value_and_grad: argnums is empty; name at least one argument to differentiate");
  for (size_t k = 0; k < argnums.size(); ++k)
    if (argnums[k] < 0 || size_t(argnums[k]) >= num_args)
      throw Error("value_and_grad: argnums[" + std::to_string(k) +
                  "] = " + std::to_string(argnums[k]) + " is out of range for a function of " +
                  std::to_string(num_args) + " argument" + (num_args == 1 ? "" : "s") +
                  " (valid: 0.." + std::to_string(int64_t(num_args) - 1) + ")");
}

}  // namespace detail

}  // namespace metajit
