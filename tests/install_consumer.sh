#!/usr/bin/env bash
# Installs the built metajit into a temporary prefix, checks that only the public headers were
# installed, then configures, builds and runs a separate project that finds it with
# find_package(metajit) and compiles the README's tour and every sample with -Werror.
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/metajit/metajit.h"
# include/ holds metajit/*.h, the public headers of the source tree, and nothing else.
installed=$(cd "$work/prefix/include" && find . -type f | sed 's|^\./||' | sort)
public=$(cd "$source_dir/include" && find . -type f | sed 's|^\./||' | sort)
if [ "$installed" != "$public" ]; then
  echo "installed include/ differs from the public headers:" >&2
  diff <(echo "$public") <(echo "$installed") >&2 || true
  exit 1
fi
test -x "$work/prefix/bin/metajit"
# A C++ block of the README as a program: its includes on top, the rest inside main().
# readme_program <awk regex of the line the block follows> <what it is> <output file>
readme_program() {
  local block
  block=$(awk -v start="$1" '$0 ~ start {s=1} s && /^```cpp/ {c=1; next} c && /^```/ {exit} c' \
          "$source_dir/README.md")
  [ -n "$block" ] || { echo "README.md: no C++ block after '$1'" >&2; exit 1; }
  {
    echo "// Generated from README.md's $2 by tests/install_consumer.sh."
    printf '#include <%s>\n' iostream string vector
    grep -E '^(#include|using namespace)' <<<"$block"
    echo "int main() {"
    grep -vE '^(#include|using namespace)' <<<"$block"
    echo "  return 0;"
    echo "}"
  } >"$3"
}
readme_program '^## A tour of the API' tour "$work/readme_tour.cc"
# The training snippet (under "A jit train step"), likewise: public headers only.
readme_program '^[*][*]A jit train step[.][*][*]' 'training snippet' "$work/readme_train.cc"
# The layers example (under "Layers"), likewise.
readme_program '^## Layers' 'layers example' "$work/readme_layers.cc"
cmake -S "$source_dir/tests/consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DMETAJIT_SOURCE_DIR="$source_dir" -DMETAJIT_README_TOUR="$work/readme_tour.cc" \
      -DMETAJIT_README_TRAIN="$work/readme_train.cc" -DMETAJIT_README_LAYERS="$work/readme_layers.cc" \
      -DCMAKE_BUILD_TYPE=Release >/dev/null
if ! cmake --build "$work/build" -j 2 >"$work/build.log" 2>&1; then
  cat "$work/build.log" >&2
  exit 1
fi
"$work/build/consumer"
"$work/build/readme_tour" >/dev/null
(cd "$work" && "$work/build/readme_layers" >/dev/null)  # it writes classifier.safetensors there
# The snippet trains on one batch: its loss must fall.
losses=$("$work/build/readme_train")
echo "README training snippet: $losses"
awk '$1 == "loss" && $4 + 0 < $2 + 0 {ok=1} END {exit !ok}' <<<"$losses" ||
  { echo "README training snippet: the loss did not fall: $losses" >&2; exit 1; }
# metajit::distributed, where it was installed: its program as a world of one, then on 2 ranks
# under mpirun (as root too: the two OMPI_ALLOW_RUN_AS_ROOT variables), and MPI loaded only by
# the programs that link it.
if compgen -G "$work/prefix/lib*/cmake/metajit/metajitDistributedTargets.cmake" >/dev/null; then
  [ -x "$work/build/consumer_distributed" ] ||
    { echo "metajit::distributed is installed but consumer_distributed was not built" >&2; exit 1; }
  "$work/build/consumer_distributed"
  mpirun=$(command -v mpirun || true)
  [ -n "$mpirun" ] || { echo "metajit::distributed is installed but mpirun is not found" >&2; exit 1; }
  out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
        OMPI_MCA_btl_vader_single_copy_mechanism=none \
        timeout 120 "$mpirun" --oversubscribe --bind-to none -np 2 "$work/build/consumer_distributed")
  echo "$out"
  [ "$(grep -c 'all_reduce sum 3 (expected 3)' <<<"$out")" -eq 2 ] ||
    { echo "consumer_distributed on 2 ranks: not both ranks summed to 3" >&2; exit 1; }
  loaded=$(ldd "$work/build/consumer")
  if grep -q "libmpi" <<<"$loaded"; then
    echo "consumer (metajit::metajit alone) loads MPI:" >&2
    grep libmpi <<<"$loaded" >&2
    exit 1
  fi
  loaded=$(ldd "$work/build/consumer_distributed")
  grep -q "libmpi" <<<"$loaded" ||
    { echo "consumer_distributed does not load libmpi" >&2; exit 1; }
  echo "metajit::distributed: consumer_distributed ran on 1 and 2 ranks; consumer loads no MPI"
