// Shared test plumbing: scoped environment variables, temporary directories and running a
// program with captured output.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include "base/config.h"

namespace metajit_test {

// Sets an environment variable for the scope and reloads metajit's config; restores both.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    setenv(name, value.c_str(), 1);
    metajit::reload_config();
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
    metajit::reload_config();
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A fresh directory removed at the end of the scope.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "metajit-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct ProcessResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line (tests only: the library itself never uses a shell).
inline ProcessResult run_command(const std::string& command) {
  ProcessResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The `metajit` binary: $METAJIT_CLI, else next to the tests/ directory of the build tree.
inline std::filesystem::path cli_path() {
  if (const char* p = std::getenv("METAJIT_CLI"); p && *p) return p;
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "metajit";
}

inline std::string test_program(const std::string& name) {
  const char* dir = std::getenv("METAJIT_TEST_PROGRAMS");
  return std::string(dir ? dir : ".") + "/" + name;
}

}  // namespace metajit_test
