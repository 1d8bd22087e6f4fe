// Running graphs and looking inside them: eval, plan, explain, to_dot (docs/api.md "Running").
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "device.h"
#include "var.h"

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit {

// Evaluates the Vars together: one graph, one plan; afterwards each holds its value.
void eval(const std::vector<Var>& vars);

struct KernelInfo {
  std::string key;               // 32 hex digits (XXH3-128), also the cache entry name
  std::vector<std::string> ops;  // the meta-ops fused into this kernel, in order
  std::string source;            // generated source
};
// Plans and generates the kernels `eval(vars)` would run on the current device; runs and
// compiles nothing.
std::vector<KernelInfo> plan(const std::vector<Var>& vars);
// The same for `target`: plan(vars, Device::CUDA) writes the CUDA kernels and their keys on a
// machine without a GPU (it needs nvcc only for the key's toolchain identity).
std::vector<KernelInfo> plan(const std::vector<Var>& vars, Device target);
// Human-readable listing of the fused groups of plan(vars).
std::string explain(const std::vector<Var>& vars);
// Graphviz DOT picture of plan(vars): one cluster per kernel holding its fused ops (op, dtype,
// shape), inputs and the values stored between kernels outside them, requested outputs marked,
// ops built by grad() coloured apart from forward ones. Compiles nothing; deterministic.
// Render with `dot -Tsvg`. METAJIT_DUMP_DOT=DIR writes one for every eval().
std::string to_dot(const std::vector<Var>& vars);

// Prints x's dtype, shape and values, evaluating it (numpy's layout: nested brackets; an axis
// longer than 6 shows its first and last 3 elements around "..."); "Var()" when undefined.
// `std::cout << x` for a look while debugging; to_vector() for the values themselves.
std::ostream& operator<<(std::ostream& os, const Var& x);

}  // namespace metajit
#pragma GCC visibility pop
