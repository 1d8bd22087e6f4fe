#include "codegen/cuda_emulation.h"

namespace metajit {

// Design of the emulation prelude.
//
// Language: the CUDA qualifiers become C++. __global__ and __device__ mark kernels, device
// functions (also member functions of functors), and namespace-scope device variables alike, so
// they expand to hidden visibility, not `static`: that works in all three places and keeps every
// such symbol out of the .so's dynamic symbol table (only metajit_kernel, which the emitted source
// defines, is exported). The prelude's own machinery has internal linkage (anonymous namespace,
// static inline), so kernel libraries that each carry a copy load side by side (RTLD_LOCAL).
// Math is declared as libm's C functions (no <cmath>: every emulated kernel compiles this text).
//
// Threads: every thread of a block is a fiber with its own stack (MJ_EMU_STACK, 64 KiB, a page
// apart; one guard page under the lowest). Not a guard page under each: every library keeps its
// own stacks, and a process loading hundreds of kernel libraries would run out of memory
// mappings (vm.max_map_count) with two per stack. Generated kernels use a few hundred bytes.
// Fibers, not OS threads, because CUDA threads rendezvous at __syncthreads and warp shuffles over
// and over: a user-space switch costs nanoseconds, and running everything on the calling OS thread
// keeps a launch synchronous and reproducible. On x86-64 the switch is six callee-saved registers
// and the stack pointer (asm below); elsewhere, with -DMJ_EMU_UCONTEXT, or when a CET shadow stack
// is active (a plain `ret` onto another stack would fault there) it is ucontext's swapcontext:
// correct everywhere, ~15x slower (a syscall per switch). Stacks and the scheduler state are
// mapped once per OS thread and library and kept for later launches: mapping and
// first-touching 1024 stacks costs milliseconds, more than a small launch.
//
// Scheduling: blocks run one after another (blockIdx.x fastest). Within a block the scheduler
// makes passes; a pass resumes every ready fiber, each until it parks at a rendezvous or returns.
// A rendezvous completes when every thread that has not returned has reached it: __syncthreads
// for the block; a warp shuffle (twice: values deposited, then read, so no slot is overwritten
// before everyone read it) or __syncwarp for the warp. Threads released by a barrier run in the
// next pass; a warp whose shuffle completed runs on at once, as warps run ahead of each other on
// a GPU. Threads that returned count as arrived, so they never hold up the others; a pass with
// nothing ready while threads remain is a deadlock (divergent barrier or shuffle), reported on
// stderr before abort().
// Why the order of threads changes: code that reads another thread's shared-memory write without
// a __syncthreads in between sees the write or the stale value depending on which thread ran
// first. Under one fixed order (say ascending thread id) many such races would happen to work
// every time: a tree reduction reading s[t + o] is always right in descending order, a neighbour
// read of s[t - 1] in ascending order. So each pass uses a different pseudo-random permutation
// of the threads (and each warp continuation alternates its lane direction), seeded by block and
// pass: a missing barrier gives wrong results in some block or pass, deterministically, so the
// failure reproduces. MJ_EMU_SEED=<number> in the environment selects other schedules, for
// hunting a race that the default one happens to hide.
//
// State: the scheduler and threadIdx/blockIdx/blockDim/gridDim are thread_local, set by the
// scheduler before it resumes a fiber. __shared__ is `static thread_local`: blocks of a launch run
// one after another on one OS thread, so each OS thread's copy is the block's shared memory, and
// two OS threads running kernels at once (different libraries, or the same one) never share it.
// Shared memory is not cleared between blocks or launches (on a GPU its contents are undefined).
// __device__ variables are ordinary (per library, per process) like device memory: launches of
// one library from two OS threads at once share them, as launches on one GPU would.
//
// Atomics are __atomic builtins (float and double by compare-and-swap): fibers only switch at
// rendezvous, so even plain read-modify-write would be atomic among them; the builtins also keep
// the compiler from moving memory accesses across them.
const char* const kCudaEmulationPrelude =
    R"MJEMU(// metajit CUDA host emulation prelude (codegen/cuda_emulation.cc)
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

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
#define MJ_LAUNCH(kernel, grid, block, ...) \
  ::mjemu::launch(#kernel, kernel, dim3(grid), dim3(block), ##__VA_ARGS__)
#ifndef MJ_EMU_STACK
#define MJ_EMU_STACK 65536
#endif
#if defined(__x86_64__) && !defined(MJ_EMU_UCONTEXT)
#define MJ_EMU_X86 1
#endif

struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};
[[maybe_unused]] static constexpr int warpSize = 32;
[[maybe_unused]] static thread_local uint3 threadIdx;
[[maybe_unused]] static thread_local uint3 blockIdx;
[[maybe_unused]] static thread_local dim3 blockDim;
[[maybe_unused]] static thread_local dim3 gridDim;

extern "C" {
float expf(float) noexcept; float logf(float) noexcept; float sinf(float) noexcept;
float cosf(float) noexcept; float tanhf(float) noexcept; float powf(float, float) noexcept;
float sqrtf(float) noexcept; float fabsf(float) noexcept; float floorf(float) noexcept;
double exp(double) noexcept; double log(double) noexcept; double sin(double) noexcept;
double cos(double) noexcept; double tanh(double) noexcept; double pow(double, double) noexcept;
double sqrt(double) noexcept; double fabs(double) noexcept; double floor(double) noexcept;
char* getenv(const char*) noexcept;
}

#ifdef MJ_EMU_X86
// mjemu_switch_x86(save, to): pushes the callee-saved registers, stores rsp in *save, loads `to`
// (a stack this function saved, or a fresh frame: six zeros, the entry, a null return address).
// MXCSR and the x87 control word are not switched: kernels do not change them. A local symbol:
// not even the linker sees it.
extern "C" MJ_EMU_HIDDEN void mjemu_switch_x86(void** save, void* to);
__asm__(".pushsection .text\n.p2align 4\n"
        ".type mjemu_switch_x86, @function\nmjemu_switch_x86:\n"
        "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
        "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
        "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n"
        ".size mjemu_switch_x86, .-mjemu_switch_x86\n.popsection\n");
#endif

namespace {
namespace mjemu {

enum : unsigned char { kReady, kBarrier, kArrive, kDepart, kWarpSync, kDone };
constexpr int kMaxThreads = 1024;

struct Fiber { void* sp; uint3 idx; unsigned since; unsigned char state; };

struct Sched {
  int n, alive, bar, cur;  // threads, not returned, at __syncthreads, running
  int hot;                 // a warp whose rendezvous just completed, or -1
  unsigned pass;
  unsigned long long seed;
  bool use_uc;
  const char* kernel;
  void (*body)(void*);
  void* arg;
  char* stacks;
  unsigned long stride, stack;
  void* sched_sp;
  ucontext_t sched_uc;
  ucontext_t* uc;
  int warp_alive[32], wcnt[3][32];  // per warp: lanes not returned; at kArrive/kDepart/kWarpSync
  unsigned wgen[32];                 // shuffle round of the warp
  unsigned slot_gen[kMaxThreads];
  unsigned long long slot[kMaxThreads];
  Fiber f[kMaxThreads];
  unsigned short order[kMaxThreads];  // of this pass
};
thread_local Sched* g_cur = nullptr;

struct Msg {
  char buf[600];
  int len = 0;
  Msg& s(const char* t) { while (*t && len < 590) buf[len++] = *t++; return *this; }
  Msg& u(unsigned long long v) {
    char d[24]; int k = 0;
    do { d[k++] = char('0' + v % 10); v /= 10; } while (v);
    while (k && len < 590) buf[len++] = d[--k];
    return *this;
  }
  Msg& xyz(const char* name, unsigned x, unsigned y, unsigned z) {
    return s(name).s("(").u(x).s(", ").u(y).s(", ").u(z).s(")");
  }
};
[[noreturn]] MJ_EMU_IN void fail(Msg& m) {
  m.s("\n");
  if (write(2, "metajit CUDA emulation: ", 24) < 0 || write(2, m.buf, m.len) < 0) {}
  __builtin_abort();
}
MJ_EMU_IN Sched* need(const char* what) {
  Sched* S = g_cur;
  if (!S) { Msg m; fail(m.s(what).s(" called outside a kernel launch")); }
  return S;
}

// Scheduler side: run fiber t until it parks or returns.
MJ_EMU_IN void resume(Sched* S, int t) {
  threadIdx = S->f[t].idx;
  S->cur = t;
#ifdef MJ_EMU_X86
  if (!S->use_uc) { mjemu_switch_x86(&S->sched_sp, S->f[t].sp); return; }
#endif
  swapcontext(&S->sched_uc, &S->uc[t]);
}
// Fiber side: back to the scheduler; returns when resumed.
MJ_EMU_IN void park(Sched* S) {
  const int t = S->cur;
#ifdef MJ_EMU_X86
  if (!S->use_uc) mjemu_switch_x86(&S->f[t].sp, S->sched_sp); else
#endif
  swapcontext(&S->uc[t], &S->sched_uc);
  __asm__ volatile("" ::: "memory");
}

MJ_EMU_IN void release_barrier(Sched* S) {
  if (S->bar == 0 || S->bar != S->alive) return;
  for (int t = 0; t < S->n; ++t)
    if (S->f[t].state == kBarrier) { S->f[t].state = kReady; S->f[t].since = S->pass + 1; }
  S->bar = 0;
}
MJ_EMU_IN void release_warp(Sched* S, int w) {
  for (int k = 0; k < 3; ++k) {
    if (S->wcnt[k][w] == 0 || S->wcnt[k][w] != S->warp_alive[w]) continue;
    const int end = S->n < 32 * w + 32 ? S->n : 32 * w + 32;
    for (int t = 32 * w; t < end; ++t)
      if (S->f[t].state == kArrive + k) { S->f[t].state = kReady; S->f[t].since = S->pass; }
    S->wcnt[k][w] = 0;
    S->hot = w;
    if (k == 1) ++S->wgen[w];
  }
}
MJ_EMU_IN void barrier(const char* what) {
  Sched* S = need(what);
  S->f[S->cur].state = kBarrier;
  ++S->bar;
  release_barrier(S);
  park(S);
}
MJ_EMU_IN void warp_wait(Sched* S, unsigned char kind) {
  const int w = S->cur >> 5;
  S->f[S->cur].state = kind;
  ++S->wcnt[kind - kArrive][w];
  release_warp(S, w);
  park(S);
}
// All running lanes of the warp deposit v; each gets lane `src`'s value (own value if src < 0,
// or if that lane is outside the block or has returned).
template <class T> inline T shfl(Sched* S, T v, int src) {
  static_assert(sizeof(T) <= 8 && __is_trivially_copyable(T), "warp shuffle of this type");
  const int t = S->cur, w = t >> 5;
  unsigned long long bits = 0;
  __builtin_memcpy(&bits, &v, sizeof(T));
  S->slot[t] = bits;
  S->slot_gen[t] = S->wgen[w];
  warp_wait(S, kArrive);
  T r = v;
  const int s = 32 * w + src;
  if (src >= 0 && s < S->n && S->slot_gen[s] == S->wgen[w]) __builtin_memcpy(&r, &S->slot[s], sizeof(T));
  warp_wait(S, kDepart);
  return r;
}
MJ_EMU_IN unsigned lane_of(Sched* S, int width, const char* what) {
  if (width < 1 || width > 32 || (width & (width - 1))) {
    Msg m; fail(m.s(what).s(": width ").u(unsigned(width)).s(" is not a power of two <= 32"));
  }
  return unsigned(S->cur) & 31u;
}

MJ_EMU_IN void fiber_entry() {
  Sched* S = g_cur;
  S->body(S->arg);
  const int t = S->cur, w = t >> 5;
  S->f[t].state = kDone;
  --S->alive;
  --S->warp_alive[w];
  release_warp(S, w);
  release_barrier(S);
  park(S);
  __builtin_unreachable();
}

MJ_EMU_IN void run_block(Sched* S, unsigned long long linear) {
  const int n = S->n;
  const unsigned bx = blockDim.x, by = blockDim.y;
  for (int t = 0; t < n; ++t) {
    Fiber& f = S->f[t];
    f.idx = uint3{unsigned(t) % bx, unsigned(t) / bx % by, unsigned(t) / (bx * by)};
    f.state = kReady;
    f.since = 0;
    S->slot_gen[t] = ~0u;
    char* top = S->stacks + (unsigned long)(t + 1) * S->stride;
    if (S->use_uc) {
      ucontext_t* c = &S->uc[t];
      getcontext(c);
      c->uc_stack.ss_sp = top - S->stack;
      c->uc_stack.ss_size = S->stack;
      c->uc_link = nullptr;
      makecontext(c, fiber_entry, 0);
    } else {
      void** sp = reinterpret_cast<void**>(top) - 8;
      for (int k = 0; k < 6; ++k) sp[k] = nullptr;
      sp[6] = reinterpret_cast<void*>(&fiber_entry);
      sp[7] = nullptr;
      f.sp = sp;
    }
  }
  for (int w = 0; w < 32; ++w) {
    const int lanes = n - 32 * w;
    S->warp_alive[w] = lanes < 0 ? 0 : (lanes > 32 ? 32 : lanes);
    S->wcnt[0][w] = S->wcnt[1][w] = S->wcnt[2][w] = 0;
    S->wgen[w] = 0;
  }
  S->alive = n;
  S->bar = 0;
  S->hot = -1;
  for (S->pass = 0; S->alive > 0; ++S->pass) {
    // A fresh pseudo-random order every pass, seeded by block, pass and MJ_EMU_SEED.
    unsigned long long r = ((linear + 1) * 0x9E3779B97F4A7C15ull ^ (S->pass + 1) * 0xD1B54A32D192ED03ull) +
                           S->seed * 0x94D049BB133111EBull;
    for (int k = 0; k < n; ++k) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      const int j = int(((r & 0xffffffffull) * (unsigned long long)(k + 1)) >> 32);
      S->order[k] = S->order[j];
      S->order[j] = (unsigned short)k;
    }
    bool ran = false;
    for (int k = 0; k < n; ++k) {
      const int t = S->order[k];
      if (S->f[t].state != kReady || S->f[t].since > S->pass) continue;
      ran = true;
      resume(S, t);
      // A warp whose shuffle or __syncwarp completed runs on at once (warps run ahead of
      // each other on a GPU too), until its lanes park at something else.
      for (bool up = (r & 1) != 0; S->hot >= 0; up = !up) {
        const int w = S->hot, end = n < 32 * w + 32 ? n : 32 * w + 32;
        S->hot = -1;
        for (int l = 32 * w; l < end; ++l) {
          const int u = up ? l : end - 1 - (l - 32 * w);
          if (S->f[u].state == kReady && S->f[u].since <= S->pass) resume(S, u);
        }
      }
    }
    if (!ran) {
      int shfl = 0;
      for (int t = 0; t < n; ++t) shfl += S->f[t].state >= kArrive && S->f[t].state <= kWarpSync;
      Msg m;
      m.s("deadlock in kernel ").s(S->kernel).xyz(", block ", blockIdx.x, blockIdx.y, blockIdx.z);
      m.s(": ").u(unsigned(S->bar)).s(" threads wait at __syncthreads, ").u(unsigned(shfl));
      m.s(" at a warp shuffle or __syncwarp, ").u(unsigned(n - S->alive)).s(" returned");
      fail(m.s(" (a barrier or shuffle not reached by every running thread of its block or warp)"));
    }
  }
}

// Fiber stacks (one mapping, one guard page) and the scheduler, kept per OS thread for the next
// launch: mapping, guarding and first-touching them costs far more than a small launch.
struct Pool {
  char* mem = nullptr;
  unsigned long bytes = 0;
  int cap = 0;
  ~Pool() { if (mem) munmap(mem, bytes); }
};
thread_local Pool g_pool;

MJ_EMU_IN Sched* acquire(int n, const char* name) {
  Pool& P = g_pool;
  if (P.cap < n) {
    if (P.mem) munmap(P.mem, P.bytes);
    P.mem = nullptr;
    P.cap = 0;
    const unsigned long page = (unsigned long)sysconf(_SC_PAGESIZE);
    const unsigned long stack = (MJ_EMU_STACK + page - 1) / page * page, stride = stack + page;
    const unsigned long uc_at = (sizeof(Sched) + 63) / 64 * 64;
    const unsigned long head = (uc_at + sizeof(ucontext_t) * (unsigned long)n + page - 1) / page * page;
    const unsigned long bytes = head + stride * (unsigned long)n;
    void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (mem == MAP_FAILED) { Msg m; fail(m.s("MJ_LAUNCH(").s(name).s("): cannot map fiber stacks")); }
    P.mem = static_cast<char*>(mem);
    P.bytes = bytes;
    P.cap = n;
    mprotect(P.mem + head, page, PROT_NONE);  // one guard: a mapping per stack would add up
    Sched* S = reinterpret_cast<Sched*>(P.mem);
    S->uc = reinterpret_cast<ucontext_t*>(P.mem + uc_at);
    S->stacks = P.mem + head;
    S->stride = stride;
    S->stack = stack;
  }
  return reinterpret_cast<Sched*>(P.mem);
}

MJ_EMU_IN void run(const char* name, dim3 g, dim3 b, void (*body)(void*), void* arg) {
  if (g_cur) { Msg m; fail(m.s("MJ_LAUNCH(").s(name).s(") from inside a running kernel")); }
  if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z) return;
  const unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
  if (b.x > 1024 || b.y > 1024 || b.z > 64 || nt > kMaxThreads) {
    Msg m;
    fail(m.s("MJ_LAUNCH(").s(name).xyz("): block ", b.x, b.y, b.z)
             .s(" exceeds CUDA's limits (x, y <= 1024, z <= 64, x*y*z <= 1024)"));
  }
  if (g.x > 2147483647u || g.y > 65535 || g.z > 65535) {
    Msg m;
    fail(m.s("MJ_LAUNCH(").s(name).xyz("): grid ", g.x, g.y, g.z)
             .s(" exceeds CUDA's limits (x < 2^31, y, z <= 65535)"));
  }
  Sched* S = acquire(int(nt), name);
  S->n = int(nt);
  S->kernel = name;
  S->body = body;
  S->arg = arg;
  S->seed = 0;
  if (const char* e = getenv("MJ_EMU_SEED"))
    while (*e >= '0' && *e <= '9') S->seed = S->seed * 10 + (unsigned long long)(*e++ - '0');
  S->use_uc = true;
#ifdef MJ_EMU_X86
  unsigned long long ssp = 0;
  __asm__ volatile("rdsspq %0" : "+r"(ssp));  // a no-op unless a CET shadow stack is active
  S->use_uc = ssp != 0;
#endif
  blockDim = b;
  gridDim = g;
  g_cur = S;
  for (unsigned z = 0; z < g.z; ++z)
    for (unsigned y = 0; y < g.y; ++y)
      for (unsigned x = 0; x < g.x; ++x) {
        blockIdx = uint3{x, y, z};
        run_block(S, x + (unsigned long long)g.x * (y + (unsigned long long)g.y * z));
      }
  g_cur = nullptr;
  threadIdx = blockIdx = uint3{0, 0, 0};
}

template <class F> void invoke(void* f) { (*static_cast<F*>(f))(); }
// The arguments are evaluated once, here; every thread gets its own copy of them as parameters.
template <class... P, class... A>
MJ_EMU_IN void launch(const char* name, void (*kernel)(P...), dim3 g, dim3 b, A&&... a) {
  auto call = [kernel, a...]() mutable { kernel(a...); };
  run(name, g, b, &invoke<decltype(call)>, &call);
}

}  // namespace mjemu
}  // namespace

