// metajit CUDA host emulation prelude (codegen/cuda_emulation_prelude.h)
//
// Placed in front of the restricted CUDA the CUDA emitter writes (CudaTarget::HostEmulation), it
// lets plain g++ compile that source into a host shared library whose kernels run on the CPU,
// each block's threads as cooperative fibers of the scheduler in the metajit library
// (runtime/cuda_emulation_scheduler.cc, through codegen/cuda_emulation_abi.h, whose text the
// build writes in place of the #include below: kernels compile from the cache alone). The build
// embeds this file as kCudaEmulationPrelude (CMakeLists.txt); its hash is part of every emulated
// kernel's key.
//
// Language: the CUDA qualifiers become C++. __global__ and __device__ mark kernels, device
// functions (also member functions of functors), and namespace-scope device variables alike, so
// they expand to hidden visibility, not `static`: that works in all three places and keeps every
// such symbol out of the .so's dynamic symbol table (only metajit_kernel, which the emitted
// source defines, and metajit_emulation_bind are exported). The prelude's own helpers have
// internal linkage (anonymous namespace, static inline), so kernel libraries that each carry a
// copy load side by side (RTLD_LOCAL). Math is declared as libm's C functions (no <cmath>: every
// emulated kernel compiles this text).
//
// State: threadIdx/blockIdx/blockDim/gridDim are thread_local here, set by the scheduler (through
// the pointers each launch passes) before it resumes a thread. __shared__ is `static
// thread_local`: blocks of a launch run one after another on one OS thread, so each OS thread's
// copy is the block's shared memory, and two OS threads running kernels at once (different
// libraries, or the same one) never share it. Shared memory is not cleared between blocks or
// launches (on a GPU its contents are undefined). __device__ variables are ordinary (per library,
// per process) like device memory: launches of one library from two OS threads at once share
// them, as launches on one GPU would.
//
// Atomics are __atomic builtins (float and double by compare-and-swap): threads only switch at
// rendezvous, so even plain read-modify-write would be atomic among them; the builtins also keep
// the compiler from moving memory accesses across them.
#ifndef METAJIT_CUDA_EMULATION_PRELUDE_H
#define METAJIT_CUDA_EMULATION_PRELUDE_H

#include "codegen/cuda_emulation_abi.h"

