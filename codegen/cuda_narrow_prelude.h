// metajit CUDA narrow-type prelude (codegen/cuda_narrow_prelude.h): a CUDA kernel whose buffers
// or values include Int8, UInt8, Int16, Float16 or BFloat16 carries this text after
// codegen/cuda_common_prelude.h (CudaEmitter::run), on both targets. The build embeds it as
// kCudaNarrowPrelude (CMakeLists.txt), so it may include no header.
//
// Half buffers hold CUDA's __half / __nv_bfloat16: from cuda_fp16.h and cuda_bf16.h on a GPU
// (the emitter includes them first), from the host emulation prelude otherwise
// (codegen/cuda_emulation_prelude.h, with CUDA's conversions). As in the C++ kernels
// (codegen/cpp_narrow_prelude.h), half values are computed in float and rounded to their type
// where stored or cast (docs/design.md §3); the emitter converts every read and write of a half
// buffer explicitly (__half2float, __float2half_rn, ...), never through the types' operators.
// Device functions: __float_as_uint is one, and kernels alone compute values.

// A float rounded to the half type, as a float.
__device__ __forceinline__ float mj_round_f16(float x) {
  return __half2float(__float2half_rn(x));
}
__device__ __forceinline__ float mj_round_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

// The float nearest to `d` toward zero with its last bit set where that is inexact (rounding to
// odd): rounded once more to a half type it gives the direct rounding of `d`, which a double ->
// float -> half conversion would not (base/dtype.cc round_to_odd_float).
__device__ __forceinline__ float mj_to_odd_float(double d) {
  const float f = (float)d;
  const unsigned u = __float_as_uint(f);
  const unsigned away = fabs((double)f) > fabs(d) ? 1u : 0u;
  const unsigned odd = (u - away) | 1u;
  return __uint_as_float((d == d && (double)f != d) ? odd : u);
}
__device__ __forceinline__ float mj_round_f16d(double d) {
  return mj_round_f16(mj_to_odd_float(d));
}
__device__ __forceinline__ float mj_round_bf16d(double d) {
  return mj_round_bf16(mj_to_odd_float(d));
}
