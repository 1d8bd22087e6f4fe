// libFuzzer target: a small random graph built from the fuzzer's bytes
// (support/random_graph.h, the differential test's generator, reading the bytes as its random
// stream) is evaluated by the compiled kernels and by the reference interpreter, which must
// agree (support/reference_compare.h). Kernel structures repeat across inputs and kernels
// are shape-generic, so after the first few compiles most inputs run from the kernel cache.
//
// Under libFuzzer the kernels are compiled by g++ without sanitizers: that process carries
// clang's ASan runtime, which a GCC-instrumented kernel cannot use. make test-asan replays this
// target's corpus with ASan and UBSan in the kernels too.
#include <metajit/error.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "fuzz/kernel_fuzz_env.h"
#include "support/random_graph.h"
#include "support/reference_compare.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  metajit_test::set_kernel_fuzz_env();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  metajit_test::GraphGenerator gen(data, size);
  const std::vector<metajit::Var> outs = gen.build();
  std::vector<std::string> mismatches;
  if (std::optional<metajit::Var> staged = gen.staged())
    mismatches = metajit_test::reference_mismatches({*staged});
  if (mismatches.empty()) mismatches = metajit_test::reference_mismatches(outs);
  if (!mismatches.empty()) {
    std::fprintf(stderr, "graph:\n%s\n", gen.listing().c_str());
    for (const std::string& m : mismatches) std::fprintf(stderr, "%s\n", m.c_str());
    std::abort();
  }
  return 0;
}
