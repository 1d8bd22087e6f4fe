#include "base/buffer.h"

#include <metajit/error.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace metajit {
namespace {

// Bins are powers of two up to 1 MiB, then multiples of 1 MiB: small waste, few bins.
size_t bin_size(size_t bytes) {
  if (bytes < 64) return 64;
  if (bytes <= (1u << 20)) return std::bit_ceil(bytes);
  return (bytes + (1u << 20) - 1) & ~size_t((1u << 20) - 1);
}

// Cap on memory kept in free lists; beyond it freed blocks go straight back to the system.
constexpr size_t kMaxCached = size_t(1) << 30;

struct State {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free_lists;
  AllocatorStats stats;
};
State& state(Device d) {
  // Leaked on purpose: buffers may die during static teardown.
  static State* s = new State[2];
  return s[d == Device::CUDA ? 1 : 0];
}

// The device's source of memory: the C library for the host; for CUDA whatever the CUDA
// runtime installed (set_device_memory_source), nothing before it was loaded.
// Published once and never freed: buffers may be released during static teardown.
std::atomic<const DeviceMemorySource*> cuda_source{nullptr};

// Bytes readable after every host buffer's capacity: a kernel may read a 32-bit word at the
// address of a buffer's last 16-bit element (codegen/cpp_narrow_prelude.h mj_half_word). 64 keeps
// aligned_alloc's size a multiple of its alignment.
constexpr size_t kHostReadSlack = 64;

void* system_alloc(size_t cap, Device d) {
  if (d == Device::CPU) return std::aligned_alloc(64, cap + kHostReadSlack);
  const DeviceMemorySource* src = cuda_source.load(std::memory_order_acquire);
  if (!src)
    throw Error("allocating " + std::to_string(cap) +
                " bytes of device memory: the CUDA runtime has not been loaded (use "
                "set_device(Device::CUDA) or METAJIT_DEVICE=cuda first)");
  return src->allocate(cap);
}

void system_free(void* p, Device d) noexcept {
  if (d == Device::CPU) {
    std::free(p);
  } else {
    const DeviceMemorySource* src = cuda_source.load(std::memory_order_acquire);
    if (src) src->release(p);
  }
}

// Returns the device's cached free blocks to the system.
void release_cached(Device d) {
  State& s = state(d);
  std::map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    blocks.swap(s.free_lists);
    s.stats.bytes_cached = 0;
  }
  for (auto& [cap, list] : blocks)
    for (void* p : list) system_free(p, d);
}

// The message of a failed allocation: the bytes asked for and what the system (host) or the
// CUDA runtime (device) says is available (a typed Error, not std::bad_alloc: issue 26).
std::string allocation_failure(size_t bytes, Device d) {
  auto gib = [](double b) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f GiB", b / double(1ull << 30));
    return std::string(text);
  };
  std::string msg = "out of memory: allocating " + std::to_string(bytes) + " bytes (" +
                    gib(double(bytes)) + ") of " + (d == Device::CPU ? "host" : "device") +
                    " memory failed";
  if (d == Device::CUDA) {
    const DeviceMemorySource* src = cuda_source.load(std::memory_order_acquire);
    if (src && src->memory_report) msg += "; " + src->memory_report();
  } else {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    uint64_t kib = 0;
    std::string unit;
    while (meminfo >> key >> kib >> unit)
      if (key == "MemAvailable:") {
        msg += "; " + gib(double(kib) * 1024.0) + " available (MemAvailable)";
        break;
      }
  }
  return msg + "; evaluate smaller pieces, or free Vars that hold large values";
}

}  // namespace

Buffer::~Buffer() {
  State& s = state(device_);
  std::lock_guard<std::mutex> lock(s.mu);
  s.stats.bytes_in_use -= bytes_;
  if (s.stats.bytes_cached + capacity_ <= kMaxCached) {
    s.free_lists[capacity_].push_back(ptr_);
    s.stats.bytes_cached += capacity_;
  } else {
    system_free(ptr_, device_);
  }
}

void set_device_memory_source(Device device, DeviceMemorySource source) {
  if (device == Device::CUDA)
    cuda_source.store(new DeviceMemorySource(source), std::memory_order_release);
}

BufferPtr allocate_buffer(size_t bytes, Device device) {
  size_t cap = bin_size(bytes);
  State& s = state(device);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.free_lists.find(cap);
    if (it != s.free_lists.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      s.stats.bytes_cached -= cap;
    }
    s.stats.bytes_in_use += bytes;
    if (s.stats.bytes_in_use > s.stats.peak_bytes) s.stats.peak_bytes = s.stats.bytes_in_use;
  }
  if (!p) {
    try {
      p = system_alloc(cap, device);
    } catch (...) {
      std::lock_guard<std::mutex> lock(s.mu);
      s.stats.bytes_in_use -= bytes;
      throw;
    }
    if (!p) {
      release_cached(device);  // blocks of other sizes kept for reuse go back first
      p = system_alloc(cap, device);
    }
    if (!p) {
      {
        std::lock_guard<std::mutex> lock(s.mu);
        s.stats.bytes_in_use -= bytes;
      }
      throw Error(allocation_failure(bytes, device));
    }
  }
  return std::make_shared<Buffer>(p, bytes, cap, device);
}

AllocatorStats allocator_stats(Device device) {
  State& s = state(device);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.stats;
}

void reset_allocator_peak() {
  for (Device d : {Device::CPU, Device::CUDA}) {
    State& s = state(d);
    std::lock_guard<std::mutex> lock(s.mu);
    s.stats.peak_bytes = s.stats.bytes_in_use;
  }
}

void release_cached_buffers() {
  for (Device d : {Device::CPU, Device::CUDA}) {
    State& s = state(d);
    std::lock_guard<std::mutex> lock(s.mu);
    for (auto& [cap, list] : s.free_lists)
      for (void* p : list) system_free(p, d);
    s.free_lists.clear();
    s.stats.bytes_cached = 0;
  }
}

}  // namespace metajit
