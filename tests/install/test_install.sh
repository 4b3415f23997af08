#!/usr/bin/env bash
# libkudus installs and other programs link against it: install into a
# temporary prefix, build examples/c_worker out of tree with pkg-config and
# with find_package (kudus), then train with two of those workers against a
# cluster started by the installed `kudus local --external-workers 2`.
#
#   tests/install/test_install.sh SOURCE_DIR BUILD_DIR [BASE_PORT]   (default: random)
set -euo pipefail
src=$1
bin=$2
# A base the other suites cannot take while this one runs (reserved as
# kd_test_base_port reserves theirs, until this shell ends).
port=${3:-$(python3 "$(dirname "$0")/../python/reserve_base.py" $$)}
tmp=$(mktemp -d)
# What the runs write to TMPDIR (a killed kudus local's summary) goes with $tmp.
export TMPDIR=$tmp
pids=()
cleanup () {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    [ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
fail () { echo "test_install: FAIL: $*" >&2; exit 1; }

prefix=$tmp/prefix
cmake --install "$bin" --prefix "$prefix" >/dev/null
for f in bin/kudus bin/kudus-worker include/kudus/kudus.h include/kudus/kd_client.h; do
    [ -e "$prefix/$f" ] || fail "cmake --install did not install $f"
done
# Internal headers stay out of the public API.
[ ! -e "$prefix/include/kudus/kd_msg.h" ] || fail "internal header kd_msg.h was installed"
pc=$(find "$prefix" -name kudus.pc | head -1)
[ -n "$pc" ] || fail "kudus.pc not installed"
libdir=$(dirname "$(dirname "$pc")")
soname=$(objdump -p "$libdir/libkudus.so" | awk '/SONAME/ {print $2}')
[ "$soname" = "libkudus.so.0" ] || fail "SONAME is '$soname', expected libkudus.so.0"
[ -e "$libdir/libkudus.a" ] || fail "static library not installed"
export PKG_CONFIG_PATH=$libdir/pkgconfig

# A sanitizer build's library needs its runtime first in the program.
san=""
deps=$(ldd "$libdir/libkudus.so")      # not piped into grep -q: pipefail and SIGPIPE
if [[ $deps == *libasan* ]]; then
    san="-fsanitize=address,undefined"
fi
# Out of tree with pkg-config.
# shellcheck disable=SC2046,SC2086
cc -Wall -Wextra -Werror $san -o "$tmp/c_worker" "$src/examples/c_worker/worker.c" \
    $(pkg-config --cflags --libs kudus) -lm
# A program may not reach an internal symbol through the shared library.
exported=$(nm -D --defined-only "$libdir/libkudus.so")
[[ $exported == *" kd_client_pull"* ]] || fail "libkudus.so does not export kd_client_pull"
if [[ $exported == *" kd_msg_new"* ]]; then
    fail "libkudus.so exports internal symbols"
fi
# And with CMake's find_package.
cmake -S "$src/examples/c_worker" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_FLAGS="$san" >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
[ -x "$tmp/cmake-build/c_worker" ] || fail "find_package (kudus) build made no c_worker"

export LD_LIBRARY_PATH=$libdir
deps=$(ldd "$tmp/c_worker")
[[ $deps == *"$libdir/libkudus.so.0"* ]] || fail "c_worker does not load the installed libkudus"

# Train: two external C workers, nothing built in.
summary=$tmp/summary.json
# A worker that never registers would leave the cluster waiting: cap it.
timeout 240 "$prefix/bin/kudus" local --workers 0 --external-workers 2 --model softmax --shards 2 \
    --target-accuracy 0.78 --max-seconds 120 --base-port "$port" --quiet true \
    --summary "$summary" > "$tmp/local.log" 2>&1 &
local_pid=$!
pids+=("$local_pid")
for i in 0 1; do
    "$tmp/c_worker" "tcp://127.0.0.1:$port" "c-worker-$i" /usr/share/datasets/fashion-mnist \
        "tcp://127.0.0.1:$((port + 1))" > "$tmp/worker-$i.log" 2>&1 &
    pids+=("$!")
done
rc=0
wait "$local_pid" || rc=$?
for i in 0 1; do
    wait "${pids[$((i + 1))]}" || fail "c_worker $i exited with an error: $(tail -5 "$tmp/worker-$i.log")"
done
[ $rc -eq 0 ] || fail "kudus local exited $rc: $(tail -20 "$tmp/local.log")"
python3 - "$summary" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
acc, reason = s["stop_accuracy"], s["stop_reason"]
workers = s["per_worker"]
print(f"test_install: stop_reason={reason} stop_accuracy={acc} workers={len(workers)}")
assert reason == "target-accuracy", f"stopped by {reason}, not by reaching 0.78"
assert acc >= 0.78, acc
assert len(workers) == 2 and all(w["applied_samples"] > 0 for w in workers), workers
PY
grep -h "c_worker: rank" "$tmp"/worker-*.log

# The same workers with a model of their own (--model external): they
# declare its layout, seed it with kd_client_init_params, and report their
# test accuracy themselves, since the monitor evaluates built-in models only.
summary=$tmp/summary-external.json
timeout 240 "$prefix/bin/kudus" local --workers 0 --external-workers 2 --model external --shards 2 \
    --epochs 3 --max-seconds 120 --base-port "$port" --quiet true \
    --summary "$summary" > "$tmp/local-external.log" 2>&1 &
local_pid=$!
pids=("$local_pid")
for i in 0 1; do
    "$tmp/c_worker" "tcp://127.0.0.1:$port" "c-ext-$i" /usr/share/datasets/fashion-mnist \
        > "$tmp/ext-$i.log" 2>&1 &
    pids+=("$!")
done
rc=0
wait "$local_pid" || rc=$?
for i in 0 1; do
    wait "${pids[$((i + 1))]}" || fail "external c_worker $i exited with an error: $(tail -5 "$tmp/ext-$i.log")"
done
[ $rc -eq 0 ] || fail "kudus local --model external exited $rc: $(tail -20 "$tmp/local-external.log")"
# The shards serve no pull before INIT, so training at all shows it came.
python3 - "$summary" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["model"] == "external", s["model"]
assert s["samples"] >= 3 * 60000, s["samples"]
PY
for i in 0 1; do
    acc=$(awk '/c_worker: test accuracy/ {print $4}' "$tmp/ext-$i.log")
    echo "test_install: external model, worker $i: test accuracy $acc"
    python3 -c "import sys; a = float(sys.argv[1]); sys.exit(0 if a >= 0.78 else 1)" "${acc:-0}" \
        || fail "external model: worker $i reached test accuracy ${acc:-none}, expected >= 0.78"
done
echo "test_install: OK"
