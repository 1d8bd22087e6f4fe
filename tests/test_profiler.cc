// The profiler: profile_report()'s table read back as data (one row per kernel, calls, ops,
// bytes, times, compile column, order), switching it on and off, and METAJIT_PROFILE=1 printing
// the table at exit of a child program. No timing thresholds: times only have to be positive.
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <regex>
#include <sstream>

#include "runtime/profiler.h"
#include "support/files.h"
#include "support/processes.h"
#include "support/scoped_env.h"

using namespace metajit;

namespace {

struct Row {
  std::string key, ops, compile;
  uint64_t calls = 0;
  double total_ns = 0, mean_ns = 0, bytes = 0, share = 0;
  std::string gbps;
};

struct Report {
  std::string header;
  std::vector<Row> rows;
  std::vector<std::string> footer;
  bool has_table = false;
};

double parse_time(const std::string& s) {
  std::istringstream in(s);
  double v = -1;
  std::string unit;
  in >> v >> unit;
  if (unit == "ns") return v;
  if (unit == "us") return v * 1e3;
  if (unit == "ms") return v * 1e6;
  if (unit == "s") return v * 1e9;
  FAIL("not a time: '" << s << "'");
  return -1;
}

double parse_bytes(std::string s) {
  if (!s.empty() && s[0] == '~') s = s.substr(1);
  std::istringstream in(s);
  double v = -1;
  std::string unit;
  in >> v >> unit;
  if (unit == "B") return v;
  if (unit == "KiB") return v * 1024;
  if (unit == "MiB") return v * 1024 * 1024;
  if (unit == "GiB") return v * 1024 * 1024 * 1024;
  FAIL("not a size: '" << s << "'");
  return -1;
}

// Cells are separated by two or more spaces; no cell holds two spaces in a row.
std::vector<std::string> cells(const std::string& line) {
  static const std::regex sep(" {2,}");
  std::vector<std::string> out;
  for (std::sregex_token_iterator it(line.begin(), line.end(), sep, -1), end; it != end; ++it)
    if (!it->str().empty()) out.push_back(*it);
  return out;
}

// Reads the report from `text` (which may hold other output around it).
Report parse(const std::string& text) {
  Report r;
  std::istringstream in(text);
  std::string line;
  enum { Before, Rows, After } at = Before;
  while (std::getline(in, line)) {
    if (at == Before) {
      if (line.rfind("metajit profile:", 0) == 0) r.header = line;
      if (line.rfind("key ", 0) == 0) {
        REQUIRE(cells(line) == std::vector<std::string>{"key", "ops", "calls", "total", "mean",
                                                        "compile", "bytes/call", "GB/s", "%"});
        r.has_table = true;
        at = Rows;
      }
    } else if (at == Rows && line.rfind("top: ", 0) != 0) {
      std::vector<std::string> c = cells(line);
      INFO(line);
      REQUIRE(c.size() == 9);
      Row row;
      row.key = c[0];
      row.ops = c[1];
      row.calls = std::stoull(c[2]);
      row.total_ns = parse_time(c[3]);
      row.mean_ns = parse_time(c[4]);
      row.compile = c[5];
      row.bytes = parse_bytes(c[6]);
      row.gbps = c[7];
      row.share = std::stod(c[8]);
      r.rows.push_back(row);
    } else {
      at = After;
      if (!line.empty()) r.footer.push_back(line);
    }
  }
  return r;
}

const Row* find_row(const Report& r, const std::string& key) {
  for (const Row& row : r.rows)
    if (key.rfind(row.key, 0) == 0) return &row;
  return nullptr;
}

std::vector<float> values(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * float(i % 7) - 1.0f;
  return v;
}

}  // namespace

TEST_CASE("fused ops are abbreviated with counts", "[profiler]") {
  CHECK(abbreviate_ops({"broadcast_to", "broadcast_to", "binary.mul", "reduce.add(axes=1)",
                        "unary.relu"}) == "broadcast_to×2 mul reduce.add relu");
  CHECK(abbreviate_ops({"reindex", "reduce.max(axes=2,3,keepdims)"}) == "reindex reduce.max");
  CHECK(abbreviate_ops({}) == "");
}

