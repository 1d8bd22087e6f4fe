// An environment variable set for a scope, with metajit's configuration reloaded around it.
#pragma once
#include <cstdlib>
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
  // The variable's current value with `extra` after it: how a test adds kernel flags without
  // dropping those a sanitizer build put there (tests/test_main.cc).
  static std::string appended(const char* name, const std::string& extra) {
    const char* now = std::getenv(name);
    if (!now || !*now) return extra;
    return extra.empty() ? std::string(now) : std::string(now) + " " + extra;
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace metajit_test
