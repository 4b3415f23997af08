#!/usr/bin/env bash
# deploy/k8s/ validated offline (tests/k8s/validate.mjs says what is and is
# not checked), with the validators pinned in tests/k8s/package-lock.json
# and installed from the npm registry into the build directory once.  The
# validator must also refuse a copy of the manifests with a misspelt field
# and an unknown setting, so that this test can fail.
#
#   tests/k8s/test_k8s.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
bin=$2
fail () { echo "test_k8s: FAIL: $*" >&2; exit 1; }
command -v node >/dev/null || fail "node is missing (make test installs nodejs and npm when absent)"
command -v npm >/dev/null || fail "npm is missing (make test installs nodejs and npm when absent)"
tools="$bin/k8s-validate"
mkdir -p "$tools"
if ! cmp -s "$src/tests/k8s/package-lock.json" "$tools/package-lock.json" || [ ! -d "$tools/node_modules" ]; then
    cp "$src/tests/k8s/package.json" "$src/tests/k8s/package-lock.json" "$tools/"
    (cd "$tools" && npm ci --no-audit --no-fund --loglevel=error) || fail "npm ci of the validators"
fi
cp "$src/tests/k8s/validate.mjs" "$tools/"
node "$tools/validate.mjs" "$src/deploy/k8s" "$bin" || fail "deploy/k8s/ is not valid"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$src"/deploy/k8s/*.yaml "$tmp/"
sed -i '0,/replicas:/s//replicaz:/' "$tmp/scheduler.yaml"
sed -i '0,/name: KUDUS_/s//name: KUDUS_NO_SUCH_/' "$tmp/worker.yaml"
if node "$tools/validate.mjs" "$tmp" "$bin" > "$tmp/out" 2>&1; then
    fail "a manifest with a misspelt field and an unknown setting passed"
fi
grep -q "replicaz" "$tmp/out" || fail "the misspelt field was not named: $(cat "$tmp/out")"
grep -q "KUDUS_NO_SUCH_" "$tmp/out" || fail "the unknown setting was not named: $(cat "$tmp/out")"
echo "test_k8s: a broken copy is refused: $(grep -c validate-k8s "$tmp/out") errors"
echo "test_k8s: OK"
