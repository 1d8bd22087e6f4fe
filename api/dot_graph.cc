// to_dot(): the plan eval(vars) would run, drawn for Graphviz (include/metajit/eval.h).
//
// The same pipeline as plan() and explain() (capture, passes, fusion plan, lowering), nothing
// compiled. Each kernel is a cluster holding its fused ops; inputs (leaves) are boxes outside
// every cluster; each kernel's result, the value it stores, is a cylinder that later kernels
// read from (or, for a requested value, a green "output" cylinder). Scalar constants are not
// drawn: their values are listed in the label of the op that reads them ("with 0.5").
#include "api/dot_graph.h"

#include <metajit/error.h>
#include <metajit/eval.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_set>

#include "api/kept_values.h"
#include "meta_ops/index_expr.h"
#include "runtime/kernel_library.h"

namespace metajit {
namespace {

constexpr const char* kForwardFill = "#cfe2f3";   // light blue
constexpr const char* kBackwardFill = "#fce5cd";  // light orange
constexpr const char* kStoredFill = "#eeeeee";    // light grey
constexpr const char* kOutputFill = "#d9ead3";    // light green

// A DOT double-quoted string: quotes and backslashes escaped, line breaks as DOT's centred
// "\n", other control characters as spaces.
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string value_type(const GNode& n) {
  return std::string(dtype_name(n.dtype)) + shape_str(n.shape);
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string legend() {
  auto row = [](const char* fill, const char* text) {
    return std::string("<TR><TD") + (fill ? std::string(" BGCOLOR=\"") + fill + "\"" : "") + ">" +
           text + "</TD></TR>";
  };
  return std::string(
             "  legend [shape=plaintext, style=\"\", label=<<TABLE BORDER=\"0\" "
             "CELLBORDER=\"1\" CELLSPACING=\"0\" CELLPADDING=\"4\">") +
         row(nullptr, "<B>legend</B>") + row(kForwardFill, "forward op") +
         row(kBackwardFill, "backward op (built by grad)") + row(nullptr, "input (leaf)") +
         row(kStoredFill, "value stored between kernels") + row(kOutputFill, "requested output") +
         "</TABLE>>];\n";
}

class DotWriter {
 public:
  DotWriter(const PipelinePlan& p, const std::vector<Var>& vars,
            const std::vector<NodePtr>& pending, Device device)
      : p_(p), g_(p.graph), device_(device) {
    label_outputs(vars, pending);
    find_constants();
  }

  std::string write() {
    size_t backward = 0;
    for (const GNode& n : g_.nodes) backward += n.backward ? 1 : 0;
    out_ += "digraph metajit {\n";
    out_ +=
        "  graph [label=" +
        quote("metajit plan on " + std::string(device_name(device_)) + ": " +
              std::to_string(p_.kernels.size()) + " kernel(s), " + std::to_string(g_.nodes.size()) +
              " graph node(s), " + std::to_string(backward) + " of them backward") +
        ", labelloc=t, fontname=\"Helvetica\", fontsize=12, rankdir=TB];\n";
    out_ += std::string("  node [fontname=\"Helvetica\", fontsize=10, shape=box, ") +
            "style=\"rounded,filled\", fillcolor=\"" + kForwardFill + "\"];\n";
    out_ += "  edge [color=\"#555555\", arrowsize=0.7];\n";
    out_ += legend();
    write_inputs();
    for (size_t k = 0; k < p_.fusion.groups.size(); ++k) write_kernel(k);
    write_stored_values();
    out_ += external_edges_;
    out_ += "}\n";
    return std::move(out_);
  }

 private:
  // "output 0" or "output 0, 2" (indices into vars) per graph node that is requested.
  void label_outputs(const std::vector<Var>& vars, const std::vector<NodePtr>& pending) {
    for (size_t k = 0; k < g_.outputs.size() && k < pending.size(); ++k) {
      std::string& label = output_label_[g_.outputs[k]];
      for (size_t j = 0; j < vars.size(); ++j) {
        if (vars[j].node() != pending[k]) continue;
        label += (label.empty() ? "output " : ", ") + std::to_string(j);
      }
    }
  }

  bool stored(int id) const {
    return size_t(id) < p_.fusion.stored.size() && p_.fusion.stored[size_t(id)];
  }

  // Scalars, and scalars broadcast, computed inside a kernel: drawn as a value in their
  // readers' labels, not as nodes.
  void find_constants() {
    constant_.assign(g_.nodes.size(), false);
    value_.assign(g_.nodes.size(), 0.0);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const GNode& n = g_.nodes[i];
      if (stored(int(i))) continue;
      if (n.kind == OpKind::Scalar) {
        constant_[i] = true;
        value_[i] = n.scalar;
      } else if (n.kind == OpKind::BroadcastTo && n.inputs.size() == 1 &&
                 constant_[size_t(n.inputs[0])]) {
        constant_[i] = true;
        value_[i] = value_[size_t(n.inputs[0])];
      }
    }
  }

  void write_inputs() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const GNode& n = g_.nodes[i];
      if (n.kind != OpKind::Leaf) continue;
      std::string label = "input #" + std::to_string(n.leaf) + "\n" + value_type(n);
      auto out = output_label_.find(int(i));
      if (out != output_label_.end()) label = out->second + "\n" + label;
      out_ += "  n" + std::to_string(i) + " [label=" + quote(label) +
              ", style=\"filled\", fillcolor=\"white\"" +
              (out != output_label_.end() ? ", penwidth=2" : "") + "];\n";
    }
  }

  // The name a reader in kernel `k` uses for graph node `id`.
  std::string source_name(size_t k, int id) const {
    if (g_.nodes[size_t(id)].kind == OpKind::Leaf) return "n" + std::to_string(id);
    if (stored(id)) return "v" + std::to_string(id);
    return "k" + std::to_string(k) + "_" + std::to_string(id);
  }

