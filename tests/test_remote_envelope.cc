// The remote kernel cache's building blocks, in process (README "Sharing kernels across
// machines"): the signed envelope each entry is (remote_cache/envelope.h), its Ed25519 keys
// (signing_keys.h), SHA-256 (sha256.h), METAJIT_REMOTE URLs (redis_endpoint.h), the
// METAJIT_REMOTE_* configuration (base/config.cc), one Redis connection (redis_connection.h)
// and the fleet-wide lease (remote_store.h) against a real redis-server the test starts
// (tests/support/redis_server.h; those cases report themselves skipped where redis-server is
// not installed).
#include <metajit/error.h>
#include <signal.h>
#include <sodium.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "base/config.h"
#include "remote_cache/envelope.h"
#include "remote_cache/redis_connection.h"
#include "remote_cache/redis_endpoint.h"
#include "remote_cache/remote_store.h"
#include "remote_cache/sha256.h"
#include "remote_cache/signing_keys.h"
#include "support/envelope_bytes.h"
#include "support/exceptions.h"
#include "support/files.h"
#include "support/redis_server.h"

using namespace metajit;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using metajit_test::message_of;
using metajit_test::raw_envelope;
using metajit_test::RedisServer;
using metajit_test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kKey = "0123456789abcdef0123456789abcdef";

// A deterministic key pair named `name`, from a seed of 32 bytes `fill`.
SecretKey key_from_seed(const std::string& name, uint8_t fill) {
  ensure_sodium();
  SecretKey key;
  key.name = name;
  std::array<uint8_t, crypto_sign_SEEDBYTES> seed;
  seed.fill(fill);
  std::array<uint8_t, crypto_sign_PUBLICKEYBYTES> pk;
  crypto_sign_seed_keypair(pk.data(), key.bytes.data(), seed.data());
  return key;
}

const SecretKey& writer() {
  static const SecretKey key = key_from_seed("writer-1", 1);
  return key;
}

EnvelopeTrust trust_of(std::vector<PublicKey> keys, bool allow_unsigned = false) {
  EnvelopeTrust trust;
  trust.keys = std::move(keys);
  trust.allow_unsigned = allow_unsigned;
  return trust;
}
EnvelopeTrust trust_writer() {
  return trust_of({public_key_of(writer())});
}
EnvelopeTrust trust_unsigned() {
  return trust_of({}, true);
}

std::vector<EnvelopeFile> small_files() {
  return {{"kernel.cc", "extern \"C\" void k(float* o) { o[0] = 2; }\n"},
          {"kernel.so", std::string("\177ELF\2\1\1", 7) + std::string(30, '\0') + "payload"}};
}

std::string concatenated(const std::vector<EnvelopeFile>& files) {
  std::string out;
  for (const EnvelopeFile& f : files) out += f.bytes;
  return out;
}

std::string zstd(const std::string& plain) {
  std::string out(ZSTD_compressBound(plain.size()), '\0');
  size_t n = ZSTD_compress(out.data(), out.size(), plain.data(), plain.size(), 3);
  REQUIRE_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

nlohmann::json entry(const std::string& name, uint64_t size, const std::string& sha256) {
  return {{"name", name}, {"size", size}, {"sha256", sha256}};
}
// A JSON array of these elements (braces alone would make one element a copy, not an array).
nlohmann::json list(const std::vector<nlohmann::json>& elements) {
  nlohmann::json out = nlohmann::json::array();
  for (const nlohmann::json& e : elements) out.push_back(e);
  return out;
}
nlohmann::json with(nlohmann::json object, const std::string& field, const nlohmann::json& value) {
  object[field] = value;
  return object;
}
nlohmann::json entries_of(const std::vector<EnvelopeFile>& files) {
  nlohmann::json out = nlohmann::json::array();
  for (const EnvelopeFile& f : files)
    out.push_back(entry(f.name, f.bytes.size(), sha256_hex(f.bytes)));
  return out;
}
std::string header_of(const nlohmann::json& files, const std::string& key = kKey) {
  return nlohmann::json{{"format", 1}, {"key", key}, {"files", files}}.dump();
}

std::string signature_of(const std::string& bytes, const SecretKey& key) {
  std::array<unsigned char, crypto_sign_BYTES> sig;
  crypto_sign_detached(sig.data(), nullptr, reinterpret_cast<const unsigned char*>(bytes.data()),
                       bytes.size(), key.bytes.data());
  return std::string(reinterpret_cast<const char*>(sig.data()), sig.size());
}
// The envelope of these parts signed by `key`: the layout seal_envelope writes, by hand.
std::string signed_raw(const std::string& header, const std::string& payload,
                       const SecretKey& key) {
  const std::string body = raw_envelope(key.name, header, payload);
  return body + signature_of(body, key);
}

// What open_envelope makes of `data`: "" when it opens, else its reason (never empty).
std::string rejection(std::string_view data, const EnvelopeTrust& trust,
                      const EnvelopeLimits& limits = {}, const std::string& key = kKey) {
  std::string why;
  if (open_envelope(data, key, trust, why, limits)) return "";
  return why.empty() ? "(rejected without a reason)" : why;
}

std::optional<OpenedEnvelope> open_ok(std::string_view data, const EnvelopeTrust& trust,
                                      const EnvelopeLimits& limits = {}) {
  std::string why;
  std::optional<OpenedEnvelope> opened = open_envelope(data, kKey, trust, why, limits);
  INFO("rejected: " << why);
  REQUIRE(opened);
  return opened;
}

void require_same_files(const std::vector<EnvelopeFile>& got,
                        const std::vector<EnvelopeFile>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(got[i].name == want[i].name);
    CHECK(got[i].bytes == want[i].bytes);
  }
}

// Where the parts of a sealed envelope start (remote_cache/envelope.h's layout).
struct Layout {
  size_t signer_at, header_len_at, header_at, payload_len_at, payload_at, signature_at, end;
};
Layout layout_of(const std::string& e) {
  auto u32 = [&e](size_t at) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | uint8_t(e[at + size_t(i)]);
    return size_t(v);
  };
  Layout l;
  l.signer_at = 9;
  l.header_len_at = l.signer_at + uint8_t(e[8]);
  l.header_at = l.header_len_at + 4;
  l.payload_len_at = l.header_at + u32(l.header_len_at);
  l.payload_at = l.payload_len_at + 4;
  l.signature_at = l.payload_at + u32(l.payload_len_at);
  l.end = l.signature_at + (uint8_t(e[8]) ? crypto_sign_BYTES : 0);
  return l;
}

bool has_control_character(const std::string& s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  return false;
}

// Runs `f` in a child process and returns how far the child's peak resident memory grew
// (KiB) while it ran, or -1 when `f` returned false; a child that crashes fails the test. A
// fresh child's peak starts at its size at fork(), whatever the test process used before.
long peak_rss_growth_kib(const std::function<bool()>& f) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    rusage before{}, after{};
    ::getrusage(RUSAGE_SELF, &before);
    long growth = f() ? 0 : -1;
    ::getrusage(RUSAGE_SELF, &after);
    if (growth == 0) growth = after.ru_maxrss - before.ru_maxrss;
    (void)!::write(fds[1], &growth, sizeof growth);
    ::_exit(0);
  }
  ::close(fds[1]);
  long growth = -1;
  const bool got = ::read(fds[0], &growth, sizeof growth) == ssize_t(sizeof growth);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  INFO("child status " << status);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(got);
  return growth;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Envelopes: what opens.

TEST_CASE("a signed envelope opens with its header and identical files", "[remote-unit]") {
  const nlohmann::json info = {{"backend", "cpu"}, {"producer", {{"host", "build-7"}}}};
  const std::vector<EnvelopeFile> files = small_files();
  const std::string sealed = seal_envelope(kKey, info, files, &writer());

  // The layout of envelope.h: magic, signer, header, payload, then a signature of the rest.
  REQUIRE(sealed.compare(0, 8, std::string("MJKENV\0\1", 8)) == 0);
  const Layout l = layout_of(sealed);
  CHECK(sealed.substr(l.signer_at, l.header_len_at - l.signer_at) == "writer-1");
  REQUIRE(l.end == sealed.size());
  const PublicKey pk = public_key_of(writer());
  CHECK(crypto_sign_verify_detached(
            reinterpret_cast<const unsigned char*>(sealed.data() + l.signature_at),
            reinterpret_cast<const unsigned char*>(sealed.data()), l.signature_at,
            pk.bytes.data()) == 0);

  const std::optional<OpenedEnvelope> opened = open_ok(sealed, trust_writer());
  CHECK(opened->signer == "writer-1");
  const nlohmann::json& h = opened->header;
  CHECK(h["format"] == 1);
  CHECK(h["key"] == kKey);
  CHECK(h["backend"] == "cpu");
  CHECK(h["producer"]["host"] == "build-7");
  REQUIRE(h["files"].size() == files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    CHECK(h["files"][i]["name"] == files[i].name);
    CHECK(h["files"][i]["size"] == files[i].bytes.size());
    CHECK(h["files"][i]["sha256"] == sha256_hex(files[i].bytes));
  }
  require_same_files(opened->files, files);
}

