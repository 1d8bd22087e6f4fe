// The interface between a kernel library compiled for the CUDA host emulation and the scheduler
// that runs its threads (runtime/cuda_emulation_scheduler.cc). The kernel side is the prelude
// (codegen/cuda_emulation_prelude.h, which carries this header's text into every emulated
// kernel's source); the scheduler lives once in the metajit library instead of in every kernel:
// compiled into each kernel it was 60% of the kernel's compile time.
//
// The loader (runtime/loader.cc) calls a library's exported metajit_emulation_bind with the
// scheduler's table right after dlopen; the library keeps the pointer for its launches. A library
// built against another version of this interface returns 0 and is not used.
//
// Plain C types only, and an include guard rather than #pragma once: this text is also compiled
// as part of a kernel's main file.
#ifndef METAJIT_CUDA_EMULATION_ABI_H
#define METAJIT_CUDA_EMULATION_ABI_H

#define MJEMU_ABI_VERSION 1

extern "C" {

// One MJ_LAUNCH: the grid and block (x, y, z), and how to run one CUDA thread: body(arg). The
// four pointers are the kernel library's thread_local threadIdx, blockIdx (uint3) and blockDim,
// gridDim (dim3) of the launching OS thread, each three unsigned (x, y, z), which the scheduler
// sets before it runs a thread; `kernel` names the kernel in messages.
struct mjemu_launch {
  const char* kernel;
  unsigned grid[3];
  unsigned block[3];
  void (*body)(void*);
  void* arg;
  void* thread_idx;
  void* block_idx;
  void* block_dim;
  void* grid_dim;
};

// The scheduler's entry points. `what` names the CUDA call in messages; every call but launch
// must come from a thread of a running launch (the scheduler aborts with a message otherwise,
// as it does for a deadlock).
struct mjemu_runtime {
  unsigned version;  // MJEMU_ABI_VERSION of the scheduler
  void (*launch)(const struct mjemu_launch* launch);
  void (*syncthreads)(void);
  void (*syncwarp)(void);
  // The calling thread's lane; `width` must be a power of two <= 32.
  unsigned (*lane)(int width, const char* what);
  // Every running lane of the warp deposits `bits`; each gets the bits of lane `src` of its warp,
  // or its own when src < 0 or that lane is outside the block or has returned.
  unsigned long long (*shuffle)(unsigned long long bits, int src);
};

}  // extern "C"

#endif  // METAJIT_CUDA_EMULATION_ABI_H
