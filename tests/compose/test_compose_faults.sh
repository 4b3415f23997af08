#!/usr/bin/env bash
# Fault injection on the docker-compose cluster: a worker cut off the network.
#
#   1. build the image (docker's layer cache makes this quick when the
#      sources did not change; KUDUS_COMPOSE_BUILD=0 reuses kudus:latest
#      as it is);
#   2. up -d with 3 workers and 2 shards (BSP, default heartbeats: 1 s, 3
#      missed), and follow the monitor's stream from the host;
#   3. `docker network disconnect` one worker for KUDUS_FAULT_SECONDS (10 s,
#      more than the 3 s liveness): the scheduler declares it dead (log line
#      and "worker-dead" event), the stream shows 2 workers, and the phases
#      keep advancing without it;
#   4. `docker network connect` it again: it rejoins under the same name and
#      rank ("worker-rejoin" event, 3 workers again), and trains: its clock
#      on the stream advances and so do the phases;
#   5. the run ends by itself (time limit): the scheduler and every other
#      container, the partitioned worker included, exit 0, and no stats
#      message ever showed more than 3 workers;
#   6. down -v.
# It prints one line `FIGURE compose_partition ...` for the README.
#
# Every wait is bounded.  On failure, the logs of each container are printed.
# Exit 0 pass, 1 fail, 77 skipped (no engine, and KUDUS_REQUIRE_DOCKER unset).
#
# Environment: KUDUS_BIN_DIR (where `kudus` is; default build/),
# KUDUS_REQUIRE_DOCKER=1 (a missing engine fails instead of skipping),
# KUDUS_COMPOSE_BUILD=0 (do not build; use the existing image),
# KUDUS_FAULT_SECONDS (how long the worker is cut off, default 10).
set -uo pipefail

# Preconditions (exit 77 or 1), a free port, the project and $work.
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
kd_compose_init compose-faults kudusfaults compose-faults
cut_s="${KUDUS_FAULT_SECONDS:-10}"
victim=""

# A time limit ends the run by itself, long enough for the partition, the
# rejoin and the checks after it.  Heartbeats stay at their defaults.
kd_compose_env "${KUDUS_COMPOSE_SECONDS:-60}"
export KUDUS_HEARTBEAT_MS=1000 KUDUS_LIVENESS=3
net="${project}_default"

s_cleanup () {
    local rc=$?
    kd_compose_stop_tail
    # Never leave the worker off its network, whatever failed.
    [ -n "$victim" ] && docker network connect "$net" "$victim" >/dev/null 2>&1
    kd_compose_cleanup "$rc" "$project" 100 events
}
trap s_cleanup EXIT

# --- helpers -----------------------------------------------------------------
# The scheduler's log so far, in a file: grep -q or -m1 on a pipe from
# `docker logs` would end it with SIGPIPE, which pipefail reports as failure.
s_sched_log () { docker logs "$(dc ps -q scheduler)" > "$work/scheduler.log" 2>&1; cat "$work/scheduler.log"; }
s_sched_has () { s_sched_log > /dev/null; grep -q -- "$1" "$work/scheduler.log"; }
s_now_ms () { date +%s%3N; }

# --- 1. image ------------------------------------------------------------------
kd_compose_build

# --- 2. start ------------------------------------------------------------------
dc up -d --scale worker=3 --scale shard=2 > "$work/up.log" 2>&1 ||
    { cat "$work/up.log"; fail "docker-compose up"; }
kd_compose_follow
hit=$(s_wait_stats 0 90 '.workers == 3 and .phases >= 20') ||
    fail "3 workers training did not show up within 90 s"
say "2. up: project=$project workers=3 phases=$(jq '.phases' <<< "$hit")"

# --- 3. cut one worker off -------------------------------------------------------
victim=$(dc ps -q worker | head -n 1)
[ -n "$victim" ] || fail "no worker container"
host=$(docker inspect -f '{{.Config.Hostname}}' "$victim")
ip_before=$(docker inspect -f "{{(index .NetworkSettings.Networks \"$net\").IPAddress}}" "$victim")
s_sched_log > /dev/null
line=$(grep -m1 "join worker name=worker-$host-" "$work/scheduler.log") || fail "the scheduler never saw worker $host join"
vname=$(sed -E 's/.*join worker name=([^ ]+) .*/\1/' <<< "$line")
vrank=$(sed -E 's/.* rank=([0-9]+).*/\1/' <<< "$line")
mark=$(s_mark)
t_cut=$(s_now_ms)
docker network disconnect "$net" "$victim" || fail "docker network disconnect"
say "3. disconnected $(docker inspect -f '{{.Name}}' "$victim") ($vname, rank $vrank, $ip_before) from $net"
dead=$(s_wait_json "$mark" 15 event ".kind == \"worker-dead\" and .rank == $vrank") ||
    fail "no worker-dead event for rank $vrank within 15 s of the disconnect"
