// The kernel cache under real use (docs/design.md §6): many processes at once, processes killed at
// random moments, corrupted entries, export and warm, eviction, read-only, full and unsafe
// cache directories. Each case runs tests/programs/many_kernels_program (N distinct kernels,
// every value checked against the reference interpreter) and the `metajit` CLI as separate
// processes against a private cache directory.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "cache/cache_store.h"
#include "support/files.h"
#include "support/processes.h"
#include "support/skip.h"
#include "support/text.h"

using namespace metajit;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
using metajit_test::count_entries;
using metajit_test::count_occurrences;
using metajit_test::read_file;
using metajit_test::shell_quote;
using metajit_test::write_file;

namespace {

struct ProgramRun {
  int exit_code = -1;
  std::string output;
  bool ok = false;
  unsigned long long compiled = 0, disk_hits = 0;
};

// many_kernels_program with `n` kernels against `cache`; `env` is prepended (VAR=value ...).
std::string program_command(const fs::path& cache, int n, const std::string& env = "") {
  return "METAJIT_CACHE_DIR=" + shell_quote(cache.string()) + " " + env + " " +
         shell_quote(metajit_test::test_program("many_kernels_program")) + " " + std::to_string(n);
}

ProgramRun run_program(const fs::path& cache, int n, const std::string& env = "") {
  ProgramRun r;
  metajit_test::ProcessResult p = metajit_test::run_command(program_command(cache, n, env));
  r.exit_code = p.exit_code;
  r.output = p.output;
  std::smatch m;
  if (std::regex_search(p.output, m, std::regex("(ok|WRONG) compiled=(\\d+) disk_hits=(\\d+)"))) {
    r.ok = m[1] == "ok" && p.exit_code == 0;
    r.compiled = std::stoull(m[2]);
    r.disk_hits = std::stoull(m[3]);
  }
  return r;
}

metajit_test::ProcessResult run_cli(const fs::path& cache, const std::string& args,
                                    const std::string& env = "") {
  return metajit_test::run_command(env + " " + shell_quote(metajit_test::cli_path().string()) +
                                   " --cache-dir " + shell_quote(cache.string()) + " " + args);
}

// A tmpfs mounted for the scope (root only). `mounted()` is false where mounting failed.
class ScopedTmpfs {
 public:
  ScopedTmpfs(const fs::path& dir, const std::string& size) : dir_(dir) {
    fs::create_directories(dir);
    mounted_ = ::geteuid() == 0 &&
               metajit_test::run_command("mount -t tmpfs -o size=" + size + ",mode=0700 tmpfs " +
                                         shell_quote(dir.string()))
                       .exit_code == 0;
  }
  ~ScopedTmpfs() {
    if (mounted_) metajit_test::run_command("umount -l " + shell_quote(dir_.string()));
  }
  ScopedTmpfs(const ScopedTmpfs&) = delete;
  ScopedTmpfs& operator=(const ScopedTmpfs&) = delete;
  bool mounted() const { return mounted_; }
  bool remount_read_only() {
    return metajit_test::run_command("mount -o remount,ro " + shell_quote(dir_.string()))
               .exit_code == 0;
  }

 private:
  fs::path dir_;
  bool mounted_ = false;
};

// Whether this process may mount a tmpfs (root with CAP_SYS_ADMIN): tries one. Tests that need
// one ask first, and skip where it cannot be had.
bool tmpfs_can_be_mounted() {
  if (::geteuid() != 0) return false;
  metajit_test::TempDir probe;
  return ScopedTmpfs(probe.path() / "mnt", "1m").mounted();
}

}  // namespace

TEST_CASE("8 processes started together on a fresh cache compile 20 kernels exactly once",
          "[cache][process][concurrency]") {
  metajit_test::TempDir tmp;
  const fs::path cache = tmp.path() / "cache";
  std::string cmd;
  for (int i = 0; i < 8; ++i)
    cmd += program_command(cache, 20) + " > " +
           shell_quote((tmp.path() / std::to_string(i)).string()) + " 2>&1 & ";
  cmd += "wait";
  REQUIRE(metajit_test::run_command(cmd).exit_code == 0);
  unsigned long long compiled = 0;
  for (int i = 0; i < 8; ++i) {
    std::string out = read_file(tmp.path() / std::to_string(i));
    INFO("process " << i << ": " << out);
    CHECK_THAT(out, Contains("ok compiled="));
    std::smatch m;
    if (std::regex_search(out, m, std::regex("compiled=(\\d+)"))) compiled += std::stoull(m[1]);
  }
  CHECK(compiled == 20);  // summed over the processes
  CacheStore store(cache);
  CHECK(store.read_counters().compiles == 20);
  CHECK(store.list().size() == 20);
  CHECK(count_entries(cache / "v1" / "tmp") == 0);
  CHECK(count_entries(cache / "v1" / "locks") == 0);
  CHECK(store.verify().empty());
}

