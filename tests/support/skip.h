// Skipping a test that cannot run its check here.
//
// CTest runs each Catch2 test case in a process of its own (catch_discover_tests) and reports a
// process that exits with SKIP_RETURN_CODE 77 as skipped, not passed (tests/CMakeLists.txt).
// A test that cannot check what it is about on this machine (no root, no tmpfs, no objdump...)
// calls skip_test("why") before its first assertion: the process prints "skipped: why" and
// exits 77. A skip after a failed assertion would hide the failure, so decide first.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

namespace metajit_test {

// CTest's SKIP_RETURN_CODE for every test of this project.
constexpr int kSkipExitCode = 77;

// Prints "skipped: <reason>" to stdout and ends the process with kSkipExitCode. The line is
// written to the file descriptor itself, after flushing what C and C++ streams still hold, so
// that neither buffering nor a reporter's redirection of std::cout can lose it. std::exit then
// runs the atexit handlers (metajit's included) as a normal exit would.
[[noreturn]] inline void skip_test(const std::string& reason) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const std::string line = "skipped: " + reason + "\n";
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(STDOUT_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += size_t(n);
  }
  std::exit(kSkipExitCode);
}

}  // namespace metajit_test
