#include "meta_ops/node.h"

#include <metajit/error.h>

#include <algorithm>

namespace metajit {

const char* op_kind_name(OpKind k) {
  switch (k) {
    case OpKind::Leaf:
      return "leaf";
    case OpKind::Scalar:
      return "scalar";
    case OpKind::Iota:
      return "iota";
    case OpKind::Unary:
      return "unary";
    case OpKind::Binary:
      return "binary";
    case OpKind::Where:
      return "where";
    case OpKind::Cast:
      return "cast";
    case OpKind::BroadcastTo:
      return "broadcast_to";
    case OpKind::Reindex:
      return "reindex";
    case OpKind::ReindexReduce:
      return "reindex_reduce";
    case OpKind::Reduce:
      return "reduce";
    case OpKind::Collective:
      return "collective";
  }
  return "?";
}

const char* collective_kind_name(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::AllReduce:
      return "all_reduce";
    case CollectiveKind::Broadcast:
      return "broadcast";
    case CollectiveKind::AllGather:
      return "all_gather";
    case CollectiveKind::Barrier:
      return "barrier";
  }
  return "?";
}

const char* unary_op_name(UnaryOp op) {
  static const char* names[] = {"neg",   "abs",         "exp",  "log",     "sqrt",
                                "sin",   "cos",         "tanh", "sigmoid", "relu",
                                "floor", "logical_not", "erf",  "log1p",   "expm1",
                                "tan",   "atan",        "asin", "acos",    "bitwise_not"};
  return names[int(op)];
}

const char* binary_op_name(BinaryOp op) {
  static const char* names[] = {"add",        "sub",         "mul",        "div",
                                "pow",        "maximum",     "minimum",    "eq",
                                "ne",         "lt",          "le",         "gt",
                                "ge",         "logical_and", "logical_or", "bitwise_and",
                                "bitwise_or", "bitwise_xor", "shift_left", "shift_right"};
  return names[int(op)];
}

const char* reduce_op_name(ReduceOp op) {
  static const char* names[] = {"add", "mul", "max", "min", "mean"};
  return names[int(op)];
}

bool is_comparison(BinaryOp op) {
  return op >= BinaryOp::Eq && op <= BinaryOp::Ge;
}

namespace {
std::atomic<int64_t> nodes_alive{0}, realized_alive{0}, cells_alive{0};

void count_realized(Node& n) {
  if (n.counted_realized) return;
  n.counted_realized = true;
  realized_alive.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

GraphCounts graph_counts() {
  GraphCounts c;
  const int64_t all = nodes_alive.load(std::memory_order_relaxed);
  const int64_t leaves = realized_alive.load(std::memory_order_relaxed);
  c.live_vars = uint64_t(std::max<int64_t>(0, cells_alive.load(std::memory_order_relaxed)));
  c.realized_nodes = uint64_t(std::max<int64_t>(0, leaves));
  c.pending_nodes = uint64_t(std::max<int64_t>(0, all - leaves));
  return c;
}

void count_var_cell(int delta) {
  cells_alive.fetch_add(delta, std::memory_order_relaxed);
}

Node::~Node() {
  nodes_alive.fetch_sub(1, std::memory_order_relaxed);
  if (counted_realized) realized_alive.fetch_sub(1, std::memory_order_relaxed);
  std::vector<NodePtr> pending = std::move(inputs);
  if (history) pending.push_back(std::move(history));
  while (!pending.empty()) {
    NodePtr n = std::move(pending.back());
    pending.pop_back();
    // Only the last owner takes the node's inputs over; then `n` dies with no children.
    if (n && n.use_count() == 1) {
      for (NodePtr& in : n->inputs) pending.push_back(std::move(in));
      if (n->history) pending.push_back(std::move(n->history));
    }
  }
}

namespace {
thread_local bool building_backward = false;
}  // namespace

BackwardScope::BackwardScope() : saved_(building_backward) {
  building_backward = true;
}
BackwardScope::~BackwardScope() {
  building_backward = saved_;
}

// Every node's shape passes here: a negative extent, or an element count whose size in bytes
// does not fit in int64 (kernels index with i64), is a ShapeError naming the op and the shape
// before anything is built (issue 26: such shapes reported numel 0 or a negative count, and a
// sum over one crashed or never returned). PyTorch: "storage size overflowed".
void check_shape_fits(const char* op, DType dtype, const Shape& shape) {
  for (int64_t d : shape)
    if (d < 0)
      throw ShapeError(std::string(op) + ": negative dimension in shape " + shape_str(shape) +
                       "; dimensions must be >= 0");
  if (std::find(shape.begin(), shape.end(), int64_t(0)) != shape.end()) return;  // no elements
  const uint64_t limit = uint64_t(INT64_MAX);
  uint64_t bytes = dtype_size(dtype);
  for (int64_t d : shape) {
    if (bytes > limit / uint64_t(d))
      throw ShapeError(std::string(op) + ": shape " + shape_str(shape) + " of " +
                       dtype_name(dtype) +
                       " has more elements than fit in memory (its size in bytes overflows "
                       "int64); a shape holds at most " +
                       std::to_string(INT64_MAX / int64_t(dtype_size(dtype))) + " elements");
    bytes *= uint64_t(d);
  }
}

NodePtr new_node(OpKind kind, DType dtype, Shape shape, std::vector<NodePtr> inputs) {
  static std::atomic<uint64_t> next_id{1};
  check_shape_fits(op_kind_name(kind), dtype, shape);
  auto n = std::make_shared<Node>();
  n->backward = building_backward;
  n->kind = kind;
  n->dtype = dtype;
  n->shape = std::move(shape);
  n->inputs = std::move(inputs);
  n->id = next_id.fetch_add(1, std::memory_order_relaxed);
  nodes_alive.fetch_add(1, std::memory_order_relaxed);
  if (kind == OpKind::Leaf) count_realized(*n);
  return n;
}

void realize(Node& n, BufferPtr data) {
  n.data = std::move(data);
  n.evaluated = true;
  n.mirror.reset();
  n.inputs.clear();
  n.indexes.clear();
  n.conditions.clear();
  n.bcast.clear();
  n.axes.clear();
  count_realized(n);
  // Last, so that a thread reading `kind` without the lock (realized_acquire) sees the data.
  std::atomic_ref<OpKind>(n.kind).store(OpKind::Leaf, std::memory_order_release);
}

int& jit_trace_depth() {
  thread_local int depth = 0;
  return depth;
}

std::vector<TracedAssign>*& traced_assigns() {
  thread_local std::vector<TracedAssign>* record = nullptr;
  return record;
}

std::recursive_mutex& graph_mutex() {
  static std::recursive_mutex mu;
  return mu;
}

}  // namespace metajit
