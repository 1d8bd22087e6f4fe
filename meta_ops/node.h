// Graph nodes behind Var: one node per meta-op application. A node is "realized" once its
// value has been computed: it then holds a buffer and drops its inputs (docs/design.md §1).
#pragma once
#include <metajit/ops.h>  // ReduceOp (Mean: reduce() only, lowered to Add)

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/buffer.h"
#include "base/dtype.h"
#include "meta_ops/index_expr.h"

namespace metajit {

enum class OpKind : uint8_t {
  Leaf,    // realized data (array(), rand(), or a node already evaluated)
  Scalar,  // a 0-d constant; its value is a kernel argument, never part of a key
  Iota,    // out[i] = i_axis (arange); axes = {axis}
  Unary,
  Binary,  // operands have equal shapes (broadcasting inserts broadcast_to)
  Where,   // inputs: cond (Bool), a, b; equal shapes
  Cast,
  BroadcastTo,    // bcast: one entry per output axis
  Reindex,        // indexes/conditions over the output indices; scalar = overflow value
  ReindexReduce,  // indexes/conditions over the input (y) indices; op = ReduceOp
  Reduce,         // axes = sorted reduced axes of the input; op = ReduceOp (never Mean)
  // A collective over the ranks of an MPI world (include/metajit/distributed.h): never part of
  // a kernel. Its input is stored by a kernel (or is a leaf), and the runtime runs the
  // collective on that buffer between kernels (runtime/executor.h HostStep); collective says
  // which, op is all_reduce's ReduceOp, root broadcast's root.
  Collective,
};

// The collectives (OpKind::Collective); Barrier only in the distributed layer's checks.
enum class CollectiveKind : uint8_t { AllReduce, Broadcast, AllGather, Barrier };
const char* collective_kind_name(CollectiveKind k);

enum class UnaryOp : uint8_t {
  Neg,
  Abs,
  Exp,
  Log,
  Sqrt,
  Sin,
  Cos,
  Tanh,
  Sigmoid,
  Relu,
  Floor,
  LogicalNot,
  // Appended (kernel specs name ops by name; graph code keeps the numbers above).
  Erf,
  Log1p,
  Expm1,
  Tan,
  Atan,
  Asin,
  Acos,
  BitwiseNot,  // integers; on Bool it is logical not
};
// exp, log, sqrt, sin, cos, tanh, sigmoid, erf, log1p, expm1, tan, atan, asin, acos: a library
// call's work per element, which the fusion cost model (codegen/fusion_cost.cc) prices at 4
// simple ops and packing computes in full vector loops (codegen/cpp_packing.cc).
inline bool is_transcendental(UnaryOp op) {
  return (op >= UnaryOp::Exp && op <= UnaryOp::Sigmoid) ||
         (op >= UnaryOp::Erf && op <= UnaryOp::Acos);
}
// The unary ops that have integer forms in generated code (the rest compute in a float type).
inline bool has_integer_form(UnaryOp op) {
  return op == UnaryOp::Neg || op == UnaryOp::Abs || op == UnaryOp::Relu || op == UnaryOp::Floor ||
         op == UnaryOp::LogicalNot || op == UnaryOp::BitwiseNot;
}
enum class BinaryOp : uint8_t {
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Maximum,
  Minimum,
  Eq,
  Ne,
  Lt,
  Le,
  Gt,
  Ge,
  LogicalAnd,
  LogicalOr,
  // Appended; integer (and, or, xor: Bool too) operands only.
  BitwiseAnd,
  BitwiseOr,
  BitwiseXor,
  ShiftLeft,   // a shift by a negative amount or by the width or more gives 0
  ShiftRight,  // arithmetic; such a shift gives -1 for negative a, else 0 (numpy's rule)
};
// BitwiseAnd..ShiftRight: defined on integers only (floats are a TypeError in ops.cc).
inline bool is_bitwise(BinaryOp op) {
  return op >= BinaryOp::BitwiseAnd;
}
// How each output axis of broadcast_to reads its input.
enum class BroadcastAxis : uint8_t {
  Keep,    // input axis of the same extent: index passes through
  Expand,  // input axis of extent 1: index 0
  New,     // axis the input does not have
};

const char* op_kind_name(OpKind k);
// Throws ShapeError naming `op` for a negative extent or a shape whose size in bytes overflows
// int64; new_node calls it for every node.
void check_shape_fits(const char* op, DType dtype,
                      const Shape& shape);  // builds no string unless it throws
const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);
const char* reduce_op_name(ReduceOp op);
bool is_comparison(BinaryOp op);  // Eq..Ge: result Bool

// Unary, Binary, Where and Cast: one output element from the same element of each input.
inline bool is_elementwise(OpKind k) {
  return k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Where || k == OpKind::Cast;
}

