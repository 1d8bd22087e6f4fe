#!/usr/bin/env bash
# README "Sharing kernels across machines", step by step, against a local redis-server: the
# redis.conf lines and the shell blocks of that section are taken from README.md as they stand
# (paths, host and app name substituted), so the README is what is tested.
#   remote_readme_steps.sh SOURCE_DIR   (env: METAJIT_CLI, METAJIT_TEST_PROGRAMS)
set -euo pipefail
src=$1
readme=$src/README.md
command -v redis-server >/dev/null || { echo "skipped: redis-server is not installed"; exit 77; }
command -v redis-cli >/dev/null || { echo "skipped: redis-cli is not installed"; exit 77; }

T=$(mktemp -d /tmp/metajit-readme-XXXXXX)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then
    kill -9 "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$T"
}
trap cleanup EXIT

# The section, and its fenced blocks (indented inside list items) one file each.
awk '/^## Sharing kernels across machines/{on=1; next} on && /^## /{exit} on' "$readme" > "$T/section.md"
awk -v dir="$T" '
  /^ *```(sh|conf)$/ { n++; kind=$0; sub(/^ *```/, "", kind); file=dir "/block" n "." kind; inblock=1; next }
  /^ *```$/ && inblock { inblock=0; next }
  inblock { sub(/^   /, ""); print > file }' "$T/section.md"
conf=$(ls "$T"/block*.conf)
mapfile -t shells < <(ls "$T"/block*.sh | sort -V)
[ "${#shells[@]}" -eq 3 ] || { echo "expected 3 shell blocks in the README section, found ${#shells[@]}"; exit 1; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
writer_pw=w-$RANDOM$RANDOM
reader_pw=r-$RANDOM$RANDOM
mkdir -p "$T/etc" "$T/bin" "$T/redis"
printf '%s\n' "$writer_pw" > "$T/etc/writer-password"
printf '%s\n' "$reader_pw" > "$T/etc/reader-password"
chmod 600 "$T/etc/"*-password
sed -e "s/WRITER-PASSWORD/$writer_pw/; s/READER-PASSWORD/$reader_pw/" "$conf" > "$T/redis/redis.conf"
cat >> "$T/redis/redis.conf" <<CONF
port $port
bind 127.0.0.1
save ""
appendonly no
dir $T/redis
CONF
redis-server "$T/redis/redis.conf" > "$T/redis/log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  redis-cli -p "$port" --user metajit-reader --pass "$reader_pw" --no-auth-warning ping 2>/dev/null | grep -q PONG && break
  sleep 0.1
done

# What each step names, here.
ln -s "$METAJIT_CLI" "$T/bin/metajit"
export PATH="$T/bin:$PATH"
app="$METAJIT_TEST_PROGRAMS/many_kernels_program"
adapt() {
  sed -e "s#/etc/metajit#$T/etc#g" -e "s#cache.internal:6379#127.0.0.1:$port#g" \
      -e "s#\./my_app#\"$app\" 20#g" -e "s#kernels.json#$T/kernels.json#g" "$1"
}
# A manifest of the app's kernels, recorded on a machine without the remote.
METAJIT_CACHE_DIR=$T/record METAJIT_RECORD=$T/kernels.json "$app" 20 > /dev/null

echo "== step 2: a signing key"
(cd "$T" && bash -euo pipefail <(adapt "${shells[0]}"))
[ "$(stat -c %a "$T/etc/ci-2026.key")" = 600 ] || { echo "secret key is not mode 0600"; exit 1; }

echo "== step 3: the writer fills the remote"
out=$(cd "$T" && METAJIT_CACHE_DIR=$T/writer bash -euo pipefail <(adapt "${shells[1]}") 2>&1)
echo "$out"
echo "$out" | grep -q "reachable:  yes" || { echo "writer: remote not reachable"; exit 1; }
echo "$out" | grep -q "20 pushed to the remote cache, 0 not" || { echo "warm --push did not push 20"; exit 1; }
echo "$out" | grep -q "pushed 20 of 20 kernels" || { echo "cache push --all did not push 20"; exit 1; }

echo "== step 4: a reader gets every kernel from the remote"
out=$(cd "$T" && METAJIT_CACHE_DIR=$T/reader bash -euo pipefail <(adapt "${shells[2]}") 2>&1)
echo "$out"
echo "$out" | grep -Eq "ok  +remote" || { echo "doctor: no ok remote line"; exit 1; }
echo "$out" | grep -q "ok compiled=0 .*remote_hits=20 " || { echo "reader compiled or missed"; exit 1; }

echo "== the reader's user cannot write (the writer's uploads above show it can)"
if redis-cli -p "$port" --user metajit-reader --pass "$reader_pw" --no-auth-warning \
     set metajit:default:kernel:x y | grep -q OK; then
  echo "the reader's ACL user could write"; exit 1
fi
redis-cli -p "$port" --user metajit-reader --pass "$reader_pw" --no-auth-warning \
  set metajit:default:kernel:x y | grep -q NOPERM || { echo "expected NOPERM for the reader"; exit 1; }
echo "ok: the README's steps work as written"
