#include "remote_cache/redis_connection.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace metajit {
namespace {

using Clock = std::chrono::steady_clock;

// Blocks SIGPIPE in this thread for the life of the guard; a SIGPIPE the guarded code raised
// (a write to a connection the server closed) is consumed before the old mask comes back, so
// the host program never sees it. One that was pending before is left alone.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        timespec zero{0, 0};
        sigtimedwait(&pipe_, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

timeval to_timeval(double seconds) {
  timeval tv;
  tv.tv_sec = long(seconds);
  tv.tv_usec = long((seconds - double(tv.tv_sec)) * 1e6);
  if (tv.tv_sec == 0 && tv.tv_usec == 0) tv.tv_usec = 1000;
  return tv;
}

RedisReply convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.kind = RedisReply::Kind::String;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_STATUS:
      out.kind = RedisReply::Kind::Status;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.kind = RedisReply::Kind::Error;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_INTEGER:
      out.kind = RedisReply::Kind::Integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.kind = RedisReply::Kind::Array;
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default:
      out.kind = RedisReply::Kind::Nil;
  }
  return out;
}

}  // namespace

const char* remote_failure_name(RemoteFailure f) {
  switch (f) {
    case RemoteFailure::Unreachable:
      return "unreachable";
    case RemoteFailure::Timeout:
      return "timeout";
    case RemoteFailure::Io:
      return "connection lost";
    case RemoteFailure::Auth:
      return "not authorized";
    case RemoteFailure::OutOfMemory:
      return "server out of memory";
    case RemoteFailure::Protocol:
      return "bad reply";
    case RemoteFailure::Server:
      return "server error";
  }
  return "error";
}

RemoteFailure classify_error_reply(const std::string& message) {
  auto starts = [&message](const char* prefix) { return message.rfind(prefix, 0) == 0; };
  if (starts("OOM")) return RemoteFailure::OutOfMemory;
  if (starts("NOAUTH") || starts("WRONGPASS") || starts("NOPERM") ||
      message.find("invalid password") != std::string::npos ||
      message.find("invalid username-password") != std::string::npos)
    return RemoteFailure::Auth;
  return RemoteFailure::Server;
}

RedisConnection::RedisConnection(const RedisEndpoint& endpoint, const std::string& password,
                                 double connect_timeout, double op_timeout)
    : op_timeout_(op_timeout), owner_(::getpid()), where_(endpoint.describe()) {
  SigpipeGuard guard;
  const timeval tv = to_timeval(connect_timeout);
  ctx_ = endpoint.socket_path.empty()
             ? redisConnectWithTimeout(endpoint.host.c_str(), endpoint.port, tv)
             : redisConnectUnixWithTimeout(endpoint.socket_path.c_str(), tv);
  if (!ctx_) throw RedisFailure(RemoteFailure::Unreachable, where_ + ": out of memory");
  if (ctx_->err) {
    std::string why = ctx_->errstr;
    redisFree(ctx_);
    ctx_ = nullptr;
    bool timed_out = why.find("timed out") != std::string::npos;
    throw RedisFailure(timed_out ? RemoteFailure::Timeout : RemoteFailure::Unreachable,
                       "cannot connect to " + where_ + ": " + why);
  }
  redisSetTimeout(ctx_, to_timeval(op_timeout));
  try {
    authenticate(endpoint, password);
  } catch (...) {
    redisFree(ctx_);  // the destructor does not run for a constructor that throws
    ctx_ = nullptr;
    throw;
  }
}

void RedisConnection::authenticate(const RedisEndpoint& endpoint, const std::string& password) {
  auto expect_ok = [this](const RedisReply& r, const char* what) {
    if (r.kind == RedisReply::Kind::Error) {
      broken_ = true;
      throw RedisFailure(classify_error_reply(r.str), where_ + ": " + what + ": " + r.str);
    }
  };
  if (!password.empty()) {
    RedisReply r = endpoint.user.empty() ? command({"AUTH", password})
                                         : command({"AUTH", endpoint.user, password});
    expect_ok(r, "AUTH");
  } else if (!endpoint.user.empty()) {
    // A user without a password: Redis ACL users with `nopass`.
    expect_ok(command({"AUTH", endpoint.user, ""}), "AUTH");
  }
  if (endpoint.db != 0) expect_ok(command({"SELECT", std::to_string(endpoint.db)}), "SELECT");
}

