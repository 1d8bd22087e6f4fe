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

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_set>

#include "api/jit_trace.h"
#include "base/config.h"
#include "base/log.h"
#include "codegen/pipeline.h"
#include "meta_ops/random_stream.h"
#include "runtime/executor.h"
#include "runtime/kernel_library.h"
#include "runtime/residency.h"
#include "runtime/small_buffer.h"

namespace metajit::detail {
namespace {

// The function whose placeholders this thread's trace reads (the outermost trace: a jit
// function called while fn is traced is inlined into that trace, jit_trace_depth() > 1).
thread_local const JitCore* tracing_core = nullptr;

// The switches (TraceSwitch) this thread's trace read, with the values it saw.
using SwitchReads = std::vector<std::pair<std::shared_ptr<const TraceSwitch>, bool>>;
thread_local SwitchReads* traced_switches = nullptr;

// While fn is traced: this thread's trace, and its draws from the random stream read `random`'s
// placeholder instead of taking counters (meta_ops/random_stream.h).
struct TracingScope {
  TracingScope(const JitCore& c, RandomTrace& random, SwitchReads& switches,
               std::vector<TracedAssign>& assigns)
      : saved(tracing_core),
        saved_random(random_trace()),
        saved_switches(traced_switches),
        saved_assigns(traced_assigns()) {
    ++jit_trace_depth();
    tracing_core = &c;
    set_random_trace(&random);
    traced_switches = &switches;
    traced_assigns() = &assigns;
  }
  ~TracingScope() {
    --jit_trace_depth();
    tracing_core = saved;
    set_random_trace(saved_random);
    traced_switches = saved_switches;
    traced_assigns() = saved_assigns;
  }
  TracingScope(const TracingScope&) = delete;
  TracingScope& operator=(const TracingScope&) = delete;
  const JitCore* saved;
  RandomTrace* saved_random;
  SwitchReads* saved_switches;
  std::vector<TracedAssign>* saved_assigns;
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
  std::vector<Output> outputs;  // fn's results, then the state's new values
  size_t num_results = 0;       // how many of the outputs are fn's
  // Vars fn assigned (TracedAssign): each call reads their values and assigns the new ones.
  std::vector<Var> state;
  std::vector<int32_t> leaf_state;  // per graph leaf: the state Var it reads, or -1
  // Draws from the random stream (meta_ops/random_stream.h): the graph leaf of the trace's
  // source placeholder (-1: none) and how many counters each call takes from the stream.
  int32_t random_leaf = -1;
  uint64_t random_counters = 0;
  SwitchReads switches;           // replayed only while each switch still has the value fn saw
  const JitPlan* next = nullptr;  // the previously traced signature
};

class JitCore {
 public:
  JitCore(JitTraceFn trace, size_t num_args, std::string name, const char* type_name,
          std::string fn_identity, const std::vector<int>& static_args)
      : trace_fn(std::move(trace)), num_args(num_args), is_static(num_args, false) {
    for (int i : static_args) {
      if (i < 0 || size_t(i) >= num_args)
        throw Error("jit: static_args holds " + std::to_string(i) +
                    ", out of range for a function of " + std::to_string(num_args) +
                    " argument(s) (valid: 0.." + std::to_string(num_args == 0 ? 0 : num_args - 1) +
                    ")");
      is_static[size_t(i)] = true;
      any_static = true;
    }
    static std::atomic<uint64_t> next_number{1};
    number = next_number.fetch_add(1, std::memory_order_relaxed);
    identity = (name.empty() ? "type " : "name " + name + " type ") + fn_identity;
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
  std::vector<bool> is_static;  // per argument: JitOptions::static_args
  bool any_static = false;
  uint64_t number = 0;
  std::string identity;  // who counts as "the same function" for the compiled-again warning
  // Names arguments the user did not pass (a train step's parameters); "" for the user's own.
  std::function<std::string(size_t)> describe_argument;
  // Per argument, what errors call it when the default "argument i" is not its name: a flat
  // argument of a function with list parameters is "argument 1[3]" (set_argument_labels).
  std::vector<std::string> labels;
  std::string name;   // "step", or "#3"
  std::string label;  // "jit function 'step'", or "jit function #3 (main::{lambda(...)#1})"

  std::atomic<const JitPlan*> head{nullptr};  // newest plan; read without a lock
  std::atomic<uint64_t> traces{0};

  std::mutex mu;  // held while tracing; guards everything below
  std::vector<std::unique_ptr<JitPlan>> plans;
  std::vector<int64_t> last_signature;
  bool warned = false;
  bool warned_recreated = false;
};

namespace {

std::string argument_label(const JitCore& c, size_t i) {
  return c.labels.empty() ? "argument " + std::to_string(i) : c.labels[i];
}

// A static argument's value, as it is kept in a signature: its byte count, then its bytes in
// int64 words (zero-padded).
void append_value(const Node& n, std::vector<int64_t>& s) {
  const size_t bytes = size_t(n.numel()) * dtype_size(n.dtype);
  s.push_back(int64_t(bytes));
  const size_t at = s.size();
  s.resize(at + (bytes + 7) / 8, 0);
  if (bytes) std::memcpy(s.data() + at, buffer_on(n, Device::CPU)->data(), bytes);
}

bool matches(const JitCore& c, const JitPlan& p, const Var* const* args, Device dev) {
  if (p.program.device != dev) return false;
  for (const auto& [sw, value] : p.switches)
    if (sw->peek() != value) return false;
  const int64_t* s = p.signature.data();
  std::vector<int64_t> value;
  for (size_t i = 0; i < c.num_args; ++i) {
    const Node& node = *args[i]->node();
    const size_t nd = node.shape.size();
    if (s[0] != int64_t(node.dtype) || s[1] != int64_t(nd)) return false;
    s += 2;
    for (size_t d = 0; d < nd; ++d)
      if (s[d] != node.shape[d]) return false;
    s += nd;
    if (c.is_static[i]) {
      value.clear();
      append_value(node, value);
      if (!std::equal(value.begin(), value.end(), s)) return false;
      s += value.size();
    }
  }
  return true;
}

const JitPlan* find_plan(const JitCore& c, const Var* const* args) {
  const Device dev = device();
  for (const JitPlan* p = c.head.load(std::memory_order_acquire); p; p = p->next)
    if (matches(c, *p, args, dev)) return p;
  return nullptr;
}

void check_defined(const JitCore& c, const Var* const* args) {
  for (size_t i = 0; i < c.num_args; ++i)
    if (!args[i]->defined())
      throw Error(c.label + ": " + argument_label(c, i) +
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

std::vector<int64_t> signature_of(const JitCore& c, const Var* const* args) {
  std::vector<int64_t> s;
  for (size_t i = 0; i < c.num_args; ++i) {
    const Node& node = *args[i]->node();
    s.push_back(int64_t(node.dtype));
    s.push_back(int64_t(node.shape.size()));
    s.insert(s.end(), node.shape.begin(), node.shape.end());
    if (c.is_static[i]) append_value(node, s);
  }
  return s;
}

// "argument 0: shape [4, 3] -> [5, 3]", "argument 1: dtype float32 -> float64", "argument 2:
// value" (a static argument), joined by "and".
std::string describe_change(const JitCore& c, const std::vector<int64_t>& before,
                            const std::vector<int64_t>& after) {
  std::string out;
  size_t a = 0, b = 0;
  for (size_t i = 0; i < c.num_args; ++i) {
    const DType da = DType(before[a]), db = DType(after[b]);
    const Shape sa(before.begin() + long(a) + 2, before.begin() + long(a) + 2 + before[a + 1]);
    const Shape sb(after.begin() + long(b) + 2, after.begin() + long(b) + 2 + after[b + 1]);
    a += 2 + sa.size();
    b += 2 + sb.size();
    bool value_changed = false;
    if (c.is_static[i]) {
      const size_t wa = (size_t(before[a]) + 7) / 8 + 1, wb = (size_t(after[b]) + 7) / 8 + 1;
      value_changed = !std::equal(before.begin() + long(a), before.begin() + long(a + wa),
                                  after.begin() + long(b), after.begin() + long(b + wb));
      a += wa;
      b += wb;
    }
    std::string what;
    if (da != db) what = std::string("dtype ") + dtype_name(da) + " -> " + dtype_name(db);
    if (sa != sb)
      what += (what.empty() ? "shape " : ", shape ") + shape_str(sa) + " -> " + shape_str(sb);
    if (value_changed && what.empty()) what = "a new value (a static argument)";
    if (!what.empty()) out += (out.empty() ? "" : " and ") + argument_label(c, i) + ": " + what;
  }
  return out.empty() ? "an unchanged signature" : out;
}

// Counts the trace of `sig` and warns (once per function) past METAJIT_RETRACE_WARN.
void note_trace(JitCore& c, const std::vector<int64_t>& sig) {
  const uint64_t count = c.traces.fetch_add(1, std::memory_order_relaxed) + 1;
  std::string change;
  if (count > 1) change = describe_change(c, c.last_signature, sig);
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

// "float32[64, 64], int32[64]": the dtypes and shapes of a signature.
std::string describe_signature(const JitCore& c, const std::vector<int64_t>& sig) {
  std::string out;
  size_t a = 0;
  for (size_t i = 0; i < c.num_args; ++i) {
    const Shape sh(sig.begin() + long(a) + 2, sig.begin() + long(a) + 2 + sig[a + 1]);
    out += (i ? ", " : "") + std::string(dtype_name(DType(sig[a]))) + shape_str(sh);
    a += 2 + sh.size();
    if (c.is_static[i]) {
      out += " (static)";
      a += (size_t(sig[a]) + 7) / 8 + 1;
    }
  }
  return out;
}

// Every signature traced in this process, per function identity, with the jit object that traced
// it first: a new object tracing one of them again is the "compiled again" mistake (a jit
// function re-created inside a loop), which costs a trace and a plan per object. One warning per
// function: in a loop, the first re-creation says it all.
void note_recreated(JitCore& c, const std::vector<int64_t>& sig) {
  struct Traced {
    std::map<std::vector<int64_t>, uint64_t> first_object;  // signature -> JitCore::number
    bool warned = false;
  };
  static std::mutex mu;
  static auto* traced = new std::map<std::string, Traced>;
  {
    std::lock_guard<std::mutex> lock(mu);
    Traced& t = (*traced)[c.identity];
    const uint64_t first = t.first_object.emplace(sig, c.number).first->second;
    if (first == c.number || t.warned) return;
    t.warned = true;
  }
  std::string what = describe_signature(c, sig);
  if (c.num_args > 4) {  // a train step's list of parameters says nothing more
    size_t cut = 0;
    for (int commas = 0; commas < 4 && cut != std::string::npos; ++commas)
      cut = what.find("], ", cut == 0 ? 0 : cut + 1);
    if (cut != std::string::npos)
      what = std::to_string(c.num_args) + " arguments: " + what.substr(0, cut + 1) + ", ...";
  }
  log_message(LogLevel::Warn,
              c.label + " was traced again only because a new jit object was created: an " +
                  "earlier jit function of the same " +
                  (c.identity.rfind("name ", 0) == 0 ? "name and type" : "type") +
                  " already traced this signature (" + what +
                  "). Every new jit object traces and plans again; create the jit function "
                  "once, outside the loop, and reuse it (this warning is given once per "
                  "function)");
}

// After a trace: the Vars fn assigned (TracedAssign) name their values from before it again,
// computed (the plan's leaves read them), and the first call assigns them as every call does.
void restore_state(const std::vector<TracedAssign>& assigns) {
  for (auto a = assigns.rbegin(); a != assigns.rend(); ++a) {
    rebind_var(a->target, a->before);
    if (!realized_acquire(*a->before)) eval({a->target});
  }
}

// Traces fn for the signature of `args` (realized) unless another thread just did.
// Placeholders: fresh leaves (one per argument, even for the same Var passed twice) holding
// the arguments' values, so that fn may read them while it is traced.
std::vector<Var> placeholders_of(const JitCore& c, const Var* const* args) {
  std::vector<Var> placeholders;
  placeholders.reserve(c.num_args);
  for (size_t i = 0; i < c.num_args; ++i) {
    const Node& arg = *args[i]->node();
    NodePtr ph = new_node(OpKind::Leaf, arg.dtype, arg.shape);
    ph->data = arg.data;
    if (!c.is_static[i]) ph->jit_argument = int32_t(i);  // its value may not be read
    placeholders.emplace_back(std::move(ph));
  }
  return placeholders;
}

// What each of the plan's graph leaves is: argument i, state k, the random source, or a
// constant whose data the plan keeps. Arguments, state and the source are dropped from the
// graph (each call supplies them; the plan must not keep the first call's alive).
void classify_leaves(const JitCore& c, const std::vector<Var>& placeholders,
                     const std::vector<TracedAssign>& assigns, const RandomTrace& random,
                     Device dev, JitPlan& plan) {
  Graph& g = plan.pipeline.graph;
  plan.leaf_arg.assign(g.leaves.size(), -1);
  plan.leaf_data.assign(g.leaves.size(), nullptr);
  plan.leaf_state.assign(g.leaves.size(), -1);
  for (size_t l = 0; l < g.leaves.size(); ++l) {
    for (size_t i = 0; i < c.num_args; ++i)
      if (g.leaves[l] == placeholders[i].node()) plan.leaf_arg[l] = int32_t(i);
    for (size_t k = 0; k < assigns.size(); ++k)
      if (g.leaves[l] == assigns[k].before) plan.leaf_state[l] = int32_t(k);
    if (plan.leaf_state[l] >= 0) {
      g.leaves[l].reset();  // each call reads the state's current value
    } else if (g.leaves[l] == random.source.node()) {
      plan.random_leaf = int32_t(l);
      plan.random_counters = random.used;
      g.leaves[l].reset();
    } else if (plan.leaf_arg[l] >= 0)
      g.leaves[l].reset();  // the plan must not keep the first call's arguments alive
    else
      plan.leaf_data[l] = buffer_on(*g.leaves[l], dev)->data();  // the node keeps a copy alive
  }
}

// The plan's results: dtype and shape, and for one that is a leaf, the argument it returns or
// the constant.
void describe_outputs(JitPlan& plan) {
  const Graph& g = plan.pipeline.graph;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const GNode& n = g.nodes[size_t(g.outputs[k])];
    JitPlan::Output o;
    o.dtype = n.dtype;
    o.shape = n.shape;
    if (n.kind == OpKind::Leaf) {
      o.arg = plan.leaf_arg[size_t(n.leaf)];
      if (o.arg < 0) o.constant = g.leaves[size_t(n.leaf)];
    }
    plan.outputs.push_back(std::move(o));
  }
}

const JitPlan& trace(JitCore& c, const Var* const* args) {
  std::lock_guard<std::mutex> lock(c.mu);
  if (const JitPlan* p = find_plan(c, args)) return *p;
  const Device dev = device();
  std::vector<Var> placeholders = placeholders_of(c, args);
  // The random stream's source, as a placeholder the replays fill with counters taken per call.
  RandomTrace random;
  random.source = array(std::vector<int64_t>(4, 0), {4});
  SwitchReads switches;
  std::vector<TracedAssign> assigns;
  std::vector<Var> outs;
  try {
    TracingScope scope(c, random, switches, assigns);
    outs = c.trace_fn(placeholders.data());
  } catch (...) {
    restore_state(assigns);
    throw;
  }
  auto plan = std::make_unique<JitPlan>();
  plan->num_results = outs.size();
  for (const TracedAssign& a : assigns) {
    outs.emplace_back(a.target.node());  // the value assigned last
    plan->state.push_back(a.target);
  }
  restore_state(assigns);
  check_outputs(c, outs);
  plan->switches = std::move(switches);
  plan->signature = signature_of(c, args);
  {
    std::vector<NodePtr> nodes;
    for (const Var& v : outs) nodes.push_back(v.node());
    std::lock_guard<std::recursive_mutex> graph_lock(graph_mutex());
    plan->pipeline = build_pipeline(nodes);
    std::vector<const KernelIR*> irs;
    for (const LoweredKernel& k : plan->pipeline.kernels) irs.push_back(&k.ir);
    plan->handles = obtain_kernels(irs, dev);
  }
  classify_leaves(c, placeholders, assigns, random, dev, *plan);
  plan->program = make_program(plan->pipeline.graph, plan->pipeline.fusion, plan->pipeline.kernels,
                               plan->handles, dev);
  describe_outputs(*plan);
  note_trace(c, plan->signature);
  note_recreated(c, plan->signature);
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

// Runs `p` for `args` (realized), writes fn's results to out[0 .. p.num_results) and assigns
// the state's new values.
void replay(const JitPlan& p, const Var* const* args, Var* out) {
  for (const Var& s : p.state)
    if (!realized_acquire(*s.node())) eval({s});
  SmallBuffer<void*, kInlineLeaves> leaf_data(p.leaf_data.size());
  for (size_t l = 0; l < p.leaf_data.size(); ++l) {
    if (p.leaf_arg[l] >= 0)
      leaf_data[l] = arg_data(*args[p.leaf_arg[l]]->node(), p.program.device);
    else if (p.leaf_state[l] >= 0)
      leaf_data[l] = arg_data(*p.state[size_t(p.leaf_state[l])].node(), p.program.device);
    else
      leaf_data[l] = p.leaf_data[l];
  }
  Var random_source;  // this call's counters, held while the program runs
  if (p.random_leaf >= 0) {
    const RandomWords w = take_random_counters(p.random_counters);
    random_source = array(std::vector<int64_t>(w.begin(), w.end()), {4});
    leaf_data[size_t(p.random_leaf)] = arg_data(*random_source.node(), p.program.device);
  }
  SmallBuffer<BufferPtr, kInlineArgs> results(p.outputs.size());
  run_program(p.program, leaf_data.data(), results.data());
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const JitPlan::Output& o = p.outputs[k];
    Var v;
    if (o.arg >= 0) {
      v = *args[o.arg];
    } else if (o.constant) {
      v = Var(o.constant);
    } else {
      NodePtr n = new_node(OpKind::Leaf, o.dtype, o.shape);
      n->data = std::move(results[k]);
      n->evaluated = true;  // computed: grad() cannot see behind it
      v = Var(std::move(n));
    }
    if (k < p.num_results)
      out[k] = std::move(v);
    else
      Var(p.state[k - p.num_results]).assign(v);  // a copy is the same variable
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
                                       const char* type_name, std::string identity,
                                       std::vector<int> static_args,
                                       std::function<std::string(size_t)> describe_argument) {
  auto core = std::make_shared<JitCore>(std::move(trace), num_args, std::move(name), type_name,
                                        std::move(identity), static_args);
  core->describe_argument = std::move(describe_argument);
  return core;
}

void check_not_traced_argument(const std::vector<NodePtr>& nodes, const char* what) {
  if (jit_trace_depth() == 0 || !tracing_core) return;
  std::vector<const Node*> stack;
  std::unordered_set<const Node*> seen;
  for (const NodePtr& n : nodes) stack.push_back(n.get());
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (n->jit_argument >= 0) {
      const std::string arg = std::to_string(n->jit_argument);
      if (tracing_core->describe_argument) {  // a jit train step's parameters and state
        const std::string internal = tracing_core->describe_argument(size_t(n->jit_argument));
        if (!internal.empty())
          throw Error(tracing_core->label + ": " + what + " reads the value of " + internal +
                      " while the step is traced. It would be baked into the plan and every "
                      "later step would replay that value; compute with the Var instead");
      }
      const std::string label = argument_label(*tracing_core, size_t(n->jit_argument));
      if (!tracing_core->labels.empty())  // a list's element: static_args names the list
        throw Error(tracing_core->label + ": " + what + " reads the value of " + label +
                    " while the function is traced. The value would be baked into the plan "
                    "and every later call would replay it. Compute with the Var instead (e.g. "
                    "where() for a branch), or declare that parameter static in JitOptions");
      throw Error(tracing_core->label + ": " + what + " reads the value of argument " + arg +
                  " while the function is traced. The value would be baked into the plan and "
                  "every later call, whatever its argument " +
                  arg +
                  ", would replay it. Compute with the Var instead (e.g. where() for a branch), "
                  "or declare the argument static: jit(fn, \"" +
                  tracing_core->name + "\", {.static_args = {" + arg +
                  "}}) (a new value then traces again)");
    }
    for (const NodePtr& in : n->inputs) stack.push_back(in.get());
  }
}

Var jit_call_one(JitCore& core, const Var* const* args) {
  if (jit_trace_depth() > 0) {
    check_defined(core, args);
    return call_inline(core, args)[0];
  }
  const JitPlan& p = plan_for(core, args);
  Var out;
  replay(p, args, &out);
  return out;
}

std::vector<Var> jit_call_many(JitCore& core, const Var* const* args) {
  if (jit_trace_depth() > 0) {
    check_defined(core, args);
    return call_inline(core, args);
  }
  const JitPlan& p = plan_for(core, args);
  std::vector<Var> out(p.num_results);
  replay(p, args, out.data());
  return out;
}

void set_argument_labels(JitCore& core, std::vector<std::string> labels) {
  core.labels = std::move(labels);
}

bool read_switch(const std::shared_ptr<const TraceSwitch>& s) {
  const bool value = s->peek();
  if (traced_switches) {
    const auto seen = std::find_if(traced_switches->begin(), traced_switches->end(),
                                   [&](const auto& read) { return read.first == s; });
    if (seen == traced_switches->end()) traced_switches->emplace_back(s, value);
  }
  return value;
}

uint64_t jit_traces(const JitCore& core) {
  return core.traces.load(std::memory_order_relaxed);
}

const std::string& jit_name(const JitCore& core) {
  return core.name;
}

}  // namespace metajit::detail
