// The Graphviz picture of a planned evaluation: to_dot() (include/metajit/eval.h) and eval's
// METAJIT_DUMP_DOT dumps (api/dot_dump.h) draw a PipelinePlan with this.
#pragma once
#include <metajit/device.h>
#include <metajit/var.h>

#include <string>
#include <vector>

#include "codegen/pipeline.h"

namespace metajit {

// DOT text for `p`, the plan of evaluating `vars`, built from `pending` (the nodes of `vars`
// not yet realized, each once, in the order capture received them): one cluster per kernel
// (with its key for `device` when that can be computed), inputs and stored values outside the
// clusters, requested values labelled by their index in `vars`, backward nodes coloured apart.
// Deterministic: node names come from graph node ids, never from addresses.
std::string plan_to_dot(const PipelinePlan& p, const std::vector<Var>& vars,
                        const std::vector<NodePtr>& pending, Device device);

}  // namespace metajit
