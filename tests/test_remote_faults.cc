// The remote kernel cache never fails a program because of the network (issue 15, README
// "Sharing kernels across machines"): no server, a server SIGKILLed or SIGSTOPped mid-run, a
// server that trickles its reply or resets the connection mid-reply, a wrong or missing
// password, a server out of memory (noeviction), a write to a connection the server closed
// (SIGPIPE). Each case runs helper programs as separate processes against a real redis-server
// (or a misbehaving test server in a thread) and checks: every value right (the programs check
// them against the reference interpreter), exit status 0, one warning per cause, the counters
// of stats() and of the cache's statistics, and a hang bound on the time.
//
// The hang bound is generous (a program here takes a second or two, its fault included; the
// bound is not meant to measure the extra time): what shows that a fault costs little is the
// counters (one timeout, not one per kernel, thanks to the back-off) and the test servers' own
// records (one connection).
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include "support/files.h"
#include "support/processes.h"
#include "support/redis_server.h"
#include "support/remote_runs.h"

namespace fs = std::filesystem;
using metajit_test::Child;
using metajit_test::CompileGate;
using metajit_test::KeyPair;
using metajit_test::occurrences;
using metajit_test::ProgramRun;
using metajit_test::RedisOptions;
using metajit_test::RedisServer;
using metajit_test::RemoteSetup;
using metajit_test::run_program;
using metajit_test::RunEnv;
using metajit_test::TempDir;
using metajit_test::with;

namespace {

// A program of a few kernels takes a second or two here, its fault included; one that is still
// running after this long hangs on the fault (the hang bound of every run below: it is then
// killed and the test fails).
constexpr double kHangBound = 90;
// remote_store.cc's first back-off after a failure (kFirstBackoffSeconds).
constexpr double kBackoffSeconds = 5;

// The warning line of one failure cause (remote_failure_name in redis_connection.cc).
std::string warning_of(const std::string& cause) {
  return "remote cache (" + cause + ")";
}
// Any failure warning, whatever the cause.
const std::string kAnyFailureWarning = "metajit: warning: remote cache (";

std::vector<std::string> batches_program(int k, int b, const fs::path& sync) {
  return {metajit_test::test_program("remote_batches_program"), std::to_string(k),
          std::to_string(b), sync.string()};
}
void go(const fs::path& sync, int n) {
  metajit_test::write_file(sync / ("go" + std::to_string(n)), "");
}

// Waits for remote_batches_program's line of batch `b` and returns its fields; fails when the
// line does not come or says a value was wrong ("batch b WRONG").
std::map<std::string, unsigned long long> batch_done(Child& program, int b) {
  const std::string head = "batch " + std::to_string(b) + " ";
  INFO(program.output());
  REQUIRE(program.wait_for_output(head, kHangBound));
  REQUIRE(program.wait_for_output(head + "ok", 5));  // the rest of the line, when it is ok
  return metajit_test::line_fields(program.output(), head);
}

// What every run below must show: it ended by itself, exit status 0, every value right.
void require_ok(const ProgramRun& r) {
  INFO(r.output);
  REQUIRE_FALSE(r.hung);
  REQUIRE(r.signal == 0);
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.ok);
}

// A run that ran right (require_ok) and whose counters named in `expected` have those values.
void require_counters(const ProgramRun& r,
                      const std::map<std::string, unsigned long long>& expected) {
  require_ok(r);
  INFO(r.output);
  for (const auto& [name, value] : expected) {
    INFO(name);
    CHECK(r.counters.at(name) == value);
  }
}

// The counters of a run of many_kernels_program where the remote failed once at the first
// lookup: all `n` kernels compiled here, nothing from or to the remote, one error.
void require_compiled_locally(const ProgramRun& r, unsigned long long n) {
  INFO(r.output);
  CHECK(r.counters.at("compiled") == n);
  CHECK(r.counters.at("remote_hits") == 0);
  CHECK(r.counters.at("remote_misses") == 0);
  CHECK(r.counters.at("remote_rejected") == 0);
  CHECK(r.counters.at("remote_errors") == 1);
  CHECK(r.counters.at("remote_uploads") == 0);
}

