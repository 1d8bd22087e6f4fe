#include "remote_cache/redis_endpoint.h"

#include <cctype>

namespace metajit {
namespace {

constexpr const char* kValid =
    "; expected redis://[user@]host[:port][/db] or redis+unix:///path/to/socket";

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// True when `rest`, a URL after its scheme, holds user information with a password (user:pw@):
// the password may itself hold '/', ':' or '@', so a message must not repeat any of the URL.
bool has_password(const std::string& rest) {
  const size_t at = rest.rfind('@');
  return at != std::string::npos && rest.find(':') < at;
}

}  // namespace

std::string RedisEndpoint::describe() const {
  if (!socket_path.empty()) return "unix:" + socket_path;
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return (user.empty() ? "" : user + "@") + h + ":" + std::to_string(port) + "/" +
         std::to_string(db);
}

std::optional<RedisEndpoint> parse_redis_url(const std::string& url, std::string& why) {
  RedisEndpoint e;
  const std::string unix_scheme = "redis+unix://";
  const std::string tcp_scheme = "redis://";
  if (url.rfind(unix_scheme, 0) == 0) {
    e.socket_path = url.substr(unix_scheme.size());
    if (e.socket_path.empty() || e.socket_path[0] != '/') {
      why = "METAJIT_REMOTE=" + (has_password(e.socket_path) ? unix_scheme + "..." : url) +
            ": the socket path must be absolute" + kValid;
      return std::nullopt;
    }
    return e;
  }
  if (url.rfind(tcp_scheme, 0) != 0) {
    const size_t scheme_end = url.find("://");  // rediss://user:pw@host, say
    const bool secret = scheme_end != std::string::npos && has_password(url.substr(scheme_end + 3));
    why = "METAJIT_REMOTE=" + (secret ? url.substr(0, scheme_end + 3) + "..." : url) +
          " is not a Redis URL" + kValid;
    return std::nullopt;
  }
  std::string rest = url.substr(tcp_scheme.size());
  // First: every later message repeats the URL.
  if (has_password(rest)) {
    why = "METAJIT_REMOTE=" + tcp_scheme +
          "...: a password does not belong in the URL; put it in a file named by "
          "METAJIT_REMOTE_PASSWORD_FILE";
    return std::nullopt;
  }
  if (size_t slash = rest.find('/'); slash != std::string::npos) {
    std::string db = rest.substr(slash + 1);
    rest.resize(slash);
    if (!db.empty()) {
      if (!all_digits(db)) {
        why = "METAJIT_REMOTE=" + url + ": database '" + db + "' is not a number" + kValid;
        return std::nullopt;
      }
      e.db = std::stoi(db);
    }
  }
  if (size_t at = rest.rfind('@'); at != std::string::npos) {
    e.user = rest.substr(0, at);
    rest = rest.substr(at + 1);
  }
  std::string port;
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos) {
      why = "METAJIT_REMOTE=" + url + ": unclosed '[' in the host" + kValid;
      return std::nullopt;
    }
    e.host = rest.substr(1, close - 1);
    std::string after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') {
        why = "METAJIT_REMOTE=" + url + ": unexpected text after the host" + kValid;
        return std::nullopt;
      }
      port = after.substr(1);
    }
  } else if (size_t colon = rest.find(':'); colon != std::string::npos) {
    e.host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  } else {
    e.host = rest;
  }
  if (e.host.empty()) {
    why = "METAJIT_REMOTE=" + url + ": no host" + kValid;
    return std::nullopt;
  }
  if (!port.empty()) {
    if (!all_digits(port) || std::stoi(port) < 1 || std::stoi(port) > 65535) {
      why = "METAJIT_REMOTE=" + url + ": port '" + port + "' is not in 1..65535" + kValid;
      return std::nullopt;
    }
    e.port = std::stoi(port);
  }
  return e;
}

}  // namespace metajit