TEST_CASE("an unsigned envelope opens only where unsigned entries are allowed", "[remote-unit]") {
  const std::vector<EnvelopeFile> files = small_files();
  const std::string sealed = seal_envelope(kKey, {{"backend", "cpu"}}, files, nullptr);
  CHECK(uint8_t(sealed[8]) == 0);                 // no signer name
  CHECK(layout_of(sealed).end == sealed.size());  // and no signature

  const std::optional<OpenedEnvelope> opened = open_ok(sealed, trust_unsigned());
  CHECK(opened->signer.empty());
  CHECK(opened->header["key"] == kKey);
  CHECK(opened->header["backend"] == "cpu");
  require_same_files(opened->files, files);

  CHECK(rejection(sealed, trust_writer()) ==
        "unsigned entry (METAJIT_REMOTE_TRUST is not unsigned)");
  CHECK(rejection(sealed, trust_of({public_key_of(writer())}, true)).empty());
}

TEST_CASE("files with any bytes, empty ones and all three names round-trip", "[remote-unit]") {
  std::string binary(3000, '\0');
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = char((i * 7919) >> 3);
  std::string noise(100 << 10, '\0');  // incompressible
  randombytes_buf(noise.data(), noise.size());
  const std::vector<EnvelopeFile> files = {
      {"kernel.cc", ""}, {"kernel.cu", binary}, {"kernel.so", noise}};
  const std::string sealed = seal_envelope(kKey, {}, files, &writer());
  require_same_files(open_ok(sealed, trust_writer())->files, files);

  const std::vector<EnvelopeFile> only_so = {{"kernel.so", ""}};
  require_same_files(open_ok(seal_envelope(kKey, {}, only_so, &writer()), trust_writer())->files,
                     only_so);
}

TEST_CASE("the header's format, key and file list are the envelope's own, whatever the info says",
          "[remote-unit]") {
  const std::vector<EnvelopeFile> files = small_files();
  const nlohmann::json info = {{"key", "evil"},
                               {"format", 7},
                               {"files", list({entry("kernel.so", 1, "00")})},
                               {"backend", "cpu"}};
  const std::optional<OpenedEnvelope> opened =
      open_ok(seal_envelope(kKey, info, files, &writer()), trust_writer());
  CHECK(opened->header["key"] == kKey);
  CHECK(opened->header["format"] == 1);
  CHECK(opened->header["files"] == entries_of(files));
  CHECK(opened->header["backend"] == "cpu");

  // Info that is not an object is left out.
  const std::optional<OpenedEnvelope> plain =
      open_ok(seal_envelope(kKey, nlohmann::json::array({1, 2}), files, &writer()), trust_writer());
  CHECK(plain->header ==
        nlohmann::json({{"format", 1}, {"key", kKey}, {"files", entries_of(files)}}));
}

TEST_CASE("any of several trusted keys may have signed, also when two share a name",
          "[remote-unit]") {
  const SecretKey old_key = key_from_seed("fleet-2023", 3),
                  new_key = key_from_seed("fleet-2024", 4);
  const std::vector<EnvelopeFile> files = small_files();
  const std::string by_old = seal_envelope(kKey, {}, files, &old_key);
  const std::string by_new = seal_envelope(kKey, {}, files, &new_key);
  const EnvelopeTrust both = trust_of({public_key_of(old_key), public_key_of(new_key)});
  CHECK(rejection(by_old, both).empty());
  CHECK(rejection(by_new, both).empty());
  CHECK_THAT(rejection(by_old, trust_of({public_key_of(new_key)})),
             Equals("signed by 'fleet-2023', which is not a trusted key"));

  // A key regenerated under the same name, both trusted while the fleet rotates.
  const SecretKey regenerated = key_from_seed("writer-1", 5);
  const std::string by_writer = seal_envelope(kKey, {}, files, &writer());
  const std::string by_regenerated = seal_envelope(kKey, {}, files, &regenerated);
  for (const EnvelopeTrust& trust :
       {trust_of({public_key_of(writer()), public_key_of(regenerated)}),
        trust_of({public_key_of(regenerated), public_key_of(writer())})}) {
    CHECK(rejection(by_writer, trust).empty());
    CHECK(rejection(by_regenerated, trust).empty());
  }
}

// ---------------------------------------------------------------------------------------------
// Envelopes: what is rejected, and why.

TEST_CASE("an envelope without the magic and format is rejected", "[remote-unit]") {
  const std::string sealed = seal_envelope(kKey, {}, small_files(), &writer());
  const std::string reason = "not a metajit kernel envelope (bad magic or format)";
  std::string other_format = sealed;
  other_format[7] = '\2';
  std::string other_magic = sealed;
  other_magic[0] = 'm';
  CHECK(rejection(other_format, trust_writer()) == reason);
  CHECK(rejection(other_magic, trust_writer()) == reason);
  CHECK(rejection("", trust_writer()) == reason);
  CHECK(rejection("MJKENV", trust_writer()) == reason);
  CHECK(rejection(std::string(200, '\0'), trust_unsigned()) == reason);
}

TEST_CASE("every truncation of a signed envelope is rejected", "[remote-unit]") {
  const std::string sealed = seal_envelope(kKey, {{"backend", "cpu"}}, small_files(), &writer());
  REQUIRE(rejection(sealed, trust_writer()).empty());
  std::vector<std::string> wrong;
  for (size_t cut = 0; cut < sealed.size(); ++cut) {
    for (const EnvelopeTrust& trust : {trust_writer(), trust_of({public_key_of(writer())}, true)}) {
      const std::string why = rejection(std::string_view(sealed).substr(0, cut), trust);
      const bool expected = cut < 8 ? why == "not a metajit kernel envelope (bad magic or format)"
                                    : why.find("truncated") != std::string::npos;
      if (!expected)
        wrong.push_back(std::to_string(cut) + " bytes: " + (why.empty() ? "opened" : why));
    }
  }
  INFO("of " << sealed.size() << " bytes");
  CHECK(wrong == std::vector<std::string>{});
}

TEST_CASE("a flipped bit anywhere in a signed envelope is rejected", "[remote-unit]") {
  const std::string sealed = seal_envelope(kKey, {{"backend", "cpu"}}, small_files(), &writer());
  const Layout l = layout_of(sealed);
  std::vector<std::string> wrong;
  for (size_t at = 0; at < sealed.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = sealed;
      flipped[at] = char(flipped[at] ^ (1 << bit));
      const std::string why = rejection(flipped, trust_writer());
      // What each part's damage is reported as; a length may turn into any structural fault.
      std::string expected;
      if (at < 8)
        expected = "bad magic";
      else if (at >= l.signer_at && at < l.header_len_at)
        expected = "which is not a trusted key";
      else if ((at >= l.header_at && at < l.payload_len_at) || at >= l.payload_at)
        expected = "bad signature (claims key 'writer-1')";
      if (why.empty() || why.find(expected) == std::string::npos)
        wrong.push_back("byte " + std::to_string(at) + " bit " + std::to_string(bit) + ": " +
                        (why.empty() ? "opened" : why));
    }
  }
  INFO("of " << sealed.size() << " bytes");
  CHECK(wrong == std::vector<std::string>{});
}

TEST_CASE("bytes after the end of an envelope are rejected", "[remote-unit]") {
  const std::string sealed = seal_envelope(kKey, {}, small_files(), &writer());
  CHECK(rejection(sealed + '\0', trust_writer()) == "trailing bytes after the envelope");
  // An unsigned envelope followed by what looks like a signature.
  const std::string unsigned_one = seal_envelope(kKey, {}, small_files(), nullptr);
  CHECK(rejection(unsigned_one + std::string(crypto_sign_BYTES, 'x'), trust_unsigned()) ==
        "trailing bytes after the envelope");
  CHECK(rejection(sealed.substr(0, sealed.size() - 1), trust_writer()) ==
        "truncated envelope (signature cut short)");
}

TEST_CASE("an envelope signed by a key that is not trusted is rejected", "[remote-unit]") {
  const SecretKey stranger = key_from_seed("stranger-9", 9);
  const std::string sealed = seal_envelope(kKey, {}, small_files(), &stranger);
  const std::string reason = "signed by 'stranger-9', which is not a trusted key";
  CHECK(rejection(sealed, trust_writer()) == reason);
  CHECK(rejection(sealed, trust_of({})) == reason);
}

TEST_CASE("an envelope signed under a trusted key's name with other key bytes is rejected",
          "[remote-unit]") {
  const SecretKey impostor = key_from_seed("writer-1", 2);
  const std::string sealed = seal_envelope(kKey, {}, small_files(), &impostor);
  const std::string reason = "bad signature (claims key 'writer-1')";
  CHECK(rejection(sealed, trust_writer()) == reason);
  // Allowing unsigned entries does not let a forged signature through.
  CHECK(rejection(sealed, trust_of({public_key_of(writer())}, true)) == reason);
  // Nor does moving a good signature onto another body.
  const std::string other = seal_envelope(kKey, {{"backend", "cpu"}}, small_files(), &writer());
  const std::string spliced = sealed.substr(0, sealed.size() - crypto_sign_BYTES) +
                              other.substr(other.size() - crypto_sign_BYTES);
  CHECK(rejection(spliced, trust_writer()) == reason);
}

