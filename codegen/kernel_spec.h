// Kernel specs: a KernelIR as structured JSON and back. A spec is what meta.json and cache
// manifests store (docs/design.md §6), so that `metajit cache warm` and `cache verify --fix` can
// regenerate a kernel with the local code generator instead of trusting foreign source or
// binaries. Reading is strict: anything malformed is an Error naming the field, never a crash.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include "codegen/kernel_ir.h"

namespace metajit {

// Bump when the JSON form changes incompatibly; readers refuse other versions.
inline constexpr int kKernelSpecVersion = 1;

// {"version": 1, "kind": ..., "inputs": [...], "output": ..., "loops": [...], "body": ...,
//  ..., "ops": [...], "ir": serialize_ir(ir) (for people; ignored when read)}
// Buffers are {"dtype": "float32", "dims": [expr...]}, loops {"var": k, "extent": expr}, blocks
// {"stmts": [...], "result": id}; a statement carries kind, id, dtype and only the fields its
// kind uses, ops by name: {"kind": "binary", "id": 3, "dtype": "float32", "op": "add",
// "args": [1, 2]}. Index expressions are trees, never text: 5, {"i": 0} (loop variable),
// {"p": 1} (param slot), ["neg", e], ["add", a, b] (sub mul div mod lt le gt ge eq ne and or
// min max alike), ["select", c, a, b].
nlohmann::json kernel_spec_to_json(const KernelIR& ir);

// The IR described by `spec`. Throws Error ("kernel spec: <path>: <what is wrong>") when the
// JSON is not a valid spec: wrong version, unknown names, values of the wrong type, slot or
// value ids out of range, missing fields. serialize_ir(kernel_spec_from_json(
// kernel_spec_to_json(ir))) == serialize_ir(ir) for every IR the planner produces.
KernelIR kernel_spec_from_json(const nlohmann::json& spec);

}  // namespace metajit