TEST_CASE("processes killed at random moments never leave an entry that loads wrong",
          "[cache][process][crash]") {
  metajit_test::TempDir tmp;
  const fs::path cache = tmp.path() / "cache";
  std::mt19937 rng(20261123);
  std::uniform_int_distribution<int> delay_ms(0, 400);
  for (int round = 0; round < 30; ++round) {
    // New flags, new keys: every round compiles. The small size limit makes every round evict
    // too, so kills also land during eviction.
    const std::string env = "METAJIT_CXXFLAGS=-DMETAJIT_ROUND=" + std::to_string(round) +
                            " METAJIT_CACHE_MAX_SIZE=200k METAJIT_JOBS=2";
    const int delay = delay_ms(rng);
    INFO("round " << round << ", SIGKILL after " << delay << " ms");
    metajit_test::run_command("(" + program_command(cache, 8, env) +
                              " >/dev/null 2>&1 & pid=$!; sleep " + std::to_string(delay / 1000.0) +
                              "; kill -9 $pid; wait $pid) 2>/dev/null");
    ProgramRun again = run_program(cache, 8, env);
    INFO(again.output);
    CHECK(again.ok);
    metajit_test::ProcessResult verify = run_cli(cache, "cache verify");
    INFO(verify.output);
    CHECK(verify.exit_code == 0);
  }
  CHECK(CacheStore(cache).verify().empty());
}

TEST_CASE("each kind of corruption is detected, logged once and rebuilt",
          "[cache][process][verify]") {
  metajit_test::TempDir tmp;
  const fs::path cache = tmp.path() / "cache";
  REQUIRE(run_program(cache, 4).ok);
  CacheStore store(cache);
  struct Corruption {
    const char* name;
    std::function<void(const fs::path&)> apply;
  };
  const std::vector<Corruption> kinds = {
      {"truncated kernel.so", [](const fs::path& d) { fs::resize_file(d / "kernel.so", 1000); }},
      {"zeroed kernel.so",
       [](const fs::path& d) {
         auto size = fs::file_size(d / "kernel.so");
         write_file(d / "kernel.so", std::string(size, '\0'));
       }},
      {"bit-flipped kernel.so",
       [](const fs::path& d) {
         std::string so = read_file(d / "kernel.so");
         so[so.size() / 2] ^= 0x10;
         write_file(d / "kernel.so", so);
       }},
      {"garbled meta.json",
       [](const fs::path& d) { write_file(d / "meta.json", "{\"key\": [1,"); }},
      {"missing meta.json", [](const fs::path& d) { fs::remove(d / "meta.json"); }},
      {"missing source", [](const fs::path& d) { fs::remove(d / "kernel.cc"); }},
  };
  for (const Corruption& c : kinds) {
    INFO(c.name);
    std::vector<CacheEntryInfo> entries = store.list();
    REQUIRE(entries.size() == 4);
    c.apply(entries[1].dir);
    ProgramRun r = run_program(cache, 4);
    INFO(r.output);
    CHECK(r.ok);
    CHECK(r.compiled == 1);
    CHECK(r.disk_hits == 3);
    CHECK(count_occurrences(r.output, "is bad") == 1);
    CHECK(store.verify().empty());
  }

  // `metajit cache verify` finds them; --fix rebuilds what meta.json still describes and
  // removes the rest.
  std::vector<CacheEntryInfo> entries = store.list();
  fs::resize_file(entries[0].dir / "kernel.so", 10);
  write_file(entries[2].dir / "meta.json", "garbage");
  metajit_test::ProcessResult verify = run_cli(cache, "cache verify");
  INFO(verify.output);
  CHECK(verify.exit_code == 1);
  CHECK_THAT(verify.output, Contains(entries[0].key) && Contains(entries[2].key) &&
                                Contains("2 problems") && Contains("--fix"));
  metajit_test::ProcessResult fix = run_cli(cache, "cache verify --fix");
  INFO(fix.output);
  CHECK(fix.exit_code == 0);
  CHECK_THAT(fix.output, Contains("2 bad entries removed (1 rebuilt)") && Contains("clean"));
  CHECK(fs::exists(entries[0].dir / "kernel.so"));  // rebuilt from its spec
  CHECK_FALSE(fs::exists(entries[2].dir));          // nothing left to rebuild it from
  CHECK(run_cli(cache, "cache verify").exit_code == 0);
  ProgramRun after = run_program(cache, 4);
  CHECK(after.ok);
  CHECK(after.compiled == 1);
}

