// Layers and their weights (shared/api.md "Layers, weights and the ops models need"; README
// "Layers" and "Weights (safetensors)"): nn::Module, the layers built on it (PyTorch's names,
// weight layouts, defaults and initialisation), and the safetensors reader and writer.
//
//   auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(784, 128),
//                                                 std::make_shared<nn::ReLU>(),
//                                                 std::make_shared<nn::Linear>(128, 10));
//   Adam opt(model->parameters());
//   Var logits = (*model)(x);                        // "0.weight", "0.bias", "2.weight", ...
//   save_safetensors("model.safetensors", model->state_dict());
#pragma once
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "jit.h"
#include "var.h"

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit {

namespace nn {
// Named tensors, in name order: what a model's weights are saved as and loaded from.
using StateDict = std::map<std::string, Var>;

// The base of every layer and model (torch.nn.Module): named parameters (the float Vars grad()
// and the optimizers work on), named buffers (state that is saved and loaded but not trained,
// such as BatchNorm2d's running statistics) and named child modules (nn/module.cc).
//
// - Names: an entry of a child is "child.entry", recursively ("encoder.0.weight"). A name is
//   not empty, holds no '.', and is unique among a module's parameters, buffers and children
//   (else Error naming the module and the name).
// - Values: a parameter or buffer is a Var; the module keeps one copy, and a Var copy is the
//   same variable (include/metajit/var.h), so an optimizer holding parameters() and the layer
//   see every update (Var::assign) either makes, load_state_dict's included.
// - Ownership: modules are held by std::shared_ptr (register_module, Sequential) and are neither
//   copyable nor movable: a copy would share its parameters with the original (a Var copy is
//   the same variable), which a copied layer never means. To duplicate a model, construct
//   another and load_state_dict(original.state_dict()), which copies the values.
// - Mode: a new module is in training mode. The mode is a detail::TraceSwitch, read with
//   detail::read_switch, so a jit function (or jit train step) traced in one mode traces again
//   in the other: the mode is part of its signature.
// - Threads: building and loading a module, and switching its mode, must not race with its use
//   on another thread; calling layers concurrently is as safe as building graphs is.
class Module {
 public:
  Module();
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter as (dotted name, Var), in torch's order: this module's own in registration
  // order, then each child's (in registration order), recursively. A child module registered
  // under two names (shared) is listed once, under its first name, as torch does; a Var
  // registered twice is listed twice (pass an optimizer each variable once).
  std::vector<std::pair<std::string, Var>> named_parameters() const;
  std::vector<Var> parameters() const;  // named_parameters()' Vars, in that order
  // The buffers, likewise (torch.nn.Module.named_buffers).
  std::vector<std::pair<std::string, Var>> named_buffers() const;
  std::vector<Var> buffers() const;
  // The direct children, in registration order.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;

  // Every parameter and buffer under its dotted name (a shared child under each of its names,
  // as torch does). The Vars are the module's own (the same variables, not copies of values).
  StateDict state_dict() const;
  // Copies the values of `state` into this module's parameters and buffers (Var::assign of a
  // copy of each value, made after evaluating the lazy ones together: the module never shares
  // a value with `state`, and its parameters stay leaves of their own for grad()). Everything
  // is checked before anything is assigned, and on any error nothing changes:
  //   - strict, a key of state_dict() missing from `state`, or a key of `state` this module
  //     does not have: Error naming every such key (torch's "Missing key(s)" and "Unexpected
  //     key(s)"); not strict, those keys are skipped;
  //   - always, an undefined Var (Error), a shape (ShapeError) or a dtype (DTypeError) other
  //     than the module's, naming the key and both shapes or dtypes.
  // Error inside a jit trace (Var::assign's rule).
  void load_state_dict(const StateDict& state, bool strict = true);

  // Sets training mode (on) or evaluation mode (off) on this module and, recursively, its
  // children. Dropout and BatchNorm2d behave differently in the two modes.
  void train(bool on = true);
  void eval() { train(false); }
  // The mode. Read through detail::read_switch: inside a jit trace the plan is keyed on it.
  bool training() const;

 protected:
  // Adds a parameter (a float Var: DTypeError otherwise; Error when undefined) or a buffer (any
  // defined Var) named `name`, and returns a reference to the module's copy, valid as long as
  // the module lives.
  Var& register_parameter(std::string name, Var value);
  Var& register_buffer(std::string name, Var value);
  // Adds a child module (Error when null or when it is this module) and returns it.
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> m) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: M must derive from nn::Module");
    add_child(std::move(name), m);
    return m;
  }

 private:
  struct Entry {
    std::string name;
    Var value;
  };
  void check_new_name(const std::string& name, const char* what) const;
  void add_child(std::string name, std::shared_ptr<Module> m);
  // Appends prefix + name of every parameter (or buffer) of this module and its children;
  // `seen` (when given) skips a child met before.
  void collect(bool buffers, const std::string& prefix,
               std::vector<std::pair<std::string, Var>>& out,
               std::vector<const Module*>* seen) const;

  std::deque<Entry> parameters_, buffers_;  // a deque: references to entries stay valid
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::shared_ptr<detail::TraceSwitch> training_;
};

