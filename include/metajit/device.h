// The devices a graph can evaluate on. Choosing one, and asking whether CUDA can be used, is in
// <metajit/runtime.h>.
#pragma once

// The public API: what libmetajit.so exports (METAJIT_SHARED, CMakeLists.txt).
#pragma GCC visibility push(default)
namespace metajit {

enum class Device { CPU, CUDA };

inline const char* device_name(Device d) {  // "cpu" | "cuda"
  return d == Device::CUDA ? "cuda" : "cpu";
}

}  // namespace metajit
#pragma GCC visibility pop
