#!/usr/bin/env bash
# Configures and builds Peregrine in build/ (Release, Ninja, -j2 by default).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${PEREGRINE_BUILD_DIR:-$ROOT/build}"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE="${PEREGRINE_BUILD_TYPE:-Release}" "$@"
cmake --build "$BUILD" -j "${PEREGRINE_JOBS:-2}"
