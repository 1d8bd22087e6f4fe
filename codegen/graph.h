// The pending part of the lazy graph, captured for one evaluation: nodes numbered in
// topological order, with the realized nodes they read as leaves. Graph passes, the fusion
// planner and lowering work on this copy, never on the user's nodes.
#pragma once
#include <string>
#include <vector>

#include "meta_ops/node.h"

namespace metajit {

struct GNode : OpAttrs {
  std::vector<int> inputs;  // ids of earlier nodes
  int leaf = -1;            // Leaf: index into Graph::leaves
};

struct Graph {
  std::vector<GNode> nodes;     // topological: every input id is smaller than its user's
  std::vector<NodePtr> leaves;  // realized nodes whose buffers the graph reads
  std::vector<int> outputs;     // one id per requested node, in request order

  // One line per node: "%3 = binary.mul f32[2, 3] (%1, %2)".
  std::string dump() const;
};

// Captures everything `outputs` depend on that is not yet realized.
Graph capture_graph(const std::vector<NodePtr>& outputs);

// What capture_graph(outputs) would hold, as bytes, without building it: every node's kind,
// dtype, shape, attributes, scalar and inputs (leaves by position, never by value), and the
// outputs. Equal fingerprints capture to graphs that differ only in their leaves' buffers.
// `leaves` receives what Graph::leaves would, in the same order.
// Written over `fingerprint`, whose capacity is reused.
void node_fingerprint(const std::vector<NodePtr>& outputs, std::string& fingerprint,
                      std::vector<NodePtr>& leaves);

// One-line description of a node's op, e.g. "reduce.add(axes=1)", "binary.mul", "reindex".
std::string describe_op(const GNode& n);

}  // namespace metajit
