// The 8- and 16-bit dtypes (precision issue; docs/design.md §3): the public float16 / bfloat16
// conversions bit-exact against an independent implementation for every half value and many
// floats, the same conversions in generated kernels on every vector width, direct rounding from
// double, the promotion table, where half values round (stores and casts, not every op of a
// fused kernel), and every op and cast on every new dtype against the reference interpreter.
// The suite runs again on CUDA (tests/CMakeLists.txt: cuda-emu:test_precision on the host
// emulation, cuda:test_precision on a GPU), where the same checks hold but for NaN's bits.
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "support/reference_check.h"
#include "support/scoped_env.h"
#include "support/skip.h"
#include "support/typed_arrays.h"

using namespace metajit;
using Catch::Matchers::Contains;
using metajit_test::ScopedEnv;

namespace {

constexpr DType kNewTypes[] = {DType::Int8, DType::UInt8, DType::Int16, DType::Float16,
                               DType::BFloat16};
constexpr DType kAllTypes[] = {DType::Bool,    DType::Int32,   DType::Int64, DType::Float32,
                               DType::Float64, DType::Int8,    DType::UInt8, DType::Int16,
                               DType::Float16, DType::BFloat16};

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// GCC's own _Float16 (libgcc's soft-float or F16C): the implementation float16 is checked
// against. Its conversions round to nearest even and quiet a NaN keeping its payload's top bits.
uint16_t gcc_f16_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float gcc_f16_value(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}

// A bfloat16's value as IEEE rounding sees it: the pattern past the largest finite value (Inf's)
// stands for 2^128, the next power of two, so that overflow starts halfway to it.
double bf16_value(uint32_t b) {
  if ((b & 0x7fffu) == 0x7f80u) return (b & 0x8000u) ? -0x1p128 : 0x1p128;
  return double(float_of(b << 16));
}

// bfloat16 by definition: of the two bfloat16 neighbours of f (its top half, and that plus one
// unit), the nearer in double arithmetic, the even one on a tie; NaN is 0x7fc0 with f's sign.
uint16_t bf16_by_definition(float f) {
  if (std::isnan(f)) return uint16_t(((bits_of(f) >> 16) & 0x8000u) | 0x7fc0u);
  if (std::isinf(f)) return uint16_t(bits_of(f) >> 16);
  const uint32_t lo = bits_of(f) >> 16, hi = lo + 1;
  const double dlo = std::fabs(bf16_value(lo) - f);
  const double dhi = std::fabs(bf16_value(hi) - f);
  if (dlo < dhi || (dlo == dhi && (lo & 1u) == 0)) return uint16_t(lo);
  return uint16_t(hi);
}

// Float bit patterns for the conversion checks: a stride through all of them, and the edges
// (zeros, the halves' boundaries and ties, subnormals, Inf, NaN payloads), with both signs.
std::vector<float> probe_floats() {
  std::vector<float> out;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 40961) out.push_back(float_of(uint32_t(u)));
  const float edges[] = {0.0f,
                         65504.0f,
                         65519.99f,
                         65520.0f,
                         65536.0f,
                         6.1035156e-05f,
                         6.0975552e-05f,
                         5.9604645e-08f,
                         2.9802322e-08f,
                         2.9802326e-08f,
                         1.0f + 0x1p-11f,
                         1.0f + 0x3p-11f,
                         1.0f + 0x1p-8f,
                         1.0f + 0x3p-8f,
                         3.3895314e38f,
                         3.4028235e38f,
                         std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::denorm_min(),
                         1e-40f};
  for (float e : edges) out.push_back(e), out.push_back(-e);
  for (uint32_t payload : {0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0x7f802000u, 0x7fffffffu})
    out.push_back(float_of(payload)), out.push_back(float_of(payload | 0x80000000u));
  return out;
}

struct Width {
  const char* flags;
  bool runs;
};
// The C++ target's vector widths; one run on CUDA, where the flags do not apply.
std::vector<Width> widths() {
  if (device() == Device::CUDA) return {{"-march=x86-64", true}};
  __builtin_cpu_init();
  return {{"-march=x86-64", true},
          {"-march=x86-64-v3", __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")},
          {"-march=x86-64-v4", __builtin_cpu_supports("avx512f") != 0}};
}

// Runs `body(t)` for both half types on every C++ width this CPU runs, under the width's flags.
template <class Body>
void for_widths_and_halves(Body body) {
  for (const Width& w : widths()) {
    if (!w.runs) continue;
    ScopedEnv flags("METAJIT_CXXFLAGS", w.flags);
    for (DType t : {DType::Float16, DType::BFloat16}) {
      INFO(w.flags << " " << dtype_name(t));
      body(t);
    }
  }
}

std::vector<float16> all_float16() {
  std::vector<float16> v;
  for (uint32_t b = 0; b < 0x10000u; ++b) v.push_back(float16::from_bits(uint16_t(b)));
  return v;
}
std::vector<bfloat16> all_bfloat16() {
  std::vector<bfloat16> v;
  for (uint32_t b = 0; b < 0x10000u; ++b) v.push_back(bfloat16::from_bits(uint16_t(b)));
  return v;
}

}  // namespace

