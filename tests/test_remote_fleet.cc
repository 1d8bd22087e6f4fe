// The remote kernel cache across processes and "machines" (two cache directories stand in for
// two machines) against a real redis-server the tests start and stop (README "Sharing kernels
// across machines").
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/files.h"
#include "support/processes.h"
#include "support/redis_server.h"
#include "support/text.h"

namespace fs = std::filesystem;
using metajit_test::RedisOptions;
using metajit_test::RedisServer;
using metajit_test::shell_quote;

namespace {

struct FleetRun {
  int exit_code = -1;
  std::string output;
  bool ok = false;
  unsigned long long compiled = 0, disk_hits = 0, remote_hits = 0, remote_misses = 0,
                     remote_rejected = 0, remote_errors = 0, remote_timeouts = 0,
                     remote_uploads = 0;
};

FleetRun parse_run(const metajit_test::ProcessResult& p) {
  FleetRun r;
  r.exit_code = p.exit_code;
  r.output = p.output;
  std::smatch m;
  if (std::regex_search(p.output, m,
                        std::regex("(ok|WRONG) compiled=(\\d+) disk_hits=(\\d+) launched=\\d+ "
                                   "remote_hits=(\\d+) remote_misses=(\\d+) remote_rejected=(\\d+) "
                                   "remote_errors=(\\d+) remote_timeouts=(\\d+) "
                                   "remote_uploads=(\\d+)"))) {
    r.ok = m[1] == "ok" && p.exit_code == 0;
    r.compiled = std::stoull(m[2]);
    r.disk_hits = std::stoull(m[3]);
    r.remote_hits = std::stoull(m[4]);
    r.remote_misses = std::stoull(m[5]);
    r.remote_rejected = std::stoull(m[6]);
    r.remote_errors = std::stoull(m[7]);
    r.remote_timeouts = std::stoull(m[8]);
    r.remote_uploads = std::stoull(m[9]);
  }
  return r;
}

std::string q(const fs::path& p) {
  return shell_quote(p.string());
}
std::string cli() {
  return q(metajit_test::cli_path());
}
std::string program(const std::string& name = "many_kernels_program") {
  return shell_quote(metajit_test::test_program(name));
}

// A `metajit` run with its standard output and standard error apart (JSON goes to stdout,
// warnings to stderr).
struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

// A redis-server, a signing key ("fleet-1") and the environment of each "machine": machine M
// is the cache directory <tmp>/M.
class Fleet {
 public:
  explicit Fleet(RedisOptions options = {}) : server_(std::move(options)) {
    key_ = tmp_.path() / "writer.key";
    metajit_test::ProcessResult r =
        metajit_test::run_command(cli() + " remote keygen fleet-1 -o " + q(key_));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  }

  const RedisServer& server() const { return server_; }
  const fs::path& dir() const { return tmp_.path(); }
  const fs::path& key() const { return key_; }
  fs::path cache(const std::string& machine) const { return tmp_.path() / machine; }

  // VAR=value words for a process on `machine`: this server, the public key trusted, `mode`
  // (readwrite adds the signing key), then `extra` (later assignments win).
  std::string env(const std::string& machine, const std::string& mode = "read",
                  const std::string& extra = "") const {
    std::string e = "METAJIT_REMOTE=" + shell_quote(server_.url()) +
                    " METAJIT_REMOTE_TRUSTED_KEYS=" + q(key_.string() + ".pub") +
                    " METAJIT_REMOTE_MODE=" + mode + " METAJIT_CACHE_DIR=" + q(cache(machine));
    if (mode == "readwrite") e += " METAJIT_REMOTE_SIGNING_KEY=" + q(key_);
    return extra.empty() ? e : e + " " + extra;
  }

  // many_kernels_program with `n` kernels under `env`.
  FleetRun run(const std::string& env, int n) const {
    return parse_run(metajit_test::run_command(env + " " + program() + " " + std::to_string(n)));
  }

  CliRun metajit(const std::string& env, const std::string& args) const {
    const fs::path err = tmp_.path() / "metajit.stderr";
    metajit_test::ProcessResult p =
        metajit_test::run_command("{ " + env + " " + cli() + " " + args + " 2>" + q(err) + "; }");
    return {p.exit_code, p.output, metajit_test::read_file(err)};
  }

  // The kernels stored in the server under `name_space`.
  size_t entries(const std::string& name_space = "default") const {
    return server_.command({"KEYS", "metajit:" + name_space + ":kernel:*"}).elements.size();
  }

  // `metajit cache stats --json` of `machine`'s cache.
  nlohmann::json stats(const std::string& machine) const {
    CliRun r = metajit("", "--cache-dir " + q(cache(machine)) + " cache stats --json");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return nlohmann::json::parse(r.out);
  }

  // The keys of `machine`'s cache (`metajit cache list --json`).
  std::set<std::string> keys(const std::string& machine) const {
    CliRun r = metajit("", "--cache-dir " + q(cache(machine)) + " cache list --json");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    std::set<std::string> out;
    for (const nlohmann::json& e : nlohmann::json::parse(r.out))
      out.insert(e["key"].get<std::string>());
    return out;
  }

