#!/usr/bin/env bash
# Provide the debian:bookworm-slim image that deploy/Dockerfile builds FROM,
# on a machine that reaches Debian's package mirror but no container registry.
#
# When the image is already present, do nothing.  Otherwise, when
# KUDUS_BASE_PULL=1, try `docker pull` first (bounded by a timeout).  Failing
# that, build it: debootstrap a minbase bookworm from the mirror apt uses on
# this machine, then `docker import` the tree.  The image gets a sources.list
# for bookworm main on the same mirror, so apt-get works inside it.
#
#   deploy/base-image.sh                    build it when missing
#   KUDUS_BASE_MIRROR=URL deploy/base-image.sh   use another Debian mirror
set -euo pipefail

IMAGE="${KUDUS_BASE_IMAGE:-debian:bookworm-slim}"
SUITE=bookworm
PULL_TIMEOUT_S="${KUDUS_BASE_PULL_TIMEOUT_S:-20}"

log () { echo "base-image: $*" >&2; }

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    exit 0
fi

if [ "${KUDUS_BASE_PULL:-0}" = 1 ]; then
    log "trying docker pull $IMAGE (at most ${PULL_TIMEOUT_S}s)"
    if timeout "$PULL_TIMEOUT_S" docker pull -q "$IMAGE" >/dev/null 2>&1; then
        exit 0
    fi
    log "pull failed; building $IMAGE locally"
fi

# The mirror apt uses here: the first URI that serves the bookworm suite, in
# either sources format (one-line .list or deb822 .sources).
s_find_mirror () {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk -v suite="$SUITE" '
            $1 == "deb" {
                i = 2
                if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                if ($(i + 1) == suite) { print $i; exit }
            }' "$f"
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        # deb822: stanzas separated by blank lines; pick a stanza whose
        # Suites field lists the bare suite name.
        awk -v suite="$SUITE" '
            BEGIN { RS = ""; FS = "\n" }
            {
                uri = ""; ok = 0; deb = 0
                for (n = 1; n <= NF; n++) {
                    split ($n, kv, /:[ \t]*/)
                    if (kv[1] == "URIs") { sub (/^URIs:[ \t]*/, "", $n); split ($n, u, /[ \t]+/); uri = u[1] }
                    if (kv[1] == "Types" && $n ~ /(^|[ \t])deb([ \t]|$)/) deb = 1
                    if (kv[1] == "Suites") {
                        m = split ($n, s, /[ \t]+/)
                        for (j = 2; j <= m; j++) if (s[j] == suite) ok = 1
                    }
                }
                if (ok && deb && uri != "") { print uri; exit }
            }' "$f"
    done
}
mirror="${KUDUS_BASE_MIRROR:-$(s_find_mirror | head -n 1)}"
mirror="${mirror:-http://deb.debian.org/debian}"
mirror="${mirror%/}"

if ! command -v debootstrap >/dev/null 2>&1; then
    log "debootstrap is missing: apt-get install debootstrap (or run deploy/docker-setup.sh)"
    exit 1
fi

root="$(mktemp -d /tmp/kudus-rootfs.XXXXXX)"
trap 'rm -rf "$root"' EXIT
start=$SECONDS
log "debootstrap --variant=minbase $SUITE from $mirror"
debootstrap --variant=minbase "$SUITE" "$root" "$mirror" >"$root.log" 2>&1 || {
    log "debootstrap failed; last lines of its log:"
    tail -n 30 "$root.log" >&2
    rm -f "$root.log"
    exit 1
}
rm -f "$root.log"

# Trim it like the official slim image: no package caches or lists, no docs
# the runtime never reads.  Keep apt working with a plain sources.list.
echo "deb $mirror $SUITE main" > "$root/etc/apt/sources.list"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
       "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
       "$root"/var/log/*.log "$root"/var/log/apt/*
# Inside a container, nothing should try to start services during apt-get.
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"

tar --numeric-owner -C "$root" -c . |
    docker import --change 'CMD ["bash"]' - "$IMAGE" >/dev/null
log "built $IMAGE in $((SECONDS - start))s"
