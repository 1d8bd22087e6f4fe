#!/usr/bin/env bash
# Runs every libFuzzer target of a METAJIT_FUZZ build for SECONDS each (make fuzz; .ci/run),
# FUZZ_JOBS of them at once (one per core unless set).
#   scripts/run_fuzzers.sh BUILD_DIR SECONDS [TARGET...]
# Each target grows a working corpus in BUILD_DIR/fuzz-corpus/<name>/, starting from the seeds
# in tests/fuzz/corpus/<name>/ (never written to). A crash, a leak or a timeout stops that
# target, leaves the input in BUILD_DIR/fuzz-artifacts/<name>/ and fails the run: add the input
# to tests/fuzz/corpus/<name>/ with the fix, and fuzz-replay:<name> keeps it fixed.
set -uo pipefail
build=$1
seconds=$2
shift 2
source_dir=$(cd "$(dirname "$0")/.." && pwd)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then  # every target the build has (tests/fuzz/CMakeLists.txt)
  for bin in "$build"/tests/fuzz/fuzz_*; do
    [ -x "$bin" ] && targets+=("${bin##*/fuzz_}")
  done
fi
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz: no fuzz targets in $build/tests/fuzz (build with make fuzz)" >&2
  exit 1
fi
# One target: its summary line goes to $build/fuzz-$name.result, its failure to stderr.
fuzz_one() {
  local name=$1 bin="$build/tests/fuzz/fuzz_$1"
  local work="$build/fuzz-corpus/$name" artifacts="$build/fuzz-artifacts/$name"
  local log="$build/fuzz-$name.log" result="$build/fuzz-$name.result"
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is missing (build with make fuzz)" >"$result"
    return 1
  fi
  mkdir -p "$work" "$artifacts"
  # Kernels of the graph target are plain g++ builds (tests/fuzz/fuzz_graph_eval.cc), in a
  # cache of this build's own.
  env -u METAJIT_CXXFLAGS METAJIT_CACHE_DIR="$build/fuzz-kernel-cache" \
    ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
    "$bin" -max_total_time="$seconds" -timeout=60 -max_len=8192 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$work" "$source_dir/tests/fuzz/corpus/$name" >"$log" 2>&1
  local rc=$?
  local execs cov units
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  units=$(find "$work" -type f | wc -l)
  if [ $rc -eq 0 ]; then
    echo "fuzz: $name: ${execs:-?} executions in ${seconds}s, ${cov:-cov: ?}, corpus $units inputs" \
      >"$result"
    return 0
  fi
  { echo "fuzz: $name: FAILED (exit $rc) after ${execs:-?} executions; the end of $log:"
    tail -40 "$log"; } >"$result"
  return 1
}

# FUZZ_JOBS targets at a time (default: one per core); each target is one process.
jobs=${FUZZ_JOBS:-$(nproc)}
failed=()
running=0
for name in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  fuzz_one "$name" &
  running=$((running + 1))
done
wait
for name in "${targets[@]}"; do
  result="$build/fuzz-$name.result"
  if [ -f "$result" ] && head -1 "$result" | grep -q ' executions in '; then
    cat "$result"
  else
    cat "$result" >&2 2>/dev/null || echo "fuzz: $name: no result" >&2
    failed+=("$name")
  fi
  rm -f "$result"
done
total=${#targets[@]}
echo "fuzz: $((total - ${#failed[@]})) passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
