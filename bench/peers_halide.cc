// Halide JIT peers with hand schedules (no autoscheduler). Each pipeline is defined and JIT
// compiled once when its Impl is made (outside timing); the timed call is realize() into a
// preallocated output that wraps our buffer, reading the input in place.
#include "bench/peers.h"

#if METAJIT_BENCH_HALIDE
#include <Halide.h>

namespace bench {
namespace {

using Halide::Expr;
using Halide::Func;
using Halide::RDom;
using Halide::RVar;
using Halide::Var;

constexpr int kVec = 16;  // 16 floats: one AVX-512 vector, two AVX2 ones

Halide::Target jit_target() {
  return Halide::get_jit_target_from_environment();
}

// A 1-D or 2-D (x = column, y = row) Halide view of one of our buffers, no copy.
Halide::Buffer<float> view(const Buffer& b) {
  return Halide::Buffer<float>(b.data(), int(b.size()));
}
Halide::Buffer<float> view(const Buffer& b, int64_t rows, int64_t cols) {
  return Halide::Buffer<float>(b.data(), int(cols), int(rows));
}

// An Impl whose timed call realizes `f` into `out` (already compiled).
Impl realize_impl(std::string name, Func f, Halide::Buffer<float> out, Buffer storage) {
  f.compile_jit(jit_target());
  Impl im;
  im.name = std::move(name);
  im.run = [f, out]() mutable { f.realize(out); };
  im.result = [storage] { return storage.to_vector(); };
  return im;
}

// Vectorizes a sum/max reduction of `f(y)` over the row (r.x): rfactor into 4 x kVec lanes
// (4 independent vector accumulators), computed per row at loop level `at`.
void vectorize_row_reduction(Func f, RDom r, Halide::LoopLevel at) {
  RVar ro("ro"), ri("ri");
  Var u("u");
  Func partial = f.update().split(r.x, ro, ri, 4 * kVec).rfactor(ri, u);
  partial.compute_at(at).vectorize(u, kVec);
  partial.update().vectorize(u, kVec);
}

}  // namespace

std::string halide_target() {
  return jit_target().to_string();
}

Impl halide_selu(const Buffer& x) {
  Buffer out(x.size());
  Halide::Buffer<float> in = view(x);
  Var i("i"), io("io"), ii("ii");
  Func f("selu");
  Expr v = in(i);
  f(i) = 1.05f * Halide::select(v > 0.0f, v, 1.67f * Halide::exp(v) - 1.67f);
  f.split(i, io, ii, 1 << 14).parallel(io).vectorize(ii, kVec);
  return realize_impl("Halide JIT", f, view(out), out);
}

Impl halide_row_sums(const Mat& x) {
  Buffer out(x.rows);
  Halide::Buffer<float> in = view(x.buf, x.rows, x.cols);
  Var y("y");
  RDom r(0, int(x.cols));
  Func acc("row_acc"), f("row_sums");
  acc(y) = 0.0f;
  acc(y) += in(r.x, y);
  f(y) = acc(y);
  // Blocks of 16 rows in parallel (the last block guarded: rows need not divide by 16).
  Var yo("yo"), yi("yi");
  f.split(y, yo, yi, 16, Halide::TailStrategy::GuardWithIf).parallel(yo);
  acc.compute_at(f, yi);
  vectorize_row_reduction(acc, r, Halide::LoopLevel(f, yi));
  return realize_impl("Halide JIT", f, view(out), out);
}

Impl halide_col_sums(const Mat& x) {
  Buffer out(x.cols);
  Halide::Buffer<float> in = view(x.buf, x.rows, x.cols);
  Var c("c"), co("co"), ci("ci");
  RDom r(0, int(x.rows));
  Func f("col_sums");
  f(c) = 0.0f;
  f(c) += in(c, r.x);
  // Bands of 256 columns per task; inside, all rows over the band (accumulators in L1).
  f.split(c, co, ci, 256).parallel(co).vectorize(ci, kVec);
  f.update()
      .split(c, co, ci, 256, Halide::TailStrategy::GuardWithIf)
      .reorder(ci, r.x, co)
      .parallel(co)
      .vectorize(ci, kVec);
  return realize_impl("Halide JIT", f, view(out), out);
}

Impl halide_softmax(const Mat& x) {
  Buffer out(x.rows * x.cols);
  Halide::Buffer<float> in = view(x.buf, x.rows, x.cols);
  Var c("c"), y("y");
  RDom r(0, int(x.cols));
  Func mx("row_max"), e("exp"), s("row_sum"), f("softmax");
  mx(y) = Halide::Float(32).min();
  mx(y) = Halide::max(mx(y), in(r.x, y));
  e(c, y) = Halide::exp(in(c, y) - mx(y));
  s(y) = 0.0f;
  s(y) += e(r.x, y);
  f(c, y) = e(c, y) / s(y);
  // One row per iteration of a parallel loop: max, then exp kept in a row buffer, sum, divide.
  f.parallel(y, 8).vectorize(c, kVec);
  mx.compute_at(f, y);
  vectorize_row_reduction(mx, r, Halide::LoopLevel(f, y));
  e.compute_at(f, y).vectorize(c, kVec);
  s.compute_at(f, y);
  vectorize_row_reduction(s, r, Halide::LoopLevel(f, y));
  return realize_impl("Halide JIT", f, view(out, x.rows, x.cols), out);
}

Impl halide_matmul(const Mat& a, const Mat& b) {
  Buffer out(a.rows * b.cols);
  Halide::Buffer<float> A = view(a.buf, a.rows, a.cols), B = view(b.buf, b.rows, b.cols);
  Var x("x"), y("y"), xo("xo"), yo("yo"), xi("xi"), yi("yi"), t("t");
  RDom k(0, int(a.cols));
  Func prod("prod"), f("matmul");
  prod(x, y) = 0.0f;
  prod(x, y) += A(k.x, y) * B(x, k.x);
  f(x, y) = prod(x, y);
  // 32x8 register tiles (16 zmm accumulators), the reduction over k outside the unrolled
  // tile; tiles walk down a 32-column strip of B (128 KB, stays in L2) before moving right.
  f.tile(x, y, xo, yo, xi, yi, 2 * kVec, 8)
      .vectorize(xi, kVec)
      .unroll(xi)
      .unroll(yi)
      .reorder(xi, yi, yo, xo)
      .fuse(yo, xo, t)
      .parallel(t);
  prod.compute_at(f, t).vectorize(x, kVec).unroll(x).unroll(y);
  prod.update().reorder(x, y, k.x).vectorize(x, kVec).unroll(x).unroll(y);
  return realize_impl("Halide JIT", f, view(out, a.rows, b.cols), out);
}

}  // namespace bench

#else  // no Halide

namespace bench {
Impl halide_selu(const Buffer&) {
  return not_built("Halide JIT", "Halide (libhalide14-0-dev)");
}
Impl halide_row_sums(const Mat&) {
  return not_built("Halide JIT", "Halide (libhalide14-0-dev)");
}
Impl halide_col_sums(const Mat&) {
  return not_built("Halide JIT", "Halide (libhalide14-0-dev)");
}
Impl halide_softmax(const Mat&) {
  return not_built("Halide JIT", "Halide (libhalide14-0-dev)");
}
Impl halide_matmul(const Mat&, const Mat&) {
  return not_built("Halide JIT", "Halide (libhalide14-0-dev)");
}
}  // namespace bench

#endif