TEST_CASE("the report has one row per kernel: calls, ops, bytes, times, compile, order",
          "[profiler]") {
  // A fresh cache: every kernel here is compiled by this process.
  metajit_test::TempDir cache;
  metajit_test::ScopedEnv env("METAJIT_CACHE_DIR", cache.path().string());
  reset_profile();
  set_profiling(true);
  Var a = array(values(64, 0.5f), {8, 8});      // 256 B
  Var b = array(values(128, 0.25f), {8, 16});   // 512 B
  Var w = array(values(64, 0.125f), {16, 4});   // 256 B
  Var big = array(values(1024, 1.0f), {1024});  // 4 KiB
  struct Case {
    std::function<Var(int)> make;
    int times;
    uint64_t bytes;  // input buffers + output buffer
  };
  // Scalars are i + 1, never 0: x - 0 and x * 0 could fold into another kernel.
  std::vector<Case> cases = {
      {[&](int i) { return relu(a * double(i + 1) + 1.0); }, 3, 256 + 256},
      {[&](int i) { return sum(a - double(i + 1), {1}); }, 5, 256 + 8 * 4},
      {[&](int i) { return matmul(b, w + double(i + 1)); }, 2, 512 + 256 + 8 * 4 * 4},
      {[&](int i) { return exp(big * double(i + 1)); }, 4, 4096 + 4096},
  };
  std::vector<KernelInfo> kernels;
  uint64_t launches = 0;
  for (const Case& c : cases) {
    std::vector<KernelInfo> p = plan({c.make(0)});
    REQUIRE(p.size() == 1);
    kernels.push_back(p[0]);
    for (int i = 0; i < c.times; ++i) eval({c.make(i)});
    launches += uint64_t(c.times);
  }

  const std::string text = profile_report();
  INFO(text);
  Report r = parse(text);
  REQUIRE(r.has_table);
  REQUIRE(r.rows.size() == cases.size());
  CHECK(r.header.find(std::to_string(cases.size()) + " kernels, " + std::to_string(launches) +
                      " launches") != std::string::npos);
  CHECK(r.header.find(std::to_string(cases.size()) + " compiled, 0 from disk") !=
        std::string::npos);
  for (size_t k = 0; k < cases.size(); ++k) {
    const Row* row = find_row(r, kernels[k].key);
    INFO("kernel " << kernels[k].key);
    REQUIRE(row != nullptr);
    CHECK(row->key.size() == 12);
    CHECK(row->calls == uint64_t(cases[k].times));
    CHECK(row->ops == abbreviate_ops(kernels[k].ops));
    CHECK(row->bytes == double(cases[k].bytes));
    CHECK(row->total_ns > 0);
    CHECK(row->mean_ns > 0);
    CHECK(row->compile != "disk");
    CHECK(row->compile != "memory");
    CHECK(parse_time(row->compile) > 0);
  }
  for (size_t k = 1; k < r.rows.size(); ++k) CHECK(r.rows[k - 1].total_ns >= r.rows[k].total_ns);
  double shares = 0;
  for (const Row& row : r.rows) shares += row.share;
  CHECK(std::fabs(shares - 100.0) < 0.5);
  REQUIRE(!r.footer.empty());
  CHECK(r.footer[0].rfind("top: " + r.rows[0].key, 0) == 0);

  // Kernels already in this process's memory table keep their compile time.
  eval({cases[0].make(7)});
  Report again = parse(profile_report());
  const Row* row = find_row(again, kernels[0].key);
  REQUIRE(row != nullptr);
  CHECK(row->calls == uint64_t(cases[0].times) + 1);
  CHECK(row->compile == find_row(r, kernels[0].key)->compile);

  reset_profile();
  CHECK(parse(profile_report()).rows.empty());
  set_profiling(false);
}

