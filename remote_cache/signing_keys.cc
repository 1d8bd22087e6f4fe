#include "remote_cache/signing_keys.h"

#include <fcntl.h>
#include <metajit/error.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace metajit {
namespace {

std::string to_base64(const uint8_t* data, size_t n) {
  std::string out(sodium_base64_encoded_len(n, sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), data, n, sodium_base64_VARIANT_ORIGINAL);
  out.resize(std::strlen(out.c_str()));
  return out;
}

// Parses "NAME:base64" holding exactly `n` bytes into `out`; false with `why` otherwise.
bool parse_key_line(const std::string& line, std::string& name, uint8_t* out, size_t n,
                    std::string& why) {
  size_t colon = line.find(':');
  if (colon == std::string::npos) {
    why = "expected NAME:base64";
    return false;
  }
  name = line.substr(0, colon);
  if (!valid_key_name(name)) {
    why = "key name '" + name.substr(0, 80) + "' is not 1 to 64 letters, digits, '-', '_', '.'";
    return false;
  }
  std::string b64 = line.substr(colon + 1);
  while (!b64.empty() && (b64.back() == '\r' || b64.back() == ' ')) b64.pop_back();
  size_t len = 0;
  std::string buf(b64.size(), '\0');
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(buf.data()), buf.size(), b64.c_str(),
                        b64.size(), nullptr, &len, nullptr, sodium_base64_VARIANT_ORIGINAL) != 0 ||
      len != n) {
    sodium_memzero(buf.data(), buf.size());
    why = "the key is not " + std::to_string(n) + " bytes of base64";
    return false;
  }
  std::memcpy(out, buf.data(), n);
  sodium_memzero(buf.data(), buf.size());
  return true;
}

void write_new_file(const std::filesystem::path& path, const std::string& text, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0)
    throw CacheError("remote keygen: cannot create " + path.string() + ": " + std::strerror(errno) +
                     (errno == EEXIST ? " (keys are never overwritten; remove it first)" : ""));
  ::fchmod(fd, mode);  // whatever the umask
  bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    ::unlink(path.c_str());
    throw CacheError("remote keygen: cannot write " + path.string());
  }
}

}  // namespace

SecretKey::~SecretKey() {
  sodium_memzero(bytes.data(), bytes.size());
}

void ensure_sodium() {
  if (sodium_init() < 0) throw CacheError("remote cache: libsodium failed to initialise");
}

bool valid_key_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      return false;
  return true;
}

std::string public_key_line(const PublicKey& key) {
  return key.name + ":" + to_base64(key.bytes.data(), key.bytes.size());
}

PublicKey public_key_of(const SecretKey& key) {
  PublicKey pk;
  pk.name = key.name;
  crypto_sign_ed25519_sk_to_pk(pk.bytes.data(), key.bytes.data());
  return pk;
}

PublicKey generate_key_pair(const std::string& name, const std::filesystem::path& secret_file) {
  ensure_sodium();
  if (!valid_key_name(name))
    throw CacheError("remote keygen: key name '" + name +
                     "' is not valid; expected 1 to 64 letters, digits, '-', '_' or '.'");
  SecretKey sk;
  sk.name = name;
  PublicKey pk;
  pk.name = name;
  crypto_sign_keypair(pk.bytes.data(), sk.bytes.data());
  std::filesystem::path pub_file = secret_file.string() + ".pub";
  if (std::filesystem::exists(pub_file))
    throw CacheError("remote keygen: " + pub_file.string() +
                     " exists (keys are never overwritten; remove it first)");
  std::string secret_line = name + ":" + to_base64(sk.bytes.data(), sk.bytes.size()) + "\n";
  write_new_file(secret_file, secret_line, 0600);
  sodium_memzero(secret_line.data(), secret_line.size());
  try {
    write_new_file(pub_file, public_key_line(pk) + "\n", 0644);
  } catch (...) {
    ::unlink(secret_file.c_str());
    throw;
  }
  return pk;
}

SecretKey load_secret_key(const std::filesystem::path& file) {
  ensure_sodium();
  struct stat st;
  if (::stat(file.c_str(), &st) != 0)
    throw CacheError("METAJIT_REMOTE_SIGNING_KEY: cannot read " + file.string() + ": " +
                     std::strerror(errno));
  if (st.st_mode & 077)
    throw CacheError("METAJIT_REMOTE_SIGNING_KEY: " + file.string() +
                     " is readable by others (mode " + std::to_string((st.st_mode >> 6) & 7) +
                     std::to_string((st.st_mode >> 3) & 7) + std::to_string(st.st_mode & 7) +
                     "); a secret key must be mode 0600 (chmod 600 " + file.string() + ")");
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line) && (line.empty() || line[0] == '#')) {
  }
  SecretKey sk;
  std::string why;
  const bool parsed =
      !line.empty() && parse_key_line(line, sk.name, sk.bytes.data(), sk.bytes.size(), why);
  sodium_memzero(line.data(), line.size());  // a malformed line may still hold the secret
  if (!parsed)
    throw CacheError("METAJIT_REMOTE_SIGNING_KEY: " + file.string() +
                     " is not a metajit secret key (" + (why.empty() ? "empty" : why) +
                     "); make one with `metajit remote keygen NAME -o FILE`");
  // The second half is the public key of the first (libsodium's layout). A file whose halves
  // disagree (edited, or pasted together from two keys) would sign entries no reader verifies.
  std::array<uint8_t, crypto_sign_SEEDBYTES> seed;
  std::array<uint8_t, crypto_sign_PUBLICKEYBYTES> pk;
  std::array<uint8_t, crypto_sign_SECRETKEYBYTES> derived;
  crypto_sign_ed25519_sk_to_seed(seed.data(), sk.bytes.data());
  crypto_sign_seed_keypair(pk.data(), derived.data(), seed.data());
  const bool consistent = sodium_memcmp(derived.data(), sk.bytes.data(), derived.size()) == 0;
  sodium_memzero(seed.data(), seed.size());
  sodium_memzero(derived.data(), derived.size());
  if (!consistent)
    throw CacheError("METAJIT_REMOTE_SIGNING_KEY: " + file.string() +
                     " is not a metajit secret key (its public half does not belong to its "
                     "secret half); make one with `metajit remote keygen NAME -o FILE`");
  return sk;
}

std::vector<PublicKey> load_public_keys(const std::filesystem::path& file) {
  ensure_sodium();
  std::ifstream in(file);
  if (!in)
    throw CacheError("METAJIT_REMOTE_TRUSTED_KEYS: cannot read " + file.string() + ": " +
                     std::strerror(errno));
  std::vector<PublicKey> keys;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    PublicKey pk;
    std::string why;
    if (!parse_key_line(line.substr(start), pk.name, pk.bytes.data(), pk.bytes.size(), why))
      throw CacheError("METAJIT_REMOTE_TRUSTED_KEYS: " + file.string() + " line " +
                       std::to_string(number) + ": " + why);
    keys.push_back(pk);
  }
  if (in.bad())  // a directory, say: not a file with no keys in it
    throw CacheError("METAJIT_REMOTE_TRUSTED_KEYS: cannot read " + file.string() + ": " +
                     std::strerror(errno));
  return keys;
}

}  // namespace metajit