TEST_CASE("export on one cache, warm another, then the program compiles nothing",
          "[cache][process][warm]") {
  metajit_test::TempDir tmp;
  const fs::path a = tmp.path() / "a", b = tmp.path() / "b", manifest = tmp.path() / "m.json";
  ProgramRun cold = run_program(a, 6);
  REQUIRE(cold.ok);
  REQUIRE(cold.compiled == 6);

  metajit_test::ProcessResult exp = run_cli(a, "cache export -o " + shell_quote(manifest.string()));
  INFO(exp.output);
  REQUIRE(exp.exit_code == 0);
  CHECK_THAT(exp.output, Contains("exported 6 kernels"));
  nlohmann::json m = nlohmann::json::parse(read_file(manifest));
  CHECK(m["format"] == "metajit-manifest");
  CHECK(m["kernels"].size() == 6);

  metajit_test::ProcessResult warm =
      run_cli(b, "cache warm " + shell_quote(manifest.string()) + " -j 2");
  INFO(warm.output);
  REQUIRE(warm.exit_code == 0);
  CHECK_THAT(warm.output, Contains("Compiling kernels (") && Contains("used") && Contains("eta") &&
                              Contains("6 compiled, 0 already cached, 0 failed"));
  ProgramRun hot = run_program(b, 6);
  CHECK(hot.ok);
  CHECK(hot.compiled == 0);
  CHECK(hot.disk_hits == 6);

  metajit_test::ProcessResult again = run_cli(b, "cache warm " + shell_quote(manifest.string()));
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.output, Contains("0 compiled, 6 already cached"));

  // Without -o the manifest goes to stdout.
  metajit_test::ProcessResult to_stdout = metajit_test::run_command(
      "(" + shell_quote(metajit_test::cli_path().string()) + " --cache-dir " +
      shell_quote(a.string()) + " cache export 2>/dev/null)");
  CHECK(nlohmann::json::parse(to_stdout.output)["kernels"].size() == 6);
}

TEST_CASE("METAJIT_RECORD writes the manifest of the kernels a program used",
          "[cache][process][warm]") {
  metajit_test::TempDir tmp;
  const fs::path a = tmp.path() / "a", b = tmp.path() / "b", record = tmp.path() / "used.json";
  ProgramRun run = run_program(a, 5, "METAJIT_RECORD=" + shell_quote(record.string()));
  REQUIRE(run.ok);
  nlohmann::json m = nlohmann::json::parse(read_file(record));
  CHECK(m["kernels"].size() == 5);
  // Recorded from the disk cache too, not only from compiles.
  fs::remove(record);
  REQUIRE(run_program(a, 5, "METAJIT_RECORD=" + shell_quote(record.string())).ok);
  CHECK(nlohmann::json::parse(read_file(record))["kernels"].size() == 5);

  metajit_test::ProcessResult warm = run_cli(b, "cache warm " + shell_quote(record.string()));
  INFO(warm.output);
  REQUIRE(warm.exit_code == 0);
  ProgramRun hot = run_program(b, 5);
  CHECK(hot.ok);
  CHECK(hot.compiled == 0);
}

TEST_CASE("METAJIT_CACHE_MAX_SIZE keeps the cache under its limit", "[cache][process][evict]") {
  metajit_test::TempDir tmp;
  const fs::path cache = tmp.path() / "cache";
  ProgramRun r = run_program(cache, 12, "METAJIT_CACHE_MAX_SIZE=100k");
  INFO(r.output);
  CHECK(r.ok);
  CHECK(r.compiled == 12);
  CacheStore store(cache);
  uint64_t bytes = 0;
  for (const CacheEntryInfo& e : store.list()) bytes += e.bytes;
  CHECK(bytes <= 100 * 1024);
  CHECK(store.list().size() < 12);
  CHECK(store.read_counters().evictions == 12 - store.list().size());

  metajit_test::ProcessResult prune = run_cli(cache, "cache prune --max-size 0");
  INFO(prune.output);
  CHECK(prune.exit_code == 0);
  CHECK_THAT(prune.output, Contains("0 left"));
  CHECK(store.list().empty());
}

