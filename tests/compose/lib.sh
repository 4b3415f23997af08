# shellcheck shell=bash
# Shared by the docker-compose tests (test_compose.sh, test_compose_faults.sh,
# test_compose_replicas.sh):
# sourced, not run.  It defines functions only; the caller keeps
# `set -uo pipefail` and its own steps.  The globals it sets and reads are
# kd_label, root, bin, project, work, stream, tail_pid, failed, t_start and
# port; the caller sets failed=0 once everything passed.
#
#   set -uo pipefail
#   . "$(dirname "$0")/lib.sh"
#   kd_compose_init compose-test kudustest compose
#   kd_compose_env "${KUDUS_COMPOSE_SECONDS:-90}"
#   s_cleanup () { kd_compose_cleanup $? "$project" 200; }
#   trap s_cleanup EXIT

# kd_compose_init LABEL PREFIX TMPNAME: the state every run has, then the
# preconditions and a port.  LABEL starts each `say` line; the project is
# PREFIX and the PID, so that concurrent runs never share containers,
# networks or volumes; the scratch directory is /tmp/kudus-TMPNAME.XXXXXX.
kd_compose_init () {
    kd_label=$1
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
    bin="${KUDUS_BIN_DIR:-$root/build}"
    project="$2$$"
    work="$(mktemp -d "/tmp/kudus-$3.XXXXXX")"
    stream="$work/stream.jsonl"
    tail_pid=""
    failed=1
    t_start=$SECONDS
    kd_compose_preconditions
    port=$(kd_compose_free_port) || fail "no free host port found"
}

say ()  { printf '%s [%3ds]: %s\n' "$kd_label" $((SECONDS - t_start)) "$*"; }
fail () { say "FAIL: $*"; exit 1; }

# A missing engine is a skip (77) on a machine without docker, but a failure
# where the caller asked for the test to run (KUDUS_REQUIRE_DOCKER=1).
s_skip_or_fail () {
    if [ "${KUDUS_REQUIRE_DOCKER:-0}" = 1 ]; then
        say "FAIL: $* (KUDUS_REQUIRE_DOCKER=1)"
        exit 1
    fi
    say "SKIP: $*"
    exit 77
}

# kd_compose_preconditions: no engine skips; a missing jq or kudus binary is
# a broken test setup, so it fails.
kd_compose_preconditions () {
    command -v docker >/dev/null 2>&1         || s_skip_or_fail "docker is not installed"
    command -v docker-compose >/dev/null 2>&1 || s_skip_or_fail "docker-compose is not installed"
    docker info >/dev/null 2>&1               || s_skip_or_fail "the docker engine is not reachable"
    command -v jq >/dev/null 2>&1             || fail "jq is missing (deploy/docker-setup.sh installs it)"
    [ -x "$bin/kudus" ]                       || fail "no $bin/kudus; build first (make build)"
}

# kd_compose_free_port: prints a host port for the monitor's stream that
# nothing listens on (the default 7002 may belong to a concurrent
# `kudus local`); returns 1 when 50 random tries found none.  The other
# suites' clusters sit at bases 20000 + 200 k and take base + 0-3, 50-99 and
# 100 + shard: offsets 150-199 are never theirs.
kd_compose_free_port () {
    local p
    for _ in $(seq 1 50); do
        p=$((20000 + (RANDOM % 60) * 200 + 150 + RANDOM % 50))
        if ! ss -Htln "sport = :$p" 2>/dev/null | grep -q .; then echo "$p"; return 0; fi
    done
    return 1
}

# kd_compose_env MAX_SECONDS: the settings docker-compose.yml reads that
# both tests share: the stream on $port, 3 workers and 2 shards under BSP
# on the softmax model, and an epoch budget no run reaches, so that the time
# limit MAX_SECONDS ends it; the emulated compute time (5 ms) slows each
# iteration so that phases stay countable.
kd_compose_env () {
    export KUDUS_PUB_HOST_PORT="$port"
    KUDUS_METRICS_HOST_PORT=$(kd_compose_free_port) || fail "no free host port found"
    export KUDUS_METRICS_HOST_PORT
    export KUDUS_SHARDS=2 KUDUS_MIN_WORKERS=3 KUDUS_WORKERS=3
    export KUDUS_EPOCHS=1000 KUDUS_MAX_SECONDS="$1"
    export KUDUS_DELAY_MS=5 KUDUS_CONSISTENCY=bsp KUDUS_MODEL=softmax
}

# docker-compose on the repository's docker-compose.yml, under this run's
# project name and without colour codes in the logs.
dc () { docker-compose -f "$root/docker-compose.yml" -p "$project" --ansi never "$@"; }

