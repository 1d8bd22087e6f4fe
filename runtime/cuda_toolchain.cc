#include "runtime/cuda_toolchain.h"

#include <metajit/error.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/process/search_path.hpp>
#include <map>
#include <memory>
#include <mutex>

#include "base/checksum.h"
#include "base/config.h"
#include "codegen/cuda_emitter.h"
#include "codegen/cuda_emulation.h"
#include "runtime/compiler_driver.h"
#include "runtime/cuda_runtime.h"
#include "runtime/toolchain.h"

namespace metajit {
namespace {

constexpr double kQueryTimeoutSeconds = 60;

// nvcc prints a banner first; the line naming the release is the one people recognise.
std::string release_line(const std::string& text) {
  size_t at = text.find("release");
  if (at == std::string::npos) return first_line(text);
  size_t start = text.rfind('\n', at);
  start = start == std::string::npos ? 0 : start + 1;
  size_t end = text.find('\n', at);
  return text.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

void stat_binary(CudaToolchain& t) {
  struct stat st;
  if (::stat(t.path.c_str(), &st) != 0)
    throw CompileError("'" + t.path.string() + "' cannot be examined", t.path.string());
  t.binary_size = uint64_t(st.st_size);
  t.binary_mtime = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

CudaToolchain resolve_emulated() {
  const Toolchain& host = host_toolchain();
  CudaToolchain t;
  t.emulated = true;
  t.path = host.path;
  t.version_output = host.version_output;
  t.binary_size = host.binary_size;
  t.binary_mtime = host.binary_mtime;
  t.host_identity = host.identity();
  // -fwrapv as for C++ kernels (runtime/toolchain.cc): index arithmetic wraps. nvcc has no such
  // switch for device code; there the emitter's unsigned value arithmetic is all that is defined.
  t.flags = {"-std=c++17", "-O2", "-fwrapv", "-fPIC", "-shared", "-x", "c++"};
  return t;
}

CudaToolchain resolve_nvcc(const Config& c) {
  CudaToolchain t;
  t.path = locate_nvcc();
  if (t.path.empty())
    throw CompileError("nvcc '" + c.nvcc +
                           "' not found (METAJIT_NVCC, PATH, /usr/local/cuda/bin); install the "
                           "CUDA toolkit or set METAJIT_NVCC to its nvcc",
                       c.nvcc);
  stat_binary(t);
  CompileOutcome v = run_compiler({t.path.string(), "--version"}, kQueryTimeoutSeconds);
  if (!v.ok)
    throw CompileError("nvcc '" + t.path.string() + "' does not work: `" + v.command + "` " +
                           (v.failed_to_start ? "could not be started" : "failed") + ": " +
                           first_line(v.output),
                       v.command, v.output);
  t.version_output = v.output;
  const Toolchain& host = host_toolchain();
  t.host_identity = host.identity();
  // The device's architecture when there is one, else the configured one (a build machine
  // warming a cache for GPU servers).
  CudaRuntime* rt = c.cuda_emulate ? nullptr : cuda_runtime();
  t.arch = rt && !rt->arch().empty() ? rt->arch() : c.cuda_arch;
  t.library_dir = cuda_library_dir();
  t.flags = {"-std=c++17", "-O3", "-arch=" + t.arch, "-Xcompiler", "-fPIC", "-shared", "-cudart",
             "shared", "-ccbin", host.path.string(),
             // Every kernel names all its arguments; unused ones are not worth a warning.
             "-diag-suppress=177,550"};
  if (!t.library_dir.empty()) {
    t.flags.push_back("-Xlinker");
    t.flags.push_back("-rpath," + t.library_dir);
  }
  t.flags.insert(t.flags.end(), c.extra_nvccflags.begin(), c.extra_nvccflags.end());
  return t;
}

}  // namespace

std::filesystem::path locate_nvcc() {
  const std::string& nvcc = config().nvcc;
  if (nvcc.empty()) return {};
  if (nvcc.find('/') != std::string::npos)
    return ::access(nvcc.c_str(), X_OK) == 0 ? std::filesystem::absolute(nvcc)
                                             : std::filesystem::path();
  boost::filesystem::path found = boost::process::search_path(nvcc);
  if (!found.empty()) return found.string();
  // The toolkit's default place, for environments whose PATH lacks it (CI, services).
  const std::filesystem::path fallback = "/usr/local/cuda/bin/" + nvcc;
  if (::access(fallback.c_str(), X_OK) == 0) return fallback;
  return {};
}

std::string CudaToolchain::binary_identity() const {
  std::string out;
  append_field(out, "path", path.string());
  append_field(out, "version", version_output);
  append_field(out, "size", std::to_string(binary_size));
  append_field(out, "mtime", std::to_string(binary_mtime));
  append_field(out, "host", host_identity);
  return out;
}

std::string CudaToolchain::identity() const {
  std::string out;
  append_field(out, "codegen", kCudaCodegenVersion);
  append_field(out, "emulated", emulated ? "1" : "0");
  if (emulated) append_field(out, "prelude", xxh3_128_hex(kCudaEmulationPrelude));
  out += binary_identity();
  append_field(out, "arch", arch);
  std::string joined;
  for (const std::string& f : flags) append_field(joined, "flag", f);
  append_field(out, "flags", joined);
  return out;
}

std::string CudaToolchain::version_line() const {
  return emulated ? first_line(version_output) : release_line(version_output);
}

std::vector<std::string> CudaToolchain::compile_command(const std::filesystem::path& source,
                                                        const std::filesystem::path& output) const {
  std::vector<std::string> cmd;
  cmd.push_back(path.string());
  cmd.insert(cmd.end(), flags.begin(), flags.end());
  cmd.push_back(source.string());
  cmd.push_back("-o");
  cmd.push_back(output.string());
  return cmd;
}

const CudaToolchain& cuda_toolchain() {
  static std::mutex mu;
  static auto* resolved = new std::map<std::string, std::unique_ptr<CudaToolchain>>;
  const Config& c = config();
  std::string setting;
  append_field(setting, "emulate", c.cuda_emulate ? "1" : "0");
  append_field(setting, "nvcc", c.nvcc);
  append_field(setting, "arch", c.cuda_arch);
  append_field(setting, "cxx", c.cxx);
  for (const std::string& f : c.extra_nvccflags) append_field(setting, "flag", f);
  std::lock_guard<std::mutex> lock(mu);
  auto it = resolved->find(setting);
  if (it != resolved->end()) return *it->second;
  auto t = std::make_unique<CudaToolchain>(c.cuda_emulate ? resolve_emulated() : resolve_nvcc(c));
  return *resolved->emplace(setting, std::move(t)).first->second;
}

}  // namespace metajit
