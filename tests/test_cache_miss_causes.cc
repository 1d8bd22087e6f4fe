// "Why did it compile?" (runtime/miss_cause.h): a kernel that misses the disk cache although the
// same kernel IR was compiled there before says which part of its key changed (compiler,
// target, flags, code generator), in one info line per cause per evaluation, and the cache's
// statistics count misses by cause (`metajit cache stats`). Every case uses a private cache.
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cache/cache_store.h"
#include "codegen/kernel_key.h"
#include "runtime/miss_cause.h"
#include "runtime/toolchain.h"
#include "support/capture_stderr.h"
#include "support/files.h"
#include "support/processes.h"
#include "support/scoped_env.h"
#include "support/skip.h"
#include "support/text.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::CaptureStderr;
using metajit_test::count_occurrences;
using metajit_test::ScopedEnv;
using metajit_test::shell_quote;
namespace fs = std::filesystem;

namespace {

// METAJIT_CXXFLAGS as the test run set it (a sanitizer build puts its flags there), then `extra`.
std::string kernel_flags(const std::string& extra) {
  static const std::string base = [] {
    const char* now = std::getenv("METAJIT_CXXFLAGS");
    return std::string(now ? now : "");
  }();
  return base.empty() ? extra : base + " " + extra;
}

// A private cache for one test case.
struct PrivateCache {
  metajit_test::TempDir dir;
  ScopedEnv env{"METAJIT_CACHE_DIR", (dir.path() / "cache").string()};
  fs::path root() const { return dir.path() / "cache"; }
  CacheCounters counters() const { return CacheStore(root()).read_counters(); }
};

// Evaluates a small graph (one kernel; one kernel per meta-op under METAJIT_OPT_LEVEL=0) and
// returns how many kernels this process compiled for it.
uint64_t evaluate() {
  const uint64_t before = stats().kernels_compiled;
  Var x = array(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Var y = exp(x * 0.5) * x + 1.0;
  eval({y});
  CHECK(y.to_vector<float>()[0] == Approx(std::exp(0.5f) + 1.0f));
  return stats().kernels_compiled - before;
}

// Runs `metajit ARGS` against the process's METAJIT_CACHE_DIR; stdout and stderr together.
metajit_test::ProcessResult run_cli(const std::string& args, const std::string& env = "") {
  return metajit_test::run_command(env + " " + shell_quote(metajit_test::cli_path().string()) +
                                   " " + args);
}

// `metajit cache stats --json` (stderr dropped).
nlohmann::json cli_stats() {
  auto r = metajit_test::run_command("(" + shell_quote(metajit_test::cli_path().string()) +
                                     " cache stats --json 2>/dev/null)");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return nlohmann::json::parse(r.output);
}

// The only record of the kernel-IR index.
fs::path only_index_record(const fs::path& root) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(root / "v1" / "by-ir")) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  return files.front();
}

KeyParts sample_parts() {
  KeyParts p;
  p.key = std::string(32, 'a');
  p.backend = "cpu";
  p.codegen = "cpp-14";
  p.compiler = "/usr/bin/g++";
  p.compiler_version = "g++ (Debian 12.2.0-14) 12.2.0";
  p.compiler_id = std::string(32, '1');
  p.target = "-march=skylake-avx512 -mavx512f -mavx2";
  p.isa = "avx512";
  p.flags = {"-std=c++17", "-O3", "-march=native", "-fPIC", "-mprefer-vector-width=512"};
  return p;
}

}  // namespace

