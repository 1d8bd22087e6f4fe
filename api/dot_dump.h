// METAJIT_DUMP_DOT=DIR (README "Autograd", docs/api.md "Environment"): eval() draws every
// evaluation it runs as DIR/eval-<pid>-<N>.dot (N counts this process's evaluations from 1),
// and as DIR/eval-<pid>-<N>.svg next to it when Graphviz's `dot` is on PATH.
#pragma once
#include <functional>
#include <string>

namespace metajit {

// True when METAJIT_DUMP_DOT is set.
bool dumping_dot();

// Writes the next dump: the DOT text `picture()` returns, atomically (a temporary file renamed
// into place), then its SVG when `dot` is on PATH. Never throws: the first failure (an
// unwritable directory, `picture` throwing, `dot` failing) is a warning and evaluation goes on.
void dump_dot(const std::function<std::string()>& picture);

}  // namespace metajit
