#include "distributed/mpi_types.h"

#include <metajit/error.h>

#include <cmath>
#include <mutex>
#include <string>

namespace metajit::dist {
namespace {

// One half type's element-wise combination, computed in float and rounded to the type, as
// MPI_Op_create wants it (MPI_User_function: inout[i] = in[i] op inout[i]).
template <typename Half, int kOp>
void combine_halves(void* in, void* inout, int* len, MPI_Datatype*) {
  const Half* a = static_cast<const Half*>(in);
  Half* b = static_cast<Half*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = float(a[i]), y = float(b[i]);
    float r;
    if (kOp == int(ReduceOp::Add))
      r = x + y;
    else if (kOp == int(ReduceOp::Mul))
      r = x * y;
    else if (std::isnan(x) || std::isnan(y))  // Max / Min keep a NaN, as the kernels' do
      r = std::isnan(x) ? x : y;
    else
      r = kOp == int(ReduceOp::Max) ? std::fmax(x, y) : std::fmin(x, y);
    b[i] = Half(r);
  }
}

template <typename Half>
MPI_Op half_op(ReduceOp op) {
  static MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  static std::once_flag once;
  std::call_once(once, [] {
    MPI_Op_create(&combine_halves<Half, int(ReduceOp::Add)>, 1, &ops[0]);
    MPI_Op_create(&combine_halves<Half, int(ReduceOp::Mul)>, 1, &ops[1]);
    MPI_Op_create(&combine_halves<Half, int(ReduceOp::Max)>, 1, &ops[2]);
    MPI_Op_create(&combine_halves<Half, int(ReduceOp::Min)>, 1, &ops[3]);
  });
  switch (op) {
    case ReduceOp::Mul:
      return ops[1];
    case ReduceOp::Max:
      return ops[2];
    case ReduceOp::Min:
      return ops[3];
    default:
      return ops[0];  // Add, Mean
  }
}

}  // namespace

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::Bool:
      return MPI_UINT8_T;
    case DType::Int8:
      return MPI_INT8_T;
    case DType::UInt8:
      return MPI_UINT8_T;
    case DType::Int16:
      return MPI_INT16_T;
    case DType::Int32:
      return MPI_INT32_T;
    case DType::Int64:
      return MPI_INT64_T;
    case DType::Float32:
      return MPI_FLOAT;
    case DType::Float64:
      return MPI_DOUBLE;
    case DType::Float16:
    case DType::BFloat16:
      return MPI_UINT16_T;
  }
  throw InternalError("mpi_type: unknown dtype");
}

void check_reducible(DType t, ReduceOp op) {
  if (t == DType::Bool && op == ReduceOp::Mean)
    throw DTypeError(
        "dist::all_reduce: Mean of a bool value is not defined; valid ops for "
        "bool are Add and Max (or), Mul and Min (and)");
}

MPI_Op mpi_op(DType t, ReduceOp op) {
  check_reducible(t, op);
  if (t == DType::Float16) return half_op<float16>(op);
  if (t == DType::BFloat16) return half_op<bfloat16>(op);
  if (t == DType::Bool) return op == ReduceOp::Add || op == ReduceOp::Max ? MPI_MAX : MPI_MIN;
  switch (op) {
    case ReduceOp::Mul:
      return MPI_PROD;
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Min:
      return MPI_MIN;
    default:
      return MPI_SUM;  // Add, Mean
  }
}

}  // namespace metajit::dist
