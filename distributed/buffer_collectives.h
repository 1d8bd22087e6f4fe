// Collectives on host memory: what dist::barrier() runs, and what the Var collectives
// (all_reduce, broadcast, all_gather as graph nodes, distributed/graph_collectives.cc) run between
// kernels. Each first checks its signature across ranks (distributed/collective_check.h), then
// moves the data with MPI's own collective (buffer_collectives.cc run_pieces). In a world of one
// each is the identity (all_gather a copy).
#pragma once
#include <metajit/dtype.h>
#include <metajit/ops.h>

#include <cstdint>
#include <string>

namespace metajit::dist {

// `data` (count elements of `dtype`) combined element-wise over the ranks by `op` (Add, Mul,
// Max, Min, Mean), in place on every rank. Mean divides the sum by world_size() (integers
// truncate, like `/`). Bool: Add and Max are "or", Mul and Min "and"; Mean is a DTypeError.
// Half types combine in float and round each partial result to the type. `what` names the
// value in messages (e.g. "float32[4, 3]").
void all_reduce_buffer(void* data, int64_t count, DType dtype, ReduceOp op,
                       const std::string& what);
// The same from `in` into `out` (count elements each; the same buffer is in place): `in` is
// read, never written.
void all_reduce_buffer(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                       const std::string& what);

// Every rank's `data` becomes rank `root`'s.
void broadcast_buffer(void* data, int64_t count, DType dtype, int root, const std::string& what);

// `out` (world_size() * count elements) gets every rank's `in` in rank order. At most 2^31 - 1
// elements per rank (MPI's counts).
void all_gather_buffer(const void* in, void* out, int64_t count, DType dtype,
                       const std::string& what);

}  // namespace metajit::dist