MJ_EMU_FN void __syncthreads() { mjemu::barrier("__syncthreads"); }
MJ_EMU_FN void __syncwarp(unsigned = 0xffffffffu) {
  mjemu::warp_wait(mjemu::need("__syncwarp"), mjemu::kWarpSync);
}
MJ_EMU_FN void __threadfence() { __asm__ volatile("" ::: "memory"); }
MJ_EMU_FN void __threadfence_block() { __asm__ volatile("" ::: "memory"); }

// Warp shuffles (the mask is not checked: every running lane of the warp must take part).
template <class T> MJ_EMU_FN T __shfl_sync(unsigned, T v, int src, int width = 32) {
  mjemu::Sched* S = mjemu::need("__shfl_sync");
  const unsigned lane = mjemu::lane_of(S, width, "__shfl_sync");
  return mjemu::shfl(S, v, int((lane & ~unsigned(width - 1)) + (unsigned(src) & unsigned(width - 1))));
}
template <class T> MJ_EMU_FN T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
  mjemu::Sched* S = mjemu::need("__shfl_up_sync");
  const unsigned lane = mjemu::lane_of(S, width, "__shfl_up_sync");
  return mjemu::shfl(S, v, delta <= (lane & unsigned(width - 1)) ? int(lane - delta) : -1);
}
template <class T> MJ_EMU_FN T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  mjemu::Sched* S = mjemu::need("__shfl_down_sync");
  const unsigned lane = mjemu::lane_of(S, width, "__shfl_down_sync");
  const unsigned l = lane & unsigned(width - 1);
  return mjemu::shfl(S, v, delta < unsigned(width) - l ? int(lane + delta) : -1);
}
template <class T> MJ_EMU_FN T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
  mjemu::Sched* S = mjemu::need("__shfl_xor_sync");
  const unsigned lane = mjemu::lane_of(S, width, "__shfl_xor_sync");
  const unsigned src = lane ^ unsigned(mask);
  return mjemu::shfl(S, v, src < (lane & ~unsigned(width - 1)) + unsigned(width) ? int(src) : -1);
}

