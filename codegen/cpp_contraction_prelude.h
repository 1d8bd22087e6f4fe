// metajit C++ contraction helpers (codegen/cpp_contraction_prelude.h): every contraction
// kernel's source carries this text after codegen/cpp_kernel_prelude.h, before its micro-kernel
// (codegen/cpp_emitter.cc). Embedded as kCppContractionPrelude (CMakeLists.txt).
//
// Scratch memory a contraction keeps between launches: a fresh malloc of megabytes is a fresh
// mmap whose pages fault in on every launch (3 ms of a 16 ms 1024^3 matmul, measured). Each
// slot holds one buffer; a launch takes it (atomically, so concurrent launches never share one)
// and gives it back, keeping at most 64 MiB per slot; anything else is freed. Slots: 0 and 1
// the operands packed once (1 also a direct tile's window table), 2 the threads' blocks, 3 a
// direct tile's step offsets (codegen/cpp_direct_columns.cc).
static void* mj_slots[4];
static float* mj_take(int slot, unsigned long bytes) {
  void* p = __atomic_exchange_n(&mj_slots[slot], (void*)0, __ATOMIC_ACQ_REL);
  if (p && *(unsigned long*)p >= bytes) return (float*)((char*)p + 64);
  free(p);
  p = malloc(bytes + 64);
  if (!p) return 0;
  *(unsigned long*)p = bytes;
  return (float*)((char*)p + 64);
}
static void mj_give(int slot, float* q) {
  if (!q) return;
  void* p = (char*)q - 64;
  if (*(unsigned long*)p > (64UL << 20)) {
    free(p);
    return;
  }
  free(__atomic_exchange_n(&mj_slots[slot], p, __ATOMIC_ACQ_REL));
}
// A contraction's packing functions (CppEmitter::pack_function, codegen/cpp_contraction.cc):
// each compiled once, neither inlined into its two call sites nor cloned for their constant
// arguments (GCC's IPA-CP cloned every one, which compiled it twice again).
#if defined(__clang__)
#define MJ_PACK_FN static __attribute__((noinline))
#else
#define MJ_PACK_FN static __attribute__((noinline, noclone))
#endif
// Row blocks of a contraction: between `mb` and 2 * `mb` of them, each nonempty (`tiles` tiles
// in all, spread so that block sizes differ by at most one tile), as many as make the fewest
// tiles per thread when the work items (`per` of them per row block) go round the threads.
// 1024 rows in 11 blocks of 96 left one of 2 threads 6 blocks and the other 5 (a 1024x128 by
// 128x512 product at 171 GFLOP/s against oneDNN's 195, measured); 12 blocks of 14 or 15 tiles
// split them evenly.
static inline i64 mj_row_blocks(i64 mb, i64 per, i64 tiles) {
  const i64 nt = omp_get_max_threads();
  if (nt <= 1 || mb <= 0 || per <= 0) return mb;
  i64 best = mb, best_rounds = (per * mb + nt - 1) / nt;
  for (i64 b = mb + 1; b <= tiles && b <= 2 * mb; ++b) {
    const i64 rounds = (per * b + nt - 1) / nt;
    if (rounds * best < best_rounds * b) best = b, best_rounds = rounds;
  }
  return best;
}
// Two reduction steps a word (ContractionSchedule::steps_per_word, codegen/cpu_schedule.h):
// the packing writes float32 panels (codegen/cpp_packing.cc: step k of a panel of w rows or
// columns is p[k * w .. k * w + w)), which mj_pair_steps turns into pairs in place: word t of
// pair q holds half(step 2q's value t) in its low 16 bits and half(step 2q + 1's) in its high
// ones (0 past the last step, so an odd reduction pads with zeros). `half` takes a float's bits
// to 16 bits (codegen/cpp_bf16_dot_prelude.h: bfloat16; cpp_int8_dot_prelude.h: int16). Pair q
// is written over step q's floats: for q == 0 after they are read, in the same lane; for q > 0
// they are steps the pairs before q read already, and steps 2q and 2q + 1, which q reads, lie
// past them. A panel keeps its place and stride; it is (kn + 1) / 2 * w words long now.
template <class Half>
static inline void mj_pair_steps(unsigned* p, i64 w, i64 kn, Half half) {
  for (i64 q = 0; 2 * q < kn; ++q) {
    const unsigned* const lo = p + 2 * q * w;
    unsigned* const to = p + q * w;
    if (2 * q + 1 < kn) {
#pragma omp simd
      for (i64 t = 0; t < w; ++t) to[t] = half(lo[t]) | half(lo[w + t]) << 16;
    } else {
#pragma omp simd
      for (i64 t = 0; t < w; ++t) to[t] = half(lo[t]);
    }
  }
}
