// metajit CUDA GPU prelude (codegen/cuda_gpu_prelude.h): what the CUDA toolchain provides,
// under the names the host emulation prelude (codegen/cuda_emulation_prelude.h) gives it too.
// Every GPU kernel's source starts with this text; the build embeds it as kCudaGpuPrelude
// (CMakeLists.txt, cmake/cuda_preludes.cc.in), so it may include no header. nvcc compiles it
// in the tests that build kernels for a GPU (tests/test_cuda_codegen.cc).
#define MJ_HD __host__ __device__ __forceinline__
#define MJ_INFF __int_as_float(0x7f800000)
#define MJ_INF __longlong_as_double(0x7ff0000000000000LL)
#define MJ_LAUNCH(kernel, grid, block, ...) kernel<<<(grid), (block)>>>(__VA_ARGS__)
#define MJ_UNROLL _Pragma("unroll")
