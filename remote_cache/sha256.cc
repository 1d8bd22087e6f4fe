#include "remote_cache/sha256.h"

#include <sodium.h>

#include <fstream>
#include <vector>

#include "remote_cache/signing_keys.h"

namespace metajit {
namespace {

std::string hex_of(const unsigned char* digest) {
  static const char* hex = "0123456789abcdef";
  std::string out(64, '0');
  for (int i = 0; i < 32; ++i) {
    out[2 * i] = hex[digest[i] >> 4];
    out[2 * i + 1] = hex[digest[i] & 15];
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  ensure_sodium();
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, reinterpret_cast<const unsigned char*>(data.data()), data.size());
  return hex_of(digest);
}

std::optional<std::string> file_sha256_hex(const std::filesystem::path& path) {
  ensure_sodium();
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  crypto_hash_sha256_state state;
  crypto_hash_sha256_init(&state);
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    std::streamsize n = in.gcount();
    if (n > 0)
      crypto_hash_sha256_update(&state, reinterpret_cast<const unsigned char*>(buf.data()),
                                size_t(n));
  }
  if (in.bad()) return std::nullopt;
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&state, digest);
  return hex_of(digest);
}

}  // namespace metajit