// Exactly one failure warning in `output`, the one of `cause`.
void require_one_warning(const std::string& output, const std::string& cause) {
  CHECK(occurrences(output, warning_of(cause)) == 1);
  CHECK(occurrences(output, kAnyFailureWarning) == 1);
}

// A run of `n` kernels where the remote failed once, with `cause`, at the first lookup: it ran
// right, compiled everything here and warned once.
void require_failed_once(const ProgramRun& r, unsigned long long n, const std::string& cause) {
  require_ok(r);
  require_compiled_locally(r, n);
  require_one_warning(r.output, cause);
}

// The first line of `text` that holds `part` ("" when none does).
std::string first_line_with(const std::string& text, const std::string& part) {
  const size_t at = text.find(part);
  if (at == std::string::npos) return "";
  const size_t begin = text.rfind('\n', at);
  const size_t from = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(from, text.find('\n', at) - from);
}

// Kills `server` and waits (at most 10 s) until its socket refuses connections: its listening
// socket is closed, and with it (in the same pass over its files) every client connection, so
// the next write of a program into one fails with EPIPE rather than reaching a dying server.
void kill_and_confirm(metajit_test::RedisServer& server) {
  const metajit::RedisEndpoint endpoint = server.endpoint();
  server.kill_now();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    try {
      metajit::RedisConnection probe(endpoint, "", 0.2, 0.2);
    } catch (const metajit::RedisFailure& f) {
      if (f.kind == metajit::RemoteFailure::Unreachable) return;
    }
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Lets remote_batches_program `program` (waiting at `sync`) run batches `from` to `to` and end
// after the server was killed; its output, which must show that it ended by itself with exit
// status 0 and no signal, that SIGPIPE kept its default action in it, that a write went into
// the dead connection (EPIPE, which raises SIGPIPE) and that the one warning is "connection lost".
std::string finish_after_broken_pipe(Child& program, const fs::path& sync, int from, int to) {
  for (int b = from; b <= to; ++b) go(sync, b);
  REQUIRE(program.finish(kHangBound));
  const std::string out = program.output();
  INFO(out);
  CHECK(program.signal() == 0);  // SIGPIPE's default action would have ended it here
  CHECK(program.exit_code() == 0);
  CHECK(out.find("done sigpipe=default") != std::string::npos);
  // The warning line itself in the expression, so that a CI log cut after the first lines of a
  // failure still says what the program saw instead.
  CHECK_THAT(first_line_with(out, kAnyFailureWarning), Catch::Matchers::Contains("Broken pipe"));
  require_one_warning(out, "connection lost");
  return out;
}

// The options of a server whose maxmemory-policy is noeviction.
RedisOptions noeviction() {
  RedisOptions options;
  options.policy = "noeviction";
  return options;
}

// A TCP server on 127.0.0.1 that misbehaves on purpose, in a thread of the test. It accepts a
// connection, reads the first command and then either trickles an endless bulk reply one byte
// every 50 ms until the client hangs up, or sends half of a reply and closes the connection
// (FIN) or resets it (RST).
class MisbehavingServer {
 public:
  enum class Mode { Trickle, HalfReplyThenClose, HalfReplyThenReset };
  explicit MisbehavingServer(Mode mode) : mode_(mode) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(fd_, 16) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw std::runtime_error("cannot listen on 127.0.0.1");
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~MisbehavingServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  MisbehavingServer(const MisbehavingServer&) = delete;
  MisbehavingServer& operator=(const MisbehavingServer&) = delete;

  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  int connections() const { return connections_; }  // accepted
  int requests() const { return requests_; }        // connections that sent a command
  int trickled() const { return trickled_; }        // bytes of the endless reply sent

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      connections_++;
      handle(c);
      ::close(c);
    }
  }
  void handle(int c) {
    char buf[4096];
    pollfd in{c, POLLIN, 0};
    if (::poll(&in, 1, 5000) <= 0 || ::recv(c, buf, sizeof buf, 0) <= 0) return;
    requests_++;
    if (mode_ == Mode::Trickle) {
      const std::string head = "$1000000\r\n";
      for (size_t i = 0; !stop_; ++i) {
        const char byte = i < head.size() ? head[i] : 'x';
        if (::send(c, &byte, 1, MSG_NOSIGNAL) != 1) return;
        trickled_++;
        pollfd p{c, POLLIN, 0};
        if (::poll(&p, 1, 50) > 0 && ::recv(c, buf, sizeof buf, MSG_DONTWAIT) <= 0)
          return;  // the client hung up
      }
      return;
    }
    const std::string half = "$64\r\n" + std::string(32, 'x');
    ::send(c, half.data(), half.size(), MSG_NOSIGNAL);
    if (mode_ == Mode::HalfReplyThenReset) {
      linger l{1, 0};  // close() then sends RST
      ::setsockopt(c, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
  }

  Mode mode_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0}, requests_{0}, trickled_{0};
  std::thread thread_;
};

}  // namespace

