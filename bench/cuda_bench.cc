// metajit_cuda_bench: the GPU benchmark of the CUDA issue. One run measures, on CUDA device 0:
//
//   1. the floor: cudaMemcpy device-to-device of 1 GiB; bytes moved = 2 x size (read + write);
//   2. SELU on 2^28 float32 through jit(); bytes = 2 x 4 x n; target >= 0.80 of the floor;
//   3. row sums and column sums of a 16384 x 16384 float32 matrix (sum over axis 1, axis 0)
//      through jit(); bytes = input + output; target >= 0.70 of the floor, each;
//   4. matmul 4096^3 float32 through jit(matmul) against cuBLAS sgemm on buffers of the same
//      shapes holding the same values; GFLOP/s = 2 n^3 / t; target >= 0.25 of cuBLAS;
//   5. SELU and matmul in bfloat16 (precision issue): SELU against the floor (bytes 2 x 2 x n,
//      target >= 0.80), matmul against metajit's own float32 matmul (target >= 1.0).
//
// How: every workload gets one untimed warm-up call (on the first run ever it compiles the
// kernels, and it uploads host-made inputs), then N timed calls (--reps, default 20). A call is
// timed on the host's steady_clock from a cudaDeviceSynchronize() before it to its end: a jit
// replay returns after eval has synchronised the GPU, the peers are followed by
// cudaDeviceSynchronize(). The table gives the best and the median; rates and ratios use the
// best. Results are checked: SELU on sampled elements and every row/column sum against a host
// computation in double, sampled matmul entries against cuBLAS and against the host.
//
// This is plain C++: libcudart and libcublas are dlopen'ed at run time (no CUDA header, no CUDA
// link), so the program builds with g++ everywhere and reports "skipped" without a GPU.
//
//   metajit_cuda_bench [--reps N] [--quick] [--json FILE]
//                      [--selu-n N] [--sum-n N] [--matmul-n N]
//
// Exit status: 0 it ran (targets met or not: it reports), 1 bad argument, 2 a result was wrong,
// 3 a measurement could not be made (a CUDA, cuBLAS or metajit call failed; the table says
// which), 77 no usable CUDA device ("skipped: no CUDA device: <reason>").
#include <dlfcn.h>
#include <metajit/metajit.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

using namespace metajit;

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ------------------------------------------------------------------ CUDA runtime and cuBLAS

// cudaMemcpyKind values (a C enum, passed as int).
constexpr int kHostToDevice = 1, kDeviceToHost = 2, kDeviceToDevice = 3;

std::string cuda_lib_dir() {
  const char* d = std::getenv("CUDA_LIB_DIR");
  return d && *d ? d : "/usr/local/cuda/lib64";
}

// dlopens the first of `names` that loads; on failure `why` lists what was tried and why.
void* open_first(const std::vector<std::string>& names, std::string* why) {
  std::string tried;
  for (const std::string& n : names) {
    if (void* lib = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return lib;
    const char* e = ::dlerror();
    tried += (tried.empty() ? "" : "; ") + (e ? std::string(e) : n);
  }
  *why = "tried " + tried;
  return nullptr;
}

template <class F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  return fn != nullptr;
}

// The libcudart entry points this program calls. Their C ABI has been stable for many CUDA
// releases: each returns an int error code (cudaError_t, 0 = success).
struct Cudart {
  int (*Malloc)(void**, size_t) = nullptr;
  int (*Free)(void*) = nullptr;
  int (*Memcpy)(void*, const void*, size_t, int) = nullptr;
  int (*DeviceSynchronize)() = nullptr;
  const char* (*GetErrorString)(int) = nullptr;

  void check(int e, const std::string& what) const {
    if (e == 0) return;
    const char* text = GetErrorString(e);
    throw std::runtime_error(what + " failed: CUDA error " + std::to_string(e) + " (" +
                             (text ? text : "no description") + ")");
  }
  void sync() const { check(DeviceSynchronize(), "cudaDeviceSynchronize"); }
};

// metajit has already loaded libcudart by now (cuda_available()); asking for the same file
// returns the same library, so both use one CUDA context (the device's primary context).
std::optional<Cudart> load_cudart(std::string* why) {
  void* lib = open_first(
      {cuda_lib_dir() + "/libcudart.so", "libcudart.so", "libcudart.so.13", "libcudart.so.12"},
      why);
  if (!lib) return std::nullopt;
  Cudart rt;
  if (!(bind(lib, "cudaMalloc", rt.Malloc) && bind(lib, "cudaFree", rt.Free) &&
        bind(lib, "cudaMemcpy", rt.Memcpy) &&
        bind(lib, "cudaDeviceSynchronize", rt.DeviceSynchronize) &&
        bind(lib, "cudaGetErrorString", rt.GetErrorString))) {
    *why =
        "libcudart lacks one of cudaMalloc, cudaFree, cudaMemcpy, cudaDeviceSynchronize, "
        "cudaGetErrorString";
    return std::nullopt;
  }
  return rt;
}

