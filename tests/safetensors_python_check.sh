#!/usr/bin/env bash
# CTest's entry to tests/safetensors_python_check.py: skipped (exit 77, with the reason) where
# there is no python3; the script itself skips when numpy or safetensors cannot be imported.
# Usage: safetensors_python_check.sh SAFETENSORS_TOOL WORK_DIR
set -uo pipefail
if ! command -v python3 >/dev/null 2>&1; then
  echo "skipped: no python3 on PATH (the check runs Python's safetensors package)"
  exit 77
fi
rm -rf "$2"
exec python3 "$(dirname "$0")/safetensors_python_check.py" "$1" "$2"
