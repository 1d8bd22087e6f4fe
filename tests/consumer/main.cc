#include <metajit/metajit.h>

#include <cstdio>

int main() {
  using namespace metajit;
  Var x = arange(4, DType::Float32);
  float total = sum(x * x).item<float>();  // 0 + 1 + 4 + 9
  std::printf("consumer: sum of squares = %g\n", total);
  return total == 14.0f ? 0 : 1;
}