TEST_CASE("explain_miss names the first part of the key that changed", "[miss-cause]") {
  const KeyParts before = sample_parts();
  KeyParts now = before;
  now.key = std::string(32, 'b');

  SECTION("no record: a new kernel") {
    MissExplanation e = explain_miss(nullptr, now);
    CHECK(e.cause == MissCause::New);
    CHECK(e.reason.empty());
  }
  SECTION("the same key again: its entry was removed") {
    now.key = before.key;
    CHECK(explain_miss(&before, now).cause == MissCause::Removed);
  }
  SECTION("a compiler upgrade, with its versions") {
    now.compiler_version = "g++ (Debian 12.3.0-1) 12.3.0";
    now.compiler_id = std::string(32, '2');
    now.flags.push_back("-DX=1");  // the compiler comes first
    MissExplanation e = explain_miss(&before, now);
    CHECK(e.cause == MissCause::Compiler);
    CHECK(e.reason == "the compiler changed (g++ 12.2.0 -> 12.3.0)");
    CHECK(recompile_summary(27, e.reason) ==
          "27 kernels compiled again: the compiler changed (g++ 12.2.0 -> 12.3.0)");
    CHECK(recompile_summary(1, e.reason) ==
          "1 kernel compiled again: the compiler changed (g++ 12.2.0 -> 12.3.0)");
  }
  SECTION("another compiler binary") {
    now.compiler = "/opt/gcc/bin/g++-13";
    now.compiler_version = "g++-13 (GCC) 13.1.0";
    now.compiler_id = std::string(32, '2');
    CHECK(explain_miss(&before, now).reason ==
          "the compiler changed (g++ 12.2.0 -> g++-13 13.1.0)");
    now.compiler_version = before.compiler_version;
    CHECK(explain_miss(&before, now).reason ==
          "the compiler changed (/usr/bin/g++ -> /opt/gcc/bin/g++-13)");
    now.compiler = before.compiler;
    CHECK(explain_miss(&before, now).reason ==
          "the compiler changed (/usr/bin/g++ was replaced: same version, another binary)");
  }
  SECTION("another CPU") {
    now.target = "-march=znver3 -mavx2";
    now.isa = "avx2";
    now.flags.pop_back();  // -mprefer-vector-width=512 follows the target
    MissExplanation e = explain_miss(&before, now);
    CHECK(e.cause == MissCause::Target);
    CHECK(e.reason ==
          "the target changed (avx512 -> avx2; flags: removed -mprefer-vector-width=512)");
    now.isa = before.isa;
    now.flags = before.flags;
    CHECK(explain_miss(&before, now).reason ==
          "the target changed (-march=skylake-avx512 -mavx512f -> -march=znver3)");
  }
  SECTION("the flags") {
    now.flags.push_back("-DA=1");
    MissExplanation e = explain_miss(&before, now);
    CHECK(e.cause == MissCause::Flags);
    CHECK(e.reason == "the compiler flags changed (added -DA=1)");
    KeyParts with_b = before;
    with_b.flags.push_back("-DB=1");
    CHECK(explain_miss(&with_b, now).reason == "the compiler flags changed (-DB=1 -> -DA=1)");
    CHECK(explain_miss(&now, with_b).reason == "the compiler flags changed (-DA=1 -> -DB=1)");
    now.flags = {"-std=c++17", "-O3"};
    CHECK(explain_miss(&before, now).reason ==
          "the compiler flags changed (removed -march=native -fPIC -mprefer-vector-width=512)");
  }
  SECTION("the code generator") {
    now.codegen = "cpp-15";
    MissExplanation e = explain_miss(&before, now);
    CHECK(e.cause == MissCause::Codegen);
    CHECK(e.reason == "the code generator changed (cpp-14 -> cpp-15)");
  }
}

TEST_CASE("key parts survive the index and garbled records are no records", "[miss-cause]") {
  const KeyParts p = sample_parts();
  std::optional<KeyParts> back = key_parts_from_json(key_parts_to_json(p));
  REQUIRE(back);
  CHECK(back->key == p.key);
  CHECK(back->flags == p.flags);
  CHECK(back->compiler_version == p.compiler_version);
  CHECK_FALSE(key_parts_from_json(nlohmann::json::array()));
  nlohmann::json j = key_parts_to_json(p);
  j["flags"] = "-O3";
  CHECK_FALSE(key_parts_from_json(j));
  j = key_parts_to_json(p);
  j.erase("codegen");
  CHECK_FALSE(key_parts_from_json(j));
  // The IR digest does not depend on the toolchain, only on the backend and the IR.
  CHECK(ir_digest("cpu", "ir") == ir_digest("cpu", "ir"));
  CHECK(ir_digest("cpu", "ir") != ir_digest("cuda", "ir"));
  CHECK(ir_digest("cpu", "ir").size() == 32);

  metajit_test::TempDir dir;
  CacheStore store(dir.path());
  const std::string digest = ir_digest("cpu", "some ir");
  CHECK_FALSE(store.read_ir_record(digest));
  store.write_ir_record(digest, key_parts_to_json(p));
  REQUIRE(store.read_ir_record(digest));
  CHECK(key_parts_from_json(*store.read_ir_record(digest))->key == p.key);
  CHECK_FALSE(store.read_ir_record("../" + digest));
  CHECK_THROWS_AS(store.write_ir_record("not hex", {}), CacheError);
  metajit_test::write_file(dir.path() / "v1" / "by-ir" / (digest + ".json"), "{\"key\": ");
  CHECK_FALSE(store.read_ir_record(digest));
}

