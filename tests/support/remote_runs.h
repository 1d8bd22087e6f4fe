// Running the remote-cache tests' helper programs as "machines" (tests/test_remote_faults.cc,
// tests/test_remote_poisoning.cc): a child process with its own environment whose output goes to
// a file the test can watch while it runs (so it can break the server between two batches),
// bounded by a hang limit; the counters a program prints; key pairs; the keys a Redis server
// holds; a compiler that holds kernel compiles until the test lets them go.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "remote_cache/signing_keys.h"
#include "support/files.h"
#include "support/processes.h"
#include "support/redis_server.h"

extern char** environ;

namespace metajit_test {

using RunEnv = std::vector<std::pair<std::string, std::string>>;

// How many times `needle` occurs in `text`.
inline size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The numeric "name=value" fields of the last line of `output` that starts with `line_start`
// (e.g. "ok compiled=" of many_kernels_program, "batch 1 " of remote_batches_program); empty
// when there is none.
inline std::map<std::string, unsigned long long> line_fields(const std::string& output,
                                                             const std::string& line_start) {
  std::map<std::string, unsigned long long> out;
  std::istringstream lines(output);
  std::string found;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(line_start, 0) == 0) found = line;
  std::istringstream words(found);
  for (std::string w; words >> w;) {
    const size_t eq = w.find('=');
    if (eq == std::string::npos || eq + 1 >= w.size()) continue;
    const std::string value = w.substr(eq + 1);
    if (value.find_first_not_of("0123456789") != std::string::npos) continue;
    out[w.substr(0, eq)] = std::stoull(value);
  }
  return out;
}

