// The `metajit` command (docs/api.md "Command line"): every subcommand, its output, and that every
// mistake becomes exactly one "metajit: ..." line on stderr with exit status 1 (2 for internal
// failures). The binary runs as a separate process against a private --cache-dir.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/checksum.h"
#include "cache/cache_store.h"
#include "runtime/compiler_driver.h"
#include "runtime/toolchain.h"
#include "support/files.h"
#include "support/processes.h"
#include "support/shared_object.h"

using namespace metajit;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
namespace fs = std::filesystem;

namespace {

const char* kSource = "extern \"C\" int metajit_cli_test_fn() { return 7; }\n";

using metajit_test::cli_path;
using metajit_test::read_file;
using metajit_test::shell_quote;

struct CliResult {
  int status = -1;
  std::string out, err;
};

// Runs `metajit args...` with stdout and stderr kept apart; `env` is prepended (VAR=value ...).
CliResult run_cli(const std::vector<std::string>& args, const std::string& env = "") {
  static metajit_test::TempDir io;
  std::string cmd = env + " " + shell_quote(cli_path().string());
  for (const std::string& a : args) cmd += " " + shell_quote(a);
  const fs::path out = io.path() / "out", err = io.path() / "err";
  cmd += " >" + shell_quote(out.string()) + " 2>" + shell_quote(err.string()) + " </dev/null";
  int raw = std::system(cmd.c_str());
  CliResult r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

// The error contract: exactly one line on stderr, prefixed, and the given status.
void check_error(const CliResult& r, int status, const std::string& fragment) {
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.status == status);
  CHECK_THAT(r.err, StartsWith("metajit: "));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK((!r.err.empty() && r.err.back() == '\n'));
  CHECK_THAT(r.err, Contains(fragment));
}

// kernel.so built once per test process from kSource.
const fs::path& built_object() {
  return metajit_test::built_object(kSource);
}

void install(CacheStore& store, const std::string& key, const std::vector<std::string>& ops) {
  fs::path staging = store.make_staging_dir();
  fs::copy_file(built_object(), staging / "kernel.so");
  std::ofstream(staging / "kernel.cc") << kSource;
  store.install(key, staging, {{"backend", "cpu"}, {"ops", ops}, {"compile_seconds", 0.5}});
}

// Three entries, two of which share the prefix "ab".
struct Populated {
  metajit_test::TempDir dir;
  std::string a = "ab" + xxh3_128_hex(std::string("a")).substr(2);
  std::string b = "ab" + xxh3_128_hex(std::string("b")).substr(2);
  std::string c = "c7" + xxh3_128_hex(std::string("c")).substr(2);
  Populated() {
    CacheStore store(dir.path());
    install(store, a, {"exp", "mul"});
    install(store, b, {"reduce_add"});
    install(store, c, {"reindex", "reduce_max"});
    CacheCounters d;
    d.compiles = 3;
    d.misses = 3;
    d.disk_hits = 2;
    d.compile_seconds = 1.5;
    store.add_counters(d);
  }
  std::vector<std::string> args(std::vector<std::string> rest) const {
    rest.insert(rest.begin(), {"--cache-dir", dir.path().string()});
    return rest;
  }
};

}  // namespace

TEST_CASE("metajit --version and --help print to stdout and succeed", "[cli]") {
  CliResult v = run_cli({"--version"});
  CHECK(v.status == 0);
  CHECK_THAT(v.out, StartsWith("metajit ") && Contains("."));
  CHECK(v.err.empty());
  CliResult h = run_cli({"--help"});
  CHECK(h.status == 0);
  CHECK_THAT(h.out, Contains("doctor") && Contains("cache") && Contains("--cache-dir"));
  CliResult ch = run_cli({"cache", "--help"});
  CHECK(ch.status == 0);
  CHECK_THAT(ch.out, Contains("list") && Contains("show") && Contains("clear") && Contains("warm"));
}

