#!/usr/bin/env bash
# End-to-end test of the docker-compose cluster (docker-compose.yml).
#
#   1. build the images;
#   2. up -d with 3 workers and 2 shards;
#   3. follow the monitor's stream from the host through the published port:
#      3 workers report and test accuracy rises;
#   4. scale to 5 workers: 5 report;
#   5. docker kill one worker: phases keep advancing;
#   6. scale to 2 workers: phases keep advancing;
#   7. the run ends by itself: the scheduler exits 0, and the summary in the
#      results volume clears an accuracy threshold;
#   8. down -v leaves no container, network or volume of the project.
#
# Every wait is bounded.  On failure, the logs of each container are printed.
# Exit 0 pass, 1 fail, 77 skipped (no engine, and KUDUS_REQUIRE_DOCKER unset).
#
# Environment: KUDUS_BIN_DIR (where `kudus` is; default build/),
# KUDUS_REQUIRE_DOCKER=1 (a missing engine fails instead of skipping),
# KUDUS_COMPOSE_ACCURACY (summary threshold, default 0.7).
set -uo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${KUDUS_BIN_DIR:-$root/build}"
threshold="${KUDUS_COMPOSE_ACCURACY:-0.7}"
project="kudustest$$"
work="$(mktemp -d /tmp/kudus-compose.XXXXXX)"
stream="$work/stream.jsonl"
tail_pid=""
failed=1
t_start=$SECONDS

say ()  { printf 'compose-test [%3ds]: %s\n' $((SECONDS - t_start)) "$*"; }
fail () { say "FAIL: $*"; exit 1; }

# --- preconditions -----------------------------------------------------------
s_skip_or_fail () {
    if [ "${KUDUS_REQUIRE_DOCKER:-0}" = 1 ]; then
        say "FAIL: $* (KUDUS_REQUIRE_DOCKER=1)"
        exit 1
    fi
    say "SKIP: $*"
    exit 77
}
command -v docker >/dev/null 2>&1         || s_skip_or_fail "docker is not installed"
command -v docker-compose >/dev/null 2>&1 || s_skip_or_fail "docker-compose is not installed"
docker info >/dev/null 2>&1               || s_skip_or_fail "the docker engine is not reachable"
command -v jq >/dev/null 2>&1             || fail "jq is missing (deploy/docker-setup.sh installs it)"
[ -x "$bin/kudus" ]                       || fail "no $bin/kudus; build first (make build)"

# A host port for the monitor's stream that nothing listens on: port 7002
# may belong to a concurrent `kudus local`.
port=""
for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 10000))
    if ! ss -Htln "sport = :$p" 2>/dev/null | grep -q .; then port=$p; break; fi
done
[ -n "$port" ] || fail "no free host port found"

# Settings for this run, read by docker-compose.yml.  A long epoch budget and
# a time limit keep it training while the test scales it; the emulated
# compute time slows each iteration so that phases stay countable.
export KUDUS_PUB_HOST_PORT="$port"
export KUDUS_SHARDS=2 KUDUS_MIN_WORKERS=3 KUDUS_WORKERS=3
export KUDUS_EPOCHS=1000 KUDUS_MAX_SECONDS="${KUDUS_COMPOSE_SECONDS:-90}"
export KUDUS_DELAY_MS=5 KUDUS_CONSISTENCY=bsp KUDUS_MODEL=softmax
dc () { docker-compose -f "$root/docker-compose.yml" -p "$project" --ansi never "$@"; }

s_cleanup () {
    local rc=$?
    [ -n "$tail_pid" ] && kill "$tail_pid" 2>/dev/null
    if [ $failed -ne 0 ]; then
        say "logs of each container:"
        for c in $(docker ps -aq --filter "label=com.docker.compose.project=$project"); do
            echo "----- $(docker inspect -f '{{.Name}} exit={{.State.ExitCode}} restarts={{.RestartCount}}' "$c")"
            docker logs --tail 200 "$c" 2>&1
        done
        echo "----- last stats messages"
        grep '"topic":"stats"' "$stream" 2>/dev/null | tail -n 5
        dc down -v --remove-orphans >/dev/null 2>&1
    fi
    rm -rf "$work"
    exit $rc
}
trap s_cleanup EXIT