 private:
  RedisServer server_;
  metajit_test::TempDir tmp_;
  fs::path key_;
};

// A server whose maxmemory-policy is `policy`.
RedisOptions with_policy(const std::string& policy) {
  RedisOptions o;
  o.policy = policy;
  return o;
}

// Without any remote setting from the environment of whoever runs the tests.
const std::string kNoRemote = "env -u METAJIT_REMOTE -u METAJIT_REMOTE_MODE";

// The decoded bytes of standard base64 `text`; nullopt when it is not base64.
std::optional<std::string> base64_decode(const std::string& text) {
  static const std::string alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  unsigned bits = 0, value = 0;
  size_t padding = 0;
  for (char c : text) {
    if (c == '=') {
      ++padding;
      continue;
    }
    if (padding) return std::nullopt;  // data after padding
    size_t i = alphabet.find(c);
    if (i == std::string::npos) return std::nullopt;
    value = (value << 6) | unsigned(i);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((value >> bits) & 0xff);
    }
  }
  if (padding > 2) return std::nullopt;
  return out;
}

unsigned file_mode(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

// Last line of a one-key file: "NAME:base64".
std::pair<std::string, std::string> key_line(const fs::path& file) {
  std::string text = metajit_test::read_file(file);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  const size_t colon = text.find(':');
  if (colon == std::string::npos) return {"", ""};
  return {text.substr(0, colon), text.substr(colon + 1)};
}

// One phase line of remote_fork_program.
struct ForkPhase {
  bool found = false, ok = false;
  unsigned long long compiled = 0, disk_hits = 0, remote_hits = 0, remote_misses = 0,
                     remote_errors = 0;
};

ForkPhase fork_phase(const std::string& output, const std::string& phase) {
  ForkPhase f;
  std::smatch m;
  if (std::regex_search(
          output, m,
          std::regex("(?:^|\\n)" + phase +
                     " (ok|WRONG) compiled=(\\d+) disk_hits=(\\d+) "
                     "remote_hits=(\\d+) remote_misses=(\\d+) remote_errors=(\\d+)"))) {
    f.found = true;
    f.ok = m[1] == "ok";
    f.compiled = std::stoull(m[2]);
    f.disk_hits = std::stoull(m[3]);
    f.remote_hits = std::stoull(m[4]);
    f.remote_misses = std::stoull(m[5]);
    f.remote_errors = std::stoull(m[6]);
  }
  return f;
}

// remote_fork_program with 4 kernels under `env` (a process that forks, its parent running
// kernels before and after the fork and its child in between); for each of its phases, its
// line must be there and every value right, then `check` asserts on it.
void run_fork_program(const std::string& env, const std::string& who,
                      const std::function<void(const ForkPhase&)>& check) {
  metajit_test::ProcessResult p =
      metajit_test::run_command(env + " timeout -k 5 300 " + program("remote_fork_program") + " 4");
  INFO(who << ": " << p.output);
  CHECK(p.exit_code == 0);
  for (const char* phase : {"parent-before", "child", "parent-after"}) {
    ForkPhase f = fork_phase(p.output, phase);
    INFO(phase);
    REQUIRE(f.found);
    CHECK(f.ok);
    check(f);
  }
}

// Processes of many_kernels_program (20 kernels) started at once, `per_machine` on each machine
// of `envs` (machine, its environment), held at a barrier until all are started: the machine
// and run of each.
std::vector<std::pair<std::string, FleetRun>> run_at_once(
    const Fleet& fleet, const std::vector<std::pair<std::string, std::string>>& envs,
    int per_machine) {
  const fs::path out = fleet.dir() / "out";
  fs::create_directories(out);
  const fs::path go = out / "go";
  std::string script;
  std::vector<std::pair<std::string, fs::path>> stems;  // machine, output stem
  for (const auto& [machine, env] : envs)
    for (int i = 0; i < per_machine; ++i) {
      const fs::path stem = out / (machine + std::to_string(i));
      stems.emplace_back(machine, stem);
      script += "( until [ -e " + q(go) + " ]; do sleep 0.01; done; " + env + " timeout -k 5 300 " +
                program() + " 20 > " + q(stem.string() + ".out") + " 2>&1; echo $? > " +
                q(stem.string() + ".rc") + " ) & ";
    }
  script += "touch " + q(go) + "; wait";
  REQUIRE(metajit_test::run_command(script).exit_code == 0);
  std::vector<std::pair<std::string, FleetRun>> runs;
  for (const auto& [machine, stem] : stems) {
    metajit_test::ProcessResult p;
    p.output = metajit_test::read_file(stem.string() + ".out");
    p.exit_code = std::atoi(metajit_test::read_file(stem.string() + ".rc").c_str());
    runs.emplace_back(machine, parse_run(p));
  }
  return runs;
}

// A copy of the real g++ driver under <root>/bin, with <root>/lib/gcc (and libexec/gcc where the
// real one has it) pointing at the real compiler's, so the copy finds cc1plus, as it would on a
// machine whose g++ is installed under another prefix. `append` is added to the binary (other
// content that still runs); the copy gets an old mtime, unlike the original.
fs::path copy_gxx(const fs::path& real, const fs::path& root, const std::string& append) {
  const fs::path prefix = real.parent_path().parent_path();
  fs::create_directories(root / "bin");
  for (const char* sub : {"lib", "libexec"})
    if (fs::exists(prefix / sub / "gcc")) {
      fs::create_directories(root / sub);
      fs::create_directory_symlink(prefix / sub / "gcc", root / sub / "gcc");
    }
  const fs::path copy = root / "bin" / "g++";
  fs::copy_file(real, copy);
  if (!append.empty()) {
    std::ofstream(copy, std::ios::binary | std::ios::app) << append;
  }
  fs::permissions(copy, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
  metajit_test::ProcessResult r = metajit_test::run_command(
      "touch -d '2001-02-03 04:05:06' " + q(copy) + " && echo 'int main() { return 0; }' | " +
      q(copy) + " -x c++ - -o " + q(root / "probe"));
  INFO("the copy of " << real << " at " << copy << " does not compile: " << r.output);
  REQUIRE(r.exit_code == 0);
  return copy;
}

}  // namespace

TEST_CASE("machine B gets machine A's 20 kernels from the remote: 20 hits, 0 compiles",
          "[remote]") {
  RedisServer::require();
  Fleet fleet;
  FleetRun a = fleet.run(fleet.env("A", "readwrite"), 20);
  INFO(a.output);
  REQUIRE(a.ok);
  CHECK(a.compiled == 20);
  CHECK(a.remote_misses == 20);
  // B sets no METAJIT_REMOTE_MODE: a remote is read by default.
  FleetRun b = fleet.run(fleet.env("B") + " env -u METAJIT_REMOTE_MODE", 20);
  INFO(b.output);
  REQUIRE(b.ok);
  CHECK(b.compiled == 0);
  CHECK(b.remote_hits == 20);
  CHECK(b.remote_rejected == 0);
  CHECK(b.remote_errors == 0);
}

TEST_CASE("8 processes on each of two machines at once compile each of 20 kernels once fleet-wide",
          "[remote]") {
  RedisServer::require();
  Fleet fleet;
  // 16 processes, all readwrite, held at a barrier until all are started.
  unsigned long long compiled = 0, uploads = 0;
  std::map<std::string, unsigned long long> arrived;  // per machine: compiled + remote hits
  for (const auto& [machine, r] : run_at_once(
           fleet, {{"A", fleet.env("A", "readwrite")}, {"B", fleet.env("B", "readwrite")}}, 8)) {
    INFO(machine << ": " << r.output);
    CHECK(r.ok);
    // Each process has every kernel one way: compiled, from its machine's disk, or the remote.
    CHECK(r.compiled + r.disk_hits + r.remote_hits == 20);
    CHECK(r.remote_rejected == 0);
    CHECK(r.remote_errors == 0);
    compiled += r.compiled;
    uploads += r.remote_uploads;  // printed before the uploads still queued are flushed
    arrived[machine] += r.compiled + r.remote_hits;
  }
  // Each kernel compiled once in the fleet; each machine's cache got each kernel once.
  CHECK(compiled == 20);
  CHECK(uploads <= 20);
  CHECK(arrived["A"] == 20);
  CHECK(arrived["B"] == 20);
  CHECK(fleet.entries() == 20);
  const nlohmann::json a = fleet.stats("A"), b = fleet.stats("B");
  CHECK(a["compiles"].get<uint64_t>() + b["compiles"].get<uint64_t>() == 20);
  CHECK(a["remote_uploads"].get<uint64_t>() + b["remote_uploads"].get<uint64_t>() == 20);
  CHECK(a["remote_hits"].get<uint64_t>() + b["remote_hits"].get<uint64_t>() == 20);
  CHECK(a["remote_rejected"] == 0);
  CHECK(b["remote_rejected"] == 0);
}

TEST_CASE(
    "portable keys: the same g++ content at another path shares entries, other content or "
    "-march does not",
    "[remote]") {
  RedisServer::require();
  std::error_code ec;
  const fs::path real = fs::canonical("/usr/bin/g++", ec);
  if (ec) metajit_test::skip_test("no /usr/bin/g++ to copy");
  Fleet fleet;
  // Same content, another path and mtime: another local key, the same remote key.
  const fs::path same = copy_gxx(real, fleet.dir() / "image-b", "");
  // One byte more: another binary, another remote key.
  const fs::path grown = copy_gxx(real, fleet.dir() / "image-c", "\n");
  const char* flags = std::getenv("METAJIT_CXXFLAGS");  // a sanitizer build's, kept
  const std::string base_flags = flags ? flags : "";

  FleetRun a = fleet.run(fleet.env("A", "readwrite", "METAJIT_CXX=/usr/bin/g++"), 20);
  INFO("A: " << a.output);
  REQUIRE(a.ok);
  CHECK(a.compiled == 20);
  REQUIRE(fleet.entries() == 20);

  FleetRun b = fleet.run(fleet.env("B", "read", "METAJIT_CXX=" + q(same)), 20);
  INFO("B: " << b.output);
  CHECK(b.ok);
  CHECK(b.remote_hits == 20);
  CHECK(b.compiled == 0);
  CHECK(b.remote_rejected == 0);
  // Machine B's local keys are its own (its compiler's path and mtime are in them).
  const std::set<std::string> keys_a = fleet.keys("A"), keys_b = fleet.keys("B");
  CHECK(keys_a.size() == 20);
  REQUIRE(keys_b.size() == 20);
  for (const std::string& k : keys_b) CHECK(keys_a.count(k) == 0);
  CliRun meta = fleet.metajit(
      "", "--cache-dir " + q(fleet.cache("B")) + " cache show " + *keys_b.begin() + " --meta");
  REQUIRE(meta.exit_code == 0);
  const nlohmann::json m = nlohmann::json::parse(meta.out);
  CHECK(m["compiler"] == same.string());
  CHECK(m["origin"] == "remote");
  CHECK(m["remote_signer"] == "fleet-1");

  FleetRun c = fleet.run(fleet.env("C", "read", "METAJIT_CXX=" + q(grown)), 20);
  INFO("C: " << c.output);
  CHECK(c.ok);
  CHECK(c.remote_hits == 0);
  CHECK(c.remote_misses == 20);
  CHECK(c.compiled == 20);

  FleetRun d = fleet.run(fleet.env("D", "read",
                                   "METAJIT_CXX=/usr/bin/g++ METAJIT_CXXFLAGS=" +
                                       shell_quote(base_flags + " -march=x86-64-v2")),
                         20);
  INFO("D: " << d.output);
  CHECK(d.ok);
  CHECK(d.remote_hits == 0);
  CHECK(d.remote_misses == 20);
  CHECK(d.compiled == 20);
  CHECK(d.remote_rejected == 0);
}

TEST_CASE(
    "two machines whose local keys order the kernels differently, at once: each kernel "
    "compiled once",
    "[remote]") {
  // Same g++ content at another path: the same remote keys, other local keys, so each machine
  // takes its kernels' leases in another order. A process that waited for another machine's
  // lease while holding leases it had not compiled yet waited for a machine waiting for it:
  // both waited out METAJIT_REMOTE_WAIT, then compiled everything.
  RedisServer::require();
  std::error_code ec;
  const fs::path real = fs::canonical("/usr/bin/g++", ec);
  if (ec) metajit_test::skip_test("no /usr/bin/g++ to copy");
  Fleet fleet;
  const fs::path copy = copy_gxx(real, fleet.dir() / "image-b", "");
  const std::vector<std::pair<std::string, std::string>> compiler = {
      {"A", "METAJIT_CXX=/usr/bin/g++"}, {"B", "METAJIT_CXX=" + q(copy)}};
  // Each machine resolves its toolchain first (kernel 0, another namespace), so that both start
  // taking leases at the same moment.
  for (const auto& [machine, cxx] : compiler) {
    FleetRun r =
        fleet.run(fleet.env(machine, "readwrite", cxx + " METAJIT_REMOTE_NAMESPACE=warmup"), 1);
    INFO(r.output);
    REQUIRE(r.ok);
  }
  REQUIRE(fleet.keys("A") != fleet.keys("B"));
  // METAJIT_REMOTE_WAIT bounds how long a deadlock would last; none should happen.
  std::vector<std::pair<std::string, std::string>> envs;
  for (const auto& [machine, cxx] : compiler)
    envs.emplace_back(machine, fleet.env(machine, "readwrite", cxx + " METAJIT_REMOTE_WAIT=30"));
  unsigned long long compiled = 0;
  std::map<std::string, unsigned long long> arrived;
  for (const auto& [machine, r] : run_at_once(fleet, envs, 4)) {
    INFO(machine << ": " << r.output);
    CHECK(r.ok);
    CHECK(r.compiled + r.disk_hits + r.remote_hits == 20);
    compiled += r.compiled;
    arrived[machine] += r.compiled + r.remote_hits;
  }
  // Kernel 0 was on both machines' disks already; the other 19 compiled once in the fleet.
  CHECK(compiled == 19);
  CHECK(arrived["A"] == 19);
  CHECK(arrived["B"] == 19);
  CHECK(fleet.entries() == 19);
}

TEST_CASE("namespaces: a reader sees only the entries of its own namespace", "[remote]") {
  RedisServer::require();
  Fleet fleet;
  FleetRun w = fleet.run(fleet.env("W", "readwrite", "METAJIT_REMOTE_NAMESPACE=x"), 20);
  INFO("writer: " << w.output);
  REQUIRE(w.ok);
  CHECK(w.compiled == 20);
  CHECK(fleet.entries("x") == 20);
  CHECK(fleet.entries("default") == 0);

  FleetRun y = fleet.run(fleet.env("Y", "read", "METAJIT_REMOTE_NAMESPACE=y"), 5);
  INFO("reader in y: " << y.output);
  CHECK(y.ok);
  CHECK(y.remote_hits == 0);
  CHECK(y.remote_misses == 5);
  CHECK(y.compiled == 5);

  FleetRun x = fleet.run(fleet.env("X", "read", "METAJIT_REMOTE_NAMESPACE=x"), 20);
  INFO("reader in x: " << x.output);
  CHECK(x.ok);
  CHECK(x.remote_hits == 20);
  CHECK(x.compiled == 0);

  // A namespace cannot reach into another one's keys.
  CliRun bad =
      fleet.metajit(fleet.env("X", "read", "METAJIT_REMOTE_NAMESPACE=x:kernel"), "remote status");
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("METAJIT_REMOTE_NAMESPACE=x:kernel is not valid") != std::string::npos);
}