TEST_CASE("profiling off records nothing", "[profiler]") {
  reset_profile();
  set_profiling(false);
  Var a = array(values(32, 1.0f), {32});
  eval({exp(a * 0.5)});
  std::string off = profile_report();
  INFO(off);
  CHECK(off.find("profiling is off") != std::string::npos);
  CHECK(off.find("METAJIT_PROFILE=1") != std::string::npos);
  CHECK(off.find("set_profiling(true)") != std::string::npos);
  CHECK(!parse(off).has_table);

  set_profiling(true);
  CHECK(profile_report().find("no kernel launched") != std::string::npos);
  eval({exp(a * 2.0)});
  set_profiling(false);
  eval({exp(a * 3.0)});
  eval({sqrt(a + 4.0)});
  std::string text = profile_report();
  INFO(text);
  Report r = parse(text);
  REQUIRE(r.rows.size() == 1);
  CHECK(r.rows[0].calls == 1);
  CHECK(r.rows[0].bytes == 32 * 4 * 2);
  CHECK(r.header.find("profiling is off now") != std::string::npos);
  reset_profile();
}

TEST_CASE("METAJIT_PROFILE=1 prints the table at exit, and only then", "[profiler][process]") {
  metajit_test::TempDir cache;
  auto run = [&](const std::string& env, const std::string& args) {
    auto res = metajit_test::run_command(
        env + " METAJIT_CACHE_DIR=" + metajit_test::shell_quote(cache.path().string()) + " " +
        metajit_test::shell_quote(metajit_test::test_program("profile_program")) + " " + args);
    INFO(res.output);
    REQUIRE(res.exit_code == 0);
    return res.output;
  };
  auto launched = [](const std::string& out) {
    std::smatch m;
    REQUIRE(std::regex_search(out, m, std::regex("done launched=(\\d+)")));
    return std::stoull(m[1]);
  };
  auto total_calls = [](const Report& r) {
    uint64_t n = 0;
    for (const Row& row : r.rows) n += row.calls;
    return n;
  };

  // Cold: compiled here. The table follows the program's own output (it is printed at exit).
  std::string cold = run("METAJIT_PROFILE=1", "");
  INFO(cold);
  Report rc = parse(cold);
  REQUIRE(rc.has_table);
  CHECK(cold.find("metajit profile:") > cold.find("done launched="));
  CHECK(total_calls(rc) == launched(cold));
  CHECK(rc.rows.size() >= 3);  // softmax, matmul and sum kernels at least
  for (const Row& row : rc.rows) CHECK(parse_time(row.compile) > 0);

  // Warm: the same kernels, loaded from disk.
  std::string warm = run("METAJIT_PROFILE=1", "");
  INFO(warm);
  Report rw = parse(warm);
  CHECK(rw.rows.size() == rc.rows.size());
  for (const Row& row : rw.rows) {
    CHECK(row.compile == "disk");
    const Row* before = find_row(rc, row.key);
    REQUIRE(before != nullptr);
    CHECK(row.calls == before->calls);
    CHECK(row.bytes == before->bytes);
    CHECK(row.ops == before->ops);
  }

  // Without METAJIT_PROFILE nothing is printed.
  std::string quiet = run("env -u METAJIT_PROFILE", "");
  CHECK(quiet.find("metajit profile") == std::string::npos);
  CHECK(!parse(quiet).has_table);
  std::string zero = run("METAJIT_PROFILE=0", "");
  CHECK(zero.find("metajit profile") == std::string::npos);

  // set_profiling(true) in code records, and the program prints the report itself: once.
  std::string own = run("env -u METAJIT_PROFILE", "--report");
  Report ro = parse(own);
  CHECK(ro.rows.size() == rc.rows.size());
  CHECK(total_calls(ro) == launched(own));
  size_t first = own.find("metajit profile:");
  CHECK(first != std::string::npos);
  CHECK(own.find("metajit profile:", first + 1) == std::string::npos);
}
