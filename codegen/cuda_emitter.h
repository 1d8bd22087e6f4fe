// The CUDA emitter: KernelIR -> one .cu file holding the kernels of one fused group and an
// extern "C" metajit_kernel() host launcher with the signature every backend has (kernel_ir.h;
// buffers are device pointers, params and scalars host arrays passed by value in a struct).
// Same IR as the C++ emitter, other schedules:
//  - element-wise / broadcast / reindex: one thread per output element in a grid-stride loop,
//    32-bit index arithmetic when the output has fewer than 2^31 elements, 64-bit otherwise;
//  - a reduction fused with its row (softmax, layer norm, row sums): one block per row, every
//    reduction of the row a block reduction (warp shuffles, then shared memory), the row's
//    outputs shared by the block's threads;
//  - a reduction over outer axes (column sums): 32 columns per block, the reduced axis split
//    over the block's rows and, for tall inputs, over blocks whose partial results a second
//    kernel combines in a fixed order (deterministic, no atomics);
//  - a reduction over everything: per-block partials, then one block combines them;
//  - a sum of products whose operands each miss one output loop (matmul, conv2d): 128x128 or
//    64x64 output tiles, the operands staged through shared memory, 8x8 / 4x4 per thread;
//  - reindex_reduce: the output filled with the identity, then every source element combined
//    into its target with an atomic (atomicAdd where CUDA has it, a compare-and-swap loop
//    otherwise, on the containing 32-bit word for bool).
// The schedule pass (codegen/cuda_schedule.h) chooses which of these a kernel gets; the emitter
// prints them (one file per construct, the class in codegen/cuda_emitter_internal.h).
// The launcher picks among the kernels emitted for a group from the launch's shapes (shapes are
// arguments, not part of the key): e.g. a row reduction over 3 elements runs one thread per
// output instead of a block. Device scratch (partials) is static __device__ memory of the
// module: kernels run on the default stream, one at a time.
// With CudaTarget::HostEmulation the same kernels are preceded by the emulation prelude
// (codegen/cuda_emulation.h) instead of the CUDA one, for g++.
#pragma once
#include <string>

#include "codegen/kernel_ir.h"

namespace metajit {

enum class CudaTarget { Gpu, HostEmulation };

// Bump when the emitted CUDA source for the same IR changes (part of every CUDA key, with a
// hash of the emulation prelude for emulated kernels). 3: integer arithmetic wraps; 4: integer
// pow from the exact power (CUDA's double pow is not exact), 16-byte element-wise accesses;
// 5: 16-byte loads in row reductions; 6: the GPU and common preludes from headers
// (codegen/cuda_gpu_prelude.h, cuda_common_prelude.h), their comments now in the source; 7: the
// integer prelude from codegen/integer_prelude.h, its functions and the extra readers MJ_FN;
// 8: a float converts to Int32/Int64 through its mj_float_to_int (0 out of range or NaN, as
// the reference interpreter; the GPU's conversion saturated and the emulation's was undefined);
// 9: Int8, UInt8, Int16, Float16 and BFloat16 (__half / __nv_bfloat16 buffers, float values:
// codegen/cuda_narrow_prelude.h), half scalars rounded to their type, sub-word atomics.
// tests/test_cuda_codegen.cc pins the output to the version
// (a digest of every_pattern()'s kernels on both targets): a change without a bump fails there.
inline constexpr const char* kCudaCodegenVersion = "cuda-10";

std::string emit_cuda(const KernelIR& ir, CudaTarget target = CudaTarget::Gpu);

}  // namespace metajit
