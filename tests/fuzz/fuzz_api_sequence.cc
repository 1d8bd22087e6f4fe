// libFuzzer target: a short program of public API calls chosen by the fuzzer's bytes
// (fuzz/api_program.h, the calls in fuzz/api_calls.h), run in this process. A call either
// succeeds or throws a metajit::Error; another exception, a signal, a sanitizer report, a hang
// (libFuzzer's -timeout) or a kernel that does not compile is a finding, and the values of what
// was accepted are checked against the reference interpreter (support/error_bounds.h).
//
// As in fuzz_graph_eval.cc, kernels are compiled by g++ without sanitizers under libFuzzer; make
// test-asan replays the corpus with ASan and UBSan in the kernels too.
#include <cstdint>

#include "fuzz/api_calls.h"
#include "fuzz/api_program.h"
#include "fuzz/kernel_fuzz_env.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  metajit_test::set_kernel_fuzz_env();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  metajit_test::ApiProgram(data, size).run();
  return 0;
}
