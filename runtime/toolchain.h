// The identity of the host C++ compiler and target, part of every kernel key (docs/design.md §5):
// resolved path, `--version` output, binary size and mtime, the features behind
// -march=native, and the full flag list.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "codegen/cpu_target.h"

namespace metajit {

struct Toolchain {
  std::string compiler;        // as configured (METAJIT_CXX, default g++)
  std::filesystem::path path;  // resolved absolute path
  std::string version_output;  // whole `--version` output
  uint64_t binary_size = 0;
  int64_t binary_mtime = 0;  // nanoseconds since epoch
  std::string
      resolved_target;  // e.g. "-march=znver4 -mavx512f ..." as the compiler resolves native
  std::vector<std::string>
      flags;         // -std=c++17 -O3 -march=native -fPIC -shared -fopenmp -fno-math-errno
                     // -fno-trapping-math -fwrapv -fno-exceptions -pipe
                     // [-fno-tree-sink -nodefaultlibs with GCC]
                     // [-mprefer-vector-width=512 with AVX-512] + METAJIT_CXXFLAGS
  // After the source: -lmvec, and with -nodefaultlibs the C libraries (-lm -lc -lgcc).
  std::vector<std::string> link_libraries;
  CpuTarget target;  // the vector ISA of the full flag list: what the emitter schedules for

  std::string identity() const;  // labelled text of every field above, hashed into keys
  // The part of identity() naming the compiler binary (name, path, version, size, mtime): what
  // a cache miss compares to say "the compiler changed" (runtime/miss_cause.h).
  std::string binary_identity() const;
  std::string version_line() const;  // first line of version_output
  // path, flags, source, -o output, link_libraries
  std::vector<std::string> compile_command(const std::filesystem::path& source,
                                           const std::filesystem::path& output) const;
};

// The host toolchain for the current config(). Resolved once per process (again if METAJIT_CXX
// or METAJIT_CXXFLAGS changed after reload_config()); the slow parts are remembered on disk
// under <cache>/v1/toolchains/ keyed by path, size, mtime and CPU. Throws CompileError naming
// the command when the compiler cannot be found or run.
const Toolchain& host_toolchain();

// The first non-blank line of a tool's output.
std::string first_line(const std::string& text);

}  // namespace metajit