detection_ms=$(( $(jq '.t_ms' <<< "$dead") - t_cut ))
phases_dead=$(s_last_stats | jq '.phases')
s_sched_has "dead worker name=$vname rank=$vrank" || fail "no 'dead worker name=$vname' in the scheduler log"
hit=$(s_wait_stats "$mark" 10 '.workers == 2') || fail "the stream did not show 2 workers during the partition"
say "3. declared dead after $detection_ms ms: $(jq -r '.detail' <<< "$dead")"
s_advancing "3. without it" 15
left=$(( cut_s * 1000 - ($(s_now_ms) - t_cut) ))
[ $left -gt 0 ] && sleep "$(awk -v ms="$left" 'BEGIN { printf "%.3f", ms / 1000 }')"
phases_cut=$(s_last_stats | jq '.phases')

# --- 4. connect it again ---------------------------------------------------------
mark=$(s_mark)
t_connect=$(s_now_ms)
docker network connect "$net" "$victim" || fail "docker network connect"
disconnected_ms=$((t_connect - t_cut))
ip_after=$(docker inspect -f "{{(index .NetworkSettings.Networks \"$net\").IPAddress}}" "$victim")
say "4. reconnected after $disconnected_ms ms ($ip_before -> $ip_after)"
rejoin=$(s_wait_json "$mark" 45 event ".kind == \"worker-rejoin\" and .rank == $vrank") ||
    fail "no worker-rejoin event for rank $vrank within 45 s of the reconnect"
rejoin_ms=$(( $(jq '.t_ms' <<< "$rejoin") - t_connect ))
s_sched_has "rejoin worker name=$vname rank=$vrank" ||
    fail "no 'rejoin worker name=$vname rank=$vrank' in the scheduler log"
hit=$(s_wait_stats "$mark" 20 '.workers == 3') || fail "the stream did not show 3 workers after the rejoin"
say "4. rejoined $rejoin_ms ms after the reconnect with rank $vrank: $(jq -r '.detail' <<< "$rejoin")"
# It trains again: its own clock on the stream moves on.
c0=$(s_wait_json "$(s_mark)" 15 worker ".rank == $vrank and .age_ms < 1000" | jq '.clock') ||
    fail "no fresh worker row for rank $vrank after the rejoin"
hit=$(s_wait_json "$(s_mark)" 20 worker ".rank == $vrank and .clock >= $c0 + 20") ||
    fail "rank $vrank did not train after the rejoin (clock stuck at $c0)"
say "4. rank $vrank trains: clock $c0 -> $(jq '.clock' <<< "$hit")"
s_advancing "4. with it back" 20

# --- 5. the end ------------------------------------------------------------------
kd_compose_await_end
for c in $(docker ps -aq --filter "label=com.docker.compose.project=$project"); do
    c_code=$(docker inspect -f '{{.State.ExitCode}}' "$c")
    [ "$c_code" = 0 ] || fail "$(docker inspect -f '{{.Name}}' "$c") exited with $c_code"
done
max_workers=$(grep '"topic":"stats"' "$stream" | jq -s 'map(.workers) | max')
[ "$max_workers" -le 3 ] || fail "a stats message showed $max_workers workers for 3"
# One rank per name, one name per rank.
s_sched_log > /dev/null
pairs=$(grep -oE 'join worker name=[^ ]+ rank=[0-9]+' "$work/scheduler.log" | sed -E 's/.*name=([^ ]+) rank=([0-9]+)/\1 \2/' | sort -u)
[ "$(wc -l <<< "$pairs")" = 3 ] || fail "worker names and ranks are not one to one: $(paste -sd ';' <<< "$pairs")"
[ "$(cut -d' ' -f2 <<< "$pairs" | sort -u | wc -l)" = 3 ] || fail "duplicate worker ranks: $(paste -sd ';' <<< "$pairs")"
dc run --rm --no-deps -T scheduler cat /results/summary.json > "$work/summary.json" 2>"$work/run.err" ||
    { cat "$work/run.err"; fail "no summary in the results volume"; }
reason=$(jq -r '.stop_reason' "$work/summary.json")
[ "$reason" = max-seconds ] || fail "the run ended with $reason"
dropped=$(jq '.dropped_gradients' "$work/summary.json")
phases=$(jq '.phases' "$work/summary.json")
say "5. ended: reason=$reason phases=$phases dropped_gradients=$dropped test_accuracy=$(jq '.test_accuracy' "$work/summary.json"), every container exited 0"

# --- 6. down ---------------------------------------------------------------------
victim=""
dc down -v --remove-orphans > "$work/down.log" 2>&1 || { cat "$work/down.log"; fail "down -v"; }
left=$(docker ps -aq --filter "label=com.docker.compose.project=$project")
[ -z "$left" ] || fail "containers left after down: $left"

printf 'FIGURE compose_partition detection_ms=%s rejoin_ms_after_connect=%s disconnected_ms=%s phases_during_cut=%s ' \
    "$detection_ms" "$rejoin_ms" "$disconnected_ms" "$((phases_cut - phases_dead))"
printf 'ip_before=%s ip_after=%s dropped=%s phases=%s max_workers=%s heartbeat_ms=%s liveness=%s\n' \
    "$ip_before" "$ip_after" "$dropped" "$phases" "$max_workers" "$KUDUS_HEARTBEAT_MS" "$KUDUS_LIVENESS"
failed=0
say "PASS in $((SECONDS - t_start)) s"
