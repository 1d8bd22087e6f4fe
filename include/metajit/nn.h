// Layers and their weights (shared/api.md "Layers, weights and the ops models need"). For now:
// the state dict type and the safetensors reader and writer (README "Weights (safetensors)");
// the nn::Module layers join this header later.
#pragma once
#include <map>
#include <string>

#include "var.h"

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit {

namespace nn {
// Named tensors, in name order: what a model's weights are saved as and loaded from.
using StateDict = std::map<std::string, Var>;
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