# --- stream helpers ----------------------------------------------------------
# Lines of the stream so far; a wait only looks at what arrived after a mark.
s_mark () { wc -l < "$stream" 2>/dev/null || echo 0; }

# s_wait_stats MARK SECONDS JQ-CONDITION: wait until a stats message after
# MARK satisfies the condition; prints that message.
s_wait_stats () {
    local mark=$1 limit=$2 cond=$3 deadline=$((SECONDS + $2)) hit
    while [ $SECONDS -lt $deadline ]; do
        hit=$(tail -n +"$((mark + 1))" "$stream" 2>/dev/null |
              jq -c "select(.topic == \"stats\") | select($cond)" 2>/dev/null | head -n 1)
        if [ -n "$hit" ]; then echo "$hit"; return 0; fi
        sleep 0.5
    done
    return 1
}

# The latest stats message.
s_last_stats () { grep '"topic":"stats"' "$stream" | tail -n 1; }

# s_advancing WHAT SECONDS: phases must grow by at least 20 within SECONDS.
s_advancing () {
    local p0 hit
    p0=$(s_last_stats | jq '.phases')
    hit=$(s_wait_stats "$(s_mark)" "$2" ".phases >= $p0 + 20") ||
        fail "$1: phases stuck at $p0 for $2 s"
    say "$1: phases $p0 -> $(jq '.phases' <<< "$hit"), workers=$(jq '.workers' <<< "$hit")"
}

# --- 1. images ---------------------------------------------------------------
t0=$SECONDS
bash "$root/deploy/base-image.sh" || fail "no base image"
dc build -q scheduler > "$work/build.log" 2>&1 || { cat "$work/build.log"; fail "image build"; }
say "1. images built in $((SECONDS - t0)) s"

# --- 2. start ----------------------------------------------------------------
dc up -d --scale worker=3 --scale shard=2 > "$work/up.log" 2>&1 ||
    { cat "$work/up.log"; fail "docker-compose up"; }
say "2. up: project=$project stream=tcp://127.0.0.1:$port"

# --- 3. follow from the host ---------------------------------------------------
# The monitor may still be starting; tail keeps reconnecting until it is up.
"$bin/kudus" tail "tcp://127.0.0.1:$port" --json --timeout 60 > "$stream" 2>"$work/tail.err" &
tail_pid=$!
hit=$(s_wait_stats 0 60 '.workers == 3 and (.test_accuracy // null) != null') ||
    fail "3 workers with a test accuracy did not show up within 60 s"
a0=$(jq '.test_accuracy' <<< "$hit")
hit=$(s_wait_stats "$(s_mark)" 30 ".test_accuracy > $a0 and .test_accuracy >= 0.5") ||
    fail "test accuracy did not rise above $a0 within 30 s"
ranks=$(grep '"topic":"worker"' "$stream" | jq -s '[.[].rank] | unique | length')
say "3. workers=3 (distinct ranks seen: $ranks), accuracy $a0 -> $(jq '.test_accuracy' <<< "$hit")"

# --- 4. scale up ---------------------------------------------------------------
mark=$(s_mark)
dc up -d --no-recreate --scale worker=5 --scale shard=2 > "$work/up.log" 2>&1 ||
    { cat "$work/up.log"; fail "scale to 5"; }
hit=$(s_wait_stats "$mark" 45 '.workers == 5') || fail "5 workers did not report within 45 s"
say "4. scaled up: workers=$(jq '.workers' <<< "$hit") phases=$(jq '.phases' <<< "$hit")"
s_advancing "4. with 5 workers" 20

# --- 5. kill one ---------------------------------------------------------------
victim=$(dc ps -q worker | head -n 1)
[ -n "$victim" ] || fail "no worker container to kill"
docker kill "$victim" >/dev/null || fail "docker kill"
say "5. killed $(docker inspect -f '{{.Name}}' "$victim")"
# Past the heartbeat timeout (3 s), the barrier must not wait for it.
sleep 5
s_advancing "5. after the kill" 20
say "5. the killed container: $(docker inspect -f 'status={{.State.Status}} restarts={{.RestartCount}}' "$victim")"

