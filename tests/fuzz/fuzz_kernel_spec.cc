// libFuzzer target: the kernel-spec reader (codegen/kernel_spec.cc). Specs come from manifests
// and meta.json files that `metajit cache warm` and `cache verify --fix` turn back into kernels,
// so any JSON gives a KernelIR or a metajit::Error. An accepted spec round-trips
// (to_json(from_json(spec)) reads back to the same IR) and both emitters can print it: the
// reader refuses what code generation cannot handle, instead of the emitter failing later.
#include <metajit/error.h>

#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "codegen/cpp_emitter.h"
#include "codegen/cuda_emitter.h"
#include "codegen/kernel_ir.h"
#include "codegen/kernel_spec.h"

using namespace metajit;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json spec = nlohmann::json::parse(data, data + size, nullptr, false);
  if (spec.is_discarded()) return 0;
  KernelIR ir;
  try {
    ir = kernel_spec_from_json(spec);
  } catch (const Error&) {
    return 0;
  }
  const std::string canonical = serialize_ir(ir);
  if (serialize_ir(kernel_spec_from_json(kernel_spec_to_json(ir))) != canonical) std::abort();
  for (CpuIsa isa : {CpuIsa::Portable, CpuIsa::Avx2, CpuIsa::Avx512}) {
    CpuTarget target;
    target.isa = isa;
    if (emit_cpp(ir, target).empty()) std::abort();
  }
  // AVX-512 with bfloat16 pairs and byte quads (codegen/cpp_step_groups.cc).
  CpuTarget dots;
  dots.isa = CpuIsa::Avx512;
  dots.bf16_dot = dots.int8_dot = true;
  if (emit_cpp(ir, dots).empty()) std::abort();
  for (CudaTarget target : {CudaTarget::Gpu, CudaTarget::HostEmulation})
    if (emit_cuda(ir, target).empty()) std::abort();
  return 0;
}
