// Compiler processes (docs/design.md §7): Boost.Process with an argument vector, stdout+stderr read
// from one pipe while the child runs (so a chatty compiler never blocks on a full pipe), a
// deadline after which the whole process group is killed, and a bounded pool of parallel jobs.
#include "runtime/compiler_driver.h"

#include <fcntl.h>
#include <poll.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/process.hpp>
#include <boost/process/extend.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "base/log.h"

namespace metajit {
namespace {

namespace bp = boost::process;
using Clock = std::chrono::steady_clock;

// Compiler diagnostics beyond this are dropped (still read, so the child never blocks).
constexpr size_t kMaxOutputBytes = size_t(1) << 20;
// After the child exits, leftover writers (none for a well-behaved compiler) get this long.
constexpr double kDrainSeconds = 2.0;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string join_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1fs", s);
  return buf;
}

// Reads what is available on a non-blocking descriptor. Returns false at end of file.
bool read_available(int fd, std::string& output, bool& truncated) {
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      size_t room = output.size() < kMaxOutputBytes ? kMaxOutputBytes - output.size() : 0;
      output.append(buf, std::min(room, size_t(n)));
      if (size_t(n) > room) truncated = true;
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;  // any other error: treat as closed
  }
}

// Waits up to `ms` for output on `fd` (or just sleeps when fd < 0) and appends it.
void pump_output(int fd, int ms, std::string& output, bool& eof, bool& truncated) {
  pollfd p{fd, POLLIN, 0};
  int r = ::poll(&p, 1, ms);
  if (r > 0 && fd >= 0 && (p.revents & (POLLIN | POLLHUP | POLLERR)))
    eof = !read_available(fd, output, truncated);
}

// True once the child has terminated; leaves it a zombie (WNOWAIT) so that its pid, which is
// also its process group id, cannot be reused before the group is killed.
bool has_exited(pid_t pid) {
  siginfo_t info;
  std::memset(&info, 0, sizeof info);
  if (::waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0)
    return errno != EINTR;  // ECHILD: already reaped, nothing to wait for
  return info.si_pid == pid;
}

// Boost.Process 1.74 forgets the child whose execve() failed (e.g. "Exec format error") and
// leaves it a zombie; this initializer reaps it. The child exits right after reporting the
// failure, so the wait is short and bounded.
struct ReapFailedExec : bp::extend::handler {
  template <class Executor>
  void on_error(Executor& exec, const std::error_code&) const {
    if (exec.pid <= 0) return;
    for (int i = 0; i < 1000; ++i) {
      int status;
      pid_t r = ::waitpid(exec.pid, &status, WNOHANG);
      if (r == exec.pid || (r < 0 && errno != EINTR)) return;
      ::usleep(1000);
    }
  }
};

// A compiler outlives a process killed mid-compile: without this its linker would go on
// writing into the dead process's staging directory while another process sweeps it, and the
// sweep could leave it behind (seen: a SIGKILLed process's staging directory surviving the next
// process's sweep). The child asks to be killed with its parent, and exits at once if the
// parent is already gone (it died between fork and prctl). Linux only.
struct DieWithParent : bp::extend::handler {
  pid_t parent = ::getpid();
  template <class Executor>
  void on_exec_setup(Executor&) const {
#ifdef __linux__
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
#endif
  }
};

// The executable for argv[0]: a name is looked up on PATH (no shell involved), a path is used
// as given.
std::optional<boost::filesystem::path> resolve_executable(const std::string& name,
                                                          std::string& why) {
  if (name.find('/') != std::string::npos) {
    if (::access(name.c_str(), X_OK) != 0) {
      why = "cannot run '" + name + "': " + std::strerror(errno);
      return std::nullopt;
    }
    return boost::filesystem::path(name);
  }
  boost::filesystem::path found = bp::search_path(name);
  if (found.empty()) {
    why = "cannot run '" + name + "': command not found on PATH";
    return std::nullopt;
  }
  return found;
}

// A started compiler: the read end of its output pipe, its process group and the child.
struct RunningCompiler {
  std::optional<bp::pipe> pipe;
  bp::group group;
  std::unique_ptr<bp::child> child;
};

