#include "runtime/cuda_runtime.h"

#include <dlfcn.h>
#include <metajit/error.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <new>
#include <vector>

#include "base/buffer.h"
#include "base/config.h"
#include "runtime/cuda_toolchain.h"

namespace metajit {
namespace {

// The few libcudart entry points metajit calls; their C ABI has been stable since CUDA 4.
using cudaError = int;
enum : int { kHostToDevice = 1, kDeviceToHost = 2 };
enum : int { kAttrMultiProcessors = 16, kAttrMajor = 75, kAttrMinor = 76 };
// cudaErrorMemoryAllocation: cudaMalloc found not enough free device memory.
constexpr cudaError kErrorMemoryAllocation = 2;

struct CudartApi {
  cudaError (*GetDeviceCount)(int*);
  cudaError (*SetDevice)(int);
  cudaError (*DeviceGetAttribute)(int*, int, int);
  cudaError (*Malloc)(void**, size_t);
  cudaError (*Free)(void*);
  cudaError (*Memcpy)(void*, const void*, size_t, int);
  cudaError (*DeviceSynchronize)();
  cudaError (*GetLastError)();
  const char* (*GetErrorName)(cudaError);
  const char* (*GetErrorString)(cudaError);
  cudaError (*RuntimeGetVersion)(int*);
  cudaError (*DriverGetVersion)(int*);
  cudaError (*MemGetInfo)(size_t*, size_t*);
};

std::string version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

class RealCudaRuntime final : public CudaRuntime {
 public:
  explicit RealCudaRuntime(const CudartApi& api) : api_(api) {
    int v = 0;
    api_.DeviceGetAttribute(&v, kAttrMajor, 0);
    major_ = v;
    api_.DeviceGetAttribute(&v, kAttrMinor, 0);
    minor_ = v;
    api_.DeviceGetAttribute(&sms_, kAttrMultiProcessors, 0);
    api_.RuntimeGetVersion(&runtime_version_);
    api_.DriverGetVersion(&driver_version_);
    size_t free_bytes = 0;
    api_.MemGetInfo(&free_bytes, &total_bytes_);
    name_ = device_name_from_driver();
  }

  bool emulated() const override { return false; }

  std::string describe() const override {
    char mem[32];
    std::snprintf(mem, sizeof mem, "%.1f GiB", double(total_bytes_) / double(1ull << 30));
    return name_ + " (" + arch() + ", " + std::to_string(sms_) + " SMs, " + mem + "; driver " +
           version_text(driver_version_) + ", runtime " + version_text(runtime_version_) + ")";
  }

  std::string arch() const override {
    return "sm_" + std::to_string(major_) + std::to_string(minor_);
  }

  void* allocate(size_t bytes) override {
    void* p = nullptr;
    cudaError e = api_.Malloc(&p, bytes ? bytes : 1);
    if (e == kErrorMemoryAllocation) {
      api_.GetLastError();  // else launch_error() would report it as the next launch's
      return nullptr;
    }
    if (e != 0)
      throw CudaError("CUDA: cannot allocate " + std::to_string(bytes) +
                  " bytes of device memory: " + error_text(e));
    return p;
  }

  std::string memory_report() override {
    size_t free_bytes = 0, total = 0;
    if (api_.MemGetInfo(&free_bytes, &total) != 0) return "free device memory unknown";
    char text[80];
    std::snprintf(text, sizeof text, "%.2f GiB free of %.2f GiB", double(free_bytes) / (1ull << 30),
                  double(total) / (1ull << 30));
    return text;
  }

  void release(void* p) noexcept override { api_.Free(p); }

  void to_device(void* dst, const void* src, size_t bytes) override {
    if (cudaError e = api_.Memcpy(dst, src, bytes, kHostToDevice))
      throw CudaError("CUDA: copying " + std::to_string(bytes) +
                  " bytes to the device failed: " + error_text(e));
  }

  void to_host(void* dst, const void* src, size_t bytes) override {
    if (cudaError e = api_.Memcpy(dst, src, bytes, kDeviceToHost))
      throw CudaError("CUDA: copying " + std::to_string(bytes) +
                  " bytes to the host failed: " + error_text(e));
  }

  std::string launch_error() override {
    cudaError e = api_.GetLastError();
    return e ? error_text(e) : "";
  }

  std::string synchronize() override {
    cudaError e = api_.DeviceSynchronize();
    return e ? error_text(e) : "";
  }

 private:
  std::string error_text(cudaError e) const {
    const char* name = api_.GetErrorName ? api_.GetErrorName(e) : nullptr;
    const char* text = api_.GetErrorString ? api_.GetErrorString(e) : nullptr;
    return std::string(name ? name : "cudaError " + std::to_string(e)) + " (" +
           (text ? text : "no description") + ")";
  }

  // The marketing name comes from the driver API (libcuda), whose ABI does not move with
  // cudaDeviceProp's layout.
  static std::string device_name_from_driver() {
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return "CUDA device 0";
    auto init = reinterpret_cast<int (*)(unsigned)>(::dlsym(lib, "cuInit"));
    auto get = reinterpret_cast<int (*)(int*, int)>(::dlsym(lib, "cuDeviceGet"));
    auto name = reinterpret_cast<int (*)(char*, int, int)>(::dlsym(lib, "cuDeviceGetName"));
    char buf[256] = {0};
    int dev = 0;
    if (init && get && name && init(0) == 0 && get(&dev, 0) == 0 &&
        name(buf, sizeof buf - 1, dev) == 0)
      return buf;
    return "CUDA device 0";
  }