fi
# Outside CMake: the tour built with g++ and pkg-config alone (metajit.pc).
pc=$(find "$work/prefix" -name metajit.pc)
[ -n "$pc" ] || { echo "no metajit.pc installed under $work/prefix" >&2; exit 1; }
flags=$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs metajit)
# shellcheck disable=SC2086  # the flags are words
g++ -O0 "$work/readme_tour.cc" -o "$work/tour_pkg_config" $flags
"$work/tour_pkg_config" >/dev/null
echo "pkg-config: the README tour built with: g++ readme_tour.cc $flags"
# The shared library (METAJIT_SHARED, on by default): the README tour linked with -lmetajit
# alone, and no internal symbol exported: every function, method or object of namespace metajit
# that it exports must be named in a public header (the last name before its arguments or
# template arguments; anonymous namespaces and lambdas are never public).
so=$(find "$work/prefix" -name libmetajit.so | head -1)
if [ -n "$so" ]; then
  libdir=$(dirname "$so")
  g++ -std=c++20 -O0 "$work/readme_tour.cc" -o "$work/tour_shared" -I"$work/prefix/include" \
    -L"$libdir" -lmetajit -Wl,-rpath,"$libdir"
  "$work/tour_shared" >/dev/null
  loaded=$(ldd "$work/tour_shared")  # not piped into grep -q: pipefail and SIGPIPE
  grep -q "libmetajit.so" <<<"$loaded" ||
    { echo "tour_shared does not load libmetajit.so" >&2; exit 1; }
  nm -DC --defined-only "$so" | cut -c20- | sort -u >"$work/all_exported"
  if grep -vE '^(metajit::|typeinfo for metajit::|typeinfo name for metajit::|vtable for metajit::)' \
       "$work/all_exported" >"$work/foreign"; then
    echo "libmetajit.so exports what is not metajit's (cmake/libmetajit.map):" >&2
    head -20 "$work/foreign" >&2
    exit 1
  fi
  grep '^metajit::' "$work/all_exported" >"$work/exported"
  count=$(wc -l <"$work/exported")
  [ "$count" -ge 100 ] || { echo "libmetajit.so exports $count metajit:: symbols" >&2; exit 1; }
  cat "$source_dir"/include/metajit/*.h >"$work/public_headers"
  bad=0
  while IFS= read -r sym; do
    case "$sym" in *"(anonymous namespace)"* | *"{lambda"*) echo "exported: $sym" >&2; bad=1; continue ;; esac
    # "metajit::Var::to_vector<float>() const" -> "to_vector"; "metajit::Error::~Error()" -> "Error"
    name=$(sed -E 's/\[abi:[a-z0-9]+\]//g; s/\(.*$//; s/<.*$//; s/.*:://; s/^~//' <<<"$sym")
    grep -qwF -- "$name" "$work/public_headers" || { echo "exported, not public: $sym" >&2; bad=1; }
  done <"$work/exported"
  [ "$bad" -eq 0 ] || exit 1
  echo "libmetajit.so: the README tour linked with -lmetajit; $count exported metajit:: symbols, each named in include/metajit/"
fi
echo "consumer: README tour and $(ls "$work/build" | grep -c '^sample_') samples built with -Werror"
"$work/prefix/bin/metajit" --version
