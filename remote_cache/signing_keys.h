// Ed25519 keys of the remote cache (libsodium; README "Sharing kernels across machines").
// A key has a name so keys can rotate: readers trust several at once, each entry names the one
// that signed it. Files are text, one key a line as NAME:base64:
//   secret key file (mode 0600): the 64-byte libsodium secret key (seed and public key)
//   FILE.pub and METAJIT_REMOTE_TRUSTED_KEYS: 32-byte public keys; '#' starts a comment.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace metajit {

struct SecretKey {
  std::string name;
  std::array<uint8_t, 64> bytes{};
  ~SecretKey();  // wipes the key from memory
};

struct PublicKey {
  std::string name;
  std::array<uint8_t, 32> bytes{};
};

// Letters, digits, '-', '_', '.', 1 to 64 of them.
bool valid_key_name(const std::string& name);

// Makes a key pair named `name`: the secret key goes to `secret_file` (created with mode
// 0600, never over an existing file), the public key to `secret_file` + ".pub". Throws
// CacheError naming the file.
PublicKey generate_key_pair(const std::string& name, const std::filesystem::path& secret_file);

// Reads a secret key file. Throws CacheError when it is unreadable, malformed, or readable by
// group or others (as ssh does: a secret key anyone can read signs for anyone).
SecretKey load_secret_key(const std::filesystem::path& file);
// Reads a file of public keys; CacheError naming the file and line for a malformed one.
std::vector<PublicKey> load_public_keys(const std::filesystem::path& file);

std::string public_key_line(const PublicKey& key);  // "NAME:base64"
PublicKey public_key_of(const SecretKey& key);

// libsodium's one-time initialisation (thread-safe); throws CacheError if it fails.
void ensure_sodium();

}  // namespace metajit