TEST_CASE("metajit remote keygen writes a 0600 secret key and a NAME:base64 public key",
          "[remote]") {
  metajit_test::TempDir tmp;
  const fs::path file = tmp.path() / "ci-2024.key";
  metajit_test::ProcessResult r =
      metajit_test::run_command(cli() + " remote keygen ci-2024 -o " + q(file));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(file_mode(file) == 0600);
  CHECK(file_mode(file.string() + ".pub") == 0644);
  const auto [pub_name, pub_b64] = key_line(file.string() + ".pub");
  CHECK(pub_name == "ci-2024");
  std::optional<std::string> pub = base64_decode(pub_b64);
  REQUIRE(pub);
  CHECK(pub->size() == 32);
  // The secret key file holds libsodium's 64-byte secret key: seed, then the public key.
  const auto [secret_name, secret_b64] = key_line(file);
  CHECK(secret_name == "ci-2024");
  std::optional<std::string> secret = base64_decode(secret_b64);
  REQUIRE(secret);
  REQUIRE(secret->size() == 64);
  CHECK(secret->substr(32) == *pub);
  // stdout names the files and shows the public key line.
  CHECK(r.output.find("ci-2024:" + pub_b64 + "\n") != std::string::npos);
  CHECK(r.output.find(file.string() + ".pub") != std::string::npos);

  SECTION("an existing key file is never overwritten") {
    const std::string before = metajit_test::read_file(file);
    metajit_test::ProcessResult again =
        metajit_test::run_command(cli() + " remote keygen other -o " + q(file));
    CHECK(again.exit_code == 1);
    CHECK(again.output.find(file.string()) != std::string::npos);
    CHECK(metajit_test::read_file(file) == before);
    CHECK(key_line(file.string() + ".pub").first == "ci-2024");
  }
  SECTION("an existing FILE.pub is never overwritten either") {
    const fs::path other = tmp.path() / "other.key";
    metajit_test::write_file(other.string() + ".pub", "keep me\n");
    metajit_test::ProcessResult again =
        metajit_test::run_command(cli() + " remote keygen other -o " + q(other));
    CHECK(again.exit_code == 1);
    CHECK(again.output.find(other.string() + ".pub") != std::string::npos);
    CHECK(metajit_test::read_file(other.string() + ".pub") == "keep me\n");
    CHECK_FALSE(fs::exists(other));
  }
  SECTION("an invalid key name is refused, nothing written") {
    const fs::path other = tmp.path() / "bad.key";
    metajit_test::ProcessResult bad =
        metajit_test::run_command(cli() + " remote keygen 'no spaces' -o " + q(other));
    CHECK(bad.exit_code == 1);
    CHECK(bad.output.find("key name 'no spaces'") != std::string::npos);
    CHECK_FALSE(fs::exists(other));
    CHECK_FALSE(fs::exists(other.string() + ".pub"));
  }
}

