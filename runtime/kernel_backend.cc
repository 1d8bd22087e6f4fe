#include "runtime/kernel_backend.h"

#include "base/checksum.h"
#include "base/config.h"
#include "codegen/cpp_emitter.h"
#include "codegen/cpu_schedule.h"
#include "codegen/cuda_emitter.h"
#include "codegen/cuda_emulation.h"
#include "codegen/kernel_key.h"
#include "runtime/cuda_toolchain.h"
#include "runtime/portable_toolchain.h"
#include "runtime/toolchain.h"

namespace metajit {
namespace {

namespace fs = std::filesystem;

std::string emit_cuda_for_gpu(const KernelIR& ir) {
  return emit_cuda(ir, CudaTarget::Gpu);
}
std::string emit_cuda_for_emulation(const KernelIR& ir) {
  return emit_cuda(ir, CudaTarget::HostEmulation);
}

}  // namespace

std::string remote_key_of(const Backend& b, const std::string& ir_text,
                          const std::string& portable) {
  return kernel_key(b.name, ir_text, "portable\n" + portable);
}

Backend backend_for(Device device) {
  Backend b;
  if (device == Device::CPU) {
    const Toolchain& tc = host_toolchain();
    b.name = "cpu";
    b.identity = tc.identity();
    b.source_file = "kernel.cc";
    b.emit = [&tc](const KernelIR& ir) { return emit_cpp(ir, tc.target); };
    b.schedule = [&tc](const KernelIR& ir) {
      return describe_schedule(schedule_cpu_kernel(ir, tc.target), tc.target);
    };
    b.target = tc.target.describe();
    b.command = [&tc](const fs::path& src, const fs::path& so) {
      return tc.compile_command(src, so);
    };
    b.meta = {{"compiler", tc.path.string()},
              {"compiler_version", tc.version_line()},
              {"target", tc.resolved_target},
              {"isa", tc.target.id()},
              {"flags", tc.flags}};
    b.parts.backend = b.name;
    b.parts.codegen = kCodegenVersion;
    b.parts.compiler = tc.path.string();
    b.parts.compiler_version = tc.version_line();
    b.parts.compiler_id = xxh3_128_hex(tc.binary_identity());
    b.parts.target = tc.resolved_target;
    b.parts.isa = tc.target.id();
    b.parts.flags = tc.flags;
    b.portable = [&tc] { return portable_identity(tc); };
    return b;
  }
  const CudaToolchain& tc = cuda_toolchain();
  b.name = tc.backend();
  b.identity = tc.identity();
  b.source_file = "kernel.cu";
  b.emit = tc.emulated ? emit_cuda_for_emulation : emit_cuda_for_gpu;
  b.schedule = [](const KernelIR&) { return std::string(); };  // the CUDA emitter names none
  b.command = [&tc](const fs::path& src, const fs::path& so) {
    return tc.compile_command(src, so);
  };
  b.meta = {{"compiler", tc.path.string()},
            {"compiler_version", tc.version_line()},
            {"target", tc.emulated ? "host emulation" : tc.arch},
            {"flags", tc.flags}};
  b.parts.backend = b.name;
  b.parts.codegen = std::string(kCodegenVersion) + " " + kCudaCodegenVersion;
  if (tc.emulated)  // the prelude is part of the code the kernels are compiled with
    b.parts.codegen += " emulation-" + xxh3_128_hex(kCudaEmulationPrelude).substr(0, 8);
  b.parts.compiler = tc.path.string();
  b.parts.compiler_version = tc.version_line();
  b.parts.compiler_id = xxh3_128_hex(tc.binary_identity());
  b.parts.target = tc.emulated ? "host emulation" : tc.arch;
  b.parts.flags = tc.flags;
  b.portable = [&tc] { return portable_identity(tc); };
  return b;
}

std::string memory_settings(Device device) {
  const Config& c = config();
  std::string s = device == Device::CPU
                      ? "cpu " + c.cxx
                      : "cuda " + c.nvcc + " " + c.cuda_arch + (c.cuda_emulate ? " emu" : "");
  for (const std::string& f : device == Device::CPU ? c.extra_cxxflags : c.extra_nvccflags)
    s += " " + f;
  return s + "\n";
}

}  // namespace metajit
