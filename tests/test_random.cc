// The random stream (meta_ops/random_stream.h): Philox4x32-10 against the known-answer vectors
// of its authors' Random123 distribution; rand/randn without a seed against a host Philox
// written here (the exact bits of the stream: element i of a draw is the block of counter
// offset + i under the seed); new numbers on every call and every jit replay, reproducible
// from manual_seed, with no new kernel (seed and counter are inputs); dropout's mask and
// gradient. The [cuda-emu] cases run again on CUDA (tests/CMakeLists.txt): the same counters
// give the same numbers there.
#include <metajit/metajit.h>

#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "meta_ops/random_stream.h"
#include "support/exceptions.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::message_of;

namespace {

using Block = std::array<uint32_t, 4>;

// Philox4x32-10 on the host, from the paper's definition.
Block host_philox(Block c, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c[0], p1 = uint64_t(0xCD9E8D57u) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k1,
         uint32_t(p0)};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

// Element i of a stream draw starting at counter `offset` under `seed`.
Block stream_block(uint64_t seed, uint64_t offset, uint64_t i) {
  const uint64_t counter = offset + i;
  return host_philox({uint32_t(counter), uint32_t(counter >> 32), 0, 0}, uint32_t(seed),
                     uint32_t(seed >> 32));
}

std::vector<double> as_doubles(const Var& v) {
  return cast(v, DType::Float64).to_vector<double>();
}

}  // namespace

TEST_CASE("Philox4x32-10 in kernels gives Random123's known answers", "[random]") {
  struct Kat {
    Block counter;
    uint32_t k0, k1;
    Block want;
  };
  const std::vector<Kat> kats = {
      {{0, 0, 0, 0}, 0, 0, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       0xffffffff,
       0xffffffff,
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       0xa4093822,
       0x299f31d0,
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    CHECK(host_philox(k.counter, k.k0, k.k1) == k.want);
    std::array<Var, 4> c;
    for (size_t w = 0; w < 4; ++w) c[w] = array(std::vector<int64_t>{int64_t(k.counter[w])}, {1});
    const std::array<Var, 4> out =
        philox4x32(c, scalar(double(k.k0), DType::Int64), scalar(double(k.k1), DType::Int64));
    for (size_t w = 0; w < 4; ++w) {
      INFO("word " << w);
      CHECK(out[w].to_vector<int64_t>() == std::vector<int64_t>{int64_t(k.want[w])});
    }
  }
}

TEST_CASE("rand and randn draw the stream's exact numbers on the current device",
          "[random][cuda-emu]") {
  INFO(describe_device(device()));
  const uint64_t seed = 0x123456789abcdefULL;
  manual_seed(seed);
  const int64_t n = 1000;
  const std::vector<double> u32 = as_doubles(rand({n}));                     // counters 0..999
  const std::vector<double> u64 = as_doubles(rand({4, 5}, DType::Float64));  // 1000..1019
  const std::vector<double> g32 = as_doubles(randn({n}));                    // 1020..2019
  for (int64_t i = 0; i < n; ++i) {
    const Block b = stream_block(seed, 0, uint64_t(i));
    INFO("element " << i);
    CHECK(u32[size_t(i)] == double(b[0] >> 8) * 0x1p-24);
    const Block g = stream_block(seed, 1020, uint64_t(i));
    const float u1 = float(double(g[0] >> 8) * 0x1p-24 + 0x1p-24);
    const float u2 = float(double(g[2] >> 8) * 0x1p-24);
    const float z = std::sqrt(std::log(u1) * -2.0f) * std::cos(u2 * float(2 * std::numbers::pi));
    CHECK(std::fabs(g32[size_t(i)] - z) <= 1e-5 * (1 + std::fabs(z)));
  }
  for (uint64_t i = 0; i < 20; ++i) {
    const Block b = stream_block(seed, 1000, i);
    const uint64_t bits53 = (uint64_t(b[0]) << 21) | (b[1] >> 11);
    CHECK(u64[i] == double(bits53) * 0x1p-53);
  }
}

TEST_CASE("the stream: new numbers each draw, the same after the same seed, no new kernels",
          "[random]") {
  manual_seed(7);
  Var a = rand({64, 64});
  Var b = rand({64, 64});
  eval({a, b});
  CHECK(a.to_vector<float>() != b.to_vector<float>());
  const uint64_t compiles = stats().kernels_compiled;
  manual_seed(7);
  Var a2 = rand({64, 64});
  manual_seed(99);  // another seed: another key word, the same kernel
  Var c = rand({64, 64});
  eval({a2, c});
  CHECK(a2.to_vector<float>() == a.to_vector<float>());
  CHECK(c.to_vector<float>() != a.to_vector<float>());
  CHECK(stats().kernels_compiled == compiles);
  CHECK(plan({rand({64, 64})})[0].key == plan({rand({64, 64})})[0].key);
  // Moments of 2^18 draws (fixed by the seed, so not a flaky check).
  manual_seed(3);
  const std::vector<float> u = rand({1 << 18}).to_vector<float>();
  const std::vector<float> z = randn({1 << 18}).to_vector<float>();
  double su = 0, sz = 0, szz = 0;
  for (float x : u) {
    CHECK((x >= 0 && x < 1));
    su += x;
  }
  for (float x : z) {
    sz += x;
    szz += double(x) * x;
  }
  const double m = double(u.size());
  CHECK(std::fabs(su / m - 0.5) < 0.005);
  CHECK(std::fabs(sz / m) < 0.01);
  CHECK(std::fabs(szz / m - 1) < 0.01);
  // A seeded draw is a fixed host array, as before.
  CHECK(rand({8}, 5).to_vector<float>() == rand({8}, 5).to_vector<float>());
}

TEST_CASE("a jit function draws new numbers on every replay, reproducibly from the seed",
          "[random][cuda-emu]") {
  INFO(describe_device(device()));
  // Two draws, in this order (the operands of one expression would draw in any order).
  auto noisy = jit(
      [](const Var& x) {
        const Var u = rand(x.shape());
        const Var z = randn({5});
        return x + u + z * 0.0;
      },
      "noisy");
  const Var x = zeros({5});
  manual_seed(11);
  const std::vector<float> r1 = noisy(x).to_vector<float>();
  const uint64_t compiles = stats().kernels_compiled;
  const std::vector<float> r2 = noisy(x).to_vector<float>();
  CHECK(r1 != r2);
  CHECK(stats().kernels_compiled == compiles);
  CHECK(noisy.traces() == 1);
  // Each call takes 5 + 5 counters from the stream, as the eager draws would.
  manual_seed(11);
  CHECK(noisy(x).to_vector<float>() == r1);
  manual_seed(11);
  const std::vector<float> eager = (x + rand({5})).to_vector<float>();
  CHECK(eager == r1);
  for (int64_t i = 0; i < 5; ++i)
    CHECK(r2[size_t(i)] == float(double(stream_block(11, 10, uint64_t(i))[0] >> 8) * 0x1p-24));
}

TEST_CASE(
    "dropout zeroes with probability p, scales the rest, passes the gradient through the mask",
    "[random]") {
  manual_seed(5);
  const int64_t n = 1 << 16;
  Var x = ones({n}, DType::Float64);
  Var y = dropout(x, 0.25);
  std::vector<Var> g = grad(sum(y * 3.0), {x});
  eval({y, g[0]});
  const std::vector<double> yv = y.to_vector<double>(), gv = g[0].to_vector<double>();
  int64_t zeros_seen = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = yv[size_t(i)];
    CHECK((v == 0 || v == 1 / 0.75));
    zeros_seen += v == 0;
    CHECK(gv[size_t(i)] == 3 * v);  // the same mask: one draw in the graph
  }
  CHECK(std::fabs(double(zeros_seen) / double(n) - 0.25) < 0.01);
  // Another call: another mask.
  CHECK(dropout(x, 0.25).to_vector<double>() != yv);
  // Not training, or p = 0: x itself; p = 1: zeros.
  CHECK(dropout(x, 0.5, false).node() == x.node());
  CHECK(dropout(x, 0.0).node() == x.node());
  CHECK(dropout(x, 1.0).to_vector<double>() == std::vector<double>(size_t(n), 0.0));
  std::string m = message_of<Error>([&] { dropout(x, 1.5); });
  CHECK_THAT(m, Contains("dropout: p = 1.5") && Contains("0 <= p <= 1"));
  m = message_of<DTypeError>([&] { dropout(ones({2}, DType::Int32), 0.5); });
  CHECK_THAT(m, Contains("dropout") && Contains("int32"));
  m = message_of<DTypeError>([&] { rand({2}, DType::Int64); });
  CHECK_THAT(m, Contains("rand") && Contains("float32 or float64"));
}

