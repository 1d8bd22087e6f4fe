// Where the remote kernel cache lives (METAJIT_REMOTE, docs/api.md "Remote cache"):
//   redis://[user@]host[:port][/db]   TCP (port 6379, db 0 by default; [v6] for IPv6)
//   redis+unix:///path/to/socket      a Unix socket (db 0)
// A password is never part of the URL: it comes from METAJIT_REMOTE_PASSWORD_FILE, so it does
// not show in `ps`, logs or shell history.
#pragma once
#include <optional>
#include <string>

namespace metajit {

struct RedisEndpoint {
  std::string host;  // empty for a Unix socket
  int port = 6379;
  std::string socket_path;  // Unix socket, or empty
  std::string user;         // ACL user (Redis 6+), or empty for the default user
  int db = 0;

  std::string describe() const;  // "127.0.0.1:6379/0", "unix:/run/redis.sock": for messages
};

// The endpoint of `url`, or nullopt with `why` saying what is wrong and what is valid.
std::optional<RedisEndpoint> parse_redis_url(const std::string& url, std::string& why);

}  // namespace metajit
