#include "runtime/allocator.h"

#include <bit>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
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
State& state() {
  static State* s = new State;  // leaked on purpose: buffers may die during static teardown
  return *s;
}

}  // namespace

Buffer::~Buffer() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.stats.bytes_in_use -= bytes_;
  if (s.stats.bytes_cached + capacity_ <= kMaxCached) {
    s.free_lists[capacity_].push_back(ptr_);
    s.stats.bytes_cached += capacity_;
  } else {
    std::free(ptr_);
  }
}

BufferPtr allocate_buffer(size_t bytes) {
  size_t cap = bin_size(bytes);
  State& s = state();
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
    p = std::aligned_alloc(64, cap);
    if (!p) {
      std::lock_guard<std::mutex> lock(s.mu);
      s.stats.bytes_in_use -= bytes;
      throw std::bad_alloc();
    }
  }
  return std::make_shared<Buffer>(p, bytes, cap);
}

AllocatorStats allocator_stats() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.stats;
}

void reset_allocator_peak() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.stats.peak_bytes = s.stats.bytes_in_use;
}

void release_cached_buffers() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto& [cap, list] : s.free_lists)
    for (void* p : list) std::free(p);
  s.free_lists.clear();
  s.stats.bytes_cached = 0;
}

}  // namespace metajit
