#!/usr/bin/env bash
# Installs the Debian packages `make bench` compares metajit against (Halide, Eigen, OpenBLAS,
# Google Benchmark), only when one is missing. `make run` and `make test` never call this.
# Safe to run repeatedly. Set METAJIT_BENCH_NO_INSTALL=1 to skip (the bench then builds
# without whichever peer is missing and says so).
set -euo pipefail
[ "${METAJIT_BENCH_NO_INSTALL:-0}" = "1" ] && exit 0
source "$(dirname "$0")/apt_packages.sh"
# A peer that will not install is not fatal: bench/CMakeLists.txt builds without it.
apt_install_missing "metajit bench" optional libhalide14-0-dev libeigen3-dev libopenblas-dev \
  libbenchmark-dev

# The Python peers (bench/peers.py): numpy, PyTorch, JAX from PyPI when missing. A peer that
# will not install is not fatal: peers.py reports it as skipped, with the reason.
if command -v python3 >/dev/null 2>&1; then
  for mod in numpy torch jax; do
    if ! python3 -c "import $mod" >/dev/null 2>&1; then
      echo "metajit bench: installing the Python peer $mod from PyPI" >&2
      python3 -m pip install -q "$mod" ||
        echo "metajit bench: could not install $mod; its rows will say skipped" >&2
    fi
  done
fi