// ---- layers (nn/*.cc) ----
// Each takes torch's constructor arguments and, where its initial weights are random, an
// optional `seed` last: unset, they are drawn from the random stream (rand/randn without a
// seed: manual_seed makes them reproducible, and two layers differ); set, they are that seed's
// fixed values (each parameter from its own seed derived from it). Initial values are computed
// when the layer is built (evaluated, as torch computes them eagerly). Parameters are Float32. Bad
// constructor arguments are an Error naming the layer and what is valid; an input of the wrong
// shape (or dtype) a ShapeError (DTypeError) naming the layer, the shape and what is valid.

// y = x W^T + b over the last axis of x [.., in_features] -> [.., out_features].
// weight [out, in] and bias [out] ~ U(-1/sqrt(in), 1/sqrt(in)) (torch's kaiming_uniform_ with
// a = sqrt(5)); no bias parameter when bias is false.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true,
         std::optional<uint64_t> seed = std::nullopt);
  Var operator()(const Var& x) const;
  const Var& weight() const { return weight_; }
  const Var& bias() const { return bias_; }  // undefined without bias
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  Var weight_, bias_;
};

// conv2d over NCHW input [N, in, H, W] (or unbatched [in, H, W]) with a square kernel, zero
// padding. weight [out, in / groups, kernel, kernel] and bias [out] ~ U(-1/sqrt(fan_in), ..)
// with fan_in = in / groups * kernel * kernel. in and out must be multiples of groups.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1, bool bias = true,
         std::optional<uint64_t> seed = std::nullopt);
  Var operator()(const Var& x) const;
  const Var& weight() const { return weight_; }
  const Var& bias() const { return bias_; }

 private:
  int64_t in_, stride_, padding_, dilation_, groups_;
  Var weight_, bias_;
};

// Batch normalisation of [N, C, H, W] per channel (torch.nn.BatchNorm2d, affine, tracking
// running statistics). Parameters weight (ones) and bias (zeros) [C]; buffers running_mean
// (zeros), running_var (ones), Float32 [C], and num_batches_tracked (Int64, 0-d).
// - Training mode: normalises with the batch's mean and biased variance over N, H and W, and
//   updates the buffers as torch does: running_mean = (1 - momentum) running_mean + momentum
//   mean, running_var likewise with the unbiased variance, num_batches_tracked += 1 (Var::assign;
//   the statistics carry no gradient). ShapeError for one value per channel (N*H*W == 1).
//   The update is lazy; the evaluation that computes the batch statistics (the loss's) stores
//   them, and the next training-mode call evaluates the update from them (one small kernel),
//   so an eager loop keeps no graph from step to step. Inside a jit function or jit train step
//   the buffers are the function's state: every call updates them (include/metajit/var.h).
// - Evaluation mode: normalises with running_mean and running_var.
// `seed` is accepted for uniformity; the initialisation is not random.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       std::optional<uint64_t> seed = std::nullopt);
  Var operator()(const Var& x) const;
  const Var& weight() const { return weight_; }
  const Var& bias() const { return bias_; }
  const Var& running_mean() const { return running_mean_; }
  const Var& running_var() const { return running_var_; }
  const Var& num_batches_tracked() const { return num_batches_tracked_; }

 private:
  Var normalized(const Var& x, const Var& mean, const Var& var) const;
  void update_running_stats(const Var& mean, const Var& unbiased_var) const;
  void settle_running_stats() const;
  static void stored_when_computed(Var& stat);
  int64_t features_;
  double eps_, momentum_;
  Var weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
};

// layer_norm over the last axis (of extent normalized_shape), biased variance; with
// elementwise_affine, parameters weight (ones) and bias (zeros) [normalized_shape], else none.
// `seed` is accepted for uniformity; the initialisation is not random.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     std::optional<uint64_t> seed = std::nullopt);
  Var operator()(const Var& x) const;
  const Var& weight() const { return weight_; }
  const Var& bias() const { return bias_; }

 private:
  int64_t features_;
  double eps_;
  Var weight_, bias_;
};

// Rows of weight [num_embeddings, embedding_dim] (~ N(0, 1)) for Int32/Int64 ids of any shape:
// ids.shape + [embedding_dim]. A negative id counts from the end; an id still outside the
// table reads zeros (the embedding op's rule: ids are not read to check them).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<uint64_t> seed = std::nullopt);
  Var operator()(const Var& ids) const;
  const Var& weight() const { return weight_; }

 private:
  Var weight_;
};

