#include "codegen/pipeline.h"

#include "base/check.h"
#include "base/config.h"
#include "base/log.h"
#include "codegen/collective_order.h"
#include "codegen/graph_passes.h"
#include "codegen/output_merging.h"
#include "codegen/verify_kernel_ir.h"

namespace metajit {
namespace {

void dump(const char* stage, const Graph& g) {
  if (log_enabled(LogLevel::Debug))
    log_message(LogLevel::Debug, std::string("graph after ") + stage + ":\n" + g.dump());
}

}  // namespace

PipelinePlan build_pipeline(const std::vector<NodePtr>& outputs) {
  return build_pipeline(capture_graph(outputs));
}

PipelinePlan build_pipeline(Graph captured) {
  const Config& cfg = config();
  PipelinePlan p;
  p.graph = std::move(captured);
  dump("capture", p.graph);
  fold_constants(p.graph);
  dump("fold_constants", p.graph);
  fill_empty_reductions(p.graph);
  dump("fill_empty_reductions", p.graph);
  eliminate_common_subexpressions(p.graph);
  dump("eliminate_common_subexpressions", p.graph);
  eliminate_dead_code(p.graph);
  dump("eliminate_dead_code", p.graph);
  if (cfg.opt_level > 0) {
    softmax_statistic_for_contractions(p.graph);
    dump("softmax_statistic_for_contractions", p.graph);
  }
  p.fusion = plan_fusion(p.graph, cfg.opt_level);
  if (cfg.opt_level > 0) merge_kernel_outputs(p.graph, p.fusion);
  order_kernels_for_collectives(p.graph, p.fusion);
  if (log_enabled(LogLevel::Debug))
    log_message(LogLevel::Debug, "fusion plan (O" + std::to_string(cfg.opt_level) + "):\n" +
                                     dump_plan(p.graph, p.fusion));
  for (const FusedGroup& group : p.fusion.groups) {
    p.kernels.push_back(lower_group(p.graph, p.fusion, group, cfg.specialize_shapes));
    const std::optional<std::string> problem = verify_kernel_ir(p.kernels.back().ir);
    METAJIT_CHECK(!problem, "lower_group wrote invalid kernel IR: " + *problem + "\n" +
                                serialize_ir(p.kernels.back().ir));
    if (log_enabled(LogLevel::Debug))
      log_message(LogLevel::Debug, "kernel IR:\n" + serialize_ir(p.kernels.back().ir));
  }
  return p;
}

}  // namespace metajit
