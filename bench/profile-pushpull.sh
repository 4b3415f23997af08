#!/usr/bin/env bash
# Where a cell of `kudus bench pushpull` spends its CPU, thread by thread
# (issue 36 §2): the whole machine is sampled with perf's cpu-clock event
# (hardware counters are not offered in this VM) while one cell runs, and
# the samples are split by thread (perf's "pid" is a thread id: the
# lowest "kudus" one is the bench client, later ones its echo servers;
# each process's ZeroMQ I/O thread is "ZMQbg/IO/0") and, inside each
# process name, by shared object and symbol.  Idle time shows as
# "swapper": a cell whose cores idle is bound by latency, not by CPU.
#
#   bench/profile-pushpull.sh [SIZE:SHARDS:INFLIGHT ...]
#                      default: 1M:1:1 1M:2:4 1M:2:8 16M:1:1
#
# Writes OUT/CELL.txt (default OUT=/tmp/kudus-profiles) and prints the
# per-thread table of each cell.  Run it on a quiet machine: -a samples
# everything that runs.  Environment: KUDUS (default build/kudus),
# REPEAT (default 3), FREQ (samples a second per core, default 499: perf's
# own cost in this VM slows the cell by up to 3x at 2999 with call graphs),
# CALLGRAPH (1: record call graphs too; default 0).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
kudus=${KUDUS:-$here/build/kudus}
out=${OUT:-/tmp/kudus-profiles}
repeat=${REPEAT:-3}
freq=${FREQ:-499}
g=()
[ "${CALLGRAPH:-0}" = 1 ] && g=(-g)
command -v perf > /dev/null || {
    echo "profile-pushpull: perf is missing (apt-get install -y linux-perf)" >&2
    exit 2
}
[ -x "$kudus" ] || { echo "profile-pushpull: no $kudus (make build)" >&2; exit 2; }
cells=("$@")
[ ${#cells[@]} -gt 0 ] || cells=(1M:1:1 1M:2:4 1M:2:8 16M:1:1)
mkdir -p "$out"
data=
# perf's data file is large: never left behind, even by a failed run.
trap 'rm -f "$data"' EXIT
for cell in "${cells[@]}"; do
    IFS=: read -r size shards inflight <<< "$cell"
    if [ -z "$size" ] || [ -z "$shards" ] || [ -z "$inflight" ]; then
        echo "profile-pushpull: a cell is SIZE:SHARDS:INFLIGHT, not '$cell'" >&2
        exit 2
    fi
    name="$size-${shards}x$inflight"
    data="$out/$name.data"
    perf record -q -a "${g[@]}" -e cpu-clock -F "$freq" -o "$data" -- \
        "$kudus" bench pushpull --sizes "$size" --shards "$shards" --inflight "$inflight" \
        --repeat "$repeat" --json true > "$out/$name.json" 2> "$out/$name.log"
    {
        echo "# cell $name: $(tail -n 1 "$out/$name.json" | head -c 400)"
        echo "## CPU by process and thread (share of all samples, both cores)"
        perf report -i "$data" --no-children --sort pid --stdio -g none 2> /dev/null \
            | grep -v '^#' | grep -v '^$' | head -n 25 || true
        echo "## threads of each process (pid/tid comm)"
        perf script -i "$data" -F pid,tid,comm 2> /dev/null | sort -u | head -n 60 || true
        echo "## the busiest threads, each by shared object and symbol"
        for tid in $(perf report -i "$data" --no-children --sort pid --stdio -g none 2> /dev/null \
                         | awk '$1 ~ /%$/ && $2 !~ /^0:/ { split ($2, t, ":"); print t [1] }' | head -n 8); do
            echo "### thread $tid"
            perf report -i "$data" --no-children --tid "$tid" --sort dso,sym --stdio -g none 2> /dev/null \
                | grep -v '^#' | grep -v '^$' | head -n 12 || true
        done
        echo "## by process and shared object"
        perf report -i "$data" --no-children --sort comm,dso --stdio -g none 2> /dev/null \
            | grep -v '^#' | grep -v '^$' | head -n 30 || true
        echo "## the top symbols"
        perf report -i "$data" --no-children --sort comm,sym --stdio -g none 2> /dev/null \
            | grep -v '^#' | grep -v '^$' | head -n 50 || true
    } > "$out/$name.txt"
    sed -n '1,30p' "$out/$name.txt"
    rm -f "$data"
done
echo "profile-pushpull: reports in $out"
