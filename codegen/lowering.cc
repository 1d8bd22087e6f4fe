#include "codegen/lowering.h"

#include <algorithm>
#include <functional>
#include <map>
#include <string>

#include "base/check.h"

namespace metajit {
namespace {

class Lowerer {
 public:
  Lowerer(const Graph& g, const FusionPlan& plan, const FusedGroup& group, bool specialize)
      : g_(g), plan_(plan), group_(group), specialize_(specialize) {}

  LoweredKernel run() {
    const GNode& root = g_.nodes[group_.root];
    out_.output_node = group_.root;
    KernelIR& ir = out_.ir;
    ir.output = buffer_desc(group_.root);
    for (int id : group_.nodes)
      if (g_.nodes[id].kind != OpKind::Scalar) ir.ops.push_back(describe_op(g_.nodes[id]));
    scopes_.emplace_back();
    if (root.kind == OpKind::ReindexReduce) {
      ir.kind = KernelKind::Scatter;
      ir.scatter_op = root.op;
      int src = root.inputs[0];
      std::vector<IndexExprPtr> idx = new_loops(src, ir.loops);
      ir.body.result = value(src, idx, ir.body);
      IndexExprPtr valid = ix_const(1);
      for (size_t k = 0; k < root.indexes.size(); ++k) {
        IndexExprPtr t = extra_reads(group_.root, root.indexes[k], idx, valid);
        ir.target.push_back(t);
        valid = conj(valid, in_range(t, dim(group_.root, int(k))));
      }
      for (const auto& c : root.conditions) {
        // Two statements: extra_reads() adds to `valid`, which conj() must read afterwards.
        IndexExprPtr holds = extra_reads(group_.root, c, idx, valid);
        valid = conj(valid, ix_unary(IxKind::Not, holds));
      }
      ir.target_valid = valid;
    } else {
      ir.kind = KernelKind::Map;
      std::vector<IndexExprPtr> idx = new_loops(group_.root, ir.loops);
      // Extra outputs first: the root's computation finds them by memo_key, the same element.
      for (int extra : group_.extra_roots) {
        KOutput o;
        o.buffer = ir.output;  // the root's extents (the same shape, output_merging.h)
        o.buffer.dtype = g_.nodes[size_t(extra)].dtype;
        o.value = value(extra, idx, ir.body, /*is_root=*/true);
        ir.extra_outputs.push_back(std::move(o));
        out_.extra_output_nodes.push_back(extra);
      }
      ir.body.result = value(group_.root, idx, ir.body, /*is_root=*/true);
    }
    ir.num_params = int(out_.args.params.size());
    ir.num_scalars = int(out_.args.scalars.size());
    ir.num_vars = next_var_;
    return std::move(out_);
  }

 private:
  static IndexExprPtr conj(IndexExprPtr a, IndexExprPtr b) {
    if (ix_is_const(a, 1)) return b;
    if (ix_is_const(b, 1)) return a;
    return ix_binary(IxKind::And, a, b);
  }
  static IndexExprPtr in_range(IndexExprPtr e, IndexExprPtr extent) {
    // A position counted from the end (meta_ops/indexing.cc, from_end: x + n * (x < 0)) is
    // in range exactly when -n <= x < n: the test reads x twice instead of the sum four times
    // (a gather along its innermost axis ran 1.2x slower with the sum in its test).
    if (IndexExprPtr x = counted_from_end(e, extent))
      return ix_binary(IxKind::And, ix_binary(IxKind::Ge, x, ix_unary(IxKind::Neg, extent)),
                       ix_binary(IxKind::Lt, x, extent));
    return ix_binary(IxKind::And, ix_binary(IxKind::Ge, e, ix_const(0)),
                     ix_binary(IxKind::Lt, e, extent));
  }
  // x when e is x + extent * (x < 0), else null. Trees are compared by their canonical text.
  static IndexExprPtr counted_from_end(const IndexExprPtr& e, const IndexExprPtr& extent) {
    if (e->kind != IxKind::Add || e->b->kind != IxKind::Mul) return nullptr;
    const IndexExprPtr &n = e->b->a, &negative = e->b->b;
    if (negative->kind != IxKind::Lt || !ix_is_const(negative->b, 0)) return nullptr;
    const std::string x = ix_to_string(*e->a);
    if (ix_to_string(*negative->a) != x || ix_to_string(*n) != ix_to_string(*extent))
      return nullptr;
    return e->a;
  }

