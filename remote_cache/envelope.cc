#include "remote_cache/envelope.h"

#include <metajit/error.h>
#include <sodium.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "cache/untrusted_json.h"
#include "remote_cache/sha256.h"

namespace metajit {
namespace {

constexpr char kMagic[8] = {'M', 'J', 'K', 'E', 'N', 'V', '\0', '\1'};
constexpr int kFormat = 1;
constexpr int kZstdLevel = 3;  // a kernel.so of 100 KiB: ~1 ms, a third of its size

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}

// Reads the envelope front to back; every read is checked against what is left.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool bytes(size_t n, std::string_view& out) {
    if (n > data_.size() - pos_) return false;
    out = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool u8(uint32_t& v) {
    std::string_view b;
    if (!bytes(1, b)) return false;
    v = uint8_t(b[0]);
    return true;
  }
  bool u32(uint32_t& v) {
    std::string_view b;
    if (!bytes(4, b)) return false;
    v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | uint8_t(b[size_t(i)]);
    return true;
  }
  size_t pos() const { return pos_; }
  size_t left() const { return data_.size() - pos_; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

bool allowed_file_name(const std::string& name) {
  return name == "kernel.cc" || name == "kernel.cu" || name == "kernel.so";
}

// Text from the entry quoted in a reason, at most `max` bytes with control characters as '?':
// the reason is one line of a warning, and an unverified signer name must not be able to end
// that line or send escape sequences to the terminal.
std::string shown(std::string_view text, size_t max = 64) {
  std::string out(text.substr(0, max));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return out;
}

}  // namespace

std::string seal_envelope(const std::string& key, const nlohmann::json& info,
                          const std::vector<EnvelopeFile>& files, const SecretKey* signer) {
  ensure_sodium();
  nlohmann::json header = info.is_object() ? info : nlohmann::json::object();
  header["format"] = kFormat;
  header["key"] = key;
  header["files"] = nlohmann::json::array();
  std::string plain;
  for (const EnvelopeFile& f : files) {
    header["files"].push_back(
        {{"name", f.name}, {"size", f.bytes.size()}, {"sha256", sha256_hex(f.bytes)}});
    plain += f.bytes;
  }
  std::string payload(ZSTD_compressBound(plain.size()), '\0');
  size_t n = ZSTD_compress(payload.data(), payload.size(), plain.data(), plain.size(), kZstdLevel);
  if (ZSTD_isError(n)) throw CacheError(std::string("remote cache: zstd: ") + ZSTD_getErrorName(n));
  payload.resize(n);
  const std::string header_text = header.dump();

  std::string out(kMagic, sizeof kMagic);
  std::string name = signer ? signer->name : "";
  out.push_back(char(name.size()));
  out += name;
  put_u32(out, uint32_t(header_text.size()));
  out += header_text;
  put_u32(out, uint32_t(payload.size()));
  out += payload;
  if (signer) {
    unsigned char sig[crypto_sign_BYTES];
    crypto_sign_detached(sig, nullptr, reinterpret_cast<const unsigned char*>(out.data()),
                         out.size(), signer->bytes.data());
    out.append(reinterpret_cast<const char*>(sig), sizeof sig);
  }
  return out;
}

std::optional<OpenedEnvelope> open_envelope(std::string_view data, const std::string& expected_key,
                                            const EnvelopeTrust& trust, std::string& why,
                                            const EnvelopeLimits& limits) {
  auto reject = [&why](std::string reason) -> std::optional<OpenedEnvelope> {
    why = std::move(reason);
    return std::nullopt;
  };
  if (sodium_init() < 0) return reject("libsodium failed to initialise");
  if (data.size() > limits.max_envelope_bytes)
    return reject("oversized (" + std::to_string(data.size()) + " bytes; at most " +
                  std::to_string(limits.max_envelope_bytes) + ")");
  Reader in(data);
  std::string_view magic, signer, header_text, payload, signature;
  uint32_t signer_len = 0, header_len = 0, payload_len = 0;
  if (!in.bytes(sizeof kMagic, magic) || std::memcmp(magic.data(), kMagic, sizeof kMagic) != 0)
    return reject("not a metajit kernel envelope (bad magic or format)");
  if (!in.u8(signer_len) || !in.bytes(signer_len, signer) || !in.u32(header_len) ||
      header_len > limits.max_header_bytes || !in.bytes(header_len, header_text) ||
      !in.u32(payload_len) || !in.bytes(payload_len, payload))
    return reject("truncated or malformed envelope");
  const size_t signed_bytes = in.pos();
  const size_t signature_len = signer_len ? crypto_sign_BYTES : 0;
  if (in.left() != signature_len)
    return reject(in.left() < signature_len ? "truncated envelope (signature cut short)"
                                            : "trailing bytes after the envelope");
  OpenedEnvelope out;
  out.signer.assign(signer);
  if (signer_len == 0) {
    if (!trust.allow_unsigned)
      return reject("unsigned entry (METAJIT_REMOTE_TRUST is not unsigned)");
  } else {
    in.bytes(signature_len, signature);
    // Every trusted key of that name is tried: a key regenerated under the same name is
    // trusted beside the old one while a fleet rotates.
    bool named = false, verified = false;
    for (const PublicKey& k : trust.keys) {
      if (k.name != out.signer) continue;
      named = true;
      verified = verified || crypto_sign_verify_detached(
                                 reinterpret_cast<const unsigned char*>(signature.data()),
                                 reinterpret_cast<const unsigned char*>(data.data()), signed_bytes,
                                 k.bytes.data()) == 0;
    }
    if (!named && !trust.allow_unsigned)
      return reject("signed by '" + shown(out.signer) + "', which is not a trusted key");
    if (named && !verified) return reject("bad signature (claims key '" + out.signer + "')");
  }

  // Authentic (or explicitly not required to be): now the contents.
  out.header = parse_untrusted_json(header_text);
  const nlohmann::json& h = out.header;
  if (!h.is_object() || !h.contains("format") || h["format"] != kFormat || !h.contains("key") ||
      !h["key"].is_string() || !h.contains("files") || !h["files"].is_array())
    return reject("malformed header");
  if (h["key"].get<std::string>() != expected_key)
    return reject("entry is for key " + shown(h["key"].get<std::string>()) +
                  ", not the key asked for");
  struct Declared {
    std::string name, sha256;
    size_t size;
  };
  std::vector<Declared> declared;
  std::set<std::string> names;
  size_t total = 0;
  for (const nlohmann::json& f : h["files"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string() || !f.contains("size") ||
        !f["size"].is_number_unsigned() || !f.contains("sha256") || !f["sha256"].is_string())
      return reject("malformed file list");
    Declared d{f["name"].get<std::string>(), f["sha256"].get<std::string>(),
               f["size"].get<size_t>()};
    if (!allowed_file_name(d.name) || !names.insert(d.name).second)
      return reject("unexpected file '" + shown(d.name) + "' in the entry");
    if (d.size > limits.max_files_bytes || total + d.size > limits.max_files_bytes)
      return reject("files larger than " + std::to_string(limits.max_files_bytes) + " bytes");
    total += d.size;
    declared.push_back(std::move(d));
  }
  if (!names.count("kernel.so")) return reject("no kernel.so in the entry");
  unsigned long long content = ZSTD_getFrameContentSize(payload.data(), payload.size());
  if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN || content != total)
    return reject("payload does not declare the files' total size (" + std::to_string(total) +
                  " bytes)");
  // Streamed in steps of at most kInflateStep: memory follows what the frame really holds, so
  // a small frame that only declares a large size costs no more than its real contents.
  std::string plain;
  {
    constexpr size_t kInflateStep = size_t(1) << 20;
    std::unique_ptr<ZSTD_DStream, size_t (*)(ZSTD_DStream*)> ds(ZSTD_createDStream(),
                                                                ZSTD_freeDStream);
    if (!ds || ZSTD_isError(ZSTD_initDStream(ds.get()))) return reject("zstd failed to start");
    ZSTD_inBuffer in_buf{payload.data(), payload.size(), 0};
    size_t ret = 1;
    while (ret != 0) {
      const size_t have = plain.size();
      const size_t room = std::min(kInflateStep, total - have);
      plain.resize(have + std::max<size_t>(room, 1));  // 1: lets zstd report excess output
      ZSTD_outBuffer out_buf{plain.data() + have, plain.size() - have, 0};
      ret = ZSTD_decompressStream(ds.get(), &out_buf, &in_buf);
      plain.resize(have + out_buf.pos);
      if (ZSTD_isError(ret) || plain.size() > total) return reject("payload does not decompress");
      if (out_buf.pos == 0 && in_buf.pos == in_buf.size && ret != 0) break;
    }
    if (ret != 0 || in_buf.pos != in_buf.size || plain.size() != total)
      return reject("payload does not decompress");
  }
  size_t at = 0;
  for (const Declared& d : declared) {
    EnvelopeFile f{d.name, plain.substr(at, d.size)};
    at += d.size;
    if (sha256_hex(f.bytes) != d.sha256) return reject(d.name + " does not match its SHA-256");
    out.files.push_back(std::move(f));
  }
  return out;
}

}  // namespace metajit
