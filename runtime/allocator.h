// Caching host allocator: size-binned free lists reused before malloc (design.md §8), with
// bytes-in-use and peak counters for stats(). Buffers return themselves on destruction.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace metajit {

class Buffer {
 public:
  Buffer(void* ptr, size_t bytes, size_t capacity)
      : ptr_(ptr), bytes_(bytes), capacity_(capacity) {}
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_;
  size_t bytes_;
  size_t capacity_;  // the bin size actually reserved
};
using BufferPtr = std::shared_ptr<Buffer>;

// Returns a buffer of at least `bytes` bytes, 64-byte aligned (never null, even for 0 bytes).
BufferPtr allocate_buffer(size_t bytes);

struct AllocatorStats {
  uint64_t bytes_in_use = 0;  // bytes handed out and not yet returned (requested sizes)
  uint64_t peak_bytes = 0;
  uint64_t bytes_cached = 0;  // held in free lists
};
AllocatorStats allocator_stats();
void reset_allocator_peak();    // peak restarts from bytes_in_use
void release_cached_buffers();  // returns free-list memory to the system

}  // namespace metajit
