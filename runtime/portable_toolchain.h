// The toolchain identity of remote kernel keys (README "Sharing kernels across machines").
// The local key names the compiler by path, size and mtime (toolchain.h), so machines built from
// different images never share it even with the same g++. The remote key names it by content:
// SHA-256 of the compiler driver and of the programs it runs (cc1plus, as, ld; for CUDA, nvcc
// and the host compiler's), the C library's version, the resolved target, the ISA and the full
// flag list (the codegen version is part of every key). Machines that would build the same
// binary share a remote key; a different compiler build, target or flag gives another.
#pragma once
#include <string>

#include "runtime/cuda_toolchain.h"
#include "runtime/toolchain.h"

namespace metajit {

// Labelled text (append_field), hashed into remote keys. The binaries' digests are remembered
// under <cache>/v1/toolchains/ per (path, size, mtime, inode): hashing cc1plus once per machine.
std::string portable_identity(const Toolchain& tc);
std::string portable_identity(const CudaToolchain& tc);

}  // namespace metajit
