#!/usr/bin/env bash
# Installs the Debian packages metajit builds against, only when one is missing.
# Used by `make run`, `make test` and `make bench`; safe to run repeatedly.
set -euo pipefail
pkgs=(cmake g++ make pkg-config libboost-dev libboost-filesystem-dev nlohmann-json3-dev
      catch2 libxxhash-dev libcli11-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "metajit: installing missing packages: ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