#define MJ_EMU_HIDDEN __attribute__((visibility("hidden")))
#define MJ_EMU_FN [[maybe_unused]] static inline
#define MJ_EMU_IN [[maybe_unused]] inline
#define __global__ MJ_EMU_HIDDEN
#define __device__ MJ_EMU_HIDDEN
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define MJ_HD inline MJ_EMU_HIDDEN
#define MJ_INFF __builtin_inff()
#define MJ_INF __builtin_inf()
#define MJ_UNROLL
#define MJ_LAUNCH(kernel, grid, block, ...) \
  ::mjemu::launch(#kernel, kernel, dim3(grid), dim3(block), ##__VA_ARGS__)

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
// The 16-byte vectors of element-wise kernels (codegen/cuda_emitter.cc, vec4_kernel).
struct float4 {
  float x, y, z, w;
};
struct int4 {
  int x, y, z, w;
};
MJ_EMU_FN float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
MJ_EMU_FN int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
[[maybe_unused]] static constexpr int warpSize = 32;
[[maybe_unused]] static thread_local uint3 threadIdx;
[[maybe_unused]] static thread_local uint3 blockIdx;
[[maybe_unused]] static thread_local dim3 blockDim;
[[maybe_unused]] static thread_local dim3 gridDim;

extern "C" {
float expf(float) noexcept;
float logf(float) noexcept;
float sinf(float) noexcept;
float cosf(float) noexcept;
float tanhf(float) noexcept;
float powf(float, float) noexcept;
float sqrtf(float) noexcept;
float fabsf(float) noexcept;
float floorf(float) noexcept;
float erff(float) noexcept;
float log1pf(float) noexcept;
float expm1f(float) noexcept;
float tanf(float) noexcept;
float atanf(float) noexcept;
float asinf(float) noexcept;
float acosf(float) noexcept;
double exp(double) noexcept;
double log(double) noexcept;
double sin(double) noexcept;
double cos(double) noexcept;
double tanh(double) noexcept;
double pow(double, double) noexcept;
double sqrt(double) noexcept;
double fabs(double) noexcept;
double floor(double) noexcept;
double erf(double) noexcept;
double log1p(double) noexcept;
double expm1(double) noexcept;
double tan(double) noexcept;
double atan(double) noexcept;
double asin(double) noexcept;
double acos(double) noexcept;
}

namespace {
namespace mjemu {

// The scheduler, set by metajit_emulation_bind when the library is loaded.
const mjemu_runtime* g_runtime = nullptr;

MJ_EMU_IN const mjemu_runtime& runtime() {
  if (!g_runtime) __builtin_trap();  // loaded without runtime/loader.cc: nothing to run threads
  return *g_runtime;
}

template <class F> void invoke(void* f) { (*static_cast<F*>(f))(); }

// The arguments are evaluated once, here; every thread gets its own copy of them as parameters.
template <class... P, class... A>
MJ_EMU_IN void launch(const char* name, void (*kernel)(P...), dim3 g, dim3 b, A&&... a) {
  auto call = [kernel, a...]() mutable { kernel(a...); };
  const mjemu_launch l{name,        {g.x, g.y, g.z}, {b.x, b.y, b.z}, &invoke<decltype(call)>,
                       &call,       &threadIdx,      &blockIdx,       &blockDim,
                       &gridDim};
  runtime().launch(&l);
}

// A warp shuffle of any value of up to 8 bytes, as its bits.
template <class T> inline T shuffle(T v, int src) {
  static_assert(sizeof(T) <= 8 && __is_trivially_copyable(T), "warp shuffle of this type");
  unsigned long long bits = 0;
  __builtin_memcpy(&bits, &v, sizeof(T));
  bits = runtime().shuffle(bits, src);
  T r;
  __builtin_memcpy(&r, &bits, sizeof(T));
  return r;
}

}  // namespace mjemu
}  // namespace

extern "C" __attribute__((visibility("default"))) int metajit_emulation_bind(
    const mjemu_runtime* runtime) {
  if (!runtime || runtime->version != MJEMU_ABI_VERSION) return 0;
  mjemu::g_runtime = runtime;
  return 1;
}

MJ_EMU_FN void __syncthreads() { mjemu::runtime().syncthreads(); }
MJ_EMU_FN void __syncwarp(unsigned = 0xffffffffu) { mjemu::runtime().syncwarp(); }
MJ_EMU_FN void __threadfence() { __asm__ volatile("" ::: "memory"); }
MJ_EMU_FN void __threadfence_block() { __asm__ volatile("" ::: "memory"); }

// Warp shuffles (the mask is not checked: every running lane of the warp must take part).
template <class T> MJ_EMU_FN T __shfl_sync(unsigned, T v, int src, int width = 32) {
  const unsigned lane = mjemu::runtime().lane(width, "__shfl_sync");
  return mjemu::shuffle(v, int((lane & ~unsigned(width - 1)) + (unsigned(src) & unsigned(width - 1))));
}
template <class T> MJ_EMU_FN T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
  const unsigned lane = mjemu::runtime().lane(width, "__shfl_up_sync");
  return mjemu::shuffle(v, delta <= (lane & unsigned(width - 1)) ? int(lane - delta) : -1);
}
template <class T> MJ_EMU_FN T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  const unsigned lane = mjemu::runtime().lane(width, "__shfl_down_sync");
  const unsigned l = lane & unsigned(width - 1);
  return mjemu::shuffle(v, delta < unsigned(width) - l ? int(lane + delta) : -1);
}
template <class T> MJ_EMU_FN T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
  const unsigned lane = mjemu::runtime().lane(width, "__shfl_xor_sync");
  const unsigned src = lane ^ unsigned(mask);
  return mjemu::shuffle(v, src < (lane & ~unsigned(width - 1)) + unsigned(width) ? int(src) : -1);
}

// Bit casts.
namespace {
namespace mjemu {
template <class To, class From> inline To bit_cast(From x) {
  static_assert(sizeof(To) == sizeof(From), "bit cast between types of different sizes");
  To r;
  __builtin_memcpy(&r, &x, sizeof r);
  return r;
}
}  // namespace mjemu
}  // namespace
MJ_EMU_FN unsigned __float_as_uint(float x) { return mjemu::bit_cast<unsigned>(x); }
MJ_EMU_FN float __uint_as_float(unsigned x) { return mjemu::bit_cast<float>(x); }
MJ_EMU_FN int __float_as_int(float x) { return mjemu::bit_cast<int>(x); }
MJ_EMU_FN float __int_as_float(int x) { return mjemu::bit_cast<float>(x); }
MJ_EMU_FN long long __double_as_longlong(double x) { return mjemu::bit_cast<long long>(x); }
MJ_EMU_FN double __longlong_as_double(long long x) { return mjemu::bit_cast<double>(x); }

