// jit(fn): the per-signature cache of traces and the replay path (see jit_function.h).
//
// Locking. Each traced signature becomes an immutable JitPlan, pushed onto the front of a
// singly linked list whose head is an atomic pointer; plans are never changed or freed while
// the jit function lives. A call therefore finds its plan without a lock: it compares the
// arguments' dtypes and shapes with each plan's flat signature. Only tracing takes the
// function's mutex (one trace at a time, and a thread that lost the race finds the winner's
// plan), and, like eval(), graph_mutex() around planning and obtaining kernels. Replay takes
// no lock of its own: it reads the arguments' buffers (realized_acquire; a lazy argument goes
// through eval(), which locks), and run_program() gives every call its own buffers. The shared
// state a replay touches is listed at run_program() (runtime/executor.h): the allocator, the
// counters, and on CUDA a launch mutex, so concurrent CUDA replays serialise their launches.
#include <cxxabi.h>
#include <metajit/error.h>
#include <metajit/eval.h>
#include <metajit/jit.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "base/config.h"
#include "base/log.h"
#include "codegen/pipeline.h"
#include "runtime/executor.h"
#include "runtime/kernel_library.h"
#include "runtime/residency.h"
#include "runtime/small_buffer.h"

namespace metajit::detail {
namespace {

// Depth of traces in progress on this thread: a jit function called while fn is traced is
// inlined into that trace.
thread_local int tracing_depth = 0;

struct TracingScope {
  TracingScope() { ++tracing_depth; }
  ~TracingScope() { --tracing_depth; }
  TracingScope(const TracingScope&) = delete;
  TracingScope& operator=(const TracingScope&) = delete;
};

// Scratch sizes that keep a replay of a small function free of mallocs but its outputs'.
constexpr size_t kInlineArgs = 8;
constexpr size_t kInlineLeaves = 16;

std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  return s;
}

}  // namespace

// One traced signature: the plan, the kernels and how the arguments map onto it.
struct JitPlan {
  std::vector<int64_t> signature;  // per argument: dtype, ndim, then the extents
  PipelinePlan pipeline;           // graph, fusion plan, lowered kernels with their KernelArgs
  std::vector<KernelHandle> handles;
  ExecProgram program;
  std::vector<int32_t> leaf_arg;  // per graph leaf: the argument it is, -1 for a captured value
  std::vector<void*> leaf_data;   // per graph leaf: a captured value's data (arguments: null)
  struct Output {
    int32_t arg = -1;  // fn returned this argument unchanged
    NodePtr constant;  // fn returned a realized Var it captured (or created) unchanged
    DType dtype = DType::Float32;
    Shape shape;
  };
  std::vector<Output> outputs;
  const JitPlan* next = nullptr;  // the previously traced signature
};

class JitCore {
 public:
  JitCore(JitTraceFn trace, size_t num_args, std::string name, const char* type_name)
      : trace_fn(std::move(trace)), num_args(num_args) {
    static std::atomic<uint64_t> next_number{1};
    const uint64_t number = next_number.fetch_add(1, std::memory_order_relaxed);
    if (!name.empty()) {
      this->name = std::move(name);
      label = "jit function '" + this->name + "'";
    } else {
      this->name = "#" + std::to_string(number);
      label = "jit function " + this->name;
      if (type_name) label += " (" + demangle(type_name) + ")";
    }
  }

  JitTraceFn trace_fn;
  const size_t num_args;
  std::string name;   // "step", or "#3"
  std::string label;  // "jit function 'step'", or "jit function #3 (main::{lambda(...)#1})"

  std::atomic<const JitPlan*> head{nullptr};  // newest plan; read without a lock
  std::atomic<uint64_t> traces{0};

  std::mutex mu;  // held while tracing; guards everything below
  std::vector<std::unique_ptr<JitPlan>> plans;
  std::vector<int64_t> last_signature;
  bool warned = false;
};

