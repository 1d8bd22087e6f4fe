// The optimizer front end (include/metajit/train.h): argument checks, the eager step (grad,
// update, assign, one evaluation) and the jit train step built on jit's core.
#include <metajit/composite.h>
#include <metajit/error.h>
#include <metajit/eval.h>
#include <metajit/ops.h>
#include <metajit/train.h>

#include <atomic>
#include <cmath>
#include <unordered_set>

#include "meta_ops/node.h"
#include "train/optimizer_core.h"

namespace metajit {
namespace detail {

OptimizerCore::OptimizerCore() {
  static std::atomic<uint64_t> next{1};
  number = next.fetch_add(1, std::memory_order_relaxed);
}

void check_params(const std::vector<Var>& params, const std::string& kind) {
  if (params.empty()) throw Error(kind + ": no parameters to optimize");
  std::unordered_set<const Node*> seen;
  for (size_t i = 0; i < params.size(); ++i) {
    const Var& p = params[i];
    const std::string which = kind + ": parameter " + std::to_string(i);
    if (!p.defined()) throw Error(which + " is undefined (default-constructed)");
    if (!is_float(p.dtype()))
      throw DTypeError(which + " has dtype " + dtype_name(p.dtype()) + " and shape " +
                       shape_str(p.shape()) + "; parameters must be float32 or float64");
    if (!seen.insert(p.node().get()).second)
      throw Error(which + " (shape " + shape_str(p.shape()) +
                  ") is listed twice; list each parameter once");
  }
}

void check_hyperparameter(const std::string& kind, const char* what, double value, double lo,
                          double hi, bool has_hi) {
  if (std::isfinite(value) && value >= lo && (!has_hi || value < hi)) return;
  throw Error(kind + ": " + what + " = " + std::to_string(value) + " is invalid; it must be " +
              (has_hi ? "in [" + std::to_string(lo) + ", " + std::to_string(hi) + ")"
                      : ">= " + std::to_string(lo)));
}

namespace {

// Points the given Vars at other nodes for a scope, then back (also on an exception).
class Rebinding {
 public:
  explicit Rebinding(const std::vector<Var>& vars) : vars_(vars) {
    for (const Var& v : vars) saved_.push_back(v.node());
  }
  ~Rebinding() {
    for (size_t i = 0; i < vars_.size(); ++i) rebind_var(vars_[i], saved_[i]);
  }
  Rebinding(const Rebinding&) = delete;
  Rebinding& operator=(const Rebinding&) = delete;