TEST_CASE("no server at a nonexistent socket: compiled locally, one warning, later runs quiet",
          "[remote]") {
  TempDir tmp;
  const KeyPair keys = metajit_test::make_key_pair(tmp.path(), "writer");
  const std::string url = "redis+unix://" + (tmp.path() / "no-such.sock").string();
  const RunEnv env = metajit_test::writer_env(url, tmp.path() / "cache", keys);
  ProgramRun first =
      run_program(metajit_test::many_kernels(4), env, tmp.path() / "1.txt", kHangBound);
  require_failed_once(first, 4, "unreachable");
  CHECK(first.counters.at("remote_timeouts") == 0);
  CHECK(first.output.find("No such file or directory") != std::string::npos);
  // The uploads queued meanwhile were dropped in the back-off, not tried (and not warned about).
  nlohmann::json stats = metajit_test::cache_stats(tmp.path() / "cache");
  CHECK(stats["remote_errors"] == 1);
  CHECK(stats["remote_uploads"] == 0);

  // The local cache has every kernel: the next run takes them from disk and never asks the
  // remote, so it has nothing to warn about.
  ProgramRun second =
      run_program(metajit_test::many_kernels(4), env, tmp.path() / "2.txt", kHangBound);
  require_counters(second, {{"compiled", 0}, {"disk_hits", 4}, {"remote_errors", 0}});
  CHECK(occurrences(second.output, kAnyFailureWarning) == 0);
}

TEST_CASE("no server at a stale socket file or a closed TCP port: compiled locally, one warning",
          "[remote]") {
  RedisServer::require();
  TempDir tmp;
  const KeyPair keys = metajit_test::make_key_pair(tmp.path(), "writer");
  for (bool tcp : {false, true}) {
    RedisOptions options;
    options.tcp = tcp;
    RedisServer server(options);
    const std::string url = server.url();
    server.kill_now();  // SIGKILL: a Unix socket's file stays behind; a TCP port is closed
    INFO(url);
    const fs::path cache = tmp.path() / (tcp ? "tcp" : "unix");
    ProgramRun r =
        run_program(metajit_test::many_kernels(4), metajit_test::reader_env(url, cache, keys),
                    cache.string() + ".txt", kHangBound);
    require_failed_once(r, 4, "unreachable");
    CHECK(r.counters.at("remote_timeouts") == 0);
    CHECK(r.output.find("Connection refused") != std::string::npos);
  }
}