// Bit casts.
MJ_EMU_FN unsigned __float_as_uint(float x) { unsigned r; __builtin_memcpy(&r, &x, 4); return r; }
MJ_EMU_FN float __uint_as_float(unsigned x) { float r; __builtin_memcpy(&r, &x, 4); return r; }
MJ_EMU_FN int __float_as_int(float x) { int r; __builtin_memcpy(&r, &x, 4); return r; }
MJ_EMU_FN float __int_as_float(int x) { float r; __builtin_memcpy(&r, &x, 4); return r; }
MJ_EMU_FN long long __double_as_longlong(double x) { long long r; __builtin_memcpy(&r, &x, 8); return r; }
MJ_EMU_FN double __longlong_as_double(long long x) { double r; __builtin_memcpy(&r, &x, 8); return r; }

// Atomics; each returns the old value.
#define MJ_EMU_ATOMIC_ADD(T) \
  MJ_EMU_FN T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
MJ_EMU_ATOMIC_ADD(int)
MJ_EMU_ATOMIC_ADD(unsigned)
MJ_EMU_ATOMIC_ADD(unsigned long long)
#undef MJ_EMU_ATOMIC_ADD
#define MJ_EMU_ATOMIC_CAS(T) \
  MJ_EMU_FN T atomicCAS(T* p, T cmp, T v) { \
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
    return cmp; \
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
  do nv = f(old); while (!__atomic_compare_exchange(p, &old, &nv, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
  return old;
}
}  // namespace mjemu
}  // namespace
MJ_EMU_FN float atomicAdd(float* p, float v) { return mjemu::atomic_update(p, [v](float o) { return o + v; }); }
MJ_EMU_FN double atomicAdd(double* p, double v) { return mjemu::atomic_update(p, [v](double o) { return o + v; }); }
MJ_EMU_FN int atomicMax(int* p, int v) { return mjemu::atomic_update(p, [v](int o) { return o > v ? o : v; }); }
MJ_EMU_FN int atomicMin(int* p, int v) { return mjemu::atomic_update(p, [v](int o) { return o < v ? o : v; }); }
MJ_EMU_FN unsigned atomicExch(unsigned* p, unsigned v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
// ---- end of the emulation prelude ----
)MJEMU";

}  // namespace metajit