TEST_CASE("an envelope for another kernel key is rejected", "[remote-unit]") {
  const std::string other_key = "ffffffffffffffffffffffffffffffff";
  const std::string sealed = seal_envelope(other_key, {}, small_files(), &writer());
  CHECK(rejection(sealed, trust_writer()) ==
        "entry is for key " + other_key + ", not the key asked for");
  CHECK(rejection(sealed, trust_writer(), {}, other_key).empty());
}

TEST_CASE("a malformed header is rejected", "[remote-unit]") {
  // Unsigned envelopes made by hand, read with allow_unsigned: the signature step is skipped
  // and the header is the first thing wrong.
  const std::vector<EnvelopeFile> files = small_files();
  const std::string payload = zstd(concatenated(files));
  const nlohmann::json good_files = entries_of(files);
  REQUIRE(rejection(raw_envelope("", header_of(good_files), payload), trust_unsigned()).empty());

  std::string deep;
  for (int i = 0; i < 1000; ++i) deep += '[';
  for (int i = 0; i < 1000; ++i) deep += ']';
  const std::vector<std::string> headers = {
      "",
      "{not json",
      "[]",
      "null",
      "\"MJKENV\"",
      nlohmann::json{{"key", kKey}, {"files", good_files}}.dump(),
      nlohmann::json{{"format", 2}, {"key", kKey}, {"files", good_files}}.dump(),
      nlohmann::json{{"format", "1"}, {"key", kKey}, {"files", good_files}}.dump(),
      nlohmann::json{{"format", 1}, {"files", good_files}}.dump(),
      nlohmann::json{{"format", 1}, {"key", 5}, {"files", good_files}}.dump(),
      nlohmann::json{{"format", 1}, {"key", kKey}}.dump(),
      nlohmann::json{{"format", 1}, {"key", kKey}, {"files", good_files[1]}}.dump(),
      header_of(good_files).substr(0, 40),
      "{\"format\":1,\"key\":\"" + kKey + "\",\"files\":[],\"x\":" + deep + "}",
  };
  for (const std::string& header : headers) {
    INFO("header: " << header.substr(0, 120));
    CHECK(rejection(raw_envelope("", header, payload), trust_unsigned()) == "malformed header");
  }
  // Also when a trusted writer signed it: the header is checked after the signature too.
  CHECK(rejection(signed_raw("{not json", payload, writer()), trust_writer()) ==
        "malformed header");

  const std::vector<nlohmann::json> file_lists = {
      list({5}),
      list({nlohmann::json::object({{"name", "kernel.so"}})}),
      list({with(entry("kernel.so", 1, "x"), "size", "10")}),
      list({with(entry("kernel.so", 1, "x"), "size", -1)}),
      list({with(entry("kernel.so", 1, "x"), "size", 1.5)}),
      list({with(entry("kernel.so", 1, "x"), "sha256", 5)}),
      list({with(entry("kernel.so", 1, "x"), "name", 5)}),
      list({nlohmann::json::object({{"size", 1}, {"sha256", "x"}})}),
  };
  for (const nlohmann::json& declared : file_lists) {
    INFO("files: " << declared.dump());
    CHECK(rejection(raw_envelope("", header_of(declared), payload), trust_unsigned()) ==
          "malformed file list");
  }
}

TEST_CASE("a file list that does not match the payload is rejected", "[remote-unit]") {
  // Signed by the trusted writer: what a buggy or compromised writer could produce.
  const std::vector<EnvelopeFile> files = small_files();
  const std::string plain = concatenated(files);
  const std::string payload = zstd(plain);
  const std::string cc_sha = sha256_hex(files[0].bytes), so_sha = sha256_hex(files[1].bytes);
  const size_t cc_size = files[0].bytes.size(), so_size = files[1].bytes.size();
  auto why = [&](const nlohmann::json& declared, const std::string& body) {
    return rejection(signed_raw(header_of(declared), body, writer()), trust_writer());
  };
  REQUIRE(why(entries_of(files), payload).empty());

  SECTION("a file name that is not kernel.cc, kernel.cu or kernel.so") {
    for (const std::string& name :
         std::vector<std::string>{"kernel.sh", "../kernel.so", "kernel.so/x", "", "KERNEL.SO"}) {
      INFO(name);
      CHECK(why(list({entry("kernel.cc", cc_size, cc_sha), entry(name, so_size, so_sha)}),
                payload) == "unexpected file '" + name + "' in the entry");
    }
  }
  SECTION("a file named twice") {
    CHECK(why(list({entry("kernel.so", cc_size, cc_sha), entry("kernel.so", so_size, so_sha)}),
              payload) == "unexpected file 'kernel.so' in the entry");
  }
  SECTION("no kernel.so") {
    CHECK(why(list({entry("kernel.cc", cc_size + so_size, sha256_hex(plain))}), payload) ==
          "no kernel.so in the entry");
    CHECK(why(nlohmann::json::array(), zstd("")) == "no kernel.so in the entry");
  }
  SECTION("sizes that do not add up to the payload") {
    const std::string more = "payload does not declare the files' total size (" +
                             std::to_string(cc_size + so_size + 1) + " bytes)";
    CHECK(why(list({entry("kernel.cc", cc_size, cc_sha), entry("kernel.so", so_size + 1, so_sha)}),
              payload) == more);
    CHECK(why(list({entry("kernel.cc", cc_size, cc_sha), entry("kernel.so", so_size - 1, so_sha)}),
              payload) == "payload does not declare the files' total size (" +
                              std::to_string(cc_size + so_size - 1) + " bytes)");
    // The same total, split differently: the first file's digest no longer matches.
    CHECK(why(list({entry("kernel.cc", cc_size + 1, cc_sha),
                    entry("kernel.so", so_size - 1, so_sha)}),
              payload) == "kernel.cc does not match its SHA-256");
  }
  SECTION("a file whose SHA-256 does not match") {
    CHECK(why(list({entry("kernel.cc", cc_size, cc_sha), entry("kernel.so", so_size, cc_sha)}),
              payload) == "kernel.so does not match its SHA-256");
    std::string upper = so_sha;
    for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
    CHECK(why(list({entry("kernel.cc", cc_size, cc_sha), entry("kernel.so", so_size, upper)}),
              payload) == "kernel.so does not match its SHA-256");
    // The payload changed under a header that is right for the original.
    std::string other = plain;
    other.back() ^= 1;
    CHECK(why(entries_of(files), zstd(other)) == "kernel.so does not match its SHA-256");
  }
  SECTION("a payload that is not one zstd frame of the files") {
    const std::string total = "payload does not declare the files' total size (" +
                              std::to_string(plain.size()) + " bytes)";
    CHECK(why(entries_of(files), plain) == total);  // not compressed at all
    CHECK(why(entries_of(files), "") == total);
    // A frame that declares the total but holds less.
    CHECK(why(entries_of(files), metajit_test::zstd_frame_declaring(plain.size(), 10)) ==
          "payload does not decompress");
    // A second frame after the files' (ZSTD_decompress would carry on into it).
    CHECK(why(entries_of(files), payload + zstd(std::string(1 << 20, '\0'))) ==
          "payload does not decompress");
    std::string corrupt = payload;
    corrupt[corrupt.size() / 2] ^= 0x55;
    const std::string r = why(entries_of(files), corrupt);
    CHECK((r == "payload does not decompress" ||
           r.find("does not match its SHA-256") != std::string::npos ||
           r.find("does not declare") != std::string::npos));
  }
}

TEST_CASE("a compression bomb is refused before anything is inflated", "[remote-unit]") {
  const std::string so_sha = sha256_hex(std::string(10, 'A'));
  const std::string small_header = header_of(list({entry("kernel.so", 10, so_sha)}));
  const std::string huge_header = header_of(list({entry("kernel.so", uint64_t(1) << 40, so_sha)}));
  const std::string declares_2_40 = metajit_test::zstd_frame_declaring(uint64_t(1) << 40, 10);
  REQUIRE(ZSTD_getFrameContentSize(declares_2_40.data(), declares_2_40.size()) ==
          (uint64_t(1) << 40));
  const std::string undeclared = metajit_test::zstd_frame_without_size(std::string(10, 'A'));
  REQUIRE(ZSTD_getFrameContentSize(undeclared.data(), undeclared.size()) ==
          ZSTD_CONTENTSIZE_UNKNOWN);
  // The hand-made frames are sound zstd: the one without a size decompresses to its bytes.
  {
    std::string out(10, '\0');
    REQUIRE(ZSTD_decompress(out.data(), out.size(), undeclared.data(), undeclared.size()) == 10);
    REQUIRE(out == std::string(10, 'A'));
  }
  const std::string not_declared = "payload does not declare the files' total size (10 bytes)";
  const std::string too_large = "files larger than 268435456 bytes";

  SECTION("the reasons") {
    CHECK(rejection(raw_envelope("", small_header, declares_2_40), trust_unsigned()) ==
          not_declared);
    CHECK(rejection(raw_envelope("", huge_header, declares_2_40), trust_unsigned()) == too_large);
    CHECK(rejection(raw_envelope("", small_header, undeclared), trust_unsigned()) == not_declared);
    // Signed by the trusted writer: refused all the same.
    CHECK(rejection(signed_raw(small_header, declares_2_40, writer()), trust_writer()) ==
          not_declared);
    CHECK(rejection(signed_raw(huge_header, declares_2_40, writer()), trust_writer()) == too_large);
    // Within the default limit but over a smaller one.
    EnvelopeLimits limits;
    limits.max_files_bytes = 1 << 20;
    const std::string header_1g = header_of(list({entry("kernel.so", uint64_t(1) << 30, so_sha)}));
    CHECK(rejection(raw_envelope("", header_1g,
                                 metajit_test::zstd_frame_declaring(uint64_t(1) << 30, 10)),
                    trust_unsigned(), limits) == "files larger than 1048576 bytes");
    // Many files each under the limit, together over it.
    limits.max_files_bytes = 100;
    CHECK(rejection(raw_envelope("",
                                 header_of(list({entry("kernel.cc", 60, so_sha),
                                                 entry("kernel.so", 60, so_sha)})),
                                 zstd(std::string(120, 'A'))),
                    trust_unsigned(), limits) == "files larger than 100 bytes");
  }
  SECTION("memory stays small") {
    // 64 MiB of zeros after a sound frame of the files: a bomb the declared size does not show.
    const std::string plain = std::string(10, 'A');
    const std::string trailing_bomb = zstd(plain) + zstd(std::string(64 << 20, '\0'));
    const long growth = peak_rss_growth_kib([&] {
      return rejection(raw_envelope("", small_header, declares_2_40), trust_unsigned()) ==
                 not_declared &&
             rejection(raw_envelope("", huge_header, declares_2_40), trust_unsigned()) ==
                 too_large &&
             rejection(raw_envelope("", small_header, undeclared), trust_unsigned()) ==
                 not_declared &&
             rejection(raw_envelope("", small_header, trailing_bomb), trust_unsigned()) ==
                 "payload does not decompress";
    });
    INFO("peak resident memory grew by " << growth << " KiB");
    CHECK(growth >= 0);
    CHECK(growth < 16 * 1024);
  }
}

