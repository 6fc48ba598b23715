#!/usr/bin/env bash
# Runs the CUDA backend's tests, benchmarks and serving checks on a GPU machine from
# prebuilt binaries (the GPU machine has no Debian packages: build on the development machine).
#
# Build (PEREGRINE_STATIC links everything but the CUDA libraries statically):
#   cmake -S . -B build-h200 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPEREGRINE_STATIC=ON \
#         -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_POSITION_INDEPENDENT_CODE=ON
#   cmake --build build-h200 -j 2 --target gpu_all
# This fills build-h200/gpu-bin/ (test binaries, benchmarks, the peregrine binary).
#
# Run (repo root on the GPU machine, build-h200/gpu-bin carried along):
#   bash tools/gpu_run.sh tests     kernel + model tests, compute-sanitizer, kernel benchmarks (attention
#                                   with its PyTorch peers: bench/attention/bench_attention.py)
#   bash tools/gpu_run.sh serve     peregrine profile and serve + bench at V4-Flash shapes
#   bash tools/gpu_run.sh model     model parity + sampling tests, then `serve` (one ~9 minute call)
#   bash tools/gpu_run.sh parity    model parity tests and the attention benchmark at 4K context
#   bash tools/gpu_run.sh final     FP8 test, profile with host times, the demo model served on the GPU
#   bash tools/gpu_run.sh kernels   attention + MoE kernel tests, parity, MoE/attention benchmarks, profile
#   bash tools/gpu_run.sh all-tests every GPU test binary, then the MoE and sampling benchmarks
#   bash tools/gpu_run.sh overlap   every GPU test binary, the MoE/sampling/FP8 benchmarks, then
#                                   serve + bench with overlapped steps on and off (V4-Flash
#                                   shapes and the demo model); PARTS="tests" or "serve" for one half,
#                                   TESTS / BENCHES / SERVE_RUNS / PROFILE=0 to narrow it
# Results go to $OUT (default ./gpu-out).
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${PEREGRINE_GPU_BIN:-$ROOT/build-h200/gpu-bin}"
OUT="${OUT:-$ROOT/gpu-out}"
PHASE="${1:-tests}"
PEREGRINE="${PEREGRINE_BIN:-$BIN/../peregrine}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
export PEREGRINE_SOURCE_DIR="$ROOT"

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
} | tee "$OUT/device.txt"

status=0
# Everything written under $OUT travels back as one archive (plus device.txt).
pack() {
  tar czf "$ROOT/.gpu-results.tgz" -C "$OUT" --exclude=results.tgz . 2>/dev/null
  find "$OUT" -mindepth 1 ! -name device.txt -delete
  mv "$ROOT/.gpu-results.tgz" "$OUT/results.tgz"
}
trap pack EXIT
run_test() {  # name, timeout seconds
  local name="$1" limit="$2"
  if [ ! -x "$BIN/$name" ]; then echo "== $name: missing"; status=1; return; fi
  echo "== $name"
  timeout "$limit" "$BIN/$name" --gtest_color=no --gtest_output="xml:$OUT/$name.xml" >"$OUT/$name.log" 2>&1
  local rc=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|Failure|rel L2|worst|identical" "$OUT/$name.log" | tail -30
  echo "$name exit code $rc"
  [ $rc -ne 0 ] && status=1
}

if [ "$PHASE" = "all-tests" ]; then
  for t in attention_kernels_test generic_attention_test hc_kernels_test moe_kernels_test sampling_kernels_test \
           model_ops_test fp8_linear_test cuda_parity_test; do
    [ -x "$BIN/$t" ] && run_test "$t" 150
  done
  for bench in peregrine_moe_bench peregrine_sampling_bench; do
    if [ -x "$BIN/$bench" ]; then
      echo "== $bench"
      timeout 120 "$BIN/$bench" --out "$OUT/$bench.jsonl" >"$OUT/$bench.log" 2>&1
      tail -25 "$OUT/$bench.log"
    fi
  done
  exit $status
fi

# device_seconds PORT: "busy idle" from the server's device-time counters.
device_seconds() {
  curl -s "http://127.0.0.1:$1/metrics" | awk '/^peregrine:device_busy_seconds_total/ {b=$2} /^peregrine:device_idle_seconds_total/ {i=$2} END {print b+0, i+0}'
}

