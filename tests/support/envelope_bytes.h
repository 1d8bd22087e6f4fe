// Remote-cache envelopes (remote_cache/envelope.h) built byte by byte, for the tests that must
// hand the reader what seal_envelope never writes (tests/test_remote_envelope.cc), and the
// fixed keys and seeds of the envelope fuzz target (tests/fuzz/fuzz_envelope.cc,
// tests/fuzz/corpus/envelope/).
//
// The fuzz keys' secret bytes are compiled in so that seeds signed with them verify and the
// fuzzer starts from envelopes that reach every check. They are test keys, trusted nowhere else.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "remote_cache/envelope.h"
#include "remote_cache/signing_keys.h"

namespace metajit_test {

inline std::string u32_le(uint32_t v) {
  std::string out;
  for (int i = 0; i < 4; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
  return out;
}

// The envelope layout of remote_cache/envelope.h with whatever parts the caller gives:
// magic, signer name, header, payload, then `signature` (64 bytes for a signed one; any bytes).
inline std::string raw_envelope(const std::string& signer, const std::string& header,
                                const std::string& payload, const std::string& signature = "") {
  std::string out("MJKENV\0\1", 8);
  out.push_back(char(signer.size()));
  out += signer;
  out += u32_le(uint32_t(header.size()));
  out += header;
  out += u32_le(uint32_t(payload.size()));
  out += payload;
  out += signature;
  return out;
}

// A zstd frame that declares `declared` bytes of content but holds one RLE block of `actual`
// copies of 'A' (actual < 2^21): how a compression bomb announces itself.
inline std::string zstd_frame_declaring(uint64_t declared, uint32_t actual) {
  std::string out("\x28\xb5\x2f\xfd", 4);  // magic 0xFD2FB528, little-endian
  out.push_back(char(0xe0));  // frame header: 8-byte content size, single segment, no checksum
  for (int i = 0; i < 8; ++i) out.push_back(char((declared >> (8 * i)) & 0xff));
  const uint32_t block = (actual << 3) | (1u << 1) | 1u;  // last block, RLE, `actual` bytes
  for (int i = 0; i < 3; ++i) out.push_back(char((block >> (8 * i)) & 0xff));
  out.push_back('A');
  return out;
}

// A zstd frame that does not declare its content size (as streaming compression writes one),
// holding `bytes` in one raw block (fewer than 2^21 of them).
inline std::string zstd_frame_without_size(const std::string& bytes) {
  std::string out("\x28\xb5\x2f\xfd", 4);
  out.push_back(char(0x00));  // frame header: no content size, not single segment
  out.push_back(char(0x58));  // window descriptor: 2^(10 + 11) bytes
  const uint32_t block = (uint32_t(bytes.size()) << 3) | 1u;  // last block, raw
  for (int i = 0; i < 3; ++i) out.push_back(char((block >> (8 * i)) & 0xff));
  out += bytes;
  return out;
}

// The fuzz target's keys: libsodium secret keys (32-byte seed, then the public key) made by
// crypto_sign_seed_keypair from the seeds 0x40, 0x41, ... 0x5f and 0x80, 0x81, ... 0x9f.
inline constexpr std::array<uint8_t, 64> kFuzzWriterSecret = {
    0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d, 0x4e, 0x4f,
    0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f,
    0x25, 0x43, 0xb9, 0x2f, 0xf1, 0x09, 0x55, 0x11, 0x47, 0x6a, 0xdc, 0x83, 0x69, 0xdb, 0x6d, 0xdc,
    0x93, 0x36, 0x65, 0xa1, 0x19, 0x78, 0xdd, 0xa1, 0x40, 0x4e, 0xe1, 0x06, 0x6c, 0xa9, 0x55, 0x9d};
inline constexpr std::array<uint8_t, 64> kFuzzRotatedSecret = {
    0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8a, 0x8b, 0x8c, 0x8d, 0x8e, 0x8f,
    0x90, 0x91, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0x9b, 0x9c, 0x9d, 0x9e, 0x9f,
    0xcd, 0x14, 0xb3, 0x7f, 0x95, 0x6e, 0x95, 0x31, 0x94, 0xff, 0x7f, 0xb7, 0x3b, 0x3d, 0x81, 0xdc,
    0xc5, 0x61, 0xd6, 0x1a, 0x75, 0x38, 0x09, 0x4b, 0x7c, 0x3e, 0x1a, 0x64, 0x3e, 0xe5, 0xf3, 0xaa};

// The kernel key every fuzz seed is for.
inline const std::string kFuzzEnvelopeKey = "fuzz0123456789abcdef0123456789ab";

inline metajit::SecretKey fuzz_secret_key(const std::string& name,
                                          const std::array<uint8_t, 64>& bytes) {
  metajit::SecretKey key;
  key.name = name;
  key.bytes = bytes;
  return key;
}
inline metajit::SecretKey fuzz_writer_key() {
  return fuzz_secret_key("fuzz-writer", kFuzzWriterSecret);
}
inline metajit::SecretKey fuzz_rotated_key() {
  return fuzz_secret_key("fuzz-rotated", kFuzzRotatedSecret);
}

// What the fuzz target trusts: the writer's and the rotated key's public halves.
inline metajit::EnvelopeTrust fuzz_envelope_trust(bool allow_unsigned) {
  metajit::EnvelopeTrust trust;
  trust.keys = {metajit::public_key_of(fuzz_writer_key()),
                metajit::public_key_of(fuzz_rotated_key())};
  trust.allow_unsigned = allow_unsigned;
  return trust;
}

// Small limits, so that no input can make the reader allocate much.
inline metajit::EnvelopeLimits fuzz_envelope_limits() {
  metajit::EnvelopeLimits limits;
  limits.max_envelope_bytes = 64 << 10;
  limits.max_files_bytes = 1 << 20;
  limits.max_header_bytes = 4 << 10;
  return limits;
}

// The seed corpus of the envelope fuzz target, by file name. The prefix says what the reader
// must make of each with fuzz_envelope_trust(): signed_ opens either way, unsigned_ and
// untrusted_ only with allow_unsigned, truncated_, bomb_ and rejected_ never.
inline std::vector<std::pair<std::string, std::string>> fuzz_envelope_seeds() {
  using metajit::EnvelopeFile;
  const nlohmann::json info = {{"backend", "cpu"}, {"producer", "fuzz seed"}};
  const std::string so = std::string("\177ELF\2\1\1\0", 8) + std::string(40, '\0') + "kernel";
  const std::string cc = "extern \"C\" void k(float* o) { o[0] = 1; }\n";
  const metajit::SecretKey writer = fuzz_writer_key(), rotated = fuzz_rotated_key();
  const metajit::SecretKey stranger = fuzz_secret_key("fuzz-stranger", kFuzzRotatedSecret);
  std::vector<std::pair<std::string, std::string>> seeds;
  const std::string small = metajit::seal_envelope(
      kFuzzEnvelopeKey, info, {EnvelopeFile{"kernel.cc", cc}, EnvelopeFile{"kernel.so", so}},
      &writer);
  seeds.emplace_back("signed_small", small);
  seeds.emplace_back("signed_rotated_three_files",
                     metajit::seal_envelope(kFuzzEnvelopeKey, info,
                                            {EnvelopeFile{"kernel.cc", cc},
                                             EnvelopeFile{"kernel.cu", "__global__ void k() {}\n"},
                                             EnvelopeFile{"kernel.so", so}},
                                            &rotated));
  seeds.emplace_back(
      "signed_empty_so",
      metajit::seal_envelope(kFuzzEnvelopeKey, info, {EnvelopeFile{"kernel.so", ""}}, &writer));
  seeds.emplace_back("unsigned_small",
                     metajit::seal_envelope(
                         kFuzzEnvelopeKey, info,
                         {EnvelopeFile{"kernel.cc", cc}, EnvelopeFile{"kernel.so", so}}, nullptr));
  seeds.emplace_back(
      "untrusted_small",
      metajit::seal_envelope(kFuzzEnvelopeKey, info, {EnvelopeFile{"kernel.so", so}}, &stranger));
  // Text the reader quotes in its reason, with a line end and an escape sequence in it.
  const metajit::SecretKey odd_name = fuzz_secret_key("fuzz\nstranger\x1b[2J", kFuzzRotatedSecret);
  seeds.emplace_back(
      "untrusted_name_with_control_characters",
      metajit::seal_envelope(kFuzzEnvelopeKey, info, {EnvelopeFile{"kernel.so", so}}, &odd_name));
  seeds.emplace_back(
      "rejected_other_key_with_control_characters",
      metajit::seal_envelope("other\nkey\x1b[2J", info, {EnvelopeFile{"kernel.so", so}}, nullptr));
  // Cut in the magic, after the signer's length, in the header, in the payload, in the signature.
  const size_t header_at = 8 + 1 + writer.name.size() + 4;
  for (size_t cut : {size_t(5), size_t(9), header_at + 10, small.size() - 80, small.size() - 1})
    seeds.emplace_back("truncated_at_" + std::to_string(cut), small.substr(0, cut));
  // Compression bombs, unsigned (an attacker need not sign) and read with allow_unsigned.
  nlohmann::json bomb_files = nlohmann::json::array();
  bomb_files.push_back({{"name", "kernel.so"}, {"size", 10}, {"sha256", "00"}});
  const std::string bomb_header =
      nlohmann::json{{"format", 1}, {"key", kFuzzEnvelopeKey}, {"files", bomb_files}}.dump();
  seeds.emplace_back("bomb_declares_2_pow_40",
                     raw_envelope("", bomb_header, zstd_frame_declaring(uint64_t(1) << 40, 10)));
  seeds.emplace_back("bomb_size_not_declared",
                     raw_envelope("", bomb_header, zstd_frame_without_size(std::string(10, 'A'))));
  return seeds;
}

}  // namespace metajit_test
