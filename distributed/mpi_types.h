// metajit's dtypes and reduce ops as MPI's (distributed/mpi_types.cc).
#pragma once
#include <metajit/dtype.h>
#include <metajit/ops.h>
#include <mpi.h>

namespace metajit::dist {

// The MPI datatype of one element (Bool: MPI_UINT8_T; halves: MPI_UINT16_T, their bits).
MPI_Datatype mpi_type(DType t);

// The MPI operation reducing `t` by `op` (Mean: Add; the division follows). Halves get
// operations of their own (MPI has no 16-bit float); Bool's Add/Max are MPI_MAX ("or"), Mul/Min
// MPI_MIN ("and"). Throws DTypeError for Mean on Bool.
MPI_Op mpi_op(DType t, ReduceOp op);

// Throws the DTypeError of mpi_op for a reduction no dtype-op pair allows (Mean on Bool), in a
// world of one too; needs no MPI.
void check_reducible(DType t, ReduceOp op);

}  // namespace metajit::dist