// The half types of cuda_fp16.h and cuda_bf16.h and the conversions the CUDA emitter calls (it
// converts every read and write of a half buffer explicitly: codegen/cuda_emitter_internal.h,
// element_ctype), with CUDA's results: float to half rounds to nearest even, overflow gives
// Inf, and a NaN becomes CUDA's canonical 0x7fff (the CPU kernels keep its payload's top
// bits: docs/design.md §3); half to float is exact.
struct __half {
  unsigned short __x;
};
struct __nv_bfloat16 {
  unsigned short __x;
};
MJ_EMU_FN unsigned short __half_as_ushort(__half h) { return h.__x; }
MJ_EMU_FN __half __ushort_as_half(unsigned short b) { return __half{b}; }
MJ_EMU_FN unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
MJ_EMU_FN __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) { return __nv_bfloat16{b}; }
MJ_EMU_FN float __half2float(__half h) {
  const unsigned a = h.__x & 0x7fffu, sign = (h.__x & 0x8000u) << 16;
  unsigned mag;
  if (a >= 0x7c00u)
    mag = (a << 13) | 0x7f800000u;  // Inf, NaN keeping its payload
  else if (a >= 0x400u)
    mag = (a << 13) + (112u << 23);
  else
    mag = __float_as_uint(float(int(a)) * 0x1p-24f);  // subnormal: a x 2^-24
  return __uint_as_float(mag | sign);
}
MJ_EMU_FN __half __float2half_rn(float f) {
  const unsigned u = __float_as_uint(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return __half{0x7fffu};
  unsigned mag;
  if (a >= 0x47800000u)  // 65536 and above; from 65520 the carry below gives Inf as well
    mag = 0x7c00u;
  else if (a >= 0x38800000u)  // normal: drop 13 bits, to nearest even
    mag = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  else  // below 2^-14: multiples of 2^-24, rounded by the float addition of 0.5 (ulp 2^-24)
    mag = __float_as_uint(__uint_as_float(a) + 0.5f) - 0x3f000000u;
  return __half{(unsigned short)(mag | sign)};
}
MJ_EMU_FN float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float(unsigned(h.__x) << 16); }
MJ_EMU_FN __nv_bfloat16 __float2bfloat16_rn(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{0x7fffu};
  return __nv_bfloat16{(unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

// Atomics; each returns the old value.
#define MJ_EMU_ATOMIC_ADD(T) \
  MJ_EMU_FN T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
MJ_EMU_ATOMIC_ADD(int)
MJ_EMU_ATOMIC_ADD(unsigned)
MJ_EMU_ATOMIC_ADD(unsigned long long)
#undef MJ_EMU_ATOMIC_ADD
#define MJ_EMU_ATOMIC_CAS(T)                                                              \
  MJ_EMU_FN T atomicCAS(T* p, T cmp, T v) {                                               \
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
    return cmp;                                                                           \
  }
MJ_EMU_ATOMIC_CAS(int)
MJ_EMU_ATOMIC_CAS(unsigned)
MJ_EMU_ATOMIC_CAS(unsigned long long)
#undef MJ_EMU_ATOMIC_CAS
namespace {
namespace mjemu {
template <class T, class F> inline T atomic_update(T* p, F f) {
  T old, nv;
  __atomic_load(p, &old, __ATOMIC_SEQ_CST);
  do nv = f(old);
  while (!__atomic_compare_exchange(p, &old, &nv, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  return old;
}
}  // namespace mjemu
}  // namespace
MJ_EMU_FN float atomicAdd(float* p, float v) {
  return mjemu::atomic_update(p, [v](float o) { return o + v; });
}
MJ_EMU_FN double atomicAdd(double* p, double v) {
  return mjemu::atomic_update(p, [v](double o) { return o + v; });
}
MJ_EMU_FN int atomicMax(int* p, int v) {
  return mjemu::atomic_update(p, [v](int o) { return o > v ? o : v; });
}
MJ_EMU_FN int atomicMin(int* p, int v) {
  return mjemu::atomic_update(p, [v](int o) { return o < v ? o : v; });
}
MJ_EMU_FN unsigned atomicExch(unsigned* p, unsigned v) {
  return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}

#endif  // METAJIT_CUDA_EMULATION_PRELUDE_H
// ---- end of the emulation prelude ----
