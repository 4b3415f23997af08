#!/usr/bin/env bash
# Builds ps-lite from a tree the user fetched, and the two programs the
# side-by-side runs: pslite_dense (this folder) and ps-lite's own
# tests/test_kv_app_benchmark, with the first-touch probe (first_touch.c)
# and the shared-memory floor probe (three_copies.c).
# Nothing is downloaded: ps-lite's own deps
# rules would fetch protobuf and ZeroMQ, so they are pointed at Debian's
# (libprotobuf-dev, protobuf-compiler, libzmq3-dev).
#
#   bench/vs-pslite/build.sh PSLITE [OUT]
#
# PSLITE is a ps-lite work tree or a git directory of one (it is cloned,
# never changed).  OUT defaults to /tmp/kudus-vs-pslite; the programs land
# in OUT/bin.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${1:?usage: build.sh PSLITE_TREE_OR_GIT_DIR [OUT]}
out=${2:-/tmp/kudus-vs-pslite}
for pkg in libprotobuf-dev protobuf-compiler libzmq3-dev g++; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'; then
        echo "build.sh: installing $pkg" >&2
        apt-get install -y -q "$pkg" >/dev/null
    fi
done
mkdir -p "$out/bin"
tree=$out/ps-lite
rm -rf "$tree"
if [ -f "$src/Makefile" ] && [ -d "$src/src" ]; then
    cp -a "$src" "$tree"
elif git --git-dir="$src" rev-parse --verify -q HEAD >/dev/null 2>&1 || git -C "$src" rev-parse -q HEAD >/dev/null 2>&1; then
    git clone -q "$src" "$tree"
else
    echo "build.sh: $src is neither a ps-lite tree nor its git directory" >&2
    exit 2
fi
commit=$(git -C "$tree" rev-parse --short HEAD 2>/dev/null || echo unknown)
flags=(DEPS_PATH=/usr PROTOC=/usr/bin/protoc ZMQ= PROTOBUF=)
make -C "$tree" ps "${flags[@]}" -j "${JOBS:-2}" >"$out/build.log" 2>&1 || {
    echo "build.sh: ps-lite did not build; see $out/build.log" >&2
    exit 1
}
make -C "$tree" tests/test_kv_app_benchmark "${flags[@]}" >>"$out/build.log" 2>&1 || {
    echo "build.sh: test_kv_app_benchmark did not build; see $out/build.log" >&2
    exit 1
}
cp "$tree/tests/test_kv_app_benchmark" "$out/bin/"
g++ -std=c++11 -O3 -msse2 -I"$tree/include" -I"$tree/src" "$here/pslite_dense.cc" \
    "$tree/build/libps.a" -lprotobuf-lite -lzmq -pthread -o "$out/bin/pslite_dense" \
    >>"$out/build.log" 2>&1 || {
    echo "build.sh: pslite_dense did not build; see $out/build.log" >&2
    exit 1
}
# The first-touch probe (see docs/performance.md, "Against ps-lite"): what
# a first write to fresh memory costs, which both sparse programs pay.
gcc -std=c11 -O2 -Wall -Wextra -Werror "$here/first_touch.c" -o "$out/bin/first_touch" \
    >>"$out/build.log" 2>&1 || {
    echo "build.sh: first_touch did not build; see $out/build.log" >&2
    exit 1
}
# The three-copies probe (docs/performance.md, "The shared-memory floor"):
# a shm push+pull's three copies with no messages, Kudus's floor there.
gcc -std=c11 -O2 -Wall -Wextra -Werror -pthread "$here/three_copies.c" -o "$out/bin/three_copies" \
    -lopenblas >>"$out/build.log" 2>&1 || {
    echo "build.sh: three_copies did not build; see $out/build.log" >&2
    exit 1
}
echo "$commit" >"$out/bin/PSLITE_COMMIT"
echo "build.sh: ps-lite $commit built; programs in $out/bin"
