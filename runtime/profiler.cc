#include "runtime/profiler.h"

#include <metajit/runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/buffer.h"
#include "base/config.h"
#include "meta_ops/node.h"

namespace metajit {

namespace profiler_detail {
std::atomic<int> state{-1};
}  // namespace profiler_detail

namespace {

struct Row {
  std::vector<std::string> ops;
  uint64_t calls = 0;
  uint64_t total_ns = 0;
  uint64_t bytes_total = 0;
  uint64_t bytes_min = std::numeric_limits<uint64_t>::max(), bytes_max = 0;
  KernelOrigin origin = KernelOrigin::Memory;
  double compile_seconds = 0;
};

struct ProfileTable {
  std::mutex mu;
  std::unordered_map<std::string, Row> rows;  // kernel key -> statistics
};
ProfileTable& table() {
  static ProfileTable* t = new ProfileTable;  // never destroyed: read by the exit report
  return *t;
}

void print_at_exit() {
  try {
    std::string report = profile_report();
    std::fputs(report.c_str(), stderr);
    std::fflush(stderr);
  } catch (...) {
    // Nothing may throw at exit.
  }
}

// METAJIT_PROFILE=1: the table goes to stderr at exit (once, however profiling got switched on).
void print_at_exit_if_asked() {
  bool asked = false;
  try {
    asked = config().profile;
  } catch (...) {
    // A broken environment is reported where it is used.
  }
  if (!asked) return;
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(print_at_exit); });
}

// ---- formatting ----

// Display width of UTF-8 text (every character counts one column).
size_t width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The first `cols` columns of `s`, with "…" as the last one when something was cut.
std::string clip(const std::string& s, size_t cols) {
  if (width(s) <= cols) return s;
  size_t seen = 0, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (seen == cols - 1) break;
      ++seen;
    }
  }
  return s.substr(0, i) + "…";
}

std::string pad_left(const std::string& s, size_t cols) {
  size_t w = width(s);
  return w >= cols ? s : std::string(cols - w, ' ') + s;
}
std::string pad_right(const std::string& s, size_t cols) {
  size_t w = width(s);
  return w >= cols ? s : s + std::string(cols - w, ' ');
}

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string fmt_time(double ns) {
  if (ns < 1e3) return format("%.0f ns", ns);
  if (ns < 1e6) return format("%.1f us", ns / 1e3);
  if (ns < 1e9) return format("%.2f ms", ns / 1e6);
  return format("%.3f s", ns / 1e9);
}

std::string fmt_bytes(double b) {
  if (b < 1024) return format("%.0f B", b);
  if (b < 1024.0 * 1024) return format("%.1f KiB", b / 1024);
  if (b < 1024.0 * 1024 * 1024) return format("%.2f MiB", b / (1024.0 * 1024));
  return format("%.2f GiB", b / (1024.0 * 1024 * 1024));
}

// GB/s with three significant digits or so; rates are compared across orders of magnitude.
std::string fmt_rate(double gbps) {
  if (gbps >= 100) return format("%.0f", gbps);
  if (gbps >= 1) return format("%.2f", gbps);
  if (gbps >= 0.01) return format("%.3f", gbps);
  return format("%.5f", gbps);
}

std::string short_op(const std::string& op) {
  std::string s = op.substr(0, op.find('('));  // reduce.add(axes=1) -> reduce.add
  for (const char* prefix : {"unary.", "binary."})
    if (s.rfind(prefix, 0) == 0) s = s.substr(std::char_traits<char>::length(prefix));
  return s;
}

constexpr size_t kOpsColumns = 44;
constexpr size_t kKeyDigits = 12;

}  // namespace

namespace profiler_detail {
bool decide_from_config() {
  bool on = false;
  try {
    on = config().profile;
  } catch (...) {
    // config() already threw where the program used it first; stay off.
  }
  int expected = -1;
  if (!state.compare_exchange_strong(expected, on ? 1 : 0, std::memory_order_relaxed))
    return expected > 0;  // set_profiling() or another thread decided first
  if (on) print_at_exit_if_asked();
  return on;
}
}  // namespace profiler_detail