TEST_CASE("command-line mistakes are one line on stderr and exit status 1", "[cli][errors]") {
  metajit_test::TempDir tmp;
  const std::string d = tmp.path().string();
  check_error(run_cli({}), 1, "subcommand");
  check_error(run_cli({"frobnicate"}), 1, "unknown command 'frobnicate'");
  check_error(run_cli({"--bogus", "cache", "path"}), 1, "--bogus");
  check_error(run_cli({"--cache-dir", d, "cache"}), 1, "subcommand");
  check_error(run_cli({"--cache-dir", d, "cache", "frob"}), 1, "'frob'");
  check_error(run_cli({"--cache-dir", d, "cache", "list", "extra"}), 1, "'extra'");
  check_error(run_cli({"--cache-dir", d, "cache", "list", "--bogus"}), 1, "--bogus");
  check_error(run_cli({"--cache-dir"}), 1, "cache-dir");
  check_error(run_cli({"--cache-dir", "", "cache", "path"}), 1, "--cache-dir");
  check_error(run_cli({"--cache-dir", d, "cache", "show"}), 1, "KEY");
  check_error(run_cli({"--cache-dir", d, "cache", "clear", "--older-than", "soon"}), 1,
              "'soon' is not a duration");
  check_error(run_cli({"--cache-dir", d, "cache", "clear", "--older-than", "-3d"}), 1,
              "older-than");
  // Found by fuzzing: a finite number of days that is no finite number of seconds.
  check_error(run_cli({"--cache-dir", d, "cache", "clear", "--older-than", "1e308d"}), 1,
              "'1e308d' is not a duration");
  check_error(run_cli({"--cache-dir", d, "cache", "prune", "--max-size", "10Q"}), 1,
              "'10Q' is not a size");
  for (const char* not_a_size : {"5i", "5iB", "5KiBi"})
    check_error(run_cli({"--cache-dir", d, "cache", "prune", "--max-size", not_a_size}), 1,
                std::string("'") + not_a_size + "' is not a size");
  check_error(run_cli({"--cache-dir", d, "cache", "warm"}), 1, "MANIFEST");
  check_error(run_cli({"--cache-dir", d, "cache", "warm", "m.json", "-j", "0"}), 1, "-j 0");
  check_error(run_cli({"--cache-dir", d, "cache", "warm", "m.json", "-j", "many"}), 1, "many");
  // A malformed environment variable is the user's to fix too.
  check_error(run_cli({"--cache-dir", d, "cache", "path"}, "METAJIT_LOG=loud"), 1, "METAJIT_LOG");
}

TEST_CASE("metajit cache path follows --cache-dir, else METAJIT_CACHE_DIR", "[cli]") {
  metajit_test::TempDir a, b;
  CliResult r = run_cli({"--cache-dir", a.path().string(), "cache", "path"},
                        "METAJIT_CACHE_DIR=" + shell_quote(b.path().string()));
  CHECK(r.status == 0);
  CHECK(r.out == a.path().string() + "\n");
  r = run_cli({"cache", "path"}, "METAJIT_CACHE_DIR=" + shell_quote(b.path().string()));
  CHECK(r.status == 0);
  CHECK(r.out == b.path().string() + "\n");
}

TEST_CASE("an empty or missing cache lists nothing and has zero stats", "[cli]") {
  metajit_test::TempDir tmp;
  for (const fs::path& dir : {tmp.path(), tmp.path() / "not-created-yet"}) {
    CliResult list = run_cli({"--cache-dir", dir.string(), "cache", "list"});
    CHECK(list.status == 0);
    CHECK_THAT(list.out, Contains("no kernels cached"));
    CliResult json = run_cli({"--cache-dir", dir.string(), "cache", "list", "--json"});
    REQUIRE(json.status == 0);
    CHECK(nlohmann::json::parse(json.out) == nlohmann::json::array());
    CliResult stats = run_cli({"--cache-dir", dir.string(), "cache", "stats", "--json"});
    REQUIRE(stats.status == 0);
    nlohmann::json s = nlohmann::json::parse(stats.out);
    CHECK(s["entries"] == 0);
    CHECK(s["bytes"] == 0);
    CHECK(s["compiles"] == 0);
  }
  CHECK_FALSE(fs::exists(tmp.path() / "not-created-yet"));  // looking creates nothing
}

