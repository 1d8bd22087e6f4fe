#include "runtime/cuda_emulation_scheduler.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// Design of the emulation's scheduler.
//
// Threads: every thread of a block is a fiber with its own stack (kStackBytes, 64 KiB, a page
// apart; one guard page under the lowest). Not a guard page under each: a process may run
// launches on many OS threads, each keeping its stacks, and two mappings per stack would run
// into vm.max_map_count. Generated kernels use a few hundred bytes of stack. Fibers, not OS
// threads, because CUDA threads rendezvous at __syncthreads and warp shuffles over and over: a
// user-space switch costs nanoseconds, and running everything on the calling OS thread keeps a
// launch synchronous and reproducible. On x86-64 the switch is six callee-saved registers and the
// stack pointer (switch_x86 below); elsewhere, or when a CET shadow stack is active (a plain `ret`
// onto another stack would fault there), it is ucontext's swapcontext: correct everywhere, ~15x
// slower (a syscall per switch). Stacks and the scheduler state are mapped once per OS thread and
// kept for later launches: mapping and first-touching 1024 stacks costs milliseconds, more than a
// small launch. This file is compiled without sanitizers (CMakeLists.txt): it switches stacks
// under them, and the kernels whose threads it runs are not instrumented either.
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
//
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
// This scheduler was part of the prelude, compiled into every emulated kernel, until it was
// measured as 60% of such a kernel's compile time (0.35 s against 0.9 s for a small map kernel).

#if defined(__x86_64__)
// switch_x86(save, to): pushes the callee-saved registers, stores rsp in *save, loads `to` (a
// stack this function saved, or a fresh frame: six zeros, the entry, a null return address).
// MXCSR and the x87 control word are not switched: kernels do not change them. A local symbol.
extern "C" void metajit_emu_switch_x86(void** save, void* to) __attribute__((visibility("hidden")));
__asm__(
    ".pushsection .text\n.p2align 4\n"
    ".type metajit_emu_switch_x86, @function\nmetajit_emu_switch_x86:\n"
    "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
    "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
    "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n"
    ".size metajit_emu_switch_x86, .-metajit_emu_switch_x86\n.popsection\n");
#endif