std::string abbreviate_ops(const std::vector<std::string>& ops) {
  std::vector<std::pair<std::string, int>> counted;
  for (const std::string& op : ops) {
    std::string s = short_op(op);
    auto it =
        std::find_if(counted.begin(), counted.end(), [&](const auto& c) { return c.first == s; });
    if (it == counted.end())
      counted.push_back({s, 1});
    else
      ++it->second;
  }
  std::string out;
  for (const auto& [name, n] : counted) {
    if (!out.empty()) out += ' ';
    out += name;
    if (n > 1) out += "×" + std::to_string(n);
  }
  return out;
}

void profile_launch(const KernelHandle& handle, const std::vector<std::string>& ops, uint64_t bytes,
                    uint64_t start_ns) {
  const uint64_t ns = profile_clock_ns() - start_ns;
  ProfileTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.rows.find(handle.key);
  if (it == t.rows.end()) {
    it = t.rows.emplace(handle.key, Row{}).first;
    it->second.ops = ops;
  }
  Row& r = it->second;
  if (handle.origin > r.origin) {
    r.origin = handle.origin;
    r.compile_seconds = handle.compile_seconds;
  }
  r.calls++;
  r.total_ns += ns;
  r.bytes_total += bytes;
  r.bytes_min = std::min(r.bytes_min, bytes);
  r.bytes_max = std::max(r.bytes_max, bytes);
}

void set_profiling(bool on) {
  profiler_detail::state.store(on ? 1 : 0, std::memory_order_relaxed);
  print_at_exit_if_asked();
}

void reset_profile() {
  ProfileTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.rows.clear();
}

