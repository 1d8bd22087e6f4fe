// Buffers and the caching allocators behind them, one per device: size-binned free lists reused
// before malloc / cudaMalloc (docs/design.md §8; device memory is never managed memory), with
// bytes-in-use and peak counters per device for stats(). Buffers return themselves to their
// device's lists on destruction.
//
// This is the base layer: it knows nothing of CUDA. The CUDA runtime (runtime/cuda_runtime.cc)
// installs the device's memory functions when it is loaded, so allocating a host buffer never
// pulls in the CUDA runtime, its toolchain or its code generator (docs/architecture.md).
#pragma once
#include <metajit/device.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace metajit {

class Buffer {
 public:
  Buffer(void* ptr, size_t bytes, size_t capacity, Device device = Device::CPU)
      : ptr_(ptr), bytes_(bytes), capacity_(capacity), device_(device) {}
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }  // where data() points

 private:
  void* ptr_;
  size_t bytes_;
  size_t capacity_;  // the bin size actually reserved
  Device device_;
};
using BufferPtr = std::shared_ptr<Buffer>;

// Where a device's memory comes from and goes back to, below the free lists.
struct DeviceMemorySource {
  void* (*allocate)(size_t bytes) = nullptr;  // nullptr when out of memory; Error on other failures
  void (*release)(void* p) = nullptr;
  std::string (*memory_report)() = nullptr;  // what is free, for the out-of-memory message
};
// Installs the functions for `device` (CUDA; the host always uses the C library).
void set_device_memory_source(Device device, DeviceMemorySource source);

// Returns a buffer of at least `bytes` bytes on `device`, 64-byte aligned (never null, even for
// 0 bytes). When the host or the device has not the memory, the cached free blocks go back and
// it tries once more; then Error "out of memory: allocating N bytes ..." with what is available.
// CUDA: Error too when the CUDA runtime is not loaded.
BufferPtr allocate_buffer(size_t bytes, Device device = Device::CPU);

struct AllocatorStats {
  uint64_t bytes_in_use = 0;  // bytes handed out and not yet returned (requested sizes)
  uint64_t peak_bytes = 0;
  uint64_t bytes_cached = 0;  // held in free lists
};
AllocatorStats allocator_stats(Device device = Device::CPU);
void reset_allocator_peak();    // peaks (every device) restart from bytes_in_use
void release_cached_buffers();  // returns free-list memory (every device) to the system

}  // namespace metajit
