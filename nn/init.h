// The initial values of a layer's parameters and buffers (torch.nn.init's uniform_, normal_ and
// constant_, with the bounds torch's layers use), drawn from the random stream or, when the
// layer was given a seed, from fixed seeds derived from it (include/metajit/nn.h, "layers").
//
// Each value is returned realized. Random values are drawn flat and evaluated one at a time, so
// every layer's initialisation runs the same few kernels (one draw of each kind, whatever the
// parameter's shape and the layer), and constants are made on the host with no kernel at all:
// building a model compiles almost nothing.
#pragma once
#include <metajit/var.h>

#include <cstdint>
#include <optional>

namespace metajit::nn {

// One layer's draws, in the order it makes them. Unseeded, each is rand/randn without a seed:
// the next numbers of the random stream. Seeded, draw k uses a seed derived from (seed, k), so
// a layer's parameters are independent of each other and of a layer given seed + 1.
class Init {
 public:
  explicit Init(std::optional<uint64_t> seed) : seed_(seed) {}
  // U(-bound, bound), Float32.
  Var uniform(const Shape& shape, double bound);
  // N(0, 1), Float32.
  Var normal(const Shape& shape);
  // The seed for a child layer's own Init: derived like a draw's, or unset.
  std::optional<uint64_t> child_seed();

 private:
  std::optional<uint64_t> next();
  std::optional<uint64_t> seed_;
  uint64_t drawn_ = 0;
};

// `value` everywhere, Float32 (or Int64 when `dtype` says so), made on the host.
Var filled(const Shape& shape, double value, DType dtype = DType::Float32);

// 1 / sqrt(fan_in), 0 when fan_in is 0: the bound of torch's kaiming_uniform_(a = sqrt(5)) on a
// weight, and of the bias of Linear and Conv2d.
double fan_in_bound(int64_t fan_in);

}  // namespace metajit::nn
