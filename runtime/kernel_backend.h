// What differs between the C++ and the CUDA path through the kernel library
// (runtime/kernel_library.h): the source the emitter writes, the compiler that builds it and
// the identity that goes into the key.
#pragma once
#include <metajit/device.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "runtime/miss_cause.h"

namespace metajit {

struct Backend {
  std::string name;         // "cpu" | "cuda" | "cuda-emu" (the key's backend field)
  std::string identity;     // the toolchain's, hashed into every key
  std::string source_file;  // kernel.cc | kernel.cu
  std::function<std::string(const KernelIR&)> emit;
  // The kernel's schedule in one line where it is not the plain loop nest (explain()), and
  // the target the source is written for; both empty where the backend names none.
  std::function<std::string(const KernelIR&)> schedule;
  std::string target;
  std::function<std::vector<std::string>(const std::filesystem::path&,
                                         const std::filesystem::path&)>
      command;
  nlohmann::json meta;  // compiler, compiler_version, target, flags: recorded in meta.json
  KeyParts parts;       // what the key is made of besides the IR (key left empty)
  // The toolchain identity of remote keys (portable_toolchain.h): hashes the compiler's
  // binaries, so it is computed only when a remote cache is in use.
  std::function<std::string()> portable;
};

// The backend of `device` for the current config (resolving its toolchain: CompileError when
// the compiler is missing).
Backend backend_for(Device device);

// A kernel's key in the remote cache: the local key's fields with the portable identity.
std::string remote_key_of(const Backend& b, const std::string& ir_text,
                          const std::string& portable);

// The settings that choose `device`'s toolchain, cheap to compute: part of the memory table's
// key, because reload_config() may change them.
std::string memory_settings(Device device);

}  // namespace metajit
