// Poisoned remote entries (issue 15, README "Sharing kernels across machines"): a writer fills a
// real redis-server, then the test overwrites the values of real remote keys (found by SCAN)
// with random bytes, truncated, bit-flipped, edited, copied, foreign-signed and unsigned
// envelopes, compression bombs, an oversized value and a kernel.so whose constructor would
// create a marker file. A reader with an empty cache that trusts only the writer's public key
// then runs the same kernels: none of those entries is loaded (the marker never appears), each
// is counted in remote_rejected, its reason is on stderr (METAJIT_LOG=info), every value is
// right (checked against the reference interpreter by the program), and a writer later
// replaces the bad entries so that readers get hits again.
#include <dlfcn.h>
#include <sodium.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "remote_cache/envelope.h"
#include "remote_cache/signing_keys.h"
#include "support/files.h"
#include "support/processes.h"
#include "support/redis_server.h"
#include "support/remote_runs.h"

namespace fs = std::filesystem;
using metajit_test::KeyPair;
using metajit_test::occurrences;
using metajit_test::ProgramRun;
using metajit_test::RedisServer;
using metajit_test::RemoteSetup;
using metajit_test::run_program;
using metajit_test::TempDir;

namespace {

// A program of a few kernels takes a second or two here; one still running after this long
// hangs (the hang bound of every run below: it is then killed and the test fails).
constexpr double kHangBound = 90;
const std::string kPrefix = "metajit:default:kernel:";
const std::string kRejectedWarning = "metajit: warning: remote cache: rejected an entry";
// Reasons for rejecting an entry.
const std::string kUntrusted = "signed by 'intruder', which is not a trusted key";
const std::string kUnsigned = "unsigned entry";

// The parts of an envelope (remote_cache/envelope.h): signer name, header, payload, signature.
struct Parts {
  std::string signer, header, payload, signature;
};

uint32_t u32_at(const std::string& v, size_t at) {
  uint32_t x = 0;
  for (int i = 3; i >= 0; --i) x = (x << 8) | uint8_t(v.at(at + size_t(i)));
  return x;
}
std::string u32_le(uint32_t x) {
  std::string out;
  for (int i = 0; i < 4; ++i) out.push_back(char((x >> (8 * i)) & 0xff));
  return out;
}

Parts split(const std::string& v) {
  REQUIRE(v.compare(0, 8, std::string("MJKENV\0\1", 8)) == 0);
  Parts p;
  size_t at = 8;
  const size_t n = uint8_t(v.at(at++));
  p.signer = v.substr(at, n);
  at += n;
  const size_t h = u32_at(v, at);
  p.header = v.substr(at + 4, h);
  at += 4 + h;
  const size_t len = u32_at(v, at);
  p.payload = v.substr(at + 4, len);
  at += 4 + len;
  p.signature = v.substr(at);
  return p;
}

// The envelope of `p` as it is (its signature, right or wrong, appended).
std::string join(const Parts& p) {
  std::string out("MJKENV\0\1", 8);
  out.push_back(char(p.signer.size()));
  out += p.signer;
  out += u32_le(uint32_t(p.header.size())) + p.header;
  out += u32_le(uint32_t(p.payload.size())) + p.payload;
  return out + p.signature;
}

// The envelope of `p` signed by `key`, by hand (what seal_envelope does, for contents that
// seal_envelope would never write).
std::string sign(Parts p, const metajit::SecretKey& key) {
  p.signer = key.name;
  p.signature.clear();
  const std::string body = join(p);
  unsigned char sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, nullptr, reinterpret_cast<const unsigned char*>(body.data()),
                       body.size(), key.bytes.data());
  return body + std::string(reinterpret_cast<const char*>(sig), sizeof sig);
}

