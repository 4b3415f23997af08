#!/usr/bin/env bash
# Build the libFuzzer harnesses with clang (ASan + UBSan) and run each for a
# bounded time on a copy of its seed corpus.  A crash fails the test; the
# reproducer is left in BUILD_DIR/fuzz/ and must become a regression test.
# Usage: run-fuzz.sh SOURCE_DIR BUILD_DIR SECONDS_PER_HARNESS
set -euo pipefail
src=$1
out=$2/fuzz
seconds=${3:-30}
mkdir -p "$out"
# The harnesses write their inputs to files under KD_FUZZ_DIR (in /dev/shm
# when it is there): one folder for the run, removed at its end.
scratch=$(mktemp -d /dev/shm/kd-fuzz-run-XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export KD_FUZZ_DIR=$scratch
flags=(-std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$src/include" -I"$src/include/kudus")
# The decoders live in the lower layers of common/ (docs/architecture.md).
for layer in base wire core; do
    flags+=(-I"$src/common/$layer")
done
declare -A sources=(
    [kd_msg]="$src/common/wire/kd_msg.c $src/common/wire/kd_half.c $src/common/wire/kd_bundle.c"
    [kd_dataset]="$src/common/core/kd_dataset.c"
    [kd_checkpoint]="$src/common/core/kd_checkpoint.c $src/common/base/kd_log.c"
    [kd_stream]="$src/common/wire/kd_stream.c $src/common/wire/kd_msg.c $src/common/wire/kd_half.c"
    [kd_libsvm]="$src/common/core/kd_libsvm.c"
)
declare -A libs=(
    [kd_msg]="libczmq libzmq msgpack"
    [kd_dataset]="zlib"
    [kd_checkpoint]="zlib"
    [kd_stream]="libczmq libzmq msgpack"
    [kd_libsvm]="zlib"
)
status=0
harnesses=(kd_msg kd_dataset kd_checkpoint kd_stream kd_libsvm)
for name in "${harnesses[@]}"; do
    bin="$out/fuzz_$name"
    # shellcheck disable=SC2086
    clang "${flags[@]}" ${sources[$name]} "$src/tests/fuzz/fuzz_$name.c" \
        $(pkg-config --cflags --libs ${libs[$name]}) -o "$bin"
    corpus="$out/corpus-$name"
    rm -rf "$corpus"
    cp -r "$src/tests/fuzz/corpus/$name" "$corpus"
    echo "fuzz: $name for ${seconds}s"
    if ! (cd "$out" && "$bin" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
              -rss_limit_mb=2048 -print_final_stats=1 "$corpus" 2>&1 | tail -12); then
        echo "fuzz: $name FAILED; reproducer in $out"
        status=1
    fi
done
[ $status -eq 0 ] && echo "fuzz: ${#harnesses[@]} harnesses, no crash"
exit $status