TEST_CASE("metajit cache list and stats describe the entries", "[cli]") {
  Populated cache;
  CliResult list = run_cli(cache.args({"cache", "list"}));
  REQUIRE(list.status == 0);
  CHECK_THAT(list.out,
             Contains("KEY") && Contains(cache.a) && Contains(cache.b) && Contains(cache.c));
  CHECK_THAT(list.out, Contains("exp,mul") && Contains("reindex,reduce_max") && Contains("cpu"));

  CliResult json = run_cli(cache.args({"cache", "list", "--json"}));
  REQUIRE(json.status == 0);
  nlohmann::json arr = nlohmann::json::parse(json.out);
  REQUIRE(arr.is_array());
  REQUIRE(arr.size() == 3);
  uint64_t bytes = 0;
  std::vector<std::string> keys;
  for (const auto& e : arr) {
    keys.push_back(e["key"]);
    CHECK(e["backend"] == "cpu");
    CHECK(e["bytes"].get<uint64_t>() > 0);
    CHECK(e["compile_seconds"].get<double>() == Approx(0.5));
    CHECK(e["last_used"].get<int64_t>() > 0);
    bytes += e["bytes"].get<uint64_t>();
  }
  std::vector<std::string> sorted = {cache.a, cache.b, cache.c};
  std::sort(sorted.begin(), sorted.end());
  CHECK(keys == sorted);  // sorted by key
  for (const auto& e : arr)
    if (e["key"] == cache.a) CHECK(e["ops"] == nlohmann::json({"exp", "mul"}));

  CliResult stats = run_cli(cache.args({"cache", "stats", "--json"}));
  REQUIRE(stats.status == 0);
  nlohmann::json s = nlohmann::json::parse(stats.out);
  CHECK(s["entries"] == 3);
  CHECK(s["bytes"] == bytes);
  CHECK(s["compiles"] == 3);
  CHECK(s["misses"] == 3);
  CHECK(s["disk_hits"] == 2);
  CHECK(s["compile_seconds"].get<double>() == Approx(1.5));
  CHECK(s["cache_dir"] == cache.dir.path().string());

  CliResult table = run_cli(cache.args({"cache", "stats"}));
  REQUIRE(table.status == 0);
  CHECK_THAT(table.out, Contains("entries") && Contains("3") && Contains("compiles") &&
                            Contains(std::to_string(bytes) + " bytes"));
}

TEST_CASE("metajit cache show prints a kernel's source or meta.json by key prefix", "[cli]") {
  Populated cache;
  CliResult src = run_cli(cache.args({"cache", "show", cache.c.substr(0, 3)}));
  REQUIRE(src.status == 0);
  CHECK(src.out == kSource);
  CliResult full = run_cli(cache.args({"cache", "show", cache.a}));
  CHECK(full.status == 0);
  CHECK(full.out == kSource);

  CliResult meta = run_cli(cache.args({"cache", "show", cache.b.substr(0, 4), "--meta"}));
  REQUIRE(meta.status == 0);
  nlohmann::json m = nlohmann::json::parse(meta.out);
  CHECK(m["key"] == cache.b);
  CHECK(m["ops"] == nlohmann::json({"reduce_add"}));
  CHECK(m.contains("so_checksum"));

  check_error(run_cli(cache.args({"cache", "show", "ab"})), 1, "ambiguous");
  CliResult amb = run_cli(cache.args({"cache", "show", "ab"}));
  CHECK_THAT(amb.err, Contains(cache.a) && Contains(cache.b));
  check_error(run_cli(cache.args({"cache", "show", "0123"})), 1, "no cache entry matches '0123'");
  check_error(run_cli(cache.args({"cache", "show", "../../etc/passwd"})), 1, "not hexadecimal");
  check_error(run_cli(cache.args({"cache", "show", "abz"})), 1, "not hexadecimal");
  check_error(run_cli(cache.args({"cache", "show", "a\nb"})), 1, "not hexadecimal");
}