TEST_CASE("server SIGKILLed between batches: compiled locally, back-off, used again after restart",
          "[remote]") {
  RedisServer::require();
  RemoteSetup remote;
  RedisServer& server = remote.server;
  const fs::path sync = remote.sync();
  Child program(batches_program(3, 3, sync), remote.writer("cache"), remote.tmp.path() / "out.txt");
  auto b0 = batch_done(program, 0);
  CHECK(b0.at("compiled") == 3);
  CHECK(b0.at("remote_misses") == 3);
  CHECK(b0.at("remote_errors") == 0);
  REQUIRE(metajit_test::wait_for_uploads(server, 3, 30));  // batch 0's uploads

  server.kill_now();
  go(sync, 1);
  auto b1 = batch_done(program, 1);
  const auto failed_by = std::chrono::steady_clock::now();
  CHECK(b1.at("compiled") == 6);       // batch 1 compiled here
  CHECK(b1.at("remote_misses") == 3);  // no lookup of batch 1 reached a server
  CHECK(b1.at("remote_errors") == 1);  // the first failed; the others waited out the back-off

  // The server comes back (empty: it persists nothing). Once the back-off is over the same
  // process uses it again: lookups (misses) and batch 2's uploads reach it.
  server.restart();
  std::this_thread::sleep_until(failed_by +
                                std::chrono::duration<double>(kBackoffSeconds + 0.5));  // a margin
  go(sync, 2);
  auto b2 = batch_done(program, 2);
  CHECK(b2.at("compiled") == 9);
  CHECK(b2.at("remote_misses") == 6);
  CHECK(b2.at("remote_errors") == 1);
  go(sync, 3);
  REQUIRE(program.finish(kHangBound));
  const std::string out = program.output();
  INFO(out);
  CHECK(program.exit_code() == 0);
  CHECK(out.find("done sigpipe=default") != std::string::npos);
  CHECK(occurrences(out, kAnyFailureWarning) == 1);
  // The restarted server got batch 2's three kernels, and no lease was left behind.
  CHECK(metajit_test::kernel_keys(server).size() == 3);
  CHECK(metajit_test::lease_keys(server).empty());
  nlohmann::json stats = metajit_test::cache_stats(remote.tmp.path() / "cache");
  CHECK(stats["remote_uploads"] == 6);
  CHECK(stats["remote_errors"] == 1);

  // A later process on another machine uses the restarted server: batch 2's kernels are hits.
  ProgramRun later = run_program(batches_program(3, 3, sync), remote.reader("B"),
                                 remote.tmp.path() / "later.txt", kHangBound);
  INFO(later.output);
  REQUIRE(later.exit_code == 0);
  auto l2 = metajit_test::line_fields(later.output, "batch 2 ");
  CHECK(l2.at("remote_hits") == 3);
  CHECK(l2.at("remote_errors") == 0);
}

TEST_CASE("a lookup that writes to a connection the server closed does not SIGPIPE the program",
          "[remote]") {
  RedisServer::require();
  RemoteSetup remote;  // a Unix socket: a write after the server is gone fails with EPIPE
  const fs::path sync = remote.sync();
  Child program(batches_program(2, 2, sync), remote.writer("cache"), remote.tmp.path() / "out.txt");
  batch_done(program, 0);
  REQUIRE(metajit_test::wait_for_uploads(remote.server, 2, 30));
  kill_and_confirm(remote.server);  // the program's connection stays open on its side
  // The lookup of batch 1 writes into the dead connection.
  const std::string out = finish_after_broken_pipe(program, sync, 1, 2);
  INFO(out);
  CHECK(out.find("batch 1 ok") != std::string::npos);
}