  std::string tooltip(int id) const {
    const GNode& n = g_.nodes[size_t(id)];
    std::string t = "%" + std::to_string(id) + " = " + describe_op(n) + " " + value_type(n);
    if (!n.inputs.empty()) {
      t += " (";
      for (size_t k = 0; k < n.inputs.size(); ++k)
        t += (k ? ", %" : "%") + std::to_string(n.inputs[k]);
      t += ")";
    }
    for (const auto& e : n.indexes) t += "\n" + ix_to_string(*e);
    for (const auto& e : n.conditions) t += "\nif " + ix_to_string(*e);
    return t;
  }

  void write_kernel(size_t k) {
    const FusedGroup& grp = p_.fusion.groups[k];
    std::string title = "kernel " + std::to_string(k);
    if (k < p_.kernels.size()) {
      try {
        title += " (" + key_of(p_.kernels[k].ir, device_).substr(0, 8) + ")";
      } catch (const std::exception&) {
        // No toolchain for the device (e.g. no nvcc): the picture goes without keys.
      }
    }
    const std::string prefix = "k" + std::to_string(k) + "_";
    out_ += "  subgraph cluster_" + std::to_string(k) + " {\n";
    out_ += "    label=" + quote(title) +
            "; style=\"rounded\"; color=\"#888888\"; fontname=\"Helvetica\"; fontsize=11;\n";
    std::string edges;
    for (int id : grp.nodes) {
      const GNode& n = g_.nodes[size_t(id)];
      if (constant_[size_t(id)] && !writes(grp, id)) continue;
      std::string label = describe_op(n) + "\n" + value_type(n);
      std::string with;
      for (int in : n.inputs) {
        if (!constant_[size_t(in)]) continue;
        with += (with.empty() ? "with " : ", ") + number(value_[size_t(in)]);
      }
      if (n.kind == OpKind::Scalar) with = "value " + number(n.scalar);
      if (!with.empty()) label += "\n" + with;
      out_ += "    " + prefix + std::to_string(id) + " [label=" + quote(label) +
              ", tooltip=" + quote(tooltip(id)) + ", fillcolor=\"" +
              (n.backward ? kBackwardFill : kForwardFill) + "\"];\n";
      for (int in : n.inputs) {
        if (constant_[size_t(in)]) continue;
        const bool here = writes(grp, in);  // an extra root: computed in this kernel
        const std::string edge = (here ? prefix + std::to_string(in) : source_name(k, in)) +
                                 " -> " + prefix + std::to_string(id) + ";\n";
        if (stored(in) && !here)
          external_edges_ += "  " + edge;
        else
          edges += "    " + edge;
      }
    }
    out_ += edges;
    out_ += "  }\n";
    for (int r : group_outputs(grp))
      external_edges_ += "  " + prefix + std::to_string(r) + " -> v" + std::to_string(r) + ";\n";
  }

  static bool writes(const FusedGroup& grp, int id) {
    const std::vector<int> outs = group_outputs(grp);
    return std::find(outs.begin(), outs.end(), id) != outs.end();
  }

  void write_stored_value(int id, std::unordered_set<int>& drawn) {
    const GNode& n = g_.nodes[size_t(id)];
    auto out = output_label_.find(id);
    const bool requested = out != output_label_.end();
    const std::string label =
        (requested ? out->second : std::string("stored")) + "\n" + value_type(n);
    out_ += "  v" + std::to_string(id) + " [label=" + quote(label) +
            ", shape=cylinder, style=\"filled\", fillcolor=\"" +
            (requested ? kOutputFill : kStoredFill) + "\"" + (requested ? ", penwidth=2" : "") +
            "];\n";
    drawn.insert(id);
  }

  // Each kernel's results: stored for later kernels, or requested.
  void write_stored_values() {
    std::unordered_set<int> drawn;
    for (const FusedGroup& grp : p_.fusion.groups)
      for (int r : group_outputs(grp)) write_stored_value(r, drawn);
    // A requested value that is neither an input nor a kernel's result (not expected: the
    // planner stores every requested value) is still drawn, so that no output goes missing.
    for (const auto& [id, label] : output_label_) {
      const GNode& n = g_.nodes[size_t(id)];
      if (drawn.count(id) || n.kind == OpKind::Leaf) continue;
      out_ += "  v" + std::to_string(id) +
              " [label=" + quote(label + "\n" + describe_op(n) + "\n" + value_type(n)) +
              ", shape=cylinder, style=\"filled\", fillcolor=\"" + kOutputFill +
              "\", penwidth=2];\n";
    }
  }

  const PipelinePlan& p_;
  const Graph& g_;
  Device device_;
  std::map<int, std::string> output_label_;
  std::vector<bool> constant_;
  std::vector<double> value_;
  std::string out_, external_edges_;
};

}  // namespace

std::string plan_to_dot(const PipelinePlan& p, const std::vector<Var>& vars,
                        const std::vector<NodePtr>& pending, Device device) {
  return DotWriter(p, vars, pending, device).write();
}

std::string to_dot(const std::vector<Var>& vars) {
  std::lock_guard<std::recursive_mutex> lock(graph_mutex());
  size_t requested = 0;  // then the values the evaluation also stores (api/kept_values.h)
  const std::vector<NodePtr> pending = nodes_to_compute(vars, "to_dot", false, requested);
  if (pending.empty())
    return "digraph metajit {\n  graph [label=\"nothing to compute: every Var is already "
           "evaluated\", labelloc=t, fontname=\"Helvetica\"];\n}\n";
  return plan_to_dot(build_pipeline(pending), vars, pending, device());
}

}  // namespace metajit