namespace {

using ProfileRows = std::vector<std::pair<std::string, Row>>;

// The report's first two lines: kernels, launches, kernel and compile time, where the kernels
// came from; the lazy graph and memory in use.
std::string profile_summary(const ProfileRows& rows, bool on, uint64_t& total_ns,
                            double& compile_s) {
  uint64_t launches = 0;
  size_t compiled = 0, from_disk = 0, from_remote = 0;
  total_ns = 0;
  compile_s = 0;
  for (const auto& [key, r] : rows) {
    launches += r.calls;
    total_ns += r.total_ns;
    if (r.origin == KernelOrigin::Compiled) {
      ++compiled;
      compile_s += r.compile_seconds;
    } else if (r.origin == KernelOrigin::Disk) {
      ++from_disk;
    } else if (r.origin == KernelOrigin::Remote) {
      ++from_remote;
    }
  }

  std::string out = "metajit profile: " + std::to_string(rows.size()) + " kernel" +
                    (rows.size() == 1 ? "" : "s") + ", " + std::to_string(launches) + " launch" +
                    (launches == 1 ? "" : "es") + ", kernel time " + fmt_time(double(total_ns)) +
                    ", compile time " + (compiled ? fmt_time(compile_s * 1e9) : "0") + " (" +
                    std::to_string(compiled) + " compiled, " + std::to_string(from_disk) +
                    " from disk" +
                    (from_remote ? ", " + std::to_string(from_remote) + " from the remote" : "") +
                    ")" + (on ? "" : "; profiling is off now") + "\n";
  // Whether the program's lazy graph stays flat (README "Lazy evaluation").
  const GraphCounts graph = graph_counts();
  const AllocatorStats memory = allocator_stats();
  out += "lazy graph: " + std::to_string(graph.live_vars) + " live Vars, " +
         std::to_string(graph.pending_nodes) + " pending nodes, " +
         std::to_string(graph.realized_nodes) + " realized nodes; " +
         fmt_bytes(double(memory.bytes_in_use)) + " in use (peak " +
         fmt_bytes(double(memory.peak_bytes)) + ")\n";
  return out;
}

// One row per kernel under a header, columns padded to their widest cell.
std::string profile_table(const ProfileRows& rows, uint64_t total_ns) {
  // One row of cells per kernel; columns separated by two spaces, so no cell has two in a row.
  const std::vector<std::string> head = {"key",     "ops",        "calls", "total", "mean",
                                         "compile", "bytes/call", "GB/s",  "%"};
  std::vector<std::vector<std::string>> cells;
  for (const auto& [key, r] : rows) {
    const double mean_bytes = double(r.bytes_total) / double(r.calls);
    std::string compile = r.origin == KernelOrigin::Compiled ? fmt_time(r.compile_seconds * 1e9)
                          : r.origin == KernelOrigin::Disk   ? "disk"
                          : r.origin == KernelOrigin::Remote ? "remote"
                                                             : "memory";
    cells.push_back({
        key.substr(0, kKeyDigits),
        clip(abbreviate_ops(r.ops), kOpsColumns),
        std::to_string(r.calls),
        fmt_time(double(r.total_ns)),
        fmt_time(double(r.total_ns) / double(r.calls)),
        compile,
        (r.bytes_min != r.bytes_max ? "~" : "") + fmt_bytes(mean_bytes),
        r.total_ns ? fmt_rate(double(r.bytes_total) / double(r.total_ns)) : "-",
        format("%.1f", total_ns ? 100.0 * double(r.total_ns) / double(total_ns) : 0.0),
    });
  }
  std::vector<size_t> cols(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    cols[c] = width(head[c]);
    for (const auto& row : cells) cols[c] = std::max(cols[c], width(row[c]));
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string s;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c) s += "  ";
      s += c < 2 ? pad_right(row[c], cols[c]) : pad_left(row[c], cols[c]);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = line(head);
  for (const auto& row : cells) out += line(row);
  return out;
}

// The hints: where the time goes, then whether compiling cost more than running.
std::string profile_hints(const ProfileRows& rows, uint64_t total_ns, double compile_s) {
  std::string out;
  const auto& [top_key, top] = rows.front();
  const double share = total_ns ? 100.0 * double(top.total_ns) / double(total_ns) : 0.0;
  out += "top: " + top_key.substr(0, kKeyDigits) + " (" + clip(abbreviate_ops(top.ops), 60) + ") " +
         (rows.size() == 1 ? "is all" : format("takes %.1f%%", share) + " of") + " kernel time, " +
         std::to_string(top.calls) + " call" + (top.calls == 1 ? "" : "s") + " of " +
         fmt_time(double(top.total_ns) / double(top.calls)) + "; its source: metajit " +
         "cache show " + top_key.substr(0, kKeyDigits) + "\n";
  if (rows.size() > 1 && share < 50) {
    uint64_t acc = 0;
    size_t k = 0;
    while (k < rows.size() && acc * 2 < total_ns) acc += rows[k++].second.total_ns;
    out += "the time is spread: the top " + std::to_string(k) + " of " +
           std::to_string(rows.size()) + " kernels make half of it\n";
  }
  if (compile_s * 1e9 > double(total_ns))
    out += "compiling (" + fmt_time(compile_s * 1e9) + ") cost more than running (" +
           fmt_time(double(total_ns)) +
           "): a warm cache avoids it (METAJIT_RECORD=FILE, then metajit cache warm FILE)\n";
  return out;
}

}  // namespace

std::string profile_report() {
  const bool on = profiling_enabled();
  ProfileRows rows;
  {
    ProfileTable& t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    rows.assign(t.rows.begin(), t.rows.end());
  }
  const std::string how_to = "set METAJIT_PROFILE=1 or call metajit::set_profiling(true)";
  if (rows.empty())
    return on ? "metajit profile: no kernel launched since profiling started\n"
              : "metajit profile: profiling is off (" + how_to + ")\n";
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.second.total_ns != b.second.total_ns ? a.second.total_ns > b.second.total_ns
                                                  : a.first < b.first;
  });
  uint64_t total_ns = 0;
  double compile_s = 0;
  std::string out = profile_summary(rows, on, total_ns, compile_s);
  out += profile_table(rows, total_ns);
  out += profile_hints(rows, total_ns, compile_s);
  return out;
}

}  // namespace metajit
