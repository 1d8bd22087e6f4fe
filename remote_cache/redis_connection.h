// One connection to a Redis server (hiredis), made for a cache that must never stall or kill
// its host program: every command has a deadline (a server that stops answering or trickles
// bytes costs at most the timeout), a reply larger than the caller allows is cut off unread,
// a dropped connection raises no SIGPIPE (blocked in the calling thread for the call, a pending
// one consumed; process-wide signal handling is never touched), and a connection inherited
// through fork() is refused rather than shared with the parent.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "remote_cache/redis_endpoint.h"

struct redisContext;

namespace metajit {

// Why a remote operation failed; each is warned about once per process (remote_store.cc).
enum class RemoteFailure : uint8_t {
  Unreachable,  // connect refused, no such socket, host not found, connect timed out
  Timeout,      // the server did not answer (or finish answering) in time
  Io,           // the connection broke mid-command (reset, closed)
  Auth,         // wrong password or user, or a command the ACL does not allow
  OutOfMemory,  // the server refused a write (maxmemory with noeviction)
  Protocol,     // a reply that is not Redis's protocol, or one larger than allowed
  Server,       // any other error reply
};
const char* remote_failure_name(RemoteFailure f);  // "unreachable", "timeout", ...

class RedisFailure : public std::runtime_error {
 public:
  RedisFailure(RemoteFailure kind, const std::string& message)
      : std::runtime_error(message), kind(kind) {}
  RemoteFailure kind;
};

struct RedisReply {
  enum class Kind : uint8_t { Nil, String, Status, Integer, Error, Array };
  Kind kind = Kind::Nil;
  std::string str;  // String, Status, Error
  long long integer = 0;
  std::vector<RedisReply> elements;
};

class RedisConnection {
 public:
  // Connects (within `connect_timeout` seconds), authenticates with `password` (if not empty)
  // and selects the endpoint's database. Throws RedisFailure.
  RedisConnection(const RedisEndpoint& endpoint, const std::string& password,
                  double connect_timeout, double op_timeout);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends one command and returns its reply (an error reply is returned, not thrown), within the
  // operation timeout. A reply longer than `max_reply_bytes` is a Protocol failure. Any failure
  // leaves the connection unusable (broken() is true) and throws RedisFailure.
  RedisReply command(const std::vector<std::string>& args, size_t max_reply_bytes = 1 << 20);
  bool broken() const { return broken_; }

 private:
  void authenticate(const RedisEndpoint& endpoint, const std::string& password);

  redisContext* ctx_ = nullptr;
  double op_timeout_;
  pid_t owner_;
  bool broken_ = false;
  std::string where_;
};

// The failure an error reply stands for (OOM, NOAUTH, WRONGPASS, NOPERM, ...).
RemoteFailure classify_error_reply(const std::string& message);

}  // namespace metajit