RedisConnection::~RedisConnection() {
  // Also right in a child of fork(): it closes the child's copy of the socket and frees the
  // child's copy of the context; the parent's connection is untouched (nothing is sent).
  if (ctx_) redisFree(ctx_);
}

RedisReply RedisConnection::command(const std::vector<std::string>& args, size_t max_reply_bytes) {
  if (::getpid() != owner_) {
    broken_ = true;
    throw RedisFailure(RemoteFailure::Io, where_ + ": connection inherited through fork()");
  }
  if (broken_ || !ctx_) throw RedisFailure(RemoteFailure::Io, where_ + ": connection lost");
  SigpipeGuard guard;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(op_timeout_));
  auto fail = [this](RemoteFailure kind, const std::string& why) {
    broken_ = true;
    return RedisFailure(kind, where_ + ": " + why);
  };
  auto wait_for = [&](short events) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{ctx_->fd, events, 0};
      int n = ::poll(&p, 1, int(left.count()) + 1);
      if (n > 0) return true;
      if (n < 0 && errno != EINTR) return true;  // the following read/write reports it
    }
  };
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  if (redisAppendCommandArgv(ctx_, int(argv.size()), argv.data(), lens.data()) != REDIS_OK)
    throw fail(RemoteFailure::Io, ctx_->errstr);
  int done = 0;
  while (!done) {
    if (!wait_for(POLLOUT)) throw fail(RemoteFailure::Timeout, "timed out sending a command");
    // A blocking write of a large value to a server that stops reading waits for SO_SNDTIMEO:
    // that is what is left of the deadline, so the command never overruns it.
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    const timeval send_limit = to_timeval(std::max(left, 0.001));
    ::setsockopt(ctx_->fd, SOL_SOCKET, SO_SNDTIMEO, &send_limit, sizeof send_limit);
    errno = 0;
    if (redisBufferWrite(ctx_, &done) != REDIS_OK)
      throw fail(
          errno == EAGAIN || errno == EWOULDBLOCK ? RemoteFailure::Timeout : RemoteFailure::Io,
          ctx_->errstr);
  }
  void* raw = nullptr;
  // Every byte read for this reply is counted as it arrives (the reader drops what it has
  // parsed, so its buffer says nothing about an array's total): protocol framing allowed for,
  // a reply longer than asked for fails before the rest of it is read.
  const size_t most = max_reply_bytes + 64 + max_reply_bytes / 8;
  size_t received = 0;
  for (;;) {
    if (redisGetReplyFromReader(ctx_, &raw) != REDIS_OK)
      throw fail(RemoteFailure::Protocol, ctx_->errstr);
    if (raw) break;
    if (received > most)
      throw fail(RemoteFailure::Protocol,
                 "reply longer than " + std::to_string(max_reply_bytes) + " bytes");
    if (!wait_for(POLLIN)) throw fail(RemoteFailure::Timeout, "timed out waiting for a reply");
    errno = 0;
    const size_t before = ctx_->reader ? ctx_->reader->len - ctx_->reader->pos : 0;
    if (redisBufferRead(ctx_) != REDIS_OK)
      throw fail(
          errno == EAGAIN || errno == EWOULDBLOCK ? RemoteFailure::Timeout : RemoteFailure::Io,
          ctx_->errstr);
    const size_t after = ctx_->reader ? ctx_->reader->len - ctx_->reader->pos : 0;
    received += after > before ? after - before : 0;
  }
  redisReply* reply = static_cast<redisReply*>(raw);
  // A single string is held to the limit exactly (framing is not in its length).
  if (reply->type == REDIS_REPLY_STRING && reply->len > max_reply_bytes) {
    freeReplyObject(reply);
    throw fail(RemoteFailure::Protocol,
               "reply longer than " + std::to_string(max_reply_bytes) + " bytes");
  }
  RedisReply out = convert(reply);
  freeReplyObject(reply);
  return out;
}

}  // namespace metajit