TEST_CASE("metajit cache clear removes entries, optionally only old ones", "[cli]") {
  Populated cache;
  CliResult keep = run_cli(cache.args({"cache", "clear", "--older-than", "7d"}));
  REQUIRE(keep.status == 0);
  CHECK_THAT(keep.out, Contains("removed 0"));
  CHECK(CacheStore(cache.dir.path()).list().size() == 3);

  CliResult all = run_cli(cache.args({"cache", "clear"}));
  REQUIRE(all.status == 0);
  CHECK_THAT(all.out, Contains("removed 3"));
  CHECK(CacheStore(cache.dir.path()).list().empty());
  CliResult list = run_cli(cache.args({"cache", "list", "--json"}));
  CHECK(nlohmann::json::parse(list.out).empty());
}

TEST_CASE("cache prune, verify and export on a populated cache", "[cli]") {
  Populated cache;
  CliResult verify = run_cli(cache.args({"cache", "verify"}));
  CHECK(verify.status == 0);
  CHECK_THAT(verify.out, Contains("3 entries checked") && Contains("all good"));

  // The test entries were installed without a kernel spec: export skips them, saying why.
  CliResult exp = run_cli(cache.args({"cache", "export"}));
  CHECK(exp.status == 0);
  CHECK(nlohmann::json::parse(exp.out)["kernels"].empty());
  CHECK_THAT(exp.err, Contains("exported 0 kernels") && Contains("3 unreadable entries skipped"));

  CliResult keep = run_cli(cache.args({"cache", "prune", "--max-size", "1G"}));
  CHECK(keep.status == 0);
  CHECK_THAT(keep.out, Contains("evicted 0 entries") && Contains("3 left"));
  CliResult prune = run_cli(cache.args({"cache", "prune", "--max-size", "0"}));
  CHECK(prune.status == 0);
  CHECK_THAT(prune.out, Contains("evicted 3 entries") && Contains("0 left"));
  CHECK(CacheStore(cache.dir.path()).list().empty());
  CliResult stats = run_cli(cache.args({"cache", "stats", "--json"}));
  CHECK(nlohmann::json::parse(stats.out)["evictions"] == 3);
}

TEST_CASE("cache warm rejects manifests that are missing or malformed", "[cli][errors]") {
  metajit_test::TempDir tmp;
  const std::string d = tmp.path().string();
  auto manifest = [&](const std::string& name, const std::string& text) {
    std::ofstream(tmp.path() / name) << text;
    return (tmp.path() / name).string();
  };
  auto warm = [&](const std::string& path) {
    return run_cli({"--cache-dir", d + "/cache", "cache", "warm", path});
  };
  check_error(warm(d + "/missing.json"), 1, "cannot be read");
  check_error(warm(manifest("bad.json", "{not json")), 1, "not valid JSON");
  check_error(warm(manifest("other.json", R"({"format":"something-else"})")), 1,
              "not a metajit manifest");
  check_error(warm(manifest("v9.json", R"({"format":"metajit-manifest","version":9})")), 1,
              "version");
  check_error(warm(manifest("nokernels.json", R"({"format":"metajit-manifest","version":1})")), 1,
              "kernels");
  check_error(warm(manifest("badspec.json", R"({"format":"metajit-manifest","version":1,
              "kernels":[{"key":"ab","backend":"cpu","spec":{"version":1}}]})")),
              1, "kernels[0]");
  check_error(warm(manifest("backend.json", R"({"format":"metajit-manifest","version":1,
              "kernels":[{"key":"ab","backend":"tpu","spec":{}}]})")),
              1, "'tpu' is not a backend");
  // An empty manifest is fine: nothing to do.
  CliResult empty =
      warm(manifest("empty.json", R"({"format":"metajit-manifest","version":1,"kernels":[]})"));
  CHECK(empty.status == 0);
  CHECK_THAT(empty.out, Contains("0 kernels"));
  check_error(run_cli({"--cache-dir", d, "cache", "export", "-o", d + "/no/such/dir/m.json"}), 1,
              "cache export");
}