TEST_CASE("server SIGKILLed while a batch's uploads are queued: the upload thread survives it",
          "[remote]") {
  RedisServer::require();
  RemoteSetup remote;
  const fs::path sync = remote.sync();
  CompileGate gate(remote.tmp.path());
  gate.open();
  Child program(batches_program(2, 2, sync),
                with(remote.writer("cache"), "METAJIT_CXX", gate.compiler().string()),
                remote.tmp.path() / "out.txt");
  batch_done(program, 0);
  REQUIRE(metajit_test::wait_for_uploads(remote.server, 2, 30));  // through the upload connection
  gate.close();
  go(sync, 1);
  // Batch 1 has looked its kernels up and leased them (before compiling); now kill the server.
  REQUIRE(gate.wait_until_holding(kHangBound));
  CHECK(metajit_test::lease_keys(remote.server).size() == 2);
  kill_and_confirm(remote.server);
  gate.open();
  batch_done(program, 1);
  // The upload thread writes into its dead connection (EPIPE: a SIGPIPE kept from the program).
  finish_after_broken_pipe(program, sync, 2, 2);
  // Batch 0's two uploads went through; of batch 1's, the first failed (one error) and the
  // second was dropped in the back-off.
  nlohmann::json stats = metajit_test::cache_stats(remote.tmp.path() / "cache");
  CHECK(stats["remote_uploads"] == 2);
  CHECK(stats["remote_errors"] == 1);
  CHECK(stats["remote_timeouts"] == 0);
}

TEST_CASE("server SIGSTOPped: one timeout thanks to the back-off, then used again once resumed",
          "[remote]") {
  RedisServer::require();
  RemoteSetup remote;
  RedisServer& server = remote.server;
  // Before it stops, the server gets 4 kernels from a writer.
  remote.fill(4, "W", kHangBound, require_ok);

  server.stop();  // accepts connections (the kernel's backlog) and never answers
  // 8 kernels with a 0.5 s timeout: without the back-off, 8 timeouts (4 s); with it, one.
  for (const char* mode : {"read", "readwrite"}) {
    INFO(mode);
    const std::string machine = std::string("stopped-") + mode;
    const RunEnv env = with(with(remote.writer(machine), "METAJIT_REMOTE_MODE", mode),
                            "METAJIT_REMOTE_TIMEOUT", "0.5");
    ProgramRun r = remote.run(8, env, machine + ".txt", kHangBound);
    require_failed_once(r, 8, "timeout");
    CHECK(r.counters.at("remote_timeouts") == 1);
    nlohmann::json stats = metajit_test::cache_stats(remote.tmp.path() / machine);
    CHECK(stats["remote_timeouts"] == 1);  // the queued uploads (readwrite) did not try
    CHECK(stats["remote_uploads"] == 0);
  }

  server.resume();
  ProgramRun later = remote.run(4, remote.reader("R"), "r.txt", kHangBound);
  require_counters(later, {{"remote_hits", 4}, {"compiled", 0}, {"remote_errors", 0}});
}

TEST_CASE("a server that trickles its reply byte by byte times out once per command deadline",
          "[remote]") {
  TempDir tmp;
  const KeyPair keys = metajit_test::make_key_pair(tmp.path(), "writer");
  MisbehavingServer server(MisbehavingServer::Mode::Trickle);
  // A byte every 50 ms never lets a per-read timeout of 0.5 s expire: only a deadline for the
  // whole command ends the wait. A client without one would wait for the endless reply until
  // the hang bound.
  ProgramRun r =
      run_program(metajit_test::many_kernels(4),
                  with(metajit_test::reader_env(server.url(), tmp.path() / "cache", keys),
                       "METAJIT_REMOTE_TIMEOUT", "0.5"),
                  tmp.path() / "out.txt", kHangBound);
  require_failed_once(r, 4, "timeout");
  CHECK(r.counters.at("remote_timeouts") == 1);
  CHECK(server.trickled() >= 3);     // the client was being sent bytes when it gave up
  CHECK(server.connections() == 1);  // the back-off kept the other lookups away
}