TEST_CASE("misses by cause persist and old statistics read as zero", "[miss-cause][cli]") {
  metajit_test::TempDir dir;
  CacheStore store(dir.path());
  fs::create_directories(dir.path() / "v1");
  fs::permissions(dir.path() / "v1", fs::perms::owner_all);
  // A stats.json from before misses had causes.
  metajit_test::write_file(dir.path() / "v1" / "stats.json",
                           R"({"misses": 4, "compiles": 4, "compile_seconds": 2.0})");
  CacheCounters c = store.read_counters();
  CHECK(c.misses == 4);
  CHECK(c.misses_new == 0);
  CHECK(c.misses_compiler == 0);
  CacheCounters d;
  d.misses = 3;
  d.misses_flags = 2;
  d.misses_compiler = 1;
  store.add_counters(d);
  store.add_counters(d);
  c = store.read_counters();
  CHECK(c.misses == 10);
  CHECK(c.misses_flags == 4);
  CHECK(c.misses_compiler == 2);
  CHECK(miss_causes_text(c) == "new 0, compiler 2, target 0, flags 4, codegen 0, removed 0");

  ScopedEnv env("METAJIT_CACHE_DIR", dir.path().string());
  nlohmann::json s = cli_stats();
  CHECK(s["misses"] == 10);
  CHECK(s["misses_by_cause"]["flags"] == 4);
  CHECK(s["misses_by_cause"]["compiler"] == 2);
  CHECK(s["misses_by_cause"]["new"] == 0);
  auto text = run_cli("cache stats");
  CHECK(text.exit_code == 0);
  CHECK_THAT(
      text.output,
      Contains("misses by cause  new 0, compiler 2, target 0, flags 4, codegen 0, removed 0"));
}

TEST_CASE("a new kernel counts as new and logs no compiled-again line", "[miss-cause]") {
  PrivateCache cache;
  ScopedEnv flags("METAJIT_CXXFLAGS", kernel_flags("-DMETAJIT_MISS_CAUSE_NEW=1"));
  ScopedEnv log("METAJIT_LOG", "info");
  CaptureStderr err;
  CHECK(evaluate() == 1);
  const std::string text = err.text();
  INFO(text);
  CHECK(count_occurrences(text, "compiled again") == 0);
  CacheCounters c = cache.counters();
  CHECK(c.misses == 1);
  CHECK(c.misses_new == 1);
  // The entry records its key's parts apart; the index points at it.
  const std::vector<CacheEntryInfo> entries = CacheStore(cache.root()).list();
  REQUIRE(entries.size() == 1);
  nlohmann::json meta = CacheStore(cache.root()).read_meta(entries[0].key);
  CHECK(meta["codegen"] == kCodegenVersion);
  CHECK(meta["ir_digest"].get<std::string>().size() == 32);
  CHECK(meta["compiler_id"].get<std::string>().size() == 32);
  CHECK(meta.contains("flags"));
  CHECK(meta.contains("compiler_version"));
  CHECK(meta.contains("target"));
  const fs::path record = only_index_record(cache.root());
  CHECK(record.filename() == meta["ir_digest"].get<std::string>() + ".json");
  nlohmann::json j = nlohmann::json::parse(metajit_test::read_file(record));
  CHECK(j["key"] == entries[0].key);
}

