// What the speed work could break: transcendental functions run
// vectorised through glibc's libmvec, so they are checked against scalar libm in ulps, with
// NaN, infinities and -0; float32 reductions of large, mixed-magnitude inputs are checked
// against an exact (long double) sum within a stated bound; the register-blocked matrix
// product schedule is checked in test_cpu_targets.cc, on every vector width.
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "base/config.h"
#include "cache/cache_store.h"
#include "support/files.h"
#include "support/reference_check.h"
#include "support/scoped_env.h"

using namespace metajit;

namespace {

// Distance in units in the last place between two floats (0 for equal, including -0 == 0).
int64_t ulp_distance(float a, float b) {
  if (a == b) return 0;
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  // Map the sign-magnitude bit patterns onto a line where adjacent floats differ by one.
  int64_t la = ia < 0 ? int64_t(INT32_MIN) - ia : ia, lb = ib < 0 ? int64_t(INT32_MIN) - ib : ib;
  return la > lb ? la - lb : lb - la;
}

// Inputs across the whole useful range of `lo..hi`, plus the special values.
std::vector<float> inputs(float lo, float hi, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v;
  for (size_t i = 0; i < n; ++i) v.push_back(u(rng));
  for (float s : {0.0f, -0.0f, 1.0f, -1.0f, lo, hi, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()})
    v.push_back(s);
  return v;
}

// True when the kernel.so that computed `key` names no exp function (libm's expf, libmvec's
// _ZGV..._expf): its float32 exp is the prelude's own.
bool calls_no_exp(const std::string& key) {
  CacheStore store(config().cache_dir);
  return metajit_test::read_file(store.entry_dir(key) / "kernel.so").find("expf") ==
         std::string::npos;
}

// True when the kernel.so that computed `key` calls libmvec's vector functions.
bool uses_libmvec(const std::string& key) {
  CacheStore store(config().cache_dir);
  const std::string so = metajit_test::read_file(store.entry_dir(key) / "kernel.so");
  return so.find("_ZGV") != std::string::npos;
}

struct MathCase {
  const char* name;
  std::function<Var(const Var&)> op;
  std::function<float(float)> libm;
  float lo, hi;
  int64_t max_ulp;  // the bound asserted below
  // Computed inline by the prelude (float32 exp: mj_expf in codegen/cpp_kernel_prelude.h), so
  // the kernel calls neither libmvec nor libm for it; the others call libmvec.
  bool inline_math = false;
};

}  // namespace

