#!/usr/bin/env bash
# The test command: installs dependencies, builds (CUDA code included when nvcc exists),
# and runs every test. GPU tests carry the label `gpu` and report skipped without a GPU.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/tools/setup.sh"
"$ROOT/tools/build.sh"
cd "${PEREGRINE_BUILD_DIR:-$ROOT/build}"
ctest --output-on-failure -j 2 --timeout 1800