// A zstd frame that declares `declared` bytes of content but holds one RLE block of a single
// 'A': a compression bomb announces its size in the frame header.
std::string zstd_frame_declaring(uint64_t declared) {
  std::string out("\x28\xb5\x2f\xfd", 4);
  out.push_back(char(0xe0));  // frame header: 8-byte content size, single segment
  for (int i = 0; i < 8; ++i) out.push_back(char((declared >> (8 * i)) & 0xff));
  const uint32_t block = (1u << 3) | (1u << 1) | 1u;  // last block, RLE, 1 byte
  for (int i = 0; i < 3; ++i) out.push_back(char((block >> (8 * i)) & 0xff));
  out.push_back('A');
  return out;
}

// A server holding the entries of a writer that signs with `keys` ("fleet-writer", trusted by the
// readers below); `intruder` is a second key pair nobody trusts.
struct PoisonFixture : RemoteSetup {
  KeyPair intruder;
  metajit::EnvelopeTrust trust;
  int n = 0;

  struct Entry {
    std::string redis_key, remote_key, value;
    metajit::OpenedEnvelope opened;
  };
  std::vector<Entry> entries;  // sorted by key

  explicit PoisonFixture(int kernels) : RemoteSetup({}, "fleet-writer"), n(kernels) {
    intruder = metajit_test::make_key_pair(tmp.path(), "intruder");
    trust.keys = metajit::load_public_keys(keys.pub);
    fill(n, "W", kHangBound, [this](const ProgramRun& w) {
      INFO(w.output);
      REQUIRE(w.ok);
      REQUIRE(w.counters.at("compiled") == unsigned(n));
    });
    std::vector<std::string> redis_keys = metajit_test::kernel_keys(server);
    std::sort(redis_keys.begin(), redis_keys.end());
    REQUIRE(redis_keys.size() == size_t(n));
    for (const std::string& k : redis_keys) {
      Entry e;
      e.redis_key = k;
      e.remote_key = k.substr(kPrefix.size());
      e.value = server.command({"GET", k}).str;
      std::string why;
      auto opened = metajit::open_envelope(e.value, e.remote_key, trust, why);
      INFO(why);
      REQUIRE(opened);
      e.opened = std::move(*opened);
      entries.push_back(std::move(e));
    }
  }

  metajit::SecretKey secret(const KeyPair& k) const { return metajit::load_secret_key(k.secret); }
  const std::string& file(size_t entry, const std::string& name) const {
    for (const metajit::EnvelopeFile& f : entries.at(entry).opened.files)
      if (f.name == name) return f.bytes;
    throw std::runtime_error("no " + name + " in the entry");
  }
  void overwrite(size_t entry, const std::string& value) {
    REQUIRE(server.command({"SET", entries.at(entry).redis_key, value}).str == "OK");
  }

  // The writer's kernels run by a reader with an empty cache of its own that trusts only the
  // writer's key, logging every rejection (METAJIT_LOG=info).
  ProgramRun read(const std::string& name, metajit_test::RunEnv extra = {}) {
    metajit_test::RunEnv env = reader(name);
    env.emplace_back("METAJIT_LOG", "info");
    env.insert(env.end(), extra.begin(), extra.end());
    return run_program(metajit_test::many_kernels(n), env, tmp.path() / (name + ".txt"),
                       kHangBound);
  }
};

// The reason the run's log gives for rejecting `remote_key` ("" when it does not).
std::string rejection(const std::string& output, const std::string& remote_key) {
  const std::string head = "metajit: remote: rejected " + remote_key + ": ";
  const size_t at = output.find(head);
  if (at == std::string::npos) return "";
  const size_t end = output.find('\n', at);
  return output.substr(at + head.size(), end - at - head.size());
}

