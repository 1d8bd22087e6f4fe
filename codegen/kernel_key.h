// The kernel key of docs/design.md §5: XXH3-128 over labelled, length-prefixed fields (codegen
// version, backend, kernel IR, toolchain identity, flags), written as 32 hex digits. Two
// kernels share a key exactly when they would have the same source and binary.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace metajit {

// Bump when the emitted source for the same IR changes.
// 17: scatters split an independent target loop between threads; 18: speculative gather loads;
// 19: their row tests hoisted; 20: contraction operands with a prologue (element-wise work on
// hoisted row values, computed while packing); 21: AVX-512 contractions of 64 to 255 columns
// whose 64-wide panels are at most a quarter padding (128, 192) take the 6x64 tile; 22: exp
// guarded against libmvec's slow lanes (mj_expf), transcendental prologues packed in branch-free
// row loops, gathers packed along the reduction; 23: contraction row blocks in whole rounds of
// the threads (mj_row_blocks); 24: operands computing a transcendental, or a prologue or
// non-affine row tests on rows along memory, packed through the branch-free row buffer (packed
// once: in groups of panels of at least 64 rows), a reindex's row tests checked once per group;
// 25: row-major operands packed along the reduction also as plain copies, operands packed once
// per launch only when several blocks use them, the micro-kernel's loop unrolled by 4, the
// innermost loop run in chunks of a constant divisor of its index (codegen/division_chunks.h)
// 26: whole panels of unguarded operands packed with plain (not masked) loads, operands along
// memory packed once per launch in groups of panels; 27: the prelude declares erf, log1p,
// expm1, tan, atan, asin and acos SIMD-callable (libmvec); 28: log1p, asin and acos guarded
// against libmvec's scalar path outside their domains (mj_log1pf, mj_asinf, mj_acosf); 29: a
// chunked innermost loop run in sub-ranges where its guards are constants, each top-level
// guard's values computed by a loop of its own (codegen/guard_intervals.h); 30: whole panels of
// a row-major A copied all rows in one loop along the steps (interleaved_panel); 31: the row
// tests of nested guards hoisted and spanned in packing across rows too (hoist_guard_tests);
// 32: contraction row blocks within one tile of each other, as many as even the threads' rounds;
// 33: B panels read along the reduction packed through a tile transposed in registers; 34: A
// panels read along the reduction through the tile too, interleaved in registers; 35: a chunk
// whose numerator is negative at its first element runs that element on its own only when the
// numerator's terms are read outside its reindex's i + c >= 0 test (read_only_where_nonnegative),
// and the preludes' text from codegen/cpp_kernel_prelude.h and cpp_contraction_prelude.h, whose
// comments now come with it; 36: a reduction whose guards each hold on an interval of its
// innermost loop run in sub-ranges where they are constants, a failing guard's value taken once
// where that is exact (partitioned_reduce in codegen/cpp_reductions.cc); 37: on 16-float targets
// its passed sub-range rounded up to whole vectors, the guard tested past its end; 38: a
// contraction's blocks shared among the threads statically; (39 was the lambda loop nests of
// b41c886, reverted: caches may hold its kernels) 40: float32 exp (and sigmoid's) inline in the
// prelude, not libmvec's expf (mj_expf in codegen/cpp_kernel_prelude.h); 41: a second version
// of a map kernel's loop nest whose extra reads at the loops' own variables load without bounds
// tests, run when every loop's extent fits (codegen/extra_bounds.h); 42: the integer prelude's
// text from codegen/integer_prelude.h, its functions and the extra readers qualified MJ_FN; 43:
// a contraction's fallback nest (no scratch memory) printed once for both tiles, its
// reductions without SIMD; 44: a merged-columns piece whose guards' row tests are affine packs
// the interval passing them in a vector loop, its ends under the guards; 45: operands read
// along the innermost loop of a reduction over several loops pack along it in runs of that
// loop (a convolution's weight gradient), and a block of steps failing its guards copies the
// interval passing them without tests; 46: each operand of a contraction (columns not merged)
// packed by one function (MJ_PACK_FN) that the packing once per launch and the packing per
// block call, shared by both tiles where the panel width is the same; 47: window reductions
// (pooling) strip-mined over the innermost output loop from 16 columns, each window step's
// bounds tests an interval of the strip; 48: a block of one reduction loop whose bounds fail
// at an end packs under masked loads again (45's interval scan only for runs of several
// loops: a causal mask's half row ran scalar); 49: atan called as mj_atan(f), libm's symbol under
// a name g++ does not fold (cos(atan(NaN)) was 0); 50: float selects, relu and NaN-propagating
// max and min through the prelude's branch-free mj_selectf, mj_reluf, mj_max_nanf, ...; a
// reindex's compound bounds tests (i*2+k, i/2) dropped in the in-bounds version where their range
// over the loops fits (codegen/extra_bounds.h); (x/c)*c + x%c read as x; 51: in that version a
// load's last index that divides computed in int (a gather g++ vectorises), a reduction's two
// innermost loops over trailing axes read plainly coalesced (codegen/loop_coalescing.h); 52: an
// operand packed once per launch in fewer panel groups than threads splits its reduction among
// them (pack_operand_once); merged columns of short rows whose loads are contiguous along them
// pack a panel at a time through column tables (pack_merged_flat); 53: window reductions over
// rows narrower than 16 outputs run the loops after the first as one strip through tables in
// the version without bounds tests (codegen/cpp_flat_strips.cc); 54: 52's column tables for rows
// of at most one vector (16 floats on AVX-512, 8 on AVX2), not 16 on every target; 55: 53's
// flat strips only where the strip's indexes divide by constants (ix_plain_arithmetic), as the
// int index of 51: a division by a variable is mj_div in i64, never a plain int `/`; 56: a
// stride-1 convolution's B read by the wide tile from a table of its input over the windows
// (codegen/direct_columns.h, codegen/cpp_direct_columns.cc) where its rows allow; 57: a
// convolution's weight gradient ([kh, kw, oc, ic]) packs B once for every tap over its
// reduction widened by the taps (DirectSteps); the contraction prelude keeps four scratch slots;
// 58: 56's table for strided convolutions too, a plane per phase of the taps (the 7x7 stride-2
// stem); 57's for a single outer iteration too (a 1x1 kernel's weight gradient); 59: the direct
// tiles' step offsets walked as an odometer, not two divisions a step; 60: 57's tile runs every
// tap inside each reduction block of a work item (a block of rows, one panel of columns, a part
// of the reduction; the parts' sums added in order), where A reads no outer loop; 61: a float
// converts to Int32/Int64 through integer_prelude.h's mj_float_to_int (0 out of range or NaN,
// as the reference; a C++ conversion was undefined there), which every kernel's prelude carries;
// 62: Int32 sums of 8-bit products (matmul of Int8 / UInt8) are contractions on AVX2 and
// AVX-512 (int16 pairs by vpmaddwd; byte quads by vpdpbusd with VNNI), not plain loops; the
// bfloat16 pairs (vdpbf16ps) came with the AVX512_BF16 target id, which no key held before;
// 63: float16 strips widened and narrowed by F16C (codegen/half_strips.h); 64: half elements
// read across SIMD lanes as 32-bit words (mj_half_word); 65: casts to a half type from Bool,
// Int8 and UInt8 are plain conversions, exact there (CFamilyEmitter::cast_expr); 66: a shifted
// half read (i - 1) is contiguous (codegen/half_strips.cc contiguous_along), not a gather; 67:
// float16 elements outside SIMD loops convert one at a time by F16C (mj_f16_one / mj_f16_set_one)
inline constexpr const char* kCodegenVersion = "cpp-67";

class KernelKeyBuilder {
 public:
  KernelKeyBuilder& field(const std::string& label, const std::string& value);
  std::string hex() const;  // 32 lowercase hex digits

 private:
  std::string bytes_;
};

// Key of a kernel whose canonical IR text is `ir_text`, for `backend` ("cpu"/"cuda") built by
// the toolchain described by `toolchain_identity` (which includes the flags).
std::string kernel_key(const std::string& backend, const std::string& ir_text,
                       const std::string& toolchain_identity);

}  // namespace metajit
