#!/usr/bin/env bash
# Runs every libFuzzer target of a METAJIT_FUZZ build for SECONDS each (make fuzz; .ci/run).
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
failed=()
for name in "${targets[@]}"; do
  bin="$build/tests/fuzz/fuzz_$name"
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is missing (build with make fuzz)" >&2
    failed+=("$name")
    continue
  fi
  work="$build/fuzz-corpus/$name"
  artifacts="$build/fuzz-artifacts/$name"
  mkdir -p "$work" "$artifacts"
  log="$build/fuzz-$name.log"
  # Kernels of the graph target are plain g++ builds (tests/fuzz/fuzz_graph_eval.cc), in a
  # cache of this build's own.
  env -u METAJIT_CXXFLAGS METAJIT_CACHE_DIR="$build/fuzz-kernel-cache" \
    ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}" \
    "$bin" -max_total_time="$seconds" -timeout=60 -max_len=8192 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$work" "$source_dir/tests/fuzz/corpus/$name" >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  units=$(find "$work" -type f | wc -l)
  if [ $rc -eq 0 ]; then
    echo "fuzz: $name: ${execs:-?} executions in ${seconds}s, ${cov:-cov: ?}, corpus $units inputs"
  else
    echo "fuzz: $name: FAILED (exit $rc) after ${execs:-?} executions; the end of $log:" >&2
    tail -40 "$log" >&2
    failed+=("$name")
  fi
done
total=${#targets[@]}
echo "fuzz: $((total - ${#failed[@]})) passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