TEST_CASE("an envelope over the size limits is rejected", "[remote-unit]") {
  const std::vector<EnvelopeFile> files = small_files();
  const std::string sealed = seal_envelope(kKey, {}, files, &writer());
  EnvelopeLimits limits;
  limits.max_envelope_bytes = sealed.size();
  CHECK(rejection(sealed, trust_writer(), limits).empty());
  limits.max_envelope_bytes = sealed.size() - 1;
  CHECK(rejection(sealed, trust_writer(), limits) == "oversized (" + std::to_string(sealed.size()) +
                                                         " bytes; at most " +
                                                         std::to_string(sealed.size() - 1) + ")");
  // Rejected on its size alone: a large run of garbage is not scanned.
  CHECK_THAT(rejection(std::string(sealed.size(), '\xff'), trust_writer(), limits),
             Contains("oversized"));

  const size_t header_size = layout_of(sealed).payload_len_at - layout_of(sealed).header_at;
  limits = {};
  limits.max_header_bytes = header_size;
  CHECK(rejection(sealed, trust_writer(), limits).empty());
  limits.max_header_bytes = header_size - 1;
  CHECK(rejection(sealed, trust_writer(), limits) == "truncated or malformed envelope");

  const size_t total = concatenated(files).size();
  limits = {};
  limits.max_files_bytes = total;
  CHECK(rejection(sealed, trust_writer(), limits).empty());
  limits.max_files_bytes = total - 1;
  CHECK(rejection(sealed, trust_writer(), limits) ==
        "files larger than " + std::to_string(total - 1) + " bytes");
}

TEST_CASE("a rejection's reason is one line even when it quotes the entry", "[remote-unit]") {
  // The reason goes into a warning line; what it quotes from the entry must not break it.
  const SecretKey stranger = key_from_seed("evil\nname\x1b[2J", 7);
  const std::string sealed = seal_envelope(kKey, {}, small_files(), &stranger);
  const std::string why = rejection(sealed, trust_writer());
  CHECK_THAT(why, Contains("which is not a trusted key"));
  CHECK_FALSE(has_control_character(why));

  const std::vector<EnvelopeFile> files = small_files();
  const std::string payload = zstd(concatenated(files));
  const std::string for_key = rejection(
      raw_envelope("", header_of(entries_of(files), "other\nkey\r"), payload), trust_unsigned());
  CHECK_THAT(for_key, Contains("not the key asked for"));
  CHECK_FALSE(has_control_character(for_key));

  const std::string for_file =
      rejection(raw_envelope("", header_of(list({entry("kernel.so\n\x1b", 3, "00")})), payload),
                trust_unsigned());
  CHECK_THAT(for_file, Contains("unexpected file"));
  CHECK_FALSE(has_control_character(for_file));
}

TEST_CASE("the envelope fuzz target's seeds are what their names say", "[remote-unit]") {
  // tests/fuzz/corpus/envelope/ (written by fuzz_envelope with METAJIT_FUZZ_ENVELOPE_SEEDS):
  // the signed seeds must verify with the fuzz target's keys, or the fuzzer never gets past the
  // signature from them.
  const char* source = std::getenv("METAJIT_SOURCE_DIR");
  REQUIRE(source);
  const fs::path dir = fs::path(source) / "tests/fuzz/corpus/envelope";
  REQUIRE(fs::is_directory(dir));
  const EnvelopeTrust signed_only = metajit_test::fuzz_envelope_trust(false);
  const EnvelopeTrust any = metajit_test::fuzz_envelope_trust(true);
  const EnvelopeLimits limits = metajit_test::fuzz_envelope_limits();
  std::map<std::string, int> kinds;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const std::string bytes = metajit_test::read_file(e.path());
    std::string why_signed, why_any;
    const bool opens_signed =
        bool(open_envelope(bytes, metajit_test::kFuzzEnvelopeKey, signed_only, why_signed, limits));
    const bool opens_any =
        bool(open_envelope(bytes, metajit_test::kFuzzEnvelopeKey, any, why_any, limits));
    INFO(name << ": " << why_signed << " / " << why_any);
    const std::string kind = name.substr(0, name.find('_'));
    kinds[kind]++;
    if (kind == "signed") {
      CHECK(opens_signed);
      CHECK(opens_any);
    } else if (kind == "unsigned" || kind == "untrusted") {
      CHECK_FALSE(opens_signed);
      CHECK(opens_any);
    } else if (kind == "truncated" || kind == "bomb" || kind == "rejected") {
      CHECK_FALSE(opens_signed);
      CHECK_FALSE(opens_any);
    } else {
      CHECK(kind == "regression");  // inputs a fuzzer found: replayed, anything but a crash
    }
  }
  CHECK(kinds["signed"] >= 3);
  CHECK(kinds["unsigned"] >= 1);
  CHECK(kinds["untrusted"] >= 2);
  CHECK(kinds["truncated"] >= 3);
  CHECK(kinds["bomb"] >= 2);
  CHECK(kinds["rejected"] >= 1);
}

// ---------------------------------------------------------------------------------------------
// Signing keys.

