#!/usr/bin/env bash
# Installs the Python packages `make test` checks metajit against, only when one is missing:
# numpy and safetensors from PyPI, for the test safetensors_python (Python's safetensors reads
# metajit's files and writes files metajit reads; tests/safetensors_python_check.py). Best
# effort: without python3, pip or a network the test reports itself skipped with the reason,
# never passed. Set METAJIT_TEST_NO_INSTALL=1 to skip. Safe to run repeatedly.
set -uo pipefail
[ "${METAJIT_TEST_NO_INSTALL:-0}" = "1" ] && exit 0
command -v python3 >/dev/null 2>&1 || exit 0
for mod in numpy safetensors; do
  if ! python3 -c "import $mod" >/dev/null 2>&1; then
    echo "metajit test: installing the Python package $mod from PyPI" >&2
    python3 -m pip install -q "$mod" ||
      echo "metajit test: could not install $mod; safetensors_python will say skipped" >&2
  fi
done
exit 0