// Measured on glibc 2.36 (AVX-512 variants, 20000 inputs per function over these ranges): the
// float32 vector functions agreed with scalar libm exactly (0 ulp); exp, metajit's own, within 1.
// The asserted bound is 4 ulp for glibc's functions, what glibc documents for its vector
// variants, so another glibc or CPU may differ from libm a little without failing; 2 for exp.
TEST_CASE("vectorised math agrees with libm within 4 ulp, NaN/Inf/-0 included", "[math]") {
  const std::vector<MathCase> cases = {
      // metajit's own float32 exp: 1 ulp from glibc 2.36's expf over all 2^32 floats (measured
      // outside the suite, with and without FMA); 2 asserted.
      {"exp", [](const Var& x) { return exp(x); }, [](float x) { return std::exp(x); }, -104, 89, 2,
       true},
      // Attention masks: -1e9 and -inf give exactly 0 (the clamp in mj_expf); the rest of the
      // range as above.
      {"exp of masked scores", [](const Var& x) { return exp(x); },
       [](float x) { return std::exp(x); }, -2e9f, 80, 2, true},
      // Where exp's results are subnormal (below -87.34), 0 or inf (above 88.72).
      {"exp near underflow", [](const Var& x) { return exp(x); },
       [](float x) { return std::exp(x); }, -104.5f, -86, 2, true},
      {"exp near overflow", [](const Var& x) { return exp(x); },
       [](float x) { return std::exp(x); }, 86, 89.5f, 2, true},
      {"log", [](const Var& x) { return log(x); }, [](float x) { return std::log(x); }, -1, 1e30f,
       4},
      {"sin", [](const Var& x) { return sin(x); }, [](float x) { return std::sin(x); }, -1e4f, 1e4f,
       4},
      {"cos", [](const Var& x) { return cos(x); }, [](float x) { return std::cos(x); }, -1e4f, 1e4f,
       4},
      {"tanh", [](const Var& x) { return tanh(x); }, [](float x) { return std::tanh(x); }, -20, 20,
       4},
      {"sigmoid", [](const Var& x) { return sigmoid(x); },
       [](float x) { return 1.0f / (1.0f + std::exp(-x)); }, -90, 90, 4, true},
      {"pow", [](const Var& x) { return pow(x, 2.5); }, [](float x) { return std::pow(x, 2.5f); },
       0, 1e12f, 4},
      // The models issue's functions (libmvec has them since glibc 2.35).
      {"erf", [](const Var& x) { return erf(x); }, [](float x) { return std::erf(x); }, -6, 6, 4},
      {"log1p", [](const Var& x) { return log1p(x); }, [](float x) { return std::log1p(x); }, -1.5f,
       1e30f, 4},
      {"expm1", [](const Var& x) { return expm1(x); }, [](float x) { return std::expm1(x); }, -100,
       88, 4},
      {"tan", [](const Var& x) { return tan(x); }, [](float x) { return std::tan(x); }, -1e4f, 1e4f,
       4},
      {"atan", [](const Var& x) { return atan(x); }, [](float x) { return std::atan(x); }, -1e30f,
       1e30f, 4},
      {"asin", [](const Var& x) { return asin(x); }, [](float x) { return std::asin(x); }, -1.5f,
       1.5f, 4},
      {"acos", [](const Var& x) { return acos(x); }, [](float x) { return std::acos(x); }, -1.5f,
       1.5f, 4},
  };
  const char* chosen = std::getenv("METAJIT_CXXFLAGS");
  const bool sanitized = chosen && std::string(chosen).find("-fsanitize") != std::string::npos;
  // Both vector widths this CPU runs: the native one and AVX2 forced (x86-64-v3).
  __builtin_cpu_init();
  for (const char* flags : {"", "-march=x86-64-v3"}) {
    if (*flags && !__builtin_cpu_supports("avx2")) {
      // A partial check, not a skip: the native width above was checked.
      WARN("AVX2 (-march=x86-64-v3) not checked: this CPU cannot run it; the native width was");
      continue;
    }
    metajit_test::ScopedEnv width("METAJIT_CXXFLAGS",
                                  metajit_test::ScopedEnv::appended("METAJIT_CXXFLAGS", flags));
    for (const MathCase& c : cases) {
      INFO(c.name << " with METAJIT_CXXFLAGS='" << flags << "'");
      std::vector<float> in = inputs(c.lo, c.hi, 20000, 7);
      Var x = array<float>(in, {int64_t(in.size())});
      Var y = c.op(x);
      std::vector<KernelInfo> k = plan({y});
      REQUIRE(k.size() == 1);
      std::vector<float> got = y.to_vector<float>();
      // Sanitized kernels (make test-asan) are not vectorised: their checks sit between the
      // loads and the math. The values are checked all the same.
      if (sanitized)
        WARN(c.name << ": not checked that the kernel calls libmvec: it has sanitizer checks");
      else if (c.inline_math)
        CHECK(calls_no_exp(k[0].key));
      else
        CHECK(uses_libmvec(k[0].key));
      int64_t worst = 0;
      for (size_t i = 0; i < in.size(); ++i) {
        const float want = c.libm(in[i]);
        INFO("x = " << in[i] << ": got " << got[i] << ", libm " << want);
        if (std::isnan(want)) {
          CHECK(std::isnan(got[i]));
          continue;
        }
        if (std::isinf(want) || want == 0) {
          CHECK(got[i] == want);
          CHECK(std::signbit(got[i]) == std::signbit(want));  // -0 stays -0, -inf stays -inf
          continue;
        }
        worst = std::max(worst, ulp_distance(got[i], want));
      }
      INFO("worst " << worst << " ulp");
      CHECK(worst <= c.max_ulp);
      WARN(c.name << " (" << (*flags ? flags : "native") << "): worst " << worst
                  << " ulp against libm");
    }
  }
}