TEST_CASE("the stream draws half types: rand and randn round a Float32 draw, dropout keeps 1 - p",
          "[random][precision]") {
  const int64_t n = 1 << 15;
  for (DType t : {DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(t));
    // The same counters drawn as Float32 and as the half type: the half draw is the Float32 one
    // rounded once, [0, 1) kept by the type's largest value below 1.
    manual_seed(11);
    const std::vector<double> u32 = as_doubles(rand({n}, DType::Float32));
    manual_seed(11);
    Var u = rand({n}, t);
    CHECK(u.dtype() == t);
    const std::vector<double> uh = as_doubles(u);
    const double below_one = t == DType::Float16 ? 1.0 - 0x1p-11 : 1.0 - 0x1p-8;
    double mean = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (i < 64)
        CHECK(uh[size_t(i)] ==
              as_doubles(cast(scalar(std::min(u32[size_t(i)], below_one), DType::Float32), t))[0]);
      REQUIRE((uh[size_t(i)] >= 0 && uh[size_t(i)] < 1));
      mean += uh[size_t(i)] / double(n);
    }
    CHECK(std::fabs(mean - 0.5) < 0.01);
    const std::vector<double> z = as_doubles(randn({n}, t));
    double zm = 0, zv = 0;
    for (double v : z) {
      REQUIRE(std::isfinite(v));
      zm += v / double(n);
    }
    for (double v : z) zv += (v - zm) * (v - zm) / double(n);
    CHECK(std::fabs(zm) < 0.03);
    CHECK(std::fabs(zv - 1) < 0.05);
    // dropout on a half input: the mask compares a Float32 draw with p exactly.
    const std::vector<double> d = as_doubles(dropout(ones({n}, t), 0.25));
    const double kept = as_doubles(cast(scalar(4.0 / 3.0, DType::Float64), t))[0];
    int64_t dropped = 0;
    for (double v : d) {
      REQUIRE((v == 0 || v == kept));
      dropped += v == 0;
    }
    CHECK(std::fabs(double(dropped) / double(n) - 0.25) < 0.01);
  }
}
