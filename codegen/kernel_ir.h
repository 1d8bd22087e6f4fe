// Kernel IR: one fused group as a backend-neutral loop nest. It names no concrete shape or
// scalar value: extents are Param slots and scalars are Scalar slots, filled in at launch from
// KernelArgs. Its canonical serialisation (serialize_ir) is what the kernel key hashes, so equal
// IR means equal source; manifests store the kernel spec JSON instead (codegen/kernel_spec.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "meta_ops/index_expr.h"
#include "meta_ops/node.h"

namespace metajit {

enum class KOp : uint8_t {
  Load,    // buffer[index...]
  Scalar,  // scalar argument `slot`, converted to dtype
  Iota,    // the index expression index[0], converted to dtype
  Unary,
  Binary,
  Where,
  Cast,
  Guard,   // cond ? (value computed by body) : scalar argument `slot`   (reindex)
  Reduce,  // loops over `loops`, accumulating body's value with `op`   (reduce)
};

struct KBlock;

struct KLoop {
  int var = 0;          // loop variable i<var>
  IndexExprPtr extent;  // runs 0 <= i < extent
};

struct KStmt {
  KOp kind = KOp::Load;
  int id = 0;  // defines value v<id>
  DType dtype = DType::Float32;
  int op = 0;                       // UnaryOp / BinaryOp / ReduceOp
  int buffer = -1;                  // Load: input buffer slot
  int slot = -1;                    // Scalar, Guard: scalar argument slot
  std::vector<IndexExprPtr> index;  // Load: one per buffer axis; Iota: one
  std::vector<int> args;            // value ids (Binary: operand dtype is args' dtype)
  IndexExprPtr cond;                // Guard
  std::vector<KLoop> loops;         // Reduce
  std::shared_ptr<KBlock> body;     // Guard, Reduce
};

struct KBlock {
  std::vector<KStmt> stmts;
  int result = -1;  // value id the block yields
};

struct KBuffer {
  DType dtype = DType::Float32;
  std::vector<IndexExprPtr> dims;  // extents (usually Param slots); strides are row-major
};

// A further value a Map kernel writes: `value` (a top-level statement of the body) stored at the
// output's index into a buffer of the output's extents (codegen/output_merging.h).
struct KOutput {
  KBuffer buffer;
  int value = -1;
};

enum class KernelKind : uint8_t {
  Map,      // for each output index (loops over output dims): out[i] = body
  Scatter,  // out = identity; for each source index: out[target] = op(out[target], body)
};

struct KernelIR {
  KernelKind kind = KernelKind::Map;
  std::vector<KBuffer> inputs;
  KBuffer output;
  std::vector<KOutput> extra_outputs;  // Map only; buffers after the output's
  std::vector<KLoop> loops;  // Map: over output axes; Scatter: over the source space
  KBlock body;
  // Scatter only: target index per output axis, skip conditions, combining op.
  std::vector<IndexExprPtr> target;
  IndexExprPtr target_valid;     // true when the target is in range and no condition holds
  int scatter_op = 0;            // ReduceOp
  int num_params = 0;            // int64 arguments
  int num_scalars = 0;           // double arguments
  int num_vars = 0;              // loop variables i0 .. i<num_vars-1>
  std::vector<std::string> ops;  // the meta-ops fused here, for people (not part of the key)
};

// Values the kernel is launched with (never part of the key).
struct KernelArgs {
  std::vector<int64_t> params;
  std::vector<double> scalars;
};

// Canonical text of the IR (stable across processes); the kernel key hashes it.
std::string serialize_ir(const KernelIR& ir);

// Signature the generated function has in every backend:
//   extern "C" void metajit_kernel(void* const* buffers /* inputs..., output, extra outputs */,
//                                  const long long* params, const double* scalars);
inline constexpr const char* kKernelSymbol = "metajit_kernel";
using KernelFn = void (*)(void* const*, const long long*, const double*);

}  // namespace metajit
