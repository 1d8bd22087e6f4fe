// Catch2's main, after setting the environment every test of a run shares: one kernel cache
// per build tree, the CLI and helper programs of this build, two compiler jobs. CTest's
// ENVIRONMENT property would be the natural place, but catch_discover_tests (Catch2 v2) keeps
// only the first entry of a list, so the build passes them here and a variable already set
// (by a person running one test by hand) wins.
//
// Skips: a suite registered to run on CUDA (METAJIT_DEVICE=cuda) where no CUDA device can be
// used, or a suite that needs nvcc (METAJIT_TEST_NEEDS_NVCC) where there is none, exits 77,
// which CTest reports as skipped (SKIP_RETURN_CODE), saying why: never a silent pass. Single
// test cases skip themselves the same way (support/skip.h).
#define CATCH_CONFIG_RUNNER
#include <metajit/runtime.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/config.h"
#include "runtime/cuda_toolchain.h"
#include "support/skip.h"

namespace {

// The test cases that ran without a single assertion. Catch2's own check (--warn NoAssertions)
// looks at every leaf SECTION, which flags sections that only set up what the checks after
// them look at; this looks at whole test cases.
std::vector<std::string>& empty_cases() {
  static std::vector<std::string> names;
  return names;
}

struct EmptyCases : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    if (stats.totals.assertions.total() == 0) empty_cases().push_back(stats.testInfo.name);
  }
};

bool listing(int argc, char* argv[]) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).rfind("--list", 0) == 0) return true;
  return false;
}

}  // namespace

CATCH_REGISTER_LISTENER(EmptyCases)

int main(int argc, char* argv[]) {
  ::setenv("METAJIT_CACHE_DIR", METAJIT_TEST_CACHE_DIR, 0);
  ::setenv("METAJIT_CLI", METAJIT_TEST_CLI, 0);
  ::setenv("METAJIT_TEST_PROGRAMS", METAJIT_TEST_PROGRAMS_DIR, 0);
  ::setenv("METAJIT_SOURCE_DIR", METAJIT_TEST_SOURCE_DIR, 0);
  ::setenv("METAJIT_JOBS", "2", 0);
  // A sanitizer build compiles the kernels with its sanitizers too (tests/CMakeLists.txt),
  // after whatever flags the person running the tests chose.
  if (const std::string sanitize = METAJIT_TEST_KERNEL_CXXFLAGS; !sanitize.empty()) {
    const char* chosen = std::getenv("METAJIT_CXXFLAGS");
    std::string flags = chosen ? chosen : "";
    if (flags.find(sanitize) == std::string::npos)
      ::setenv("METAJIT_CXXFLAGS", (flags.empty() ? sanitize : flags + " " + sanitize).c_str(), 1);
  }
  if (!listing(argc, argv)) {
    metajit::reload_config();
#ifdef METAJIT_TEST_NEEDS_NVCC
    if (metajit::locate_nvcc().empty())
      metajit_test::skip_test(
          "no nvcc (METAJIT_NVCC, PATH, /usr/local/cuda/bin): CUDA code generation cannot be "
          "compiled here");
#endif
    if (metajit::device() == metajit::Device::CUDA && !metajit::cuda_available())
      metajit_test::skip_test("METAJIT_DEVICE=cuda but CUDA cannot be used here: " +
                              metajit::cuda_unavailable_reason());
  }
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  // Never a pass that checked nothing: CTest runs each case by name, and a name that matches no
  // case (CMake splits a name holding a ';' in two) fails (exit 2), as does a case that ran no
  // assertion at all (exit 1; see EmptyCases).
  session.configData().warnings =
      Catch::WarnAbout::What(session.configData().warnings | Catch::WarnAbout::NoTests);
  const int rc = session.run();
  if (rc != 0 || empty_cases().empty()) return rc;
  for (const std::string& name : empty_cases())
    std::printf("failed: test case '%s' ran no assertion\n", name.c_str());
  return 1;
}
