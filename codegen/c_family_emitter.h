// What the C++ and CUDA emitters share: KernelIR expressions and statements printed as C-family
// source (C++17 and CUDA C++ read them alike). Types, index expressions, element-wise ops,
// reduction identities and combiners, and one statement of a kernel body; the emitters add
// their own schedules (loops, threads, blocks) around these.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "codegen/extra_bounds.h"
#include "codegen/kernel_ir.h"

namespace metajit {

class CFamilyEmitter {
 public:
  // The two dialects differ only in how a few math builtins and infinities are written.
  enum class Dialect { Cpp, Cuda };

  CFamilyEmitter(const KernelIR& ir, Dialect dialect) : ir_(ir), dialect_(dialect) {}
  virtual ~CFamilyEmitter() = default;

  // The C type a value of `t` is computed in: a half type's is float (rounded to it where it
  // is stored or cast: docs/design.md §3); storage_ctype is a buffer element's.
  static std::string ctype(DType t);
  // mj_f16 / mj_bf16 for the half types (codegen/cpp_narrow_prelude.h), else ctype.
  static std::string storage_ctype(DType t);
  // Float32 and the half types: the float functions and constants (expf, mj_max_nanf, ...).
  static bool single(DType t) { return t == DType::Float32 || is_half(t); }
  // Whether a kernel's buffers or values include an 8- or 16-bit type.
  static bool uses_narrow_types(const KernelIR& ir);
  // The first lines of every kernel of both dialects: `#define MJ_FN <qualifier>` ("static
  // inline" in C++, "MJ_HD" in CUDA), then codegen/integer_prelude.h (i64/u64 and the integer
  // helpers the printed expressions call: mj_div, mj_mod, mj_min, mj_max).
  static std::string integer_prelude(const std::string& qualifier);
  // After the integer prelude, when the kernel reads extras (Extra index expressions): one
  // bounds-checked reader per rank, mj_read<r>(buffer, dims..., indices...), which yields 0
  // without touching memory when an index is outside its dim (qualified MJ_FN).
  std::string extra_readers() const;
  // An index expression as C (i<k> loop variables, p<k> shape parameters, in<k> buffers);
  // division and modulo by anything but a non-zero constant go through mj_div/mj_mod (never
  // trap); an extra read goes through mj_read<r> (never out of bounds).
  std::string ix(const IndexExpr& e) const;

  // Extra reads in `b` (and in `more`) whose loop variables are all in `outer`, computed once
  // into i64 locals at `depth`, before the loop about to open: a gather's row id is then read
  // once per row, not once per SIMD lane (where the vectoriser turned every access of the row
  // into a gather instruction, measured). ix() prints those reads as their local until
  // forget_hoisted_extras().
  void hoist_extra_reads(const KBlock& b, const std::vector<IndexExprPtr>& more,
                         const std::set<int>& outer, int depth);
  void forget_hoisted_extras() { hoisted_extras_.clear(); }
  static std::string v(int id) { return "v" + std::to_string(id); }
  // float32 sums and products accumulate in double (see the emitters' headers).
  static DType acc_dtype(ReduceOp op, DType t);
  // The C type of an accumulator: integer sums and products accumulate unsigned, so that an
  // OpenMP reduction's combining step wraps too (see wrapping()).
  static std::string acc_ctype(ReduceOp op, DType t);
  // Int32/Int64 + - * and negation wrap, as constant folding and the reference interpreter
  // define them (docs/design.md): computed in the unsigned type of the same width, where
  // overflow is defined, and converted back (modular since C++20; GCC and NVCC always). Signed
  // overflow would be undefined behaviour in the generated kernel.
  static bool is_wrapping(DType t) {
    return t == DType::Int32 || t == DType::Int64 || t == DType::Int8 || t == DType::UInt8 ||
           t == DType::Int16;
  }
  static std::string wrapping(const std::string& T, DType t, const std::string& a, const char* op,
                              const std::string& b);

 protected:
  void line(int depth, const std::string& s) {
    out_ += std::string(2 * size_t(depth + indent_), ' ') + s + "\n";
  }
  // Added to every line's depth: a schedule emitted inside a run-time branch.
  int indent_ = 0;
  // Row-major strides of a buffer: name_s<k> = product of dims after k; the last is 1.
  void strides(const std::string& name, const KBuffer& b, int depth = 1);
  std::string offset(const std::string& name, const std::vector<IndexExprPtr>& idx) const;
  // offset()'s two parts while int_lanes_ is set: the i64 part no lane indexes (`wide`, empty
  // for none) and the int part the lanes index (`lanes`); false where no index reads a lane.
  bool lane_offset(const std::string& name, const std::vector<IndexExprPtr>& idx, std::string& wide,
                   std::string& lanes) const;

