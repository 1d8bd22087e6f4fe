// The environment of a fuzz target that compiles kernels (fuzz_graph_eval, fuzz_api_sequence),
// set from its LLVMFuzzerInitialize.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

namespace metajit_test {

inline void set_kernel_fuzz_env() {
  // A cache of its own unless the caller chose one (make fuzz keeps it between runs).
  const std::string cache =
      (std::filesystem::temp_directory_path() / "metajit-fuzz-cache").string();
  ::setenv("METAJIT_CACHE_DIR", cache.c_str(), 0);
#ifdef METAJIT_LIBFUZZER
  // Under libFuzzer the kernels are plain g++ builds: the process carries clang's ASan runtime,
  // which a GCC-instrumented kernel cannot use. The replay in a GCC sanitizer build (make
  // test-asan) keeps the sanitizer flags, so the kernels are checked there.
  ::unsetenv("METAJIT_CXXFLAGS");
#endif
  ::setenv("METAJIT_LOG", "quiet", 1);
}

}  // namespace metajit_test
