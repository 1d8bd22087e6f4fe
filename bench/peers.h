// The peers metajit is measured against. Each function returns one Impl that computes the
// workload from the given input (already filled, not copied) into its own output buffer,
// which is allocated and first touched here, outside any timing. A peer whose library was not
// found at configure time returns an Impl with `skipped` saying so.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bench/buffer.h"
#include "bench/timing.h"

namespace bench {

// Row-major [rows, cols] float32.
struct Mat {
  Buffer buf;
  int64_t rows = 0, cols = 0;
};

// NCHW input and OIHW weights of a stride/padding convolution (dilation 1).
struct ConvShape {
  int64_t n, c, h, w, o, kh, kw, stride, pad;
  int64_t oh() const { return (h + 2 * pad - kh) / stride + 1; }
  int64_t ow() const { return (w + 2 * pad - kw) / stride + 1; }
};

// --- hand-written loops, one OpenMP pass per operation, like an eager framework ---
Impl loops_selu(const Buffer& x);
Impl loops_row_sums(const Mat& x);
Impl loops_col_sums(const Mat& x);
Impl loops_softmax(const Mat& x);  // 3 passes: row max, exp and row sum, divide
// table[ids[i], :] += g[i, :] for each row i in order, one thread (colliding ids), into a
// zeroed [rows, d] table.
Impl loops_scatter_rows(const Buffer& g, std::vector<int64_t> ids, int64_t rows, int64_t d);
// out[i, j] = x[i, index[i, j]], OpenMP over rows.
Impl loops_gather_rows(const Buffer& x, std::vector<int64_t> index, int64_t rows, int64_t cols);
// 3x3 max pooling, stride 2, padding 1 (padded cells never win), of `planes` hw x hw images,
// OpenMP over the planes.
Impl loops_max_pool_3x3s2(const Buffer& x, int64_t planes, int64_t hw);

// --- Eigen 3 (array expressions; OpenMP blocks around them, Eigen's own threads for GEMM) ---
Impl eigen_selu(const Buffer& x);
Impl eigen_row_sums(const Mat& x);
Impl eigen_col_sums(const Mat& x);
Impl eigen_softmax(const Mat& x);
Impl eigen_matmul(const Mat& a, const Mat& b);

// --- OpenBLAS ---
Impl openblas_sgemm(const Mat& a, const Mat& b);
// op(a) x op(b) with op = transpose where asked: a matmul's gradients (g b^T, a^T g).
Impl openblas_sgemm_transposed(const Mat& a, bool trans_a, const Mat& b, bool trans_b);
// `batch` row-major [n,k] x [k,m] products, one sgemm each (OpenBLAS's own threads in each).
Impl openblas_batched_sgemm(const Buffer& a, const Buffer& b, int64_t batch, int64_t n, int64_t k,
                            int64_t m);
Impl im2col_sgemm(const Buffer& x, const Buffer& w, const ConvShape& s);  // im2col is ours

// --- hand-written Winograd F(4x4,3x3), stride-1 padding-1 3x3 layers (bench/peers_winograd.cc),
// built for AVX2 (x86-64-v3) and for the host; winograd_f4x4_3x3 picks the one of the bench's
// --target (METAJIT_BENCH_TARGET), and is skipped for the portable target ---
Impl winograd_f4x4_3x3_avx2(const Buffer& x, const Buffer& w, const ConvShape& s);
Impl winograd_f4x4_3x3_native(const Buffer& x, const Buffer& w, const ConvShape& s);
Impl winograd_f4x4_3x3(const Buffer& x, const Buffer& w, const ConvShape& s);

// --- Halide JIT (hand schedules) ---
std::string halide_target();  // the JIT target (HL_JIT_TARGET, else the host)
Impl halide_selu(const Buffer& x);
Impl halide_row_sums(const Mat& x);
Impl halide_col_sums(const Mat& x);
Impl halide_softmax(const Mat& x);
Impl halide_matmul(const Mat& a, const Mat& b);

// Returns an Impl that is not run, for a peer that is not built.
inline Impl not_built(std::string name, const std::string& package) {
  Impl im;
  im.name = std::move(name);
  im.skipped = "not built: " + package + " not found at configure time";
  return im;
}

}  // namespace bench