// What a node computes, apart from its inputs. The lazy graph's Node and the captured graph's
// GNode (codegen/graph.h) both carry it, so capturing copies it in one assignment.
struct OpAttrs {
  OpKind kind = OpKind::Leaf;
  DType dtype = DType::Float32;
  Shape shape;
  int op = 0;                            // UnaryOp / BinaryOp / ReduceOp, by kind
  double scalar = 0;                     // Scalar: value; Reindex: overflow value
  std::vector<int64_t> axes;             // Reduce: reduced input axes (sorted); Iota: {axis}
  bool keepdims = false;                 // Reduce
  std::vector<BroadcastAxis> bcast;      // BroadcastTo
  std::vector<IndexExprPtr> indexes;     // Reindex / ReindexReduce
  std::vector<IndexExprPtr> conditions;  // Reindex / ReindexReduce overflow conditions
  // Built by grad() (autograd/): drawn as backward in to_dot; no effect on code or keys.
  bool backward = false;
  // fusion_barrier(): the value is stored, never fused into its consumers (the planner's rule;
  // constant folding moves the mark onto the identity cast's input).
  bool fusion_barrier = false;
  // Collective: which collective, broadcast's root and the rank that issued it (what the
  // gradients of broadcast and all_gather keep; op: all_reduce's ReduceOp).
  CollectiveKind collective = CollectiveKind::AllReduce;
  int32_t root = 0;
  int32_t rank = 0;

  int64_t numel() const { return numel_of(shape); }
};

struct Node : OpAttrs {
  std::vector<NodePtr> inputs;
  BufferPtr data;  // Leaf: the value (row-major) on data->device()
  // Leaf: a copy on the other device, made on first use there (runtime/residency.h); guarded
  // by graph_mutex().
  BufferPtr mirror;
  uint64_t id = 0;  // creation order, unique per process
  // stop_grad(): an identity Cast whose gradient is zero (autograd/).
  bool stops_gradient = false;
  // A Leaf that was computed (realize()) rather than created from data: grad() cannot look
  // behind it and says so.
  bool evaluated = false;
  // A jit trace's placeholder for a (non-static) argument: its value may not be read while the
  // function is traced (api/jit_function.cc). -1 for every other node.
  int32_t jit_argument = -1;
  // Liveness (README "Lazy evaluation"): how many Var cells name this node now (Var's Cell keeps
  // it, meta_ops/var.cc), and whether assign() moved a variable off it while it was pending (an
  // older value of a variable: the next value is usually built from it). An evaluation that
  // computes such a node without being asked for it stores it too (api/kept_values.cc).
  std::atomic<int32_t> holders{0};
  bool assigned_away = false;
  // An evaluation computed this value inside a kernel without storing it. If a later one needs
  // it again while something still reads it, that one stores it (api/kept_values.cc).
  bool computed_before = false;
  // A value an evaluation stored without being asked for it keeps what it was for grad(): a
  // pending node with its op and inputs, which autograd differentiates through as if the value
  // were still lazy. Dropped when a variable is assigned away from the value, so the history of
  // a variable's older values is never kept (api/kept_values.cc).
  NodePtr history;
  // Counted among the realized nodes of graph_counts() (set when the node becomes a Leaf).
  bool counted_realized = false;
  // Marks a node visited by one walk over the pending graph (api/kept_values.cc), under
  // graph_mutex(): cheaper than a set on eval's fast path.
  uint64_t walk_stamp = 0;
  uint32_t walk_index = 0;  // its place in that walk's order

  bool realized() const { return kind == OpKind::Leaf; }

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Frees long input chains iteratively: a recursive teardown would overflow the stack.
  ~Node();
};

// Creates a node with a fresh id.
NodePtr new_node(OpKind kind, DType dtype, Shape shape, std::vector<NodePtr> inputs = {});
// While alive on a thread, every node it creates is marked `backward` (grad() builds under one).
class BackwardScope {
 public:
  BackwardScope();
  ~BackwardScope();
  BackwardScope(const BackwardScope&) = delete;
  BackwardScope& operator=(const BackwardScope&) = delete;

 private:
  bool saved_;
};

// How many jit traces are in progress on this thread (api/jit_function.cc counts them): what
// happens while tracing runs once, not on replay, so assign() refuses and reading an argument's
// value is an error.
int& jit_trace_depth();

// A Var assigned while a jit function is traced: part of the function's state, which every call
// reads and assigns anew (api/jit_function.cc). `before`: the node it named when first assigned.
struct TracedAssign {
  Var target;
  NodePtr before;
};
// Where Var::assign records during the current trace on this thread (null outside one).
std::vector<TracedAssign>*& traced_assigns();

// Turns `n` into a Leaf holding `data` and drops its inputs (after evaluation). Called with
// graph_mutex() held; `kind` is published last (release), see realized_acquire().
void realize(Node& n, BufferPtr data);

// For readers that do not hold graph_mutex(): true once `n` is realized, and then `n.data` is
// visible to the caller (acquire; pairs with realize()). False means "lazy, or being
// realized": evaluate it (eval() locks and looks again).
inline bool realized_acquire(const Node& n) {
  return std::atomic_ref<OpKind>(const_cast<OpKind&>(n.kind)).load(std::memory_order_acquire) ==
         OpKind::Leaf;
}

// Serialises evaluation against graph mutation (realize) from several threads.
std::recursive_mutex& graph_mutex();

// What the program's lazy graph holds now (Jittor's liveness_info; stats() reports it): Var
// cells alive (every copy of a Var shares one), nodes still to compute, and realized nodes
// (leaves holding a value, whether created from data or computed).
struct GraphCounts {
  uint64_t live_vars = 0, pending_nodes = 0, realized_nodes = 0;
};
GraphCounts graph_counts();
// Var's cells report their birth and death here (meta_ops/var.cc).
void count_var_cell(int delta);

}  // namespace metajit
