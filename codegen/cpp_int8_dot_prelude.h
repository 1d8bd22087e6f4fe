// metajit 8-bit dot-product prelude (codegen/cpp_int8_dot_prelude.h): a contraction kernel whose
// schedule multiplies byte quads (ContractionSchedule::int8_quads, codegen/cpu_schedule.h: Int32
// sums of Int8 or UInt8 A by Int8 B on a target with AVX512-VNNI) carries this text after
// codegen/cpp_contraction_prelude.h, before its micro-kernels (CppEmitter::micro_kernel_int8,
// codegen/cpp_step_groups.cc). Embedded as kCppInt8DotPrelude (CMakeLists.txt), so it may include
// no header.
//
// The packing writes float32 panels of the operands' Int32 values (exact: each is an 8-bit
// value; codegen/cpp_packing.cc, step k of a panel of w rows or columns at p[k * w]);
// mj_quad_bytes turns one into the layout vpdpbusd multiplies, in place: byte j of word t of
// quad q holds step 4q + j's value t plus `shift`, modulo 256 (0 past the last step, so a
// reduction that is no multiple of 4 pads with zero products). A is the unsigned side (an Int8
// A shifted by 128), B the signed one. Quad q is written over step q's floats: for q == 0 after
// they are read, in the same lane; for q > 0 they are steps the quads before q read already,
// and the steps q reads (4q to 4q + 3) lie past them. A panel keeps its place and stride.
static inline unsigned mj_byte_of(unsigned float_bits, int shift) {
  return (unsigned)((int)__builtin_bit_cast(float, float_bits) + shift) & 0xffu;
}
static inline void mj_quad_bytes(unsigned* p, i64 w, i64 kn, int shift) {
  for (i64 q = 0; 4 * q < kn; ++q) {
    const unsigned* const s = p + 4 * q * w;
    unsigned* const to = p + q * w;
    const i64 n = kn - 4 * q;
    if (n >= 4) {
#pragma omp simd
      for (i64 t = 0; t < w; ++t)
        to[t] = mj_byte_of(s[t], shift) | mj_byte_of(s[w + t], shift) << 8 |
                mj_byte_of(s[2 * w + t], shift) << 16 | mj_byte_of(s[3 * w + t], shift) << 24;
    } else {
      for (i64 t = 0; t < w; ++t) {
        unsigned word = 0;
        for (i64 j = 0; j < n; ++j) word |= mj_byte_of(s[j * w + t], shift) << (8 * j);
        to[t] = word;
      }
    }
  }
}

// The sums of B's signed bytes per column over `kq` quads, for the 128 an Int8 A was shifted
// by: sums[p * w + t] (set when `first`, else added to) for column t of each of `np` panels of
// w words a quad, `ps` words apart. Int arithmetic wraps (-fwrapv), as the Int32 sums do.
static inline void mj_quad_column_sums(const unsigned* b, i64 ps, i64 np, i64 w, i64 kq, int* sums,
                                       int first) {
  for (i64 p = 0; p < np; ++p) {
    int* const s = sums + p * w;
    const unsigned* const bp = b + p * ps;
    if (first)
      for (i64 t = 0; t < w; ++t) s[t] = 0;
    for (i64 q = 0; q < kq; ++q) {
#pragma omp simd
      for (i64 t = 0; t < w; ++t) {
        const unsigned x = bp[q * w + t];
        s[t] += (signed char)x + (signed char)(x >> 8) + (signed char)(x >> 16) +
                (signed char)(x >> 24);
      }
    }
  }
}

// Only with AVX512-VNNI, which every kernel that multiplies byte quads is compiled for; the
// project's own build compiles the rest of this file without it (tests/prelude_compile_check.cc).
#if defined(__AVX512VNNI__)
// 16 Int32 lanes: the accumulators of the 8-bit micro-kernels, and unaligned loads and stores.
typedef int mj_v16i __attribute__((vector_size(64)));
static inline mj_v16i mj_ldi(const void* p) {
  mj_v16i v;
  __builtin_memcpy(&v, p, 64);
  return v;
}
static inline void mj_sti(void* p, mj_v16i v) {
  __builtin_memcpy(p, &v, 64);
}

// acc[t] + the four products of the unsigned bytes of u[t] with the signed bytes of s[t]
// (vpdpbusd: exact, the sum wrapping in Int32). The compilers' builtins, which they schedule
// and allocate registers for like their own arithmetic; both take Int32 vectors.
static inline mj_v16i mj_dpbusd(mj_v16i acc, mj_v16i u, mj_v16i s) {
#if defined(__clang__)
  return __builtin_ia32_vpdpbusd512(acc, u, s);
#else
  return __builtin_ia32_vpdpbusd_v16si(acc, u, s);
#endif
}
#endif