namespace {

int mode_of(const fs::path& p) {
  struct stat st;
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return int(st.st_mode & 0777);
}

std::string base64_of(const std::string& bytes) {
  std::string out(sodium_base64_encoded_len(bytes.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(bytes.data()),
                    bytes.size(), sodium_base64_VARIANT_ORIGINAL);
  out.resize(std::strlen(out.c_str()));
  return out;
}

// A file with `text` and mode `mode`.
fs::path write_key_file(const fs::path& p, const std::string& text, mode_t mode = 0600) {
  metajit_test::write_file(p, text);
  REQUIRE(::chmod(p.c_str(), mode) == 0);
  return p;
}

}  // namespace

TEST_CASE("generate_key_pair writes a 0600 secret key and a 0644 public key whatever the umask",
          "[remote-unit]") {
  for (mode_t mask : {mode_t(0), mode_t(022), mode_t(077), mode_t(0777)}) {
    INFO("umask " << mask);
    TempDir tmp;
    const fs::path secret = tmp.path() / "writer.key";
    const mode_t old = ::umask(mask);
    PublicKey pk;
    const std::string thrown =
        metajit_test::thrown_message([&] { pk = generate_key_pair("ci-writer", secret); });
    ::umask(old);
    REQUIRE(thrown == "");
    CHECK(mode_of(secret) == 0600);
    CHECK(mode_of(secret.string() + ".pub") == 0644);
    CHECK(pk.name == "ci-writer");
    CHECK(metajit_test::read_file(secret.string() + ".pub") == public_key_line(pk) + "\n");
    CHECK_THAT(public_key_line(pk), Contains("ci-writer:"));

    const SecretKey sk = load_secret_key(secret);
    CHECK(sk.name == "ci-writer");
    CHECK(public_key_of(sk).bytes == pk.bytes);
    const std::vector<PublicKey> loaded = load_public_keys(secret.string() + ".pub");
    REQUIRE(loaded.size() == 1);
    CHECK(loaded[0].name == "ci-writer");
    CHECK(loaded[0].bytes == pk.bytes);

    // The pair works end to end: signed with the file's secret, verified with its .pub.
    CHECK(rejection(seal_envelope(kKey, {}, small_files(), &sk), trust_of(loaded)).empty());
  }
  // Two pairs are different keys.
  TempDir tmp;
  CHECK(generate_key_pair("a", tmp.path() / "a").bytes !=
        generate_key_pair("a", tmp.path() / "b").bytes);
}

TEST_CASE("generate_key_pair never overwrites a key file", "[remote-unit]") {
  TempDir tmp;
  const fs::path secret = tmp.path() / "k";
  const fs::path pub = tmp.path() / "k.pub";

  // `existing` holds `text`: generate_key_pair refuses, naming it, keeps it and writes no `other`.
  auto refused_over = [&](const fs::path& existing, const std::string& text,
                          const fs::path& other) {
    metajit_test::write_file(existing, text);
    const std::string msg = message_of<CacheError>([&] { generate_key_pair("w", secret); });
    CHECK_THAT(msg, Contains(existing.string()) && Contains("never overwritten"));
    CHECK(metajit_test::read_file(existing) == text);
    CHECK_FALSE(fs::exists(other));
  };

  SECTION("an existing secret key file") {
    refused_over(secret, "old secret\n", pub);
  }
  SECTION("an existing public key file") {
    refused_over(pub, "old:public\n", secret);
  }
  SECTION("a key made before") {
    generate_key_pair("w", secret);
    const std::string before = metajit_test::read_file(secret),
                      before_pub = metajit_test::read_file(pub);
    const std::string msg = message_of<CacheError>([&] { generate_key_pair("w", secret); });
    CHECK_THAT(msg, Contains("never overwritten"));
    CHECK(metajit_test::read_file(secret) == before);
    CHECK(metajit_test::read_file(pub) == before_pub);
  }
  SECTION("a directory that does not exist") {
    const fs::path nowhere = tmp.path() / "missing" / "k";
    const std::string msg = message_of<CacheError>([&] { generate_key_pair("w", nowhere); });
    CHECK_THAT(msg, Contains(nowhere.string()));
  }
}

TEST_CASE("key names are 1 to 64 letters, digits, '-', '_' or '.'", "[remote-unit]") {
  CHECK(valid_key_name("a"));
  CHECK(valid_key_name("fleet-2024_v1.b"));
  CHECK(valid_key_name(std::string(64, 'k')));
  TempDir tmp;
  for (const std::string& name :
       std::vector<std::string>{std::string(), std::string(65, 'k'), std::string("a b"),
                                std::string("a:b"), std::string("a/b"), std::string("a\nb"),
                                std::string("cl\xc3\xa9"), std::string("a#b")}) {
    INFO("name '" << name << "'");
    CHECK_FALSE(valid_key_name(name));
    const fs::path secret = tmp.path() / "k";
    const std::string msg = message_of<CacheError>([&] { generate_key_pair(name, secret); });
    CHECK_THAT(msg, Contains("is not valid") && Contains("1 to 64"));
    CHECK(metajit_test::count_entries(tmp.path()) == 0);
  }
}

TEST_CASE("load_secret_key refuses a key file that others can read", "[remote-unit]") {
  TempDir tmp;
  const fs::path secret = tmp.path() / "k";
  generate_key_pair("w", secret);
  for (mode_t mode : {mode_t(0644), mode_t(0640), mode_t(0604), mode_t(0660)}) {
    REQUIRE(::chmod(secret.c_str(), mode) == 0);
    const std::string msg = message_of<CacheError>([&] { load_secret_key(secret); });
    INFO(msg);
    CHECK_THAT(msg, Contains("METAJIT_REMOTE_SIGNING_KEY") && Contains(secret.string()) &&
                        Contains("chmod 600 " + secret.string()));
  }
  REQUIRE(::chmod(secret.c_str(), 0644) == 0);
  CHECK_THAT(message_of<CacheError>([&] { load_secret_key(secret); }), Contains("(mode 644)"));
  REQUIRE(::chmod(secret.c_str(), 0400) == 0);
  CHECK(load_secret_key(secret).name == "w");
  CHECK_THAT(message_of<CacheError>([&] { load_secret_key(tmp.path() / "missing"); }),
             Contains("cannot read") && Contains((tmp.path() / "missing").string()));
}

TEST_CASE("load_secret_key refuses a malformed secret key file", "[remote-unit]") {
  TempDir tmp;
  const SecretKey good = key_from_seed("w", 8);
  const std::string good_b64 =
      base64_of(std::string(reinterpret_cast<const char*>(good.bytes.data()), good.bytes.size()));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "(empty)"},
      {"# a comment only\n", "(empty)"},
      {"no colon here\n", "expected NAME:base64"},
      {"bad name:" + good_b64 + "\n", "key name 'bad name'"},
      {"w:not base64!\n", "the key is not 64 bytes of base64"},
      {"w:" + good_b64.substr(0, 40) + "\n", "the key is not 64 bytes of base64"},
      {"w:" + base64_of(std::string(32, 'p')) + "\n", "the key is not 64 bytes of base64"},
      {"w:" + good_b64 + "garbage\n", "the key is not 64 bytes of base64"},
  };
  for (const auto& [text, reason] : cases) {
    INFO("file: " << text);
    const fs::path p = write_key_file(tmp.path() / "k", text);
    const std::string msg = message_of<CacheError>([&] { load_secret_key(p); });
    CHECK_THAT(msg, Contains(p.string()) && Contains("is not a metajit secret key") &&
                        Contains(reason) && Contains("metajit remote keygen"));
    fs::remove(p);
  }
  // 64 bytes of base64, but the public half is not the secret half's (edited, or two keys
  // pasted together): it would sign entries no reader can verify.
  SecretKey edited = key_from_seed("w", 8);
  edited.bytes[40] ^= 1;
  const SecretKey other = key_from_seed("w", 9);
  SecretKey pasted = key_from_seed("w", 8);
  std::copy(other.bytes.begin() + 32, other.bytes.end(), pasted.bytes.begin() + 32);
  for (const SecretKey* bad : {&edited, &pasted}) {
    const fs::path p = write_key_file(
        tmp.path() / "k",
        "w:" + base64_of(std::string(reinterpret_cast<const char*>(bad->bytes.data()), 64)) + "\n");
    CHECK_THAT(
        message_of<CacheError>([&] { load_secret_key(p); }),
        Contains(p.string()) && Contains("its public half does not belong to its secret half"));
    fs::remove(p);
  }
  // A comment before the key, and a Windows line end, are fine.
  const fs::path p = write_key_file(tmp.path() / "ok", "# made by hand\nw:" + good_b64 + "\r\n");
  const SecretKey loaded = load_secret_key(p);
  CHECK(loaded.name == "w");
  CHECK(loaded.bytes == good.bytes);
}

TEST_CASE(
    "load_public_keys skips comments and blank lines and names the file and line of a bad one",
    "[remote-unit]") {
  TempDir tmp;
  const PublicKey a = public_key_of(key_from_seed("fleet-a", 10));
  const PublicKey b = public_key_of(key_from_seed("fleet.b", 11));
  const fs::path file = tmp.path() / "trusted";
  metajit_test::write_file(file, "# the fleet's writers\n\n   \n" + public_key_line(a) +
                                     "\n  # rotated out next month\n\t" + public_key_line(b) +
                                     "\r\n");
  const std::vector<PublicKey> keys = load_public_keys(file);
  REQUIRE(keys.size() == 2);
  CHECK(keys[0].name == "fleet-a");
  CHECK(keys[0].bytes == a.bytes);
  CHECK(keys[1].name == "fleet.b");
  CHECK(keys[1].bytes == b.bytes);

  metajit_test::write_file(file, "");
  CHECK(load_public_keys(file).empty());

  const std::string b64 = public_key_line(a).substr(std::string("fleet-a:").size());
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {public_key_line(a) + "\n# c\n\nfleet-c " + b64 + "\n", "line 4", "expected NAME:base64"},
      {":" + b64 + "\n", "line 1", "key name ''"},
      {"fleet c:" + b64 + "\n", "line 1", "key name 'fleet c'"},
      {"k:" + base64_of(std::string(31, 'x')) + "\n", "line 1",
       "the key is not 32 bytes of base64"},
      {"\nk:" + base64_of(std::string(33, 'x')) + "\n", "line 2",
       "the key is not 32 bytes of base64"},
      {"k:" + base64_of(std::string(64, 'x')) + "\n", "line 1",
       "the key is not 32 bytes of base64"},  // a secret key given as a trusted key
      {"k:@@@@\n", "line 1", "the key is not 32 bytes of base64"},
  };
  for (const auto& [text, line, reason] : cases) {
    INFO("file: " << text);
    metajit_test::write_file(file, text);
    const std::string msg = message_of<CacheError>([&] { load_public_keys(file); });
    CHECK_THAT(msg, Contains("METAJIT_REMOTE_TRUSTED_KEYS: " + file.string() + " " + line + ": ") &&
                        Contains(reason));
  }
  // A secret key file named as trusted keys is refused, and does not echo the secret.
  const fs::path secret = tmp.path() / "writer.key";
  generate_key_pair("writer", secret);
  const std::string secret_text = metajit_test::read_file(secret);
  const std::string msg = message_of<CacheError>([&] { load_public_keys(secret); });
  CHECK_THAT(msg, Contains("not 32 bytes"));
  CHECK(msg.find(secret_text.substr(8, 40)) == std::string::npos);

  CHECK_THAT(message_of<CacheError>([&] { load_public_keys(tmp.path() / "missing"); }),
             Contains("cannot read") && Contains((tmp.path() / "missing").string()));
  // A directory is not a file without keys.
  CHECK_THAT(message_of<CacheError>([&] { load_public_keys(tmp.path()); }),
             Contains("cannot read " + tmp.path().string()));
}

