#include "bench/floor.h"

#include <algorithm>
#include <cmath>

#include "bench/buffer.h"

namespace bench {

void FloorProbe::add_to(std::vector<Impl>& impls) {
  const int64_t n = elems;
  Buffer a(n), b(n), c(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    a.data()[i] = 1.0f;
    c.data()[i] = 0.5f;
  }
  Impl copy;
  copy.name = "floor: copy";
  copy.run = [a, b, n] {
    const float* __restrict src = a.data();
    float* __restrict dst = b.data();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  };
  Impl triad;
  triad.name = "floor: triad";
  triad.run = [a, b, c, n] {
    float* __restrict dst = a.data();
    const float* __restrict x = b.data();
    const float* __restrict y = c.data();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) dst[i] = x[i] + 0.5f * y[i];
  };
  copy_at = impls.size();
  impls.push_back(copy);
  triad_at = impls.size();
  impls.push_back(triad);
}

void FloorProbe::read(const std::vector<Timing>& timings) {
  const double bytes = double(elems) * sizeof(float);
  if (copy_at < timings.size() && timings[copy_at].ok())
    copy_bytes_per_s = 2 * bytes / timings[copy_at].median_s;
  if (triad_at < timings.size() && timings[triad_at].ok())
    triad_bytes_per_s = 3 * bytes / timings[triad_at].median_s;
}

double FloorProbe::bytes_per_s() const {
  if (std::isnan(copy_bytes_per_s)) return triad_bytes_per_s;
  if (std::isnan(triad_bytes_per_s)) return copy_bytes_per_s;
  return std::max(copy_bytes_per_s, triad_bytes_per_s);
}

}  // namespace bench