// What a reader must show after `rejected` of the fixture's entries were poisoned: every value
// right, each poisoned one rejected (counted, warned about once) and compiled here, the rest
// remote hits.
void require_rejected(const ProgramRun& r, int n, int rejected) {
  INFO(r.output);
  REQUIRE_FALSE(r.hung);
  REQUIRE(r.signal == 0);
  REQUIRE(r.ok);
  CHECK(r.counters.at("remote_rejected") == unsigned(rejected));
  CHECK(r.counters.at("compiled") == unsigned(rejected));
  CHECK(r.counters.at("remote_hits") == unsigned(n - rejected));
  CHECK(r.counters.at("remote_errors") == 0);
  CHECK(occurrences(r.output, kRejectedWarning) == 1);
}

// What a reader's run `r` must show after `rejected` of the fixture's entries were poisoned
// (require_rejected), and the reason its log gives for rejecting entry i contains reasons[i].
void require_reasons(const PoisonFixture& f, const ProgramRun& r, int rejected,
                     const std::map<size_t, std::string>& reasons) {
  require_rejected(r, f.n, rejected);
  INFO(r.output);
  for (const auto& [i, reason] : reasons) {
    INFO("entry " << i);
    CHECK_THAT(rejection(r.output, f.entries.at(i).remote_key), Catch::Contains(reason));
  }
}

// Every kernel.so under `dir`.
std::vector<std::string> shared_objects_under(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() == "kernel.so")
      out.push_back(metajit_test::read_file(e.path()));
  return out;
}

}  // namespace

TEST_CASE("poisoned entries: random bytes, truncated, a flipped payload bit, an edited header",
          "[remote]") {
  RedisServer::require();
  PoisonFixture f(6);
  std::mt19937 rng(15);
  std::string random(4096, '\0');
  for (char& c : random) c = char(rng() & 0xff);
  f.overwrite(0, random);
  f.overwrite(1, f.entries[1].value.substr(0, f.entries[1].value.size() / 2));
  f.overwrite(2, f.entries[2].value.substr(0, f.entries[2].value.size() - 10));
  {
    Parts p = split(f.entries[3].value);
    p.payload[p.payload.size() / 2] = char(p.payload[p.payload.size() / 2] ^ 0x10);
    f.overwrite(3, join(p));  // one bit of the payload, the writer's signature kept
  }
  {
    Parts p = split(f.entries[4].value);
    nlohmann::json h = nlohmann::json::parse(p.header);
    for (auto& file : h["files"])
      if (file["name"] == "kernel.so") file["size"] = file["size"].get<size_t>() + 1;
    p.header = h.dump();
    f.overwrite(4, join(p));  // a file's size edited, the signature kept
  }
  {
    Parts p = split(f.entries[5].value);
    nlohmann::json h = nlohmann::json::parse(p.header);
    h["key"] = f.entries[0].remote_key;
    p.header = h.dump();
    f.overwrite(5, join(p));  // the key inside the header edited, the signature kept
  }
  const std::string bad_signature = "bad signature (claims key 'fleet-writer')";
  require_reasons(f, f.read("R"), 6,
                  {{0, "not a metajit kernel envelope"},
                   {1, "truncated or malformed envelope"},
                   {2, "truncated envelope (signature cut short)"},
                   {3, bad_signature},
                   {4, bad_signature},
                   {5, bad_signature}});
}

TEST_CASE("poisoned entries: another key's valid entry, an untrusted signer, unsigned",
          "[remote]") {
  RedisServer::require();
  PoisonFixture f(4);
  f.overwrite(0, f.entries[1].value);  // signed by the trusted writer, for another kernel
  const nlohmann::json& info = f.entries[2].opened.header;
  const metajit::SecretKey intruder = f.secret(f.intruder);
  f.overwrite(2, metajit::seal_envelope(f.entries[2].remote_key, info, f.entries[2].opened.files,
                                        &intruder));
  f.overwrite(3, metajit::seal_envelope(f.entries[3].remote_key, f.entries[3].opened.header,
                                        f.entries[3].opened.files, nullptr));
  ProgramRun r = f.read("R");
  require_reasons(
      f, r, 3,
      {{0, "entry is for key " + f.entries[1].remote_key.substr(0, 64) + ", not the key asked for"},
       {2, kUntrusted},
       {3, kUnsigned}});
  INFO(r.output);
  CHECK(rejection(r.output, f.entries[1].remote_key).empty());  // the original: a hit
}

