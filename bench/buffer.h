// A float buffer for the peers: 64-byte aligned, first touched in parallel (so that the pages
// are mapped before any timing), shared between the lambdas that use it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

namespace bench {

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(int64_t n) : n_(n) {
    size_t bytes = ((size_t(n) * sizeof(float) + 63) / 64) * 64;
    p_ = std::shared_ptr<float>(static_cast<float*>(std::aligned_alloc(64, bytes ? bytes : 64)),
                                [](float* p) { std::free(p); });
    if (!p_) throw std::bad_alloc();
    float* d = p_.get();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = 0.0f;
  }
  static Buffer from(const std::vector<float>& v) {
    Buffer b(int64_t(v.size()));
    if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
    return b;
  }
  float* data() const {
    return p_.get();
  }
  int64_t size() const {
    return n_;
  }
  std::vector<float> to_vector() const {
    return std::vector<float>(data(), data() + n_);
  }

 private:
  std::shared_ptr<float> p_;
  int64_t n_ = 0;
};

}  // namespace bench
