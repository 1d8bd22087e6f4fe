#include "bench/report.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

namespace bench {
namespace {

std::string fmt(const char* f, double v) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string format_time(double s, Unit u) {
  if (std::isnan(s)) return "-";
  switch (u) {
    case Unit::S:
      return fmt("%.3f s", s);
    case Unit::UsPerCall:
      return fmt("%.2f us/call", s * 1e6);
    case Unit::Ms:
      break;
  }
  return fmt(s < 0.01 ? "%.3f ms" : "%.2f ms", s * 1e3);
}

const char* unit_name(Unit u) {
  switch (u) {
    case Unit::S:
      return "s";
    case Unit::UsPerCall:
      return "us/call";
    case Unit::Ms:
      break;
  }
  return "ms";
}

std::string first_line_of(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[512];
    if (fgets(buf, sizeof buf, p)) out = buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S%z", std::localtime(&t));
  return buf;
}

nlohmann::json num(double v) {
  return std::isnan(v) ? nlohmann::json() : nlohmann::json(v);
}

}  // namespace

std::string format_row_header() {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-30s %-26s %15s %8s %9s %10s %8s  %-26s %-22s %s", "workload",
                "impl", "time", "GFLOP/s", "mj/impl", "floor", "x floor", "target", "measured",
                "met?");
  return buf;
}

std::string format_row(const Row& r, bool first_of_workload) {
  std::string time = format_time(r.seconds, r.unit);
  if (std::isnan(r.seconds)) time = r.note.rfind("skipped", 0) == 0 ? "skipped" : "n/a";
  const std::string met = !r.met ? (r.target.empty() ? "" : "-") : (*r.met ? "yes" : "NO");
  char buf[768];
  std::snprintf(buf, sizeof buf, "%-30s %-26s %15s %8s %9s %10s %8s  %-26s %-22s %s",
                first_of_workload ? r.workload.c_str() : "", r.impl.c_str(), time.c_str(),
                fmt("%.1f", r.gflops).c_str(), fmt("%.2fx", r.metajit_over_impl).c_str(),
                first_of_workload ? format_time(r.floor_seconds, Unit::Ms).c_str() : "",
                fmt("%.2fx", r.over_floor).c_str(), r.target.c_str(), r.measured.c_str(),
                met.c_str());
  std::string s = buf;
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

void print_table(const Report& report) {
  std::cout << "\n" << format_row_header() << "\n";
  std::cout << std::string(format_row_header().size(), '-') << "\n";
  std::string last;
  std::vector<std::string> notes;
  for (const Row& r : report.rows) {
    bool first = r.workload != last;
    if (first && !last.empty()) std::cout << "\n";
    last = r.workload;
    std::cout << format_row(r, first) << "\n";
    if (!r.note.empty()) notes.push_back(r.workload + " / " + r.impl + ": " + r.note);
  }
  std::cout << "\nmj/impl: metajit's time / this impl's time (below 1: metajit is faster). "
               "x floor: time / floor.\n";
  for (const FloorInfo& f : report.floors)
    std::cout << "floor of " << f.workload << ": copy " << fmt("%.1f", f.copy_gb_per_s)
              << " GB/s, triad " << fmt("%.1f", f.triad_gb_per_s) << " GB/s over " << f.elems
              << " floats; compulsory " << fmt("%.1f", f.compulsory_bytes / 1e6) << " MB\n";
  if (!notes.empty()) std::cout << "\nnotes:\n";
  for (const std::string& n : notes) std::cout << "  " << n << "\n";
  for (const std::string& n : report.notes) std::cout << "  " << n << "\n";
  std::cout.flush();
}

void write_json(const Report& report, const std::string& path, const std::string& argv_line) {
  nlohmann::json j;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  j["meta"] = {
      {"date", now_iso()},
      {"host", host},
      {"cpu", cpu_model()},
      {"hardware_threads", std::thread::hardware_concurrency()},
      {"command", argv_line},
      {"metajit_commit",
       first_line_of("git -C '" METAJIT_BENCH_SOURCE_DIR "' rev-parse --short HEAD 2>/dev/null")},
      {"time_unit", "seconds (median per call) unless the row's unit says otherwise"},
  };
  for (const FloorInfo& f : report.floors)
    j["floors"].push_back({{"workload", f.workload},
                           {"elems", f.elems},
                           {"copy_GB_per_s", num(f.copy_gb_per_s)},
                           {"triad_GB_per_s", num(f.triad_gb_per_s)},
                           {"compulsory_bytes", num(f.compulsory_bytes)}});
  j["rows"] = nlohmann::json::array();
  for (const Row& r : report.rows) {
    nlohmann::json row = {{"source", "c++"},
                          {"workload", r.workload},
                          {"impl", r.impl},
                          {"seconds", num(r.seconds)},
                          {"unit", unit_name(r.unit)},
                          {"gflops", num(r.gflops)},
                          {"metajit_over_impl", num(r.metajit_over_impl)},
                          {"floor_seconds", num(r.floor_seconds)},
                          {"over_floor", num(r.over_floor)},
                          {"target", r.target},
                          {"measured", r.measured},
                          {"met", r.met ? nlohmann::json(*r.met) : nlohmann::json()},
                          {"note", r.note},
                          {"max_rel_err", num(r.max_rel_err)},
                          {"reps", r.reps}};
    if (!std::isnan(r.loss_first)) row["loss_first"] = r.loss_first;
    if (!std::isnan(r.loss_after_check)) row["loss_after_check"] = r.loss_after_check;
    if (!r.logits_probe.empty()) row["logits_probe"] = r.logits_probe;
    if (!r.losses.empty()) row["losses"] = r.losses;
    if (!r.weights_file.empty()) row["weights_file"] = r.weights_file;
    j["rows"].push_back(row);
  }
  j["notes"] = report.notes;
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream out(p);
  out << j.dump(2) << "\n";
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace bench
