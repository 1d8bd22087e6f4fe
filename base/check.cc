#include "base/check.h"

namespace metajit {

void internal_check_failed(const char* file, int line, const char* condition,
                           const std::string& what) {
  throw InternalError("internal error in metajit (a bug; please report it): " + what +
                      " [check `" + condition + "` failed at " + file + ":" +
                      std::to_string(line) + "]");
}

}  // namespace metajit
