// `make bench`: metajit and its peers side by side in one run, one table, one JSON file.
//
//   metajit_bench [--json PATH] [--variants] [--only TEXT] [--budget SECONDS] [--no-latency]
//                 [--target native|avx2|avx512|portable] [--serve-gpt]
//
// Every claim is a ratio measured within this run: the implementations of a workload (and the
// copy/triad floor) are timed in alternating blocks, so that the noise of a shared machine
// lands on all of them. See bench/README.md.
#include <metajit/metajit.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "bench/fusion_patterns.h"
#include "bench/gpt.h"
#include "bench/lazy_loop.h"
#include "bench/peers.h"
#include "bench/report.h"
#include "bench/transformer.h"
#include "bench/workloads.h"
#include "runtime/toolchain.h"

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
         "  --no-latency      skip the compile/load/dispatch rows\n"
         "  --target T        native (default), or avx2 / avx512 / portable: metajit compiles its\n"
         "                    kernels for T (METAJIT_CXXFLAGS) and OpenBLAS and Halide are held\n"
         "                    to it too, so that an AVX-512 machine measures the AVX2 path\n"
         "  --serve-gpt       set up the GPT rows, then time blocks of them on request from stdin\n"
         "                    (bench/peers_gpt.py's paired blocks; bench/gpt.h)\n";
  return code;
}

// What `--target` sets for metajit and the peers that can be held to an ISA at run time.
// OpenBLAS picks its kernels when it is loaded, so the bench re-executes itself with them.
struct TargetEnv {
  const char* name;
  const char* cxxflags;  // appended to METAJIT_CXXFLAGS
  const char* openblas;  // OPENBLAS_CORETYPE
  const char* halide;    // HL_JIT_TARGET
};
constexpr TargetEnv kTargets[] = {
    {"avx2", "-march=x86-64-v3", "Haswell", "x86-64-linux-avx-avx2-f16c-fma-sse41"},
    {"avx512", "-march=x86-64-v4", "SkylakeX",
     "x86-64-linux-avx-avx2-f16c-fma-sse41-avx512-avx512_skylake"},
    {"portable", "-march=x86-64", "Prescott", "x86-64-linux"},
};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
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
    } else if (a == "--serve-gpt") {
      opt.serve_gpt = true;
    } else if (a == "--target") {
      const std::string t = value();
      if (t == "native") continue;
      const TargetEnv* found = nullptr;
      for (const TargetEnv& e : kTargets)
        if (t == e.name) found = &e;
      if (!found) {
        std::cerr << "metajit_bench: --target must be native, avx2, avx512 or portable\n";
        return usage(1);
      }
      if (!std::getenv("METAJIT_BENCH_TARGET")) {
        const char* old = std::getenv("METAJIT_CXXFLAGS");
        const std::string flags = (old && *old ? std::string(old) + " " : "") + found->cxxflags;
        setenv("METAJIT_CXXFLAGS", flags.c_str(), 1);
        setenv("OPENBLAS_CORETYPE", found->openblas, 1);
        setenv("HL_JIT_TARGET", found->halide, 1);
        setenv("METAJIT_BENCH_TARGET", found->name, 1);
        execv("/proc/self/exe", argv);
        std::cerr << "metajit_bench: cannot re-execute itself for --target\n";
        return 2;
      }
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
  // The machine and what the kernels were compiled for: every ratio below holds for this pair.
  {
    const char* t = std::getenv("METAJIT_BENCH_TARGET");
    const char* flags = std::getenv("METAJIT_CXXFLAGS");
    const char* ob = std::getenv("OPENBLAS_CORETYPE");
    std::string line = "CPU: " + cpu_model() + "; metajit kernels for " +
                       metajit::host_toolchain().target.describe() + " (--target " +
                       (t ? t : "native") +
                       (flags && *flags ? ", METAJIT_CXXFLAGS=" + std::string(flags) : "") +
                       "); OpenBLAS core " + (ob && *ob ? ob : "auto") + "; Halide target " +
#if METAJIT_BENCH_HALIDE
                       bench::halide_target();
#else
                       "(Halide not built)";
#endif
    std::cout << line << "\n";
    report.notes.push_back(line);
  }
  if (opt.serve_gpt) {
    bench::run_gpt(report, opt);
    return 0;
  }
  bench::run_throughput(report, opt);
  bench::run_fusion_patterns(report, opt);
  bench::run_transformer(report, opt);
  bench::run_gpt(report, opt);
  bench::run_lazy_loop(report, opt);
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