namespace {

bool matches(const JitPlan& p, const Var* const* args, size_t n, Device dev) {
  if (p.program.device != dev) return false;
  const int64_t* s = p.signature.data();
  for (size_t i = 0; i < n; ++i) {
    const Node& node = *args[i]->node();
    const size_t nd = node.shape.size();
    if (s[0] != int64_t(node.dtype) || s[1] != int64_t(nd)) return false;
    s += 2;
    for (size_t d = 0; d < nd; ++d)
      if (s[d] != node.shape[d]) return false;
    s += nd;
  }
  return true;
}

const JitPlan* find_plan(const JitCore& c, const Var* const* args) {
  const Device dev = device();
  for (const JitPlan* p = c.head.load(std::memory_order_acquire); p; p = p->next)
    if (matches(*p, args, c.num_args, dev)) return p;
  return nullptr;
}

void check_defined(const JitCore& c, const Var* const* args) {
  for (size_t i = 0; i < c.num_args; ++i)
    if (!args[i]->defined())
      throw Error(c.label + ": argument " + std::to_string(i) +
                  " is undefined (a default-constructed Var); every argument must hold a value");
}

void check_outputs(const JitCore& c, const std::vector<Var>& outs) {
  for (size_t k = 0; k < outs.size(); ++k)
    if (!outs[k].defined())
      throw Error(c.label + " returned an undefined (default-constructed) Var as output " +
                  std::to_string(k) + "; fn must return Vars that hold values");
}

// Realizes the arguments that are still lazy, together (one plan).
void evaluate_lazy_args(const JitCore& c, const Var* const* args) {
  bool any = false;
  for (size_t i = 0; i < c.num_args && !any; ++i) any = !realized_acquire(*args[i]->node());
  if (!any) return;
  std::vector<Var> lazy;
  for (size_t i = 0; i < c.num_args; ++i)
    if (!realized_acquire(*args[i]->node())) lazy.push_back(*args[i]);
  eval(lazy);
}

std::vector<int64_t> signature_of(const Var* const* args, size_t n) {
  std::vector<int64_t> s;
  for (size_t i = 0; i < n; ++i) {
    const Node& node = *args[i]->node();
    s.push_back(int64_t(node.dtype));
    s.push_back(int64_t(node.shape.size()));
    s.insert(s.end(), node.shape.begin(), node.shape.end());
  }
  return s;
}

// "argument 0: shape [4, 3] -> [5, 3]", "argument 1: dtype float32 -> float64", joined by "and".
std::string describe_change(const std::vector<int64_t>& before, const std::vector<int64_t>& after,
                            size_t n) {
  std::string out;
  size_t a = 0, b = 0;
  for (size_t i = 0; i < n; ++i) {
    const DType da = DType(before[a]), db = DType(after[b]);
    const Shape sa(before.begin() + long(a) + 2, before.begin() + long(a) + 2 + before[a + 1]);
    const Shape sb(after.begin() + long(b) + 2, after.begin() + long(b) + 2 + after[b + 1]);
    a += 2 + sa.size();
    b += 2 + sb.size();
    std::string what;
    if (da != db) what = std::string("dtype ") + dtype_name(da) + " -> " + dtype_name(db);
    if (sa != sb)
      what += (what.empty() ? "shape " : ", shape ") + shape_str(sa) + " -> " + shape_str(sb);
    if (!what.empty())
      out += (out.empty() ? "argument " : " and argument ") + std::to_string(i) + ": " + what;
  }
  return out.empty() ? "an unchanged signature" : out;
}

// Counts the trace of `sig` and warns (once per function) past METAJIT_RETRACE_WARN.
void note_trace(JitCore& c, const std::vector<int64_t>& sig) {
  const uint64_t count = c.traces.fetch_add(1, std::memory_order_relaxed) + 1;
  std::string change;
  if (count > 1) change = describe_change(c.last_signature, sig, c.num_args);
  c.last_signature = sig;
  const int limit = config().retrace_warn;
  if (limit <= 0 || count <= uint64_t(limit) || count < 2 || c.warned) return;
  c.warned = true;
  log_message(LogLevel::Warn,
              c.label + " was traced " + std::to_string(count) + " times (METAJIT_RETRACE_WARN=" +
                  std::to_string(limit) + "); the last retrace was caused by " + change +
                  ". Shapes that change every call retrace every call; pad or bucket them to a "
                  "few sizes, or raise METAJIT_RETRACE_WARN to silence this");
}

// Traces fn for the signature of `args` (realized) unless another thread just did.
const JitPlan& trace(JitCore& c, const Var* const* args) {
  std::lock_guard<std::mutex> lock(c.mu);
  if (const JitPlan* p = find_plan(c, args)) return *p;
  const Device dev = device();

  // Placeholders: fresh leaves (one per argument, even for the same Var passed twice) holding
  // the arguments' values, so that fn may read them while it is traced.
  std::vector<Var> placeholders;
  placeholders.reserve(c.num_args);
  for (size_t i = 0; i < c.num_args; ++i) {
    const Node& arg = *args[i]->node();
    NodePtr ph = new_node(OpKind::Leaf, arg.dtype, arg.shape);
    ph->data = arg.data;
    placeholders.emplace_back(std::move(ph));
  }
  std::vector<Var> outs;
  {
    TracingScope scope;
    outs = c.trace_fn(placeholders.data());
  }
  check_outputs(c, outs);

  auto plan = std::make_unique<JitPlan>();
  plan->signature = signature_of(args, c.num_args);
  {
    std::vector<NodePtr> nodes;
    for (const Var& v : outs) nodes.push_back(v.node());
    std::lock_guard<std::recursive_mutex> graph_lock(graph_mutex());
    plan->pipeline = build_pipeline(nodes);
    std::vector<const KernelIR*> irs;
    for (const LoweredKernel& k : plan->pipeline.kernels) irs.push_back(&k.ir);
    plan->handles = obtain_kernels(irs, dev);
  }
  Graph& g = plan->pipeline.graph;
  plan->leaf_arg.assign(g.leaves.size(), -1);
  plan->leaf_data.assign(g.leaves.size(), nullptr);
  for (size_t l = 0; l < g.leaves.size(); ++l) {
    for (size_t i = 0; i < c.num_args; ++i)
      if (g.leaves[l] == placeholders[i].node()) plan->leaf_arg[l] = int32_t(i);
    if (plan->leaf_arg[l] >= 0)
      g.leaves[l].reset();  // the plan must not keep the first call's arguments alive
    else
      plan->leaf_data[l] = buffer_on(*g.leaves[l], dev)->data();  // the node keeps a copy alive
  }
  plan->program =
      make_program(g, plan->pipeline.fusion, plan->pipeline.kernels, plan->handles, dev);
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const GNode& n = g.nodes[size_t(g.outputs[k])];
    JitPlan::Output o;
    o.dtype = n.dtype;
    o.shape = n.shape;
    if (n.kind == OpKind::Leaf) {
      o.arg = plan->leaf_arg[size_t(n.leaf)];
      if (o.arg < 0) o.constant = g.leaves[size_t(n.leaf)];
    }
    plan->outputs.push_back(std::move(o));
  }

