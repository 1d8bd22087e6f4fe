// Configuration from the environment (docs/api.md "Environment"), read once and cached.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace metajit {

enum class LogLevel { Quiet = 0, Warn = 1, Info = 2, Debug = 3 };

struct Config {
  std::filesystem::path
      cache_dir;  // METAJIT_CACHE_DIR, else $XDG_CACHE_HOME/metajit, else ~/.cache/metajit
  bool cache_dir_explicit = false;              // set by METAJIT_CACHE_DIR
  uint64_t cache_max_size = uint64_t(2) << 30;  // METAJIT_CACHE_MAX_SIZE (e.g. 2G, 500M, 1048576)
  std::string cxx = "g++";                      // METAJIT_CXX
  std::string nvcc = "nvcc";                    // METAJIT_NVCC
  std::vector<std::string> extra_cxxflags;      // METAJIT_CXXFLAGS, split on whitespace
  int jobs = 1;                                 // METAJIT_JOBS, default: hardware threads
  int opt_level = 1;                            // METAJIT_OPT_LEVEL 0|1
  LogLevel log_level = LogLevel::Warn;          // METAJIT_LOG quiet|warn|info|debug
  bool specialize_shapes = false;               // METAJIT_SPECIALIZE_SHAPES=1
  std::string record_path;                      // METAJIT_RECORD
  int retrace_warn = 8;                         // METAJIT_RETRACE_WARN
  bool profile = false;                         // METAJIT_PROFILE=1
  std::string device = "cpu";                   // METAJIT_DEVICE
  std::string cuda_arch = "sm_90";              // METAJIT_CUDA_ARCH (sm_<digits>[a|f])
  bool cuda_emulate = false;                    // METAJIT_CUDA_EMULATE=1: CUDA on the host
  std::vector<std::string> extra_nvccflags;     // METAJIT_NVCCFLAGS, split on whitespace
  double compile_timeout_seconds = 300;         // METAJIT_COMPILE_TIMEOUT
  double dist_timeout_seconds = 300;  // METAJIT_DIST_TIMEOUT: longest wait in a collective
  bool dist_overlap = true;  // METAJIT_DIST_OVERLAP=0: collectives where they are in the plan
  std::string dump_dot_dir;                     // METAJIT_DUMP_DOT: a DOT file per eval() there
  // The remote kernel cache (README "Sharing kernels across machines"; remote_cache/).
  std::string remote_url;             // METAJIT_REMOTE: redis://... or redis+unix:///path
  std::string remote_mode = "off";    // METAJIT_REMOTE_MODE off|read|readwrite (read if a URL)
  std::string remote_namespace = "default";  // METAJIT_REMOTE_NAMESPACE
  std::string remote_password_file;          // METAJIT_REMOTE_PASSWORD_FILE
  double remote_timeout_seconds = 2;         // METAJIT_REMOTE_TIMEOUT, per operation
  double remote_wait_seconds = 60;  // METAJIT_REMOTE_WAIT: longest wait for another's compile
  std::string remote_signing_key;   // METAJIT_REMOTE_SIGNING_KEY (secret key file)
  std::string remote_trusted_keys;  // METAJIT_REMOTE_TRUSTED_KEYS (public keys, one a line)
  bool remote_trust_unsigned = false;  // METAJIT_REMOTE_TRUST=unsigned
};

// The process-wide configuration (read from the environment on first use).
const Config& config();
// Re-reads the environment; for tests and tools that change variables at run time.
void reload_config();

// Parses sizes like "2G", "512M", "64k", "1048576" (binary units). Returns false if malformed.
bool parse_size(const std::string& text, uint64_t& bytes);
// Parses durations like "7d", "12h", "30m", "45s". Returns false if malformed.
bool parse_duration(const std::string& text, double& seconds);

}  // namespace metajit
