#include "runtime/residency.h"

#include <metajit/error.h>

#include <cstring>
#include <mutex>

#include "base/check.h"
#include "runtime/cuda_runtime.h"

namespace metajit {

BufferPtr copy_buffer(const Buffer& src, Device to) {
  if (src.device() == Device::CPU && to == Device::CPU) {
    BufferPtr out = allocate_buffer(src.bytes(), to);
    if (src.bytes()) std::memcpy(out->data(), src.data(), src.bytes());
    return out;
  }
  CudaRuntime* rt = cuda_runtime();  // loads it, and with it the device's memory
  if (!rt)
    throw CudaError("moving a value to the " + std::string(device_name(to)) +
                    ": CUDA cannot be used here: " + cuda_runtime_problem());
  BufferPtr out = allocate_buffer(src.bytes(), to);
  if (src.bytes() == 0) return out;
  if (to == Device::CUDA && src.device() == Device::CPU)
    rt->to_device(out->data(), src.data(), src.bytes());
  else if (to == Device::CPU && src.device() == Device::CUDA)
    rt->to_host(out->data(), src.data(), src.bytes());
  else
    throw CudaError("moving a value between two CUDA buffers is not supported");
  return out;
}

BufferPtr buffer_on(const Node& n, Device d) {
  if (n.data && n.data->device() == d) return n.data;
  std::lock_guard<std::recursive_mutex> lock(graph_mutex());
  Node& node = const_cast<Node&>(n);  // the mirror is a cache of the same value
  METAJIT_CHECK(node.data, "reading the buffer of a value that was never computed");
  if (!node.mirror || node.mirror->device() != d) node.mirror = copy_buffer(*node.data, d);
  return node.mirror;
}

}  // namespace metajit
