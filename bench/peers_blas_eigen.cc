// Eigen 3 and OpenBLAS peers, plus im2col (written here) + OpenBLAS sgemm for conv2d.
// Eigen's array expressions are single-threaded, so they run inside OpenMP blocks of rows or
// elements; its GEMM uses its own OpenMP threading.
#include <omp.h>

#include <algorithm>

#include "bench/peers.h"

#if METAJIT_BENCH_EIGEN
#include <Eigen/Dense>
#endif
#if METAJIT_BENCH_OPENBLAS
#include <cblas.h>
#endif

namespace bench {

#if METAJIT_BENCH_EIGEN
namespace {
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMatMap = Eigen::Map<const RowMajor>;
using MatMap = Eigen::Map<RowMajor>;

// [begin, end) of this thread's share of n items, in multiples of `grain`.
std::pair<int64_t, int64_t> share(int64_t n, int64_t grain = 16) {
  const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
  const int64_t chunks = (n + grain - 1) / grain;
  const int64_t b = chunks * t / nt * grain, e = chunks * (t + 1) / nt * grain;
  return {std::min(b, n), std::min(e, n)};
}
}  // namespace

Impl eigen_selu(const Buffer& x) {
  Buffer out(x.size());
  Impl im;
  im.name = "Eigen";
  im.run = [x, out] {
#pragma omp parallel
    {
      auto [b, e] = share(x.size());
      Eigen::Map<const Eigen::ArrayXf> a(x.data() + b, e - b);
      Eigen::Map<Eigen::ArrayXf> o(out.data() + b, e - b);
      o = 1.05f * (a > 0.0f).select(a, 1.67f * a.exp() - 1.67f);
    }
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}

Impl eigen_row_sums(const Mat& x) {
  Buffer out(x.rows);
  Impl im;
  im.name = "Eigen";
  im.run = [x, out] {
#pragma omp parallel
    {
      auto [b, e] = share(x.rows, 1);
      ConstMatMap m(x.buf.data() + b * x.cols, e - b, x.cols);
      Eigen::Map<Eigen::VectorXf> o(out.data() + b, e - b);
      o = m.rowwise().sum();
    }
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}

Impl eigen_col_sums(const Mat& x) {
  Buffer out(x.cols);
  Impl im;
  im.name = "Eigen";
  im.run = [x, out] {
    ConstMatMap m(x.buf.data(), x.rows, x.cols);
#pragma omp parallel
    {
      auto [b, e] = share(x.cols);
      Eigen::Map<Eigen::RowVectorXf> o(out.data() + b, e - b);
      o = m.middleCols(b, e - b).colwise().sum();
    }
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}

Impl eigen_softmax(const Mat& x) {
  Buffer out(x.rows * x.cols);
  Impl im;
  im.name = "Eigen";
  im.run = [x, out] {
    ConstMatMap m(x.buf.data(), x.rows, x.cols);
    MatMap o(out.data(), x.rows, x.cols);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < x.rows; ++r) {
      auto in = m.row(r).array();
      auto y = o.row(r).array();
      y = (in - in.maxCoeff()).exp();
      y *= 1.0f / y.sum();
    }
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}

Impl eigen_matmul(const Mat& a, const Mat& b) {
  Buffer out(a.rows * b.cols);
  Impl im;
  im.name = "Eigen";
  im.run = [a, b, out] {
    ConstMatMap ma(a.buf.data(), a.rows, a.cols), mb(b.buf.data(), b.rows, b.cols);
    MatMap mc(out.data(), a.rows, b.cols);
    mc.noalias() = ma * mb;
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}
#else
Impl eigen_selu(const Buffer&) {
  return not_built("Eigen", "Eigen3 (libeigen3-dev)");
}
Impl eigen_row_sums(const Mat&) {
  return not_built("Eigen", "Eigen3 (libeigen3-dev)");
}
Impl eigen_col_sums(const Mat&) {
  return not_built("Eigen", "Eigen3 (libeigen3-dev)");
}
Impl eigen_softmax(const Mat&) {
  return not_built("Eigen", "Eigen3 (libeigen3-dev)");
}
Impl eigen_matmul(const Mat&, const Mat&) {
  return not_built("Eigen", "Eigen3 (libeigen3-dev)");
}
#endif

#if METAJIT_BENCH_OPENBLAS
Impl openblas_sgemm(const Mat& a, const Mat& b) {
  Buffer out(a.rows * b.cols);
  Impl im;
  im.name = "OpenBLAS sgemm";
  im.run = [a, b, out] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(a.rows), int(b.cols), int(a.cols),
                1.0f, a.buf.data(), int(a.cols), b.buf.data(), int(b.cols), 0.0f, out.data(),
                int(b.cols));
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}

Impl openblas_sgemm_transposed(const Mat& a, bool trans_a, const Mat& b, bool trans_b) {
  const int64_t m = trans_a ? a.cols : a.rows, k = trans_a ? a.rows : a.cols;
  const int64_t n = trans_b ? b.rows : b.cols;
  Buffer out(m * n);
  Impl im;
  im.name = "OpenBLAS sgemm";
  im.run = [=] {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), 1.0f, a.buf.data(),
                int(a.cols), b.buf.data(), int(b.cols), 0.0f, out.data(), int(n));
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}

Impl openblas_batched_sgemm(const Buffer& a, const Buffer& b, int64_t batch, int64_t n, int64_t k,
                            int64_t m) {
  Buffer out(batch * n * m);
  Impl im;
  im.name = "OpenBLAS sgemm";
  im.run = [=] {
    for (int64_t q = 0; q < batch; ++q)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(m), int(k), 1.0f,
                  a.data() + q * n * k, int(k), b.data() + q * k * m, int(m), 0.0f,
                  out.data() + q * n * m, int(m));
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}

// col[n][(c*kh + i)*kw + j][oy*ow + ox] = x[n][c][oy*stride + i - pad][ox*stride + j - pad]
// (0 outside), for all images in one OpenMP region; then out[n] = w[o][c*kh*kw] x col[n], one
// sgemm per image. (Alternating OpenMP regions with OpenBLAS's own threads per image would
// leave each pool spinning while the other works: 2 cores cannot take that.)
Impl im2col_sgemm(const Buffer& x, const Buffer& w, const ConvShape& s) {
  const int64_t oh = s.oh(), ow = s.ow(), k = s.c * s.kh * s.kw, pixels = oh * ow;
  Buffer col(s.n * k * pixels), out(s.n * s.o * pixels);
  Impl im;
  im.name = "im2col + OpenBLAS sgemm";
  im.run = [=] {
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t c = 0; c < s.c; ++c) {
        const float* plane = x.data() + (n * s.c + c) * s.h * s.w;
        for (int64_t i = 0; i < s.kh; ++i)
          for (int64_t j = 0; j < s.kw; ++j) {
            float* dst = col.data() + (n * k + (c * s.kh + i) * s.kw + j) * pixels;
            for (int64_t oy = 0; oy < oh; ++oy) {
              const int64_t iy = oy * s.stride + i - s.pad;
              float* d = dst + oy * ow;
              if (iy < 0 || iy >= s.h) {
                std::fill(d, d + ow, 0.0f);
                continue;
              }
              // Columns whose input lies inside the image: [lo, hi); zeros around them.
              const int64_t off = j - s.pad;
              const int64_t lo = std::clamp<int64_t>((-off + s.stride - 1) / s.stride, 0, ow);
              const int64_t hi = std::clamp<int64_t>((s.w - off + s.stride - 1) / s.stride, lo, ow);
              std::fill(d, d + lo, 0.0f);
              const float* src = plane + iy * s.w + off;
              if (s.stride == 1) {
                std::copy(src + lo, src + hi, d + lo);
              } else {
                for (int64_t ox = lo; ox < hi; ++ox) d[ox] = src[ox * s.stride];
              }
              std::fill(d + hi, d + ow, 0.0f);
            }
          }
      }
    for (int64_t n = 0; n < s.n; ++n)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.o), int(pixels), int(k), 1.0f,
                  w.data(), int(k), col.data() + n * k * pixels, int(pixels), 0.0f,
                  out.data() + n * s.o * pixels, int(pixels));
  };
  im.result = [out] { return out.to_vector(); };
  return im;
}
#else
Impl openblas_sgemm(const Mat&, const Mat&) {
  return not_built("OpenBLAS sgemm", "OpenBLAS (libopenblas-dev)");
}
Impl openblas_sgemm_transposed(const Mat&, bool, const Mat&, bool) {
  return not_built("OpenBLAS sgemm", "OpenBLAS (libopenblas-dev)");
}
Impl openblas_batched_sgemm(const Buffer&, const Buffer&, int64_t, int64_t, int64_t, int64_t) {
  return not_built("OpenBLAS sgemm", "OpenBLAS (libopenblas-dev)");
}
Impl im2col_sgemm(const Buffer&, const Buffer&, const ConvShape&) {
  return not_built("im2col + OpenBLAS sgemm", "OpenBLAS (libopenblas-dev)");
}
#endif

}  // namespace bench