TEST_CASE("public_key_of a loaded secret key is the key of its .pub file", "[remote-unit]") {
  TempDir tmp;
  const fs::path secret = tmp.path() / "k";
  const PublicKey made = generate_key_pair("rot-7", secret);
  const SecretKey sk = load_secret_key(secret);
  const PublicKey pk = public_key_of(sk);
  CHECK(public_key_line(pk) + "\n" == metajit_test::read_file(secret.string() + ".pub"));
  CHECK(pk.bytes == made.bytes);
  CHECK(public_key_of(key_from_seed("x", 1)).bytes != public_key_of(key_from_seed("x", 2)).bytes);
}

// ---------------------------------------------------------------------------------------------
// SHA-256.

TEST_CASE("sha256_hex gives the standard digests", "[remote-unit]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  CHECK(sha256_hex(std::string("a\0b", 3)) != sha256_hex("a"));
}

TEST_CASE("file_sha256_hex is the digest of the file's bytes, or nothing when it cannot be read",
          "[remote-unit]") {
  TempDir tmp;
  std::string big(200003, '\0');  // several of the reader's 64 KiB blocks, and a partial one
  for (size_t i = 0; i < big.size(); ++i) big[i] = char(i * 31 + (i >> 9));
  metajit_test::write_file(tmp.path() / "big", big);
  metajit_test::write_file(tmp.path() / "empty", "");
  metajit_test::write_file(tmp.path() / "abc", "abc");
  CHECK(file_sha256_hex(tmp.path() / "big") == sha256_hex(big));
  CHECK(file_sha256_hex(tmp.path() / "empty") == sha256_hex(""));
  CHECK(file_sha256_hex(tmp.path() / "abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(file_sha256_hex(tmp.path() / "missing") == std::nullopt);
  CHECK(file_sha256_hex(tmp.path()) == std::nullopt);  // a directory
}

// ---------------------------------------------------------------------------------------------
// METAJIT_REMOTE URLs.

TEST_CASE("parse_redis_url reads every valid form", "[remote-unit]") {
  struct Want {
    std::string url, host;
    int port;
    std::string socket, user;
    int db;
    std::string describe;
  };
  const std::vector<Want> cases = {
      {"redis://cache.example", "cache.example", 6379, "", "", 0, "cache.example:6379/0"},
      {"redis://cache:6380", "cache", 6380, "", "", 0, "cache:6380/0"},
      {"redis://reader@cache", "cache", 6379, "", "reader", 0, "reader@cache:6379/0"},
      {"redis://cache/3", "cache", 6379, "", "", 3, "cache:6379/3"},
      {"redis://cache/", "cache", 6379, "", "", 0, "cache:6379/0"},
      {"redis://writer@10.0.0.5:7000/2", "10.0.0.5", 7000, "", "writer", 2,
       "writer@10.0.0.5:7000/2"},
      {"redis://[::1]:6380", "::1", 6380, "", "", 0, "[::1]:6380/0"},
      {"redis://[::1]", "::1", 6379, "", "", 0, "[::1]:6379/0"},
      {"redis://[fe80::1]:1/15", "fe80::1", 1, "", "", 15, "[fe80::1]:1/15"},
      {"redis://h:65535", "h", 65535, "", "", 0, "h:65535/0"},
      {"redis+unix:///run/redis/redis.sock", "", 6379, "/run/redis/redis.sock", "", 0,
       "unix:/run/redis/redis.sock"},
  };
  for (const Want& w : cases) {
    INFO(w.url);
    std::string why;
    const std::optional<RedisEndpoint> e = parse_redis_url(w.url, why);
    REQUIRE(e);
    CHECK(why.empty());
    CHECK(e->host == w.host);
    CHECK(e->port == w.port);
    CHECK(e->socket_path == w.socket);
    CHECK(e->user == w.user);
    CHECK(e->db == w.db);
    CHECK(e->describe() == w.describe);
  }
}

TEST_CASE("parse_redis_url rejects what is not a Redis URL, saying what is valid",
          "[remote-unit]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"http://cache:6379", "is not a Redis URL"},
      {"rediss://cache", "is not a Redis URL"},
      {"cache:6379", "is not a Redis URL"},
      {"", "is not a Redis URL"},
      {"REDIS://cache", "is not a Redis URL"},
      {"redis://cache:0", "port '0' is not in 1..65535"},
      {"redis://cache:70000", "port '70000' is not in 1..65535"},
      {"redis://cache:abc", "port 'abc' is not in 1..65535"},
      {"redis://cache:-1", "port '-1' is not in 1..65535"},
      {"redis://cache:6379:1", "port '6379:1' is not in 1..65535"},
      {"redis://[::1]:99999", "port '99999' is not in 1..65535"},
      {"redis://cache/abc", "database 'abc' is not a number"},
      {"redis://cache/-1", "database '-1' is not a number"},
      {"redis://cache/1/2", "database '1/2' is not a number"},
      {"redis+unix://run/redis.sock", "the socket path must be absolute"},
      {"redis+unix://", "the socket path must be absolute"},
      {"redis://", "no host"},
      {"redis://:6379", "no host"},
      {"redis://reader@", "no host"},
      {"redis://reader@/2", "no host"},
      {"redis://[]:6379", "no host"},
      {"redis://[::1", "unclosed '['"},
      {"redis://[::1]6379", "unexpected text after the host"},
  };
  for (const auto& [url, reason] : cases) {
    INFO(url);
    std::string why;
    CHECK_FALSE(parse_redis_url(url, why));
    CHECK_THAT(why, Contains("METAJIT_REMOTE=") && Contains(reason) &&
                        Contains("expected redis://[user@]host[:port][/db] or "
                                 "redis+unix:///path/to/socket"));
  }
}

TEST_CASE("parse_redis_url refuses a password in the URL without repeating it", "[remote-unit]") {
  for (const std::string& url : std::vector<std::string>{
           "redis://reader:s3cr3t-pw@cache", "redis://:s3cr3t-pw@cache:6379/1",
           "redis://reader:s3cr3t-pw@cache/x", "redis://reader:s3cr3t-pw@cache:bad",
           "redis://reader:s3cr/3t-pw@cache", "redis://reader:s3cr3t-pw@",
           "redis+unix://reader:s3cr3t-pw@/run/redis.sock", "rediss://reader:s3cr3t-pw@cache",
           "http://:s3cr3t-pw@cache"}) {
    INFO(url);
    std::string why;
    CHECK_FALSE(parse_redis_url(url, why));
    CHECK_FALSE(why.empty());
    CHECK(why.find("s3cr") == std::string::npos);
    CHECK(why.find("3t-pw") == std::string::npos);
  }
  std::string why;
  CHECK_FALSE(parse_redis_url("redis://reader:pw@cache", why));
  CHECK_THAT(why, Contains("a password does not belong in the URL") &&
                      Contains("METAJIT_REMOTE_PASSWORD_FILE"));
}

// ---------------------------------------------------------------------------------------------
// METAJIT_REMOTE_* configuration.

namespace {

const char* const kRemoteVariables[] = {"METAJIT_REMOTE",
                                        "METAJIT_REMOTE_MODE",
                                        "METAJIT_REMOTE_NAMESPACE",
                                        "METAJIT_REMOTE_TIMEOUT",
                                        "METAJIT_REMOTE_WAIT",
                                        "METAJIT_REMOTE_TRUST",
                                        "METAJIT_REMOTE_SIGNING_KEY",
                                        "METAJIT_REMOTE_TRUSTED_KEYS",
                                        "METAJIT_REMOTE_PASSWORD_FILE"};

// Clears every METAJIT_REMOTE_* variable for the scope and restores them (and the config)
// after; set() changes one without reloading, so a test can watch reload_config() throw.
class RemoteEnv {
 public:
  RemoteEnv() {
    for (const char* name : kRemoteVariables) {
      if (const char* v = std::getenv(name)) saved_.emplace_back(name, v);
      ::unsetenv(name);
    }
  }
  ~RemoteEnv() {
    for (const char* name : kRemoteVariables) ::unsetenv(name);
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
    reload_config();
  }
  RemoteEnv(const RemoteEnv&) = delete;
  RemoteEnv& operator=(const RemoteEnv&) = delete;
  void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }
  void unset(const char* name) { ::unsetenv(name); }

 private:
  std::vector<std::pair<std::string, std::string>> saved_;
};

// The message reload_config() throws with `name`=`value` set (the others cleared).
std::string config_error(const char* name, const std::string& value) {
  RemoteEnv env;
  env.set(name, value);
  return message_of<Error>([] { reload_config(); });
}

}  // namespace