  // `e`, an expression of Reindex/ReindexReduce `node`, with its @eK reads turned into reads
  // of input buffers (kernel IR: Extra's value is the buffer slot), and the test that every
  // read is in bounds added to `valid`: an element reading an extra out of bounds is out of
  // range (overflow value or skipped). A 0-d constant extra becomes an int64 parameter, so
  // that its value stays out of the key. The reads themselves never leave their buffer
  // (codegen/c_family_emitter.cc, extra_readers()).
  // `own` is the expression as the node holds it and `idx` its variables' values here: the
  // bounds test is built before substituting, because substitution folds (0 * @e0(i) is 0)
  // and a read folded away must still be in bounds (docs/design.md §3).
  // Extent leaves (the indexed array's extents: a Reindex's input, a ReindexReduce's output)
  // become shape parameters here, before anything else reads `own`.
  IndexExprPtr extra_reads(int node, const IndexExprPtr& own_expr,
                           const std::vector<IndexExprPtr>& idx, IndexExprPtr& valid) {
    const GNode& n = g_.nodes[node];
    const int indexed = n.kind == OpKind::ReindexReduce ? node : n.inputs[0];
    const IndexExprPtr own =
        ix_replace_extents(own_expr, [&](int axis) { return dim(indexed, axis); });
    if (!ix_reads_extras(*own)) return ix_substitute(own, idx);
    auto extra_node = [&](int64_t k) { return n.inputs.at(size_t(k) + 1); };
    // The node's own reads become buffer reads before `idx` is substituted: `idx` may hold a
    // consumer's reads (already buffer reads), which must not be taken for this node's @eK.
    IndexExprPtr in_bounds =
        ix_extra_reads_valid(own, [&](int64_t k, int axis) { return dim(extra_node(k), axis); });
    valid = conj(valid, ix_substitute(lower_extras(in_bounds, extra_node), idx));
    return ix_substitute(lower_extras(own, extra_node), idx);
  }
  IndexExprPtr lower_extras(const IndexExprPtr& e, const std::function<int(int64_t)>& extra_node) {
    return ix_replace_extras(e, [&](int64_t k, std::vector<IndexExprPtr> args) {
      const int src = extra_node(k);
      const GNode& x = g_.nodes[size_t(src)];
      if (x.kind != OpKind::Scalar) return ix_extra(buffer_slot(src), std::move(args));
      auto [it, fresh] = params_.emplace(std::make_pair(src, -1), 0);
      if (fresh) {
        it->second = int(out_.args.params.size());
        out_.args.params.push_back(static_cast<int64_t>(x.scalar));
      }
      return ix_param(it->second);
    });
  }

  // Extent of axis `axis` of node `node`: a Param slot, or the constant when specialising.
  IndexExprPtr dim(int node, int axis) {
    int64_t v = g_.nodes[node].shape[axis];
    if (specialize_) return ix_const(v);
    auto [it, fresh] = params_.emplace(std::make_pair(node, axis), 0);
    if (fresh) {
      it->second = int(out_.args.params.size());
      out_.args.params.push_back(v);
    }
    return ix_param(it->second);
  }

  // Whether `node` is one of the group's extra roots: computed here, never read from memory.
  bool written_here(int node) const {
    return std::binary_search(group_.extra_roots.begin(), group_.extra_roots.end(), node);
  }

