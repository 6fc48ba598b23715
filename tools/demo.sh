#!/usr/bin/env bash
# Installs dependencies, builds, and starts Peregrine on the embedded demo model
# (a small DeepSeek-V4-architecture model with deterministic weights and the real tokenizer).
# Extra arguments go to `peregrine serve` (e.g. --port 8001, --api-key KEY).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/tools/setup.sh"
"$ROOT/tools/build.sh"
exec "${PEREGRINE_BUILD_DIR:-$ROOT/build}/peregrine" serve --host "${HOST:-127.0.0.1}" --port "${PORT:-8000}" "$@"
