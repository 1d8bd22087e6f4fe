// The remote kernel cache across processes and "machines" (two cache directories stand in for
// two machines) against a real redis-server the tests start and stop (README "Sharing kernels
// across machines").
#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>
#include <string>

#include "support/files.h"
#include "support/processes.h"
#include "support/redis_server.h"

namespace fs = std::filesystem;
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

}  // namespace

TEST_CASE("machine B gets machine A's 20 kernels from the remote: 20 hits, 0 compiles",
          "[remote]") {
  RedisServer::require();
  RedisServer server;
  metajit_test::TempDir tmp;
  const fs::path key = tmp.path() / "writer.key";
  REQUIRE(metajit_test::run_command(shell_quote(metajit_test::cli_path().string()) +
                                    " remote keygen fleet-1 -o " + shell_quote(key.string()))
              .exit_code == 0);
  const std::string common = "METAJIT_REMOTE=" + shell_quote(server.url()) +
                             " METAJIT_REMOTE_TRUSTED_KEYS=" + shell_quote(key.string() + ".pub");
  const std::string program = shell_quote(metajit_test::test_program("many_kernels_program"));
  FleetRun a = parse_run(metajit_test::run_command(
      common + " METAJIT_CACHE_DIR=" + shell_quote((tmp.path() / "A").string()) +
      " METAJIT_REMOTE_MODE=readwrite METAJIT_REMOTE_SIGNING_KEY=" + shell_quote(key.string()) +
      " " + program + " 20"));
  INFO(a.output);
  REQUIRE(a.ok);
  CHECK(a.compiled == 20);
  CHECK(a.remote_misses == 20);
  FleetRun b = parse_run(metajit_test::run_command(
      common + " METAJIT_CACHE_DIR=" + shell_quote((tmp.path() / "B").string()) + " " + program +
      " 20"));
  INFO(b.output);
  REQUIRE(b.ok);
  CHECK(b.compiled == 0);
  CHECK(b.remote_hits == 20);
  CHECK(b.remote_rejected == 0);
  CHECK(b.remote_errors == 0);
}
