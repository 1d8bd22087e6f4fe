// Where a realized value lives. A leaf's own buffer is on the device that computed it (or the
// host, for data the program made); using it on the other device copies it there once and keeps
// the copy with the node: host data moves to the GPU on first use and comes back for
// to_vector()/item(), and a value is moved between devices, never recomputed.
#pragma once
#include "meta_ops/node.h"

namespace metajit {

// The buffer of realized node `n` on device `d`: its own when it lives on `d` (no lock), else
// its copy there, made on first use under graph_mutex(). Throws CudaError when a copy fails or
// CUDA cannot be used.
BufferPtr buffer_on(const Node& n, Device d);

// A new buffer on `to` holding the bytes of `src`.
BufferPtr copy_buffer(const Buffer& src, Device to);

}  // namespace metajit
