#!/usr/bin/env bash
# End-to-end test of `docker stack deploy -c docker-compose.yml` on a
# single-node swarm.
#
#   1. build the image locally (swarm ignores build:, and no registry is
#      reachable), as the compose test does;
#   2. docker swarm init (on 127.0.0.1) unless this engine is already a
#      swarm manager;
#   3. deploy the stack: 3 workers, 2 shards; every service in dnsrr mode
#      (no IPVS needed), the monitor's stream published in host mode;
#   4. follow the stream from the host: 3 workers register and the model
#      version advances;
#   5. docker service scale worker=5: 5 workers report, versions advance;
#   6. docker stack rm; the swarm is left if this test made it.
#
# Every wait is bounded; on failure each task's log is printed.
# Exit 0 pass, 1 fail, 77 skipped (no engine, and KUDUS_REQUIRE_DOCKER unset).
set -uo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
kd_compose_init swarm-test kudusswarm swarm
kd_compose_env 600
stack="$project"
made_swarm=0

s_cleanup () {
    local rc=$?
    kd_compose_stop_tail
    if [ "$failed" -ne 0 ]; then
        say "logs of each service:"
        for svc in $(docker stack services -q "$stack" 2>/dev/null); do
            echo "----- $(docker service inspect -f '{{.Spec.Name}}' "$svc")"
            docker service ps --no-trunc "$svc" 2>&1 | head -n 8
            docker service logs --tail 60 "$svc" 2>&1 | tail -n 60
        done
        echo "----- last stats messages"
        grep '"topic":"stats"' "$stream" 2>/dev/null | tail -n 5
    fi
    docker stack rm "$stack" >/dev/null 2>&1
    # The stack's network goes once its tasks are gone.
    for _ in $(seq 1 30); do
        docker network ls -q --filter "label=com.docker.stack.namespace=$stack" | grep -q . || break
        sleep 1
    done
    [ "$made_swarm" = 1 ] && docker swarm leave --force >/dev/null 2>&1
    rm -rf "$work"
    exit "$rc"
}
trap s_cleanup EXIT

# --- 1. image ------------------------------------------------------------------
t0=$SECONDS
bash "$root/deploy/base-image.sh" || fail "no base image"
dc build -q scheduler > "$work/build.log" 2>&1 || { cat "$work/build.log"; fail "image build"; }
say "1. image kudus:latest built in $((SECONDS - t0)) s"

# --- 2. swarm --------------------------------------------------------------------
if [ "$(docker info -f '{{.Swarm.LocalNodeState}}')" != active ]; then
    docker swarm init --advertise-addr 127.0.0.1 --listen-addr 127.0.0.1:2377 > "$work/init.log" 2>&1 ||
        { cat "$work/init.log"; fail "docker swarm init"; }
    made_swarm=1
fi
[ "$(docker info -f '{{.Swarm.ControlAvailable}}')" = true ] || fail "this engine is a swarm worker, not a manager"
say "2. single-node swarm $([ $made_swarm = 1 ] && echo initialized || echo already active)"

# --- 3. deploy -------------------------------------------------------------------
docker stack deploy -c "$root/docker-compose.yml" "$stack" > "$work/deploy.log" 2>&1 ||
    { cat "$work/deploy.log"; fail "docker stack deploy"; }
mode=$(docker service inspect -f '{{.Spec.EndpointSpec.Mode}}' "${stack}_scheduler")
[ "$mode" = dnsrr ] || fail "the scheduler's endpoint mode is '$mode', not dnsrr"
say "3. stack deployed: $(docker stack services --format '{{.Name}}={{.Replicas}}' "$stack" | tr '\n' ' ')"

# --- 4. workers register, versions advance ------------------------------------------
kd_compose_follow
hit=$(s_wait_stats 0 180 '.workers == 3 and .version > 0') ||
    fail "3 workers did not register and train within 180 s: $(s_last_stats)"
v0=$(jq '.version' <<< "$hit")
hit=$(s_wait_stats "$(s_mark)" 30 ".version >= $v0 + 50") || fail "the version stuck at $v0"
say "4. workers=3, version $v0 -> $(jq '.version' <<< "$hit")"

# --- 5. scale -----------------------------------------------------------------------
docker service scale -d "${stack}_worker=5" > "$work/scale.log" 2>&1 ||
    { cat "$work/scale.log"; fail "docker service scale"; }
mark=$(s_mark)
hit=$(s_wait_stats "$mark" 90 '.workers == 5') || fail "5 workers did not report within 90 s: $(s_last_stats)"
v1=$(jq '.version' <<< "$hit")
hit=$(s_wait_stats "$(s_mark)" 30 ".version >= $v1 + 50 and .workers == 5") ||
    fail "with 5 workers the version stuck at $v1"
ranks=$(tail -n +"$((mark + 1))" "$stream" | jq -s '[.[] | select(.topic == "worker") | .rank] | unique | length')
say "5. scaled to 5: workers=5 ($ranks ranks reporting), version $v1 -> $(jq '.version' <<< "$hit")"

# --- 6. remove ------------------------------------------------------------------------
docker stack rm "$stack" > /dev/null 2>&1 || fail "docker stack rm"
for _ in $(seq 1 60); do
    [ -z "$(docker ps -q --filter "label=com.docker.stack.namespace=$stack")" ] && break
    sleep 1
done
[ -z "$(docker ps -q --filter "label=com.docker.stack.namespace=$stack")" ] || fail "containers left after stack rm"
say "6. stack removed"
failed=0
say "PASS"