# abort_check PORT: 24 streams cut by the client mid-generation and 8 bad requests while a
# step may be launched; then the server must still answer, with nothing left running.
abort_check() {
  local port="$1" url="http://127.0.0.1:$1/v1/completions"
  echo "== abort check (port $port)"
  local pids=()
  for i in $(seq 1 24); do
    curl -sN --max-time 0.$((RANDOM % 9 + 1)) "$url" -H 'Content-Type: application/json' \
      -d "{\"model\":\"deepseek-v4\",\"prompt\":\"abort $i\",\"max_tokens\":600,\"stream\":true,\"ignore_eos\":true}" \
      >/dev/null 2>&1 &
    pids+=($!)
  done
  local bad=0
  for body in '{' '{"prompt":"x","max_tokens":-1}' '{"prompt":"x","temperature":9}' '{"prompt":[99999999]}' \
              '{"prompt":"x","top_p":0}' '{"prompt":"x","logprobs":99}' '{"prompt":"x","n":0}' '{"prompt":"x","stop":7}'; do
    code=$(curl -s --max-time 30 -o /dev/null -w '%{http_code}' "$url" -H 'Content-Type: application/json' -d "$body")
    [ "$code" = 400 ] || { echo "bad request $body -> $code (want 400)"; bad=1; }
  done
  wait "${pids[@]}"  # the curls only: the server is a child of this shell too
  sleep 1
  code=$(curl -s --max-time 60 -o "$OUT/abort_after.json" -w '%{http_code}' "$url" -H 'Content-Type: application/json' \
    -d '{"model":"deepseek-v4","prompt":"after the aborts","max_tokens":16,"temperature":0}')
  running=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^peregrine:num_requests_running/ {print $2}')
  echo "after the aborts: HTTP $code, running $running, bad-request check $([ $bad = 0 ] && echo ok || echo FAILED)"
  if [ "$code" != 200 ] || [ "${running%.*}" != 0 ] || [ $bad != 0 ]; then status=1; fi
}

# serve_bench NAME PORT "CONCURRENCIES" BENCH_ARGS -- SERVE_ARGS: one server, one bench run per
# concurrency (results as NAME.*), with the device idle fraction between steps of each run.
serve_bench() {
  local name="$1" port="$2" levels="$3" bench_args="$4"
  shift 5
  "$PEREGRINE" serve --device cuda --port "$port" "$@" >"$OUT/serve_$name.log" 2>&1 &
  local server=$!
  for i in $(seq 1 90); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 $server 2>/dev/null || break
    sleep 1
  done
  echo "== serve + bench: $name"
  grep -E "CUDA model|error" "$OUT/serve_$name.log"
  for c in $levels; do
    read -r b0 i0 <<<"$(device_seconds "$port")"
    # shellcheck disable=SC2086
    timeout 150 "$PEREGRINE" bench --base-url "http://127.0.0.1:$port" $bench_args --concurrency "$c" \
      --result-file "$OUT/serve_bench_$name.jsonl" >"$OUT/bench_${name}_c$c.log" 2>&1 || status=1
    read -r b1 i1 <<<"$(device_seconds "$port")"
    grep -E "output throughput|TPOT|TTFT" "$OUT/bench_${name}_c$c.log" | head -8 | sed "s/^/  c=$c /"
    awk -v b="$b1" -v B="$b0" -v i="$i1" -v I="$i0" -v c="$c" -v n="$name" 'BEGIN {
      busy = b - B; idle = i - I; f = (busy + idle > 0) ? idle / (busy + idle) : 0;
      printf "{\"run\": \"%s\", \"concurrency\": %s, \"device_busy_s\": %.4f, \"device_idle_s\": %.4f, \"idle_fraction\": %.4f}\n", n, c, busy, idle, f }' \
      | tee -a "$OUT/device_idle.jsonl"
  done
  [[ "$name" == *overlap ]] && abort_check "$port"
  kill -INT $server 2>/dev/null
  wait $server 2>/dev/null
}