TEST_CASE("the remote mode defaults to read when METAJIT_REMOTE is set, off otherwise",
          "[remote-unit]") {
  RemoteEnv env;
  reload_config();
  CHECK(config().remote_mode == "off");
  CHECK(config().remote_url.empty());
  CHECK(config().remote_namespace == "default");
  CHECK(config().remote_timeout_seconds == 2);
  CHECK_FALSE(config().remote_trust_unsigned);

  env.set("METAJIT_REMOTE", "redis://cache");
  reload_config();
  CHECK(config().remote_mode == "read");
  CHECK(config().remote_url == "redis://cache");
  for (const std::string& mode : std::vector<std::string>{"off", "read", "readwrite"}) {
    env.set("METAJIT_REMOTE_MODE", mode);
    reload_config();
    CHECK(config().remote_mode == mode);
  }
  env.set("METAJIT_REMOTE_MODE", "");
  reload_config();
  CHECK(config().remote_mode == "read");  // empty is unset

  env.set("METAJIT_REMOTE_TIMEOUT", "0.5");
  env.set("METAJIT_REMOTE_NAMESPACE", std::string(64, 'n'));
  env.set("METAJIT_REMOTE_TRUST", "unsigned");
  reload_config();
  CHECK(config().remote_timeout_seconds == 0.5);
  CHECK(config().remote_namespace == std::string(64, 'n'));
  CHECK(config().remote_trust_unsigned);
  env.set("METAJIT_REMOTE_TIMEOUT", "1m");
  env.set("METAJIT_REMOTE_NAMESPACE", "team-a_1.x");
  env.set("METAJIT_REMOTE_TRUST", "signed");
  reload_config();
  CHECK(config().remote_timeout_seconds == 60);
  CHECK(config().remote_namespace == "team-a_1.x");
  CHECK_FALSE(config().remote_trust_unsigned);
}

TEST_CASE("a bad METAJIT_REMOTE_* value is an Error naming the variable and what is valid",
          "[remote-unit]") {
  for (const std::string& v : std::vector<std::string>{"write", "READ", "on", "read "}) {
    INFO(v);
    CHECK_THAT(
        config_error("METAJIT_REMOTE_MODE", v),
        Equals("METAJIT_REMOTE_MODE=" + v + " is not valid; expected off, read or readwrite"));
  }
  for (const std::string& v : std::vector<std::string>{"abc", "0", "0s", "0.0001", "-1", "2x",
                                                       "2 s", "1.5h", "nan", "inf"}) {
    INFO(v);
    CHECK_THAT(
        config_error("METAJIT_REMOTE_TIMEOUT", v),
        Contains("METAJIT_REMOTE_TIMEOUT=" + v + " is not valid") && Contains("0.001s to 1h"));
  }
  for (const std::string& v : std::vector<std::string>{"a b", "a/b", "a:b", "team*",
                                                       std::string(65, 'n'), "na\xc3\xafve"}) {
    INFO(v);
    CHECK_THAT(config_error("METAJIT_REMOTE_NAMESPACE", v),
               Contains("METAJIT_REMOTE_NAMESPACE=" + v + " is not valid") &&
                   Contains("1 to 64 letters, digits, '-', '_' or '.'"));
  }
  for (const std::string& v : std::vector<std::string>{"maybe", "Unsigned", "none", "1"}) {
    INFO(v);
    CHECK_THAT(config_error("METAJIT_REMOTE_TRUST", v),
               Equals("METAJIT_REMOTE_TRUST=" + v + " is not valid; expected signed or unsigned"));
  }
  for (const std::string& v : std::vector<std::string>{"soon", "-5", "2d"}) {
    INFO(v);
    CHECK_THAT(config_error("METAJIT_REMOTE_WAIT", v),
               Contains("METAJIT_REMOTE_WAIT=" + v + " is not valid"));
  }
  // After each, the environment is back and the configuration reads again.
  CHECK_NOTHROW(reload_config());
}

// ---------------------------------------------------------------------------------------------
// One Redis connection, against a real redis-server.

TEST_CASE("a Redis connection sends commands and converts every kind of reply", "[remote-unit]") {
  RedisServer::require();
  for (bool tcp : {false, true}) {
    INFO((tcp ? "tcp" : "unix socket"));
    metajit_test::RedisOptions options;
    options.tcp = tcp;
    RedisServer server(options);
    auto c = server.connect();
    RedisReply r = c->command({"PING"});
    CHECK(r.kind == RedisReply::Kind::Status);
    CHECK(r.str == "PONG");
    const std::string value("bin\0ary\r\n$3\r\nvalue", 18);
    r = c->command({"SET", "k", value});
    CHECK(r.kind == RedisReply::Kind::Status);
    CHECK(r.str == "OK");
    r = c->command({"GET", "k"});
    CHECK(r.kind == RedisReply::Kind::String);
    CHECK(r.str == value);
    CHECK(c->command({"GET", "missing"}).kind == RedisReply::Kind::Nil);
    r = c->command({"INCRBY", "n", "41"});
    CHECK(r.kind == RedisReply::Kind::Integer);
    CHECK(r.integer == 41);
    r = c->command({"MGET", "k", "missing", "n"});
    REQUIRE(r.kind == RedisReply::Kind::Array);
    REQUIRE(r.elements.size() == 3);
    CHECK(r.elements[0].str == value);
    CHECK(r.elements[1].kind == RedisReply::Kind::Nil);
    CHECK(r.elements[2].str == "41");
    CHECK_FALSE(c->broken());
  }
}

TEST_CASE("an error reply is returned, and classify_error_reply names its cause", "[remote-unit]") {
  CHECK(classify_error_reply("OOM command not allowed when used memory > 'maxmemory'.") ==
        RemoteFailure::OutOfMemory);
  CHECK(classify_error_reply("NOAUTH Authentication required.") == RemoteFailure::Auth);
  CHECK(classify_error_reply("WRONGPASS invalid username-password pair or user is disabled.") ==
        RemoteFailure::Auth);
  CHECK(classify_error_reply("NOPERM this user has no permissions to run the 'set' command") ==
        RemoteFailure::Auth);
  CHECK(classify_error_reply("ERR invalid password") == RemoteFailure::Auth);
  CHECK(classify_error_reply("ERR unknown command 'FOO'") == RemoteFailure::Server);
  CHECK(classify_error_reply("LOADING Redis is loading the dataset in memory") ==
        RemoteFailure::Server);
  CHECK(classify_error_reply("ERR value is not an integer or out of range") ==
        RemoteFailure::Server);

  RedisServer::require();
  SECTION("an error reply leaves the connection usable") {
    RedisServer server;
    auto c = server.connect();
    REQUIRE(c->command({"SET", "k", "text"}).kind == RedisReply::Kind::Status);
    RedisReply r = c->command({"INCR", "k"});
    CHECK(r.kind == RedisReply::Kind::Error);
    CHECK_THAT(r.str, Contains("not an integer"));
    CHECK(classify_error_reply(r.str) == RemoteFailure::Server);
    CHECK_FALSE(c->broken());
    CHECK(c->command({"PING"}).str == "PONG");
  }
  SECTION("a server out of memory (maxmemory with noeviction)") {
    metajit_test::RedisOptions options;
    options.maxmemory = "1mb";
    options.policy = "noeviction";
    RedisServer server(options);
    auto c = server.connect();
    RedisReply r;
    for (int i = 0; i < 100 && r.kind != RedisReply::Kind::Error; ++i)
      r = c->command({"SET", "k" + std::to_string(i), std::string(100 << 10, 'x')});
    REQUIRE(r.kind == RedisReply::Kind::Error);
    CHECK(r.str.rfind("OOM", 0) == 0);
    CHECK(classify_error_reply(r.str) == RemoteFailure::OutOfMemory);
  }
  SECTION("a server with a password, asked without one") {
    metajit_test::RedisOptions options;
    options.password = "pw-7b1e";
    RedisServer server(options);
    RedisConnection c(server.endpoint(), "", 5, 5);
    RedisReply r = c.command({"GET", "k"});
    REQUIRE(r.kind == RedisReply::Kind::Error);
    CHECK(r.str.rfind("NOAUTH", 0) == 0);
    CHECK(classify_error_reply(r.str) == RemoteFailure::Auth);
  }
  SECTION("a user whose ACL does not allow the command") {
    RedisServer server;
    REQUIRE(
        server.command({"ACL", "SETUSER", "reader", "on", "nopass", "~*", "+get", "+ping"}).str ==
        "OK");
    RedisEndpoint e = server.endpoint();
    e.user = "reader";
    RedisConnection c(e, "", 5, 5);
    CHECK(c.command({"PING"}).str == "PONG");
    RedisReply r = c.command({"SET", "k", "v"});
    REQUIRE(r.kind == RedisReply::Kind::Error);
    CHECK(r.str.rfind("NOPERM", 0) == 0);
    CHECK(classify_error_reply(r.str) == RemoteFailure::Auth);
  }
}

TEST_CASE("a reply larger than max_reply_bytes is a Protocol failure", "[remote-unit]") {
  RedisServer::require();
  RedisServer server;
  auto c = server.connect();
  REQUIRE(c->command({"SET", "big", std::string(1 << 20, 'b')}).str == "OK");
  CHECK(c->command({"GET", "big"}, 2 << 20).str.size() == size_t(1) << 20);
  try {
    c->command({"GET", "big"}, 64 << 10);
    FAIL("a 1 MiB reply with a 64 KiB limit was returned");
  } catch (const RedisFailure& f) {
    CHECK(f.kind == RemoteFailure::Protocol);
    CHECK_THAT(f.what(), Contains("reply longer than 65536 bytes"));
  }
  CHECK(c->broken());
  try {
    c->command({"PING"});
    FAIL("a broken connection sent a command");
  } catch (const RedisFailure& f) {
    CHECK(f.kind == RemoteFailure::Io);
  }
}

