// A fixed-size array that lives on the stack when it is small (at most N elements) and on the
// heap otherwise: per-call scratch for the executor and jit replay without a malloc.
#pragma once
#include <cstddef>
#include <memory>

namespace metajit {

template <class T, size_t N>
class SmallBuffer {
 public:
  explicit SmallBuffer(size_t n) : ptr_(inline_) {
    if (n > N) {
      heap_ = std::make_unique<T[]>(n);
      ptr_ = heap_.get();
    }
  }
  SmallBuffer(const SmallBuffer&) = delete;
  SmallBuffer& operator=(const SmallBuffer&) = delete;

  T& operator[](size_t i) { return ptr_[i]; }
  const T& operator[](size_t i) const { return ptr_[i]; }
  T* data() { return ptr_; }

 private:
  T inline_[N];  // class types default-construct; scalars are written before they are read
  std::unique_ptr<T[]> heap_;
  T* ptr_;
};

}  // namespace metajit