if [ "$PHASE" = "overlap" ]; then
  PARTS="${PARTS:-tests serve}"  # either or both
  TESTS="${TESTS:-model_ops_test cuda_engine_test cuda_mxfp4_test cuda_fp8_test cuda_parity_test sampling_kernels_test
    moe_kernels_test generic_attention_test attention_kernels_test hc_kernels_test fp8_linear_test fp8_w8a16_test}"
  BENCHES="${BENCHES:-peregrine_moe_bench peregrine_sampling_bench peregrine_fp8_bench}"
  # shellcheck disable=SC2086
  [[ " $PARTS " == *" tests "* ]] && for t in $TESTS; do
    [ -x "$BIN/$t" ] && run_test "$t" 150
  done
  # shellcheck disable=SC2086
  [[ " $PARTS " == *" tests "* ]] && for bench in $BENCHES; do
    if [ -x "$BIN/$bench" ]; then
      echo "== $bench"
      timeout 120 "$BIN/$bench" --out "$OUT/$bench.jsonl" >"$OUT/$bench.log" 2>&1 || status=1
      tail -30 "$OUT/$bench.log"
    fi
  done
  [[ " $PARTS " == *" serve "* ]] || exit $status
  FLASH="$ROOT/bench/configs/deepseek-v4-flash"
  SERVE_RUNS="${SERVE_RUNS:-flash_overlap demo_overlap flash_sync demo_sync}"
  [ "${PROFILE:-1}" = 1 ] && echo "== profile: dense bf16 vs fp8 (V4-Flash shapes, 4 layers, MXFP4 experts)"
  [ "${PROFILE:-1}" = 1 ] && for dense in bf16 fp8; do
    timeout 100 "$PEREGRINE" profile --model-path "$FLASH" --synthetic-weights --num-layers 4 --expert-format mxfp4 \
      --dense-format $dense --batch-sizes 1,16,64 --context 4096 --steps 10 --out "$OUT/profile_dense_$dense.jsonl" \
      >"$OUT/profile_dense_$dense.log" 2>&1 || status=1
    grep -E "^model|^batch|per layer|projections" "$OUT/profile_dense_$dense.log"
  done
  for mode in overlap sync; do
    extra=""
    [ "$mode" = sync ] && extra="--disable-overlap-schedule"
    # shellcheck disable=SC2086
    [[ " $SERVE_RUNS " == *" flash_$mode "* ]] && serve_bench "flash_$mode" 8123 "1 16 64" "--num-prompts 128 --input-len 256 --output-len 64 --warmup 4" -- \
      --model-path "$FLASH" --synthetic-weights --num-layers 4 --expert-format mxfp4 --max-num-seqs 64 \
      --max-model-len 4096 --max-num-batched-tokens 2048 $extra
    # shellcheck disable=SC2086
    [[ " $SERVE_RUNS " == *" demo_$mode "* ]] && serve_bench "demo_$mode" 8124 "1 16" "--num-prompts 64 --input-len 128 --output-len 64" -- $extra
  done
  exit $status
fi

if [ "$PHASE" = "kernels" ]; then
  run_test attention_kernels_test 150
  run_test moe_kernels_test 150
  run_test cuda_parity_test 150
  if [ -x "$BIN/peregrine_moe_bench" ]; then
    echo "== peregrine_moe_bench"
    timeout 120 "$BIN/peregrine_moe_bench" --out "$OUT/peregrine_moe_bench.jsonl" >"$OUT/moe_bench.log" 2>&1
    tail -30 "$OUT/moe_bench.log"
  fi
  echo "== profile (V4-Flash shapes, 4 layers, MXFP4 experts)"
  timeout 100 "$PEREGRINE" profile --model-path "$ROOT/bench/configs/deepseek-v4-flash" --synthetic-weights \
    --num-layers 4 --expert-format mxfp4 --batch-sizes 1,16,64 --context 4096 --steps 10 \
    --out "$OUT/profile.jsonl" >"$OUT/profile_mxfp4.log" 2>&1 || status=1
  grep -E "^model|^batch|per layer|moe_experts" "$OUT/profile_mxfp4.log"
  if [ -f "$BIN/libperegrine_attention_bench.so" ]; then
    echo "== attention benchmark at 4K and 1M context"
    timeout 150 "$PY" "$ROOT/bench/attention/bench_attention.py" --lib "$BIN/libperegrine_attention_bench.so" \
      --contexts 4096,1048576 --out "$OUT/bench_attention.jsonl" >"$OUT/bench_attention.log" 2>&1
    tail -45 "$OUT/bench_attention.log"
  fi
  exit $status