TEST_CASE("max_reply_bytes holds exactly for strings and in total for arrays", "[remote-unit]") {
  RedisServer::require();
  RedisServer server;
  const size_t limit = 64 << 10;
  auto expect_too_long = [&](const std::vector<std::string>& args) {
    auto c = server.connect();
    try {
      c->command(args, limit);
      FAIL("a reply over the limit was returned: " + args[0] + " " + args[1]);
    } catch (const RedisFailure& f) {
      CHECK(f.kind == RemoteFailure::Protocol);
    }
  };
  auto c = server.connect();
  for (size_t extra : {size_t(1), size_t(4096), size_t(12000)}) {
    const std::string key = "s" + std::to_string(extra);
    REQUIRE(c->command({"SET", key, std::string(limit + extra, 's')}).str == "OK");
    expect_too_long({"GET", key});
  }
  REQUIRE(c->command({"SET", "exact", std::string(limit, 'e')}).str == "OK");
  CHECK(c->command({"GET", "exact"}, limit).str.size() == limit);
  // 2000 elements of 1000 bytes: hiredis frees parsed elements, the count must not forget them.
  for (int i = 0; i < 2000; ++i)
    REQUIRE(c->command({"RPUSH", "list", std::string(1000, 'l')}, 1 << 20).kind ==
            RedisReply::Kind::Integer);
  expect_too_long({"LRANGE", "list", "0", "-1"});
  CHECK(c->command({"LRANGE", "list", "0", "9"}, limit).elements.size() == 10);
}

TEST_CASE("a server that stops answering is a Timeout within the operation timeout",
          "[remote-unit]") {
  RedisServer::require();
  RedisServer server;
  auto c = std::make_unique<RedisConnection>(server.endpoint(), "", 5, 0.5);
  REQUIRE(c->command({"PING"}).str == "PONG");
  server.stop();
  const auto start = std::chrono::steady_clock::now();
  std::optional<RemoteFailure> kind;
  try {
    c->command({"GET", "k"});
  } catch (const RedisFailure& f) {
    kind = f.kind;
    CHECK_THAT(f.what(), Contains("timed out"));
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  server.resume();
  REQUIRE(kind);
  CHECK(*kind == RemoteFailure::Timeout);
  CHECK(took < 10);  // the timeout is 0.5 s; a hang bound, not a measurement
  CHECK(c->broken());
  CHECK_THROWS_AS(c->command({"PING"}), RedisFailure);
}

TEST_CASE("connecting where no server listens is Unreachable, a wrong password is Auth",
          "[remote-unit]") {
  TempDir tmp;
  RedisEndpoint nowhere;
  nowhere.socket_path = (tmp.path() / "no-such.sock").string();
  try {
    RedisConnection c(nowhere, "", 2, 2);
    FAIL("connected to a socket that does not exist");
  } catch (const RedisFailure& f) {
    CHECK(f.kind == RemoteFailure::Unreachable);
    CHECK_THAT(f.what(), Contains("cannot connect to unix:" + nowhere.socket_path));
  }

  RedisServer::require();
  metajit_test::RedisOptions options;
  options.password = "right-pw-51c2";
  RedisServer server(options);
  try {
    RedisConnection c(server.endpoint(), "wrong-pw-93d0", 5, 5);
    FAIL("authenticated with the wrong password");
  } catch (const RedisFailure& f) {
    CHECK(f.kind == RemoteFailure::Auth);
    CHECK_THAT(f.what(), Contains("AUTH"));
    CHECK(std::string(f.what()).find("wrong-pw-93d0") == std::string::npos);
  }
  RedisConnection right(server.endpoint(), "right-pw-51c2", 5, 5);
  CHECK(right.command({"PING"}).str == "PONG");
}

TEST_CASE("a connection used in a child after fork() is refused and the parent's keeps working",
          "[remote-unit]") {
  RedisServer::require();
  RedisServer server;
  auto c = server.connect();
  REQUIRE(c->command({"SET", "k", "parent"}).str == "OK");
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // No Catch2 here: the exit status says what happened.
    int code = 1;  // nothing thrown
    try {
      c->command({"SET", "k", "child"});
    } catch (const RedisFailure& f) {
      code = f.kind == RemoteFailure::Io && std::string(f.what()).find("fork") != std::string::npos
                 ? 0
                 : 2;
    } catch (...) {
      code = 3;
    }
    if (code == 0 && !c->broken()) code = 4;
    c.reset();  // the child's copy closes; the parent's connection must not notice
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(c->broken());
  CHECK(c->command({"PING"}).str == "PONG");
  CHECK(c->command({"GET", "k"}).str == "parent");
}

TEST_CASE("a dropped connection raises no SIGPIPE in the host program", "[remote-unit]") {
  RedisServer::require();
  struct sigaction old_action {};
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  REQUIRE(::sigaction(SIGPIPE, &dfl, &old_action) == 0);
  sigset_t old_mask, pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  REQUIRE(::pthread_sigmask(SIG_UNBLOCK, &pipe_only, &old_mask) == 0);
  auto pending_pipe = [] {
    sigset_t pending;
    sigpending(&pending);
    return sigismember(&pending, SIGPIPE) == 1;
  };
  auto blocked_pipe = [] {
    sigset_t now;
    ::pthread_sigmask(SIG_BLOCK, nullptr, &now);
    return sigismember(&now, SIGPIPE) == 1;
  };

  SECTION("SIGPIPE at its default disposition: the process survives, nothing stays pending") {
    RedisServer server;  // a Unix socket: a write after the server died raises SIGPIPE
    auto c = server.connect();
    REQUIRE(c->command({"PING"}).str == "PONG");
    server.kill_now();
    for (int i = 0; i < 3; ++i) {
      CHECK_THROWS_AS(c->command({"SET", "k", std::string(256 << 10, 'v')}), RedisFailure);
    }
    CHECK(c->broken());
    CHECK_FALSE(pending_pipe());
    CHECK_FALSE(blocked_pipe());  // the thread's mask is back as it was
  }
  SECTION("a SIGPIPE pending before the command is left pending") {
    RedisServer server;
    auto c = server.connect();
    server.kill_now();
    REQUIRE(::pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr) == 0);
    REQUIRE(::raise(SIGPIPE) == 0);
    REQUIRE(pending_pipe());
    CHECK_THROWS_AS(c->command({"SET", "k", std::string(256 << 10, 'v')}), RedisFailure);
    CHECK(pending_pipe());
    CHECK(blocked_pipe());
    timespec zero{0, 0};
    CHECK(::sigtimedwait(&pipe_only, nullptr, &zero) == SIGPIPE);
    CHECK_FALSE(pending_pipe());
  }
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ::sigaction(SIGPIPE, &old_action, nullptr);
}

TEST_CASE(
    "claiming a kernel after a miss: the lease, another's lease, an entry uploaded since the "
    "lookup",
    "[remote-unit]") {
  RedisServer::require();
  RedisServer server;
  RemoteEnv env;
  env.set("METAJIT_REMOTE", server.url());
  env.set("METAJIT_REMOTE_TRUST", "unsigned");
  env.set("METAJIT_REMOTE_NAMESPACE", "claims");
  env.set("METAJIT_REMOTE_MODE", "readwrite");
  reload_config();
  RemoteStore writer(config());
  env.set("METAJIT_REMOTE_MODE", "read");
  reload_config();
  RemoteStore reader(config());
  REQUIRE(writer.writable());
  REQUIRE(writer.readable());
  REQUIRE(reader.readable());
  REQUIRE_FALSE(reader.writable());
  using Claim = RemoteStore::Claim;
  const std::string lease = writer.lease_key_name(kKey);
  auto lease_exists = [&] { return server.command({"EXISTS", lease}).integer > 0; };
  std::string mine, token;

  CHECK(reader.claim(kKey, token) == Claim::Free);  // nobody compiles it: the reader does
  CHECK(token.empty());
  CHECK_FALSE(lease_exists());
  REQUIRE(writer.claim(kKey, mine) == Claim::Mine);
  CHECK(mine.size() >= 16);
  CHECK(server.command({"GET", lease}).str == mine);
  CHECK(writer.claim(kKey, token) == Claim::Others);
  CHECK(token.empty());
  CHECK(reader.claim(kKey, token) == Claim::Others);

  // The holder's upload: the entry first, then the lease released. A claim in between finds
  // the entry; so does one after, and it leaves no lease behind (before, a writer whose lookup
  // missed just before the upload took the released lease and compiled the kernel again).
  REQUIRE(server.command({"SET", writer.kernel_key_name(kKey), "an entry"}).str == "OK");
  CHECK(writer.claim(kKey, token) == Claim::Arrived);
  CHECK(server.command({"GET", lease}).str == mine);
  writer.release_lease(kKey, mine);
  CHECK_FALSE(lease_exists());
  CHECK(writer.claim(kKey, token) == Claim::Arrived);
  CHECK(token.empty());
  CHECK_FALSE(lease_exists());
  CHECK(reader.claim(kKey, token) == Claim::Arrived);
}