  note_trace(c, plan->signature);
  plan->next = c.head.load(std::memory_order_relaxed);
  c.head.store(plan.get(), std::memory_order_release);
  c.plans.push_back(std::move(plan));
  return *c.plans.back();
}

// An argument's data on `dev`: its own buffer without a lock when it lives there, else its copy
// (made once, kept with the node, which the caller holds for the call).
void* arg_data(const Node& n, Device dev) {
  return n.data->device() == dev ? n.data->data() : buffer_on(n, dev)->data();
}

// Runs `p` for `args` (realized) and writes its outputs to out[0 .. p.outputs.size()).
void replay(const JitPlan& p, const Var* const* args, Var* out) {
  SmallBuffer<void*, kInlineLeaves> leaf_data(p.leaf_data.size());
  for (size_t l = 0; l < p.leaf_data.size(); ++l)
    leaf_data[l] = p.leaf_arg[l] >= 0 ? arg_data(*args[p.leaf_arg[l]]->node(), p.program.device)
                                      : p.leaf_data[l];
  SmallBuffer<BufferPtr, kInlineArgs> results(p.outputs.size());
  run_program(p.program, leaf_data.data(), results.data());
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const JitPlan::Output& o = p.outputs[k];
    if (o.arg >= 0) {
      out[k] = *args[o.arg];
    } else if (o.constant) {
      out[k] = Var(o.constant);
    } else {
      NodePtr n = new_node(OpKind::Leaf, o.dtype, o.shape);
      n->data = std::move(results[k]);
      n->evaluated = true;  // computed: grad() cannot see behind it
      out[k] = Var(std::move(n));
    }
  }
}

// Inside another jit function's trace: fn becomes part of that trace.
std::vector<Var> call_inline(JitCore& c, const Var* const* args) {
  std::vector<Var> in;
  in.reserve(c.num_args);
  for (size_t i = 0; i < c.num_args; ++i) in.push_back(*args[i]);
  std::vector<Var> outs = c.trace_fn(in.data());
  check_outputs(c, outs);
  return outs;
}

const JitPlan& plan_for(JitCore& c, const Var* const* args) {
  check_defined(c, args);
  evaluate_lazy_args(c, args);
  if (const JitPlan* p = find_plan(c, args)) return *p;
  return trace(c, args);
}

}  // namespace

std::shared_ptr<JitCore> make_jit_core(JitTraceFn trace, size_t num_args, std::string name,
                                       const char* type_name) {
  return std::make_shared<JitCore>(std::move(trace), num_args, std::move(name), type_name);
}

Var jit_call_one(JitCore& core, const Var* const* args) {
  if (tracing_depth > 0) {
    check_defined(core, args);
    return call_inline(core, args)[0];
  }
  const JitPlan& p = plan_for(core, args);
  Var out;
  replay(p, args, &out);
  return out;
}

std::vector<Var> jit_call_many(JitCore& core, const Var* const* args) {
  if (tracing_depth > 0) {
    check_defined(core, args);
    return call_inline(core, args);
  }
  const JitPlan& p = plan_for(core, args);
  std::vector<Var> out(p.outputs.size());
  replay(p, args, out.data());
  return out;
}

uint64_t jit_traces(const JitCore& core) {
  return core.traces.load(std::memory_order_relaxed);
}

const std::string& jit_name(const JitCore& core) {
  return core.name;
}

}  // namespace metajit::detail