// Starts `exe` with argv's arguments, its output and errors into a pipe of our own; false, with
// `out` saying why, where it could not start.
bool start_compiler(const boost::filesystem::path& exe, const std::vector<std::string>& argv,
                    RunningCompiler& rc, CompileOutcome& out) {
  // Our own pipe with O_CLOEXEC: children started concurrently by other threads must not
  // inherit this write end, or our reader would wait for *their* exit to see end of file.
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    out.failed_to_start = true;
    out.output =
        std::string("cannot create a pipe for the compiler's output: ") + std::strerror(errno);
    return false;
  }
  rc.pipe.emplace(fds[0], fds[1]);
  // A process group of its own (rc.group), so that a timeout also kills cc1plus/as started by g++.
  std::error_code start_error;  // an error handler: Boost then reports instead of throwing
  try {
    std::vector<std::string> args(argv.begin() + 1, argv.end());
    // clang-format would read the redirections as template brackets.
    // clang-format off
    rc.child = std::make_unique<bp::child>(bp::exe = exe.string(), bp::args = args,
                                           bp::std_in < bp::null,
                                           (bp::std_out & bp::std_err) > *rc.pipe,
                                           rc.group, ReapFailedExec{}, DieWithParent{}, start_error);
    // clang-format on
  } catch (const std::exception& e) {
    start_error = std::make_error_code(std::errc::io_error);
    out.output = e.what();
  }
  if (start_error || !rc.child || !rc.child->valid()) {
    out.failed_to_start = true;
    out.output = "cannot start '" + argv[0] +
                 "': " + (out.output.empty() ? start_error.message() : out.output);
    return false;
  }
  return true;
}

// Collects the compiler's output until it exits or `timeout_seconds` after `start` pass
// (out.timed_out), then ends its process group, reaps it and drains what is left in the pipe.
void await_compiler(RunningCompiler& rc, double timeout_seconds, Clock::time_point start,
                    CompileOutcome& out) {
  const int fd = rc.pipe->native_source();
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  const pid_t pid = rc.child->id();
  bool eof = false, truncated = false;
  int idle_ms = 1;
  for (;;) {
    if (has_exited(pid)) break;
    double left = timeout_seconds > 0 ? timeout_seconds - seconds_since(start) : 1e9;
    if (left <= 0) {
      out.timed_out = true;
      break;
    }
    // Output wakes us at once; with the pipe closed we poll for the exit, backing off.
    int wait_ms = eof ? idle_ms : 50;
    wait_ms = std::max(1, std::min(wait_ms, int(left * 1000) + 1));
    pump_output(eof ? -1 : fd, wait_ms, out.output, eof, truncated);
    if (eof) idle_ms = std::min(idle_ms * 2, 20);
  }
  std::error_code ec;
  rc.group.terminate(ec);  // the leader is still a zombie here, so the group id is still ours
  rc.child->wait(ec);
  const Clock::time_point drain_start = Clock::now();
  while (!eof && seconds_since(drain_start) < kDrainSeconds)
    pump_output(fd, 50, out.output, eof, truncated);
  if (truncated) out.output += "\n[metajit: output truncated]\n";
}

// The exit status of a compiler that ran to its end: its code, or 128 + the signal that
// killed it (with a line saying which); out.ok for a clean exit 0.
void record_exit(const RunningCompiler& rc, const std::string& name, CompileOutcome& out) {
  const int status = rc.child->native_exit_code();
  if (WIFEXITED(status)) {
    out.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    out.exit_code = 128 + WTERMSIG(status);
    out.output += "\n[metajit: '" + name + "' was killed by signal " +
                  std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")]\n";
  }
  out.ok = WIFEXITED(status) && out.exit_code == 0;
}

CompileOutcome run_one(const std::vector<std::string>& argv, double timeout_seconds) {
  CompileOutcome out;
  out.command = join_command(argv);
  const Clock::time_point start = Clock::now();
  if (argv.empty() || argv[0].empty()) {
    out.failed_to_start = true;
    out.output = "empty compiler command";
    return out;
  }
  std::string why;
  std::optional<boost::filesystem::path> exe = resolve_executable(argv[0], why);
  if (!exe) {
    out.failed_to_start = true;
    out.output = why;
    out.seconds = seconds_since(start);
    return out;
  }
  RunningCompiler rc;
  if (!start_compiler(*exe, argv, rc, out)) {
    out.seconds = seconds_since(start);
    return out;
  }
  await_compiler(rc, timeout_seconds, start, out);
  out.seconds = seconds_since(start);
  if (out.timed_out) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", timeout_seconds);
    out.output += "\n[metajit: '" + argv[0] + "' timed out after " + buf + " s and was killed]\n";
    return out;
  }
  record_exit(rc, argv[0], out);
  return out;
}

