// `make bench`: metajit and its peers side by side in one run, one table, one JSON file.
//
//   metajit_bench [--json PATH] [--variants] [--only TEXT] [--budget SECONDS] [--no-latency]
//
// Every claim is a ratio measured within this run: the implementations of a workload (and the
// copy/triad floor) are timed in alternating blocks, so that the noise of a shared machine
// lands on all of them. See bench/README.md.
#include <metajit/metajit.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>

#include "bench/report.h"
#include "bench/workloads.h"

namespace {

int usage(int code) {
  (code ? std::cerr : std::cout)
      << "usage: metajit_bench [--json PATH] [--variants] [--only TEXT] [--budget SECONDS] "
         "[--no-latency]\n"
         "  --json PATH       where to write the results (default: bench/results.json in the "
         "source tree)\n"
         "  --variants        also run odd sizes around the targets (16M+13, 4095x4097, ...)\n"
         "  --only TEXT       run only the workloads whose name contains TEXT\n"
         "  --budget SECONDS  timed seconds per workload, all impls together (default 1.5)\n"
         "  --no-latency      skip the compile/load/dispatch rows\n";
  return code;
}

std::string self_dir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

}  // namespace

int main(int argc, char** argv) {
  bench::Options opt;
  std::string json = METAJIT_BENCH_SOURCE_DIR "/bench/results.json";
  bool latency = true;
  std::string argv_line;
  for (int i = 0; i < argc; ++i) argv_line += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) std::exit(usage(1));
      return argv[++i];
    };
    if (a == "--json") {
      json = value();
    } else if (a == "--variants") {
      opt.variants = true;
    } else if (a == "--only") {
      opt.only = value();
    } else if (a == "--budget") {
      opt.schedule.budget_s = std::atof(value().c_str());
    } else if (a == "--no-latency") {
      latency = false;
    } else if (a == "-h" || a == "--help") {
      return usage(0);
    } else {
      std::cerr << "metajit_bench: unknown argument " << a << "\n";
      return usage(1);
    }
  }
  opt.probe_path = self_dir() + "/metajit_load_probe";
  bench::set_opt_level(1);

  bench::Report report;
  std::cerr << "metajit bench: " << std::thread::hardware_concurrency()
            << " hardware threads; results go to " << json << std::endl;
  bench::run_throughput(report, opt);
  if (latency) bench::run_latency(report, opt);
  bench::print_table(report);
  try {
    bench::write_json(report, json, argv_line);
    std::cout << "\nwrote " << json << "\n";
  } catch (const std::exception& e) {
    std::cerr << "metajit_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