# A crash, unlike `docker kill`, is not a manual stop: restart: on-failure
# brings the container back, and it rejoins under its old name and rank.
crashed=$(dc ps -q worker | grep -v "^${victim:0:12}" | head -n 1)
pid=$(docker inspect -f '{{.State.Pid}}' "$crashed")
[ "${pid:-0}" -gt 0 ] || fail "no process for worker $crashed"
kill -KILL "$pid" || fail "cannot crash worker pid $pid"
deadline=$((SECONDS + 30))
until [ "$(docker inspect -f '{{.RestartCount}} {{.State.Running}}' "$crashed")" = "1 true" ]; do
    [ $SECONDS -lt $deadline ] || fail "the crashed worker did not restart within 30 s"
    sleep 0.5
done
say "5. crashed $(docker inspect -f '{{.Name}}' "$crashed") (SIGKILL from the host): restarted"
hit=$(s_wait_stats "$(s_mark)" 30 '.workers == 4') || fail "the restarted worker did not rejoin within 30 s"
say "5. scheduler: $(docker logs "$(dc ps -q scheduler)" 2>&1 | grep -E 'restarted worker|rejoin worker' | sed 's/.*scheduler: //' | paste -sd ';')"
s_advancing "5. after the restart" 20

# --- 6. scale down -------------------------------------------------------------
mark=$(s_mark)
dc up -d --no-recreate --scale worker=2 --scale shard=2 > "$work/up.log" 2>&1 ||
    { cat "$work/up.log"; fail "scale to 2"; }
hit=$(s_wait_stats "$mark" 45 '.workers == 2') || fail "the cluster did not shrink to 2 workers within 45 s"
say "6. scaled down: workers=$(jq '.workers' <<< "$hit")"
s_advancing "6. with 2 workers" 20

# --- 7. the end ------------------------------------------------------------------
scheduler=$(dc ps -q scheduler)
code=$(timeout $((KUDUS_MAX_SECONDS + 60)) docker wait "$scheduler") ||
    fail "the scheduler did not exit within $((KUDUS_MAX_SECONDS + 60)) s"
[ "$code" = 0 ] || fail "the scheduler exited with $code"
# Everyone else exits 0 on STOP, and nothing restarts.
deadline=$((SECONDS + 30))
while [ -n "$(docker ps -q --filter "label=com.docker.compose.project=$project")" ]; do
    [ $SECONDS -lt $deadline ] || fail "containers still running 30 s after the scheduler exited"
    sleep 1
done
for c in $(docker ps -aq --filter "label=com.docker.compose.project=$project"); do
    [ "$c" = "${victim:0:12}" ] && continue
    c_code=$(docker inspect -f '{{.State.ExitCode}}' "$c")
    [ "$c_code" = 0 ] || fail "$(docker inspect -f '{{.Name}}' "$c") exited with $c_code"
done
dc run --rm --no-deps -T scheduler cat /results/summary.json > "$work/summary.json" 2>"$work/run.err" ||
    { cat "$work/run.err"; fail "no summary in the results volume"; }
acc=$(jq '.test_accuracy' "$work/summary.json")
say "7. ended: reason=$(jq -r '.stop_reason' "$work/summary.json") test_accuracy=$acc" \
    "phases=$(jq '.phases' "$work/summary.json") wall_seconds=$(jq '.wall_seconds' "$work/summary.json")"
jq -e ".test_accuracy >= $threshold" "$work/summary.json" >/dev/null ||
    fail "summary test_accuracy $acc is below $threshold"

# --- 8. down -------------------------------------------------------------------
dc down -v --remove-orphans > "$work/down.log" 2>&1 || { cat "$work/down.log"; fail "down -v"; }
left=$(docker ps -aq --filter "label=com.docker.compose.project=$project")
[ -z "$left" ] || fail "containers left after down: $left"
docker volume inspect "${project}_results" >/dev/null 2>&1 && fail "volume ${project}_results left"
docker network inspect "${project}_default" >/dev/null 2>&1 && fail "network ${project}_default left"
say "8. down -v: no container, volume or network left"

failed=0
say "PASS in $((SECONDS - t_start)) s"