TEST_CASE("a server that resets the connection mid-reply: connection lost, compiled locally",
          "[remote]") {
  TempDir tmp;
  const KeyPair keys = metajit_test::make_key_pair(tmp.path(), "writer");
  for (auto mode :
       {MisbehavingServer::Mode::HalfReplyThenClose, MisbehavingServer::Mode::HalfReplyThenReset}) {
    const bool reset = mode == MisbehavingServer::Mode::HalfReplyThenReset;
    INFO((reset ? "RST" : "FIN") << " after half a reply");
    MisbehavingServer server(mode);
    const fs::path cache = tmp.path() / (reset ? "reset" : "close");
    ProgramRun r = run_program(metajit_test::many_kernels(4),
                               metajit_test::reader_env(server.url(), cache, keys),
                               cache.string() + ".txt", kHangBound);
    require_failed_once(r, 4, "connection lost");
    CHECK(r.counters.at("remote_timeouts") == 0);
    CHECK(server.requests() == 1);
    CHECK(server.connections() == 1);
  }
}

TEST_CASE("wrong or missing password: not authorized, compiled locally, the password not shown",
          "[remote]") {
  RedisServer::require();
  RedisOptions options;
  options.password = "right-horse-battery";
  RemoteSetup remote(options);
  const fs::path& tmp = remote.tmp.path();
  metajit_test::write_file(tmp / "wrong.pass", "wrong-staple-7\n");
  metajit_test::write_file(tmp / "right.pass", "right-horse-battery\n");
  for (const std::string password : {"wrong", "none"}) {
    INFO(password);
    RunEnv env = remote.writer(password);
    if (password == "wrong")
      env.emplace_back("METAJIT_REMOTE_PASSWORD_FILE", (tmp / "wrong.pass").string());
    ProgramRun r = remote.run(4, env, password + ".txt", kHangBound);
    require_failed_once(r, 4, "not authorized");
    CHECK(r.output.find("wrong-staple-7") == std::string::npos);
    CHECK(r.output.find("right-horse-battery") == std::string::npos);
  }
  CHECK(metajit_test::kernel_keys(remote.server).empty());
  // The right password: the same program uses the server.
  ProgramRun right = remote.run(
      4,
      with(remote.writer("right"), "METAJIT_REMOTE_PASSWORD_FILE", (tmp / "right.pass").string()),
      "right.txt", kHangBound);
  require_counters(right, {{"remote_misses", 4}, {"remote_errors", 0}});
  CHECK(occurrences(right.output, kAnyFailureWarning) == 0);
}

TEST_CASE("server out of memory with noeviction: the writer is refused once, readers read what fit",
          "[remote]") {
  RedisServer::require();
  RemoteSetup remote(noeviction());
  RedisServer& server = remote.server;
  // Kernels 0-3 fit; then the server is full (every write is refused with OOM).
  remote.fill(4, "A", kHangBound, require_ok);
  REQUIRE(server.command({"CONFIG", "SET", "maxmemory", "1"}).kind ==
          metajit::RedisReply::Kind::Status);

  // A writer of kernels 0-7: the first of 4-7 it looks up misses, and the write that follows
  // (its lease, SET NX) is refused; the lookups after it wait out the back-off. Those of 0-3
  // looked up before it are remote hits (the order of the lookups is the library's).
  ProgramRun writer = remote.run(8, remote.writer("B"), "b.txt", kHangBound);
  require_ok(writer);
  {
    INFO(writer.output);
    CHECK(writer.counters.at("remote_misses") == 1);
    CHECK(writer.counters.at("remote_hits") <= 4);
    CHECK(writer.counters.at("compiled") + writer.counters.at("remote_hits") == 8);
    CHECK(writer.counters.at("remote_errors") == 1);
    CHECK(writer.counters.at("remote_timeouts") == 0);
    require_one_warning(writer.output, "server out of memory");
    CHECK(writer.output.find("OOM") != std::string::npos);
  }
  CHECK(metajit_test::kernel_keys(server).size() == 4);
  CHECK(metajit_test::lease_keys(server).empty());

  // A reader still gets what fit.
  ProgramRun reader = remote.run(8, remote.reader("C"), "c.txt", kHangBound);
  require_counters(
      reader, {{"remote_hits", 4}, {"remote_misses", 4}, {"compiled", 4}, {"remote_errors", 0}});
}

