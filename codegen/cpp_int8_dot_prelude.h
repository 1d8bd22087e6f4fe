// metajit 8-bit dot-product prelude (codegen/cpp_int8_dot_prelude.h): a contraction kernel of
// Int32 sums of 8-bit products (matmul of Int8 / UInt8 operands) carries this text after
// codegen/cpp_contraction_prelude.h, before its micro-kernels (codegen/cpp_step_groups.cc).
// Embedded as kCppInt8DotPrelude (CMakeLists.txt), so it may include no header.
//
// The packing writes float32 panels of the operands' Int32 values (exact: each is an 8-bit
// value; codegen/cpp_packing.cc, step k of a panel of w rows or columns at p[k * w]), which are
// then grouped in place, one of two ways (codegen/cpu_schedule.h):
// - int8_quads, on AVX512-VNNI with an Int8 B: mj_quad_bytes. Byte j of word t of quad q holds
//   step 4q + j's value t plus `shift`, modulo 256 (0 past the last step, so a reduction that
//   is no multiple of 4 pads with zero products), multiplied by vpdpbusd, which takes unsigned
//   bytes times signed ones: A is the unsigned side (an Int8 A shifted by 128, taken back in
//   the epilogue through B's column sums, mj_quad_column_sums), B the signed one.
// - int16_pairs, on AVX2 and AVX-512 otherwise: mj_pair_int16 (mj_pair_steps,
//   codegen/cpp_contraction_prelude.h). Word t of pair q holds step 2q's value t as an int16 in
//   its low half and step 2q + 1's in its high half, multiplied by vpmaddwd (two exact products
//   a lane, added in Int32): any 8-bit value fits, no shift.
// Group q is written over step q's floats: for q == 0 after they are read, in the same lane;
// for q > 0 they are steps the groups before q read already, and the steps q reads lie past
// them. A panel keeps its place and stride.
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

static inline unsigned mj_int16_of(unsigned float_bits) {
  return (unsigned)(int)__builtin_bit_cast(float, float_bits) & 0xffffu;
}
static inline void mj_pair_int16(unsigned* p, i64 w, i64 kn) {
  mj_pair_steps(p, w, kn, mj_int16_of);
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

// The vector parts only where the target has them: every kernel that groups its panels is
// compiled for AVX2 or AVX-512 (and AVX512-VNNI for quads); the project's own build compiles
// the rest of this file without them (tests/prelude_compile_check.cc). Each compiler's builtins,
// which it schedules and allocates registers for like its own arithmetic.
#if defined(__AVX2__)
// 8 Int32 lanes (AVX2's int16 pairs), unaligned loads and stores, and acc + vpmaddwd(u, s).
typedef int mj_v8i __attribute__((vector_size(32)));
typedef short mj_v16h __attribute__((vector_size(32)));
static inline mj_v8i mj_ldi8(const void* p) {
  mj_v8i v;
  __builtin_memcpy(&v, p, 32);
  return v;
}
static inline void mj_sti8(void* p, mj_v8i v) {
  __builtin_memcpy(p, &v, 32);
}
static inline mj_v8i mj_madd8(mj_v8i acc, mj_v8i u, mj_v8i s) {
  return acc + (mj_v8i)__builtin_ia32_pmaddwd256((mj_v16h)u, (mj_v16h)s);
}
#endif
#if defined(__AVX512F__)
// 16 Int32 lanes: the AVX-512 micro-kernels' accumulators, unaligned loads and stores, and
// acc + vpmaddwd(u, s) on int16 pairs (AVX512BW; without it, the same sums by shifts and
// vpmulld).
typedef int mj_v16i __attribute__((vector_size(64)));
typedef short mj_v32h __attribute__((vector_size(64)));
static inline mj_v16i mj_ldi(const void* p) {
  mj_v16i v;
  __builtin_memcpy(&v, p, 64);
  return v;
}
static inline void mj_sti(void* p, mj_v16i v) {
  __builtin_memcpy(p, &v, 64);
}
static inline mj_v16i mj_madd16(mj_v16i acc, mj_v16i u, mj_v16i s) {
#if defined(__AVX512BW__) && defined(__clang__)
  return acc + (mj_v16i)__builtin_ia32_pmaddwd512((mj_v32h)u, (mj_v32h)s);
#elif defined(__AVX512BW__)
  return acc + (mj_v16i)__builtin_ia32_pmaddwd512_mask((mj_v32h)u, (mj_v32h)s, mj_v16i{},
                                                       (unsigned short)0xffff);
#else
  return acc + ((u << 16) >> 16) * ((s << 16) >> 16) + (u >> 16) * (s >> 16);
#endif
}
#endif
#if defined(__AVX512VNNI__)
// acc[t] + the four products of the unsigned bytes of u[t] with the signed bytes of s[t]
// (vpdpbusd: exact, the sum wrapping in Int32).
static inline mj_v16i mj_dpbusd(mj_v16i acc, mj_v16i u, mj_v16i s) {
#if defined(__clang__)
  return __builtin_ia32_vpdpbusd512(acc, u, s);
#else
  return __builtin_ia32_vpdpbusd_v16si(acc, u, s);
#endif
}
#endif
