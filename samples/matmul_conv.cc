// matmul and conv2d written with meta-ops only (broadcast/reindex, multiply, sum), each run
// as one fused kernel and checked against plain loops.
#include <metajit/metajit.h>

#include <cmath>
#include <cstdio>

using namespace metajit;

int main() {
  const int n = 64, k = 48, m = 32;
  Var a = rand({n, k}, 1), b = rand({k, m}, 2);
  std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  reset_stats();
  Var c = matmul(a, b);
  std::vector<float> cv = c.to_vector<float>();
  double err = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) {
      float ref = 0;
      for (int p = 0; p < k; ++p) ref += av[i * k + p] * bv[p * m + j];
      err = std::fmax(err, std::fabs(ref - cv[i * m + j]) / std::fmax(1.0f, std::fabs(ref)));
    }
  std::printf("matmul [%d,%d]x[%d,%d]: %llu kernel(s), max rel error %.2e\n", n, k, k, m,
              (unsigned long long)stats().kernels_launched, err);

  const int N = 2, C = 3, H = 10, W = 9, O = 4, R = 3;
  Var x = randn({N, C, H, W}, 3), w = randn({O, C, R, R}, 4);
  std::vector<float> xv = x.to_vector<float>(), wv = w.to_vector<float>();
  reset_stats();
  Var y = conv2d(x, w, /*stride=*/2, /*padding=*/1);
  std::vector<float> yv = y.to_vector<float>();
  const int oh = (H + 2 - R) / 2 + 1, ow = (W + 2 - R) / 2 + 1;
  double cerr = 0;
  for (int in = 0; in < N; ++in)
    for (int o = 0; o < O; ++o)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          float ref = 0;
          for (int c2 = 0; c2 < C; ++c2)
            for (int r = 0; r < R; ++r)
              for (int s = 0; s < R; ++s) {
                int hi = i * 2 - 1 + r, wi = j * 2 - 1 + s;
                if (hi < 0 || hi >= H || wi < 0 || wi >= W) continue;
                ref += xv[((in * C + c2) * H + hi) * W + wi] * wv[((o * C + c2) * R + r) * R + s];
              }
          float got = yv[((in * O + o) * oh + i) * ow + j];
          cerr = std::fmax(cerr, std::fabs(ref - got) / std::fmax(1.0f, std::fabs(ref)));
        }
  std::printf(
      "conv2d [%d,%d,%d,%d] * [%d,%d,%d,%d] stride 2 pad 1 -> [%d,%d,%d,%d]: %llu kernel(s), "
      "max rel error %.2e\n",
      N, C, H, W, O, C, R, R, N, O, oh, ow, (unsigned long long)stats().kernels_launched, cerr);
  return (err < 1e-4 && cerr < 1e-4) ? 0 : 1;
}
