// A real redis-server for the remote-cache tests, started by the test and stopped by it
// (`make test` installs the package; README "Sharing kernels across machines"). Each server
// runs in a temporary directory of its own, on a Unix socket (default) or a free 127.0.0.1
// port, persists nothing, and is SIGKILLed and reaped when the object goes out of scope.
#pragma once
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "remote_cache/redis_connection.h"
#include "remote_cache/redis_endpoint.h"
#include "support/skip.h"

namespace metajit_test {

struct RedisOptions {
  bool tcp = false;                // 127.0.0.1:<free port> instead of a Unix socket
  std::string password;            // requirepass
  std::string maxmemory;           // e.g. "2mb"
  std::string policy;              // maxmemory-policy, e.g. "noeviction"
  std::vector<std::string> extra;  // more "--name value" arguments
};

class RedisServer {
 public:
  // True when redis-server can be started here; tests call skip_test() otherwise.
  static bool available() { return !binary().empty(); }
  static std::string binary() {
    for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin"}) {
      std::string p = std::string(dir) + "/redis-server";
      if (::access(p.c_str(), X_OK) == 0) return p;
    }
    return "";
  }
  // Skips the calling test (exit 77) when redis-server is not installed.
  static void require() {
    if (!available()) skip_test("redis-server is not installed (make test installs it)");
  }

  explicit RedisServer(RedisOptions options = {}) : options_(std::move(options)) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "metajit-redis-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    socket_ = (dir_ / "redis.sock").string();
    if (options_.tcp) port_ = free_port();
    start();
  }
  ~RedisServer() {
    kill_now();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // METAJIT_REMOTE for this server.
  std::string url() const {
    return options_.tcp ? "redis://127.0.0.1:" + std::to_string(port_) : "redis+unix://" + socket_;
  }
  metajit::RedisEndpoint endpoint() const {
    std::string why;
    return *metajit::parse_redis_url(url(), why);
  }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  const std::filesystem::path& dir() const { return dir_; }

  // A fresh connection (authenticated when the server has a password) for raw commands.
  std::unique_ptr<metajit::RedisConnection> connect(double timeout = 5) const {
    return std::make_unique<metajit::RedisConnection>(endpoint(), options_.password, timeout,
                                                      timeout);
  }
  metajit::RedisReply command(const std::vector<std::string>& args) const {
    return connect()->command(args, size_t(1) << 30);
  }

  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  void stop() { ::kill(pid_, SIGSTOP); }  // stops answering, keeps connections open
  void resume() { ::kill(pid_, SIGCONT); }
  // Starts the server again (after kill_now()) on the same socket or port.
  void restart() {
    kill_now();
    start();
  }

 private:
  static int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    int port = ntohs(a.sin_port);
    ::close(fd);
    return port;
  }

  void start() {
    std::vector<std::string> args = {binary(),
                                     "--port",
                                     std::to_string(options_.tcp ? port_ : 0),
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--dir",
                                     dir_.string(),
                                     "--logfile",
                                     (dir_ / "redis.log").string(),
                                     "--daemonize",
                                     "no"};
    if (!options_.tcp) {
      args.insert(args.end(), {"--unixsocket", socket_, "--unixsocketperm", "700"});
    }
    if (!options_.password.empty()) args.insert(args.end(), {"--requirepass", options_.password});
    if (!options_.maxmemory.empty()) args.insert(args.end(), {"--maxmemory", options_.maxmemory});
    if (!options_.policy.empty()) args.insert(args.end(), {"--maxmemory-policy", options_.policy});
    args.insert(args.end(), options_.extra.begin(), options_.extra.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    if (pid_ < 0) throw std::runtime_error("fork failed");
    // Ready when it answers PING (AUTH first when it has a password).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        if (connect(1)->command({"PING"}).str == "PONG") return;
      } catch (const std::exception&) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill_now();
    throw std::runtime_error("redis-server did not start (see " + (dir_ / "redis.log").string() +
                             ")");
  }

  RedisOptions options_;
  std::filesystem::path dir_;
  std::string socket_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace metajit_test
