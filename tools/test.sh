#!/usr/bin/env bash
# The test command: installs dependencies, builds (CUDA code included when nvcc exists), and
# runs every test. GPU tests carry the label `gpu` and report skipped without a GPU. Then a
# clang tree builds the libFuzzer targets and fuzzes each briefly (PEREGRINE_FUZZ_SECONDS).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$ROOT/tools/setup.sh"
"$ROOT/tools/build.sh"
(cd "${PEREGRINE_BUILD_DIR:-$ROOT/build}" && ctest --output-on-failure -j 2 --timeout 1800)

if command -v clang++ >/dev/null 2>&1 && [ "${PEREGRINE_SKIP_FUZZ:-0}" != 1 ]; then
  FUZZ="${PEREGRINE_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
  cmake -S "$ROOT" -B "$FUZZ" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DPEREGRINE_CUDA=OFF -DPEREGRINE_FUZZ=ON \
    -DPEREGRINE_FUZZ_SECONDS="${PEREGRINE_FUZZ_SECONDS:-15}" \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  cmake --build "$FUZZ" -j "${PEREGRINE_JOBS:-2}" --target fuzz_all
  (cd "$FUZZ" && ctest --output-on-failure -j 2 -L fuzz -E fuzz_replay)
fi