// Inverted dropout in training mode (dropout(x, p): the mask from the random stream, new on
// every call and jit replay); x itself in evaluation mode. Error for p outside [0, 1].
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Var operator()(const Var& x) const;
  double p() const { return p_; }

 private:
  double p_;
};

// torch.nn.MultiheadAttention with batch_first = true and no dropout: query [N, T, E], key and
// value [N, S, E] (or unbatched [T, E], [S, E]) -> [N, T, E], the attention output only (torch
// also returns the averaged weights). q, k and v are projected by in_proj_weight [3E, E] (rows
// q, k, v; xavier_uniform: U(+-sqrt(6 / 4E))) and in_proj_bias [3E] (zeros), split into
// num_heads heads of E / num_heads, attended with scaled_dot_product_attention (`causal`: query
// i attends keys 0..i), joined and projected by the child out_proj, a Linear(E, E) (its weight
// keeps Linear's initialisation; its bias is zeros). Without bias there is no in_proj_bias and
// out_proj has no bias. No attention or key-padding masks. Error unless embed_dim > 0 is a
// multiple of num_heads > 0.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, bool bias = true,
                     std::optional<uint64_t> seed = std::nullopt);
  Var operator()(const Var& query, const Var& key, const Var& value, bool causal = false) const;
  const Var& in_proj_weight() const { return in_proj_weight_; }
  const Var& in_proj_bias() const { return in_proj_bias_; }
  const std::shared_ptr<Linear>& out_proj() const { return out_proj_; }

 private:
  Var project(const Var& x, int64_t part) const;
  Var split_heads(const Var& x) const;
  int64_t embed_dim_, num_heads_;
  Var in_proj_weight_, in_proj_bias_;
  std::shared_ptr<Linear> out_proj_;
};

// Parameterless activations, for Sequential.
class ReLU : public Module {
 public:
  Var operator()(const Var& x) const;
};
// Exact (erf) or, with tanh_approx, torch's approximate = "tanh".
class GELU : public Module {
 public:
  explicit GELU(bool tanh_approx = false) : tanh_approx_(tanh_approx) {}
  Var operator()(const Var& x) const;

 private:
  bool tanh_approx_;
};
class Tanh : public Module {
 public:
  Var operator()(const Var& x) const;
};
class Sigmoid : public Module {
 public:
  Var operator()(const Var& x) const;
};

// A module Sequential can hold: a Module with `Var operator()(const Var&) const`.
template <class M>
concept SequentialLayer = std::derived_from<M, Module> && requires(const M& m, const Var& x) {
  { m(x) } -> std::convertible_to<Var>;
};

// Its children applied in order, each to the previous one's output (the input itself when
// empty); children named "0", "1", ... in order (torch.nn.Sequential).
class Sequential : public Module {
 public:
  Sequential() = default;
  template <SequentialLayer... M>
  explicit Sequential(std::shared_ptr<M>... children) {
    (push_back(std::move(children)), ...);
  }
  // Appends `child` (Error when null) under the name std::to_string(size()).
  template <SequentialLayer M>
  void push_back(std::shared_ptr<M> child) {
    const M* layer = register_module(std::to_string(steps_.size()), std::move(child)).get();
    steps_.push_back([layer](const Var& x) -> Var { return (*layer)(x); });
  }
  Var operator()(const Var& x) const;
  size_t size() const { return steps_.size(); }
  // Child i (Error when i >= size()).
  std::shared_ptr<Module> operator[](size_t i) const;

 private:
  std::vector<std::function<Var(const Var&)>> steps_;  // each calls a child the module owns
};

}  // namespace nn

// Writes `tensors` (evaluated first if lazy) and `metadata` to `path` in the safetensors format,
// byte for byte what Python's safetensors.numpy.save_file writes for the same arrays and
// metadata (tensors ordered by dtype, widest first, then by name; header JSON padded with
// spaces to a multiple of 8 bytes; an empty `metadata` writes no "__metadata__"). Atomic: the
// file is written beside `path`, flushed to disk and renamed over it, so on any failure `path`
// keeps its old content (or stays absent). Error naming the key for an undefined Var, a tensor
// named "__metadata__", or a name or metadata string that is not valid UTF-8; Error with the
// system's reason when the file cannot be written.
void save_safetensors(const std::string& path, const nn::StateDict& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a safetensors file (dtypes F32, F64, I32, I64, BOOL) into new Vars holding copies of
// its bytes, and its "__metadata__" into `*metadata` when given. The file is untrusted input:
// it is checked as Python's safetensors checks it (and more: duplicate names, BOOL bytes that
// are not 0 or 1) before anything is allocated, and a bad file is an Error (DTypeError for a
// dtype metajit does not have, ShapeError for a bad shape) naming the file, the tensor and
// what is valid; never a crash or a read outside the file.
nn::StateDict load_safetensors(const std::string& path,
                               std::map<std::string, std::string>* metadata = nullptr);

}  // namespace metajit
#pragma GCC visibility pop
