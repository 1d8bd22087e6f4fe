// Running programs from tests: shell command lines with captured output, the `metajit` CLI and
// the helper programs of this build, and whether a process is still running.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace metajit_test {

struct ProcessResult {
  int exit_code = -1;  // -1 when the command did not exit normally
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

// `s` as one word for the shell: in single quotes, embedded single quotes escaped.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The `metajit` binary: $METAJIT_CLI, else next to the tests/ directory of the build tree.
inline std::filesystem::path cli_path() {
  if (const char* p = std::getenv("METAJIT_CLI"); p && *p) return p;
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() / "metajit";
}

// A helper program of tests/programs/, built next to the tests ($METAJIT_TEST_PROGRAMS).
inline std::string test_program(const std::string& name) {
  const char* dir = std::getenv("METAJIT_TEST_PROGRAMS");
  return std::string(dir ? dir : ".") + "/" + name;
}

// True while process `pid` exists and has not terminated (a zombie, dead but not yet reaped by
// its parent, counts as terminated). Linux: reads /proc.
inline bool process_is_running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;  // gone
  // "pid (comm) state ...": comm may hold spaces and parentheses; the state follows the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return false;
  const char state = text[close + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace metajit_test
