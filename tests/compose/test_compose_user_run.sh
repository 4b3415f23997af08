#!/usr/bin/env bash
# The compose "user" profile with a real engine (issue 34 section 5): a
# user's image built FROM kudus:latest (tests/compose/user/Dockerfile:
# Debian's python3 and numpy, and examples/numpy_softmax.py, a numpy worker
# through the kudus package) runs as the workers of a compose cluster.
#
#   1. build kudus:latest and the user's image;
#   2. up --profile user with 2 copies of the user's image, 2 shards and
#      no built-in worker, KUDUS_MODEL=external (the script declares it);
#   3. the run ends by itself after one epoch: the scheduler exits 0, each
#      copy exits 0 and prints the test accuracy of the model it pulled
#      last (at least 0.7), and the summary counts both as workers with
#      rows applied;
#   4. down -v leaves nothing of the project, and the user's image is
#      removed.
#
# Exit 0 pass, 1 fail, 77 skipped (no engine, and KUDUS_REQUIRE_DOCKER unset).
set -uo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
kd_compose_init compose-user kudususer compose-user
user_image="kudus-user-test:$$"
kd_compose_env 300
export KUDUS_MODEL=external KUDUS_EPOCHS=1 KUDUS_MIN_WORKERS=2 KUDUS_DELAY_MS=0
export KUDUS_USER_IMAGE="$user_image" KUDUS_USER_WORKERS=2 KUDUS_USER_COMMAND="python3 train.py"
# The profiles live in docker-compose.override.yml, which -f leaves out
# unless named; lib.sh's steps call dc too, so it is dc that names it.
dc () {
    docker-compose -f "$root/docker-compose.yml" -f "$root/docker-compose.override.yml" \
        -p "$project" --ansi never --profile user "$@"
}
s_cleanup () {
    local rc=$?
    [ "$failed" -ne 0 ] && dc logs --no-color --tail 40 user-worker 2>/dev/null | tail -n 80
    docker image rm -f "$user_image" >/dev/null 2>&1
    kd_compose_cleanup $rc "$project" 100
}
trap s_cleanup EXIT

# --- 1. images ---------------------------------------------------------------
t0=$SECONDS
bash "$root/deploy/base-image.sh" || fail "no base image"
dc build -q scheduler > "$work/build.log" 2>&1 || { cat "$work/build.log"; fail "image build"; }
docker build -q --build-arg KUDUS_IMAGE="${KUDUS_IMAGE:-kudus:latest}" -t "$user_image" \
    -f "$root/tests/compose/user/Dockerfile" "$root" > "$work/user-build.log" 2>&1 ||
    { cat "$work/user-build.log"; fail "the user's image did not build"; }
say "1. kudus:latest and $user_image built in $((SECONDS - t0)) s"

# --- 2. start ----------------------------------------------------------------
dc up -d --scale worker=0 --scale shard=2 --scale user-worker=2 > "$work/up.log" 2>&1 ||
    { cat "$work/up.log"; fail "docker-compose --profile user up"; }
say "2. up: 2 copies of $user_image, 2 shards, no built-in worker"

# --- 3. the end ------------------------------------------------------------------
kd_compose_await_end
copies=$(dc ps -aq user-worker)
[ "$(wc -w <<< "$copies")" = 2 ] || fail "expected 2 user-worker containers, found: $copies"
for c in $copies; do
    code=$(docker inspect -f '{{.State.ExitCode}} {{.RestartCount}}' "$c")
    [ "$code" = "0 0" ] || fail "$(docker inspect -f '{{.Name}}' "$c"): exit code and restarts $code"
    line=$(docker logs "$c" 2>&1 | grep -E 'test accuracy [0-9.]+' | tail -n 1)
    acc=$(grep -oE 'test accuracy [0-9.]+' <<< "$line" | awk '{print $3}')
    [ -n "$acc" ] || fail "$(docker inspect -f '{{.Name}}' "$c") printed no test accuracy"
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0.7 else 1)" "$acc" ||
        fail "$line: below 0.7"
    say "3. $line"
done
dc run --rm --no-deps -T scheduler cat /results/summary.json > "$work/summary.json" 2>"$work/run.err" ||
    { cat "$work/run.err"; fail "no summary in the results volume"; }
jq -e '.stop_reason == "epochs" and .workers == 2
       and ([.per_worker[] | select((.name | startswith("user-")) and .applied_samples > 1000)] | length) == 2' \
    "$work/summary.json" > /dev/null ||
    fail "the summary does not show two user workers training an epoch: $(jq -c '{stop_reason, workers, per_worker: [.per_worker[] | {name, applied_samples}]}' "$work/summary.json")"
say "3. summary: stop_reason=epochs, 2 user workers, phases=$(jq '.phases' "$work/summary.json")"

# --- 4. down -------------------------------------------------------------------
dc down -v --remove-orphans > "$work/down.log" 2>&1 || { cat "$work/down.log"; fail "down -v"; }
left=$(docker ps -aq --filter "label=com.docker.compose.project=$project")
[ -z "$left" ] || fail "containers left after down: $left"
failed=0
say "PASS in $((SECONDS - t_start)) s"
