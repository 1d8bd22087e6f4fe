#include "base/log.h"

#include <cstdio>
#include <mutex>
#include <set>

namespace metajit {

bool log_enabled(LogLevel level) {
  return int(config().log_level) >= int(level);
}

void log_message(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  static const char* tags[] = {"", "warning: ", "", "debug: "};
  std::string line = "metajit: " + std::string(tags[int(level)]) + message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);  // one write: lines from threads do not mix
}

void warn_once(const std::string& key, const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> seen;
  // A warning that is not shown is not remembered: a quiet long-running process (or a fuzzer
  // feeding bad cache entries) would otherwise keep every distinct key for ever.
  if (!log_enabled(LogLevel::Warn)) return;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen.insert(key).second) return;
  }
  log_message(LogLevel::Warn, message);
}

}  // namespace metajit
