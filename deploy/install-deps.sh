#!/usr/bin/env bash
# Install the Debian packages Kudus needs, only those that are missing.
# Safe to run again; it does nothing when all are present.
set -euo pipefail

packages=(
    build-essential cmake pkg-config
    libzmq3-dev libczmq-dev libmsgpack-dev libopenblas-dev zlib1g-dev
    libjson-c-dev libmicrohttpd-dev
    libcriterion-dev
    clang libclang-rt-14-dev
    dataset-fashion-mnist
    gnuplot-nox
    python3
)
# `install-deps.sh test`: also what the test suites need beyond the build
# (the optimizer is checked against PyTorch's, the metrics against a real
# Prometheus, the dashboard in a real browser).
if [ "${1:-}" = "test" ]; then
    packages+=(python3-numpy python3-torch python3-pytest prometheus chromium chromium-driver python3-zmq iproute2 iptables)
    # The Python package installed into a fresh venv (tests/python/test_torch_day.py).
    packages+=(python3-venv python3-setuptools python3-wheel)
    # Node.js for the Kubernetes manifests' validators (tests/k8s), unless
    # a node and npm are already on the PATH.
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        packages+=(nodejs npm)
    fi
fi
# Extra packages a caller asks for (for example the docker tooling).
if [ -n "${KUDUS_EXTRA_PACKAGES:-}" ]; then
    read -r -a extra <<< "$KUDUS_EXTRA_PACKAGES"
    packages+=("${extra[@]}")
fi

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: run as root, or: sudo apt-get install ${missing[*]}" >&2
    exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
