// metajit CUDA common prelude (codegen/cuda_common_prelude.h): integer pow, block reductions,
// lanes of vector loads, shared by both CUDA targets. It follows the target's prelude (GPU:
// codegen/cuda_gpu_prelude.h; host emulation: codegen/cuda_emulation_prelude.h) and the integer
// prelude (i64, mj_div, ...: CFamilyEmitter::integer_prelude) in every CUDA kernel's source. The
// build embeds it as kCudaCommonPrelude (CMakeLists.txt), so it may include no header; the
// tests' build compiles it after the emulation prelude with the project's warnings
// (tests/cuda_prelude_compile_check.cc), nvcc in the GPU kernel tests.
// Integer pow as the C++ target and the reference compute it, through double (NaN or
// out-of-range results give 0), but from the exact integer power rounded once to double: CUDA's
// double pow is accurate to 2 ulp only, and (int)pow(-3.0, 1.0) was -2 on an H200.
// 1e300 stands for a power out of every integer range (0^-1 included).
__device__ __forceinline__ double mj_pow_int(i64 a, i64 b) {
  if (b < 0) return a == 1 ? 1.0 : a == -1 ? ((b & 1) ? -1.0 : 1.0) : a == 0 ? 1e300 : 0.0;
  const bool negative = a < 0 && (b & 1);
  unsigned long long m = a < 0 ? 0ull - (unsigned long long)a : (unsigned long long)a, r = 1;
  for (;;) {
    if (b & 1) { if (m != 0 && r > ~0ull / m) return 1e300; r *= m; }
    b >>= 1;
    if (b == 0) break;
    if (m > 0xffffffffull) return 1e300;  // m * m, a factor of what is left, overflows
    m *= m;
  }
  return negative ? -(double)r : (double)r;
}
__device__ __forceinline__ int mj_pow_i32(i64 a, i64 b) { double r = mj_pow_int(a, b); return (r >= -2147483648.0 && r <= 2147483647.0) ? (int)r : 0; }
__device__ __forceinline__ i64 mj_pow_i64(i64 a, i64 b) { double r = mj_pow_int(a, b); return (r >= -9223372036854775808.0 && r < 9223372036854775808.0) ? (i64)r : 0; }
template <class T> __device__ __forceinline__ T mj_shfl_down(T v, int d) { return __shfl_down_sync(0xffffffffu, v, d); }
__device__ __forceinline__ bool mj_shfl_down(bool v, int d) { return __shfl_down_sync(0xffffffffu, (int)v, d) != 0; }
// Every thread of the block passes a value and gets op over all of them. Block sizes are
// multiples of 32 (whole warps); all threads must call it.
template <class T, class Op> __device__ T mj_block_reduce(T v, Op op, T ident) {
  __shared__ T mj_red[32];
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned lane = tid & 31u, warp = tid >> 5;
  const unsigned warps = (blockDim.x * blockDim.y * blockDim.z + 31u) >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, mj_shfl_down(v, o));
  if (lane == 0) mj_red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T x = lane < warps ? mj_red[lane] : ident;
    for (int o = 16; o > 0; o >>= 1) x = op(x, mj_shfl_down(x, o));
    if (lane == 0) mj_red[0] = x;
  }
  __syncthreads();
  const T total = mj_red[0];
  __syncthreads();
  return total;
}
// Lane k of a 16-byte vector (k a constant once MJ_UNROLL has unrolled the lane loop).
MJ_HD float mj_lane(const float4& v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }
MJ_HD int mj_lane(const int4& v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }
MJ_HD unsigned mj_blocks(i64 work, int threads, unsigned cap) { i64 b = (work + threads - 1) / threads; return (unsigned)(b < 1 ? 1 : (b > (i64)cap ? (i64)cap : b)); }
