#!/usr/bin/env bash
# The compose profile for a user's image (issue 34 section 5), checked
# without an engine: `docker-compose --profile user config` must give a
# user-worker service that runs KUDUS_USER_IMAGE with KUDUS_USER_COMMAND in
# KUDUS_USER_WORKERS replicas, each with KUDUS_SCHEDULER, KUDUS_MONITOR and
# KUDUS_WORKERS set, in the "user" profile only; and the files without the
# variables must still make a valid project. The cluster itself is run by
# tests/compose/test_compose.sh where an engine answers.
#
# Exit 0 pass, 1 fail, 77 skipped (no docker-compose, or no PyYAML).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
command -v docker-compose > /dev/null || { echo "SKIP: no docker-compose"; exit 77; }
python3 -c 'import yaml' 2> /dev/null || { echo "SKIP: no PyYAML"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail () { echo "FAIL: $*"; exit 1; }

cd "$root" || fail "no $root"
# Settings of the calling environment must not leak into the check.
unset KUDUS_USER_IMAGE KUDUS_USER_COMMAND KUDUS_USER_WORKERS KUDUS_WORKERS KUDUS_MODEL
env KUDUS_MODEL=external KUDUS_USER_IMAGE=example/train:1 \
    KUDUS_USER_COMMAND="python3 train.py --epochs 2 --lr 0.05" KUDUS_USER_WORKERS=3 \
    docker-compose -p kudususer --profile user config > "$work/user.yml" 2> "$work/user.err" ||
    { cat "$work/user.err"; fail "docker-compose --profile user config"; }
docker-compose -p kudususer config > "$work/plain.yml" 2> "$work/plain.err" ||
    { cat "$work/plain.err"; fail "docker-compose config without the user's variables"; }

python3 - "$work/user.yml" "$work/plain.yml" <<'PY' || exit 1
import sys
import yaml

user = yaml.safe_load(open(sys.argv[1]))["services"]
plain = yaml.safe_load(open(sys.argv[2]))["services"]
problems = []


def expect(what, got, want):
    if got != want:
        problems.append(f"{what}: {got!r}, expected {want!r}")


u = user.get("user-worker")
if u is None:
    sys.exit("FAIL: no user-worker service under --profile user")
expect("image", u.get("image"), "example/train:1")
command = u.get("command")
expect("command", command if isinstance(command, str) else " ".join(command),
       "python3 train.py --epochs 2 --lr 0.05")
expect("replicas", int(u.get("deploy", {}).get("replicas", 0)), 3)
expect("profiles", u.get("profiles"), ["user"])
env = u.get("environment", {})
expect("KUDUS_SCHEDULER", env.get("KUDUS_SCHEDULER"), "tcp://scheduler:7000")
expect("KUDUS_MONITOR", env.get("KUDUS_MONITOR"), "tcp://monitor:7001")
expect("KUDUS_WORKERS", str(env.get("KUDUS_WORKERS")), "3")
expect("scheduler's model", user["scheduler"]["environment"].get("KUDUS_MODEL"), "external")
# The scheduler and monitor it names are services of the same project.
for name in ("scheduler", "monitor"):
    if name not in user:
        problems.append(f"no {name} service beside user-worker")
if "scheduler" not in u.get("depends_on", {}):
    problems.append("user-worker does not depend on the scheduler")
# Without the variables: the defaults, and the built-in services unchanged.
p = plain.get("user-worker", {})
expect("default image", p.get("image"), "kudus-user:latest")
expect("default replicas", int(p.get("deploy", {}).get("replicas", 0)), 2)
expect("built-in worker's command", plain["worker"].get("command"), ["kudus-worker"])
if problems:
    sys.exit("FAIL: " + "; ".join(problems))
print("compose user profile: image, command, 3 replicas and KUDUS_SCHEDULER, KUDUS_MONITOR, "
      "KUDUS_WORKERS as expected")
PY
echo "PASS"
