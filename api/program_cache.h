// The fast path of eval() for a graph whose structure it has seen before (docs/design.md §5: "an
// in-memory table maps the structural signature straight to the loaded function"): the
// pending graph's fingerprint -- every node's op, dtype, shape, attributes and scalar
// constants, how the nodes connect, the device and the configuration -- maps to the
// ExecProgram built for it, so a repeated structure skips capturing, the graph passes,
// fusion, lowering and the kernel lookups, and only binds its leaves' buffers. Two graphs with
// one fingerprint plan to the same program: the passes read nothing else (not leaf values).
#pragma once
#include <metajit/runtime.h>

#include <memory>
#include <string>

#include "codegen/graph.h"
#include "runtime/executor.h"

namespace metajit {

// The fingerprint of evaluating `outputs` on `device` under the current config() (graph.h's
// node_fingerprint plus the device and the settings), written over `fingerprint` (a buffer the
// caller reuses: no allocation on the dispatch path); `leaves` as capture_graph's.
void evaluation_fingerprint(const std::vector<NodePtr>& outputs, Device device,
                            std::string& fingerprint, std::vector<NodePtr>& leaves);

// A remembered program and where its leaves are among the fingerprint's (the graph passes
// drop leaves nothing reads, so the program's leaves are a subset).
struct CachedProgram {
  ExecProgram program;
  std::vector<int32_t> leaf_of;  // per program leaf: its index in evaluation_fingerprint's
};

// The program remembered for `fingerprint`, or null.
std::shared_ptr<const CachedProgram> find_program(const std::string& fingerprint);

// Remembers `program` (at most a few thousand programs; the oldest are dropped first).
void remember_program(const std::string& fingerprint, std::shared_ptr<const CachedProgram> program);

}  // namespace metajit
