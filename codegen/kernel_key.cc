#include "codegen/kernel_key.h"

#include <cstdint>

#include "cache/checksum.h"

namespace metajit {

KernelKeyBuilder& KernelKeyBuilder::field(const std::string& label, const std::string& value) {
  // label \0 length(8 bytes LE) value: no two different field lists produce the same bytes.
  bytes_ += label;
  bytes_.push_back('\0');
  uint64_t n = value.size();
  for (int k = 0; k < 8; ++k) bytes_.push_back(char((n >> (8 * k)) & 0xff));
  bytes_ += value;
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