namespace metajit {
namespace {

struct Uint3 {
  unsigned x, y, z;
};

enum : unsigned char { kReady, kBarrier, kArrive, kDepart, kWarpSync, kDone };
constexpr int kMaxThreads = 1024;
constexpr unsigned long kStackBytes = 65536;

struct Fiber {
  void* sp;
  Uint3 idx;
  unsigned since;
  unsigned char state;
};

struct Sched {
  int n, alive, bar, cur;  // threads, not returned, at __syncthreads, running
  int hot;                 // a warp whose rendezvous just completed, or -1
  unsigned pass;
  unsigned long long seed;
  bool use_uc;
  const mjemu_launch* launch;
  Uint3 block_idx;
  char* stacks;
  unsigned long stride, stack;
  void* sched_sp;
  ucontext_t sched_uc;
  ucontext_t* uc;
  int warp_alive[32], wcnt[3][32];  // per warp: lanes not returned; at kArrive/kDepart/kWarpSync
  unsigned wgen[32];                // shuffle round of the warp
  unsigned slot_gen[kMaxThreads];
  unsigned long long slot[kMaxThreads];
  Fiber f[kMaxThreads];
  unsigned short order[kMaxThreads];  // of this pass
};
thread_local Sched* g_cur = nullptr;

[[noreturn]] __attribute__((format(printf, 1, 2))) void fail(const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::fputs("metajit CUDA emulation: ", stderr);
  std::vfprintf(stderr, format, args);
  std::fputc('\n', stderr);
  va_end(args);
  std::abort();
}

Sched* need(const char* what) {
  Sched* s = g_cur;
  if (!s) fail("%s called outside a kernel launch", what);
  return s;
}

void set_xyz(void* to, Uint3 v) { std::memcpy(to, &v, sizeof v); }

// Scheduler side: run fiber t until it parks or returns.
void resume(Sched* s, int t) {
  set_xyz(s->launch->thread_idx, s->f[t].idx);
  s->cur = t;
#if defined(__x86_64__)
  if (!s->use_uc) {
    metajit_emu_switch_x86(&s->sched_sp, s->f[t].sp);
    return;
  }
#endif
  swapcontext(&s->sched_uc, &s->uc[t]);
}

// Fiber side: back to the scheduler; returns when resumed.
void park(Sched* s) {
  const int t = s->cur;
#if defined(__x86_64__)
  if (!s->use_uc)
    metajit_emu_switch_x86(&s->f[t].sp, s->sched_sp);
  else
#endif
    swapcontext(&s->uc[t], &s->sched_uc);
  __asm__ volatile("" ::: "memory");
}

void release_barrier(Sched* s) {
  if (s->bar == 0 || s->bar != s->alive) return;
  for (int t = 0; t < s->n; ++t)
    if (s->f[t].state == kBarrier) {
      s->f[t].state = kReady;
      s->f[t].since = s->pass + 1;
    }
  s->bar = 0;
}

void release_warp(Sched* s, int w) {
  for (int k = 0; k < 3; ++k) {
    if (s->wcnt[k][w] == 0 || s->wcnt[k][w] != s->warp_alive[w]) continue;
    const int end = s->n < 32 * w + 32 ? s->n : 32 * w + 32;
    for (int t = 32 * w; t < end; ++t)
      if (s->f[t].state == kArrive + k) {
        s->f[t].state = kReady;
        s->f[t].since = s->pass;
      }
    s->wcnt[k][w] = 0;
    s->hot = w;
    if (k == 1) ++s->wgen[w];
  }
}

void warp_wait(Sched* s, unsigned char kind) {
  const int w = s->cur >> 5;
  s->f[s->cur].state = kind;
  ++s->wcnt[kind - kArrive][w];
  release_warp(s, w);
  park(s);
}

void syncthreads() {
  Sched* s = need("__syncthreads");
  s->f[s->cur].state = kBarrier;
  ++s->bar;
  release_barrier(s);
  park(s);
}

void syncwarp() { warp_wait(need("__syncwarp"), kWarpSync); }

unsigned lane(int width, const char* what) {
  Sched* s = need(what);
  if (width < 1 || width > 32 || (width & (width - 1)))
    fail("%s: width %d is not a power of two <= 32", what, width);
  return unsigned(s->cur) & 31u;
}

unsigned long long shuffle(unsigned long long bits, int src) {
  Sched* s = need("a warp shuffle");
  const int t = s->cur, w = t >> 5;
  s->slot[t] = bits;
  s->slot_gen[t] = s->wgen[w];
  warp_wait(s, kArrive);
  unsigned long long r = bits;
  const int from = 32 * w + src;
  if (src >= 0 && from < s->n && s->slot_gen[from] == s->wgen[w]) r = s->slot[from];
  warp_wait(s, kDepart);
  return r;
}

void fiber_entry() {
  Sched* s = g_cur;
  s->launch->body(s->launch->arg);
  const int t = s->cur, w = t >> 5;
  s->f[t].state = kDone;
  --s->alive;
  --s->warp_alive[w];
  release_warp(s, w);
  release_barrier(s);
  park(s);
  __builtin_unreachable();
}

void start_fibers(Sched* s) {
  const unsigned bx = s->launch->block[0], by = s->launch->block[1];
  for (int t = 0; t < s->n; ++t) {
    Fiber& f = s->f[t];
    f.idx = Uint3{unsigned(t) % bx, unsigned(t) / bx % by, unsigned(t) / (bx * by)};
    f.state = kReady;
    f.since = 0;
    s->slot_gen[t] = ~0u;
    char* top = s->stacks + (unsigned long)(t + 1) * s->stride;
    if (s->use_uc) {
      ucontext_t* c = &s->uc[t];
      getcontext(c);
      c->uc_stack.ss_sp = top - s->stack;
      c->uc_stack.ss_size = s->stack;
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
    const int lanes = s->n - 32 * w;
    s->warp_alive[w] = lanes < 0 ? 0 : (lanes > 32 ? 32 : lanes);
    s->wcnt[0][w] = s->wcnt[1][w] = s->wcnt[2][w] = 0;
    s->wgen[w] = 0;
  }
  s->alive = s->n;
  s->bar = 0;
  s->hot = -1;
}

// A fresh pseudo-random order of the threads for this pass, seeded by block, pass and
// MJ_EMU_SEED; returns the generator's state (its low bit picks the lane direction).
unsigned long long shuffle_order(Sched* s, unsigned long long linear) {
  unsigned long long r = ((linear + 1) * 0x9E3779B97F4A7C15ull ^ (s->pass + 1) * 0xD1B54A32D192ED03ull) +
                         s->seed * 0x94D049BB133111EBull;
  for (int k = 0; k < s->n; ++k) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    const int j = int(((r & 0xffffffffull) * (unsigned long long)(k + 1)) >> 32);
    s->order[k] = s->order[j];
    s->order[j] = (unsigned short)k;
  }
  return r;
}

[[noreturn]] void report_deadlock(Sched* s) {
  int at_shuffle = 0;
  for (int t = 0; t < s->n; ++t)
    at_shuffle += s->f[t].state >= kArrive && s->f[t].state <= kWarpSync;
  fail("deadlock in kernel %s, block (%u, %u, %u): %d threads wait at __syncthreads, %d at a warp "
       "shuffle or __syncwarp, %d returned (a barrier or shuffle not reached by every running "
       "thread of its block or warp)",
       s->launch->kernel, s->block_idx.x, s->block_idx.y, s->block_idx.z, s->bar, at_shuffle,
       s->n - s->alive);
}

void run_block(Sched* s, unsigned long long linear) {
  start_fibers(s);
  const int n = s->n;
  for (s->pass = 0; s->alive > 0; ++s->pass) {
    const unsigned long long r = shuffle_order(s, linear);
    bool ran = false;
    for (int k = 0; k < n; ++k) {
      const int t = s->order[k];
      if (s->f[t].state != kReady || s->f[t].since > s->pass) continue;
      ran = true;
      resume(s, t);
      // A warp whose shuffle or __syncwarp completed runs on at once (warps run ahead of each
      // other on a GPU too), until its lanes park at something else.
      for (bool up = (r & 1) != 0; s->hot >= 0; up = !up) {
        const int w = s->hot, end = n < 32 * w + 32 ? n : 32 * w + 32;
        s->hot = -1;
        for (int l = 32 * w; l < end; ++l) {
          const int u = up ? l : end - 1 - (l - 32 * w);
          if (s->f[u].state == kReady && s->f[u].since <= s->pass) resume(s, u);
        }
      }
    }
    if (!ran) report_deadlock(s);
  }
}

// Fiber stacks (one mapping, one guard page) and the scheduler, kept per OS thread for the next
// launch: mapping, guarding and first-touching them costs far more than a small launch.
struct Pool {
  char* mem = nullptr;
  unsigned long bytes = 0;
  int cap = 0;
  ~Pool() {
    if (mem) munmap(mem, bytes);
  }
};
thread_local Pool g_pool;

Sched* acquire(int n, const char* name) {
  Pool& p = g_pool;
  if (p.cap >= n) return reinterpret_cast<Sched*>(p.mem);
  if (p.mem) munmap(p.mem, p.bytes);
  p.mem = nullptr;
  p.cap = 0;
  const unsigned long page = (unsigned long)sysconf(_SC_PAGESIZE);
  const unsigned long stack = (kStackBytes + page - 1) / page * page, stride = stack + page;
  const unsigned long uc_at = (sizeof(Sched) + 63) / 64 * 64;
  const unsigned long head = (uc_at + sizeof(ucontext_t) * (unsigned long)n + page - 1) / page * page;
  const unsigned long bytes = head + stride * (unsigned long)n;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (mem == MAP_FAILED) fail("MJ_LAUNCH(%s): cannot map fiber stacks", name);
  p.mem = static_cast<char*>(mem);
  p.bytes = bytes;
  p.cap = n;
  mprotect(p.mem + head, page, PROT_NONE);  // one guard: a mapping per stack would add up
  Sched* s = reinterpret_cast<Sched*>(p.mem);
  s->uc = reinterpret_cast<ucontext_t*>(p.mem + uc_at);
  s->stacks = p.mem + head;
  s->stride = stride;
  s->stack = stack;
  return s;
}

void check_limits(const mjemu_launch& l) {
  const unsigned* g = l.grid;
  const unsigned* b = l.block;
  const unsigned long long threads = (unsigned long long)b[0] * b[1] * b[2];
  if (b[0] > 1024 || b[1] > 1024 || b[2] > 64 || threads > kMaxThreads)
    fail("MJ_LAUNCH(%s): block (%u, %u, %u) exceeds CUDA's limits (x, y <= 1024, z <= 64, "
         "x*y*z <= 1024)",
         l.kernel, b[0], b[1], b[2]);
  if (g[0] > 2147483647u || g[1] > 65535 || g[2] > 65535)
    fail("MJ_LAUNCH(%s): grid (%u, %u, %u) exceeds CUDA's limits (x < 2^31, y, z <= 65535)",
         l.kernel, g[0], g[1], g[2]);
}

bool shadow_stack_active() {
#if defined(__x86_64__)
  unsigned long long ssp = 0;
  __asm__ volatile("rdsspq %0" : "+r"(ssp));  // a no-op unless a CET shadow stack is active
  return ssp != 0;
#else
  return true;  // no hand-written switch here: ucontext
#endif
}

// MJ_EMU_SEED, read once per process (it was read at every launch while the scheduler lived in
// each kernel).
unsigned long long schedule_seed() {
  static const unsigned long long seed = [] {
    unsigned long long v = 0;
    if (const char* e = std::getenv("MJ_EMU_SEED"))
      while (*e >= '0' && *e <= '9') v = v * 10 + (unsigned long long)(*e++ - '0');
    return v;
  }();
  return seed;
}

void launch(const mjemu_launch* l) {
  if (g_cur) fail("MJ_LAUNCH(%s) from inside a running kernel", l->kernel);
  const unsigned* g = l->grid;
  const unsigned* b = l->block;
  if (!g[0] || !g[1] || !g[2] || !b[0] || !b[1] || !b[2]) return;
  check_limits(*l);
  const int threads = int(b[0] * b[1] * b[2]);
  Sched* s = acquire(threads, l->kernel);
  s->n = threads;
  s->launch = l;
  s->seed = schedule_seed();
  s->use_uc = shadow_stack_active();
  std::memcpy(l->block_dim, b, 3 * sizeof(unsigned));
  std::memcpy(l->grid_dim, g, 3 * sizeof(unsigned));
  g_cur = s;
  for (unsigned z = 0; z < g[2]; ++z)
    for (unsigned y = 0; y < g[1]; ++y)
      for (unsigned x = 0; x < g[0]; ++x) {
        s->block_idx = Uint3{x, y, z};
        set_xyz(l->block_idx, s->block_idx);
        run_block(s, x + (unsigned long long)g[0] * (y + (unsigned long long)g[1] * z));
      }
  g_cur = nullptr;
  set_xyz(l->thread_idx, Uint3{0, 0, 0});
  set_xyz(l->block_idx, Uint3{0, 0, 0});
}

}  // namespace

const mjemu_runtime& cuda_emulation_runtime() {
  static const mjemu_runtime table{MJEMU_ABI_VERSION, &launch,  &syncthreads,
                                   &syncwarp,         &lane,    &shuffle};
  return table;
}

}  // namespace metajit
