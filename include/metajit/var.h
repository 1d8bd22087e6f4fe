// Var: the user's handle on a lazy tensor. Cheap to copy; nothing is computed until a value is
// read (to_vector, item) or eval() is called.
//
// Copies of a Var are one variable: they share a cell that names its current graph node, so
// `assign` (a parameter update) is seen through every copy, while graphs built from the Var
// before hold the node itself and keep the value they were built with (docs/api.md "Training").
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "dtype.h"

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit {

// The graph node behind a Var. Its definition is internal to the library (meta_ops/node.h).
struct Node;
using NodePtr = std::shared_ptr<Node>;
class Var;
namespace detail {
// Points every copy of `v` at `node` without assign()'s checks: how a jit train step lets the
// model's parameters stand for the trace's placeholders while it is traced (train/).
void rebind_var(const Var& v, NodePtr node);
}  // namespace detail

class Var {
 public:
  Var() = default;
  explicit Var(NodePtr node) : cell_(std::make_shared<Cell>(std::move(node))) {}

  const Shape& shape() const;
  DType dtype() const;
  int64_t ndim() const;
  int64_t numel() const;

  // Evaluates (if needed) and copies the values out. T must match dtype() (bool for Bool),
  // else DTypeError.
  template <class T>
  std::vector<T> to_vector() const {
    const void* p = realized_data(dtype_of<T>(), "to_vector");
    std::vector<T> out(static_cast<size_t>(numel()));
    if constexpr (std::is_same_v<T, bool>) {  // vector<bool> is packed: copy element-wise
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<const unsigned char*>(p)[i] != 0;
    } else if (!out.empty()) {
      std::memcpy(static_cast<void*>(out.data()), p, out.size() * sizeof(T));
    }
    return out;
  }
  // The single value of a Var with numel() == 1, else ShapeError.
  template <class T>
  T item() const {
    check_item();
    T v;
    std::memcpy(static_cast<void*>(&v), realized_data(dtype_of<T>(), "item"), sizeof(T));
    return v;
  }

  // Jittor's update: this Var and every copy of it now hold `value` (lazy when value is; no
  // copy is made). Graphs built from this Var before keep its old value. ShapeError/DTypeError
  // when value's shape/dtype differ (and nothing changes). Inside a jit function (or a jit
  // step), assigning a Var the function captured makes that Var state: every call reads its
  // current value and assigns it the value computed from it (a BatchNorm's running statistics),
  // as a plain call of the function would; assigning one of the function's own arguments is an
  // Error. Like any shared variable, a Var assigned on one thread must not be used on another
  // meanwhile (nor a jit function with state called from two threads at once).
  void assign(const Var& value);

  bool defined() const { return cell_ && cell_->node; }
  // The node itself; opaque outside the library.
  const NodePtr& node() const { return cell_ ? cell_->node : null_node_; }

 private:
  // The value on the host, evaluating first if needed. Defined with eval() (api/var_values.cc):
  // the graph layer below it only builds nodes (docs/architecture.md).
  const void* realized_data(DType want, const char* what) const;
  void check_item() const;
  void assign_traced(const Var& value);

  // The variable every copy shares. It tells its node that a Var names it (meta_ops/var.cc):
  // an evaluation stores the values the program holds (README "Lazy evaluation").
  struct Cell {
    explicit Cell(NodePtr n);
    ~Cell();
    Cell(const Cell&) = delete;
    Cell& operator=(const Cell&) = delete;
    // Names `n` from now on; returns the node named before.
    NodePtr set(NodePtr n);
    NodePtr node;  // written only through set()
  };
  friend void detail::rebind_var(const Var& v, NodePtr node);
  static inline const NodePtr null_node_{};
  std::shared_ptr<Cell> cell_;
};

}  // namespace metajit
#pragma GCC visibility pop
