// Hand-written unfused loops: what an eager framework does (one pass over memory per
// operation, temporaries in between), with OpenMP and SIMD on every pass. Temporaries are
// allocated once, as a caching allocator would hand them back. No -ffast-math: exp is the C
// library's, as in a plain C++ program.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "bench/peers.h"

namespace bench {

Impl loops_selu(const Buffer& x) {
  const int64_t n = x.size();
  Buffer mask(n), e(n), t(n), u(n), sel(n), out(n);
  Impl im;
  im.name = "hand loops, unfused";
  im.run = [=] {
    const float* a = x.data();
    float *m = mask.data(), *ee = e.data(), *tt = t.data(), *uu = u.data(), *s = sel.data(),
          *o = out.data();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) m[i] = a[i] > 0.0f ? 1.0f : 0.0f;  // x > 0
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) ee[i] = std::exp(a[i]);  // exp(x)
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) tt[i] = 1.67f * ee[i];  // 1.67 * _
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) uu[i] = tt[i] - 1.67f;  // _ - 1.67
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) s[i] = m[i] != 0.0f ? a[i] : uu[i];  // where
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) o[i] = 1.05f * s[i];  // 1.05 * _
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}

Impl loops_row_sums(const Mat& x) {
  Buffer out(x.rows);
  Impl im;
  im.name = "hand loops";
  im.run = [x, out] {
    const float* a = x.buf.data();
    float* o = out.data();
    const int64_t cols = x.cols;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < x.rows; ++r) {
      const float* row = a + r * cols;
      float s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < cols; ++c) s += row[c];
      o[r] = s;
    }
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}

Impl loops_col_sums(const Mat& x) {
  Buffer out(x.cols);
  Impl im;
  im.name = "hand loops";
  im.run = [x, out] {
    const float* a = x.buf.data();
    float* o = out.data();
    const int64_t rows = x.rows, cols = x.cols, block = 512;
    // Each thread owns a band of columns and walks all rows over it (accumulators in L1).
#pragma omp parallel for schedule(static)
    for (int64_t c0 = 0; c0 < cols; c0 += block) {
      const int64_t c1 = std::min(cols, c0 + block);
      for (int64_t c = c0; c < c1; ++c) o[c] = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = a + r * cols;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) o[c] += row[c];
      }
    }
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}

Impl loops_softmax(const Mat& x) {
  Buffer mx(x.rows), sum(x.rows), out(x.rows * x.cols);
  Impl im;
  im.name = "hand loops, 3 passes";
  im.run = [x, mx, sum, out] {
    const float* a = x.buf.data();
    float *m = mx.data(), *s = sum.data(), *o = out.data();
    const int64_t rows = x.rows, cols = x.cols;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {  // pass 1: row max
      float v = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : v)
      for (int64_t c = 0; c < cols; ++c) v = std::max(v, a[r * cols + c]);
      m[r] = v;
    }
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {  // pass 2: exp(x - max), row sum
      float acc = 0;
      for (int64_t c = 0; c < cols; ++c) {
        float e = std::exp(a[r * cols + c] - m[r]);
        o[r * cols + c] = e;
        acc += e;
      }
      s[r] = acc;
    }
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {  // pass 3: divide
      const float inv = 1.0f / s[r];
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) o[r * cols + c] *= inv;
    }
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}

Impl loops_scatter_rows(const Buffer& g, std::vector<int64_t> ids, int64_t rows, int64_t d) {
  Buffer out(rows * d);
  Impl im;
  im.name = "hand loop, sequential";
  im.run = [=] {
    float* o = out.data();
    const float* src = g.data();
    std::fill(o, o + rows * d, 0.0f);
    for (size_t i = 0; i < ids.size(); ++i) {
      float* row = o + ids[i] * d;
      const float* from = src + int64_t(i) * d;
#pragma omp simd
      for (int64_t j = 0; j < d; ++j) row[j] += from[j];
    }
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}

Impl loops_gather_rows(const Buffer& x, std::vector<int64_t> index, int64_t rows, int64_t cols) {
  Buffer out(rows * cols);
  Impl im;
  im.name = "hand loops";
  im.run = [=] {
    float* o = out.data();
    const float* a = x.data();
    const int64_t* ix = index.data();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) o[i * cols + j] = a[i * cols + ix[i * cols + j]];
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}

Impl loops_max_pool_3x3s2(const Buffer& x, int64_t planes, int64_t hw) {
  const int64_t o = (hw + 2 - 3) / 2 + 1;
  Buffer out(planes * o * o);
  Impl im;
  im.name = "hand loops";
  im.run = [=] {
    float* y = out.data();
    const float* a = x.data();
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t r = 0; r < o; ++r)
        for (int64_t c = 0; c < o; ++c) {
          float best = -std::numeric_limits<float>::infinity();
          for (int64_t i = r * 2 - 1; i <= r * 2 + 1; ++i)
            for (int64_t j = c * 2 - 1; j <= c * 2 + 1; ++j)
              if (i >= 0 && i < hw && j >= 0 && j < hw) best = std::max(best, a[(p * hw + i) * hw + j]);
          y[(p * o + r) * o + c] = best;
        }
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}

// The Winograd peer built for the ISA metajit's kernels are held to in this run (bench/main.cc
// sets METAJIT_BENCH_TARGET for --target; native when unset).
Impl winograd_f4x4_3x3(const Buffer& x, const Buffer& w, const ConvShape& s) {
  const char* target = std::getenv("METAJIT_BENCH_TARGET");
  const std::string t = target ? target : "native";
  if (t == "avx2") return winograd_f4x4_3x3_avx2(x, w, s);
  Impl im = winograd_f4x4_3x3_native(x, w, s);
  if (t != "native" && t != "avx512") im.skipped = "built for AVX2 and for the host, not for " + t;
  return im;
}

}  // namespace bench
