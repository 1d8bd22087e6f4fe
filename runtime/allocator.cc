#include "runtime/allocator.h"

#include <bit>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "meta_ops/error.h"
#include "runtime/cuda_runtime.h"

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

void* system_alloc(size_t cap, Device d) {
  if (d == Device::CPU) return std::aligned_alloc(64, cap);
  CudaRuntime* rt = cuda_runtime();
  if (!rt)
    throw Error("allocating device memory: CUDA cannot be used here: " + cuda_runtime_problem());
  return rt->allocate(cap);
}

void system_free(void* p, Device d) noexcept {
  if (d == Device::CPU)
    std::free(p);
  else if (CudaRuntime* rt = cuda_runtime())
    rt->release(p);
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
      std::lock_guard<std::mutex> lock(s.mu);
      s.stats.bytes_in_use -= bytes;
      throw std::bad_alloc();
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