 private:
  const std::vector<Var>& vars_;
  std::vector<NodePtr> saved_;
};

}  // namespace

Var scalar_arg(double v) {
  return array<double>({v}, {});
}

std::vector<Var> clip_grad_norm(const std::vector<Var>& grads, const Var& max_norm) {
  Var total_sq = scalar(0, DType::Float64);
  for (const Var& g : grads) total_sq = total_sq + cast(sum(g * g), DType::Float64);
  const Var coef = minimum(cast(max_norm, DType::Float64) / (sqrt(total_sq) + 1e-6), 1.0);
  std::vector<Var> clipped;
  for (const Var& g : grads) clipped.push_back(g * cast(coef, g.dtype()));
  return clipped;
}

// The clipping argument of a jit train step: the norm as a 0-d Float64 when clipping is on, an
// empty [0] array when off. Its rank is part of the step's signature, so turning clipping on or
// off traces the step again, while a new norm replays it.
Var clip_arg(const OptimizerCore& core) {
  // A leaf, not zeros(): a lazy argument would be evaluated (a kernel looked up) every call.
  return core.max_grad_norm > 0 ? scalar_arg(core.max_grad_norm)
                                : array(std::vector<double>{}, {0});
}

std::shared_ptr<JitCore> make_train_jit(const std::shared_ptr<OptimizerCore>& core,
                                        JitTraceFn loss_fn, size_t num_user_args, std::string name,
                                        std::string identity) {
  // The core outlives the step (the step holds it too); a weak reference would only add a check.
  OptimizerCore* opt = core.get();
  const size_t np = opt->params.size(), ns = opt->state.size();
  JitTraceFn trace = [opt, loss_fn = std::move(loss_fn), num_user_args, np,
                      ns](const Var* args) -> std::vector<Var> {
    std::vector<Var> params(args + num_user_args, args + num_user_args + np);
    std::vector<Var> state(args + num_user_args + np, args + num_user_args + np + ns);
    const Var& lr = args[num_user_args + np + ns];
    const Var& step = args[num_user_args + np + ns + 1];
    const Var& clip = args[num_user_args + np + ns + 2];
    const Var& scale = args[num_user_args + np + ns + 3];
    const Var& data_parallel = args[num_user_args + np + ns + 4];
    Var loss;
    {
      // The model's parameter Vars (copies of opt->params) stand for the placeholders, so the
      // loss is a function of the trace's arguments, not of the values captured now.
      Rebinding rebinding(opt->params);
      for (size_t i = 0; i < np; ++i) rebind_var(opt->params[i], params[i].node());
      loss = loss_fn(args)[0];
    }
    if (!loss.defined())
      throw Error(opt->kind + " jit_step: the loss function returned an undefined Var");
    const bool scaling = scale.ndim() == 0;
    ScaledGrads g =
        scaling ? scaled_grads(loss, params, scale) : ScaledGrads{grad(loss, params), Var()};
    if (data_parallel.ndim() == 0) average_gradients(*opt, g);
    if (clip.ndim() == 0) g.grads = clip_grad_norm(g.grads, clip);
    OptimizerUpdate u = opt->update(params, g.grads, state, lr, step);
    if (scaling) u = unless_nonfinite(g.found_nonfinite, params, state, std::move(u));
    std::vector<Var> out{loss};
    out.insert(out.end(), u.params.begin(), u.params.end());
    out.insert(out.end(), u.state.begin(), u.state.end());
    if (scaling) out.push_back(g.found_nonfinite);
    return out;
  };
  if (name.empty()) name = opt->kind + " train step";
  // The same loss function type on the same optimizer: a re-created step is "the same function"
  // for the compiled-again warning.
  identity = "train step " + identity + " of optimizer " + std::to_string(opt->number);
  auto describe = [num_user_args, np, ns, kind = opt->kind](size_t i) -> std::string {
    if (i < num_user_args) return "";
    i -= num_user_args;
    if (i < np) return "parameter " + std::to_string(i) + " of the " + kind + " optimizer";
    i -= np;
    if (i < ns) return "state Var " + std::to_string(i) + " of the " + kind + " optimizer";
    if (i == ns) return "the learning rate";
    if (i == ns + 1) return "the step number";
    if (i == ns + 2)
      return "the gradient clipping norm (0-d when set_max_grad_norm is on, [0] when off)";
    return i == ns + 3 ? "the loss scale (0-d when set_loss_scaling is on, [0] when off)"
                       : "data parallelism (0-d when set_data_parallel is on, [0] when off)";
  };
  return make_jit_core(std::move(trace), num_user_args + np + ns + 5, std::move(name), nullptr,
                       std::move(identity), {}, std::move(describe));
}

Var call_train_jit(OptimizerCore& core, JitCore& jit, const Var* const* user_args,
                   size_t num_user_args) {
  // Inlined into another trace, its step count and learning rate would be baked into that plan
  // and its updates replayed as that function's state: never what a caller means.
  if (jit_trace_depth() > 0)
    throw Error(core.kind +
                " jit_step: called while a jit function is traced; a train step runs on its "
                "own: call it outside other jit functions");
  const size_t np = core.params.size(), ns = core.state.size();
  std::vector<const Var*> args(user_args, user_args + num_user_args);
  for (const Var& p : core.params) args.push_back(&p);
  for (const Var& s : core.state) args.push_back(&s);
  Var lr = scalar_arg(core.lr), step = scalar_arg(double(core.steps + 1)), clip = clip_arg(core),
      scale = scale_arg(core), data_parallel = data_parallel_arg(core);
  for (const Var* v : {&lr, &step, &clip, &scale, &data_parallel}) args.push_back(v);
  std::vector<Var> out = jit_call_many(jit, args.data());
  for (size_t i = 0; i < np; ++i) core.params[i].assign(out[1 + i]);
  for (size_t j = 0; j < ns; ++j) core.state[j].assign(out[1 + np + j]);
  if (core.scaling)
    advance_loss_scale(core, out[1 + np + ns].item<bool>());
  else
    ++core.steps;
  return out[0];
}

}  // namespace detail

Optimizer::Optimizer(std::shared_ptr<detail::OptimizerCore> core) : core_(std::move(core)) {}

void Optimizer::step(const Var& loss) {
  detail::OptimizerCore& c = *core_;
  if (!loss.defined()) throw Error(c.kind + ".step: the loss is undefined (default-constructed)");
  // lr, the step number and the loss scale as 0-d leaves, not scalar constants: scalars are
  // part of the structure eval() remembers programs by (README "Repeated evaluation"), leaves
  // are not, so every step reuses the first step's program.
  detail::ScaledGrads g = c.scaling
                              ? detail::scaled_grads(loss, c.params, detail::scalar_arg(c.scale))
                              : detail::ScaledGrads{grad(loss, c.params), Var()};
  if (c.data_parallel) detail::average_gradients(c, g);
  if (c.max_grad_norm > 0)
    g.grads = detail::clip_grad_norm(g.grads, detail::scalar_arg(c.max_grad_norm));
  OptimizerUpdate u = update(c.params, g.grads, c.state, detail::scalar_arg(c.lr),
                             detail::scalar_arg(double(c.steps + 1)));
  if (c.scaling) u = detail::unless_nonfinite(g.found_nonfinite, c.params, c.state, std::move(u));
  std::vector<NodePtr> saved;
  for (const Var& v : c.params) saved.push_back(v.node());
  for (const Var& v : c.state) saved.push_back(v.node());
  std::vector<Var> all{loss};
  for (size_t i = 0; i < c.params.size(); ++i) {
    c.params[i].assign(u.params[i]);
    all.push_back(c.params[i]);
  }
  for (size_t j = 0; j < c.state.size(); ++j) {
    c.state[j].assign(u.state[j]);
    all.push_back(c.state[j]);
  }
  if (c.scaling) all.push_back(g.found_nonfinite);
  try {
    eval(all);
  } catch (...) {  // nothing half-done: the parameters and state keep their values
    size_t k = 0;
    for (const Var& v : c.params) detail::rebind_var(v, saved[k++]);
    for (const Var& v : c.state) detail::rebind_var(v, saved[k++]);
    throw;
  }
  if (c.scaling)
    detail::advance_loss_scale(c, g.found_nonfinite.item<bool>());
  else
    ++c.steps;
}

void Optimizer::set_lr(double lr) {
  detail::check_hyperparameter(core_->kind, "lr", lr, 0);
  core_->lr = lr;
}
double Optimizer::lr() const {
  return core_->lr;
}
void Optimizer::set_data_parallel(bool on, int64_t bucket_bytes) {
  detail::set_data_parallel(*core_, on, bucket_bytes);
}
bool Optimizer::data_parallel() const {
  return core_->data_parallel;
}

void Optimizer::set_max_grad_norm(double max_norm) {
  detail::check_hyperparameter(core_->kind, "max_grad_norm", max_norm, 0);
  core_->max_grad_norm = max_norm;
}
double Optimizer::max_grad_norm() const {
  return core_->max_grad_norm;
}
int64_t Optimizer::steps() const {
  return core_->steps;
}

void Optimizer::set_steps(int64_t steps) {
  if (steps < 0)
    throw Error(core_->kind + ".set_steps: " + std::to_string(steps) +
                " steps; the count of steps taken is 0 or more");
  core_->steps = steps;
}
const std::vector<Var>& Optimizer::params() const {
  return core_->params;
}
const std::vector<Var>& Optimizer::state() const {
  return core_->state;
}

OptimizerUpdate Optimizer::update(const std::vector<Var>& params, const std::vector<Var>& grads,
                                  const std::vector<Var>& state, const Var& lr,
                                  const Var& step) const {
  const detail::OptimizerCore& c = *core_;
  const std::string op = c.kind + ".update";
  auto count = [&](const char* what, size_t got, size_t want) {
    if (got != want)
      throw ShapeError(op + ": " + std::to_string(got) + " " + what + " for " +
                       std::to_string(c.params.size()) + " parameters; " + std::to_string(want) +
                       " expected");
  };
  count("params", params.size(), c.params.size());
  count("grads", grads.size(), c.params.size());
  count("state Vars", state.size(), c.state.size());
  for (const Var* v : {&lr, &step}) {
    if (!v->defined() || v->numel() != 1 || !is_float(v->dtype()))
      throw ShapeError(op + ": " + (v == &lr ? "lr" : "step") +
                       " must be a float Var with one element (a 0-d Var)" +
                       (v->defined() ? "; it has shape " + shape_str(v->shape()) + " and dtype " +
                                           dtype_name(v->dtype())
                                     : std::string("; it is undefined")));
  }
  auto same = [&](const char* what, size_t i, const Var& v) {
    const Var& p = c.params[i % c.params.size()];
    if (!v.defined() || v.shape() != p.shape() || v.dtype() != p.dtype())
      throw ShapeError(op + ": " + what + " " + std::to_string(i) + " has " +
                       (v.defined() ? std::string(dtype_name(v.dtype())) + shape_str(v.shape())
                                    : std::string("no value")) +
                       "; parameter " + std::to_string(i % c.params.size()) + " is " +
                       dtype_name(p.dtype()) + shape_str(p.shape()));
  };
  for (size_t i = 0; i < params.size(); ++i) {
    same("param", i, params[i]);
    same("grad", i, grads[i]);
  }
  for (size_t j = 0; j < state.size(); ++j) same("state Var", j, state[j]);
  return c.update(params, grads, state, reshape(lr, {}), reshape(step, {}));
}

}  // namespace metajit
