// Catch2's main, after setting the environment every test of a run shares: one kernel cache
// per build tree, the CLI and helper programs of this build, two compiler jobs. CTest's
// ENVIRONMENT property would be the natural place, but catch_discover_tests (Catch2 v2) keeps
// only the first entry of a list, so the build passes them here and a variable already set
// (by a person running one test by hand) wins.
//
// Skips: a suite registered to run on CUDA (METAJIT_DEVICE=cuda) where no CUDA device can be
// used, or a suite that needs nvcc (METAJIT_TEST_NEEDS_NVCC) where there is none, exits 77,
// which CTest reports as skipped (SKIP_RETURN_CODE), saying why: never a silent pass.
#define CATCH_CONFIG_RUNNER
#include <metajit/runtime.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/config.h"
#include "runtime/cuda_toolchain.h"

namespace {

constexpr int kSkipped = 77;

bool listing(int argc, char* argv[]) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind("--list", 0) == 0) return true;
  return false;
}

}  // namespace

int main(int argc, char* argv[]) {
  ::setenv("METAJIT_CACHE_DIR", METAJIT_TEST_CACHE_DIR, 0);
  ::setenv("METAJIT_CLI", METAJIT_TEST_CLI, 0);
  ::setenv("METAJIT_TEST_PROGRAMS", METAJIT_TEST_PROGRAMS_DIR, 0);
  ::setenv("METAJIT_SOURCE_DIR", METAJIT_TEST_SOURCE_DIR, 0);
  ::setenv("METAJIT_JOBS", "2", 0);
  if (!listing(argc, argv)) {
    metajit::reload_config();
#ifdef METAJIT_TEST_NEEDS_NVCC
    if (metajit::locate_nvcc().empty()) {
      std::printf(
          "skipped: no nvcc (METAJIT_NVCC, PATH, /usr/local/cuda/bin): CUDA code "
          "generation cannot be compiled here\n");
      return kSkipped;
    }
#endif
    if (metajit::device() == metajit::Device::CUDA && !metajit::cuda_available()) {
      std::printf("skipped: METAJIT_DEVICE=cuda but CUDA cannot be used here: %s\n",
                  metajit::cuda_unavailable_reason().c_str());
      return kSkipped;
    }
  }
  return Catch::Session().run(argc, argv);
}
