#include "base/config.h"

#include <metajit/error.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

namespace metajit {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

int env_int(const char* name, int fallback, int lo, int hi) {
  std::string v = env(name);
  if (v.empty()) return fallback;
  try {
    size_t used = 0;
    int x = std::stoi(v, &used);
    if (used == v.size() && x >= lo && x <= hi) return x;
  } catch (...) {
  }
  throw Error(std::string(name) + "=" + v + " is not valid; expected an integer in [" +
              std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

bool env_flag(const char* name) {
  std::string v = env(name);
  return !v.empty() && v != "0" && v != "false" && v != "no" && v != "off";
}

void read_remote_config(Config& c) {
  c.remote_url = env("METAJIT_REMOTE");
  std::string mode = env("METAJIT_REMOTE_MODE");
  if (mode.empty()) mode = c.remote_url.empty() ? "off" : "read";
  if (mode != "off" && mode != "read" && mode != "readwrite")
    throw Error("METAJIT_REMOTE_MODE=" + mode + " is not valid; expected off, read or readwrite");
  c.remote_mode = mode;
  if (std::string ns = env("METAJIT_REMOTE_NAMESPACE"); !ns.empty()) {
    bool ok = ns.size() <= 64;
    for (char ch : ns)
      ok = ok &&
           (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.');
    if (!ok)
      throw Error("METAJIT_REMOTE_NAMESPACE=" + ns +
                  " is not valid; expected 1 to 64 letters, digits, '-', '_' or '.'");
    c.remote_namespace = ns;
  }
  c.remote_password_file = env("METAJIT_REMOTE_PASSWORD_FILE");
  if (std::string v = env("METAJIT_REMOTE_TIMEOUT");
      !v.empty() && (!parse_duration(v, c.remote_timeout_seconds) ||
                     c.remote_timeout_seconds < 0.001 || c.remote_timeout_seconds > 3600))
    throw Error("METAJIT_REMOTE_TIMEOUT=" + v +
                " is not valid; expected a duration from 0.001s to 1h, in seconds, e.g. 2 or 0.5");
  if (std::string v = env("METAJIT_REMOTE_WAIT");
      !v.empty() && (!parse_duration(v, c.remote_wait_seconds) || c.remote_wait_seconds > 86400))
    throw Error("METAJIT_REMOTE_WAIT=" + v + " is not valid; expected a duration up to 1d");
  c.remote_signing_key = env("METAJIT_REMOTE_SIGNING_KEY");
  c.remote_trusted_keys = env("METAJIT_REMOTE_TRUSTED_KEYS");
  std::string trust = env("METAJIT_REMOTE_TRUST");
  if (!trust.empty() && trust != "unsigned" && trust != "signed")
    throw Error("METAJIT_REMOTE_TRUST=" + trust + " is not valid; expected signed or unsigned");
  c.remote_trust_unsigned = trust == "unsigned";
}

Config read_config() {
  Config c;
  std::string dir = env("METAJIT_CACHE_DIR");
  if (!dir.empty()) {
    c.cache_dir = dir;
    c.cache_dir_explicit = true;
  } else if (std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) {
    c.cache_dir = std::filesystem::path(xdg) / "metajit";
  } else if (std::string home = env("HOME"); !home.empty()) {
    c.cache_dir = std::filesystem::path(home) / ".cache" / "metajit";
  } else {
    c.cache_dir = std::filesystem::path(".metajit-cache");
  }
  if (std::string v = env("METAJIT_CACHE_MAX_SIZE"); !v.empty() && !parse_size(v, c.cache_max_size))
    throw Error("METAJIT_CACHE_MAX_SIZE=" + v + " is not a size; expected e.g. 2G, 500M, 1048576");
  if (std::string v = env("METAJIT_CXX"); !v.empty()) c.cxx = v;
  if (std::string v = env("METAJIT_NVCC"); !v.empty()) c.nvcc = v;
  {
    std::istringstream in(env("METAJIT_CXXFLAGS"));
    for (std::string f; in >> f;) c.extra_cxxflags.push_back(f);
  }
  unsigned hw = std::thread::hardware_concurrency();
  c.jobs = env_int("METAJIT_JOBS", hw ? int(hw) : 1, 1, 1024);
  c.opt_level = env_int("METAJIT_OPT_LEVEL", 1, 0, 1);
  std::string lv = env("METAJIT_LOG");
  if (lv.empty() || lv == "warn" || lv == "warning")
    c.log_level = LogLevel::Warn;
  else if (lv == "quiet" || lv == "off" || lv == "0")
    c.log_level = LogLevel::Quiet;
  else if (lv == "info" || lv == "1")
    c.log_level = LogLevel::Info;
  else if (lv == "debug" || lv == "2")
    c.log_level = LogLevel::Debug;
  else
    throw Error("METAJIT_LOG=" + lv + " is not valid; expected quiet, warn, info or debug");
  c.specialize_shapes = env_flag("METAJIT_SPECIALIZE_SHAPES");
  c.record_path = env("METAJIT_RECORD");
  c.retrace_warn = env_int("METAJIT_RETRACE_WARN", 8, 0, 1 << 30);
  c.profile = env_flag("METAJIT_PROFILE");
  if (std::string v = env("METAJIT_DEVICE"); !v.empty()) c.device = v;
  if (c.device != "cpu" && c.device != "cuda")
    throw Error("METAJIT_DEVICE=" + c.device + " is not valid; expected cpu or cuda");
  if (std::string v = env("METAJIT_CUDA_ARCH"); !v.empty()) {
    bool ok = v.size() > 3 && v.compare(0, 3, "sm_") == 0;
    size_t digits = 0;
    while (ok && 3 + digits < v.size() && std::isdigit(static_cast<unsigned char>(v[3 + digits])))
      ++digits;
    const std::string suffix = ok ? v.substr(3 + digits) : "";
    if (!ok || digits < 2 || !(suffix.empty() || suffix == "a" || suffix == "f"))
      throw Error("METAJIT_CUDA_ARCH=" + v +
                  " is not valid; expected a real architecture such as sm_80, sm_90 or sm_90a");
    c.cuda_arch = v;
  }
  c.cuda_emulate = env_flag("METAJIT_CUDA_EMULATE");
  {
    std::istringstream in(env("METAJIT_NVCCFLAGS"));
    for (std::string f; in >> f;) c.extra_nvccflags.push_back(f);
  }
  if (std::string v = env("METAJIT_COMPILE_TIMEOUT");
      !v.empty() && !parse_duration(v, c.compile_timeout_seconds))
    throw Error("METAJIT_COMPILE_TIMEOUT=" + v + " is not a duration; expected e.g. 300, 90s, 5m");
  if (std::string v = env("METAJIT_DIST_TIMEOUT");
      !v.empty() && (!parse_duration(v, c.dist_timeout_seconds) || c.dist_timeout_seconds <= 0))
    throw Error("METAJIT_DIST_TIMEOUT=" + v +
                " is not a positive duration; expected e.g. 300, 90s, 5m");
  c.dist_overlap = env("METAJIT_DIST_OVERLAP").empty() || env_flag("METAJIT_DIST_OVERLAP");
  c.dump_dot_dir = env("METAJIT_DUMP_DOT");
  read_remote_config(c);
  return c;
}

std::mutex& config_mutex() {
  static std::mutex mu;
  return mu;
}
// Every Config ever read, the newest last. Old ones are kept alive (callers may still hold a
// reference to one across reload_config()) and reachable, so leak checkers stay quiet.
std::vector<std::unique_ptr<Config>>& configs() {
  static std::vector<std::unique_ptr<Config>> all;
  return all;
}

}  // namespace

const Config& config() {
  std::lock_guard<std::mutex> lock(config_mutex());
  if (configs().empty()) configs().push_back(std::make_unique<Config>(read_config()));
  return *configs().back();
}

void reload_config() {
  auto fresh = std::make_unique<Config>(read_config());
  std::lock_guard<std::mutex> lock(config_mutex());
  configs().push_back(std::move(fresh));
}

bool parse_size(const std::string& text, uint64_t& bytes) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  size_t i = 0;
  uint64_t v = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (v > (UINT64_MAX - 9) / 10) return false;
    v = v * 10 + uint64_t(text[i++] - '0');
  }
  std::string unit = text.substr(i);
  for (auto& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  // KiB, MiB...: an 'i' only after a unit letter ("5i" and "5iB" are not sizes).
  if (unit.size() == 2 && unit.back() == 'I') unit.pop_back();
  int shift = 0;
  if (unit.empty())
    shift = 0;
  else if (unit == "K")
    shift = 10;
  else if (unit == "M")
    shift = 20;
  else if (unit == "G")
    shift = 30;
  else if (unit == "T")
    shift = 40;
  else
    return false;
  if (shift && v > (UINT64_MAX >> shift)) return false;
  bytes = v << shift;
  return true;
}

bool parse_duration(const std::string& text, double& seconds) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  size_t used = 0;
  double v;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    return false;
  }
  std::string unit = text.substr(used);
  double mult;
  if (unit.empty() || unit == "s")
    mult = 1;
  else if (unit == "m" || unit == "min")
    mult = 60;
  else if (unit == "h")
    mult = 3600;
  else if (unit == "d")
    mult = 86400;
  else if (unit == "w")
    mult = 7 * 86400;
  else
    return false;
  // 1e308d is a finite number of days but not of seconds: an infinite timeout or age would
  // reach float-to-integer conversions later (found by fuzzing, tests/fuzz/corpus/cli_parsers).
  if (!(v >= 0) || !std::isfinite(v * mult)) return false;
  seconds = v * mult;
  return true;
}

}  // namespace metajit