fi

if [ "$PHASE" = "final" ]; then
  [ -x "$BIN/fp8_linear_test" ] && run_test fp8_linear_test 90
  echo "== profile (V4-Flash shapes, 4 layers, MXFP4 experts)"
  timeout 100 "$PEREGRINE" profile --model-path "$ROOT/bench/configs/deepseek-v4-flash" --synthetic-weights \
    --num-layers 4 --expert-format mxfp4 --batch-sizes 1,16,64 --context 4096 --steps 10 \
    --out "$OUT/profile.jsonl" >"$OUT/profile_mxfp4.log" 2>&1 || status=1
  grep -E "^model|^batch|per layer" "$OUT/profile_mxfp4.log"
  echo "== serve the demo model on the GPU + bench"
  "$PEREGRINE" serve --device cuda --port 8124 >"$OUT/serve_demo.log" 2>&1 &
  SERVER=$!
  for i in $(seq 1 60); do
    curl -sf http://127.0.0.1:8124/health >/dev/null 2>&1 && break
    kill -0 $SERVER 2>/dev/null || break
    sleep 1
  done
  curl -s http://127.0.0.1:8124/v1/completions -H 'Content-Type: application/json' \
    -d '{"model":"deepseek-v4","prompt":"Hello","max_tokens":8,"temperature":0}' | head -c 600; echo
  timeout 100 "$PEREGRINE" bench --base-url http://127.0.0.1:8124 --num-prompts 64 --input-len 128 \
    --output-len 32 --concurrency 1,16 --result-file "$OUT/serve_demo_bench.jsonl" >"$OUT/bench_demo.log" 2>&1 || status=1
  grep -E "concurrency|completed|output throughput|TTFT|TPOT" "$OUT/bench_demo.log"
  kill -INT $SERVER 2>/dev/null
  wait $SERVER 2>/dev/null
  grep -E "CUDA model|ready|error" "$OUT/serve_demo.log"
  exit $status
fi

if [ "$PHASE" = "parity" ]; then
  run_test cuda_parity_test 150
  [ -x "$BIN/fp8_linear_test" ] && run_test fp8_linear_test 90
  if [ -x "$BIN/peregrine_fp8_bench" ]; then
    echo "== peregrine_fp8_bench"
    timeout 90 "$BIN/peregrine_fp8_bench" --out "$OUT/peregrine_fp8_bench.jsonl" >"$OUT/fp8_bench.log" 2>&1
    tail -40 "$OUT/fp8_bench.log"
  fi
  if [ -f "$BIN/libperegrine_attention_bench.so" ]; then
    echo "== attention benchmark at 4K context (indexer max-context check)"
    timeout 150 "$PY" "$ROOT/bench/attention/bench_attention.py" --lib "$BIN/libperegrine_attention_bench.so" \
      --contexts 4096 --out "$OUT/bench_attention.jsonl" >"$OUT/bench_attention.log" 2>&1
    tail -25 "$OUT/bench_attention.log"
  fi
  exit $status
fi

if [ "$PHASE" = "model" ]; then
  [ -x "$BIN/model_ops_test" ] && run_test model_ops_test 40
  run_test cuda_parity_test 150
  run_test sampling_kernels_test 60
  if [ -x "$BIN/peregrine_sampling_bench" ]; then
    echo "== peregrine_sampling_bench"
    timeout 60 "$BIN/peregrine_sampling_bench" --out "$OUT/peregrine_sampling_bench.jsonl" >"$OUT/sampling_bench.log" 2>&1
    tail -30 "$OUT/sampling_bench.log"
  fi
  PHASE=serve
fi

