// The CUDA toolchain, part of every CUDA kernel key (docs/design.md §5): nvcc's
// resolved path, `--version` output, size and mtime, the host compiler nvcc drives (-ccbin,
// identified like the C++ toolchain), the target architecture (the device's, else
// METAJIT_CUDA_ARCH, default sm_90) and the full flag list. nvcc needs no GPU: a build machine
// can compile (warm) CUDA kernels for GPU servers.
//
// With METAJIT_CUDA_EMULATE=1 the "CUDA toolchain" is the host C++ compiler compiling the same
// source against the emulation prelude (backend "cuda-emu", its own keys).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace metajit {

struct CudaToolchain {
  bool emulated = false;
  std::filesystem::path path;  // nvcc (emulated: the host C++ compiler)
  std::string version_output;
  uint64_t binary_size = 0;
  int64_t binary_mtime = 0;
  std::string host_identity;  // identity() of the host toolchain nvcc compiles host code with
  std::string arch;           // sm_XX ("" when emulated)
  std::string library_dir;    // libcudart's directory (rpath of kernel objects)
  std::vector<std::string> flags;

  std::string backend() const { return emulated ? "cuda-emu" : "cuda"; }
  std::string identity() const;  // labelled text of every field above, hashed into keys
  // The part of identity() naming nvcc and the host compiler behind it (Toolchain's likewise).
  std::string binary_identity() const;
  std::string version_line() const;
  std::vector<std::string> compile_command(const std::filesystem::path& source,
                                           const std::filesystem::path& output) const;
};

// nvcc as configured (METAJIT_NVCC, else `nvcc` on PATH, else /usr/local/cuda/bin/nvcc), or an
// empty path when there is none.
std::filesystem::path locate_nvcc();

// The CUDA toolchain for the current config(); resolved once per setting. Throws CompileError
// naming the command when nvcc cannot be found or run.
const CudaToolchain& cuda_toolchain();

}  // namespace metajit
