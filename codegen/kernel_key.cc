#include "codegen/kernel_key.h"

#include "base/checksum.h"

namespace metajit {

KernelKeyBuilder& KernelKeyBuilder::field(const std::string& label, const std::string& value) {
  append_field(bytes_, label, value);
  return *this;
}

std::string KernelKeyBuilder::hex() const {
  return xxh3_128_hex(bytes_);
}

std::string kernel_key(const std::string& backend, const std::string& ir_text,
                       const std::string& toolchain_identity) {
  return KernelKeyBuilder()
      .field("codegen", kCodegenVersion)
      .field("backend", backend)
      .field("ir", ir_text)
      .field("toolchain", toolchain_identity)
      .hex();
}

}  // namespace metajit
