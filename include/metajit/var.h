// Var: the user's handle on a lazy tensor. Cheap to copy (shares its graph node); nothing is
// computed until a value is read (to_vector, item) or eval() is called.
#pragma once
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "dtype.h"

namespace metajit {

// The graph node behind a Var. Its definition is internal to the library (meta_ops/node.h).
struct Node;
using NodePtr = std::shared_ptr<Node>;

class Var {
 public:
  Var() = default;
  explicit Var(NodePtr node) : node_(std::move(node)) {}

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

  bool defined() const { return node_ != nullptr; }
  // The node itself; opaque outside the library.
  const NodePtr& node() const { return node_; }

 private:
  // The value on the host, evaluating first if needed. Defined with eval() (api/var_values.cc):
  // the graph layer below it only builds nodes (docs/architecture.md).
  const void* realized_data(DType want, const char* what) const;
  void check_item() const;
  NodePtr node_;
};

}  // namespace metajit