  CudartApi api_;
  int major_ = 0, minor_ = 0, sms_ = 0, runtime_version_ = 0, driver_version_ = 0;
  size_t total_bytes_ = 0;
  std::string name_;
};

class EmulatedCudaRuntime final : public CudaRuntime {
 public:
  bool emulated() const override { return true; }
  std::string describe() const override {
    return "CUDA emulated on the host (METAJIT_CUDA_EMULATE=1: kernels run as host fibers)";
  }
  std::string arch() const override { return ""; }
  void* allocate(size_t bytes) override {
    return std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);  // nullptr: out of memory
  }
  std::string memory_report() override { return "emulated: the host's memory"; }
  void release(void* p) noexcept override { std::free(p); }
  void to_device(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  std::string launch_error() override { return ""; }
  std::string synchronize() override { return ""; }
};

template <class F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(::dlsym(lib, name));
  return fn != nullptr;
}

struct Loaded {
  CudaRuntime* runtime = nullptr;
  std::string reason;
};

Loaded load_real() {
  Loaded out;
  std::vector<std::string> candidates;
  if (std::string dir = cuda_library_dir(); !dir.empty())
    candidates.push_back(dir + "/libcudart.so");
  for (const char* name : {"libcudart.so", "libcudart.so.13", "libcudart.so.12"})
    candidates.push_back(name);
  void* lib = nullptr;
  std::string tried;
  for (const std::string& c : candidates) {
    lib = ::dlopen(c.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (lib) break;
    tried += (tried.empty() ? "" : ", ") + c;
  }
  if (!lib) {
    out.reason = "the CUDA runtime library was not found (tried " + tried +
                 "); install the CUDA toolkit or put libcudart on the loader path";
    return out;
  }
  CudartApi api{};
  bool ok = bind(lib, "cudaGetDeviceCount", api.GetDeviceCount) &&
            bind(lib, "cudaSetDevice", api.SetDevice) &&
            bind(lib, "cudaDeviceGetAttribute", api.DeviceGetAttribute) &&
            bind(lib, "cudaMalloc", api.Malloc) && bind(lib, "cudaFree", api.Free) &&
            bind(lib, "cudaMemcpy", api.Memcpy) &&
            bind(lib, "cudaDeviceSynchronize", api.DeviceSynchronize) &&
            bind(lib, "cudaGetLastError", api.GetLastError) &&
            bind(lib, "cudaGetErrorName", api.GetErrorName) &&
            bind(lib, "cudaGetErrorString", api.GetErrorString) &&
            bind(lib, "cudaRuntimeGetVersion", api.RuntimeGetVersion) &&
            bind(lib, "cudaDriverGetVersion", api.DriverGetVersion) &&
            bind(lib, "cudaMemGetInfo", api.MemGetInfo);
  if (!ok) {
    out.reason = "the CUDA runtime library lacks an entry point metajit needs";
    return out;
  }
  int count = 0;
  cudaError e = api.GetDeviceCount(&count);
  if (e != 0 || count <= 0) {
    const char* name = api.GetErrorName(e);
    const char* text = api.GetErrorString(e);
    out.reason = e != 0 ? std::string("no usable CUDA device: ") + (name ? name : "error") + " (" +
                              (text ? text : "") + ")"
                        : "no CUDA device found";
    return out;
  }
  if (e = api.SetDevice(0); e != 0) {
    out.reason = std::string("CUDA device 0 cannot be used: ") + api.GetErrorString(e);
    return out;
  }
  out.runtime = new RealCudaRuntime(api);
  return out;
}

const Loaded& loaded() {
  static Loaded* l = [] {
    auto* out = new Loaded;
    try {
      *out = config().cuda_emulate ? Loaded{new EmulatedCudaRuntime, ""} : load_real();
    } catch (const std::exception& e) {
      out->reason = e.what();
    }
    if (out->runtime) {
      // Device buffers come from the base layer's caching allocator (base/buffer.h), which
      // gets the device's memory through these; the runtime lives until the process ends.
      static CudaRuntime* rt = out->runtime;
      set_device_memory_source(Device::CUDA, {[](size_t bytes) { return rt->allocate(bytes); },
                                              [](void* p) { rt->release(p); },
                                              [] { return rt->memory_report(); }});
    }
    return out;
  }();
  return *l;
}

}  // namespace

CudaRuntime* cuda_runtime() {
  return loaded().runtime;
}

std::string cuda_library_dir() {
  std::filesystem::path nvcc = locate_nvcc();
  if (nvcc.empty()) return "";
  std::error_code ec;
  std::filesystem::path real = std::filesystem::canonical(nvcc, ec);
  if (ec) real = nvcc;
  for (const char* sub : {"lib64", "lib", "targets/x86_64-linux/lib"}) {
    std::filesystem::path dir = real.parent_path().parent_path() / sub;
    if (std::filesystem::exists(dir / "libcudart.so", ec)) return dir.string();
  }
  return "";
}

std::string cuda_runtime_problem() {
  return loaded().reason;
}

}  // namespace metajit
