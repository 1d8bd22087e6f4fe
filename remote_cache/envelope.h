// The value the remote cache stores for one kernel: a versioned, signed envelope
// (README "Sharing kernels across machines"). Byte layout, integers little-endian:
//
//   "MJKENV\0\1"                          magic and format (8 bytes)
//   u8  n, then n bytes                   the signer's key name (n = 0: unsigned)
//   u32 h, then h bytes                   header: JSON {format, key, files: [{name, size,
//                                         sha256}], and what the writer says about itself}
//   u32 p, then p bytes                   payload: one zstd frame, the files concatenated
//   64 bytes                              Ed25519 signature of everything before it (signed only)
//
// Reading checks, in this order, before anything is decompressed or parsed as JSON: the total
// size, the magic, every length against the bytes that are there (no trailing bytes), and the
// signature against a trusted key of that name. Only then is the header parsed (bounded), its
// key compared with the key asked for, the frame's declared size compared with the files'
// total (a compression bomb is refused before a byte is inflated), the frame decompressed into
// exactly that many bytes, and every file checked against its SHA-256.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "remote_cache/signing_keys.h"

namespace metajit {

struct EnvelopeFile {
  std::string name;  // kernel.cc | kernel.cu | kernel.so
  std::string bytes;
};

struct EnvelopeLimits {
  size_t max_envelope_bytes = size_t(64) << 20;
  size_t max_files_bytes = size_t(256) << 20;  // decompressed
  size_t max_header_bytes = size_t(64) << 10;
};

// The envelope of `files` for `key`. `info` (an object) is merged into the header (backend,
// toolchain, producer, ...). Unsigned when `signer` is null.
std::string seal_envelope(const std::string& key, const nlohmann::json& info,
                          const std::vector<EnvelopeFile>& files, const SecretKey* signer);

struct EnvelopeTrust {
  std::vector<PublicKey> keys;  // any of them may have signed
  bool allow_unsigned = false;  // METAJIT_REMOTE_TRUST=unsigned
};

struct OpenedEnvelope {
  nlohmann::json header;
  std::string signer;  // empty: unsigned
  std::vector<EnvelopeFile> files;
};

// The verified contents of `data` if it is a sound envelope for `expected_key` that `trust`
// accepts; nullopt with `why` (one line) otherwise. Never throws for bad input.
std::optional<OpenedEnvelope> open_envelope(std::string_view data, const std::string& expected_key,
                                            const EnvelopeTrust& trust, std::string& why,
                                            const EnvelopeLimits& limits = {});

}  // namespace metajit