if [ "$PHASE" = "tests" ]; then
  run_test attention_kernels_test 150
  run_test sampling_kernels_test 60
  run_test generic_attention_test 120
  run_test hc_kernels_test 120
  run_test moe_kernels_test 150
  run_test cuda_parity_test 240
  SANITIZER="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
  if [ -n "$SANITIZER" ] && [ -x "$BIN/cuda_parity_test" ]; then
    echo "== compute-sanitizer memcheck (one parity case)"
    timeout 150 "$SANITIZER" --tool memcheck --error-exitcode 3 "$BIN/cuda_parity_test" --gtest_color=no \
      --gtest_filter='Fixtures/CudaParityTest.BatchedDecodeMatchesCpuBackend/v4_tiny_yarn' >"$OUT/sanitizer.log" 2>&1
    rc=$?
    grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) " "$OUT/sanitizer.log" | tail -5
    echo "sanitizer exit code $rc"
    [ $rc -ne 0 ] && status=1
  fi
  if [ -f "$BIN/libperegrine_attention_bench.so" ]; then
    echo "== attention benchmark (every context, PyTorch peers)"
    timeout 190 "$PY" "$ROOT/bench/attention/bench_attention.py" --lib "$BIN/libperegrine_attention_bench.so" \
      --out "$OUT/bench_attention.jsonl" >"$OUT/bench_attention.log" 2>&1 || status=1
    tail -70 "$OUT/bench_attention.log"
  fi
  for bench in peregrine_moe_bench peregrine_hc_bench; do
    if [ -x "$BIN/$bench" ]; then
      echo "== $bench"
      timeout 150 "$BIN/$bench" --out "$OUT/$bench.jsonl" >"$OUT/$bench.log" 2>&1
      rc=$?
      tail -40 "$OUT/$bench.log"
      [ $rc -ne 0 ] && { echo "$bench exit code $rc"; status=1; }
    fi
  done
  exit $status
fi

if [ "$PHASE" = "serve" ]; then
  FLASH="$ROOT/bench/configs/deepseek-v4-flash"
  LAYERS="${LAYERS:-4}"
  echo "== profile (V4-Flash shapes, $LAYERS layers, synthetic weights)"
  for fmt in ${PROFILE_FORMATS:-mxfp4 bf16}; do
    timeout 100 "$PEREGRINE" profile --model-path "$FLASH" --synthetic-weights --num-layers "$LAYERS" \
      --expert-format $fmt --batch-sizes 1,16,64 --context 4096 --steps 10 --out "$OUT/profile.jsonl" >"$OUT/profile_$fmt.log" 2>&1
    rc=$?
    cat "$OUT/profile_$fmt.log" | head -80
    [ $rc -ne 0 ] && { echo "profile $fmt exit code $rc"; status=1; }
  done
  echo "== serve + bench (V4-Flash shapes, $LAYERS layers, MXFP4 experts)"
  "$PEREGRINE" serve --device cuda --model-path "$FLASH" --synthetic-weights --num-layers "$LAYERS" \
    --expert-format mxfp4 --max-num-seqs 64 --max-model-len 4096 --max-num-batched-tokens 2048 --port 8123 \
    >"$OUT/serve.log" 2>&1 &
  SERVER=$!
  for i in $(seq 1 90); do
    if curl -sf http://127.0.0.1:8123/health >/dev/null 2>&1; then break; fi
    if ! kill -0 $SERVER 2>/dev/null; then break; fi
    sleep 1
  done
  grep -E "CUDA model|ready|error" "$OUT/serve.log"
  timeout 150 "$PEREGRINE" bench --base-url http://127.0.0.1:8123 --num-prompts 128 --input-len 256 \
    --output-len 64 --concurrency 16,64 --warmup 4 --result-file "$OUT/serve_bench.jsonl" >"$OUT/bench.log" 2>&1
  rc=$?
  tail -40 "$OUT/bench.log"
  [ $rc -ne 0 ] && { echo "bench exit code $rc"; status=1; }
  curl -s http://127.0.0.1:8123/metrics | grep -E "^peregrine:(num_requests|generation_tokens|time_to_first)" | head -20 \
    >"$OUT/metrics.txt" 2>&1
  kill -INT $SERVER 2>/dev/null
  wait $SERVER 2>/dev/null
  tail -5 "$OUT/serve.log"
  exit $status
fi
echo "unknown phase $PHASE (tests or serve)" >&2
exit 2
