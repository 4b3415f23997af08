#!/usr/bin/env bash
# The monitor's GET /metrics, scraped by a real Prometheus server (Debian's
# prometheus, installed by `make test`): train a local cluster while
# Prometheus scrapes it every second, then query Prometheus's HTTP API and
# check kudus_model_version and the rate of kudus_samples_total against the
# run's summary.
#
#   tests/prometheus/test_prometheus.sh BUILD_DIR [BASE_PORT]   (default: random)
set -euo pipefail
bin=$1
# A base the other suites cannot take while this one runs (reserved as
# kd_test_base_port reserves theirs, until this shell ends).
port=${2:-$(python3 "$(dirname "$0")/../python/reserve_base.py" $$)}
prom_port=$((port + 50))
tmp=$(mktemp -d)
# What the runs write to TMPDIR (a killed kudus local's summary) goes with $tmp.
export TMPDIR=$tmp
pids=()
cleanup () {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail () { echo "test_prometheus: FAIL: $*" >&2; exit 1; }
command -v prometheus >/dev/null || fail "prometheus is not installed (make test installs it)"

cat > "$tmp/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: kudus
    static_configs:
      - targets: ['127.0.0.1:$((port + 3))']
YML
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
    --web.listen-address="127.0.0.1:$prom_port" --log.level=warn > "$tmp/prometheus.log" 2>&1 &
pids+=("$!")

# The API answers once Prometheus is up.
query () {
    python3 - "$prom_port" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
port, q = sys.argv[1], sys.argv[2]
url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
with urllib.request.urlopen(url, timeout=5) as r:
    d = json.load(r)
res = d["data"]["result"]
print(res[0]["value"][1] if res else "none")
PY
}
for _ in $(seq 1 50); do
    query 'vector(1)' >/dev/null 2>&1 && break
    sleep 0.2
done
query 'vector(1)' >/dev/null 2>&1 || fail "prometheus did not start: $(tail -5 "$tmp/prometheus.log")"

"$bin/kudus" local --workers 2 --max-seconds 15 --base-port "$port" --quiet true \
    --summary "$tmp/summary.json" > "$tmp/local.log" 2>&1 || fail "kudus local failed: $(tail -5 "$tmp/local.log")"

version=$(query 'max_over_time(kudus_model_version[5m])')
samples=$(query 'max_over_time(kudus_samples_total[5m])')
rate=$(query 'max_over_time(rate(kudus_samples_total[5s])[5m:1s])')
up=$(query 'max_over_time(up{job="kudus"}[5m])')
scrapes=$(query 'sum_over_time(up{job="kudus"}[5m])')
# Per shard: the last scraped counters of each.
shard () { query "max_over_time($1{shard=\"$2\"}[5m])"; }
shards=()
for s in 0 1; do
    for m in kudus_shard_commits_total kudus_shard_pushes_total kudus_shard_pulls_total \
             kudus_shard_received_bytes_total kudus_shard_sent_bytes_total kudus_shard_version; do
        shards+=("$(shard $m $s)")
    done
done
echo "test_prometheus: scraped version=$version samples=$samples max rate=$rate up=$up scrapes=$scrapes"
echo "test_prometheus: shards (commits pushes pulls bytes_in bytes_out version): ${shards[*]}"
python3 - "$tmp/summary.json" "$version" "$samples" "$rate" "$up" "$scrapes" "${shards[@]}" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
version, samples, rate, up, scrapes = (float(x) if x != "none" else None for x in sys.argv[2:7])
per_shard = [[float(x) if x != "none" else None for x in sys.argv[7 + 6 * i:13 + 6 * i]] for i in range(2)]
# BSP: a commit per version on every shard, a push per worker per commit,
# and every push or pull carries the shard's whole range.
floats = 0
for i, (commits, pushes, pulls, bytes_in, bytes_out, sversion) in enumerate(per_shard):
    assert None not in (commits, pushes, pulls, bytes_in, bytes_out, sversion), (i, per_shard[i])
    # A shard's figures are up to a publish interval older than the monitor's.
    assert abs(sversion - version) <= 2 * s["updates_per_second"] + 5 and abs(commits - sversion) <= 1, \
        (i, commits, sversion, version)
    assert abs(pushes - s["workers"] * commits) <= 2 * s["workers"], (i, pushes, commits)
    assert pulls >= commits, (i, pulls, commits)
    assert bytes_in % (4 * pushes) == 0 and bytes_out % (4 * pulls) == 0, (i, bytes_in, pushes)
    assert bytes_in / pushes == bytes_out / pulls, (i, bytes_in / pushes, bytes_out / pulls)
    floats += bytes_in / pushes / 4
assert floats == s["params"], (floats, s["params"])
print(f"test_prometheus: shard counters agree with the run: {floats:.0f} floats across 2 shards")
assert up == 1, "Prometheus never scraped the monitor"
final, per_s = s["updates"], s["updates_per_second"]
# The last scrape lands within a few seconds of the end of training: one
# scrape interval plus the monitor's publish lag, and on a loaded machine
# Prometheus's own scrapes run late (3.3 s of updates in a flake round).
assert version is not None and final - 6 * per_s - 5 <= version <= final, (version, final, per_s)
assert scrapes is not None and scrapes >= 5, ("scrapes during the run", scrapes)
# The samples scraped last lag as the version does.
low = min(0.8, max(0.0, (final - 6 * per_s - 5) / final)) if final else 0.8
assert samples is not None and low * s["samples"] <= samples <= 1.05 * s["samples"], (samples, s["samples"], low)
mean = s["samples"] / s["run_seconds"] if s.get("run_seconds") else s["samples"] / s["wall_seconds"]
assert rate is not None and 0.5 * mean <= rate <= 3 * mean, (rate, mean)
print(f"test_prometheus: summary version={final} samples={s['samples']} mean rate={mean:.0f}/s: OK")
PY
