#!/usr/bin/env bash
# make bench-remote: what the remote kernel cache costs and saves, on loopback (README "Sharing
# kernels across machines"). Starts its own redis-server (a Unix socket and a 127.0.0.1 port)
# and measures, as medians of REPEAT runs of tests/programs/many_kernels_program (N distinct
# kernels in one eval()):
#   - the eval() that gets N kernels: compiled, loaded from the local disk cache, fetched from
#     the remote (Unix socket, TCP) into an empty local cache; per kernel = total / N. These
#     caches start with what a machine remembers about its compiler (v1/toolchains/), so the
#     rows compare kernels, not a new machine's one-off probing and hashing of the compiler
#   - `metajit cache warm MANIFEST` of a new machine (nothing remembered): through the remote
#     vs compiling
#   bench/remote_cache.sh BUILD_DIR [N] [REPEAT]
set -euo pipefail
build=$(cd "$1" && pwd)
n=${2:-20}
repeat=${3:-5}
program=$build/tests/many_kernels_program
cli=$build/metajit
[ -x "$program" ] && [ -x "$cli" ] || { echo "build $build first (make build)"; exit 1; }
command -v redis-server >/dev/null || { echo "redis-server is not installed (make deps)"; exit 1; }

T=$(mktemp -d /tmp/metajit-bench-remote-XXXXXX)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill -9 "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$T"
}
trap cleanup EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --unixsocket "$T/redis.sock" --unixsocketperm 700 \
  --save "" --appendonly no --dir "$T" --maxmemory 1gb --maxmemory-policy allkeys-lru \
  > "$T/redis.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do redis-cli -s "$T/redis.sock" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
"$cli" remote keygen bench -o "$T/bench.key" > /dev/null
unix="redis+unix://$T/redis.sock"
tcp="redis://127.0.0.1:$port"
reader() { echo "METAJIT_REMOTE=$1 METAJIT_REMOTE_TRUSTED_KEYS=$T/bench.key.pub"; }
writer() { echo "$(reader "$1") METAJIT_REMOTE_MODE=readwrite METAJIT_REMOTE_SIGNING_KEY=$T/bench.key"; }

# eval_ms of one run: env ($1) and cache dir ($2), which starts with the remembered toolchain.
eval_ms() {
  local line
  if [ ! -d "$2" ]; then mkdir -p "$2/v1" && chmod -R 700 "$2" && cp -a "$T/seed/v1/toolchains" "$2/v1/"; fi
  line=$(env $1 METAJIT_CACHE_DIR="$2" "$program" "$n")
  echo "$line" | grep -q '^ok ' || { echo "run failed: $line" >&2; exit 1; }
  echo "$line" | sed -n 's/.*eval_ms=\([0-9.]*\).*/\1/p'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
row() { printf '%-44s %10.2f ms %10.3f ms/kernel\n' "$1" "$2" "$(awk -v t="$2" -v n="$n" 'BEGIN {print t / n}')"; }

# The remote filled once by a writer (its own compile is the first "compile" sample).
env $(writer "$unix") METAJIT_CACHE_DIR="$T/writer" "$program" "$n" > /dev/null
METAJIT_CACHE_DIR="$T/writer" METAJIT_RECORD="$T/kernels.json" "$program" "$n" > /dev/null
# What a machine remembers about its compiler (version, target, the binaries' digests).
env $(reader "$unix") METAJIT_CACHE_DIR="$T/seed" "$program" 1 > /dev/null

compile=(); disk=(); remote_unix=(); remote_tcp=(); warm_remote=(); warm_compile=()
for r in $(seq "$repeat"); do
  compile+=("$(eval_ms "" "$T/c$r")")
  disk+=("$(eval_ms "" "$T/c$r")")
  remote_unix+=("$(eval_ms "$(reader "$unix")" "$T/u$r")")
  remote_tcp+=("$(eval_ms "$(reader "$tcp")" "$T/t$r")")
  s=$(date +%s.%N); env $(reader "$tcp") "$cli" --cache-dir "$T/wr$r" cache warm "$T/kernels.json" > "$T/warm.out" 2>/dev/null
  e=$(date +%s.%N); grep -q "$n fetched from the remote" "$T/warm.out" || { cat "$T/warm.out"; exit 1; }
  warm_remote+=("$(awk -v s="$s" -v e="$e" 'BEGIN {print (e - s) * 1000}')")
  s=$(date +%s.%N); "$cli" --cache-dir "$T/wc$r" cache warm "$T/kernels.json" > /dev/null 2>&1
  e=$(date +%s.%N)
  warm_compile+=("$(awk -v s="$s" -v e="$e" 'BEGIN {print (e - s) * 1000}')")
done

echo "metajit remote cache, $n kernels, median of $repeat runs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), METAJIT_JOBS=${METAJIT_JOBS:-$(nproc)})"
row "eval(): compile (empty caches, no remote)" "$(printf '%s\n' "${compile[@]}" | median)"
row "eval(): local disk hit" "$(printf '%s\n' "${disk[@]}" | median)"
row "eval(): remote hit, Unix socket" "$(printf '%s\n' "${remote_unix[@]}" | median)"
row "eval(): remote hit, TCP 127.0.0.1" "$(printf '%s\n' "${remote_tcp[@]}" | median)"
row "cache warm of a new machine: via remote" "$(printf '%s\n' "${warm_remote[@]}" | median)"
row "cache warm of a new machine: compiling" "$(printf '%s\n' "${warm_compile[@]}" | median)"
