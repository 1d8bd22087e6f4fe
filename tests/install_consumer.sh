#!/usr/bin/env bash
# Installs the built metajit into a temporary prefix, then configures, builds and runs a
# separate project that finds it with find_package(metajit).
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/metajit/metajit.h"
test -x "$work/prefix/bin/metajit"
cmake -S "$source_dir/tests/consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" -j 2 >/dev/null
"$work/build/consumer"
"$work/prefix/bin/metajit" --version