// The "Compiling kernels (i/n) used 1.2s eta 0.8s" line: rewritten in place on a terminal, one
// line per change otherwise (logs stay readable). `always`: from the first kernel on, whatever
// stderr is (warming a cache is long work that is there to be watched).
class Progress {
 public:
  Progress(size_t total, bool always) : total_(total), tty_(::isatty(2) == 1), always_(always) {
    enabled_ = always || tty_ || log_enabled(LogLevel::Info);
  }

  void update(size_t done, double elapsed) {
    if (!enabled_ || (elapsed < 1.0 && !always_)) return;
    if (!tty_ && printed_ && done == last_done_) return;
    std::string eta = done ? format_seconds(elapsed / double(done) * double(total_ - done)) : "?";
    std::string line = "Compiling kernels (" + std::to_string(done) + "/" + std::to_string(total_) +
                       ") used " + format_seconds(elapsed) + " eta " + eta;
    emit(line);
    last_done_ = done;
  }

  void finish(size_t failed, double elapsed) {
    if (!printed_) return;
    std::string line = "Compiled " + std::to_string(total_) + " kernel" + (total_ == 1 ? "" : "s") +
                       " in " + format_seconds(elapsed);
    if (failed) line += " (" + std::to_string(failed) + " failed)";
    emit(line);
    if (tty_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  void emit(const std::string& line) {
    std::string text;
    if (tty_) {
      text = "\r" + line;
      // Blank out the tail of a longer previous line.
      if (line.size() < width_) text.append(width_ - line.size(), ' ');
      width_ = std::max(width_, line.size());
    } else {
      text = "metajit: " + line + "\n";
    }
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
    printed_ = true;
  }

  size_t total_;
  bool tty_;
  bool always_;
  bool enabled_ = false;
  bool printed_ = false;
  size_t last_done_ = 0;
  size_t width_ = 0;
};

}  // namespace

CompileOutcome run_compiler(const std::vector<std::string>& argv, double timeout_seconds) {
  try {
    return run_one(argv, timeout_seconds);
  } catch (const std::exception& e) {
    // Nothing escapes: the caller turns a failed outcome into a CompileError with context.
    CompileOutcome out;
    out.command = join_command(argv);
    out.failed_to_start = true;
    out.output = std::string("running the compiler failed: ") + e.what();
    return out;
  }
}

std::vector<CompileOutcome> run_compilers(const std::vector<std::vector<std::string>>& commands,
                                          int jobs, double timeout_seconds,
                                          bool always_show_progress) {
  const size_t n = commands.size();
  std::vector<CompileOutcome> results(n);
  if (n == 0) return results;
  const size_t workers = std::min(n, size_t(std::max(jobs, 1)));
  const Clock::time_point start = Clock::now();

  std::atomic<size_t> next{0};
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  std::vector<std::thread> threads;
  threads.reserve(workers);
  for (size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) {
        results[i] = run_compiler(commands[i], timeout_seconds);
        std::lock_guard<std::mutex> lock(mu);
        ++done;
        cv.notify_one();
      }
    });
  }

  Progress progress(n, always_show_progress);
  progress.update(0, 0);
  {
    std::unique_lock<std::mutex> lock(mu);
    while (done < n) {
      cv.wait_for(lock, std::chrono::milliseconds(200));
      size_t now_done = done;
      lock.unlock();
      progress.update(now_done, seconds_since(start));
      lock.lock();
    }
  }
  for (std::thread& t : threads) t.join();
  size_t failed = size_t(
      std::count_if(results.begin(), results.end(), [](const CompileOutcome& r) { return !r.ok; }));
  progress.finish(failed, seconds_since(start));
  return results;
}

}  // namespace metajit