  KBuffer buffer_desc(int node) {
    KBuffer b;
    b.dtype = g_.nodes[node].dtype;
    for (size_t k = 0; k < g_.nodes[node].shape.size(); ++k) b.dims.push_back(dim(node, int(k)));
    return b;
  }

  int buffer_slot(int node) {
    auto [it, fresh] = buffers_.emplace(node, 0);
    if (fresh) {
      it->second = int(out_.ir.inputs.size());
      out_.ir.inputs.push_back(buffer_desc(node));
      out_.input_nodes.push_back(node);
    }
    return it->second;
  }

  int scalar_slot(double v) {
    out_.args.scalars.push_back(v);
    return int(out_.args.scalars.size()) - 1;
  }

  // Fresh loop variables over every axis of `node`.
  std::vector<IndexExprPtr> new_loops(int node, std::vector<KLoop>& loops) {
    std::vector<IndexExprPtr> idx;
    for (size_t k = 0; k < g_.nodes[node].shape.size(); ++k) {
      int var = next_var_++;
      loops.push_back({var, dim(node, int(k))});
      idx.push_back(ix_var(var));
    }
    return idx;
  }

  // The value of `node` at `idx`, as text. A keepdims reduction's reduced axes have extent 1,
  // so their index is 0 wherever it is read: the output loop's variable at the root and the
  // constant 0 through a broadcast name the same value (a log-sum-exp m + log(sum(exp(x - m)))
  // computed its row max twice, codegen/softmax_statistic.cc).
  std::string memo_key(int node, const std::vector<IndexExprPtr>& idx) const {
    const GNode& n = g_.nodes[size_t(node)];
    const bool keepdims_reduce = n.kind == OpKind::Reduce && n.keepdims;
    std::string s = std::to_string(node);
    for (size_t a = 0; a < idx.size(); ++a) {
      const bool reduced =
          keepdims_reduce && std::find(n.axes.begin(), n.axes.end(), int64_t(a)) != n.axes.end();
      s += "," + (reduced ? std::string("0") : ix_to_string(*idx[a]));
    }
    return s;
  }

  int emit(KBlock& blk, KStmt st) {
    st.id = next_value_++;
    blk.stmts.push_back(std::move(st));
    return blk.stmts.back().id;
  }

  // Value of graph node `node` at index `idx`, computed into `blk`.
  int value(int node, const std::vector<IndexExprPtr>& idx, KBlock& blk, bool is_root = false) {
    const GNode& n = g_.nodes[node];
    const bool from_memory = plan_.stored[node] && !is_root && !written_here(node);
    if (n.kind == OpKind::BroadcastTo && !from_memory) {
      std::vector<IndexExprPtr> in_idx;
      for (size_t k = 0; k < n.bcast.size(); ++k) {
        if (n.bcast[k] == BroadcastAxis::Keep)
          in_idx.push_back(idx[k]);
        else if (n.bcast[k] == BroadcastAxis::Expand)
          in_idx.push_back(ix_const(0));
      }
      return value(n.inputs[0], in_idx, blk);
    }
    std::string key = memo_key(node, idx);
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s)
      if (auto it = s->find(key); it != s->end()) return it->second;
    KStmt st;
    st.dtype = n.dtype;
    st.op = n.op;
    if (from_memory || n.kind == OpKind::Leaf) {
      st.kind = KOp::Load;
      st.buffer = buffer_slot(node);
      st.index = idx;
    } else {
      switch (n.kind) {
        case OpKind::Scalar:
          st.kind = KOp::Scalar;
          st.slot = scalar_slot(n.scalar);
          break;
        case OpKind::Iota:
          st.kind = KOp::Iota;
          st.index = {idx[n.axes[0]]};
          break;
        case OpKind::Unary:
        case OpKind::Binary:
        case OpKind::Where:
        case OpKind::Cast:
          st.kind = n.kind == OpKind::Unary    ? KOp::Unary
                    : n.kind == OpKind::Binary ? KOp::Binary
                    : n.kind == OpKind::Where  ? KOp::Where
                                               : KOp::Cast;
          for (int in : n.inputs) st.args.push_back(value(in, idx, blk));
          break;
        case OpKind::Reindex:
          return lower_reindex(node, idx, blk, key);
        case OpKind::Reduce:
          return lower_reduce(node, idx, blk, key);
        default:
          METAJIT_UNREACHABLE("lowering: unexpected inlined node " + describe_op(n));
      }
    }
    int id = emit(blk, std::move(st));
    scopes_.back()[key] = id;
    return id;
  }

