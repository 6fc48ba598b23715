#!/usr/bin/env bash
# Runs the CUDA attention kernels' tests and benchmark on a GPU machine, from prebuilt binaries.
#
# Build (on a machine with the Debian packages, e.g. the development machine; the GPU machine
# has no GoogleTest):
#   cmake -S . -B build-h200 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPEREGRINE_STATIC=ON \
#         -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_POSITION_INDEPENDENT_CODE=ON
#   cmake --build build-h200 -j 2 --target attention_kernels_test peregrine_attention_bench
# This leaves build-h200/gpu-bin/{attention_kernels_test, libperegrine_attention_bench.so}:
# GoogleTest, libstdc++ and the CUDA runtime linked statically; cuBLAS is found at run time
# (CUDA toolkit or PyTorch's wheels).
#
# Run (GPU machine, repo root, with build-h200/gpu-bin carried along):
#   bash tools/gpu_attention_run.sh
# Writes into $OUT (default ./gpu-out): device.txt, attention_kernels_test.{log,xml},
# sanitizer.log, bench_attention.{jsonl,log}. Stays under 8 minutes.
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${PEREGRINE_GPU_BIN:-$ROOT/build-h200/gpu-bin}"
OUT="${OUT:-$ROOT/gpu-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1

if [ ! -x "$BIN/attention_kernels_test" ] || [ ! -f "$BIN/libperegrine_attention_bench.so" ]; then
  echo "missing $BIN/attention_kernels_test or libperegrine_attention_bench.so: build them first (see the header)" >&2
  exit 2
fi

# cuBLAS 13: the toolkit's, else the one in PyTorch's nvidia wheels.
CUBLAS_DIRS="$("$PY" - <<'PYEOF' 2>/dev/null
import glob, os, sys
dirs = []
for base in ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]:
    if glob.glob(os.path.join(base, "libcublas.so.13*")):
        dirs.append(base)
for p in sys.path:
    for hit in glob.glob(os.path.join(p, "nvidia", "**", "libcublas.so.13*"), recursive=True):
        dirs.append(os.path.dirname(hit))
print(":".join(dict.fromkeys(dirs)))
PYEOF
)"
export LD_LIBRARY_PATH="${CUBLAS_DIRS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1
  echo "cuBLAS from: $CUBLAS_DIRS"
  "$PY" -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name())' 2>&1
} | tee "$OUT/device.txt"

status=0
echo "== kernel tests"
timeout 180 "$BIN/attention_kernels_test" --gtest_color=no --gtest_output="xml:$OUT/attention_kernels_test.xml" \
  >"$OUT/attention_kernels_test.log" 2>&1
rc=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|Failure|worst element" "$OUT/attention_kernels_test.log" | tail -40
echo "tests exit code $rc"
[ $rc -ne 0 ] && status=1

echo "== compute-sanitizer memcheck (short filter)"
SANITIZER="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
if [ -n "$SANITIZER" ]; then
  timeout 90 "$SANITIZER" --tool memcheck --error-exitcode 3 "$BIN/attention_kernels_test" --gtest_color=no \
    --gtest_filter='SparseAttentionTest.WithoutRope:IndexerTest.TopKTiesAndDistributions:CaptureTest.NormRopeCompressorSteps:CaptureTest.IndexerTopKAttentionChain:RmsNormTest.PerHeadInPlace' \
    >"$OUT/sanitizer.log" 2>&1
  rc=$?
  grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) " "$OUT/sanitizer.log" | tail -5
  echo "sanitizer exit code $rc"
  [ $rc -ne 0 ] && status=1
else
  echo "compute-sanitizer not found" | tee "$OUT/sanitizer.log"
fi

echo "== benchmark"
timeout 190 "$PY" "$ROOT/bench/attention/bench_attention.py" --lib "$BIN/libperegrine_attention_bench.so" \
  --out "$OUT/bench_attention.jsonl" >"$OUT/bench_attention.log" 2>&1
rc=$?
tail -70 "$OUT/bench_attention.log"
echo "benchmark exit code $rc"
[ $rc -ne 0 ] && status=1
exit $status
