#include "runtime/portable_toolchain.h"

#include <gnu/libc-version.h>
#include <sys/stat.h>

#include <boost/process/search_path.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include "base/checksum.h"
#include "base/config.h"
#include "base/log.h"
#include "cache/cache_store.h"
#include "cache/untrusted_json.h"
#include "codegen/cuda_emitter.h"
#include "codegen/cuda_emulation.h"
#include "remote_cache/sha256.h"
#include "runtime/compiler_driver.h"

namespace metajit {
namespace {

namespace fs = std::filesystem;

// SHA-256 of `path`'s content, remembered on disk by the file's (path, size, mtime, inode).
std::string content_digest(const fs::path& path) {
  std::error_code ec;
  fs::path real = fs::canonical(path, ec);
  if (ec) return "absent";
  struct stat st;
  if (::stat(real.c_str(), &st) != 0) return "absent";
  std::string facts;
  append_field(facts, "path", real.string());
  append_field(facts, "size", std::to_string(st.st_size));
  append_field(facts, "mtime",
               std::to_string(int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec));
  append_field(facts, "inode", std::to_string(st.st_ino) + ":" + std::to_string(st.st_dev));
  const std::string name = "sha256-" + xxh3_128_hex(facts) + ".txt";
  const fs::path memo = config().cache_dir / "v1" / "toolchains" / name;
  {
    struct stat ms;
    if (::lstat(memo.c_str(), &ms) == 0 && S_ISREG(ms.st_mode) && ms.st_uid == ::geteuid() &&
        !(ms.st_mode & 022) && ms.st_size == 64) {
      std::ifstream in(memo);
      std::string hex;
      if (std::getline(in, hex) && hex.size() == 64) return hex;
    }
  }
  std::optional<std::string> hex = file_sha256_hex(real);
  if (!hex) return "unreadable";
  try {
    CacheStore store(config().cache_dir);
    write_file_atomically(store.private_dir("toolchains") / name, *hex, /*durable=*/false);
  } catch (const std::exception& e) {
    log_message(LogLevel::Debug, std::string("not remembering a compiler digest: ") + e.what());
  }
  return *hex;
}

// Where the driver finds `prog` (gcc's -print-prog-name): a path, or a bare name on PATH.
fs::path ask_program_of(const fs::path& driver, const std::string& prog) {
  CompileOutcome r = run_compiler({driver.string(), "-print-prog-name=" + prog}, 60);
  if (!r.ok) return {};
  std::string line = first_line(r.output);
  if (line.find('/') != std::string::npos) return line;
  boost::filesystem::path found = boost::process::search_path(line);
  return found.empty() ? fs::path() : fs::path(found.string());
}

// ask_program_of, remembered on disk per driver binary (path, size, mtime) and PATH: three
// process starts (~10 ms each) saved in every later process. The programs' contents are still
// hashed (through their own remembered digests) every time, so a binutils upgrade is seen.
fs::path program_of(const Toolchain& tc, const std::string& prog) {
  std::string facts;
  append_field(facts, "driver", tc.path.string());
  append_field(facts, "size", std::to_string(tc.binary_size));
  append_field(facts, "mtime", std::to_string(tc.binary_mtime));
  const char* path_env = std::getenv("PATH");
  append_field(facts, "PATH", path_env ? path_env : "");
  append_field(facts, "prog", prog);
  const std::string name = "prog-" + xxh3_128_hex(facts) + ".txt";
  const fs::path memo = config().cache_dir / "v1" / "toolchains" / name;
  struct stat ms;
  if (::lstat(memo.c_str(), &ms) == 0 && S_ISREG(ms.st_mode) && ms.st_uid == ::geteuid() &&
      !(ms.st_mode & 022)) {
    std::ifstream in(memo);
    std::string line;
    if (std::getline(in, line) && !line.empty() && line[0] == '/') return line;
  }
  fs::path found = ask_program_of(tc.path, prog);
  if (!found.empty()) {
    try {
      CacheStore store(config().cache_dir);
      write_file_atomically(store.private_dir("toolchains") / name, found.string() + "\n",
                            /*durable=*/false);
    } catch (const std::exception& e) {
      log_message(LogLevel::Debug, std::string("not remembering ") + prog + ": " + e.what());
    }
  }
  return found;
}

std::string host_binaries(const Toolchain& tc) {
  std::string out;
  append_field(out, "driver-sha256", content_digest(tc.path));
  // Clang is one binary; GCC's driver runs cc1plus, as and ld, each part of the result.
  if (tc.version_output.find("clang") == std::string::npos)
    for (const char* prog : {"cc1plus", "as", "ld"}) {
      fs::path p = program_of(tc, prog);
      append_field(out, std::string(prog) + "-sha256", p.empty() ? "absent" : content_digest(p));
    }
  append_field(out, "libc", std::string(gnu_get_libc_version()) + " " + gnu_get_libc_release());
  return out;
}

struct Memo {
  std::mutex mu;
  std::map<std::string, std::string> by_identity;
};
Memo& memo() {
  static Memo* m = new Memo;
  return *m;
}

}  // namespace

std::string portable_identity(const Toolchain& tc) {
  const std::string local = "cpu\n" + tc.identity();
  Memo& m = memo();
  std::lock_guard<std::mutex> lock(m.mu);
  if (auto it = m.by_identity.find(local); it != m.by_identity.end()) return it->second;
  std::string out = host_binaries(tc);
  append_field(out, "target", tc.resolved_target);
  append_field(out, "isa", tc.target.name());
  std::string joined;
  for (const std::string& f : tc.flags) append_field(joined, "flag", f);
  append_field(out, "flags", joined);
  return m.by_identity.emplace(local, out).first->second;
}

std::string portable_identity(const CudaToolchain& tc) {
  const std::string local = "cuda\n" + tc.identity();
  {
    Memo& m = memo();
    std::lock_guard<std::mutex> lock(m.mu);
    if (auto it = m.by_identity.find(local); it != m.by_identity.end()) return it->second;
  }
  std::string out;
  append_field(out, "codegen", kCudaCodegenVersion);
  append_field(out, "emulated", tc.emulated ? "1" : "0");
  if (tc.emulated) append_field(out, "prelude", xxh3_128_hex(kCudaEmulationPrelude));
  // nvcc compiles host code with the host compiler: its binaries are part of the result.
  append_field(out, "host", portable_identity(host_toolchain()));
  if (!tc.emulated) {
    append_field(out, "nvcc-sha256", content_digest(tc.path));
    append_field(out, "nvcc-version", tc.version_output);  // its cicc and ptxas come with it
  }
  append_field(out, "arch", tc.arch);
  std::string joined;
  for (const std::string& f : tc.flags) append_field(joined, "flag", f);
  append_field(out, "flags", joined);
  Memo& m = memo();
  std::lock_guard<std::mutex> lock(m.mu);
  return m.by_identity.emplace(local, out).first->second;
}

}  // namespace metajit