TEST_CASE("compression bombs are refused before inflating, even when the trusted key signed them",
          "[remote]") {
  RedisServer::require();
  PoisonFixture f(4);
  const metajit::SecretKey writer = f.secret(f.keys);
  const metajit::SecretKey intruder = f.secret(f.intruder);
  // The entry's real header (its files' sizes and digests) over a frame that announces 1 TiB.
  auto bomb = [&](size_t entry) {
    Parts p = split(f.entries[entry].value);
    p.payload = zstd_frame_declaring(uint64_t(1) << 40);
    return p;
  };
  f.overwrite(0, sign(bomb(0), intruder));
  {
    Parts p = bomb(1);
    p.signer.clear();
    p.signature.clear();
    f.overwrite(1, join(p));  // unsigned
  }
  f.overwrite(2, sign(bomb(2), writer));
  {
    // The trusted signer's header itself claims a 1 TiB kernel.so, and the frame agrees.
    Parts p = bomb(3);
    nlohmann::json h = nlohmann::json::parse(p.header);
    for (auto& file : h["files"])
      if (file["name"] == "kernel.so") file["size"] = uint64_t(1) << 40;
    p.header = h.dump();
    f.overwrite(3, sign(p, writer));
  }
  require_reasons(f, f.read("R"), 4,
                  {{0, kUntrusted},
                   {1, kUnsigned},
                   {2, "payload does not declare the files' total size"},
                   {3, "files larger than 268435456 bytes"}});
}

TEST_CASE("an oversized entry is refused after reading no more than 64 MiB and a byte of it",
          "[remote]") {
  RedisServer::require();
  PoisonFixture f(1);
  // A valid entry padded to 65 MiB: its size is all that is wrong with it.
  const size_t size = size_t(65) << 20;
  std::string value = f.entries[0].value;
  value.resize(size, '\0');
  f.overwrite(0, value);
  auto sent = [&f] {
    const std::string info = f.server.command({"INFO", "stats"}).str;
    const std::string field = "total_net_output_bytes:";
    return std::stoull(info.substr(info.find(field) + field.size()));
  };
  const unsigned long long before = sent();
  // A 64 MiB reply is one operation: 30 s (not 2) so that a slow machine does not time it out.
  ProgramRun r = f.read("R", {{"METAJIT_REMOTE_TIMEOUT", "30"}});
  const unsigned long long after = sent();
  require_reasons(f, r, 1, {{0, "oversized (67108865 bytes; at most 67108864)"}});
  // GETRANGE bounded what the server sent: 64 MiB and a byte, not the 65 MiB it holds (the
  // rest is the other replies and this INFO).
  CHECK(after - before >= (size_t(64) << 20) + 1);
  CHECK(after - before < size);
}

