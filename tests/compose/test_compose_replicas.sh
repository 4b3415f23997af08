#!/usr/bin/env bash
# Replicated shards on the docker-compose cluster (KUDUS_REPLICAS=2).
#
#   1. build the image (KUDUS_COMPOSE_BUILD=0 reuses kudus:latest);
#   2. up -d with 2 key ranges x 2 replicas (4 shard containers) and 3
#      workers under BSP; each range's backup receives its state
#      ("shard-synced", twice);
#   3. `docker kill` (SIGKILL) the primary of the range at key 0: its backup
#      is promoted ("shard-promoted") and the phases keep advancing;
#   4. `docker start` it again: it joins as a backup and receives the
#      range's state ("shard-synced" a third time);
#   5. the run ends by itself: every container exits 0, each range's two
#      replicas log the same final version and CRC-32 of their values, and
#      no shard lost an update;
#   6. down -v.
# It prints one line `FIGURE compose_replicas ...` for the README.
#
# Exit 0 pass, 1 fail, 77 skipped (no engine, and KUDUS_REQUIRE_DOCKER unset).
# Environment: as test_compose_faults.sh.
set -uo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
kd_compose_init compose-replicas kudusrepl compose-replicas
victim=""

# Long enough for every step on a busy machine (beside other suites the
# cluster took 52 s to come up, and 45 s of training ended before step 4).
kd_compose_env "${KUDUS_COMPOSE_SECONDS:-90}"
export KUDUS_REPLICAS=2 KUDUS_HEARTBEAT_MS=500 KUDUS_LIVENESS=3

s_cleanup () { kd_compose_cleanup $? "$project" 100 events; }
trap s_cleanup EXIT

s_now_ms () { date +%s%3N; }
# The log of a container, in a file (grep on a pipe from docker logs would
# end it with SIGPIPE, which pipefail reports as failure).
s_logs () { docker logs "$1" > "$work/$1.log" 2>&1; echo "$work/$1.log"; }

# --- 1. image ------------------------------------------------------------------
kd_compose_build

# --- 2. start ------------------------------------------------------------------
dc up -d --scale worker=3 --scale shard=4 > "$work/up.log" 2>&1 ||
    { cat "$work/up.log"; fail "docker-compose up"; }
kd_compose_follow
hit=$(s_wait_stats 0 90 '.workers == 3 and .phases >= 20') ||
    fail "3 workers training did not show up within 90 s"
# Each range's backup receives its primary's state once training starts.
s_synced () { grep -c "kind=shard-synced" "$(s_logs "$(dc ps -q scheduler)")"; }
deadline=$((SECONDS + 30))
while [ "$(s_synced)" -lt 2 ]; do
    [ $SECONDS -lt $deadline ] || fail "fewer than 2 backups received their state within 30 s"
    sleep 0.5
done
say "2. up: 4 shard containers, 2 ranges x 2 replicas, phases=$(jq '.phases' <<< "$hit")"

# --- 3. kill the primary of range 0 -----------------------------------------------
for c in $(dc ps -q shard); do
    if grep "chain role=" "$(s_logs "$c")" | tail -n 1 | grep -q "chain role=primary lo=0 "; then
        victim=$c
    fi
done
[ -n "$victim" ] || fail "no shard container is the primary of range 0"
mark=$(s_mark)
t_kill=$(s_now_ms)
docker kill "$victim" > /dev/null || fail "docker kill"
say "3. killed $(docker inspect -f '{{.Name}}' "$victim"), the primary of range 0"
promoted=$(s_wait_json "$mark" 20 event '.kind == "shard-promoted"') ||
    fail "no backup promoted within 20 s of the kill"
promoted_ms=$(( $(jq '.t_ms' <<< "$promoted") - t_kill ))
say "3. promoted after $promoted_ms ms: $(jq -r '.detail' <<< "$promoted")"
s_advancing "3. without it" 20

# --- 4. start it again ---------------------------------------------------------------
before=$(s_synced)
docker start "$victim" > /dev/null || fail "docker start"
deadline=$((SECONDS + 30))
while [ "$(s_synced)" -le "$before" ]; do
    [ $SECONDS -lt $deadline ] || fail "the restarted shard did not receive its state within 30 s"
    sleep 0.5
done
synced=$(grep "kind=shard-synced" "$work/$(dc ps -q scheduler).log" | tail -n 1)
say "4. restarted as a backup: ${synced#*detail=}"
s_advancing "4. with it back" 20

# --- 5. the end ------------------------------------------------------------------
kd_compose_await_end
for c in $(docker ps -aq --filter "label=com.docker.compose.project=$project"); do
    c_code=$(docker inspect -f '{{.State.ExitCode}}' "$c")
    [ "$c_code" = 0 ] || fail "$(docker inspect -f '{{.Name}}' "$c") exited with $c_code"
done
: > "$work/replicas"
for c in $(dc ps -q shard); do
    log=$(s_logs "$c")
    grep "replica " "$log" | tail -n 1 >> "$work/replicas"
    grep " exit version=" "$log" | tail -n 1 | grep -q " lost=0 " || fail "$(docker inspect -f '{{.Name}}' "$c") lost updates"
done
summary=$(python3 - "$work/replicas" <<'PY'
import re, sys
ranges = {}
for line in open(sys.argv[1]):
    m = re.search(r"replica (\w+) version=(\d+) lo=(\d+) params_crc=(\w+)", line)
    if m:
        ranges.setdefault(m.group(3), []).append((m.group(2), m.group(4)))
assert len(ranges) == 2 and all(len(r) == 2 for r in ranges.values()), ranges
for lo, r in ranges.items():
    assert r[0] == r[1], ("replicas differ", lo, r)
print(" ".join(f"lo={lo}:v{r[0][0]}:{r[0][1]}" for lo, r in sorted(ranges.items())))
PY
) || fail "the replicas of a range differ: $(cat "$work/replicas")"
say "5. ended: every container exited 0, replicas identical ($summary), lost 0"

# --- 6. down ---------------------------------------------------------------------
dc down -v --remove-orphans > "$work/down.log" 2>&1 || { cat "$work/down.log"; fail "down -v"; }
printf 'FIGURE compose_replicas promoted_ms=%s replicas_identical=2/2 lost=0 %s\n' "$promoted_ms" "$summary"
failed=0
say "PASS in $((SECONDS - t_start)) s"