// The float64 exp has the same guard as the float32 one, at its own underflow threshold (-745.13):
// every value below it is 0, the ones just above it are subnormals libm gives, NaN stays NaN.
TEST_CASE("float64 exp far below the underflow threshold is 0, as libm's", "[math]") {
  const std::vector<double> in = {-1e300,
                                  -1e9,
                                  -746.5,
                                  -745.2,
                                  -745.0,
                                  -744.0,
                                  -708.5,
                                  -700.0,
                                  -1.0,
                                  0.0,
                                  -0.0,
                                  1.0,
                                  709.0,
                                  710.0,
                                  -std::numeric_limits<double>::infinity(),
                                  std::numeric_limits<double>::infinity(),
                                  std::numeric_limits<double>::quiet_NaN()};
  std::vector<double> many;  // long enough that the kernel's vector loop runs
  for (int r = 0; r < 8; ++r) many.insert(many.end(), in.begin(), in.end());
  std::vector<double> got = exp(array<double>(many, {int64_t(many.size())})).to_vector<double>();
  for (size_t i = 0; i < many.size(); ++i) {
    const double want = std::exp(many[i]);
    INFO("x = " << many[i] << ": got " << got[i] << ", libm " << want);
    if (std::isnan(want))
      CHECK(std::isnan(got[i]));
    else if (std::isinf(want) || want == 0)
      CHECK(got[i] == want);
    else
      CHECK(std::fabs(got[i] - want) <= 4 * std::numeric_limits<double>::epsilon() * want);
  }
}

// float32 sums accumulate in double: the error is one rounding of the exact sum to float32
// (half an ulp of the result), plus at most n * 2^-53 * sum|x| from the double accumulation.
TEST_CASE("float32 sums of large, mixed-magnitude inputs stay within the stated bound",
          "[reduce]") {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> mant(-1, 1);
  std::uniform_int_distribution<int> mag(-8, 8);
  const int64_t rows = 37, cols = 5003;
  std::vector<float> v(size_t(rows * cols));
  for (float& f : v) f = mant(rng) * std::pow(10.0f, float(mag(rng)));
  Var x = array<float>(v, {rows, cols});
  auto check = [&](const std::vector<float>& got, auto index_of, int64_t outer, int64_t inner) {
    for (int64_t o = 0; o < outer; ++o) {
      long double exact = 0, abs_sum = 0;
      for (int64_t i = 0; i < inner; ++i) {
        const float f = v[size_t(index_of(o, i))];
        exact += f;
        abs_sum += std::fabs(f);
      }
      const long double bound =
          std::ldexp(std::fabs(exact), -24) + inner * std::ldexp(abs_sum, -53) + 1e-45L;
      INFO("output " << o << ": got " << got[size_t(o)] << ", exact " << double(exact));
      CHECK(std::fabs(got[size_t(o)] - exact) <= bound);
    }
  };
  check(
      sum(x, {1}).to_vector<float>(), [&](int64_t r, int64_t c) { return r * cols + c; }, rows,
      cols);
  check(
      sum(x, {0}).to_vector<float>(), [&](int64_t c, int64_t r) { return r * cols + c; }, cols,
      rows);
  check(
      sum(x).to_vector<float>(), [&](int64_t, int64_t i) { return i; }, 1, rows * cols);
}
