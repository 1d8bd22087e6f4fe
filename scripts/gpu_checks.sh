#!/bin/bash
# The GPU checks in a few minutes: every test case of the gpu-labelled suites as its own job,
# many at once, then `make bench-cuda`. CTest runs each cuda:* suite as one process, whose
# kernels nvcc compiles one after another (a suite can take many minutes); here the cases of
# all suites share the machine's cores and the kernel cache, under one deadline.
#
#   scripts/gpu_checks.sh bundle DIR   on the build machine: copies the test programs, the
#                                      benchmark and the CLI of build/ (stripped) and the shared
#                                      libraries they need into DIR, for a GPU machine that has
#                                      the CUDA toolkit and g++ but not the development packages
#   scripts/gpu_checks.sh run [DIR]    on the GPU machine, in the checkout's root: runs them
#                                      (from DIR, else from build/) and prints a summary
#
# Environment for `run`: GPU_CHECK_DEADLINE (seconds for all cases, 300), GPU_CHECK_JOBS
# (cases at once, nproc), GPU_CHECK_SUITES (default: the suites CMake registers as cuda:*),
# GPU_CHECK_OUT (logs and bench JSON, /tmp/gpu_checks), GPU_CHECK_BENCH_ARGS (e.g. --quick),
# GPU_CHECK_BENCH_TIMEOUT (seconds for the benchmark, 900; it runs before the deadline starts;
# 0 skips it), GPU_CHECK_FILTER (an extended regular expression: only the cases whose
# "suite<TAB>name" line matches).
# METAJIT_DIFF_GRAPHS and
# METAJIT_GRAD_GRAPHS default to 10 and 8 random graphs per batch (the suites' own defaults
# take far longer with nvcc). Exit status: 0 when every case passed or was skipped.
#
# The test programs name their checkout by the absolute path they were built in
# (METAJIT_TEST_SOURCE_DIR, the test cache): `run` links that path to this checkout when they
# differ and it is free.
set -u
SUITES_DEFAULT="test_differential test_autograd_random test_cuda_codegen test_train \
test_ops_correctness test_autograd test_extras test_cuda_runtime test_dynamic_shapes test_random"

bundle() {
  local dir=$1
  mkdir -p "$dir/bin" "$dir/lib"
  for t in $SUITES_DEFAULT; do strip -o "$dir/bin/$t" "build/tests/$t" || return 1; done
  strip -o "$dir/bin/metajit_cuda_bench" build/metajit_cuda_bench || return 1
  strip -o "$dir/bin/metajit" build/metajit || return 1
  # Libraries from the development packages; the C and C++ runtimes, the loader and libgomp
  # come from the GPU machine (its g++ builds the host side of the kernels loaded beside them).
  ldd "$dir"/bin/* | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt|libgomp|ld-linux)[.-]' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  git rev-parse --short HEAD > "$dir/BUILD"
  du -sh "$dir"
}

run_case() {  # "suite<TAB>case name"
  local suite=${1%%$'\t'*} name=${1#*$'\t'}
  local left=$((END - $(date +%s)))
  if [ "$left" -lt 5 ]; then echo "NOTRUN $suite :: $name"; return; fi
  # Catch2 v2 reads ',' '[' ']' and '\' in a name as test-spec syntax.
  local spec log rc t0=$(date +%s)
  spec=$(printf '%s' "$name" | sed 's/[][,\\]/\\&/g')
  log=$LOGS/$suite.$(printf '%s' "$name" | md5sum | cut -c1-8).txt
  if [ "$suite" = test_cuda_codegen ]; then  # its label (cuda-compile) runs on the host device
    env -u METAJIT_DEVICE -u METAJIT_CUDA_EMULATE timeout "$left" "$BIN/$suite" "$spec" > "$log" 2>&1
  else
    timeout "$left" "$BIN/$suite" "$spec" > "$log" 2>&1
  fi
  rc=$?
  local state=PASS
  case $rc in 0) ;; 77) state=SKIP ;; 124) state=TIMEOUT ;; *) state="FAIL($rc)" ;; esac
  echo "$state $(($(date +%s) - t0))s $suite :: $name" | tee -a "$log"
}

run() {
  local from=${1:-}
  BIN=build/tests
  local cli=build/metajit bench=build/metajit_cuda_bench
  if [ -n "$from" ]; then
    BIN=$from/bin cli=$from/bin/metajit bench=$from/bin/metajit_cuda_bench
    export LD_LIBRARY_PATH=$from/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  # The CLI the tests start: theirs names build/metajit of the tree they were built in.
  METAJIT_CLI=$(realpath "$cli") && export METAJIT_CLI
  local built_in
  built_in=$(strings "$BIN/test_cuda_runtime" | grep -m1 -o '^/.*/test-cache$' | sed 's|/build/test-cache$||')
  if [ -n "$built_in" ] && [ "$built_in" != "$PWD" ] && [ ! -e "$built_in" ]; then
    mkdir -p "$(dirname "$built_in")" && ln -s "$PWD" "$built_in"
  fi
  mkdir -p build/test-cache
  local out=${GPU_CHECK_OUT:-/tmp/gpu_checks}
  LOGS=$out/logs
  rm -rf "$LOGS" && mkdir -p "$LOGS"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$cli" doctor | grep -E 'nvcc|gpu|compiler'
  echo "== bench-cuda"
  local bench_limit=${GPU_CHECK_BENCH_TIMEOUT:-900}
  if [ "$bench_limit" != 0 ]; then
    METAJIT_CACHE_DIR=$PWD/build/test-cache timeout "$bench_limit" "$bench" \
      ${GPU_CHECK_BENCH_ARGS:-} --json "$out/cuda_results.json"
    echo "bench-cuda exit status: $?"
  fi
  export METAJIT_DEVICE=cuda METAJIT_DIFF_GRAPHS=${METAJIT_DIFF_GRAPHS:-10}
  export METAJIT_GRAD_GRAPHS=${METAJIT_GRAD_GRAPHS:-8} METAJIT_JOBS=1
  local s
  for s in ${GPU_CHECK_SUITES:-$SUITES_DEFAULT}; do
    local filter=""
    case "$s" in test_train | test_random) filter="[cuda-emu]" ;; esac  # as CTest's cuda:*
    "$BIN/$s" $filter --list-test-names-only | grep . | sed "s/^/$s\t/"
  done | grep -E -- "${GPU_CHECK_FILTER:-.}" > "$LOGS/cases"
  END=$(($(date +%s) + ${GPU_CHECK_DEADLINE:-300}))
  export -f run_case
  export BIN LOGS END
  echo "== $(wc -l < "$LOGS/cases") test cases, ${GPU_CHECK_JOBS:-$(nproc)} at once"
  tr '\n' '\0' < "$LOGS/cases" |
    xargs -0 -P "${GPU_CHECK_JOBS:-$(nproc)}" -I{} bash -c 'run_case "$1"' _ {} > "$LOGS/results"
  echo "passed: $(grep -c ^PASS "$LOGS/results"), skipped: $(grep -c ^SKIP "$LOGS/results")"
  grep -Ev '^(PASS|SKIP)' "$LOGS/results" && return 1
  return 0
}

case ${1:-} in
  bundle) bundle "${2:?scripts/gpu_checks.sh bundle DIR}" ;;
  run) run "${2:-}" ;;
  *) sed -n '2,24p' "$0" >&2; exit 2 ;;
esac
