// XXH3-128 digests as 32 lowercase hex digits (high 64 bits first, like XXH128_canonical_t).
#include "base/checksum.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>

namespace metajit {
namespace {

void append_hex64(std::string& out, uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  for (int shift = 60; shift >= 0; shift -= 4) out.push_back(digits[(v >> shift) & 0xf]);
}

std::string to_hex(XXH128_hash_t h) {
  std::string out;
  out.reserve(32);
  append_hex64(out, h.high64);
  append_hex64(out, h.low64);
  return out;
}

// Closes the descriptor on every path out of xxh3_128_file_hex.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string xxh3_128_hex(const void* data, size_t size) {
  return to_hex(XXH3_128bits(data, size));
}

std::string xxh3_128_hex(const std::string& data) {
  return xxh3_128_hex(data.data(), data.size());
}

std::optional<std::string> xxh3_128_file_hex(const std::filesystem::path& path) {
  FdCloser file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) return std::nullopt;
  // Streamed so that a large object never has to fit in memory at once.
  XXH3_state_t* state = XXH3_createState();
  if (!state) return std::nullopt;
  XXH3_128bits_reset(state);
  char buf[1 << 16];
  bool ok = true;
  for (;;) {
    ssize_t n = ::read(file.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ok = false;
      break;
    }
    if (n == 0) break;
    XXH3_128bits_update(state, buf, size_t(n));
  }
  XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  if (!ok) return std::nullopt;
  return to_hex(h);
}

bool is_key_hex(const std::string& s) {
  if (s.empty() || s.size() > 32) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

void append_field(std::string& out, const std::string& label, const std::string& value) {
  out += label;
  out += '[';
  out += std::to_string(value.size());
  out += "]=";
  out += value;
  out += '\n';
}

}  // namespace metajit
