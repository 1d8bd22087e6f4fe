// The parameters jit(), value_and_grad() and jit_step() accept: each a Var (by value or const
// Var&) or a list of Vars (std::vector<Var>, by value or by const reference), so a model's
// seventeen tensors are one parameter, not seventeen. Internally a call is flattened: every
// Var of every argument in order, and the length of each list (the list layout).
#pragma once
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "var.h"

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit::detail {

template <class A>
inline constexpr bool is_var_param_v =
    std::is_same_v<A, Var> || std::is_same_v<A, const Var&> || std::is_same_v<A, const Var>;

template <class A>
inline constexpr bool is_var_list_param_v =
    std::is_same_v<A, std::vector<Var>> || std::is_same_v<A, const std::vector<Var>&> ||
    std::is_same_v<A, const std::vector<Var>>;

// What a call passes for a parameter of type A.
template <class A>
using CallArg = std::conditional_t<is_var_list_param_v<A>, std::vector<Var>, Var>;

// A call's arguments, flattened.
struct FlatArgs {
  std::vector<const Var*> vars;      // every Var, in parameter order, list elements in order
  std::vector<size_t> list_lengths;  // per list parameter, in order
};
inline void flatten(FlatArgs& f, const Var& v) {
  f.vars.push_back(&v);
}
inline void flatten(FlatArgs& f, const std::vector<Var>& vs) {
  f.list_lengths.push_back(vs.size());
  for (const Var& v : vs) f.vars.push_back(&v);
}
template <class... T>
FlatArgs flatten_all(const T&... args) {
  FlatArgs f;
  (flatten(f, args), ...);  // a fold over the comma operator: left to right
  return f;
}

// Where each parameter's Vars start in a flat call, and how many it has, for one list layout.
template <class... A>
struct ParamSpans {
  std::array<size_t, sizeof...(A) + 1> offset{}, length{};
  size_t total = 0;
  explicit ParamSpans(const std::vector<size_t>& list_lengths) {
    constexpr bool is_list[sizeof...(A) + 1] = {is_var_list_param_v<A>..., false};
    size_t next_list = 0;
    for (size_t k = 0; k < sizeof...(A); ++k) {
      length[k] = is_list[k] ? list_lengths.at(next_list++) : 1;
      offset[k] = total;
      total += length[k];
    }
  }
};

// Parameter A's argument from its span of a flat call.
template <class A>
decltype(auto) param_from(const Var* first, size_t length) {
  if constexpr (is_var_list_param_v<A>)
    return std::vector<Var>(first, first + length);
  else
    return static_cast<const Var&>(*first);
}

}  // namespace metajit::detail
#pragma GCC visibility pop