TEST_CASE("new METAJIT_CXXFLAGS compile the kernel again and say so", "[miss-cause]") {
  PrivateCache cache;
  {
    ScopedEnv flags("METAJIT_CXXFLAGS", kernel_flags("-DMETAJIT_MISS_CAUSE_A=1"));
    CHECK(evaluate() == 1);
  }
  ScopedEnv flags("METAJIT_CXXFLAGS", kernel_flags("-DMETAJIT_MISS_CAUSE_B=1"));
  std::string text;
  {
    ScopedEnv log("METAJIT_LOG", "info");
    CaptureStderr err;
    CHECK(evaluate() == 1);
    text = err.text();
  }
  INFO(text);
  CHECK_THAT(text, Contains("metajit: 1 kernel compiled again: the compiler flags changed "
                            "(-DMETAJIT_MISS_CAUSE_A=1 -> -DMETAJIT_MISS_CAUSE_B=1)\n"));
  CHECK(count_occurrences(text, "compiled again") == 1);

  nlohmann::json s = cli_stats();
  CHECK(s["misses"] == 2);
  CHECK(s["misses_by_cause"]["new"] == 1);
  CHECK(s["misses_by_cause"]["flags"] == 1);
  CHECK(s["misses_by_cause"]["compiler"] == 0);
  // The index is not an entry: verify finds nothing wrong, list shows the two kernels.
  auto verify = run_cli("cache verify");
  INFO(verify.output);
  CHECK(verify.exit_code == 0);
  CHECK_THAT(verify.output, Contains("2 entries checked") && Contains("all good"));
}

TEST_CASE("several kernels compiled again for one cause give one line with their count",
          "[miss-cause]") {
  PrivateCache cache;
  ScopedEnv fusion_off("METAJIT_OPT_LEVEL", "0");  // one kernel per meta-op
  uint64_t first = 0;
  {
    ScopedEnv flags("METAJIT_CXXFLAGS", kernel_flags("-DMETAJIT_MISS_CAUSE_MANY_A=1"));
    first = evaluate();
  }
  REQUIRE(first >= 3);
  ScopedEnv flags("METAJIT_CXXFLAGS", kernel_flags("-DMETAJIT_MISS_CAUSE_MANY_B=1"));
  ScopedEnv log("METAJIT_LOG", "info");
  CaptureStderr err;
  CHECK(evaluate() == first);
  const std::string text = err.text();
  INFO(text);
  CHECK(count_occurrences(text, "compiled again") == 1);
  CHECK_THAT(text, Contains(std::to_string(first) +
                            " kernels compiled again: the compiler flags changed"));
  CHECK(cache.counters().misses_flags == first);
  CHECK(cache.counters().misses_new == first);
}

TEST_CASE("another -march in METAJIT_CXXFLAGS is a target change", "[miss-cause]") {
#if defined(__x86_64__)
  // Both targets run on any x86-64 machine with AVX2 (x86-64-v2 has no AVX: the portable path).
  if (!__builtin_cpu_supports("avx2"))
    metajit_test::skip_test("no AVX2 here: kernels built for -march=x86-64-v3 cannot run");
#else
  metajit_test::skip_test("-march=x86-64-v3 and -v2 are x86-64 targets");
#endif
  PrivateCache cache;
  {
    ScopedEnv flags("METAJIT_CXXFLAGS", kernel_flags("-march=x86-64-v3"));
    if (host_toolchain().target.name() != std::string("avx2"))
      WARN("-march=x86-64-v3 gives " << host_toolchain().target.name());
    CHECK(evaluate() == 1);
  }
  ScopedEnv flags("METAJIT_CXXFLAGS", kernel_flags("-march=x86-64-v2"));
  ScopedEnv log("METAJIT_LOG", "info");
  CaptureStderr err;
  CHECK(evaluate() == 1);
  const std::string text = err.text();
  INFO(text);
  CHECK_THAT(text, Contains("1 kernel compiled again: the target changed (avx2 -> portable; "
                            "flags: -march=x86-64-v3 -> -march=x86-64-v2)"));
  CHECK(cache.counters().misses_target == 1);
}

