// Capturing what the library writes to stderr (warnings), for tests that assert on it.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace metajit_test {

// Redirects file descriptor 2 (where metajit's warnings go) to a temporary file for the scope.
class CaptureStderr {
 public:
  CaptureStderr() {
    std::fflush(stderr);
    char path[] = "/tmp/metajit-test-stderr-XXXXXX";
    fd_ = mkstemp(path);
    path_ = path;
    saved_ = dup(2);
    dup2(fd_, 2);
  }
  ~CaptureStderr() {
    restore();
    std::remove(path_.c_str());
  }
  CaptureStderr(const CaptureStderr&) = delete;
  CaptureStderr& operator=(const CaptureStderr&) = delete;
  // Stops capturing and returns everything written to stderr meanwhile.
  std::string text() {
    restore();
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    close(fd_);
    saved_ = -1;
  }
  int fd_ = -1, saved_ = -1;
  std::string path_;
};

}  // namespace metajit_test