// cudaMalloc'ed memory, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer(const Cudart& rt, size_t bytes) : rt_(&rt) {
    rt.check(rt.Malloc(&p_, bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes)");
  }
  ~DeviceBuffer() {
    if (p_) rt_->Free(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  float* f() const { return static_cast<float*>(p_); }

 private:
  const Cudart* rt_;
  void* p_ = nullptr;
};

// cublasHandle_t is a pointer to an opaque struct; cublasOperation_t and cublasStatus_t are
// int enums (CUBLAS_OP_N = 0, CUBLAS_STATUS_SUCCESS = 0).
using CublasHandle = void*;
constexpr int kCublasOpN = 0;

struct Cublas {
  int (*Create)(CublasHandle*) = nullptr;
  int (*Destroy)(CublasHandle) = nullptr;
  int (*Sgemm)(CublasHandle, int, int, int, int, int, const float*, const float*, int, const float*,
               int, const float*, float*, int) = nullptr;
  const char* (*StatusString)(int) = nullptr;  // optional (cuBLAS >= 11.4)

  void check(int s, const std::string& what) const {
    if (s == 0) return;
    const char* text = StatusString ? StatusString(s) : nullptr;
    throw std::runtime_error(what + " failed: cuBLAS status " + std::to_string(s) +
                             (text ? std::string(" (") + text + ")" : ""));
  }
};

std::optional<Cublas> load_cublas(std::string* why) {
  void* lib = open_first(
      {cuda_lib_dir() + "/libcublas.so", "libcublas.so", "libcublas.so.13", "libcublas.so.12"},
      why);
  if (!lib) return std::nullopt;
  Cublas b;
  if (!(bind(lib, "cublasCreate_v2", b.Create) && bind(lib, "cublasDestroy_v2", b.Destroy) &&
        bind(lib, "cublasSgemm_v2", b.Sgemm))) {
    *why = "libcublas lacks one of cublasCreate_v2, cublasDestroy_v2, cublasSgemm_v2";
    return std::nullopt;
  }
  bind(lib, "cublasGetStatusString", b.StatusString);
  return b;
}

// ------------------------------------------------------------------ measuring

struct Times {
  double best_s = kNaN, median_s = kNaN;
  int reps = 0;
};

// Calls `once` reps times; each call returns the seconds it measured.
template <class F>
Times measure(int reps, F&& once) {
  std::vector<double> t;
  t.reserve(size_t(reps));
  for (int i = 0; i < reps; ++i) t.push_back(once());
  std::sort(t.begin(), t.end());
  Times out;
  out.reps = reps;
  out.best_s = t.front();
  out.median_s =
      reps % 2 ? t[size_t(reps / 2)] : (t[size_t(reps / 2 - 1)] + t[size_t(reps / 2)]) / 2;
  return out;
}

// One row of the table.
struct Row {
  std::string name;
  std::string unit;  // "GB/s" or "GFLOP/s"
  double work = 0;   // bytes moved or flops per call
  Times mj;          // metajit (for the floor row: the copy itself)
  std::string peer;  // what the ratio is against; empty for the floor
  double peer_rate = kNaN;
  Times peer_t;  // the peer's own times when it was measured in this row (cuBLAS)
  double target = kNaN;
  std::string error;       // non-empty: a measurement could not be made, and why
  std::string check;       // the verification's verdict
  bool check_ok = true;    // false: a result was wrong
  double warmup_s = kNaN;  // the untimed first call (compiles on a first run ever)
  uint64_t warmup_compiled = 0;
  double launches_per_call = kNaN;  // CUDA kernels per timed call

  double rate() const { return work / mj.best_s / 1e9; }
  double median_rate() const { return work / mj.median_s / 1e9; }
  double ratio() const { return rate() / peer_rate; }
  bool has_ratio() const { return !peer.empty() && std::isfinite(ratio()); }
  const char* met() const {
    if (peer.empty()) return "-";
    return has_ratio() ? (ratio() >= target ? "yes" : "no") : "n/a";
  }
};

// What every workload needs: the number of timed calls and, when libcudart could be loaded,
// a way to synchronise before starting a clock.
struct Ctx {
  int reps = 20;
  const Cudart* rt = nullptr;
  void sync() const {
    if (rt) rt->sync();
  }
};

// Runs fn() once, untimed, filling the row's warm-up fields.
template <class F>
void warm_up(Row& r, F&& fn) {
  const uint64_t compiled = stats().kernels_compiled;
  const auto t0 = Clock::now();
  fn();
  r.warmup_s = seconds_since(t0);
  r.warmup_compiled = stats().kernels_compiled - compiled;
}

// Times reps replays of `call`; keeps the last result in *last (its copy is dropped outside the
// timed region, so freeing the previous output is never timed).
template <class F>
Times time_replays(const Ctx& c, Row& r, Var* last, F&& call) {
  const uint64_t launched = stats().cuda_kernels_launched;
  Times t = measure(c.reps, [&] {
    c.sync();
    const auto t0 = Clock::now();
    Var y = call();
    const double s = seconds_since(t0);
    *last = std::move(y);
    return s;
  });
  r.launches_per_call = double(stats().cuda_kernels_launched - launched) / c.reps;
  return t;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// `count` indices in [0, n): one in each of `count` equal strata (pseudo-random within it),
// plus the first and the last element, so that both ends and the middle are covered.
std::vector<int64_t> sample_indices(int64_t n, int64_t count, uint64_t seed) {
  std::vector<int64_t> out{0, n - 1};
  count = std::min(count, n);
  for (int64_t k = 0; k < count; ++k) {  // stratum k is [k n / count, (k + 1) n / count)
    const int64_t lo = k * n / count, hi = (k + 1) * n / count;
    out.push_back(lo + int64_t(splitmix64(seed) % uint64_t(hi - lo)));
  }
  return out;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string elements(int64_t n) {
  if (n % (1 << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n % (1 << 10) == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

// ------------------------------------------------------------------ workloads

// 1. The floor: what the memory system gives a plain device-to-device copy.
Row bench_floor(const Ctx& c, const std::string& cudart_problem) {
  const size_t bytes = size_t(1) << 30;
  Row r;
  r.name = "floor: D2D copy 1 GiB";
  r.unit = "GB/s";
  r.work = 2.0 * double(bytes);  // every byte is read once and written once
  if (!c.rt) {
    r.error = "libcudart cannot be used: " + cudart_problem;
    return r;
  }
  try {
    const Cudart& rt = *c.rt;
    DeviceBuffer src(rt, bytes), dst(rt, bytes);
    auto copy = [&] {
      rt.check(rt.Memcpy(dst.get(), src.get(), bytes, kDeviceToDevice), "cudaMemcpy(D2D)");
    };
    warm_up(r, [&] {
      copy();
      rt.sync();
    });
    r.mj = measure(c.reps, [&] {
      rt.sync();
      const auto t0 = Clock::now();
      copy();
      rt.sync();
      return seconds_since(t0);
    });
    r.check = "(a copy; nothing to verify)";
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

Var selu(const Var& x) {
  return 1.0507009873554805 * where(x > 0.0, x, 1.6732632423543772 * (exp(x) - 1.0));
}
// In double, with SELU's constants as the kernel has them: a double scalar takes the Var's
// dtype, so in bfloat16 they are 1.046875 and 1.671875.
double selu_host(double x, DType t = DType::Float32) {
  double scale = 1.0507009873554805, alpha = 1.6732632423543772;
  if (t == DType::BFloat16)
    scale = float(bfloat16(float(scale))), alpha = float(bfloat16(float(alpha)));
  return scale * (x > 0 ? x : alpha * std::expm1(x));
}

// 2. SELU: one read and one write per element, so ideally it runs at the floor's speed; in
// float32, and in bfloat16 (2 bytes an element, computed in float: docs/design.md §3).
Row bench_selu(const Ctx& c, int64_t n, double floor_rate, DType t) {
  const bool half = t == DType::BFloat16;
  Row r;
  r.name = "selu " + elements(n) + (half ? " bf16" : " f32");
  r.unit = "GB/s";
  r.work = 2.0 * double(dtype_size(t)) * double(n);
  r.peer = "D2D copy";
  r.peer_rate = floor_rate;
  r.target = 0.80;
  try {
    Var x = cast(randn({n}, 1), t);
    eval({x});  // made on the host; the warm-up call uploads it once
    auto f = jit([](const Var& v) { return selu(v); }, "selu");
    Var y;
    warm_up(r, [&] { y = f(x); });
    r.mj = time_replays(c, r, &y, [&] { return f(x); });

    const std::vector<float> xs = cast(x, DType::Float32).to_vector<float>();
    const std::vector<float> ys = cast(y, DType::Float32).to_vector<float>();
    if (ys.size() != xs.size())
      throw std::runtime_error("selu returned " + std::to_string(ys.size()) + " elements, not " +
                               std::to_string(xs.size()));
    const std::vector<int64_t> idx = sample_indices(n, 1 << 16, 11);
    // float32 throughout on the GPU, exp(x) - 1 included: an absolute part for x near 0,
    // where exp(x) - 1 cancels, and a relative part elsewhere; a bfloat16 result adds its
    // rounding, up to 2^-8 of it (8 significant bits).
    const double rel = half ? 5e-3 : 1e-5;
    double worst = 0;
    int64_t bad = -1;
    for (int64_t i : idx) {
      const double ref = selu_host(xs[size_t(i)], t);
      const double err = std::abs(double(ys[size_t(i)]) - ref) / (1e-5 + rel * std::abs(ref));
      if (err > worst) worst = err, bad = i;
    }
    if (worst <= 1) {
      r.check = "verified: " + std::to_string(idx.size()) +
                " sampled elements match a host computation (|err| <= 1e-5 + " + fmt("%g", rel) +
                " |ref|)";
    } else {
      r.check_ok = false;
      r.check = "MISMATCH: selu(x[" + std::to_string(bad) + "] = " + fmt("%.9g", xs[size_t(bad)]) +
                ") = " + fmt("%.9g", ys[size_t(bad)]) + ", host computes " +
                fmt("%.9g", selu_host(xs[size_t(bad)], t));
    }
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

// 3. Row sums and column sums of one n x n matrix: read the matrix once, write n sums.
std::vector<Row> bench_sums(const Ctx& c, int64_t n, double floor_rate) {
  std::vector<Row> rows(2);
  const char* what[2] = {"row sums ", "col sums "};
  for (int a = 0; a < 2; ++a) {
    rows[size_t(a)].name = what[a] + std::to_string(n) + "x" + std::to_string(n) + " f32";
    rows[size_t(a)].unit = "GB/s";
    rows[size_t(a)].work = 4.0 * double(n) * double(n) + 4.0 * double(n);
    rows[size_t(a)].peer = "D2D copy";
    rows[size_t(a)].peer_rate = floor_rate;
    rows[size_t(a)].target = 0.70;
  }
  try {
    Var x = metajit::rand({n, n}, 2);
    // The references, in double: one pass over the matrix gives every row and column sum, and
    // the sum of magnitudes that bounds float32 rounding (the same, as rand() is in [0, 1)).
    const std::vector<float> xs = x.to_vector<float>();
    std::vector<double> ref_row(size_t(n), 0.0), ref_col(size_t(n), 0.0);
    std::vector<double> mag_row(size_t(n), 0.0), mag_col(size_t(n), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const float* row = xs.data() + i * n;
      double s = 0, m = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double v = row[j];
        s += v;
        m += std::abs(v);
        ref_col[size_t(j)] += v;
        mag_col[size_t(j)] += std::abs(v);
      }
      ref_row[size_t(i)] = s;
      mag_row[size_t(i)] = m;
    }
    for (int a = 0; a < 2; ++a) {
      Row& r = rows[size_t(a)];
      const int64_t axis = a == 0 ? 1 : 0;  // row sums reduce axis 1, column sums axis 0
      try {
        auto f =
            jit([axis](const Var& v) { return sum(v, {axis}); }, a == 0 ? "row_sums" : "col_sums");
        Var y;
        warm_up(r, [&] { y = f(x); });
        r.mj = time_replays(c, r, &y, [&] { return f(x); });
        const std::vector<float> ys = y.to_vector<float>();
        if (ys.size() != size_t(n))
          throw std::runtime_error("the sums have " + std::to_string(ys.size()) +
                                   " elements, not " + std::to_string(n));
        const std::vector<double>& ref = a == 0 ? ref_row : ref_col;
        const std::vector<double>& mag = a == 0 ? mag_row : mag_col;
        double worst = 0;
        int64_t bad = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double err =
              std::abs(double(ys[size_t(i)]) - ref[size_t(i)]) / std::max(mag[size_t(i)], 1e-30);
          if (err > worst) worst = err, bad = i;
        }
        if (worst < 1e-3) {
          r.check = "verified: all " + std::to_string(n) +
                    " sums match a host computation (max rel err " + fmt("%.2g", worst) + ")";
        } else {
          r.check_ok = false;
          r.check = "MISMATCH: " + std::string(a == 0 ? "row" : "column") + " sum " +
                    std::to_string(bad) + " = " + fmt("%.9g", ys[size_t(bad)]) +
                    ", host computes " + fmt("%.9g", ref[size_t(bad)]) + " (rel err " +
                    fmt("%.2g", worst) + ")";
        }
      } catch (const std::exception& e) {
        r.error = e.what();
      }
    }
  } catch (const std::exception& e) {  // making or reading the input failed
    for (Row& r : rows)
      if (r.error.empty()) r.error = e.what();
  }
  return rows;
}

// Entry (i, j) of the row-major product of a [., k] by b [k, n], in double, and the rms-size of
// its terms (the square root of their squares' sum): an entry near 0 is judged against that.
struct HostEntry {
  double value = 0, scale = 0;
};
HostEntry host_entry(const std::vector<float>& a, const std::vector<float>& b, int64_t i, int64_t j,
                     int64_t k, int64_t n) {
  double ref = 0, sq = 0;
  for (int64_t p = 0; p < k; ++p) {
    const double t = double(a[size_t(i * k + p)]) * double(b[size_t(p * n + j)]);
    ref += t;
    sq += t * t;
  }
  return {ref, std::sqrt(sq)};
}

// 4. matmul: metajit's (broadcast * broadcast, sum: one fused kernel) against cuBLAS sgemm.
Row bench_matmul(const Ctx& c, int64_t n, const Cublas* blas, const std::string& blas_problem) {
  Row r;
  r.name = "matmul " + std::to_string(n) + "^3 f32";
  r.unit = "GFLOP/s";
  r.work = 2.0 * double(n) * double(n) * double(n);
  r.peer = "cuBLAS sgemm";
  r.target = 0.25;
  const int64_t m = n, k = n;  // C[m,n] = A[m,k] B[k,n], row-major
  try {
    std::vector<float> ha(size_t(m * k)), hb(size_t(k * n));
    uint64_t state = 3;
    for (float& v : ha) v = float(double(splitmix64(state) >> 11) * 0x1.0p-52 - 1.0);  // [-1, 1)
    for (float& v : hb) v = float(double(splitmix64(state) >> 11) * 0x1.0p-52 - 1.0);

    // metajit
    std::vector<float> mj_c;
    try {
      Var a = array<float>(ha, {m, k}), b = array<float>(hb, {k, n});
      auto f = jit([](const Var& p, const Var& q) { return matmul(p, q); }, "matmul");
      Var y;
      warm_up(r, [&] { y = f(a, b); });
      r.mj = time_replays(c, r, &y, [&] { return f(a, b); });
      mj_c = y.to_vector<float>();
      if (mj_c.size() != size_t(m * n))
        throw std::runtime_error("matmul returned " + std::to_string(mj_c.size()) +
                                 " elements, not " + std::to_string(m * n));
    } catch (const std::exception& e) {
      r.error = std::string("metajit: ") + e.what();
      mj_c.clear();
    }

    // cuBLAS, on its own buffers holding the same values.
    std::vector<float> cb_c;
    std::string peer_error;
    if (!c.rt) {
      peer_error = "libcudart cannot be used";
    } else if (!blas) {
      peer_error = "libcublas could not be loaded: " + blas_problem;
    } else {
      try {
        const Cudart& rt = *c.rt;
        DeviceBuffer da(rt, ha.size() * 4), db(rt, hb.size() * 4), dc(rt, size_t(m * n) * 4);
        rt.check(rt.Memcpy(da.get(), ha.data(), ha.size() * 4, kHostToDevice), "cudaMemcpy(A)");
        rt.check(rt.Memcpy(db.get(), hb.data(), hb.size() * 4, kHostToDevice), "cudaMemcpy(B)");
        CublasHandle h = nullptr;
        blas->check(blas->Create(&h), "cublasCreate_v2");
        std::unique_ptr<void, int (*)(CublasHandle)> owner(h, blas->Destroy);
        const float alpha = 1, beta = 0;
        // cuBLAS is column-major. A row-major [r, c] array is the column-major [c, r] array of
        // its transpose, so the row-major C = A B is computed as the column-major
        // C^T (n x m, ld n) = B^T (n x k, ld n) * A^T (k x m, ld k): B goes first.
        auto gemm = [&] {
          blas->check(blas->Sgemm(h, kCublasOpN, kCublasOpN, int(n), int(m), int(k), &alpha, db.f(),
                                  int(n), da.f(), int(k), &beta, dc.f(), int(n)),
                      "cublasSgemm_v2");
        };
        gemm();  // warm-up: cuBLAS picks and loads its kernel
        rt.sync();
        r.peer_t = measure(c.reps, [&] {
          rt.sync();
          const auto t0 = Clock::now();
          gemm();
          rt.sync();
          return seconds_since(t0);
        });
        r.peer_rate = r.work / r.peer_t.best_s / 1e9;
        cb_c.resize(size_t(m * n));
        rt.check(rt.Memcpy(cb_c.data(), dc.get(), cb_c.size() * 4, kDeviceToHost), "cudaMemcpy(C)");
      } catch (const std::exception& e) {
        peer_error = e.what();
      }
    }
    if (!peer_error.empty())
      r.error += (r.error.empty() ? "" : "; ") + std::string("cuBLAS: ") + peer_error;

    // Sampled entries: metajit against cuBLAS (relative error < 1e-3), and each against a host
    // dot product in double, which says which one is wrong when they disagree. The error is
    // relative to max(|reference|, rms-size of the dot product's terms): an entry that happens
    // to be near 0 is not held to a relative error its rounding cannot meet.
    if (!mj_c.empty()) {
      const std::vector<int64_t> idx = sample_indices(m * n, 256, 5);
      double worst_mc = 0, worst_mh = 0, worst_ch = 0;
      int64_t bad = -1;
      for (int64_t e : idx) {
        const HostEntry h = host_entry(ha, hb, e / n, e % n, k, n);
        const double ref = h.value, scale = std::max(h.scale, 1e-30);
        const double mv = mj_c[size_t(e)];
        const double emh = std::abs(mv - ref) / std::max(std::abs(ref), scale);
        if (emh > worst_mh) worst_mh = emh, bad = e;
        if (!cb_c.empty()) {
          const double cv = cb_c[size_t(e)];
          worst_mc = std::max(worst_mc, std::abs(mv - cv) / std::max(std::abs(cv), scale));
          worst_ch = std::max(worst_ch, std::abs(cv - ref) / std::max(std::abs(ref), scale));
        }
      }
      const std::string n_s = std::to_string(idx.size());
      if (cb_c.empty()) {
        r.check_ok = worst_mh < 1e-3;
        r.check = (r.check_ok ? "verified: " : "MISMATCH: ") + n_s +
                  " sampled entries against a host computation only (no cuBLAS result): max rel "
                  "err " +
                  fmt("%.2g", worst_mh);
      } else if (worst_mc < 1e-3 && worst_mh < 1e-3) {
        r.check = "verified: " + n_s + " sampled entries match cuBLAS (max rel err " +
                  fmt("%.2g", worst_mc) + ") and a host computation (" + fmt("%.2g", worst_mh) +
                  ")";
      } else {
        r.check_ok = false;
        r.check = "MISMATCH: max rel err metajit vs cuBLAS " + fmt("%.2g", worst_mc) +
                  ", metajit vs host " + fmt("%.2g", worst_mh) + ", cuBLAS vs host " +
                  fmt("%.2g", worst_ch) +
                  (worst_mh >= 1e-3 ? " (metajit is wrong, e.g. C[" + std::to_string(bad / n) +
                                          "," + std::to_string(bad % n) + "])"
                                    : " (the cuBLAS call is wrong: metajit agrees with the host)");
      }
    }
  } catch (const std::exception& e) {
    r.error += (r.error.empty() ? "" : "; ") + std::string(e.what());
  }
  return r;
}

// 5. matmul in bfloat16 (float sums, the result rounded to bfloat16) against metajit's own
// float32 matmul of the same shapes: half the bytes through the same shared-memory tiles
// (codegen/cuda_contraction.cc), so at least its speed.
Row bench_matmul_bf16(const Ctx& c, int64_t n, double f32_rate) {
  Row r;
  r.name = "matmul " + std::to_string(n) + "^3 bf16";
  r.unit = "GFLOP/s";
  r.work = 2.0 * double(n) * double(n) * double(n);
  r.peer = "metajit f32 matmul";
  r.peer_rate = f32_rate;
  r.target = 1.0;
  try {
    uint64_t state = 7;
    auto values = [&] {
      std::vector<float> v(size_t(n * n));
      for (float& e : v) e = float(double(splitmix64(state) >> 11) * 0x1.0p-52 - 1.0);
      return v;
    };
    Var a = cast(array<float>(values(), {n, n}), DType::BFloat16);
    Var b = cast(array<float>(values(), {n, n}), DType::BFloat16);
    eval({a, b});
    auto f = jit([](const Var& p, const Var& q) { return matmul(p, q); }, "matmul_bf16");
    Var y;
    warm_up(r, [&] { y = f(a, b); });
    r.mj = time_replays(c, r, &y, [&] { return f(a, b); });
    // Sampled entries against a host dot product in double of the same bfloat16 values: the
    // float sums' error, and the result's rounding (up to 2^-8 relative).
    const std::vector<float> ha = cast(a, DType::Float32).to_vector<float>();
    const std::vector<float> hb = cast(b, DType::Float32).to_vector<float>();
    const std::vector<float> hc = cast(y, DType::Float32).to_vector<float>();
    const std::vector<int64_t> idx = sample_indices(n * n, 256, 5);
    double worst = 0;
    int64_t bad = -1;
    for (int64_t e : idx) {
      const HostEntry h = host_entry(ha, hb, e / n, e % n, n, n);
      const double err = std::abs(hc[size_t(e)] - h.value) / std::max(std::abs(h.value), h.scale);
      if (err > worst) worst = err, bad = e;
    }
    r.check_ok = worst < 5e-3;
    r.check =
        (r.check_ok ? "verified: " : "MISMATCH: ") + std::to_string(idx.size()) +
        " sampled entries against a host computation: max rel err " + fmt("%.2g", worst) +
        (r.check_ok ? ""
                    : " at C[" + std::to_string(bad / n) + "," + std::to_string(bad % n) + "]");
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

// ------------------------------------------------------------------ reporting

std::string ms(const Times& t) {
  if (t.reps == 0) return "-";
  return fmt("%.3f", t.best_s * 1e3) + " / " + fmt("%.3f", t.median_s * 1e3) + " ms";
}

void print_table(const std::vector<Row>& rows) {
  std::printf("%-26s | %-23s | %-16s | %-30s | %-5s | %-6s | %s\n", "workload",
              "metajit best / median", "rate", "peer", "ratio", "target", "met");
  std::printf("%s\n", std::string(130, '-').c_str());
  for (const Row& r : rows) {
    const std::string rate =
        r.mj.reps ? fmt(r.unit == "GB/s" ? "%.1f" : "%.0f", r.rate()) + " " + r.unit : "-";
    std::string peer = "-";
    if (!r.peer.empty())
      peer = r.peer + " " +
             (std::isfinite(r.peer_rate)
                  ? fmt(r.unit == "GB/s" ? "%.1f" : "%.0f", r.peer_rate) + " " + r.unit
                  : std::string("n/a"));
    std::printf("%-26s | %-23s | %-16s | %-30s | %-5s | %-6s | %s\n", r.name.c_str(),
                ms(r.mj).c_str(), rate.c_str(), peer.c_str(),
                r.has_ratio() ? fmt("%.2f", r.ratio()).c_str() : "-",
                std::isfinite(r.target) ? fmt(">=%.2f", r.target).c_str() : "-", r.met());
  }
}

nlohmann::ordered_json num(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json to_json(const Row& r) {
  nlohmann::ordered_json j;
  j["name"] = r.name;
  j["unit"] = r.unit;
  j[r.unit == "GB/s" ? "bytes_per_call" : "flops_per_call"] = r.work;
  j["metajit"] = {{"reps", r.mj.reps},
                  {"best_s", num(r.mj.best_s)},
                  {"median_s", num(r.mj.median_s)},
                  {"rate", num(r.mj.reps ? r.rate() : kNaN)},
                  {"median_rate", num(r.mj.reps ? r.median_rate() : kNaN)},
                  {"warmup_s", num(r.warmup_s)},
                  {"warmup_kernels_compiled", r.warmup_compiled},
                  {"cuda_kernels_per_call", num(r.launches_per_call)}};
  if (!r.peer.empty()) {
    j["peer"] = {{"name", r.peer}, {"rate", num(r.peer_rate)}};
    if (r.peer_t.reps)
      j["peer"].update(
          {{"reps", r.peer_t.reps}, {"best_s", r.peer_t.best_s}, {"median_s", r.peer_t.median_s}});
    j["ratio"] = num(r.has_ratio() ? r.ratio() : kNaN);
    j["target"] = r.target;
    j["met"] = r.met();
  }
  j["verified"] = r.check_ok;
  j["check"] = r.check;
  j["error"] = r.error.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.error);
  return j;
}

bool write_json(const std::string& path, const nlohmann::ordered_json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) {
    std::cerr << "error: cannot write " << path << "\n";
    return false;
  }
  return true;
}

// ------------------------------------------------------------------ command line

struct Options {
  int reps = 20;
  bool quick = false;
  std::string json;
  int64_t selu_n = int64_t(1) << 28, sum_n = 16384, matmul_n = 4096;
};

void usage(std::ostream& o) {
  o << "usage: metajit_cuda_bench [--reps N] [--quick] [--json FILE] [--selu-n N] [--sum-n N] "
       "[--matmul-n N]\n"
       "  --reps N        timed calls per workload, after one untimed warm-up (default 20)\n"
       "  --quick         smaller sizes for a smoke test: SELU 2^24, sums 4096x4096, matmul "
       "1024\n"
       "  --json FILE     also write the results as JSON\n"
       "  --selu-n N      SELU elements (default 2^28)\n"
       "  --sum-n N       sums over an N x N matrix (default 16384)\n"
       "  --matmul-n N    matmul N x N by N x N (default 4096)\n"
       "The floor (a 1 GiB device-to-device copy) is the same whatever the sizes.\n"
       "Exit: 0 ran, 1 bad argument, 2 a result was wrong, 3 a measurement failed, 77 no CUDA "
       "device.\n";
}

bool parse_int(const char* s, int64_t lo, int64_t hi, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// Returns the exit status to stop with (0 for --help), or -1 to go on.
int parse(int argc, char** argv, Options* o) {
  int64_t selu_n = -1, sum_n = -1, matmul_n = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](int64_t lo, int64_t hi, int64_t* out) {
      if (i + 1 >= argc || !parse_int(argv[i + 1], lo, hi, out)) {
        std::cerr << "error: " << a << " needs an integer in [" << lo << ", " << hi << "]"
                  << (i + 1 < argc ? std::string(", not '") + argv[i + 1] + "'" : "") << "\n";
        return false;
      }
      ++i;
      return true;
    };
    int64_t reps = 0;
    if (a == "--help" || a == "-h") {
      usage(std::cout);
      return 0;
    } else if (a == "--quick") {
      o->quick = true;
    } else if (a == "--reps") {
      if (!value(1, 100000, &reps)) return 1;
      o->reps = int(reps);
    } else if (a == "--json") {
      if (i + 1 >= argc || argv[i + 1][0] == '\0') {
        std::cerr << "error: --json needs a file name\n";
        return 1;
      }
      o->json = argv[++i];
    } else if (a == "--selu-n") {
      if (!value(1, int64_t(1) << 32, &selu_n)) return 1;
    } else if (a == "--sum-n") {
      if (!value(1, 65536, &sum_n)) return 1;
    } else if (a == "--matmul-n") {
      if (!value(1, 32768, &matmul_n)) return 1;
    } else {
      std::cerr << "error: unknown argument '" << a << "'\n";
      usage(std::cerr);
      return 1;
    }
  }
  if (o->quick) o->selu_n = int64_t(1) << 24, o->sum_n = 4096, o->matmul_n = 1024;
  if (selu_n > 0) o->selu_n = selu_n;
  if (sum_n > 0) o->sum_n = sum_n;
  if (matmul_n > 0) o->matmul_n = matmul_n;
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (int code = parse(argc, argv, &opt); code >= 0) return code;

  if (!cuda_available()) {
    std::cout << "skipped: no CUDA device: " << cuda_unavailable_reason() << std::endl;
    if (!opt.json.empty())
      write_json(opt.json, {{"skipped", "no CUDA device: " + cuda_unavailable_reason()}});
    return 77;
  }
  // Explicitly CUDA (not use_best_device(), which would honour METAJIT_DEVICE=cpu): this
  // benchmark is about the GPU.
  set_device(Device::CUDA);
  const std::string device_line = describe_device(Device::CUDA);
  std::cout << "device: " << device_line << "\n"
            << "reps: " << opt.reps
            << " timed calls per workload after one untimed warm-up; best / median shown, "
               "rates and ratios from the best\n"
            << std::endl;

  std::string cudart_problem, cublas_problem;
  std::optional<Cudart> cudart = load_cudart(&cudart_problem);
  if (cudart) {
    // A libcudart that loads but cannot reach the device (e.g. under METAJIT_CUDA_EMULATE=1
    // on a machine without a GPU) leaves the peers out; metajit is still measured.
    try {
      cudart->sync();
    } catch (const std::exception& e) {
      cudart_problem = e.what();
      cudart.reset();
    }
  }
  std::optional<Cublas> cublas = load_cublas(&cublas_problem);
  Ctx ctx;
  ctx.reps = opt.reps;
  ctx.rt = cudart ? &*cudart : nullptr;

  // One workload at a time, each dropping its Vars and buffers before the next. The most held
  // at once is SELU's: its 1 GiB input and two 1 GiB outputs (the one kept from the previous
  // call while the next is made), plus whatever metajit's caching allocator keeps.
  std::vector<Row> rows;
  rows.push_back(bench_floor(ctx, cudart_problem));
  const double floor_rate = rows[0].mj.reps ? rows[0].rate() : kNaN;
  rows.push_back(bench_selu(ctx, opt.selu_n, floor_rate, DType::Float32));
  rows.push_back(bench_selu(ctx, opt.selu_n, floor_rate, DType::BFloat16));
  for (Row& r : bench_sums(ctx, opt.sum_n, floor_rate)) rows.push_back(std::move(r));
  rows.push_back(bench_matmul(ctx, opt.matmul_n, cublas ? &*cublas : nullptr, cublas_problem));
  const Row& f32_matmul = rows.back();
  rows.push_back(
      bench_matmul_bf16(ctx, opt.matmul_n, f32_matmul.mj.reps ? f32_matmul.rate() : kNaN));

  print_table(rows);
  std::cout << "\n";
  bool wrong = false, failed = false;
  for (const Row& r : rows) {
    wrong |= !r.check_ok;
    failed |= !r.error.empty();
    std::cout << r.name << ":\n";
    if (!r.error.empty()) std::cout << "  ERROR: " << r.error << "\n";
    if (!r.check.empty()) std::cout << "  " << r.check << "\n";
    if (std::isfinite(r.warmup_s) && !r.peer.empty()) {
      std::cout << "  warm-up " << fmt("%.3f", r.warmup_s) << " s (" << r.warmup_compiled
                << " kernel(s) compiled)";
      if (std::isfinite(r.launches_per_call))
        std::cout << "; " << fmt("%.3g", r.launches_per_call) << " CUDA kernel(s) per timed call";
      std::cout << "\n";
    }
  }
  const Stats st = stats();
  std::cout << "\nstats: " << st.kernels_compiled << " kernel(s) compiled, "
            << st.cuda_kernels_launched << " CUDA kernel launches, "
            << fmt("%.1f", double(st.cuda_bytes_in_use) / double(1 << 20))
            << " MiB of device memory in use (peak "
            << fmt("%.1f", double(st.cuda_peak_bytes) / double(1 << 20)) << " MiB)\n";
  const int code = wrong ? 2 : failed ? 3 : 0;
  if (wrong) std::cout << "a result was wrong: see MISMATCH above\n";

  if (!opt.json.empty()) {
    nlohmann::ordered_json j;
    j["device"] = device_line;
    j["reps"] = opt.reps;
    j["quick"] = opt.quick;
    j["sizes"] = {{"floor_bytes", 1 << 30},
                  {"selu_n", opt.selu_n},
                  {"sum_n", opt.sum_n},
                  {"matmul_n", opt.matmul_n}};
    j["floor_gbps"] = num(floor_rate);
    j["workloads"] = nlohmann::ordered_json::array();
    for (const Row& r : rows) j["workloads"].push_back(to_json(r));
    j["stats"] = {{"kernels_compiled", st.kernels_compiled},
                  {"cuda_kernels_launched", st.cuda_kernels_launched},
                  {"cuda_bytes_in_use", st.cuda_bytes_in_use},
                  {"cuda_peak_bytes", st.cuda_peak_bytes}};
    j["verified"] = !wrong;
    j["exit_code"] = code;
    if (!write_json(opt.json, j) && code == 0) return 3;
  }
  return code;
}