  int lower_reindex(int node, const std::vector<IndexExprPtr>& idx, KBlock& blk,
                    const std::string& key) {
    const GNode& n = g_.nodes[node];
    int src = n.inputs[0];
    std::vector<IndexExprPtr> in_idx;
    IndexExprPtr cond = ix_const(1);
    for (size_t k = 0; k < n.indexes.size(); ++k) {
      in_idx.push_back(extra_reads(node, n.indexes[k], idx, cond));
      cond = conj(cond, in_range(in_idx.back(), dim(src, int(k))));
    }
    for (const auto& c : n.conditions) {
      IndexExprPtr holds = extra_reads(node, c, idx, cond);  // adds to cond: sequenced first
      cond = conj(cond, ix_unary(IxKind::Not, holds));
    }
    if (ix_is_const(cond, 1)) {
      int id = value(src, in_idx, blk);
      scopes_.back()[key] = id;
      return id;
    }
    KStmt st;
    st.kind = KOp::Guard;
    st.dtype = n.dtype;
    st.cond = cond;
    st.slot = scalar_slot(n.scalar);
    st.body = std::make_shared<KBlock>();
    scopes_.emplace_back();
    st.body->result = value(src, in_idx, *st.body);
    scopes_.pop_back();
    int id = emit(blk, std::move(st));
    scopes_.back()[key] = id;
    return id;
  }

  int lower_reduce(int node, const std::vector<IndexExprPtr>& idx, KBlock& blk,
                   const std::string& key) {
    const GNode& n = g_.nodes[node];
    int src = n.inputs[0];
    const size_t in_nd = g_.nodes[src].shape.size();
    KStmt st;
    st.kind = KOp::Reduce;
    st.dtype = n.dtype;
    st.op = n.op;
    std::vector<IndexExprPtr> in_idx;
    size_t out_axis = 0;
    for (size_t a = 0; a < in_nd; ++a) {
      bool reduced = std::find(n.axes.begin(), n.axes.end(), int64_t(a)) != n.axes.end();
      if (reduced) {
        int var = next_var_++;
        st.loops.push_back({var, dim(src, int(a))});
        in_idx.push_back(ix_var(var));
        if (n.keepdims) ++out_axis;
      } else {
        in_idx.push_back(idx[out_axis++]);
      }
    }
    st.body = std::make_shared<KBlock>();
    scopes_.emplace_back();
    st.body->result = value(src, in_idx, *st.body);
    scopes_.pop_back();
    int id = emit(blk, std::move(st));
    scopes_.back()[key] = id;
    return id;
  }

  const Graph& g_;
  const FusionPlan& plan_;
  const FusedGroup& group_;
  bool specialize_;
  LoweredKernel out_;
  std::map<std::pair<int, int>, int> params_;
  std::map<int, int> buffers_;
  std::vector<std::map<std::string, int>> scopes_;
  int next_var_ = 0;
  int next_value_ = 0;
};

}  // namespace

LoweredKernel lower_group(const Graph& g, const FusionPlan& plan, const FusedGroup& group,
                          bool specialize_shapes) {
  return Lowerer(g, plan, group, specialize_shapes).run();
}

}  // namespace metajit