TEST_CASE("an unusable cache is an internal failure: one line, exit status 2", "[cli][errors]") {
  metajit_test::TempDir tmp;
  std::ofstream(tmp.path() / "v1") << "not a directory";
  check_error(run_cli({"--cache-dir", tmp.path().string(), "cache", "list"}), 2, "v1");
  check_error(run_cli({"--cache-dir", tmp.path().string(), "cache", "stats"}), 2, "v1");
}

TEST_CASE("metajit doctor checks the toolchain and the cache", "[cli][doctor]") {
  metajit_test::TempDir tmp;
  const std::string d = tmp.path().string();
  CliResult text = run_cli({"--cache-dir", d, "doctor"});
  INFO(text.out << text.err);
  CHECK(text.status == 0);
  CHECK_THAT(text.out, Contains("compiler") && Contains("openmp") && Contains("nvcc") &&
                           Contains("cache dir") && Contains("free space") &&
                           Contains("no problems found"));

  CliResult json = run_cli({"--cache-dir", d, "doctor", "--json"});
  REQUIRE(json.status == 0);
  nlohmann::json j = nlohmann::json::parse(json.out);
  CHECK(j["ok"] == true);
  CHECK(j["problems"] == 0);
  CHECK(j["compiler"]["path"].get<std::string>().size() > 0);
  CHECK_THAT(j["compiler"]["target"].get<std::string>(), Contains("-m"));
  std::vector<std::string> names;
  for (const auto& c : j["checks"]) names.push_back(c["name"]);
  for (const char* want :
       {"compiler", "target", "openmp", "nvcc", "cache dir", "free space", "entries"})
    CHECK(std::find(names.begin(), names.end(), want) != names.end());
  // The OpenMP line names the kernels' thread setting; METAJIT_JOBS is compile jobs (issue 26).
  CliResult omp = run_cli({"--cache-dir", d, "doctor"}, "OMP_NUM_THREADS=1 METAJIT_JOBS=3");
  INFO(omp.out);
  CHECK_THAT(omp.out, Contains("ran on 1 thread (OMP_NUM_THREADS=1; compile jobs at once: "
                               "METAJIT_JOBS=3)"));
}

TEST_CASE("metajit doctor reports problems with a fix and exit status 1", "[cli][doctor]") {
  metajit_test::TempDir tmp;
  const std::string d = tmp.path().string();
  CliResult no_cc = run_cli({"--cache-dir", d, "doctor"}, "METAJIT_CXX=/nonexistent/metajit-cc");
  CHECK(no_cc.status == 1);
  CHECK_THAT(no_cc.out,
             Contains("/nonexistent/metajit-cc") && Contains("fix:") && Contains("problem"));

  fs::permissions(tmp.path(), fs::perms::all);  // 0777: not a safe cache root
  CliResult open_dir = run_cli({"--cache-dir", d, "doctor", "--json"});
  CHECK(open_dir.status == 1);
  nlohmann::json j = nlohmann::json::parse(open_dir.out);
  CHECK(j["ok"] == false);
  bool found = false;
  for (const auto& c : j["checks"])
    if (c["name"] == "cache dir") {
      found = true;
      CHECK(c["status"] == "problem");
      CHECK_THAT(c["fix"].get<std::string>(), Contains("chmod 700"));
    }
  CHECK(found);
}
