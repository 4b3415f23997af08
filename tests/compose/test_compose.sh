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

# Preconditions (exit 77 or 1), a free port, the project and $work.
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
kd_compose_init compose-test kudustest compose
threshold="${KUDUS_COMPOSE_ACCURACY:-0.7}"

# Settings for this run, read by docker-compose.yml.  A long epoch budget and
# a time limit keep it training while the test scales it; the emulated
# compute time slows each iteration so that phases stay countable.
kd_compose_env "${KUDUS_COMPOSE_SECONDS:-90}"

s_cleanup () { kd_compose_cleanup $? "$project" 200; }
trap s_cleanup EXIT

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
kd_compose_follow
hit=$(s_wait_stats 0 60 '.workers == 3 and (.test_accuracy // null) != null') ||
    fail "3 workers with a test accuracy did not show up within 60 s"
a0=$(jq '.test_accuracy' <<< "$hit")
hit=$(s_wait_stats "$(s_mark)" 30 ".test_accuracy > $a0 and .test_accuracy >= 0.5") ||
    fail "test accuracy did not rise above $a0 within 30 s"
ranks=$(grep '"topic":"worker"' "$stream" | jq -s '[.[].rank] | unique | length')
say "3. workers=3 (distinct ranks seen: $ranks), accuracy $a0 -> $(jq '.test_accuracy' <<< "$hit")"
# The monitor's Prometheus endpoint, published on the host's loopback.
metrics=$(python3 -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
    "http://127.0.0.1:$KUDUS_METRICS_HOST_PORT/metrics") || fail "GET /metrics failed"
grep -q '^kudus_model_version [1-9]' <<< "$metrics" || fail "no kudus_model_version in /metrics"
grep -q '^kudus_worker_samples_total{rank="2"' <<< "$metrics" || fail "no per-worker metrics"
# The profiles live in docker-compose.override.yml (swarm has none).
# (Captured first: grep -q would end the pipe early, and pipefail fail it.)
services=$(docker-compose -f "$root/docker-compose.yml" -f "$root/docker-compose.override.yml" \
    --profile metrics --profile dashboard config --services 2>&1) ||
    fail "the profiles of docker-compose.override.yml are invalid: $services"
grep -qx prometheus <<< "$services" && grep -qx dashboard <<< "$services" ||
    fail "the profiles of docker-compose.override.yml lack prometheus or dashboard: $services"
say "3. GET /metrics: $(grep '^kudus_model_version' <<< "$metrics")"

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
kd_compose_await_end
# Everyone else exits 0 on STOP, and nothing restarts.
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