TEST_CASE("a compiler upgrade is named with both versions", "[miss-cause]") {
  PrivateCache cache;
  const std::string real_cxx = host_toolchain().path.string();
  // Two "releases" of one compiler: wrappers that report their own version and compile with g++.
  auto make_compiler = [&](const std::string& release) {
    fs::path dir = cache.dir.path() / ("release-" + release);
    fs::create_directories(dir);
    fs::path cc = dir / "fakecc";
    metajit_test::write_file(cc,
                             "#!/bin/sh\n"
                             "if [ \"$1\" = --version ]; then\n"
                             "  echo 'fakecc (metajit test build) " +
                                 release + "'\n  exit 0\nfi\nexec " + shell_quote(real_cxx) +
                                 " \"$@\"\n");
    fs::permissions(cc, fs::perms::owner_all);
    return cc.string();
  };
  const std::string old_cc = make_compiler("1.0"), new_cc = make_compiler("2.0");
  ScopedEnv flags("METAJIT_CXXFLAGS", kernel_flags("-DMETAJIT_MISS_CAUSE_COMPILER=1"));
  {
    ScopedEnv cxx("METAJIT_CXX", old_cc);
    CHECK(evaluate() == 1);
  }
  ScopedEnv cxx("METAJIT_CXX", new_cc);
  ScopedEnv log("METAJIT_LOG", "info");
  CaptureStderr err;
  CHECK(evaluate() == 1);
  const std::string text = err.text();
  INFO(text);
  CHECK_THAT(text, Contains("1 kernel compiled again: the compiler changed (fakecc 1.0 -> 2.0)"));
  CHECK(cache.counters().misses_compiler == 1);
}

TEST_CASE("cache warm tells of another CPU and a new code generator and removed entries",
          "[miss-cause][process]") {
  PrivateCache cache;
  // A flag of its own for each run of the case (one per section): this process resolves the
  // toolchain afresh, into this cache, and finds no kernel in its memory.
  static int run = 0;
  ScopedEnv flags("METAJIT_CXXFLAGS",
                  kernel_flags("-DMETAJIT_MISS_CAUSE_WARM=" + std::to_string(++run)));
  CHECK(evaluate() == 1);
  const fs::path manifest = cache.dir.path() / "kernels.json";
  auto exported = run_cli("cache export -o " + shell_quote(manifest.string()));
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  auto warm = [&] {
    auto r = run_cli("cache warm " + shell_quote(manifest.string()), "METAJIT_LOG=info");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return r.output;
  };

  SECTION("what -march=native means changed: the target") {
    // What another CPU would make the compiler answer (the toolchain's remembered answers).
    int files = 0;
    for (const auto& e : fs::directory_iterator(cache.root() / "v1" / "toolchains")) {
      nlohmann::json j = nlohmann::json::parse(metajit_test::read_file(e.path()));
      j["resolved_target"] = j["resolved_target"].get<std::string>() + " -mmetajit-other-cpu";
      metajit_test::write_file(e.path(), j.dump());
      ++files;
    }
    REQUIRE(files == 1);
    const std::string out = warm();
    CHECK_THAT(out, Contains("metajit: 1 kernel compiled again: the target changed "
                             "(added -mmetajit-other-cpu)\n"));
    CHECK(cache.counters().misses_target == 1);
  }
  SECTION("the code generator's version changed") {
    // The index as an older code generator would have left it (its entry evicted since).
    const fs::path record = only_index_record(cache.root());
    nlohmann::json j = nlohmann::json::parse(metajit_test::read_file(record));
    const std::string key = j["key"].get<std::string>();
    j["key"] = std::string(32, '0');
    j["codegen"] = "cpp-0";
    metajit_test::write_file(record, j.dump());
    REQUIRE(CacheStore(cache.root()).remove_entry(key));
    const std::string out = warm();
    CHECK_THAT(out, Contains(std::string("1 kernel compiled again: the code generator changed "
                                         "(cpp-0 -> ") +
                             kCodegenVersion + ")"));
    CHECK(cache.counters().misses_codegen == 1);
  }
  SECTION("entries removed, then the whole cache cleared") {
    auto some = run_cli("cache clear --older-than 0s");
    INFO(some.output);
    REQUIRE(some.exit_code == 0);
    CHECK(fs::exists(cache.root() / "v1" / "by-ir"));
    CHECK_THAT(warm(), Contains("1 kernel compiled again: its cache entry had been removed"));
    CHECK(cache.counters().misses_removed == 1);
    // Clearing everything forgets the index too: the next compile is a new kernel.
    auto all = run_cli("cache clear");
    INFO(all.output);
    REQUIRE(all.exit_code == 0);
    CHECK_FALSE(fs::exists(cache.root() / "v1" / "by-ir"));
    CHECK(count_occurrences(warm(), "compiled again") == 0);
    CHECK(cache.counters().misses_new == 2);
  }
}