TEST_CASE("server out of memory at upload time: the uploads fail once, no lease is left behind",
          "[remote]") {
  RedisServer::require();
  RemoteSetup remote(noeviction());
  RedisServer& server = remote.server;
  const fs::path& tmp = remote.tmp.path();
  const fs::path sync = remote.sync();
  CompileGate gate(tmp);
  const RunEnv env = with(remote.writer("W"), "METAJIT_CXX", gate.compiler().string());
  Child program(batches_program(3, 1, sync), env, tmp / "w.txt");
  // The writer looked its 3 kernels up and leased them; the server fills up before it uploads.
  REQUIRE(gate.wait_until_holding(kHangBound));
  REQUIRE(metajit_test::lease_keys(server).size() == 3);
  REQUIRE(server.command({"CONFIG", "SET", "maxmemory", "1"}).kind ==
          metajit::RedisReply::Kind::Status);
  gate.open();
  batch_done(program, 0);
  go(sync, 1);
  REQUIRE(program.finish(kHangBound));
  const std::string out = program.output();
  {
    INFO(out);
    CHECK(program.exit_code() == 0);
    require_one_warning(out, "server out of memory");
  }
  nlohmann::json stats = metajit_test::cache_stats(tmp / "W");
  CHECK(stats["remote_uploads"] == 0);
  CHECK(stats["remote_errors"] == 1);
  CHECK(metajit_test::kernel_keys(server).empty());
  // The writer knew no entry would come: it gave its leases back rather than make the fleet
  // wait for them (METAJIT_REMOTE_WAIT, a minute by default) until they expire.
  CHECK(metajit_test::lease_keys(server).empty());

  // A reader (same compiler, so the same remote keys) misses and compiles without waiting.
  ProgramRun reader =
      run_program(batches_program(3, 1, sync),
                  with(with(remote.reader("R"), "METAJIT_CXX", gate.compiler().string()),
                       "METAJIT_REMOTE_WAIT", "60"),
                  tmp / "r.txt", kHangBound);
  INFO(reader.output);
  REQUIRE(reader.exit_code == 0);
  auto r0 = metajit_test::line_fields(reader.output, "batch 0 ");
  CHECK(r0.at("remote_misses") == 3);
  CHECK(r0.at("compiled") == 3);
  CHECK(r0.at("remote_errors") == 0);
  // Waiting for a leftover lease would cost METAJIT_REMOTE_WAIT (60 s); a reader that does not
  // wait compiles 3 kernels in a few seconds (a bound, generous, between the two).
  CHECK(reader.seconds < 40);
}

TEST_CASE("leases left by a machine that died: readers wait until they expire, then compile",
          "[remote]") {
  RedisServer::require();
  RemoteSetup remote;
  RedisServer& server = remote.server;
  // The remote keys of 2 kernels, from a writer; then their entries go, and leases of a machine
  // that died while compiling them take their place (expiring in 2 s).
  remote.fill(2, "W", kHangBound, require_ok);
  for (const std::string& key : metajit_test::kernel_keys(server)) {
    REQUIRE(server.command({"DEL", key}).integer == 1);
    const std::string lease =
        "metajit:default:lease:" + key.substr(std::string("metajit:default:kernel:").size());
    REQUIRE(server.command({"SET", lease, "dead-machine", "PX", "2000"}).str == "OK");
  }
  // METAJIT_REMOTE_WAIT is longer than the hang bound: only the leases' expiry ends the wait.
  ProgramRun reader =
      remote.run(2, with(remote.reader("R"), "METAJIT_REMOTE_WAIT", "600"), "r.txt", kHangBound);
  // One miss per kernel, the wait not counted again.
  require_counters(
      reader, {{"compiled", 2}, {"remote_misses", 2}, {"remote_hits", 0}, {"remote_errors", 0}});
  INFO(reader.output);
  CHECK(reader.seconds >= 1);  // it did wait for the leases (2 s from before it started)
  CHECK(occurrences(reader.output, kAnyFailureWarning) == 0);
}