// A program started with `env` added to (and overriding) this process's environment, less any
// METAJIT_REMOTE* and METAJIT_LOG of its own; stdout and stderr go to `output_file`. SIGPIPE has
// its default disposition and no signal is blocked in it, whatever this process does. Killed
// (SIGKILL) if still running when the object goes away.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const RunEnv& env, std::filesystem::path output_file)
      : output_file_(std::move(output_file)) {
    std::vector<std::string> vars;
    for (char** e = environ; *e; ++e) {
      const std::string var = *e;
      const std::string name = var.substr(0, var.find('='));
      bool drop = name.rfind("METAJIT_REMOTE", 0) == 0 || name == "METAJIT_LOG";
      for (const auto& kv : env) drop = drop || kv.first == name;
      if (!drop) vars.push_back(var);
    }
    for (const auto& [name, value] : env) vars.push_back(name + "=" + value);
    // Everything the child needs is made before fork(): it only calls async-signal-safe
    // functions (this process may have threads, e.g. a test server).
    std::vector<std::string> args = argv;
    std::vector<char*> cargs, cvars;
    for (std::string& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    for (std::string& v : vars) cvars.push_back(v.data());
    cvars.push_back(nullptr);
    const int fd = ::open(output_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error("cannot create " + output_file_.string());
    start_ = std::chrono::steady_clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::signal(SIGPIPE, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::execve(cargs[0], cargs.data(), cvars.data());
      ::_exit(127);
    }
    ::close(fd);
    if (pid_ < 0) throw std::runtime_error("fork failed");
  }
  ~Child() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  std::string output() const { return read_file(output_file_); }

  // True while the program has not ended (reaps it when it has).
  bool running() {
    if (reaped_) return false;
    if (::waitpid(pid_, &status_, WNOHANG) == pid_) {
      reaped_ = true;
      end_ = std::chrono::steady_clock::now();
      return false;
    }
    return true;
  }

  // Waits (at most `seconds`) until the output holds `text`; false when the program ended or
  // the time ran out first.
  bool wait_for_output(const std::string& text, double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      if (output().find(text) != std::string::npos) return true;
      if (!running()) return output().find(text) != std::string::npos;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  // Waits (at most `seconds`: the hang bound) for the program to end; SIGKILLs it at the bound.
  // True when it ended by itself.
  bool finish(double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (running()) {
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status_, 0);
        reaped_ = true;
        end_ = std::chrono::steady_clock::now();
        hung_ = true;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  // After finish(): the exit status (-1 when it did not exit normally), the signal that ended
  // it (0 when none), whether it hung, its wall time.
  int exit_code() const { return reaped_ && WIFEXITED(status_) ? WEXITSTATUS(status_) : -1; }
  int signal() const { return reaped_ && WIFSIGNALED(status_) ? WTERMSIG(status_) : 0; }
  bool hung() const { return hung_; }
  double seconds() const { return std::chrono::duration<double>(end_ - start_).count(); }

 private:
  std::filesystem::path output_file_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false, hung_ = false;
  std::chrono::steady_clock::time_point start_, end_;
};

// A finished run of a program: what a test asserts on.
struct ProgramRun {
  int exit_code = -1;
  int signal = 0;
  bool hung = false;
  double seconds = 0;
  std::string output;
  std::map<std::string, unsigned long long> counters;  // of its last "ok ..." line
  bool ok = false;  // exit status 0 and an "ok" line (every value right)
};

// Runs `argv` with `env` to its end, at most `hang_bound` seconds (then it is killed and hung).
inline ProgramRun run_program(const std::vector<std::string>& argv, const RunEnv& env,
                              const std::filesystem::path& output_file, double hang_bound) {
  Child child(argv, env, output_file);
  ProgramRun r;
  child.finish(hang_bound);
  r.exit_code = child.exit_code();
  r.signal = child.signal();
  r.hung = child.hung();
  r.seconds = child.seconds();
  r.output = child.output();
  r.counters = line_fields(r.output, "ok compiled=");
  r.ok = r.exit_code == 0 && !r.counters.empty();
  return r;
}

// tests/programs/many_kernels_program with `n` kernels.
inline std::vector<std::string> many_kernels(int n) {
  return {test_program("many_kernels_program"), std::to_string(n)};
}

// A key pair made in `dir`: the secret key NAME.key, the public key NAME.key.pub.
struct KeyPair {
  std::filesystem::path secret, pub;
};
inline KeyPair make_key_pair(const std::filesystem::path& dir, const std::string& name) {
  KeyPair k{dir / (name + ".key"), dir / (name + ".key.pub")};
  metajit::generate_key_pair(name, k.secret);
  return k;
}

// The environment of a reader (METAJIT_REMOTE_MODE=read) trusting `trusted`, and of a writer
// (readwrite) signing with `signer` and trusting it, with its own cache directory.
inline RunEnv reader_env(const std::string& url, const std::filesystem::path& cache,
                         const KeyPair& trusted) {
  return {{"METAJIT_CACHE_DIR", cache.string()},
          {"METAJIT_REMOTE", url},
          {"METAJIT_REMOTE_MODE", "read"},
          {"METAJIT_REMOTE_TRUSTED_KEYS", trusted.pub.string()}};
}
// `env` with `name` set to `value` (replaced when it is there).
inline RunEnv with(RunEnv env, const std::string& name, const std::string& value) {
  for (auto& kv : env)
    if (kv.first == name) {
      kv.second = value;
      return env;
    }
  env.emplace_back(name, value);
  return env;
}
inline RunEnv writer_env(const std::string& url, const std::filesystem::path& cache,
                         const KeyPair& signer) {
  return with(with(reader_env(url, cache, signer), "METAJIT_REMOTE_MODE", "readwrite"),
              "METAJIT_REMOTE_SIGNING_KEY", signer.secret.string());
}

// The keys of `server` that match `pattern` (SCAN).
inline std::vector<std::string> scan_keys(const RedisServer& server, const std::string& pattern) {
  std::vector<std::string> keys;
  auto conn = server.connect();
  std::string cursor = "0";
  do {
    metajit::RedisReply r = conn->command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
    if (r.kind != metajit::RedisReply::Kind::Array || r.elements.size() != 2)
      throw std::runtime_error("SCAN: unexpected reply");
    cursor = r.elements[0].str;
    for (const metajit::RedisReply& k : r.elements[1].elements) keys.push_back(k.str);
  } while (cursor != "0");
  return keys;
}
inline std::vector<std::string> kernel_keys(const RedisServer& server) {
  return scan_keys(server, "metajit:default:kernel:*");
}
inline std::vector<std::string> lease_keys(const RedisServer& server) {
  return scan_keys(server, "metajit:default:lease:*");
}

// Waits (at most `seconds`) until the background uploads of `n` kernels are over: `server`
// holds `n` kernel entries and no lease (each upload releases its lease after the entry is in,
// so the uploader is not in the middle of a command when the test then breaks the server).
inline bool wait_for_uploads(const RedisServer& server, size_t n, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (kernel_keys(server).size() >= n && lease_keys(server).empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A test's remote: a redis-server started with `options`, a temporary folder and a key pair
// `key_name` made in it (tests call RedisServer::require() first).
struct RemoteSetup {
  explicit RemoteSetup(RedisOptions options = {}, const std::string& key_name = "writer")
      : server(std::move(options)), keys(make_key_pair(tmp.path(), key_name)) {}

  RedisServer server;
  TempDir tmp;
  KeyPair keys;

  // The environment of a writer signing with `keys`, or of a reader trusting them, whose cache
  // is the folder `machine` of tmp.
  RunEnv writer(const std::string& machine) const {
    return writer_env(server.url(), tmp.path() / machine, keys);
  }
  RunEnv reader(const std::string& machine) const {
    return reader_env(server.url(), tmp.path() / machine, keys);
  }
  // An empty folder "sync" of tmp (remote_batches_program's).
  std::filesystem::path sync() const {
    const std::filesystem::path dir = tmp.path() / "sync";
    std::filesystem::create_directories(dir);
    return dir;
  }
  // many_kernels_program with `n` kernels under `env`, its output in tmp/`output`.
  ProgramRun run(int n, const RunEnv& env, const std::string& output, double hang_bound) const {
    return run_program(many_kernels(n), env, tmp.path() / output, hang_bound);
  }
  // Fills the server with `n` kernels: a writer (cache `machine`, output `machine`.txt) runs
  // them, `check` asserts on its run, then its `n` uploads are waited for (at most 30 s).
  ProgramRun fill(int n, const std::string& machine, double hang_bound,
                  const std::function<void(const ProgramRun&)>& check) const {
    ProgramRun w = run(n, writer(machine), machine + ".txt", hang_bound);
    check(w);
    REQUIRE(wait_for_uploads(server, size_t(n), 30));
    return w;
  }
};

// `metajit cache stats --json` of a cache directory: the counters that processes using it
// recorded, at exit too (background uploads and their failures).
inline nlohmann::json cache_stats(const std::filesystem::path& cache) {
  ProcessResult r = run_command("METAJIT_CACHE_DIR=" + shell_quote(cache.string()) + " " +
                                shell_quote(cli_path().string()) + " cache stats --json");
  const size_t brace = r.output.find('{');
  if (r.exit_code != 0 || brace == std::string::npos)
    throw std::runtime_error("metajit cache stats failed: " + r.output);
  return nlohmann::json::parse(r.output.substr(brace));
}

// A C++ compiler (METAJIT_CXX) that holds every kernel compile (a command line with -shared)
// until the test opens the gate, and says it is holding one: a point between a writer's remote
// lookups and leases (done before compiling) and its uploads (after) where the test can break
// the server. Other invocations (version, probes) pass straight through to the real compiler.
class CompileGate {
 public:
  explicit CompileGate(const std::filesystem::path& dir) : dir_(dir) {
    const char* real = std::getenv("METAJIT_CXX");
    const std::string script =
        "#!/bin/sh\n"
        "for arg in \"$@\"; do\n"
        "  if [ \"$arg\" = -shared ]; then\n"
        "    : > " +
        shell_quote((dir_ / "compiling").string()) +
        "\n"
        "    i=0\n"
        "    while [ ! -e " +
        shell_quote((dir_ / "open").string()) +
        " ] && [ $i -lt 6000 ]; do\n"
        "      sleep 0.02; i=$((i+1))\n"
        "    done\n"
        "    break\n"
        "  fi\n"
        "done\n"
        "exec " +
        shell_quote(real && *real ? real : "g++") + " \"$@\"\n";
    write_file(compiler(), script);
    std::filesystem::permissions(compiler(), std::filesystem::perms::owner_all);
  }
  std::filesystem::path compiler() const { return dir_ / "gated-cxx"; }
  void open() { write_file(dir_ / "open", ""); }
  // Closes the gate and forgets that a compile was held.
  void close() {
    std::filesystem::remove(dir_ / "open");
    std::filesystem::remove(dir_ / "compiling");
  }
  // Waits (at most `seconds`) until a kernel compile is being held.
  bool wait_until_holding(double seconds) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!std::filesystem::exists(dir_ / "compiling")) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace metajit_test