  std::string identity(ReduceOp op, DType t) const;
  // acc <- op(acc, x), NaN-propagating for float max/min like numpy.
  std::string combine(ReduceOp op, DType t, const std::string& acc, const std::string& x) const;
  std::string narrow_ix(const IndexExpr& e) const;
  std::string load_expr(const KStmt& st) const;
  std::string float_extremum(bool max, DType t, const std::string& a, const std::string& b) const;
  std::string unary(UnaryOp op, DType t, const std::string& x) const;
  std::string binary(BinaryOp op, DType operand, const std::string& a, const std::string& b) const;
  // shift_left / shift_right of `t` values, defined for every amount (meta_ops/node.h).
  static std::string shift(bool left, DType t, const std::string& a, const std::string& b);
  std::string scalar_arg(DType t, int slot) const;
  // A KOp::Cast of value `x` (dtype `from`) to `to`, with the reference interpreter's rules.
  static std::string cast_expr(DType to, DType from, const std::string& x);
  static std::string scalar_local(int slot, DType t);  // its name once in scalar_locals_

  void block(const KBlock& b, int depth);
  // One statement: `const T v<id> = ...;` (Guard: an if/else; Reduce: reduce_stmt()).
  virtual void stmt(const KStmt& st, int depth);
  // A Reduce statement as loops run by one thread (the emitters override or call it).
  virtual void reduce_stmt(const KStmt& st, int depth);
  // Below this many iterations a reduction's innermost loop runs without its SIMD pragma.
  static constexpr int kMinSimdReduceExtent = 8;
  // The loops of a sequential Reduce: `pragma` (may be empty) goes before the innermost one.
  void sequential_reduce(const KStmt& st, int depth, const std::string& innermost_pragma,
                         const std::string& outermost_pragma);
  // Hook inside a sequential Reduce's innermost loop, after its body (CPU: scratch rows).
  virtual void reduce_body_extra(const KStmt& /*st*/, int /*depth*/) {}
  // Hook for the innermost loop of a Reduce that no thread splits and whose loop takes the SIMD
  // pragma `simd`: true when it wrote that loop another way (CPU: in sub-ranges of its guards),
  // false, writing nothing, to keep the plain and SIMD loops.
  virtual bool custom_innermost_reduce(const KStmt& /*st*/, const std::string& /*simd*/,
                                       int /*depth*/) {
    return false;
  }
  // for (i = from; i < to; ++i) over `stmts` (the Reduce's body, or that body rewritten),
  // accumulating into acc<id>, with `pragma` (may be empty) before it.
  void reduce_loop(const KStmt& st, const std::vector<KStmt>& stmts, const std::string& from,
                   const std::string& to, const std::string& pragma, int depth);

  const KernelIR& ir_;
  Dialect dialect_;
  std::string out_;
  // Scalar arguments (slot, dtype) already converted into named locals (C++ emitter); others
  // are read from `S` where used.
  std::set<std::pair<int, DType>> scalar_locals_;
  std::map<int, DType> dtypes_;  // value id -> dtype of the values emitted so far
  std::map<std::string, std::string> hoisted_extras_;  // ix_to_string(read) -> its local
  // While set, ix() prints these extra reads as plain loads and these tests as true (the
  // in-bounds version of a map kernel's loop nest, codegen/extra_bounds.h).
  const InBoundsVersion* in_bounds_ = nullptr;
  // While set, offset() computes the part of a read's offset that these loop variables index
  // in int: the lanes of a flat strip, gathered (codegen/cpp_flat_strips.cc; g++ 12 vectorises
  // no gather whose lanes' index is i64 arithmetic of values loaded from a table).
  std::set<int> int_lanes_;
  // While set (>= 0), the variable of the SIMD loop being printed (CppEmitter::generic_map's
  // innermost loop): a half element read across its lanes other than contiguously is gathered
  // as a 32-bit word (load_expr).
  int simd_var_ = -1;
  // While set, float16 elements are read one at a time with F16C (mj_f16_one,
  // codegen/cpp_narrow_prelude.h): statements outside a map nest's innermost loop, the innermost
  // ones where that loop is not SIMD (CppEmitter::generic_map, which also writes such a nest's
  // float16 outputs with mj_f16_set_one), and reduction windows too short for SIMD
  // (CppEmitter::partitioned_reduce); not the loops of other reductions.
  bool scalar_halves_ = false;
  int next_hoisted_extra_ = 0;
};

}  // namespace metajit