# kd_compose_stop_tail: stop following the stream, once.
kd_compose_stop_tail () {
    [ -n "$tail_pid" ] && kill "$tail_pid" 2>/dev/null
    tail_pid=""
}

# kd_compose_cleanup RC PROJECT LOG_LINES [events]: the end of every run,
# from the EXIT trap, with RC the status the script exits with.  After a
# failure (failed != 0) it prints what is needed to tell why: the last
# LOG_LINES of each container's log, the stream's events (with `events`) and
# its last stats messages; then it takes PROJECT down (down -v) so that a
# failed run leaves no container, network or volume behind.
kd_compose_cleanup () {
    local rc=$1 project=$2 lines=$3 events=${4:-} c
    kd_compose_stop_tail
    if [ "$failed" -ne 0 ]; then
        say "logs of each container:"
        for c in $(docker ps -aq --filter "label=com.docker.compose.project=$project"); do
            echo "----- $(docker inspect -f '{{.Name}} exit={{.State.ExitCode}} restarts={{.RestartCount}}' "$c")"
            docker logs --tail "$lines" "$c" 2>&1
        done
        if [ "$events" = events ]; then
            echo "----- events and last stats messages"
            grep '"topic":"event"' "$stream" 2>/dev/null
        else
            echo "----- last stats messages"
        fi
        grep '"topic":"stats"' "$stream" 2>/dev/null | tail -n 5
        dc down -v --remove-orphans >/dev/null 2>&1
    fi
    rm -rf "$work"
    exit "$rc"
}

# kd_compose_build: the base image, then the cluster's image (docker's layer
# cache makes this quick when the sources did not change; with
# KUDUS_COMPOSE_BUILD=0 an existing image is used as it is).
kd_compose_build () {
    local t0=$SECONDS
    bash "$root/deploy/base-image.sh" || fail "no base image"
    if [ "${KUDUS_COMPOSE_BUILD:-1}" = 0 ] && docker image inspect "${KUDUS_IMAGE:-kudus:latest}" >/dev/null 2>&1; then
        say "1. reusing image ${KUDUS_IMAGE:-kudus:latest} (KUDUS_COMPOSE_BUILD=0)"
    else
        dc build -q scheduler > "$work/build.log" 2>&1 || { cat "$work/build.log"; fail "image build"; }
        say "1. image built in $((SECONDS - t0)) s"
    fi
}

# --- the monitor's stream ------------------------------------------------------
# kd_compose_follow: follow the monitor's stream from the host, through the
# published port, into $stream (JSON lines), in the background.  The
# monitor may still be starting; tail keeps reconnecting until it is up
# (60 s at the most).  The EXIT trap stops it.
kd_compose_follow () {
    "$bin/kudus" tail "tcp://127.0.0.1:$port" --json --timeout 60 > "$stream" 2>"$work/tail.err" &
    tail_pid=$!
}

# Lines of the stream so far; a wait only looks at what arrived after a mark.
s_mark () { wc -l < "$stream" 2>/dev/null || echo 0; }

# s_wait_json MARK SECONDS TOPIC JQ-CONDITION: wait until a message of TOPIC
# after MARK satisfies the condition; prints that message.
s_wait_json () {
    local mark=$1 deadline=$((SECONDS + $2)) topic=$3 cond=$4 hit
    while [ $SECONDS -lt $deadline ]; do
        hit=$(tail -n +"$((mark + 1))" "$stream" 2>/dev/null |
              jq -c "select(.topic == \"$topic\") | select($cond)" 2>/dev/null | head -n 1)
        if [ -n "$hit" ]; then echo "$hit"; return 0; fi
        sleep 0.5
    done
    return 1
}

# s_wait_stats MARK SECONDS JQ-CONDITION: s_wait_json on the stats topic.
s_wait_stats () { s_wait_json "$1" "$2" stats "$3"; }

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

# kd_compose_await_end: the run ends by itself (KUDUS_MAX_SECONDS): the
# scheduler exits 0, and on its STOP every other container stops too, within
# 30 s.  Both waits are bounded; the caller checks the exit codes.
kd_compose_await_end () {
    local scheduler code deadline
    scheduler=$(dc ps -q scheduler)
    code=$(timeout $((KUDUS_MAX_SECONDS + 60)) docker wait "$scheduler") ||
        fail "the scheduler did not exit within $((KUDUS_MAX_SECONDS + 60)) s"
    [ "$code" = 0 ] || fail "the scheduler exited with $code"
    deadline=$((SECONDS + 30))
    while [ -n "$(docker ps -q --filter "label=com.docker.compose.project=$project")" ]; do
        [ $SECONDS -lt $deadline ] || fail "containers still running 30 s after the scheduler exited"
        sleep 1
    done
}
