// Module::state_dict and Module::load_state_dict (include/metajit/nn.h). Loading checks every key
// before it assigns anything, so a failed load leaves the module as it was, and it assigns
// copies: a parameter never shares its graph node with the state's Var, so grad() with respect
// to it is never the gradient of another variable that holds the same node (a target network
// loaded from the online one, then both used in one loss).
#include <metajit/error.h>
#include <metajit/eval.h>
#include <metajit/nn.h>

#include <set>
#include <string>
#include <vector>

#include "meta_ops/node.h"
#include "nn/module_name.h"
#include "runtime/residency.h"

namespace metajit::nn {
namespace {

// The keys, quoted and comma-separated: "weight", "bias".
std::string quoted_list(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "\"" : ", \"") + k + "\"";
  return out;
}

// Error (strict) naming every key of `mine` missing from `state` and every key of `state` not
// in `mine`, as torch's "Missing key(s)" and "Unexpected key(s)" do.
void check_keys(const std::string& who, const std::vector<std::pair<std::string, Var>>& mine,
                const StateDict& state) {
  std::set<std::string> known;
  std::vector<std::string> missing, unexpected;
  for (const auto& [key, v] : mine) {
    known.insert(key);
    if (!state.count(key)) missing.push_back(key);
  }
  for (const auto& [key, v] : state)
    if (!known.count(key)) unexpected.push_back(key);
  if (missing.empty() && unexpected.empty()) return;
  std::string msg = who + ": ";
  if (!missing.empty()) msg += "missing key(s) " + quoted_list(missing);
  if (!unexpected.empty())
    msg +=
        std::string(missing.empty() ? "" : "; ") + "unexpected key(s) " + quoted_list(unexpected);
  throw Error(msg + " (strict: the state must hold exactly the module's keys; load_state_dict(" +
              "state, false) skips them)");
}

// Error unless `value` can be assigned to `target` (defined, same shape and dtype).
void check_value(const std::string& who, const std::string& key, const Var& target,
                 const Var& value) {
  const std::string where = who + ": key \"" + key + "\"";
  if (!value.defined()) throw Error(where + " is an undefined Var (default-constructed)");
  if (value.shape() != target.shape())
    throw ShapeError(where + " has shape " + shape_str(value.shape()) + " in the state, but " +
                     shape_str(target.shape()) + " in the module; the shapes must be equal");
  if (value.dtype() != target.dtype())
    throw DTypeError(where + " has dtype " + dtype_name(value.dtype()) + " in the state, but " +
                     dtype_name(target.dtype()) + " in the module; the dtypes must be equal " +
                     "(cast the value)");
}

// A new leaf holding a copy of realized `v`'s bytes, on the device they are on.
Var copy_of(const Var& v) {
  const Node& n = *v.node();
  NodePtr leaf = new_node(OpKind::Leaf, n.dtype, n.shape);
  leaf->data = copy_buffer(*n.data, n.data->device());
  return Var(std::move(leaf));
}

}  // namespace

StateDict Module::state_dict() const {
  std::vector<std::pair<std::string, Var>> entries;
  collect(false, "", entries, nullptr);
  collect(true, "", entries, nullptr);
  return StateDict(entries.begin(), entries.end());
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  const std::string who = "load_state_dict for " + module_name(*this);
  std::vector<std::pair<std::string, Var>> mine;  // a shared child's entries under each name
  collect(false, "", mine, nullptr);
  collect(true, "", mine, nullptr);
  if (strict) check_keys(who, mine, state);
  std::vector<Var> targets, values;
  for (const auto& [key, target] : mine) {
    const auto found = state.find(key);
    if (found == state.end()) continue;
    check_value(who, key, target, found->second);
    targets.push_back(target);
    values.push_back(found->second);
  }
  metajit::eval(values);  // the lazy ones together; may throw, and nothing has changed yet
  std::vector<Var> copies;
  for (const Var& v : values) copies.push_back(copy_of(v));
  for (size_t i = 0; i < targets.size(); ++i) targets[i].assign(copies[i]);
}

}  // namespace metajit::nn
