#!/usr/bin/env bash
# The layers of docs/architecture.md, as the build enforces them: compiled with a layer's
# include directory (build/layers/<layer>/), an include of the layer itself or a lower one
# works, and an include of a higher layer fails with "No such file or directory".
# Usage: layering_check.sh <c++ compiler> <build dir>
set -uo pipefail
cxx=$1
layers=$(cd "$2" && pwd)/layers
failures=0

# From an empty directory: a quoted include looks in the including file's directory first.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
compiles() {  # <layer> <include line>
  (cd "$scratch" && printf '%s\n' "$2" | "$cxx" -std=c++20 -fsyntax-only -I "$layers/$1" -x c++ - 2>&1)
}
expect_ok() {
  if ! out=$(compiles "$1" "$2"); then
    echo "FAIL: layer $1 cannot include what it may: $2"; echo "$out" | head -5
    failures=$((failures + 1))
  fi
}
expect_refused() {
  if out=$(compiles "$1" "$2"); then
    echo "FAIL: layer $1 includes a higher layer without error: $2"
    failures=$((failures + 1))
  elif ! grep -q "No such file or directory" <<<"$out"; then
    echo "FAIL: layer $1, $2: failed for another reason:"; echo "$out" | head -5
    failures=$((failures + 1))
  fi
}

expect_ok base '#include "base/buffer.h"'
expect_ok base '#include <metajit/device.h>'
expect_refused base '#include "meta_ops/node.h"'
expect_refused base '#include <metajit/var.h>'

expect_ok graph '#include "meta_ops/ops.h"'
expect_refused graph '#include "codegen/graph.h"'
expect_refused graph '#include "runtime/residency.h"'
expect_refused graph '#include <metajit/eval.h>'

expect_ok codegen '#include "codegen/pipeline.h"'
expect_refused codegen '#include "cache/cache_store.h"'
expect_refused codegen '#include "runtime/kernel_library.h"'
expect_refused codegen '#include <metajit/runtime.h>'

expect_ok cache '#include "cache/manifest.h"'
expect_refused cache '#include "meta_ops/node.h"'
expect_refused cache '#include "codegen/kernel_key.h"'
expect_refused cache '#include "runtime/toolchain.h"'

expect_ok runtime '#include "runtime/kernel_library.h"'
expect_refused runtime '#include "api/program_cache.h"'
expect_refused runtime '#include <metajit/jit.h>'

expect_ok autograd '#include "autograd/backward_rules.h"'
expect_ok autograd '#include <metajit/autograd.h>'
expect_refused autograd '#include "codegen/graph.h"'
expect_refused autograd '#include "runtime/kernel_library.h"'
expect_refused autograd '#include <metajit/eval.h>'

expect_ok api '#include "api/program_cache.h"'
expect_ok api '#include "autograd/scatter_as_gather.h"'
expect_ok api '#include <metajit/jit.h>'
expect_refused api '#include <metajit/train.h>'
expect_refused api '#include "train/optimizer_core.h"'

expect_ok nn '#include "nn/safetensors_format.h"'
expect_ok nn '#include <metajit/nn.h>'
expect_ok nn '#include "api/program_cache.h"'
expect_refused nn '#include <metajit/train.h>'
expect_refused nn '#include "train/optimizer_core.h"'
expect_refused api '#include <metajit/nn.h>'
expect_refused api '#include "nn/safetensors_format.h"'

expect_ok train '#include "train/optimizer_core.h"'
expect_ok train '#include <metajit/nn.h>'
expect_ok train '#include <metajit/metajit.h>'
expect_ok train '#include "api/program_cache.h"'

if [ "$failures" -ne 0 ]; then
  echo "$failures layering check(s) failed"
  exit 1
fi
echo "layering: every layer sees itself and what is below it, and nothing above"
