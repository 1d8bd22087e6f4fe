#include "distributed/buffer_collectives.h"

#include <metajit/distributed.h>
#include <metajit/error.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>
#include <vector>

#include "distributed/collective_check.h"
#include "distributed/mpi_types.h"
#include "distributed/mpi_world.h"
#include "meta_ops/node.h"

namespace metajit::dist {
namespace {

// MPI counts are int: larger buffers go in pieces of at most this many elements.
constexpr int64_t kMaxPiece = int64_t(1) << 30;

// Runs one MPI collective per piece of `count` elements (`run(offset, n)`), once the check has
// seen every rank arrive. These are MPI's blocking collectives: every rank is known to be about
// to call the same one, and a rank that dies inside it makes mpirun end the job (README
// "Distributed training"). Non-blocking ones polled against the deadline were 2-4x slower than
// MPI_Allreduce at 16 and 64 MB on 2 ranks (OpenMPI's libnbc schedules progress only inside the
// polls; bench/dist_bench.cc), and 30-80x with the check's sleeping polls.
void run_pieces(const CollectiveSignature& signature, int64_t count,
                const std::function<int(int64_t, int)>& run) {
  std::lock_guard<std::mutex> lock(mpi_mutex());
  int64_t at = 0;
  do {
    const int n = int(std::min(kMaxPiece, count - at));
    check_mpi(run(at, n), std::string("metajit::dist: ") + signature.text);
    at += n;
  } while (at < count);
}

// Mean's division of the reduced sum, in the element type (integers truncate like `/`).
template <typename T>
void divide(void* data, int64_t count, int by) {
  T* p = static_cast<T*>(data);
  for (int64_t i = 0; i < count; ++i) p[i] = T(p[i] / T(by));
}
template <typename Half>
void divide_half(void* data, int64_t count, int by) {
  Half* p = static_cast<Half*>(data);
  for (int64_t i = 0; i < count; ++i) p[i] = Half(float(p[i]) / float(by));
}

void divide_by(void* data, int64_t count, DType t, int by) {
  switch (t) {
    case DType::Int8:
      return divide<int8_t>(data, count, by);
    case DType::UInt8:
      return divide<uint8_t>(data, count, by);
    case DType::Int16:
      return divide<int16_t>(data, count, by);
    case DType::Int32:
      return divide<int32_t>(data, count, by);
    case DType::Int64:
      return divide<int64_t>(data, count, by);
    case DType::Float32:
      return divide<float>(data, count, by);
    case DType::Float64:
      return divide<double>(data, count, by);
    case DType::Float16:
      return divide_half<float16>(data, count, by);
    case DType::BFloat16:
      return divide_half<bfloat16>(data, count, by);
    case DType::Bool:
      break;
  }
  throw InternalError("dist: Mean of a bool value");
}

char* bytes(void* p, int64_t elements, DType t) {
  return static_cast<char*>(p) + elements * int64_t(dtype_size(t));
}

}  // namespace

void all_reduce_buffer(void* data, int64_t count, DType dtype, ReduceOp op,
                       const std::string& what) {
  all_reduce_buffer(data, data, count, dtype, op, what);
}

void all_reduce_buffer(const void* in, void* out, int64_t count, DType dtype, ReduceOp op,
                       const std::string& what) {
  check_reducible(dtype, op);
  const World& w = world();
  const std::string text = std::string("all_reduce(") + reduce_op_name(op) + ") " + what;
  const CollectiveSignature s =
      make_signature(CollectiveKind::AllReduce, int32_t(dtype), int32_t(op), 0, count, text);
  if (w.size == 1) {
    if (in != out && count > 0) std::memcpy(out, in, size_t(count) * dtype_size(dtype));
    return;
  }
  const MPI_Op mpi = mpi_op(dtype, op);
  check_collective(s);
  // Out of place, MPI is given `in` itself rather than a copy of it. OpenMPI's own algorithms
  // copy it into `out` first, so on OpenMPI this costs what a copy here did (the Var all_reduce
  // of a 64 MB leaf: 0.91 of MPI_Allreduce in place, bench/dist_bench.cc).
  run_pieces(s, count, [&](int64_t at, int n) {
    const void* from = in == out ? MPI_IN_PLACE : bytes(const_cast<void*>(in), at, dtype);
    return MPI_Allreduce(from, bytes(out, at, dtype), n, mpi_type(dtype), mpi, w.comm);
  });
  if (op == ReduceOp::Mean) divide_by(out, count, dtype, w.size);
}

void broadcast_buffer(void* data, int64_t count, DType dtype, int root, const std::string& what) {
  const World& w = world();
  if (root < 0 || root >= w.size)
    throw Error("dist::broadcast: root " + std::to_string(root) +
                " is not a rank; valid roots are 0 to " + std::to_string(w.size - 1) +
                " (world_size " + std::to_string(w.size) + ")");
  const CollectiveSignature s =
      make_signature(CollectiveKind::Broadcast, int32_t(dtype), 0, root, count,
                     "broadcast(root " + std::to_string(root) + ") " + what);
  if (w.size == 1) return;
  check_collective(s);
  run_pieces(s, count, [&](int64_t at, int n) {
    return MPI_Bcast(bytes(data, at, dtype), n, mpi_type(dtype), root, w.comm);
  });
}

void all_gather_buffer(const void* in, void* out, int64_t count, DType dtype,
                       const std::string& what) {
  const World& w = world();
  if (count > INT_MAX)
    throw Error("dist::all_gather: " + what + " has " + std::to_string(count) +
                " elements; at most 2147483647 per rank can be gathered");
  const CollectiveSignature s =
      make_signature(CollectiveKind::AllGather, int32_t(dtype), 0, 0, count, "all_gather " + what);
  if (w.size == 1) {
    if (count > 0) std::memcpy(out, in, size_t(count) * dtype_size(dtype));
    return;
  }
  check_collective(s);
  run_pieces(s, 1, [&](int64_t, int) {
    return MPI_Allgather(in, int(count), mpi_type(dtype), out, int(count), mpi_type(dtype), w.comm);
  });
}

void barrier() {
  check_collective(make_signature(CollectiveKind::Barrier, 0, 0, 0, 0, "barrier"));
}

}  // namespace metajit::dist
