// jit(fn): trace a function of Vars once per input signature, then replay its plan
// (docs/design.md §8, docs/api.md `template <class F> auto jit(F fn);`).
//
//   auto step = jit([](const Var& a, const Var& b, const Var& c) { return a * b + c; }, "step");
//   Var y = step(x, w, bias);   // first call with these dtypes/shapes: trace, plan, compile
//   Var z = step(x2, w2, b2);   // same dtypes/shapes: replay (microseconds)
//
// fn takes any number of Vars (each by value or by const Var&) and lists of Vars
// (std::vector<Var>, by value or by const reference; include/metajit/var_args.h) and returns a
// Var or a std::vector<Var>. The callable jit() returns takes the same arguments and returns the
// same type; copies of it share one cache of traces.
//
// - Signature: the dtype and shape of every argument (every element of a list, and the lists'
//   lengths), and the value of every TraceSwitch the trace read (a module's train/eval mode).
//   The first call with a new signature traces fn: it calls fn on placeholder Vars (holding
//   the arguments' values), plans the graph fn builds (capture -> passes -> fusion ->
//   lowering) and obtains its kernels (memory -> disk -> compile), then keeps that plan. Kernels are shape-generic, so a retrace for a new
//   shape usually compiles nothing.
// - Replay (every later call with a known signature): no graph building, planning, hashing or
//   code generation. It takes the arguments' buffers (evaluating a lazy argument first),
//   allocates outputs and intermediates from the caching allocator, launches the kernels and
//   returns realized Vars. Concurrent calls from several threads are safe: the cache of traces
//   is read without a lock and every call has its own buffers.
// - State: a Var fn captured and assigns (Var::assign) is read and assigned by every call, as
//   a plain call of fn would (a counter, a BatchNorm's running statistics).
// - Static values: whatever else fn captures that is not an argument (a double, a Shape, a Var
//   created outside) is baked into the plan when fn is traced. Changing a captured double
//   afterwards does not retrace; pass the value as a Var argument (e.g. a 0-d Var) to make it
//   dynamic.
// - Reading an argument's value while fn is traced (to_vector, item, or eval of something
//   computed from it) is a metajit::Error naming the function and the argument: the value would
//   be baked into the plan and replays with other values would silently reuse it (JAX's
//   ConcretizationTypeError). Declare such an argument static, jit(fn, "name", {.static_args =
//   {2}}): then its value is part of the signature, fn may read it, and a new value traces again
//   (and counts toward the retracing warning).
// - Retracing warning: after more than METAJIT_RETRACE_WARN (default 8; 0 turns it off)
//   traces of one jit function, one warning names it and what changed between the last two
//   signatures. Name a function with jit(fn, "name"); the default name is "#N" with fn's type.
// - Compiled-again warning: a jit object created anew (e.g. inside the training loop) traces
//   and plans again although an earlier jit object of the same function (same name and type, or
//   unnamed, the same type) already traced that signature. The first such trace warns, naming the
//   function (once per function, however many objects are created): create the jit function
//   once and reuse it. A reused jit function never warns.
// - Errors: a wrong number or type of arguments does not compile; an undefined
//   (default-constructed) Var argument, or fn returning one, is a metajit::Error naming the
//   function and the argument (or output) index.
// - Calling a jit function while another one is being traced on the same thread simply calls
//   its fn: the inner function becomes part of the outer trace.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "var.h"
#include "var_args.h"

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit {

namespace detail {

class JitCore;

// A flag that traced code may branch on (nn::Module's train/eval mode): a jit function records
// the value each switch it read had while fn was traced, and replays that plan only while every
// such switch still has that value; otherwise it traces again, so the flag is part of the
// signature (shared/api.md "Layers, weights and the ops models need").
class TraceSwitch {
 public:
  explicit TraceSwitch(bool on) : on_(on) {}
  void set(bool on) { on_.store(on, std::memory_order_relaxed); }
  // The value, without recording it in a trace.
  bool peek() const { return on_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> on_;
};
// s->peek(); inside a jit trace, the plan being traced is also keyed on it.
bool read_switch(const std::shared_ptr<const TraceSwitch>& s);

// Calls fn on the placeholders args[0..n) and returns its result(s) as a vector.
using JitTraceFn = std::function<std::vector<Var>(const Var* args)>;

// identity: what makes two jit objects "the same function" for the compiled-again warning
// (fn's type, and for a function pointer its address). static_args: as JitOptions.
// describe_argument: for arguments fn's caller did not write (a train step's parameters), their
// name in errors ("parameter 2 of the optimizer"); "" for the others.
std::shared_ptr<JitCore> make_jit_core(JitTraceFn trace, size_t num_args, std::string name,
                                       const char* type_name, std::string identity,
                                       std::vector<int> static_args = {},
                                       std::function<std::string(size_t)> describe_argument = {});
Var jit_call_one(JitCore& core, const Var* const* args);
std::vector<Var> jit_call_many(JitCore& core, const Var* const* args);
uint64_t jit_traces(const JitCore& core);
const std::string& jit_name(const JitCore& core);

// The call signature of a function, function pointer, or class with one non-template
// operator() (lambdas, functors).
template <class T>
struct FnTraits;
template <class R, class... A>
struct FnTraits<R(A...)> {
  using Return = R;
  using Args = std::tuple<A...>;
};
template <class R, class... A>
struct FnTraits<R(A...) noexcept> : FnTraits<R(A...)> {};
template <class R, class... A>
struct FnTraits<R (*)(A...)> : FnTraits<R(A...)> {};
template <class R, class... A>
struct FnTraits<R (*)(A...) noexcept> : FnTraits<R(A...)> {};
template <class C, class R, class... A>
struct FnTraits<R (C::*)(A...)> : FnTraits<R(A...)> {};
template <class C, class R, class... A>
struct FnTraits<R (C::*)(A...) const> : FnTraits<R(A...)> {};
template <class C, class R, class... A>
struct FnTraits<R (C::*)(A...) noexcept> : FnTraits<R(A...)> {};
template <class C, class R, class... A>
struct FnTraits<R (C::*)(A...) const noexcept> : FnTraits<R(A...)> {};

template <class F>
concept HasFixedCallOperator = requires {
  &F::operator();
};

template <class F>
constexpr bool has_fixed_signature() {
  if constexpr (std::is_function_v<F> || std::is_pointer_v<F>)
    return std::is_function_v<std::remove_pointer_t<F>>;
  else if constexpr (std::is_class_v<F>)
    return HasFixedCallOperator<F>;
  else
    return false;
}

template <class F>
struct SignatureOf {
  using type = FnTraits<F>;
};
template <class F>
requires std::is_class_v<F>
struct SignatureOf<F> {
  using type = FnTraits<decltype(&F::operator())>;
};

template <class R>
inline constexpr bool is_var_result_v =
    std::is_same_v<R, Var> || std::is_same_v<R, std::vector<Var>>;

// A jit function with list parameters (std::vector<Var>): one JitCore per list layout (the
// lengths of its lists), each a jit function of the flattened arguments. A new layout is a new
// signature: it traces, and counts toward the retracing warning like any other
// (api/jit_layouts.cc).
class JitCoresByLayout {
 public:
  using Factory = std::function<std::shared_ptr<JitCore>(const std::vector<size_t>& layout)>;
  JitCoresByLayout(Factory factory, std::string name);
  JitCore& core_for(const std::vector<size_t>& layout);
  uint64_t traces() const;
  const std::string& name() const;

 private:
  struct Impl;
  Factory factory_;
  std::string name_;
  std::shared_ptr<Impl> impl_;
};

// The callable jit() returns, for fn of type R(A...).
template <class R, class Args>
class JitFunction;

template <class R, class... A>
class JitFunction<R, std::tuple<A...>> {
 public:
  static constexpr bool kHasLists = (is_var_list_param_v<A> || ...);
  explicit JitFunction(std::shared_ptr<JitCore> core) : core_(std::move(core)) {}
  explicit JitFunction(std::shared_ptr<JitCoresByLayout> cores) : cores_(std::move(cores)) {}

  // Replays fn's plan for these arguments' signature, tracing fn first if it is new.
  // (Arguments are taken by const reference whatever fn takes: the same calls compile.)
  R operator()(const CallArg<A>&... args) const {
    if constexpr (kHasLists) {
      const FlatArgs flat = flatten_all(args...);
      return call(cores_->core_for(flat.list_lengths), flat.vars.data());
    } else {
      const Var* in[sizeof...(A) + 1] = {&args...};
      return call(*core_, in);
    }
  }

  // How many times fn has been traced (one per distinct signature seen).
  uint64_t traces() const { return kHasLists ? cores_->traces() : jit_traces(*core_); }
  // The name warnings and errors use: the one given to jit(fn, name), else "#N (type)".
  const std::string& name() const { return kHasLists ? cores_->name() : jit_name(*core_); }

 private:
  static R call(JitCore& core, const Var* const* in) {
    if constexpr (std::is_same_v<R, Var>)
      return jit_call_one(core, in);
    else
      return jit_call_many(core, in);
  }
  std::shared_ptr<JitCore> core_;            // without list parameters
  std::shared_ptr<JitCoresByLayout> cores_;  // with
};

template <class>
inline constexpr bool always_false_v = false;

template <class Args>
struct AllVarParams;
template <class... A>
struct AllVarParams<std::tuple<A...>>
    : std::bool_constant<((is_var_param_v<A> || is_var_list_param_v<A>)&&...)> {};

// fn as a trace function of the flat arguments of one list layout. fn is shared by the traces
// of every layout.
template <class R, class... A, class F>
JitTraceFn trace_of_layout(std::shared_ptr<F> fn, const ParamSpans<A...>& spans) {
  return [fn = std::move(fn), spans](const Var* args) -> std::vector<Var> {
    return [&]<size_t... I>(std::index_sequence<I...>)->std::vector<Var> {
      if constexpr (std::is_same_v<R, Var>)
        return {(*fn)(param_from<A>(args + spans.offset[I], spans.length[I])...)};
      else
        return (*fn)(param_from<A>(args + spans.offset[I], spans.length[I])...);
    }
    (std::index_sequence_for<A...>{});
  };
}

// Error unless every index is a parameter of a function of num_params parameters.
void check_static_args(const std::vector<int>& static_args, size_t num_params);
// "argument 2" for a Var parameter, "argument 1[3]" for element 3 of a list parameter.
std::vector<std::string> flat_argument_labels(const std::vector<bool>& is_list,
                                              const std::vector<size_t>& layout);
// The flat indices of the elements of the parameters `static_args` names.
std::vector<int> flat_static_args(const std::vector<int>& static_args,
                                  const std::vector<bool>& is_list,
                                  const std::vector<size_t>& layout);
void set_argument_labels(JitCore& core, std::vector<std::string> labels);

template <class R, class... A, class F>
auto make_list_jit(F fn, std::string name, std::vector<int> static_args, const char* type_name,
                   std::string identity, std::tuple<A...>*) {
  check_static_args(static_args, sizeof...(A));
  auto shared_fn = std::make_shared<F>(std::move(fn));
  JitCoresByLayout::Factory factory = [=](const std::vector<size_t>& layout) {
    const ParamSpans<A...> spans(layout);
    const std::vector<bool> is_list = {is_var_list_param_v<A>...};
    std::string layout_text;
    for (size_t n : layout) layout_text += " " + std::to_string(n);
    auto core = make_jit_core(trace_of_layout<R, A...>(shared_fn, spans), spans.total, name,
                              type_name, identity + " lists" + layout_text,
                              flat_static_args(static_args, is_list, layout));
    set_argument_labels(*core, flat_argument_labels(is_list, layout));
    return core;
  };
  return JitFunction<R, std::tuple<A...>>(
      std::make_shared<JitCoresByLayout>(std::move(factory), std::move(name)));
}

template <class F>
std::string jit_identity(const F& fn) {
  if constexpr (std::is_pointer_v<F>)
    return std::string(typeid(F).name()) + "@" +
           std::to_string(reinterpret_cast<std::uintptr_t>(fn));
  else
    return typeid(F).name();
}

template <class F>
auto make_jit(F fn, std::string name, std::vector<int> static_args) {
  if constexpr (!has_fixed_signature<F>()) {
    static_assert(always_false_v<F>,
                  "jit(fn): fn must be a function, a function pointer or a lambda/functor with "
                  "one non-template operator(); write the parameters of a generic lambda as Var "
                  "or const Var&");
  } else {
    using Traits = typename SignatureOf<F>::type;
    using R = std::remove_cv_t<typename Traits::Return>;
    using Args = typename Traits::Args;
    if constexpr (!is_var_result_v<R>) {
      static_assert(always_false_v<F>, "jit(fn): fn must return a Var or a std::vector<Var>");
    } else if constexpr (!AllVarParams<Args>::value) {
      static_assert(always_false_v<F>,
                    "jit(fn): every parameter of fn must be a Var (by value or const Var&) or "
                    "a std::vector<Var> (by value or by const reference)");
    } else {
      const char* type_name = std::is_class_v<F> ? typeid(F).name() : nullptr;
      if constexpr (JitFunction<R, Args>::kHasLists) {
        std::string identity = jit_identity(fn);
        return make_list_jit<R>(std::move(fn), std::move(name), std::move(static_args), type_name,
                                std::move(identity), static_cast<Args*>(nullptr));
      } else {
        constexpr size_t n = std::tuple_size_v<Args>;
        JitTraceFn trace = [fn = std::move(fn)](const Var* args) mutable -> std::vector<Var> {
          return [&]<size_t... I>(std::index_sequence<I...>)->std::vector<Var> {
            if constexpr (std::is_same_v<R, Var>)
              return {fn(args[I]...)};
            else
              return fn(args[I]...);
          }
          (std::make_index_sequence<n>{});
        };
        std::string identity = jit_identity(fn);
        return JitFunction<R, Args>(make_jit_core(std::move(trace), n, std::move(name), type_name,
                                                  std::move(identity), std::move(static_args)));
      }
    }
  }
}

}  // namespace detail

struct JitOptions {
  // Indices of arguments whose values, not only dtypes and shapes, are part of the signature:
  // fn may read them while traced, and a new value traces again (JAX's static_argnums). An
  // index out of range is an Error when the function is created.
  std::vector<int> static_args;
};

// Wraps fn (Vars -> Var or std::vector<Var>) into a callable with the same parameters that
// traces fn once per input signature and replays the plan afterwards (see the file comment).
template <class F>
auto jit(F fn) {
  return detail::make_jit(std::move(fn), std::string(), {});
}
// The same, naming the function in warnings and errors.
template <class F>
auto jit(F fn, std::string name) {
  return detail::make_jit(std::move(fn), std::move(name), {});
}
// The same, with options: jit(fn, "name", {.static_args = {2}}).
template <class F>
auto jit(F fn, std::string name, JitOptions options) {
  return detail::make_jit(std::move(fn), std::move(name), std::move(options.static_args));
}

}  // namespace metajit
#pragma GCC visibility pop
