#!/usr/bin/env bash
# Make a docker engine usable on a Debian 12 machine, for the compose cluster
# and its end-to-end test:
#   1. install docker.io, docker-compose (v1.29), debootstrap and jq when
#      missing;
#   2. start dockerd in the background when `docker info` fails, and wait
#      until it answers;
#   3. build the debian:bookworm-slim base image locally when it is missing
#      (deploy/base-image.sh), because no container registry may be reachable.
# Safe to run again: each step does nothing when its work is already done.
# Needs root for steps 1 and 2 when they have something to do.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

DOCKERD_LOG="${KUDUS_DOCKERD_LOG:-/var/log/kudus-dockerd.log}"
DOCKERD_WAIT_S="${KUDUS_DOCKERD_WAIT_S:-60}"

log () { echo "docker-setup: $*" >&2; }

# --- 1. packages ------------------------------------------------------------
packages=(docker.io docker-compose debootstrap jq)
missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        log "missing packages: ${missing[*]}; run as root, or: sudo apt-get install ${missing[*]}"
        exit 1
    fi
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# --- 2. engine --------------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
    if [ "$(id -u)" -ne 0 ]; then
        log "the docker engine is not reachable and only root can start it"
        exit 1
    fi
    # A machine with an init system may have started it already, or can.
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        systemctl start docker || true
    fi
fi
if ! docker info >/dev/null 2>&1; then
    log "starting dockerd in the background (log: $DOCKERD_LOG)"
    # setsid: the engine must outlive this script and the shell that ran it.
    setsid dockerd >>"$DOCKERD_LOG" 2>&1 < /dev/null &
    deadline=$((SECONDS + DOCKERD_WAIT_S))
    until docker info >/dev/null 2>&1; do
        if [ $SECONDS -ge $deadline ]; then
            log "dockerd did not answer within ${DOCKERD_WAIT_S}s; last lines of its log:"
            tail -n 30 "$DOCKERD_LOG" >&2 || true
            exit 1
        fi
        sleep 1
    done
    log "dockerd is up"
fi

# --- 3. base image ----------------------------------------------------------
bash "$here/base-image.sh"
