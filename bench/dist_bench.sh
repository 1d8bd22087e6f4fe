#!/usr/bin/env bash
# `make bench-dist BUILD=build`: the distributed rows in one run (README "Distributed training"):
# metajit's all-reduce against MPI_Allreduce on 2 ranks (bench/dist_bench.cc), then the digits
# MLP's and the GPT's median step times on 1 rank and on 2 ranks sharing this machine's cores,
# then PyTorch DDP's (bench/peers_ddp.py) on the same models and per-rank batches.
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
# train_gpt's default model without dropout, 80 steps: the median of steps 41-80 (its ms/step).
gpt=("$build/samples/train_gpt" --steps 80 --dropout 0)
one_log=$("${gpt[@]}")
two_log=$("${mpi[@]}" -np 2 "${gpt[@]}" --distributed)
vocab=$(sed -n 's/.*vocabulary \([0-9]*\),.*/\1/p' <<<"$one_log")
read -r layers d_model heads context batch < <(sed -n \
  's/^model: \([0-9]*\) layers, d_model \([0-9]*\), \([0-9]*\) heads, context \([0-9]*\), batch \([0-9]*\).*/\1 \2 \3 \4 \5/p' \
  <<<"$one_log")
# The same 2 ranks with each collective run where it is in the plan (no overlap with the kernels).
in_order_log=$(METAJIT_DIST_OVERLAP=0 "${mpi[@]}" -np 2 "${gpt[@]}" --distributed)
echo "GPT step (L$layers D$d_model H$heads T$context, global batch $batch):" \
  "1 rank $(step_us <<<"$one_log") ms, 2 ranks $(step_us <<<"$two_log") ms ($((batch / 2)) windows each;" \
  "$(step_us <<<"$in_order_log") ms with METAJIT_DIST_OVERLAP=0)"
if command -v python3 >/dev/null 2>&1; then
  python3 bench/peers_ddp.py --ranks 1 2 --gpt "$vocab" "$layers" "$d_model" "$heads" "$context" "$batch"
fi
