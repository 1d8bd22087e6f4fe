#!/usr/bin/env bash
# `make bench-dist BUILD=build`: the distributed rows in one run (README "Distributed training"):
# metajit's all-reduce against MPI_Allreduce on 2 ranks (bench/dist_bench.cc), then the digits
# MLP's median step time on 1 rank and on 2 ranks sharing this machine's cores.
set -euo pipefail
build=${1:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi=(mpirun --oversubscribe --bind-to none)
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) hardware threads"
"${mpi[@]}" -np 2 "$build/bench/metajit_dist_bench" 20
# The last epoch's median microseconds per step (column 4 of train_digits' table).
step_us() { awk '$1 ~ /^[0-9]+$/ && NF == 6 { us = $4 } END { print us }'; }
one=$("$build/samples/train_digits" --epochs 5 | step_us)
two=$("${mpi[@]}" -np 2 "$build/samples/train_digits" --distributed --epochs 5 | step_us)
echo "digits MLP step (global batch 64): 1 rank ${one} us, 2 ranks ${two} us (32 rows each)"
if command -v python3 >/dev/null 2>&1; then python3 bench/peers_ddp.py --ranks 1 2; fi
