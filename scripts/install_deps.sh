#!/usr/bin/env bash
# Installs the Debian packages metajit builds against, only when one is missing.
# Used by `make run`, `make test` and `make bench`; safe to run repeatedly.
set -euo pipefail
source "$(dirname "$0")/apt_packages.sh"
apt_install_missing metajit required cmake g++ make pkg-config libboost-dev \
  libboost-filesystem-dev nlohmann-json3-dev catch2 libxxhash-dev libcli11-dev \
  zlib1g-dev libhiredis-dev libsodium-dev libzstd-dev redis-server
# OpenMPI for the distributed layer (metajit::distributed) and the mpirun its tests start.
apt_install_missing metajit required libopenmpi-dev openmpi-bin
