// Cold and warm: in a fresh cache directory the first process compiles; a second process
// running the same program compiles nothing and loads every kernel from disk.
#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <regex>

#include "cache/cache_store.h"
#include "support/files.h"
#include "support/processes.h"

namespace {

struct RunStats {
  unsigned long long compiled = 0, disk_hits = 0, launched = 0;
  std::string checksum;
};

RunStats run_program(const std::string& cache_dir) {
  auto r = metajit_test::run_command(
      "METAJIT_CACHE_DIR=" + metajit_test::shell_quote(cache_dir) + " " +
      metajit_test::shell_quote(metajit_test::test_program("cold_warm_program")));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(
      r.output, m, std::regex("compiled=(\\d+) disk_hits=(\\d+) launched=(\\d+) checksum=(\\S+)")));
  return {std::stoull(m[1]), std::stoull(m[2]), std::stoull(m[3]), m[4]};
}

}  // namespace

TEST_CASE("a second process compiles nothing", "[cache][process]") {
  metajit_test::TempDir dir;
  RunStats cold = run_program(dir.path().string());
  CHECK(cold.compiled > 0);
  CHECK(cold.disk_hits == 0);
  RunStats warm = run_program(dir.path().string());
  CHECK(warm.compiled == 0);
  CHECK(warm.disk_hits == cold.compiled);
  CHECK(warm.launched == cold.launched);
  CHECK(warm.checksum == cold.checksum);
  // The entries are on disk where docs/design.md §6 says.
  size_t entries = 0;
  for (const auto& shard : std::filesystem::directory_iterator(dir.path() / "v1")) {
    if (shard.path().filename().string().size() != 2) continue;
    for (const auto& e : std::filesystem::directory_iterator(shard)) {
      CHECK(std::filesystem::exists(e.path() / "kernel.so"));
      CHECK(std::filesystem::exists(e.path() / "kernel.cc"));
      CHECK(std::filesystem::exists(e.path() / "meta.json"));
      ++entries;
    }
  }
  CHECK(entries == cold.compiled);
}

TEST_CASE("processes started together compile each kernel once", "[cache][process]") {
  metajit_test::TempDir dir;
  RunStats single = run_program((dir.path() / "alone").string());
  const std::string shared = (dir.path() / "shared").string();
  std::string cmd;
  for (int i = 0; i < 4; ++i)
    cmd += "METAJIT_CACHE_DIR=" + metajit_test::shell_quote(shared) + " " +
           metajit_test::shell_quote(metajit_test::test_program("cold_warm_program")) + " > " +
           metajit_test::shell_quote(shared + "." + std::to_string(i) + ".out") + " & ";
  cmd += "wait";
  auto r = metajit_test::run_command(cmd);
  REQUIRE(r.exit_code == 0);
  metajit::CacheStore store(shared);
  CHECK(store.read_counters().compiles == single.compiled);
  CHECK(store.list().size() == single.compiled);
  for (int i = 0; i < 4; ++i) {
    const std::string text = metajit_test::read_file(shared + "." + std::to_string(i) + ".out");
    CHECK(text.find("checksum=" + single.checksum) != std::string::npos);
  }
}
