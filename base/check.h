// Internal invariants: METAJIT_CHECK(condition, what) throws metajit::InternalError when the
// condition does not hold, naming `what`, the condition's text and its file:line;
// METAJIT_UNREACHABLE(what) where control must never arrive (a switch's default). For states
// one of metajit's own passes should never produce; bad input from a user is a typed Error of
// its own kind (ShapeError, DTypeError, ...) with what would have been valid instead.
#pragma once
#include <metajit/error.h>

#include <string>

namespace metajit {

// Throws the InternalError of METAJIT_CHECK (the file is the path relative to the source tree:
// CMakeLists.txt maps the prefix away with -fmacro-prefix-map).
[[noreturn]] void internal_check_failed(const char* file, int line, const char* condition,
                                        const std::string& what);

}  // namespace metajit

#define METAJIT_CHECK(condition, what)                                                  \
  do {                                                                                  \
    if (!(condition)) ::metajit::internal_check_failed(__FILE__, __LINE__, #condition, (what)); \
  } while (false)

#define METAJIT_UNREACHABLE(what) \
  ::metajit::internal_check_failed(__FILE__, __LINE__, "unreachable", (what))