TEST_CASE("a read-only cache gives one warning and the program still runs",
          "[cache][process][degraded]") {
  // Without root a mode-0500 directory is read-only; as root only a read-only mount is.
  const bool as_root = ::geteuid() == 0;
  if (as_root && !tmpfs_can_be_mounted())
    metajit_test::skip_test(
        "a read-only cache directory: running as root, only a read-only mount is one, and "
        "mounting a tmpfs is not allowed here (needs CAP_SYS_ADMIN)");
  metajit_test::TempDir tmp;
  const fs::path mnt = tmp.path() / "ro", private_tmp = tmp.path() / "private";
  fs::create_directories(private_tmp);
  ScopedTmpfs fs_ro(mnt, "8m");
  if (as_root) {
    REQUIRE(fs_ro.mounted());
    REQUIRE(fs_ro.remount_read_only());
  } else {
    fs::permissions(mnt, fs::perms::owner_read | fs::perms::owner_exec);
  }
  ProgramRun r = run_program(mnt, 3, "TMPDIR=" + shell_quote(private_tmp.string()));
  INFO(r.output);
  CHECK(r.ok);
  CHECK(r.compiled == 3);
  CHECK(count_occurrences(r.output, "metajit: warning") == 1);
  CHECK_THAT(r.output, Contains("private temporary directory"));
  CHECK(count_entries(private_tmp) == 0);  // the private cache is removed at exit

  // Given explicitly to the CLI, a cache that cannot be written is a clear error.
  write_file(tmp.path() / "m.json", R"({"format":"metajit-manifest","version":1,"kernels":[]})");
  metajit_test::ProcessResult warm =
      run_cli(mnt, "cache warm " + shell_quote((tmp.path() / "m.json").string()));
  CHECK(warm.exit_code == 2);
  CHECK_THAT(warm.output, Contains(mnt.string()));
  CHECK(count_occurrences(warm.output, "\n") == 1);
  if (!fs_ro.mounted()) fs::permissions(mnt, fs::perms::owner_all);
}

// The deployment README "Cache" recommends: warm a cache, mount it read-only, run. Programs load
// every kernel without a warning; each command that must write exits 2 naming the path and
// "read-only file system" and changes nothing; the read-only commands work; doctor calls it
// fine (issue 26: warm and clear reported success, every process warned about statistics).
TEST_CASE("a read-only warm cache: programs load from it, writing commands refuse it",
          "[cache][process][degraded]") {
  if (!tmpfs_can_be_mounted())
    metajit_test::skip_test(
        "a read-only mount needs a tmpfs, and mounting one is not allowed here (needs root "
        "with CAP_SYS_ADMIN)");
  metajit_test::TempDir tmp;
  const fs::path mnt = tmp.path() / "warm", manifest = tmp.path() / "m.json",
                 private_tmp = tmp.path() / "private";
  fs::create_directories(private_tmp);
  ScopedTmpfs fs_ro(mnt, "16m");
  REQUIRE(fs_ro.mounted());
  ProgramRun warm = run_program(mnt, 3, "METAJIT_RECORD=" + shell_quote(manifest.string()));
  INFO(warm.output);
  REQUIRE(warm.ok);
  REQUIRE(warm.compiled == 3);
  const size_t entries = CacheStore(mnt).list().size();
  REQUIRE(entries >= 3);
  REQUIRE(fs_ro.remount_read_only());

  ProgramRun r = run_program(mnt, 3, "TMPDIR=" + shell_quote(private_tmp.string()));
  INFO(r.output);
  CHECK(r.ok);
  CHECK(r.compiled == 0);
  CHECK(r.disk_hits >= 3);
  CHECK(count_occurrences(r.output, "metajit: warning") == 0);
  ProgramRun info = run_program(mnt, 3, "METAJIT_LOG=info");
  CHECK_THAT(info.output, Contains("read-only") && Contains("in memory"));

  for (const std::string& cmd :
       {std::string("cache clear"), std::string("cache prune --max-size 0"),
        "cache warm " + shell_quote(manifest.string()),
        std::string("cache clear --older-than 1s")}) {
    metajit_test::ProcessResult p = run_cli(mnt, cmd);
    INFO(cmd << ": " << p.output);
    CHECK(p.exit_code == 2);
    CHECK_THAT(p.output, Contains(mnt.string()) && Contains("read-only file system"));
  }
  CHECK(CacheStore(mnt).list().size() == entries);
  for (const char* cmd : {"cache list", "cache stats", "cache verify", "cache path"}) {
    metajit_test::ProcessResult p = run_cli(mnt, cmd);
    INFO(cmd << ": " << p.output);
    CHECK(p.exit_code == 0);
    CHECK_FALSE(Contains("warning").match(p.output));
  }
  metajit_test::ProcessResult doctor = run_cli(mnt, "doctor");
  INFO(doctor.output);
  CHECK_THAT(doctor.output, Contains("read-only file system: fine for deployment"));
  CHECK_FALSE(Contains("chmod u+w").match(doctor.output));
  CHECK(count_entries(private_tmp) == 0);
}