TEST_CASE("metajit remote status reports the server, mode, namespace, keys and entries",
          "[remote]") {
  RedisServer::require();
  Fleet fleet(with_policy("allkeys-lru"));
  FleetRun w = fleet.run(fleet.env("W", "readwrite"), 20);
  INFO(w.output);
  REQUIRE(w.ok);

  {  // a reader, in JSON
    CliRun r = fleet.metajit(fleet.env("R"), "remote status --json");
    INFO(r.out << r.err);
    CHECK(r.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    CHECK(j["reachable"] == true);
    CHECK(j["url"] == fleet.server().url());
    CHECK(j["mode"] == "read");
    CHECK(j["namespace"] == "default");
    CHECK(j["readable"] == true);
    CHECK(j["writable"] == false);
    CHECK(j["signing_key"] == "");
    CHECK(j["trusted_keys"] == nlohmann::json::array({"fleet-1"}));
    CHECK(j["entries"] == 20);
    CHECK(j["maxmemory_policy"] == "allkeys-lru");
    CHECK(!j.contains("error"));
  }
  {  // a writer, as text
    CliRun r = fleet.metajit(fleet.env("W", "readwrite"), "remote status");
    INFO(r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("remote cache: " + fleet.server().url()) != std::string::npos);
    CHECK(r.out.find("mode:       readwrite (reads on, writes on)") != std::string::npos);
    CHECK(r.out.find("keys:       signing fleet-1; trusted fleet-1") != std::string::npos);
    CHECK(r.out.find("reachable:  yes") != std::string::npos);
    CHECK(r.out.find("policy allkeys-lru") != std::string::npos);
    CHECK(r.out.find("entries:    20 kernels") != std::string::npos);
  }
  {  // another namespace has no entries
    CliRun r = fleet.metajit(fleet.env("R", "read", "METAJIT_REMOTE_NAMESPACE=empty"),
                             "remote status --json");
    CHECK(r.exit_code == 0);
    const nlohmann::json j = nlohmann::json::parse(r.out);
    CHECK(j["namespace"] == "empty");
    CHECK(j["entries"] == 0);
  }
  {  // no server: not reachable, exit status 2, with the error
    const std::string gone =
        "METAJIT_REMOTE=" + q("redis+unix://" + (fleet.dir() / "none.sock").string());
    CliRun j = fleet.metajit(fleet.env("R", "read", gone), "remote status --json");
    INFO(j.out << j.err);
    CHECK(j.exit_code == 2);
    const nlohmann::json s = nlohmann::json::parse(j.out);
    CHECK(s["reachable"] == false);
    CHECK(s["error"].get<std::string>().find("unreachable") != std::string::npos);
    CHECK(!s.contains("entries"));
    CliRun t = fleet.metajit(fleet.env("R", "read", gone), "remote status");
    CHECK(t.exit_code == 2);
    CHECK(t.out.find("reachable:  no (unreachable") != std::string::npos);
  }
  {  // METAJIT_REMOTE unset: off, exit status 0
    CliRun t = fleet.metajit(kNoRemote, "remote status");
    CHECK(t.exit_code == 0);
    CHECK(t.out == "remote cache: off (METAJIT_REMOTE is not set)\n");
    CliRun j = fleet.metajit(kNoRemote, "remote status --json");
    CHECK(j.exit_code == 0);
    const nlohmann::json s = nlohmann::json::parse(j.out);
    CHECK(s["mode"] == "off");
    CHECK(s["reachable"] == false);
  }
}

TEST_CASE("metajit cache push uploads a cache filled without a remote, all of it or one key",
          "[remote]") {
  RedisServer::require();
  Fleet fleet;
  // P: 20 kernels compiled while no remote was set. Q: kernel 0 alone.
  FleetRun p = fleet.run(kNoRemote + " METAJIT_CACHE_DIR=" + q(fleet.cache("P")), 20);
  INFO(p.output);
  REQUIRE(p.ok);
  REQUIRE(p.compiled == 20);
  CHECK(p.remote_misses == 0);
  FleetRun q0 = fleet.run(kNoRemote + " METAJIT_CACHE_DIR=" + q(fleet.cache("Q")), 1);
  REQUIRE(q0.ok);
  const std::set<std::string> q_keys = fleet.keys("Q");
  REQUIRE(q_keys.size() == 1);
  const std::string key0 = *q_keys.begin();
  REQUIRE(fleet.keys("P").count(key0) == 1);

  {  // neither keys nor --all, or both: usage error
    CliRun none = fleet.metajit(fleet.env("P", "readwrite"), "cache push");
    CHECK(none.exit_code == 1);
    CHECK(none.err.find("cache push: name KEYs or --all") != std::string::npos);
    CliRun both = fleet.metajit(fleet.env("P", "readwrite"), "cache push --all " + key0);
    CHECK(both.exit_code == 1);
    CHECK(both.err.find("cache push: name KEYs or --all") != std::string::npos);
    CHECK(fleet.entries() == 0);
  }
  {  // an unknown key prefix: usage error
    CliRun r = fleet.metajit(fleet.env("P", "readwrite"), "cache push 0123456789abcdef0123");
    CHECK(r.exit_code == 1);
    CHECK(r.err.find("cache push: ") != std::string::npos);
    CHECK(fleet.entries() == 0);
  }
  {  // without a signing key, in mode read or without a remote: refused, nothing pushed
    for (const std::string& env :
         {fleet.env("P", "readwrite", "METAJIT_REMOTE_SIGNING_KEY="), fleet.env("P", "read"),
          kNoRemote + " METAJIT_CACHE_DIR=" + q(fleet.cache("P"))}) {
      CliRun r = fleet.metajit(env, "cache push --all");
      INFO(env << "\n" << r.out << r.err);
      CHECK(r.exit_code == 1);
      CHECK(r.err.find("cache push: remote writes are off") != std::string::npos);
    }
    CHECK(fleet.entries() == 0);
    CHECK(fleet.stats("P")["remote_uploads"] == 0);
  }
  {  // --all, then a reader with an empty cache gets 20 hits
    CliRun r = fleet.metajit(fleet.env("P", "readwrite", "METAJIT_REMOTE_NAMESPACE=all"),
                             "cache push --all");
    INFO(r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out == "pushed 20 of 20 kernels to " + fleet.server().url() + "\n");
    CHECK(fleet.entries("all") == 20);
    CHECK(fleet.stats("P")["remote_uploads"] == 20);
    FleetRun reader = fleet.run(fleet.env("R1", "read", "METAJIT_REMOTE_NAMESPACE=all"), 20);
    INFO(reader.output);
    CHECK(reader.ok);
    CHECK(reader.remote_hits == 20);
    CHECK(reader.compiled == 0);
  }
  {  // a key prefix pushes that kernel alone
    CliRun r = fleet.metajit(fleet.env("P", "readwrite", "METAJIT_REMOTE_NAMESPACE=one"),
                             "cache push " + key0.substr(0, 10));
    INFO(r.out << r.err);
    CHECK(r.exit_code == 0);
    CHECK(r.out == "pushed 1 of 1 kernel to " + fleet.server().url() + "\n");
    CHECK(fleet.entries("one") == 1);
    FleetRun reader = fleet.run(fleet.env("R2", "read", "METAJIT_REMOTE_NAMESPACE=one"), 3);
    INFO(reader.output);
    CHECK(reader.ok);
    CHECK(reader.remote_hits == 1);
    CHECK(reader.remote_misses == 2);
    CHECK(reader.compiled == 2);
    CHECK(fleet.keys("R2").count(key0) == 1);
  }
}

TEST_CASE("cache export, then cache warm --push fills a namespace, and cache warm fetches from it",
          "[remote]") {
  RedisServer::require();
  Fleet fleet;
  FleetRun a = fleet.run(kNoRemote + " METAJIT_CACHE_DIR=" + q(fleet.cache("A")), 20);
  INFO(a.output);
  REQUIRE(a.ok);
  const fs::path manifest = fleet.dir() / "kernels.json";
  CliRun exp = fleet.metajit(
      kNoRemote, "--cache-dir " + q(fleet.cache("A")) + " cache export -o " + q(manifest));
  INFO(exp.err);
  REQUIRE(exp.exit_code == 0);
  CHECK(exp.err.find("exported 20 kernels") != std::string::npos);

  // A build machine C, its own cache, a fresh namespace.
  CliRun push = fleet.metajit(fleet.env("C", "readwrite", "METAJIT_REMOTE_NAMESPACE=warm"),
                              "cache warm " + q(manifest) + " --push");
  INFO(push.out << push.err);
  CHECK(push.exit_code == 0);
  CHECK(push.out.find("20 kernels") != std::string::npos);
  CHECK(push.out.find("20 compiled, 0 already cached, 0 failed") != std::string::npos);
  CHECK(push.out.find("20 pushed to the remote cache, 0 not") != std::string::npos);
  CHECK(fleet.entries("warm") == 20);
  CHECK(fleet.entries("default") == 0);

  FleetRun reader = fleet.run(fleet.env("R", "read", "METAJIT_REMOTE_NAMESPACE=warm"), 20);
  INFO(reader.output);
  CHECK(reader.ok);
  CHECK(reader.remote_hits == 20);
  CHECK(reader.compiled == 0);

  // A reader warming an empty cache from the manifest fetches, compiles nothing.
  CliRun warm = fleet.metajit(fleet.env("W", "read", "METAJIT_REMOTE_NAMESPACE=warm"),
                              "cache warm " + q(manifest));
  INFO(warm.out << warm.err);
  CHECK(warm.exit_code == 0);
  CHECK(warm.out.find("0 compiled, 20 already cached, 0 failed") != std::string::npos);
  CHECK(warm.out.find("20 fetched from the remote cache") != std::string::npos);
  CHECK(fleet.stats("W")["remote_hits"] == 20);
  CHECK(fleet.stats("W")["compiles"] == 0);
  FleetRun after = fleet.run(kNoRemote + " METAJIT_CACHE_DIR=" + q(fleet.cache("W")), 20);
  INFO(after.output);
  CHECK(after.ok);
  CHECK(after.disk_hits == 20);
  CHECK(after.compiled == 0);

  // --push where writes are off: a usage error naming what is missing.
  CliRun refused = fleet.metajit(fleet.env("W", "read", "METAJIT_REMOTE_NAMESPACE=warm"),
                                 "cache warm " + q(manifest) + " --push");
  CHECK(refused.exit_code == 1);
  CHECK(refused.err.find("cache warm --push: remote writes are off") != std::string::npos);
}

TEST_CASE("cache stats counts remote hits, misses, rejections, errors and uploads", "[remote]") {
  RedisServer::require();
  Fleet fleet;
  FleetRun a = fleet.run(fleet.env("A", "readwrite"), 20);
  INFO("A: " << a.output);
  REQUIRE(a.ok);
  const nlohmann::json sa = fleet.stats("A");
  CHECK(sa["compiles"] == 20);
  CHECK(sa["remote_hits"] == 0);
  CHECK(sa["remote_misses"] == 20);
  CHECK(sa["remote_rejected"] == 0);
  CHECK(sa["remote_errors"] == 0);
  CHECK(sa["remote_timeouts"] == 0);
  CHECK(sa["remote_uploads"] == 20);  // the ones flushed at exit included

  // One entry replaced by garbage: rejected, compiled locally; the other 19 are hits.
  const metajit::RedisReply keys = fleet.server().command({"KEYS", "metajit:default:kernel:*"});
  REQUIRE(keys.elements.size() == 20);
  fleet.server().command({"SET", keys.elements[0].str, "not an envelope"});
  FleetRun b = fleet.run(fleet.env("B"), 20);
  INFO("B: " << b.output);
  CHECK(b.ok);
  CHECK(b.remote_hits == 19);
  CHECK(b.remote_rejected == 1);
  CHECK(b.compiled == 1);
  const nlohmann::json sb = fleet.stats("B");
  CHECK(sb["remote_hits"] == 19);
  CHECK(sb["remote_misses"] == 0);
  CHECK(sb["remote_rejected"] == 1);
  CHECK(sb["remote_errors"] == 0);
  CHECK(sb["remote_timeouts"] == 0);
  CHECK(sb["remote_uploads"] == 0);
  CHECK(sb["compiles"] == 1);

  // No server: errors, the program still right; the cache's counters match the process's.
  const std::string gone =
      "METAJIT_REMOTE=" + q("redis+unix://" + (fleet.dir() / "none.sock").string());
  FleetRun c = fleet.run(fleet.env("C", "read", gone), 3);
  INFO("C: " << c.output);
  CHECK(c.ok);
  CHECK(c.compiled == 3);
  CHECK(c.remote_errors >= 1);
  CHECK(c.remote_timeouts == 0);
  const nlohmann::json sc = fleet.stats("C");
  CHECK(sc["remote_errors"] == c.remote_errors);
  CHECK(sc["remote_hits"] == 0);
  CHECK(sc["remote_timeouts"] == 0);
}

TEST_CASE("metajit doctor: a remote whose policy is noeviction is a problem, allkeys-lru is ok",
          "[remote]") {
  RedisServer::require();
  auto remote_check = [](const nlohmann::json& report) {
    for (const nlohmann::json& c : report["checks"])
      if (c["name"] == "remote") return c;
    return nlohmann::json();
  };
  {
    Fleet fleet(with_policy("noeviction"));
    CliRun r = fleet.metajit(fleet.env("A"), "doctor --json");
    INFO(r.out << r.err);
    CHECK(r.exit_code == 1);
    const nlohmann::json report = nlohmann::json::parse(r.out);
    const nlohmann::json c = remote_check(report);
    REQUIRE(c.is_object());
    CHECK(c["status"] == "problem");
    CHECK(c["detail"].get<std::string>().find("noeviction") != std::string::npos);
    CHECK(c["fix"].get<std::string>().find("allkeys-lru") != std::string::npos);
    CHECK(report["ok"] == false);
  }
  {
    Fleet fleet(with_policy("allkeys-lru"));
    CliRun r = fleet.metajit(fleet.env("A"), "doctor --json");
    INFO(r.out << r.err);
    const nlohmann::json report = nlohmann::json::parse(r.out);
    const nlohmann::json c = remote_check(report);
    REQUIRE(c.is_object());
    CHECK(c["status"] == "ok");
    CHECK(c["detail"].get<std::string>().find("policy allkeys-lru") != std::string::npos);
    // Exit status 1 only for problems elsewhere (no compiler...), never for this remote.
    CHECK(r.exit_code == (report["problems"] == 0 ? 0 : 1));
  }
  {
    Fleet fleet;
    const std::string gone =
        "METAJIT_REMOTE=" + q("redis+unix://" + (fleet.dir() / "none.sock").string());
    CliRun r = fleet.metajit(fleet.env("A", "read", gone), "doctor --json");
    INFO(r.out << r.err);
    CHECK(r.exit_code == 1);
    const nlohmann::json c = remote_check(nlohmann::json::parse(r.out));
    CHECK(c["status"] == "problem");
    CHECK(c["detail"].get<std::string>().find("not reachable") != std::string::npos);
  }
}

TEST_CASE(
    "fork: the child of a process using the remote fetches, compiles and uploads its own "
    "kernels",
    "[remote]") {
  RedisServer::require();
  Fleet fleet;
  run_fork_program(fleet.env("A", "readwrite"), "writer", [](const ForkPhase& f) {
    CHECK(f.compiled == 4);
    CHECK(f.remote_misses == 4);
    CHECK(f.remote_errors == 0);
  });
  // Parent and child uploaded their kernels: 12 entries, a reader gets all of them.
  CHECK(fleet.entries() == 12);
  run_fork_program(fleet.env("B"), "reader", [](const ForkPhase& f) {
    CHECK(f.remote_hits == 4);
    CHECK(f.compiled == 0);
    CHECK(f.remote_errors == 0);
  });
}

TEST_CASE("without trusted keys remote reads are off, with one warning, and nothing is rejected",
          "[remote]") {
  RedisServer::require();
  Fleet fleet;
  FleetRun w = fleet.run(fleet.env("W", "readwrite"), 3);
  INFO("writer: " << w.output);
  REQUIRE(w.ok);
  REQUIRE(fleet.entries() == 3);
  const fs::path empty = fleet.dir() / "no-keys.pub";
  metajit_test::write_file(empty, "# the fleet's keys go here\n\n");
  for (const std::string& trusted :
       {std::string(" METAJIT_REMOTE_TRUSTED_KEYS="), " METAJIT_REMOTE_TRUSTED_KEYS=" + q(empty)}) {
    FleetRun r = fleet.run(fleet.env("R" + std::to_string(trusted.size()), "read", trusted), 3);
    INFO(r.output);
    CHECK(r.ok);
    CHECK(r.compiled == 3);
    CHECK(r.remote_hits == 0);
    CHECK(r.remote_misses == 0);
    CHECK(r.remote_rejected == 0);
    CHECK(metajit_test::count_occurrences(r.output, "remote reads are off") == 1);
  }
}

TEST_CASE("CUDA kernels built by nvcc travel through the remote like C++ ones", "[remote]") {
  RedisServer::require();
  if (metajit_test::run_command("command -v nvcc || test -x /usr/local/cuda/bin/nvcc").exit_code !=
      0)
    metajit_test::skip_test("no nvcc here (CUDA kernels compile without a GPU, but need nvcc)");
  Fleet fleet;
  // A manifest of 3 CUDA kernels, recorded through the host emulation (no GPU needed).
  const fs::path manifest = fleet.dir() / "cuda.json";
  metajit_test::ProcessResult rec = metajit_test::run_command(
      "METAJIT_DEVICE=cuda METAJIT_CUDA_EMULATE=1 METAJIT_CACHE_DIR=" + q(fleet.cache("rec")) +
      " METAJIT_RECORD=" + q(manifest) + " " + program() + " 3");
  INFO(rec.output);
  REQUIRE(rec.exit_code == 0);
  REQUIRE(metajit_test::read_file(manifest).find("\"cuda\"") != std::string::npos);

  CliRun w = fleet.metajit(fleet.env("W", "readwrite"), "cache warm " + q(manifest) + " --push");
  INFO("writer: " << w.out << w.err);
  REQUIRE(w.exit_code == 0);
  CHECK(w.out.find("3 compiled") != std::string::npos);
  CHECK(w.out.find("3 pushed to the remote cache, 0 not") != std::string::npos);
  CHECK(fleet.entries() == 3);

  CliRun r = fleet.metajit(fleet.env("R"), "cache warm " + q(manifest));
  INFO("reader: " << r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("0 compiled") != std::string::npos);
  CHECK(r.out.find("3 fetched from the remote cache") != std::string::npos);
  const nlohmann::json stats = fleet.stats("R");
  CHECK(stats["remote_hits"] == 3);
  CHECK(stats["compiles"] == 0);
}
