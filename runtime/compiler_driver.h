// Runs compilers through Boost.Process: an argument vector (never a shell), stdout+stderr
// captured, a timeout after which the compiler is killed, and many jobs in parallel with a
// progress line on stderr (docs/design.md §7).
#pragma once
#include <string>
#include <vector>

namespace metajit {

struct CompileOutcome {
  bool ok = false;  // exit status 0 and not timed out
  int exit_code = -1;
  bool timed_out = false;
  bool failed_to_start = false;  // e.g. compiler missing
  std::string output;            // stdout and stderr together
  double seconds = 0;
  std::string command;  // the argv joined with spaces, for messages
};

CompileOutcome run_compiler(const std::vector<std::string>& argv, double timeout_seconds);

// Runs every command, at most `jobs` at a time; outcomes in the order of `commands`. Prints
// "Compiling kernels (i/n) used 1.2s eta 0.8s" to stderr when the batch runs longer than ~1 s
// and stderr is a terminal or METAJIT_LOG is info/debug, or from the start when
// `always_show_progress` (metajit cache warm).
std::vector<CompileOutcome> run_compilers(const std::vector<std::vector<std::string>>& commands,
                                          int jobs, double timeout_seconds,
                                          bool always_show_progress = false);

}  // namespace metajit