TEST_CASE("a kernel.so whose constructor creates a file is never loaded from the remote",
          "[remote]") {
  RedisServer::require();
  PoisonFixture f(3);
  const fs::path marker = f.tmp.path() / "constructor-ran";
  const fs::path src = f.tmp.path() / "evil.cc", so = f.tmp.path() / "evil.so";
  metajit_test::write_file(src,
                           "#include <cstdio>\n"
                           "__attribute__((constructor)) static void poisoned() {\n"
                           "  if (std::FILE* f = std::fopen(\"" +
                               marker.string() +
                               "\", \"w\")) std::fclose(f);\n"
                               "}\n"
                               "extern \"C\" int metajit_poisoned_kernel() { return 0; }\n");
  const metajit_test::ProcessResult cc =
      metajit_test::run_command("g++ -shared -fPIC -o " + metajit_test::shell_quote(so.string()) +
                                " " + metajit_test::shell_quote(src.string()));
  INFO(cc.output);
  REQUIRE(cc.exit_code == 0);
  // The marker does show a load: dlopen in a child process creates it.
  pid_t child = ::fork();
  if (child == 0) _exit(::dlopen(so.c_str(), RTLD_NOW) ? 0 : 1);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  REQUIRE(fs::exists(marker));
  fs::remove(marker);

  const std::string evil = metajit_test::read_file(so);
  const metajit::SecretKey intruder = f.secret(f.intruder);
  const metajit::SecretKey writer = f.secret(f.keys);
  auto files = [&evil](const std::string& source) {
    return std::vector<metajit::EnvelopeFile>{{"kernel.cc", source}, {"kernel.so", evil}};
  };
  // With the kernel's real source: signed by an untrusted key, and unsigned.
  f.overwrite(0, metajit::seal_envelope(f.entries[0].remote_key, f.entries[0].opened.header,
                                        files(f.file(0, "kernel.cc")), &intruder));
  f.overwrite(1, metajit::seal_envelope(f.entries[1].remote_key, f.entries[1].opened.header,
                                        files(f.file(1, "kernel.cc")), nullptr));
  // Signed by the trusted key, with a source that is not what this machine generates for the
  // kernel (the signer vouches for its binary, not for which kernel it is).
  f.overwrite(
      2, metajit::seal_envelope(f.entries[2].remote_key, f.entries[2].opened.header,
                                files("// some other kernel\n" + f.file(2, "kernel.cc")), &writer));

  require_reasons(
      f, f.read("R"), 3,
      {{0, kUntrusted}, {1, kUnsigned}, {2, "its source is not what this machine generates"}});
  CHECK_FALSE(fs::exists(marker));
  // Nor was it installed in the reader's cache, to be loaded by a later run.
  const std::vector<std::string> installed = shared_objects_under(f.tmp.path() / "R");
  CHECK(installed.size() == 3);
  for (const std::string& bytes : installed) CHECK(bytes != evil);
  ProgramRun again = f.read("R");
  REQUIRE(again.ok);
  CHECK(again.counters.at("disk_hits") == 3);
  CHECK_FALSE(fs::exists(marker));
}

TEST_CASE("a writer replaces rejected entries, and readers then get remote hits", "[remote]") {
  RedisServer::require();
  PoisonFixture f(3);
  f.overwrite(0, "not an envelope");
  const metajit::SecretKey intruder = f.secret(f.intruder);
  f.overwrite(1, metajit::seal_envelope(f.entries[1].remote_key, f.entries[1].opened.header,
                                        f.entries[1].opened.files, &intruder));
  f.overwrite(2, f.entries[2].value.substr(0, 100));

  // A readwrite machine with an empty cache: rejects, compiles, uploads.
  metajit_test::RunEnv env = f.writer("W2");
  env.emplace_back("METAJIT_LOG", "info");
  ProgramRun w = f.run(3, env, "w2.txt", kHangBound);
  require_rejected(w, 3, 3);
  CHECK(metajit_test::cache_stats(f.tmp.path() / "W2")["remote_uploads"] == 3);
  for (const auto& e : f.entries) {
    std::string why;
    INFO(e.remote_key);
    CHECK(metajit::open_envelope(f.server.command({"GET", e.redis_key}).str, e.remote_key, f.trust,
                                 why)
              .has_value());
    CHECK(why.empty());
  }
  CHECK(metajit_test::lease_keys(f.server).empty());

  ProgramRun r = f.read("R");
  INFO(r.output);
  REQUIRE(r.ok);
  CHECK(r.counters.at("remote_hits") == 3);
  CHECK(r.counters.at("remote_rejected") == 0);
  CHECK(r.counters.at("compiled") == 0);
  CHECK(occurrences(r.output, kRejectedWarning) == 0);
}
