// A small shared object for cache tests: built once per test process from a C++ source.
#pragma once
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "runtime/compiler_driver.h"
#include "runtime/toolchain.h"
#include "support/files.h"

namespace metajit_test {

// `source` compiled by the host toolchain into a kernel.so, once per process and source; the
// same path every call. Throws (failing the test that asked) when it does not compile.
inline const std::filesystem::path& built_object(const std::string& source) {
  static std::mutex mutex;
  static TempDir dir;
  static std::map<std::string, std::filesystem::path> built;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = built.find(source);
  if (it != built.end()) return it->second;
  const std::filesystem::path sub = dir.path() / std::to_string(built.size());
  std::filesystem::create_directories(sub);
  const std::filesystem::path src = sub / "kernel.cc", so = sub / "kernel.so";
  write_file(src, source);
  metajit::CompileOutcome r =
      metajit::run_compiler(metajit::host_toolchain().compile_command(src, so), 120);
  if (!r.ok) throw std::runtime_error("cannot build the test kernel: " + r.output);
  return built.emplace(source, so).first->second;
}

}  // namespace metajit_test
