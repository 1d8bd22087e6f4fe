// Typed errors. Every failure metajit reports derives from metajit::Error; the message names
// the op, the shapes/dtypes involved and what would have been valid.
#pragma once
#include <stdexcept>
#include <string>

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ShapeError : public Error {
 public:
  using Error::Error;
};
class DTypeError : public Error {
 public:
  using Error::Error;
};
class IndexExprError : public Error {
 public:
  using Error::Error;
};
class CompileError : public Error {
 public:
  CompileError(const std::string& what, std::string command = {}, std::string output = {},
               std::string source_path = {})
      : Error(what),
        command_(std::move(command)),
        output_(std::move(output)),
        source_path_(std::move(source_path)) {}
  const std::string& command() const { return command_; }
  const std::string& output() const { return output_; }
  const std::string& source_path() const { return source_path_; }

 private:
  std::string command_, output_, source_path_;
};
class CacheError : public Error {
 public:
  using Error::Error;
};
// A bug in metajit, not in the program that called it: an internal invariant did not hold (a
// pass left the IR in a state the next one does not accept). The message names the check and
// its source file and line; please report it. Raised through METAJIT_CHECK (base/check.h).
class InternalError : public Error {
 public:
  using Error::Error;
};
// A CUDA runtime failure: a kernel that did not launch or faulted (the message names its key
// and ops), device memory exhausted, a failed copy.
class CudaError : public Error {
 public:
  using Error::Error;
};

}  // namespace metajit
#pragma GCC visibility pop
