// libFuzzer target: a short program of public API calls chosen by the fuzzer's bytes
// (fuzz/api_program.h, the calls in fuzz/api_calls.h), run in this process. A call either
// succeeds or throws a metajit::Error; another exception, a signal, a sanitizer report, a hang
// (libFuzzer's -timeout) or a kernel that does not compile is a finding, and the values of what
// was accepted are checked against the reference interpreter (support/error_bounds.h).
//
// As in fuzz_graph_eval.cc, kernels are compiled by g++ without sanitizers under libFuzzer; make
// test-asan replays the corpus with ASan and UBSan in the kernels too.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fuzz/api_calls.h"
#include "fuzz/api_program.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string cache =
      (std::filesystem::temp_directory_path() / "metajit-fuzz-cache").string();
  ::setenv("METAJIT_CACHE_DIR", cache.c_str(), 0);
#ifdef METAJIT_LIBFUZZER
  ::unsetenv("METAJIT_CXXFLAGS");
#endif
  ::setenv("METAJIT_LOG", "quiet", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  metajit_test::ApiProgram(data, size).run();
  return 0;
}