TEST_CASE("a full cache gives one warning and the program still runs",
          "[cache][process][degraded]") {
  if (!tmpfs_can_be_mounted())
    metajit_test::skip_test(
        "filling a file system needs a small tmpfs, and mounting one is not allowed here (needs "
        "root with CAP_SYS_ADMIN)");
  metajit_test::TempDir tmp;
  const fs::path mnt = tmp.path() / "full", private_tmp = tmp.path() / "private";
  fs::create_directories(private_tmp);
  ScopedTmpfs small(mnt, "2m");
  REQUIRE(small.mounted());
  fs::create_directories(mnt / "cache");
  metajit_test::run_command("dd if=/dev/zero of=" + shell_quote((mnt / "fill").string()) +
                            " bs=64k 2>/dev/null");
  ProgramRun r = run_program(mnt / "cache", 3, "TMPDIR=" + shell_quote(private_tmp.string()));
  INFO(r.output);
  CHECK(r.ok);
  CHECK(r.compiled == 3);
  CHECK(count_occurrences(r.output, "metajit: warning") == 1);
  CHECK_THAT(r.output, Contains("full"));
  CHECK(count_entries(private_tmp) == 0);
}

TEST_CASE("a group-writable cache root is refused, naming the path and why",
          "[cache][process][security]") {
  metajit_test::TempDir tmp;
  const fs::path cache = tmp.path() / "cache", manifest = tmp.path() / "m.json";
  write_file(manifest, R"({"format":"metajit-manifest","version":1,"kernels":[]})");
  fs::create_directories(cache);
  fs::permissions(cache, fs::perms::owner_all | fs::perms::group_all);  // 0770
  ProgramRun r = run_program(cache, 2);
  INFO(r.output);
  CHECK(r.ok);  // runs, with a private cache
  CHECK(count_occurrences(r.output, "metajit: warning") == 1);
  CHECK_THAT(r.output, Contains(cache.string()) && Contains("writable by group or others"));
  CHECK_FALSE(fs::exists(cache / "v1"));  // nothing written into it
  metajit_test::ProcessResult warm = run_cli(cache, "cache warm " + shell_quote(manifest.string()));
  CHECK(warm.exit_code == 2);
  CHECK_THAT(warm.output, Contains("refusing") && Contains("writable by group or others"));
  CHECK(run_cli(cache, "cache verify").exit_code == 1);
}

TEST_CASE("a foreign-owned cache root is refused, naming the path and why",
          "[cache][process][security]") {
  if (::geteuid() != 0)
    metajit_test::skip_test("giving a directory to another user needs root (CI runs as root)");
  metajit_test::TempDir tmp;
  const fs::path cache = tmp.path() / "cache", manifest = tmp.path() / "m.json";
  write_file(manifest, R"({"format":"metajit-manifest","version":1,"kernels":[]})");
  fs::create_directories(cache);
  fs::permissions(cache, fs::perms::owner_all);
  REQUIRE(::chown(cache.c_str(), 65534, 65534) == 0);
  ProgramRun r = run_program(cache, 2);
  INFO(r.output);
  CHECK(r.ok);
  CHECK(count_occurrences(r.output, "metajit: warning") == 1);
  CHECK_THAT(r.output, Contains(cache.string()) && Contains("owned by uid 65534"));
  CHECK_FALSE(fs::exists(cache / "v1"));
  metajit_test::ProcessResult warm = run_cli(cache, "cache warm " + shell_quote(manifest.string()));
  CHECK(warm.exit_code == 2);
  CHECK_THAT(warm.output, Contains("owned by uid 65534"));
}