TEST_CASE("float16: every half to float and back, against GCC's _Float16", "[precision]") {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float16 h = float16::from_bits(uint16_t(b));
    const float f = float(h);
    INFO("bits " << b);
    const bool nan = (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0;
    if (nan) {
      REQUIRE(std::isnan(f));
      REQUIRE(std::isnan(gcc_f16_value(uint16_t(b))));
      // Back: the same NaN, quieted (the quiet bit 0x200 set, the payload kept).
      REQUIRE(float16(f).bits == (b | 0x200u));
    } else {
      REQUIRE(bits_of(f) == bits_of(gcc_f16_value(uint16_t(b))));
      REQUIRE(float16(f).bits == b);
    }
  }
}

TEST_CASE("float16 and bfloat16 from float: nearest even, bit-exact", "[precision]") {
  for (float f : probe_floats()) {
    INFO("float bits " << bits_of(f));
    REQUIRE(float16(f).bits == gcc_f16_bits(f));
    REQUIRE(bfloat16(f).bits == bf16_by_definition(f));
  }
  for (uint32_t b = 0; b < 0x10000u; ++b) {  // every bfloat16 widens exactly and comes back
    const bfloat16 h = bfloat16::from_bits(uint16_t(b));
    REQUIRE(bits_of(float(h)) == b << 16);
    const bool nan = (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
    REQUIRE(bfloat16(float(h)).bits == (nan ? ((b & 0x8000u) | 0x7fc0u) : b));
  }
}

TEST_CASE("a double rounds to a half type once, not through float", "[precision]") {
  // 1 + 2^-11 + 2^-40: above the tie between 1 and 1 + 2^-10, so float16 rounds it up; through
  // float (1 + 2^-11, a tie) it would round to 1. bfloat16's alike at 2^-8.
  const double f16_case = 1.0 + 0x1p-11 + 0x1p-40, bf16_case = 1.0 + 0x1p-8 + 0x1p-40;
  CHECK(float(float16_from_double(f16_case)) == 1.0f + 0x1p-10f);
  CHECK(float(float16(float(f16_case))) == 1.0f);
  CHECK(float(bfloat16_from_double(bf16_case)) == 1.0f + 0x1p-7f);
  CHECK(float(bfloat16(float(bf16_case))) == 1.0f);
  // Scalars and casts from float64 in kernels round the same way.
  CHECK(float(full({3}, f16_case, DType::Float16).to_vector<float16>()[0]) == 1.0f + 0x1p-10f);
  Var d = array(std::vector<double>{f16_case, bf16_case, -f16_case}, {3});
  const std::vector<float16> h = cast(d, DType::Float16).to_vector<float16>();
  const std::vector<bfloat16> g = cast(d, DType::BFloat16).to_vector<bfloat16>();
  CHECK(float(h[0]) == 1.0f + 0x1p-10f);
  CHECK(float(h[2]) == -(1.0f + 0x1p-10f));
  CHECK(float(g[1]) == 1.0f + 0x1p-7f);
  // An int32 above float's 24 bits: 2^24 + 2^16 + 1 is above bfloat16's tie at 2^24 + 2^16.
  Var i = array(std::vector<int32_t>{(1 << 24) + (1 << 16) + 1}, {1});
  CHECK(float(cast(i, DType::BFloat16).item<bfloat16>()) == float((1 << 24) + (1 << 17)));
}

TEST_CASE("kernels convert every half value and many floats bit-exactly on every width",
          "[precision]") {
  const std::vector<float16> halves = all_float16();
  const std::vector<bfloat16> bhalves = all_bfloat16();
  const std::vector<float> floats = probe_floats();
  for (const Width& w : widths()) {
    if (!w.runs) continue;
    ScopedEnv flags("METAJIT_CXXFLAGS", w.flags);
    INFO(w.flags);
    const Shape hs = {int64_t(halves.size())}, fs = {int64_t(floats.size())};
    const std::vector<float> widened = cast(array(halves, hs), DType::Float32).to_vector<float>();
    const std::vector<float> bwidened = cast(array(bhalves, hs), DType::Float32).to_vector<float>();
    for (size_t k = 0; k < halves.size(); ++k) {
      INFO("bits " << k);
      const float want = float(halves[k]);
      // On the CPU every payload is kept, a signalling NaN's too (F16C's vcvtph2ps would quiet
      // it: codegen/cpp_narrow_prelude.h mj_widen_f16); CUDA's conversion may not keep it.
      const bool any_nan = device() == Device::CUDA && std::isnan(want);
      REQUIRE((bits_of(widened[k]) == bits_of(want) || (any_nan && std::isnan(widened[k]))));
      REQUIRE(bits_of(bwidened[k]) == bits_of(float(bhalves[k])));
    }
    const Var x = array(floats, fs);
    const std::vector<float16> narrowed = cast(x, DType::Float16).to_vector<float16>();
    const std::vector<bfloat16> bnarrowed = cast(x, DType::BFloat16).to_vector<bfloat16>();
    // CUDA's conversions give every NaN as 0x7fff (codegen/cuda_emulation_prelude.h); the CPU
    // keeps the payload's top bits and the sign, as numpy does.
    const bool canonical_nan = device() == Device::CUDA;
    for (size_t k = 0; k < floats.size(); ++k) {
      INFO("float bits " << bits_of(floats[k]));
      const bool nan = std::isnan(floats[k]) && canonical_nan;
      REQUIRE(narrowed[k].bits == (nan ? 0x7fffu : float16(floats[k]).bits));
      REQUIRE(bnarrowed[k].bits == (nan ? 0x7fffu : bfloat16(floats[k]).bits));
    }
  }
}

// Where a loop runs one element at a time (a nest whose innermost loop holds a reduction's
// loops: CppEmitter::generic_map), float16 elements are read and written by F16C's conversion
// of one lane (mj_f16_one / mj_f16_set_one, codegen/cpp_narrow_prelude.h), not the element
// conversions written for vector lanes: every half value and the probe floats still convert
// bit-exactly, a signalling NaN's payload included (converted again: vcvtph2ps quiets it).
TEST_CASE("float16 elements converted one at a time are bit-exact", "[precision]") {
  if (device() != Device::CPU)
    metajit_test::skip_test("F16C's one-lane conversions are the CPU emitter's");
  const std::vector<float16> halves = all_float16();
  const std::vector<float> floats = probe_floats();
  const int64_t n = int64_t(halves.size()), m = int64_t(floats.size());
  for (const Width& w : widths()) {
    if (!w.runs) continue;
    ScopedEnv flags("METAJIT_CXXFLAGS", w.flags);
    INFO(w.flags);
    // sum(r, 1) >= 0 holds for every row, but only the kernel knows: the select is per element,
    // in the nest of the reduction, and moves the value without arithmetic.
    Var r = rand({n, 3}, 1), q = rand({m, 3}, 2);
    eval({r, q});
    const Var widened = where(sum(r, {1}) >= 0.0, cast(array(halves, {n}), DType::Float32),
                              full({n}, 7.0));
    const Var narrowed =
        cast(where(sum(q, {1}) >= 0.0, array(floats, {m}), full({m}, 7.0)), DType::Float16);
    for (const Var& v : {widened, narrowed}) {
      std::string src;
      for (const KernelInfo& k : plan({v})) src += k.source;
      CHECK_THAT(src, Contains(v.dtype() == DType::Float32 ? "mj_f16_one(" : "mj_f16_set_one("));
    }
    const std::vector<float> wide = widened.to_vector<float>();
    for (int64_t k = 0; k < n; ++k) {
      INFO("bits " << k);
      REQUIRE(bits_of(wide[size_t(k)]) == bits_of(float(halves[size_t(k)])));
    }
    const std::vector<float16> narrow = narrowed.to_vector<float16>();
    for (int64_t k = 0; k < m; ++k) {
      INFO("float bits " << bits_of(floats[size_t(k)]));
      REQUIRE(narrow[size_t(k)].bits == float16(floats[size_t(k)]).bits);
    }
  }
}

TEST_CASE("the promotion table of the new dtypes", "[precision]") {
  CHECK(promote(DType::Int8, DType::UInt8) == DType::Int16);
  CHECK(promote(DType::UInt8, DType::Int8) == DType::Int16);
  CHECK(promote(DType::Float16, DType::BFloat16) == DType::Float32);
  CHECK(promote(DType::Bool, DType::Int8) == DType::Int8);
  CHECK(promote(DType::UInt8, DType::Int16) == DType::Int16);
  CHECK(promote(DType::Int16, DType::Int32) == DType::Int32);
  CHECK(promote(DType::Int64, DType::Float16) == DType::Float16);
  CHECK(promote(DType::Int64, DType::BFloat16) == DType::BFloat16);
  CHECK(promote(DType::Float16, DType::Float32) == DType::Float32);
  CHECK(promote(DType::BFloat16, DType::Float64) == DType::Float64);
  for (DType t : kAllTypes) CHECK(promote(t, t) == t);
  // Built graphs follow it, and a double operand takes the Var's dtype.
  Var a = array(std::vector<int8_t>{1, -2}, {2}), b = array(std::vector<uint8_t>{3, 4}, {2});
  CHECK((a + b).dtype() == DType::Int16);
  CHECK((a * 2.5).dtype() == DType::Int8);
  Var h = full({2}, 1.5, DType::Float16), g = full({2}, 1.5, DType::BFloat16);
  CHECK((h + g).dtype() == DType::Float32);
  CHECK((h * 3.0).dtype() == DType::Float16);
  CHECK(dtype_name(DType::BFloat16) == std::string("bfloat16"));
  CHECK(dtype_size(DType::Float16) == 2);
  CHECK(dtype_size(DType::UInt8) == 1);
}

TEST_CASE("arrays, items and printing of the new dtypes", "[precision]") {
  Var a = array(std::vector<int8_t>{-128, 0, 127}, {3});
  CHECK(a.dtype() == DType::Int8);
  CHECK(a.to_vector<int8_t>() == std::vector<int8_t>{-128, 0, 127});
  Var u = array(std::vector<uint8_t>{0, 200, 255}, {3});
  CHECK(u.to_vector<uint8_t>()[1] == 200);
  Var s = array(std::vector<int16_t>{-32768, 7}, {2});
  CHECK(s.to_vector<int16_t>()[0] == -32768);
  Var h = array(std::vector<float16>{float16(0.5f), float16(-2.0f)}, {2});
  CHECK(float(h.to_vector<float16>()[1]) == -2.0f);
  CHECK(float(full({}, 0.1, DType::BFloat16).item<bfloat16>()) == float(bfloat16(0.1f)));
  CHECK_THROWS_AS(h.to_vector<float>(), DTypeError);
  std::ostringstream os;
  os << a << " " << h;
  CHECK(os.str() == "int8[3] [-128, 0, 127] float16[2] [0.5, -2]");
}

TEST_CASE("integers of 8 and 16 bits wrap, and float to them truncates (0 out of range)",
          "[precision]") {
  Var a = array(std::vector<int8_t>{127, -128, 100}, {3});
  CHECK((a + 1.0).to_vector<int8_t>() == std::vector<int8_t>{-128, -127, 101});
  Var u = array(std::vector<uint8_t>{0, 255}, {2});
  CHECK((u - 1.0).to_vector<uint8_t>() == std::vector<uint8_t>{255, 254});
  Var s = array(std::vector<int16_t>{32767, -32768}, {2});
  CHECK((s * 2.0).to_vector<int16_t>() == std::vector<int16_t>{-2, 0});
  Var f = array(std::vector<float>{1.9f, -1.9f, 127.5f, 128.0f, -129.0f, NAN, 300.0f}, {7});
  CHECK(cast(f, DType::Int8).to_vector<int8_t>() == std::vector<int8_t>{1, -1, 127, 0, 0, 0, 0});
  CHECK(cast(f, DType::UInt8).to_vector<uint8_t>() ==
        std::vector<uint8_t>{1, 0, 127, 128, 0, 0, 0});
  Var i = array(std::vector<int32_t>{300, -1}, {2});
  CHECK(cast(i, DType::UInt8).to_vector<uint8_t>() == std::vector<uint8_t>{44, 255});
}

TEST_CASE("float to Int32 and Int64 in kernels: truncated, 0 out of range or NaN, at both ends",
          "[precision]") {
  // The ends of each float type's interval that truncates into the integer type
  // (CFamilyEmitter::cast_expr): the last value in, the first value out.
  const double inf = std::numeric_limits<double>::infinity();
  Var d = array(
      std::vector<double>{2147483647.9, 2147483648.0, -2147483648.9, -2147483649.0, NAN, inf, -inf},
      {7});
  CHECK(cast(d, DType::Int32).to_vector<int32_t>() ==
        std::vector<int32_t>{2147483647, 0, INT32_MIN, 0, 0, 0, 0});
  Var f = array(std::vector<float>{2147483520.0f, 2147483648.0f, -2147483648.0f, -2147483904.0f,
                                   NAN, 1.9f, -1.9f},
                {7});
  CHECK(cast(f, DType::Int32).to_vector<int32_t>() ==
        std::vector<int32_t>{2147483520, 0, INT32_MIN, 0, 0, 1, -1});
  Var d64 = array(std::vector<double>{9223372036854774784.0, 9223372036854775808.0,
                                      -9223372036854775808.0, -9223372036854777856.0, NAN},
                  {5});
  CHECK(cast(d64, DType::Int64).to_vector<int64_t>() ==
        std::vector<int64_t>{9223372036854774784, 0, INT64_MIN, 0, 0});
  const float finf = std::numeric_limits<float>::infinity();
  Var f64 = array(std::vector<float>{-9223372036854775808.0f, 9223372036854775808.0f, -finf}, {3});
  CHECK(cast(f64, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{INT64_MIN, 0, 0});
  Var h = cast(array(std::vector<float>{65504.0f, -finf, NAN}, {3}), DType::Float16);
  CHECK(cast(h, DType::Int32).to_vector<int32_t>() == std::vector<int32_t>{65504, 0, 0});
  check_against_reference({cast(d, DType::Int32), cast(f, DType::Int32), cast(d64, DType::Int64),
                           cast(f64, DType::Int64), cast(h, DType::Int64)});
}

TEST_CASE("reductions over an empty axis give each new dtype's identity", "[precision]") {
  // fill_empty_reductions (codegen/empty_reductions.cc) writes the identity as a scalar: the
  // 8- and 16-bit integers' own lowest and highest, not a float infinity (which gave 0).
  for (DType t : kNewTypes) {
    INFO(dtype_name(t));
    Var e = metajit_test::make_array(t, {}, {3, 0});
    check_against_reference(
        {max(e, {1}), min(e, {1}), reduce(e, ReduceOp::Add, {1}), reduce(e, ReduceOp::Mul, {1})});
  }
  Var a = array(std::vector<int8_t>{}, {2, 0});
  CHECK(max(a, {1}).to_vector<int8_t>() == std::vector<int8_t>{-128, -128});
  CHECK(min(a, {1}).to_vector<int8_t>() == std::vector<int8_t>{127, 127});
  Var u = array(std::vector<uint8_t>{}, {2, 0});
  CHECK(min(u, {1}).to_vector<uint8_t>() == std::vector<uint8_t>{255, 255});
}

TEST_CASE("every cast between the ten dtypes matches the reference", "[precision]") {
  // Out of every integer type's range, Inf and NaN included: 0 (docs/design.md §3).
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> values = {0,   1,     -1,   2.5,   -3.75,        100,          -129,
                                      255, 60000, 1e-3, 0.1,   inf,          -inf,         NAN,
                                      3e9, -3e9,  1e19, -1e19, 2147483647.9, -2147483648.9};
  for (DType from : kAllTypes) {
    Var x = metajit_test::make_array(from, values);
    std::vector<Var> casts;
    for (DType to : kAllTypes) casts.push_back(cast(x, to));
    INFO(dtype_name(from));
    check_against_reference(casts);
  }
}

TEST_CASE("element-wise ops and reductions on every new dtype match the reference", "[precision]") {
  for (DType t : kNewTypes) {
    INFO(dtype_name(t));
    const bool flt = is_float(t);
    Var x = metajit_test::make_array(t, {1, 2, 3, -4, 5, 7, -8, 9, 10, 12, -13, 14}, {3, 4});
    Var y = metajit_test::make_array(t, {3, -1, 2, 5, 1, -3, 2, 4, -6, 1, 2, 3}, {3, 4});
    if (t == DType::UInt8) x = abs(x), y = abs(y) + 1.0;
    std::vector<Var> outs = {x + y,       x - y,         x * y,
                             x / y,       maximum(x, y), minimum(x, y),
                             x < y,       x == y,        where(x > y, x, y),
                             -x,          abs(x),        relu(x),
                             sum(x, {1}), max(x, {0}),   min(x, {1}),
                             sum(x * y),  x * 3.0 + 1.0};
    if (flt) {
      const std::vector<Var> more = {exp(x * 0.25), log(abs(x) + 1.0), sqrt(abs(x)),
                                     tanh(x * 0.1), sigmoid(x),        x / 3.0,
                                     mean(x, {1}),  pow(abs(x), 0.5),  ((x * y) + x) * 0.1};
      outs.insert(outs.end(), more.begin(), more.end());
    } else {
      Var two = metajit_test::make_array(t, std::vector<double>(12, 2.0), {3, 4});
      const std::vector<Var> more = {bitwise_and(x, y),  bitwise_or(x, y),    bitwise_xor(x, y),
                                     shift_left(x, two), shift_right(x, two), bitwise_not(x)};
      outs.insert(outs.end(), more.begin(), more.end());
    }
    check_against_reference(outs);
  }
}

TEST_CASE("meta-ops and composites on the new dtypes match the reference", "[precision]") {
  for (DType t : kNewTypes) {
    INFO(dtype_name(t));
    std::vector<double> vals;
    for (int k = 0; k < 2 * 3 * 8 * 8; ++k) vals.push_back(double((k * 7) % 23) - 11.0);
    Var x = metajit_test::make_array(t, vals, {2, 3, 8, 8});
    Var m =
        metajit_test::make_array(t, std::vector<double>(vals.begin(), vals.begin() + 48), {6, 8});
    Var idx = array(std::vector<int64_t>{0, 2, 1, 0, 3, 3}, {6, 1});
    std::vector<Var> outs = {
        transpose(x, {0, 2, 3, 1}),
        reindex(x, {2, 3, 4, 4}, {"i0", "i1", "i2*2", "i3*2+1"}),
        reindex_reduce(x, ReduceOp::Add, {2, 3}, {"i0", "i1"}),
        reindex_reduce(x, ReduceOp::Max, {8}, {"i3"}),
        broadcast_to(m, {4, 6, 8}),
        concat({m, m * 2.0}, 1),
        gather(m, 1, idx),
        scatter_add(m, 1, idx, broadcast_to(metajit_test::make_array(t, {1}), {6, 1})),
        matmul(m, transpose(m, {1, 0})),
        max_pool2d(x, 2, 2)};
    if (is_float(t)) {
      const std::vector<Var> more = {
          softmax(m * 0.25, 1), layer_norm(m * 0.25, 1),
          conv2d(x * 0.25,
                 metajit_test::make_array(t, {1, 0, -1, 2, 1, 0, 0,  1, 1, 0.5, -0.5, 1, 1, 1,
                                              0, 0, 2,  1, 0, 1, -1, 1, 0, 1,   1,    1, 1},
                                          {1, 3, 3, 3}),
                 1, 1),
          cumsum(m * 0.5, 1)};
      outs.insert(outs.end(), more.begin(), more.end());
    }
    check_against_reference(outs);
  }
}

TEST_CASE("half contractions take the blocked schedules on every width, float32 sums",
          "[precision]") {
  for_widths_and_halves([&](DType t) {
    uint64_t seed = 1;
    auto r = [&](Shape s) { return cast(rand(s, seed++) - 0.5, t); };
    Var a = r({65, 129}), b = r({129, 70}), x = r({2, 5, 17, 17}), k = r({7, 5, 3, 3});
    eval({a, b, x, k});
    const std::vector<Var> outs = {relu(matmul(a, b) + 0.25), matmul(r({3, 17, 9}), r({3, 9, 33})),
                                   conv2d(x, k, 1, 1), conv2d(x, k, 2, 1),
                                   grad(sum(conv2d(x, k, 1, 1)), {k})[0]};
    // The C++ packed schedule, or CUDA's shared-memory tiles (codegen/cuda_contraction.cc).
    const char* schedule =
        device() == Device::CUDA ? "mj_mm_body<128, 128" : "// schedule: contraction";
    for (const KernelInfo& ki : plan({outs[0]})) CHECK_THAT(ki.source, Contains(schedule));
    check_against_reference(outs);
  });
}

TEST_CASE("matmul of 8-bit integers sums in int32", "[precision]") {
  Var a = array(std::vector<int8_t>{127, -128, 100, 5}, {2, 2});
  Var b = array(std::vector<uint8_t>{255, 2, 255, 3}, {2, 2});
  Var c = matmul(a, b);
  CHECK(c.dtype() == DType::Int32);
  CHECK(c.to_vector<int32_t>() == std::vector<int32_t>{127 * 255 - 128 * 255, 127 * 2 - 128 * 3,
                                                       100 * 255 + 5 * 255, 100 * 2 + 5 * 3});
  CHECK(matmul(a, a).dtype() == DType::Int32);
  check_against_reference({matmul(a, b), matmul(transpose(a, {1, 0}), a)});
}

TEST_CASE("half values keep float32 inside a kernel and round where stored or cast",
          "[precision]") {
  // 2048 + 1 is not a float16 (the spacing there is 2): stored, x + 1 rounds to 2048 (ties to
  // even); one fused kernel computing (x + 1) - x keeps 2049 in float32 and gives 1, where
  // PyTorch eager (and the reference) would give 0. bfloat16 alike at 256.
  // Arrays, not full(): constant folding computes op by op, rounding each (as eager does).
  Var x = array(std::vector<float16>(8, float16(2048.0f)), {8});
  Var b = array(std::vector<bfloat16>(8, bfloat16(256.0f)), {8});
  Var stored = x + 1.0;
  eval({stored});
  CHECK(float(stored.to_vector<float16>()[0]) == 2048.0f);
  const std::vector<Var> fused = {(x + 1.0) - x, (b + 1.0) - b};
  REQUIRE(plan(fused).size() == 2);  // each one kernel
  CHECK(float(fused[0].to_vector<float16>()[0]) == 1.0f);
  CHECK(float(fused[1].to_vector<bfloat16>()[0]) == 1.0f);
  // An explicit cast rounds inside a kernel too: (2049 as float32, cast to float16) - 2048.
  Var f = full({8}, 2048.0, DType::Float32);
  CHECK(float(((cast(f + 1.0, DType::Float16) - 2048.0)).to_vector<float16>()[0]) == 0.0f);
  // A sum accumulates in float and rounds once: 4096 ones are 4096, where float16 steps
  // would stop at 2048.
  CHECK(float(sum(full({4096}, 1.0, DType::Float16)).item<float16>()) == 4096.0f);
}

// A cast whose value every half type holds exactly (from Bool, Int8 and UInt8) is a plain
// conversion in a kernel, with no rounding call (CFamilyEmitter::cast_expr); one from Float32
// still rounds. Values against the reference.
TEST_CASE("casts exact in a half type are not rounded in kernels", "[precision]") {
  Var x = randn({300}, 8);
  Var i8 = cast(x * 60.0, DType::Int8), u8 = cast(abs(x) * 90.0, DType::UInt8);
  eval({x, i8, u8});
  for (DType t : {DType::Float16, DType::BFloat16}) {
    INFO(dtype_name(t));
    const std::string rounds = t == DType::Float16 ? "mj_round_f16((float)" : "mj_round_bf16((float)";
    for (const Var& exact : {cast(x > 0.5, t), cast(i8, t), cast(u8, t)}) {
      const std::vector<Var> outs = {exact * 2.0 + 1.0};
      for (const KernelInfo& ki : plan(outs)) CHECK(ki.source.find(rounds) == std::string::npos);
      check_against_reference(outs);
    }
    const std::vector<Var> rounded = {cast(x * 3.0, t) + 1.0};
    bool found = false;
    for (const KernelInfo& ki : plan(rounded)) found = found || ki.source.find(rounds) != std::string::npos;
    CHECK(found);
    check_against_reference(rounded);
  }
}

// Float16 strips (codegen/half_strips.h): on the vector widths a float16 kernel's contiguous
// reads are widened and its float16 outputs narrowed a strip at a time by F16C; broadcast,
// transposed and shifted reads, rows that end mid-vector and mid-strip, a float32 output beside
// float16 ones, all against the reference. The portable width keeps element conversions.
TEST_CASE("float16 strips: broadcast, transposed and shifted reads, row tails, mixed outputs",
          "[precision]") {
  for (const Width& w : widths()) {
    if (!w.runs) continue;
    ScopedEnv flags("METAJIT_CXXFLAGS", w.flags);
    INFO(w.flags);
    Var x = cast(randn({5, 301}, 1), DType::Float16), b = cast(randn({301}, 2), DType::Float16),
        t = cast(randn({301, 5}, 3), DType::Float16), n = cast(randn({1000}, 4), DType::Float16);
    eval({x, b, t, n});
    const Var y = x * b + transpose(t, {1, 0}), u = n * 2.0;
    // u is stored beside the float32 sum that reads it: one kernel, u its second output.
    const std::vector<Var> outs = {y,
                                   exp(x) - b,
                                   cast(x, DType::Float32) * 2.0,
                                   reindex(x, {5, 300}, {"i0", "i1+1"}, 0.5) * 3.0,
                                   1.05 * where(n > 0.0, n, 1.67 * exp(n) - 1.67),
                                   u,
                                   cast(u, DType::Float32) + 1.0};
    const bool vector = device() == Device::CPU && std::string(w.flags) != "-march=x86-64";
    for (const KernelInfo& ki : plan({outs[0], outs[1]})) {
      CHECK((ki.source.find("mj_widen_f16(in") != std::string::npos) == vector);
      CHECK((ki.source.find("mj_narrow_f16(mj_n0") != std::string::npos) == vector);
    }
    const std::vector<KernelInfo> merged = plan({outs[5], outs[6]});
    REQUIRE(merged.size() == 1);
    CHECK((merged[0].source.find("mj_narrow_f16(mj_n1, out1") != std::string::npos) == vector);
    check_against_reference(outs);
  }
}

// Half elements read across SIMD lanes other than contiguously (a flat strip's pooling windows,
// a pooling gradient's i / 2) are gathered as 32-bit words (codegen/cpp_narrow_prelude.h
// mj_half_word), the word's top half the next element or the buffer's slack: values against the
// reference on every width, rows of 4 and 8 columns ending at the buffer's end.
TEST_CASE("half elements gathered across SIMD lanes as 32-bit words match the reference",
          "[precision]") {
  for_widths_and_halves([&](DType t) {
    Var small = cast(randn({3, 5, 8, 8}, 5), t), odd = cast(randn({2, 3, 9, 17}, 6), t);
    eval({small, odd});
    const std::vector<Var> outs = {
        max_pool2d(relu(small), 2, 2), grad(sum(max_pool2d(relu(small), 2, 2) * 3.0), {small})[0],
        max_pool2d(odd, 3, 2, 1), grad(sum(max_pool2d(odd, 2, 2) * 3.0), {odd})[0]};
    bool gathered = false;
    for (const KernelInfo& ki : plan({outs[0], outs[1]}))
      gathered = gathered || ki.source.find("(mj_half_word(in") != std::string::npos;
    CHECK(gathered == (device() == Device::CPU));
    check_against_reference(outs);
  });
}

TEST_CASE("gradients with respect to half values come back in their dtype", "[precision]") {
  Var x = array(std::vector<float16>{float16(1.5f), float16(-2.0f), float16(0.25f)}, {3});
  Var g = grad(sum(x * x), {x})[0];
  CHECK(g.dtype() == DType::Float16);
  std::vector<float> got;
  for (float16 h : g.to_vector<float16>()) got.push_back(float(h));
  CHECK(got == std::vector<float>{3.0f, -4.0f, 0.5f});
  // A bfloat16 layer's weight gradient against the reference (its graph, op by op).
  Var a = metajit_test::make_array(DType::BFloat16, {0.5, -1, 2, 0.25, 1, -0.5}, {2, 3});
  Var w = metajit_test::make_array(DType::BFloat16, {1, 2, -1, 0.5, 0.25, -2}, {3, 2});
  const std::vector<Var> gw = grad(sum(tanh(matmul(a, w))), {w, a});
  CHECK(gw[0].dtype() == DType::BFloat16);
  check_against_reference(gw);
}

TEST_CASE("autocast: half matmul and conv2d, float32 reductions, float32 master gradients",
          "[precision]") {
  Var x = randn({16, 8}, 1), w = randn({8, 4}, 2), img = randn({2, 3, 9, 9}, 3),
      k = randn({4, 3, 3, 3}, 4);
  Var xd = cast(x, DType::Float64), wd = cast(w, DType::Float64);
  Var xi = cast(x * 4.0, DType::Int32), wi = cast(w * 4.0, DType::Int32);
  eval({x, w, img, k, xd, wd, xi, wi});
  CHECK_THROWS_AS(autocast(DType::Float32), DTypeError);
  Var h, s, l, c, g;
  {
    autocast scope;  // bfloat16
    h = matmul(x, w);
    CHECK(h.dtype() == DType::BFloat16);
    c = conv2d(img, k, 1, 1);
    CHECK(c.dtype() == DType::BFloat16);
    s = softmax(h, 1);
    CHECK(s.dtype() == DType::Float32);
    CHECK(sum(h).dtype() == DType::Float32);
    CHECK(prod(h).dtype() == DType::Float32);
    CHECK(max(h).dtype() == DType::BFloat16);  // exact in the half type: not cast
    CHECK(min(h, {1}).dtype() == DType::BFloat16);
    CHECK(max_pool2d(c, 2, 2).dtype() == DType::BFloat16);
    CHECK(layer_norm(h, 1).dtype() == DType::Float32);
    CHECK(matmul(xd, wd).dtype() == DType::Float64);  // never cast
    CHECK(matmul(xi, wi).dtype() == DType::Int32);
    {
      autocast inner(DType::Float16);
      CHECK(matmul(x, w).dtype() == DType::Float16);
    }
    CHECK(matmul(x, w).dtype() == DType::BFloat16);  // the enclosing scope again
    l = mean(h * h) + mse_loss(c, zeros(c.shape(), DType::BFloat16));
    CHECK(l.dtype() == DType::Float32);
    g = grad(l, {w})[0];
  }
  CHECK(matmul(x, w).dtype() == DType::Float32);  // outside every scope
  CHECK(g.dtype() == DType::Float32);             // the master weight's gradient
  // The values: the float32 computation, within bfloat16's rounding of the operands.
  const std::vector<float> ref = matmul(x, w).to_vector<float>();
  const std::vector<float> got = cast(h, DType::Float32).to_vector<float>();
  for (size_t i = 0; i < ref.size(); ++i)
    CHECK(std::fabs(got[i] - ref[i]) <= 0.05f * std::max(1.0f, std::fabs(ref[i])));
  // The gradient of the loss's matmul term (the conv term does not read w), against float32's.
  Var p = matmul(x, w);
  const std::vector<float> gref = grad(mean(p * p), {w})[0].to_vector<float>();
  const std::vector<float> gv = g.to_vector<float>();
  REQUIRE(gv.size() == gref.size());
  for (size_t i = 0; i < gv.size(); ++i)
    CHECK(std::fabs(gv[i] - gref[i]) <= 0.05f * std::max(1.0f, std::fabs(gref[i])));
}

TEST_CASE("autocast: a small network trains in bfloat16 as in float32", "[precision]") {
  // y = relu(x W1) W2 fitted to a fixed linear target by plain gradient descent, the same
  // steps with and without autocast: the half run's loss falls as the float32 run's does.
  Var x = randn({64, 16}, 5), t = matmul(x, randn({16, 4}, 6));
  eval({x, t});
  auto train = [&](bool half) {
    Var w1 = randn({16, 32}, 7) * 0.25, w2 = randn({32, 4}, 8) * 0.25;
    eval({w1, w2});
    float first = 0, last = 0;
    for (int step = 0; step < 60; ++step) {
      std::optional<autocast> scope;
      if (half) scope.emplace(DType::BFloat16);
      Var loss = mse_loss(matmul(relu(matmul(x, w1)), w2), t);
      std::vector<Var> g = grad(loss, {w1, w2});
      scope.reset();
      REQUIRE(g[0].dtype() == DType::Float32);
      const float lv = loss.item<float>();
      if (step == 0) first = lv;
      last = lv;
      w1.assign(w1 - 0.05 * g[0]);
      w2.assign(w2 - 0.05 * g[1]);
      eval({w1, w2});
    }
    return std::pair{first, last};
  };
  const auto [f32_first, f32_last] = train(false);
  const auto [bf_first, bf_last] = train(true);
  INFO("float32 " << f32_first << " -> " << f32_last << ", bfloat16 " << bf_first << " -> "
                  << bf_last);
  CHECK(f32_last < 0.5f * f32_first);
  CHECK(bf_last < 0.5f * bf_first);
  CHECK(std::fabs(bf_last - f32_last) <= 0.1f * f32_first);
}

TEST_CASE("float16 training with loss scaling: overflowing steps are skipped, the scale backs off",
          "[precision][scaling]") {
  // The same network and data as above, Adam through jit_step, float32 and float16 autocast from
  // the same weights. The float16 run starts at a scale of 2^24: its scaled half gradients
  // overflow float16 (65504), so the first steps are skipped and back the scale off until they
  // fit; growth every 4 good steps pushes it up into overflow again. Its losses end where the
  // float32 run's do, and no step after the first compiles.
  Var x = randn({64, 16}, 5), t = matmul(x, randn({16, 4}, 6));
  eval({x, t});
  struct Run {
    float first = 0, last = 0;
    int64_t skipped = 0, steps = 0;
    double scale = 0;
    uint64_t compiles_after_first = 0;
  };
  auto train = [&](bool half) {
    Var w1 = randn({16, 32}, 7) * 0.25, w2 = randn({32, 4}, 8) * 0.25;
    eval({w1, w2});
    Adam opt({w1, w2}, 0.01);
    if (half) opt.set_loss_scaling(LossScaling{.init_scale = 0x1p24, .growth_interval = 4});
    auto step = opt.jit_step(
        [&](const Var& xb, const Var& tb) {
          std::optional<autocast> scope;
          if (half) scope.emplace(DType::Float16);
          return mse_loss(matmul(relu(matmul(xb, w1)), w2), tb);
        },
        half ? "loss_scaling_f16_step" : "loss_scaling_f32_step");
    Run r;
    uint64_t compiled = 0;
    for (int k = 0; k < 80; ++k) {
      const float loss = step(x, t).item<float>();
      if (k == 0) r.first = loss, compiled = stats().kernels_compiled;
      r.last = loss;
    }
    r.compiles_after_first = stats().kernels_compiled - compiled;
    r.skipped = opt.skipped_steps(), r.steps = opt.steps(), r.scale = opt.loss_scale();
    CHECK(w1.dtype() == DType::Float32);  // master weights
    return r;
  };
  const Run f32 = train(false), f16 = train(true);
  INFO("float32 " << f32.first << " -> " << f32.last << "; float16 " << f16.first << " -> "
                  << f16.last << ", " << f16.skipped << " skipped, scale " << f16.scale);
  CHECK(f32.skipped == 0);
  CHECK(f16.skipped >= 3);  // 2^24 -> at most 2^16 before half gradients of about 1 fit
  CHECK(f16.steps + f16.skipped == 80);
  CHECK(f16.scale < 0x1p24);
  CHECK(f16.compiles_after_first == 0);
  CHECK(f32.compiles_after_first == 0);
  CHECK(f16.first == Approx(f32.first).epsilon(0.01));  // the loss of the same first weights
  CHECK(f32.last < 0.2f * f32.first);
  CHECK(f16.last < 0.2f * f16.first);
  CHECK(std::fabs(f16.last - f32.last) <= 0.05f * f32.first);
}

TEST_CASE("rand and randn draw half types in their ranges", "[precision]") {
  for (DType t : {DType::Float16, DType::BFloat16}) {
    Var r = rand({4096}, 5, t), n = randn({4096}, 6, t);
    CHECK(r.dtype() == t);
    const std::vector<float> rv = cast(r, DType::Float32).to_vector<float>();
    for (float v : rv) REQUIRE((v >= 0.0f && v < 1.0f));
    const float m = cast(mean(cast(n, DType::Float32)), DType::Float32).item<float>();
    CHECK(std::fabs(m) < 0.1f);
  }
}
