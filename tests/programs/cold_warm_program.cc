// Started twice by test_cold_warm against one cache directory: evaluates a few distinct
// kernels and prints "compiled=N disk_hits=M launched=L checksum=C".
#include <metajit/metajit.h>

#include <cstdio>

using namespace metajit;

int main() {
  Var x = rand({64, 32}, 7), w = rand({32, 16}, 8);
  Var a = softmax(matmul(x, w), 1);
  Var b = sum(exp(x * 0.5 - 1.0), {0});
  Var c = max_pool2d(reshape(x, {1, 2, 32, 32}), 2, 2);
  eval({a, b, c});
  double checksum = 0;
  for (const Var& v : {a, b, c})
    for (float f : v.to_vector<float>()) checksum += f;
  Stats s = stats();
  std::printf("compiled=%llu disk_hits=%llu launched=%llu checksum=%.6f\n",
              (unsigned long long)s.kernels_compiled, (unsigned long long)s.disk_hits,
              (unsigned long long)s.kernels_launched, checksum);
  return 0;
}
