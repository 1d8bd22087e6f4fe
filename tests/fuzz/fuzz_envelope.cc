// libFuzzer target: the remote cache's envelope reader (remote_cache/envelope.cc), which reads
// values anyone who can write to the Redis server may have put there. Each input is opened as
// an envelope for a fixed kernel key, trusting two fixed keys, with and without allow_unsigned,
// under small limits. Whatever the input, open_envelope returns (never throws, crashes or
// allocates more than the limits allow), and what it accepts is sound: signed by a trusted key
// unless unsigned entries are allowed, the key asked for, only known file names with kernel.so
// among them, each file matching its declared size and SHA-256, and sealing the files again
// gives an envelope that opens to the same files.
//
// The seeds (corpus/envelope/) are envelopes sealed with the fixed keys (support/
// envelope_bytes.h): signed_*, unsigned_*, untrusted_*, truncated_* and bomb_*. To write them
// again after a format change: METAJIT_FUZZ_ENVELOPE_SEEDS=tests/fuzz/corpus/envelope
// replay_envelope tests/fuzz/corpus/envelope (test_remote_envelope checks what each opens to).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <optional>
#include <set>
#include <string>

#include "remote_cache/envelope.h"
#include "remote_cache/sha256.h"
#include "support/envelope_bytes.h"

using namespace metajit;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_envelope: %s\n", what.c_str());
  std::abort();
}

bool same_files(const OpenedEnvelope& a, const OpenedEnvelope& b) {
  if (a.files.size() != b.files.size()) return false;
  for (size_t i = 0; i < a.files.size(); ++i)
    if (a.files[i].name != b.files[i].name || a.files[i].bytes != b.files[i].bytes) return false;
  return true;
}

std::optional<OpenedEnvelope> open_checked(
    std::string_view data, bool allow_unsigned,
    const EnvelopeLimits& limits = metajit_test::fuzz_envelope_limits()) {
  static const EnvelopeTrust signed_only = metajit_test::fuzz_envelope_trust(false);
  static const EnvelopeTrust any = metajit_test::fuzz_envelope_trust(true);
  std::string why;
  std::optional<OpenedEnvelope> opened;
  try {
    opened = open_envelope(data, metajit_test::kFuzzEnvelopeKey, allow_unsigned ? any : signed_only,
                           why, limits);
  } catch (const std::exception& e) {
    fail(std::string("open_envelope threw: ") + e.what());
  }
  if (!opened) {
    if (why.empty()) fail("rejected without a reason");
    for (char c : why)
      if (static_cast<unsigned char>(c) < 0x20) fail("a reason of more than one line: " + why);
    return opened;
  }
  const OpenedEnvelope& o = *opened;
  if (!allow_unsigned && o.signer != "fuzz-writer" && o.signer != "fuzz-rotated")
    fail("accepted an entry signed by '" + o.signer + "' without allow_unsigned");
  if (o.header.value("key", "") != metajit_test::kFuzzEnvelopeKey) fail("accepted another key");
  const nlohmann::json& declared = o.header["files"];
  if (declared.size() != o.files.size()) fail("file list and files differ");
  std::set<std::string> names;
  size_t total = 0;
  for (size_t i = 0; i < o.files.size(); ++i) {
    const EnvelopeFile& f = o.files[i];
    if (f.name != "kernel.cc" && f.name != "kernel.cu" && f.name != "kernel.so")
      fail("accepted a file named " + f.name);
    if (!names.insert(f.name).second) fail("accepted " + f.name + " twice");
    if (declared[i]["name"] != f.name || declared[i]["size"] != f.bytes.size() ||
        declared[i]["sha256"] != sha256_hex(f.bytes))
      fail("accepted " + f.name + ", which does not match its entry");
    total += f.bytes.size();
  }
  if (!names.count("kernel.so")) fail("accepted an entry without kernel.so");
  if (total > limits.max_files_bytes) fail("accepted files over the limit");
  return opened;
}

void write_seeds(const char* dir) {
  for (const auto& [name, bytes] : metajit_test::fuzz_envelope_seeds()) {
    const std::string path = std::string(dir) + "/" + name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out) fail("cannot write " + path);
  }
  std::fprintf(stderr, "fuzz_envelope: seeds written to %s\n", dir);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("METAJIT_FUZZ_ENVELOPE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::optional<OpenedEnvelope> strict = open_checked(input, false);
  const std::optional<OpenedEnvelope> lenient = open_checked(input, true);
  if (strict && !lenient) fail("allowing unsigned entries rejected a signed one");
  if (strict && !same_files(*strict, *lenient)) fail("the two trusts opened different files");
  if (!lenient) return 0;
  // What was accepted seals again (unsigned) into an envelope that opens to the same files;
  // under the default limits, as the header written again and zstd's own frame may be larger.
  const std::string resealed =
      seal_envelope(metajit_test::kFuzzEnvelopeKey, lenient->header, lenient->files, nullptr);
  const std::optional<OpenedEnvelope> again = open_checked(resealed, true, EnvelopeLimits{});
  if (!again) fail("an accepted entry, sealed again, does not open");
  if (!same_files(*again, *lenient)) fail("sealed again, it opens to other files");
  return 0;
}
