#!/usr/bin/env bash
# Runs the CUDA backend's tests, benchmarks and serving checks on a GPU machine from
# prebuilt binaries (the GPU machine has no Debian packages: build on the development machine).
#
# Build (PEREGRINE_STATIC links everything but the CUDA libraries statically):
#   cmake -S . -B build-h200 -G Ninja -DCMAKE_BUILD_TYPE=Release -DPEREGRINE_STATIC=ON \
#         -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
#         -DPEREGRINE_EMBED_DEMO_MODEL=OFF
#   cmake --build build-h200 -j 2 --target gpu_all
# This fills build-h200/gpu-bin/ (test binaries, benchmarks, the peregrine binary). To move
# them, one tar of peregrine and gpu-bin compressed with `xz --lzma2=preset=9,dict=512MiB`: the
# static binaries share most of their bytes, and a dictionary that spans them keeps the
# archive near 24 MB. The demo model is left out of the binary (it would add ~9 MB of poorly
# compressing weights); the servers here load it from the repository's models/ instead.
#
# Run (repo root on the GPU machine, build-h200/gpu-bin carried along):
#   bash tools/gpu_run.sh tests     kernel + model tests, compute-sanitizer, kernel benchmarks (attention
#                                   with its PyTorch peers: bench/attention/bench_attention.py)
#   bash tools/gpu_run.sh serve     peregrine profile and serve + bench at V4-Flash shapes
#   bash tools/gpu_run.sh model     model parity + sampling tests, then `serve` (one ~9 minute call)
#   bash tools/gpu_run.sh parity    model parity tests and the attention benchmark at 4K context
#   bash tools/gpu_run.sh final     FP8 test, profile with host times, the demo model served on the GPU
#   bash tools/gpu_run.sh kernels   attention + MoE kernel tests, parity, MoE/attention benchmarks, profile
#   bash tools/gpu_run.sh all-tests every gpu-labelled test (gpu-bin/gpu_tests.txt, from ctest's labels),
#                                   then the MoE and sampling benchmarks (BENCHES="" for none)
#   bash tools/gpu_run.sh kv-tests  every gpu-labelled test, then peregrine profile of this tree and of
#                                   the pre-change binary ($PEREGRINE_OLD), interleaved twice
#   bash tools/gpu_run.sh profile-ab every gpu-labelled test (TESTS narrows it, TESTS=" " none), then peregrine
#                                   profile of this tree and of $PEREGRINE_OLD at V4-Flash shapes, interleaved
#                                   PROFILE_ROUNDS times (default 2); PROFILE_ARGS adds flags to both;
#                                   PROFILE_BINS="name=path ..." profiles other binaries instead
#   bash tools/gpu_run.sh moe-ab    the MoE kernels of several peregrine_moe_bench binaries (MOE_BINS="name=path
#                                   ...") run alternately MOE_ROUNDS times (default 2) with MOE_ARGS, then a
#                                   table of each op's times per binary (tools/moe_ab_table.py); TESTS
#                                   runs test binaries first
#   bash tools/gpu_run.sh ncu       Nsight Compute (clocks not locked) over one benchmark run: NCU_CMD (default
#                                   peregrine_moe_bench --format mxfp4 --batch 1), the first NCU_COUNT (4)
#                                   launches of the kernels matching the regex NCU_KERNELS (the MoE GEMMs),
#                                   NCU_SECTIONS (speed of light, scheduler, warp states, memory, occupancy,
#                                   launch, instructions); the report in ncu.txt
#   bash tools/gpu_run.sh sampling-ab the test binaries in TESTS, then several peregrine_sampling_bench
#                                   binaries (SAMPLING_BINS="name=path ...") alternately SAMPLING_ROUNDS
#                                   times (default 2) with --phases, and each shape's time per run
#   bash tools/gpu_run.sh kv-serve  the KV system at V4-Flash shapes: 64-stream throughput against
#                                   $PEREGRINE_OLD, prefix-cache TTFT (256 requests, 8K shared prefix)
#                                   and greedy agreement, --max-model-len 1048576 (report vs the
#                                   device, 64 x 4K streams), TPOT at 200K vs 8K, one 500K prompt
#                                   beside 16 streams; STEPS narrows it
#   bash tools/gpu_run.sh overlap   every GPU test binary, the MoE/sampling/FP8 benchmarks, then
#                                   serve + bench with overlapped steps on and off (V4-Flash
#                                   shapes and the demo model); PARTS="tests" or "serve" for one half,
#                                   TESTS / BENCHES / SERVE_RUNS / PROFILE=0 to narrow it
#   bash tools/gpu_run.sh fidelity  every gpu-labelled test (TESTS narrows it, TESTS=" " none), then
#                                   tools/demo_model_fidelity.py: the trained demo model's held-out
#                                   perplexity, top-1 agreement and KL, Peregrine CPU / CUDA bf16 /
#                                   CUDA FP8+MXFP4 against HF transformers fp32 and bf16 (TOKENIZER:
#                                   the tokenizer directory, default build-demo/tokenizer)
#   bash tools/gpu_run.sh deterministic every gpu-labelled test (TESTS narrows it; PARTS picks of
#                                   "tests profile bench serve"), then the cost of
#                                   --enable-deterministic-inference (profile at V4-Flash shapes, 4K and
#                                   128K context, against the default kernels; the batch-invariant bf16
#                                   projection against cuBLAS) and the demo model served with and without
#                                   it, each request alone vs all at once (tools/determinism_check.py)
#   bash tools/gpu_run.sh speculative every gpu-labelled test (TESTS narrows it), then the trained demo
#                                   model served without speculation and with each of SPEC_ALGOS (default
#                                   "ngram mtp ddtree": the n-gram drafter SPEC_STEPS deep, the MTP layer
#                                   drafting on the GPU MTP_STEPS deep, DDTree trees of DDTREE_TOKENS
#                                   nodes from its top-DDTREE_TOPK per depth), greedy, 1 and 16 streams,
#                                   SPEC_ROUNDS times (default 2): TPOT, throughput, mean accept length;
#                                   the same completions over HTTP with and without speculation
#                                   (tools/speculative_check.py, batch-invariant kernels); then
#                                   peregrine profile --verify-tokens 4 at V4-Flash shapes (SPEC_EXTRAS=0: the
#                                   served runs only; SPEC_BENCH_ARGS and SPEC_STREAMS replace the bench's
#                                   arguments and concurrencies; PEREGRINE_BIN serves another binary)
#   bash tools/gpu_run.sh structured every gpu-labelled test (TESTS narrows it), then serve + bench at
#                                   V4-Flash shapes with 16 and 64 streams, unconstrained and under a
#                                   JSON schema (--extra-body), for the decode-throughput ratio
#   bash tools/gpu_run.sh pd        prefill/decode disaggregation on one GPU: the KV transfer benchmarks
#                                   (UCX on the host against memcpy; CUDA IPC between two processes
#                                   against cudaMemcpy), then at 4-layer V4-Flash shapes the colocated
#                                   server and a prefill + decode pair (two processes) per transfer
#                                   backend (PD_BACKENDS, default "ucx cuda_ipc") behind the router at
#                                   the same load (PD_LEVELS streams, default 16 and 64)
#   bash tools/gpu_run.sh load      checkpoint loading from page cache: a V4-Flash-width checkpoint
#                                   written by HF transformers (bf16, LOAD_LAYERS layers, default 2,
#                                   into LOAD_DIR), then `peregrine serve` loading it with bf16
#                                   experts, MXFP4 experts, and MXFP4 experts + FP8 dense, then the
#                                   same model converted to the official FP8/MXFP4 format (into
#                                   LOAD_OFFICIAL_DIR): GB/s of checkpoint bytes (load.jsonl)
#   bash tools/gpu_run.sh all-reduce the custom all-reduce (CUDA IPC) against NCCL per message size
#                                   over AR_RANKS GPUs (default: all of them; needs 2 or more)
# Results go to $OUT (default ./gpu-out).
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${PEREGRINE_GPU_BIN:-$ROOT/build-h200/gpu-bin}"
OUT="${OUT:-$ROOT/gpu-out}"
PHASE="${1:-tests}"
PEREGRINE="${PEREGRINE_BIN:-$BIN/../peregrine}"
DEMO_MODEL="$ROOT/models/deepseek-v4-demo"  # the binary may not embed it (PEREGRINE_EMBED_DEMO_MODEL=OFF)
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
export PEREGRINE_SOURCE_DIR="$ROOT"

# cuBLAS 13 (and NCCL): the toolkit's, else the ones in PyTorch's nvidia wheels.
CUBLAS_DIRS="$("$PY" - <<'PYEOF' 2>/dev/null
import glob, os, sys
dirs = []
for base in ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]:
    if glob.glob(os.path.join(base, "libcublas.so.13*")):
        dirs.append(base)
for p in sys.path:
    for hit in glob.glob(os.path.join(p, "nvidia", "**", "libcublas.so.13*"), recursive=True):
        dirs.append(os.path.dirname(hit))
    # NCCL (loaded at run time by the tensor-parallel communicator): PyTorch's nvidia-nccl wheel.
    for hit in glob.glob(os.path.join(p, "nvidia", "**", "libnccl.so.2*"), recursive=True):
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
trap 'exit 143' TERM  # a time limit still packs what ran
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

# alternate ROUNDS "name=path ..." LABEL FN: FN NAME PATH ROUND for every binary, the binaries
# taking turns, ROUNDS rounds (A/B runs: drift in clocks or temperature hits every binary alike).
alternate() {
  local rounds="$1" bins="$2" label="$3" fn="$4" rep entry which bin
  for rep in $(seq 1 "$rounds"); do
    for entry in $bins; do
      which="${entry%%=*}"
      bin="${entry#*=}"
      [ -x "$bin" ] || { echo "== $label $which: no binary"; status=1; continue; }
      echo "== $label $which (run $rep)"
      "$fn" "$which" "$bin" "$rep" || status=1
    done
  done
}

# Every gpu-labelled test binary (the build lists them from ctest's labels).
gpu_tests() {
  if [ -f "$BIN/gpu_tests.txt" ]; then cat "$BIN/gpu_tests.txt"; else echo "no $BIN/gpu_tests.txt" >&2; fi
}

if [ "$PHASE" = "all-tests" ]; then
  for t in $(gpu_tests); do run_test "$t" 240; done
  for bench in ${BENCHES-peregrine_moe_bench peregrine_sampling_bench}; do
    if [ -x "$BIN/$bench" ]; then
      echo "== $bench"
      timeout 120 "$BIN/$bench" --out "$OUT/$bench.jsonl" >"$OUT/$bench.log" 2>&1
      tail -25 "$OUT/$bench.log"
    fi
  done
  exit $status
fi

if [ "$PHASE" = "fidelity" ]; then
  for t in ${TESTS:-$(gpu_tests)}; do run_test "$t" 240; done
  echo "== demo model fidelity against HF transformers"
  PYTHONUNBUFFERED=1 timeout 420 python3 "$ROOT/tools/demo_model_fidelity.py" --peregrine "$PEREGRINE" \
    --out "$OUT" --tokenizer "${TOKENIZER:-$ROOT/build-demo/tokenizer}" >"$OUT/fidelity.log" 2>&1
  rc=$?
  grep -vE "^ |^[{}]" "$OUT/fidelity.log" | tail -20
  [ $rc -ne 0 ] && { echo "fidelity exit code $rc"; tail -30 "$OUT/fidelity.log"; status=1; }
  exit $status
fi

# device_seconds PORT: "busy idle draft launch collect host_draft" from the server's device-time
# counters and the runner's host time by phase (0 where a binary does not export one).
device_seconds() {
  curl -s "http://127.0.0.1:$1/metrics" | awk '/^peregrine:device_busy_seconds_total/ {b=$2}
    /^peregrine:device_idle_seconds_total/ {i=$2} /^peregrine:device_draft_seconds_total/ {d=$2}
    /^peregrine:runner_host_seconds_total.*phase="launch"/ {l=$2} /^peregrine:runner_host_seconds_total.*phase="collect"/ {c=$2}
    /^peregrine:runner_host_seconds_total.*phase="draft"/ {h=$2} END {print b+0, i+0, d+0, l+0, c+0, h+0}'
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

# start_server NAME PORT BINARY ARGS...: serves in the background ($SERVER), waits for /health.
start_server() {
  local name="$1" port="$2" bin="$3"
  shift 3
  # The demo model from the repository unless the arguments name a model.
  local model=(--model-path "$DEMO_MODEL")
  [[ " $* " == *" --model-path "* ]] && model=()
  "$bin" serve --device cuda --port "$port" "${model[@]}" "$@" >"$OUT/serve_$name.log" 2>&1 &
  SERVER=$!
  for i in $(seq 1 180); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 $SERVER 2>/dev/null || break
    sleep 1
  done
  echo "== server $name"
  grep -E "KV cache|CUDA model|error" "$OUT/serve_$name.log" | head -8
}
stop_server() {
  kill -INT $SERVER 2>/dev/null
  wait $SERVER 2>/dev/null
}
# serve_bench NAME PORT "CONCURRENCIES" BENCH_ARGS -- SERVE_ARGS: one server, one bench run per
# concurrency (results as NAME.*), with the device idle fraction between steps of each run.
serve_bench() {
  local name="$1" port="$2" levels="$3" bench_args="$4"
  shift 5
  start_server "$name" "$port" "$PEREGRINE" "$@"
  for c in $levels; do
    read -r b0 i0 d0 l0 c0 h0 <<<"$(device_seconds "$port")"
    # shellcheck disable=SC2086
    timeout 150 "$PEREGRINE" bench --base-url "http://127.0.0.1:$port" $bench_args --concurrency "$c" \
      --result-file "$OUT/serve_bench_$name.jsonl" >"$OUT/bench_${name}_c$c.log" 2>&1 || status=1
    read -r b1 i1 d1 l1 c1 h1 <<<"$(device_seconds "$port")"
    grep -E "output throughput|TPOT|TTFT" "$OUT/bench_${name}_c$c.log" | head -8 | sed "s/^/  c=$c /"
    # Between steps the device either drafts (speculative work) or idles; the runner's host
    # phases say where the host's part of that went (the rest is the engine's).
    awk -v b="$b1" -v B="$b0" -v i="$i1" -v I="$i0" -v d="$d1" -v D="$d0" -v l="$l1" -v L="$l0" \
        -v k="$c1" -v K="$c0" -v h="$h1" -v H="$h0" -v c="$c" -v n="$name" 'BEGIN {
      busy = b - B; idle = i - I; draft = d - D; all = busy + idle + draft; f = (all > 0) ? idle / all : 0;
      printf "{\"run\": \"%s\", \"concurrency\": %s, \"device_busy_s\": %.4f, \"device_idle_s\": %.4f, \"device_draft_s\": %.4f, \"idle_fraction\": %.4f, \"host_launch_s\": %.4f, \"host_collect_s\": %.4f, \"host_draft_s\": %.4f}\n", n, c, busy, idle, draft, f, l - L, k - K, h - H }' \
      | tee -a "$OUT/device_idle.jsonl"
  done
  [[ "$name" == *overlap ]] && abort_check "$port"
  stop_server
}

FLASH="$ROOT/bench/configs/deepseek-v4-flash"
FLASH4="--model-path $FLASH --synthetic-weights --num-layers 4 --expert-format mxfp4"

if [ "$PHASE" = "deterministic" ]; then
  PARTS="${PARTS:-tests profile bench serve}"  # any of them
  if [[ " $PARTS " == *" tests "* ]]; then
    for t in ${TESTS:-$(gpu_tests)}; do run_test "$t" 240; done
  fi
  # The cost: decode steps at V4-Flash shapes with the default and the batch-invariant kernels,
  # interleaved twice; a long context at low batch (attention never splits a request then).
  for rep in 1 2; do
    [[ " $PARTS " == *" profile "* ]] || break
    for det in "" "--enable-deterministic-inference"; do
      tag="default"; [ -n "$det" ] && tag="invariant"
      for ctx in 4096 131072; do
        batches="1,16,64"; [ "$ctx" = 131072 ] && batches="1,16"
        echo "== profile $tag context $ctx (run $rep)"
        # shellcheck disable=SC2086
        timeout 150 "$PEREGRINE" profile $FLASH4 --batch-sizes "$batches" --context "$ctx" --steps 20 $det \
          --out "$OUT/profile_$tag.jsonl" >"$OUT/profile_${tag}_${ctx}_$rep.log" 2>&1 || status=1
        grep -E "^model|^batch|per layer" "$OUT/profile_${tag}_${ctx}_$rep.log" | sed 's/(the server plans.*//'
      done
    done
  done
  if [[ " $PARTS " == *" bench "* ]] && [ -x "$BIN/peregrine_fp8_bench" ]; then
    echo "== peregrine_fp8_bench (bf16_linear_invariant rows against cuBLAS)"
    timeout 200 "$BIN/peregrine_fp8_bench" --out "$OUT/fp8_bench.jsonl" >"$OUT/fp8_bench.log" 2>&1 || status=1
    grep bf16_linear_invariant "$OUT/fp8_bench.log" | "$PY" -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print("%11s n=%4d: %8.2f us %.2f TB/s, cuBLAS %8.2f us (%.2fx)" % (r["shape"], r["n"], r["time_us"], r["tb_s_weights"], r["peer_time_us"], r["speedup_vs_peer"]))'
  fi
  # A real client over HTTP: the trained demo model, then V4-Flash shapes (4 layers, random
  # weights) served on the GPU, each request alone and then all at once; identical with the
  # flag, reported without it.
  for model in demo flash; do
    for det in "" "--enable-deterministic-inference"; do
      [[ " $PARTS " == *" serve "* ]] || break 2
      tag="default"; [ -n "$det" ] && tag="invariant"
      args="--max-num-batched-tokens 256"
      [ "$model" = flash ] && args="$FLASH4 --max-num-seqs 64 --max-model-len 4096 --max-num-batched-tokens 256"
      # shellcheck disable=SC2086
      start_server "${model}_$tag" 8127 "$PEREGRINE" $args $det
      expect=""; [ -n "$det" ] && expect="--expect-identical"
      timeout 300 "$PY" "$ROOT/tools/determinism_check.py" --base-url http://127.0.0.1:8127 --name "${model}_$tag" \
        --out "$OUT/determinism.jsonl" $expect || status=1
      stop_server
    done
  done
  exit $status
fi

if [ "$PHASE" = "speculative" ]; then
  # Every gpu-labelled test (TESTS narrows it, TESTS=" " none), then the trained demo model
  # served without speculation and with the n-gram drafter (SPEC_STEPS deep), greedy, at 1
  # and 16 streams: per-user decode speed (TPOT) and the mean accept length, twice each.
  for t in ${TESTS:-$(gpu_tests)}; do run_test "$t" 240; done
  BENCH_ARGS="${SPEC_BENCH_ARGS:---num-prompts 32 --input-len 128 --output-len 128 --warmup 2 --extra-body {\"temperature\":0}}"
  algos="${SPEC_ALGOS:-ngram mtp ddtree}"
  spec_flags() {
    case "$1" in
      ngram) echo "--speculative-algorithm ngram --speculative-num-steps ${SPEC_STEPS:-4}" ;;
      mtp) echo "--speculative-algorithm mtp --speculative-num-steps ${MTP_STEPS:-3}" ;;
      ddtree) echo "--speculative-algorithm ddtree --speculative-num-steps ${MTP_STEPS:-3}" \
        "--speculative-num-draft-tokens ${DDTREE_TOKENS:-8} --speculative-eagle-topk ${DDTREE_TOPK:-4}" ;;
    esac
  }
  levels="${SPEC_STREAMS:-1 16}"
  for round in $(seq 1 "${SPEC_ROUNDS:-2}"); do
    serve_bench "demo_none_$round" 8128 "$levels" "$BENCH_ARGS" -- --max-model-len 4096
    port=8129
    for algo in $algos; do
      # shellcheck disable=SC2046
      serve_bench "demo_${algo}_$round" "$port" "$levels" "$BENCH_ARGS" -- --max-model-len 4096 $(spec_flags "$algo")
      port=$((port + 1))
    done
  done
  for algo in $algos; do
    for f in "$OUT"/bench_demo_"${algo}"_*; do
      grep -E "accept" "$f" | sed "s|^|  $(basename "$f") |"
    done
  done
  [ "${SPEC_EXTRAS:-1}" = 0 ] && exit $status
  # Over HTTP with batch-invariant kernels: the same completions with speculation as without
  # (tools/speculative_check.py: greedy and seeded sampled, logprobs, a stop string, a penalty).
  for algo in none $algos; do
    # shellcheck disable=SC2046
    start_server "check_$algo" 8131 "$PEREGRINE" --max-model-len 4096 --enable-deterministic-inference \
      $([ "$algo" != none ] && spec_flags "$algo")
    cmp=""; [ "$algo" != none ] && cmp="--compare $OUT/http_none.jsonl"
    # shellcheck disable=SC2086
    timeout 200 "$PY" "$ROOT/tools/speculative_check.py" --base-url http://127.0.0.1:8131 \
      --out "$OUT/http_$algo.jsonl" $cmp || status=1
    stop_server
  done
  # The verify step against the decode step at V4-Flash shapes (4 layers, random weights).
  timeout 150 "$PEREGRINE" profile $FLASH4 --batch-sizes 1,16,64 --verify-tokens 4 --steps 20 \
    --out "$OUT/profile_verify.jsonl" >"$OUT/profile_verify.log" 2>&1 || status=1
  grep -E "^batch|verify" "$OUT/profile_verify.log" | cut -c1-160
  exit $status
fi

if [ "$PHASE" = "structured" ]; then
  for t in ${TESTS:-$(gpu_tests)}; do run_test "$t" 240; done
  # Records of bounded fields in an array of at least 100: the masks change state every few
  # tokens, and no request can complete its grammar within 256 tokens, so both runs decode
  # the same lengths in the same batches (an early finish would mix prefills into decode
  # steps). (No spaces: serve_bench splits its bench arguments on them.)
  SCHEMA='{"response_format":{"type":"json_schema","json_schema":{"name":"rows","schema":{"type":"object","properties":{"rows":{"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string","maxLength":16},"kind":{"enum":["a","b","c"]},"ok":{"type":"boolean"}},"required":["id","name","kind","ok"],"additionalProperties":false},"minItems":100}},"required":["rows"],"additionalProperties":false}}}}'
  # ENDPOINT=/v1/completions: the same prompts in both runs (chat also shows the schema to the
  # model, so its prompts are longer under the schema).
  BENCH_ARGS="--endpoint ${ENDPOINT:-/v1/chat/completions} --num-prompts 64 --input-len 256 --output-len 256 --warmup 4"
  for round in 1 2; do
    serve_bench "flash_free_$round" 8125 "16 64" "$BENCH_ARGS" -- $FLASH4 --max-num-seqs 64 --max-model-len 4096
    serve_bench "flash_schema_$round" 8126 "16 64" "$BENCH_ARGS --extra-body $SCHEMA" -- $FLASH4 --max-num-seqs 64 --max-model-len 4096
  done
  # The trained demo model on the GPU: greedy text, a JSON schema and a forced tool call.
  start_server demo_trained 8127 "$PEREGRINE" --max-model-len 4096
  api="http://127.0.0.1:8127/v1"
  curl -s "$api/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"def fibonacci(n):\n","max_tokens":48,"temperature":0}' >"$OUT/demo_cuda_completion.json"
  curl -s "$api/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Give me a user record."}],"max_tokens":200,"temperature":1.0,"seed":3,"response_format":{"type":"json_schema","json_schema":{"name":"user","schema":{"type":"object","properties":{"name":{"type":"string","maxLength":20},"id":{"type":"integer"},"admin":{"type":"boolean"}},"required":["name","id","admin"],"additionalProperties":false}}}}' \
    >"$OUT/demo_cuda_schema.json"
  curl -s "$api/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Add 2 and 3."}],"max_tokens":200,"temperature":1.0,"seed":4,"tool_choice":"required","tools":[{"type":"function","function":{"name":"add","parameters":{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}}}]}' \
    >"$OUT/demo_cuda_tools.json"
  for f in completion schema tools; do echo "== demo_cuda_$f"; head -c 1500 "$OUT/demo_cuda_$f.json"; echo; done
  stop_server
  exit $status
fi

if [ "$PHASE" = "kv-tests" ]; then
  for t in $(gpu_tests); do run_test "$t" 240; done
  OLD="${PEREGRINE_OLD:-}"
  for rep in 1 2; do
    for which in old new; do
      bin="$PEREGRINE"
      [ "$which" = old ] && bin="$OLD"
      [ -x "$bin" ] || { echo "== profile $which: no binary"; continue; }
      echo "== profile $which (run $rep)"
      # shellcheck disable=SC2086
      timeout 150 "$bin" profile $FLASH4 --batch-sizes 1,16,64 --context 4096 --steps 20 \
        --out "$OUT/profile_$which.jsonl" >"$OUT/profile_${which}_$rep.log" 2>&1 || status=1
      grep -E "^model|^batch|per layer" "$OUT/profile_${which}_$rep.log" | sed 's/(the server plans.*//'
    done
  done
  # Attention and indexer at 1M context: pages in a fragmented pool vs one run per request.
  if [ -f "$BIN/libperegrine_attention_bench.so" ]; then
    for pages in random contiguous; do
      echo "== attention at 1M context, $pages pages"
      timeout 240 "$PY" "$ROOT/bench/attention/bench_attention.py" --lib "$BIN/libperegrine_attention_bench.so" \
        --contexts 1048576 --batches 1,16,64 --pages $pages --skip-output-projection \
        --out "$OUT/attention_pages_$pages.jsonl" >"$OUT/attention_pages_$pages.log" 2>&1 || status=1
      tail -13 "$OUT/attention_pages_$pages.log"
    done
  fi
  exit $status
fi

# The decode step of this tree against the pre-change binary ($PEREGRINE_OLD), interleaved
# PROFILE_ROUNDS times (default 2) in one call; PROFILE_ARGS adds flags to both (e.g. --context);
# PROFILE_BINS="name=path ..." names the binaries instead (e.g. three revisions).
if [ "$PHASE" = "profile-ab" ]; then
  for t in ${TESTS:-$(gpu_tests)}; do run_test "$t" 240; done
  for rep in $(seq 1 "${PROFILE_ROUNDS:-2}"); do
    for entry in ${PROFILE_BINS:-old=${PEREGRINE_OLD:-} new=$PEREGRINE}; do
      which="${entry%%=*}"
      bin="${entry#*=}"
      [ -x "$bin" ] || { echo "== profile $which: no binary"; status=1; continue; }
      echo "== profile $which (run $rep)"
      # shellcheck disable=SC2086
      timeout 150 "$bin" profile $FLASH4 --batch-sizes 1,16,64 --context 4096 --steps 50 ${PROFILE_ARGS:-} \
        --out "$OUT/profile_$which.jsonl" >"$OUT/profile_${which}_$rep.log" 2>&1 || status=1
      grep -E "^batch|per layer" "$OUT/profile_${which}_$rep.log" | sed 's/(the server plans.*//; s/, eager step.*//'
    done
  done
  exit $status
fi

if [ "$PHASE" = "moe-ab" ]; then
  # Kernel A/B: peregrine_moe_bench binaries run alternately (MOE_BINS="name=path ...",
  # MOE_ROUNDS rounds, MOE_ARGS passed to each), then each op's median time per binary.
  for t in ${TESTS:-}; do run_test "$t" 240; done
  # shellcheck disable=SC2086
  moe_run() { timeout 200 "$2" ${MOE_ARGS:-} --out "$OUT/moe_$1.jsonl" >"$OUT/moe_${1}_$3.log" 2>&1; }
  alternate "${MOE_ROUNDS:-2}" "${MOE_BINS:-new=$BIN/peregrine_moe_bench}" "moe bench" moe_run
  files=()
  for entry in ${MOE_BINS:-new=$BIN/peregrine_moe_bench}; do files+=("$OUT/moe_${entry%%=*}.jsonl"); done
  "$PY" "$ROOT/tools/moe_ab_table.py" "${files[@]}" || status=1
  exit $status
fi

if [ "$PHASE" = "sampling-ab" ]; then
  # Sampling kernel A/B: the given test binaries (TESTS), then peregrine_sampling_bench binaries
  # (SAMPLING_BINS="name=path ...") run alternately SAMPLING_ROUNDS times (default 2) with
  # --phases, then each shape's event time per binary and round.
  for t in ${TESTS:-}; do run_test "$t" 240; done
  sampling_run() { timeout 200 "$2" --phases --out "$OUT/sampling_${1}_$3.jsonl" >"$OUT/sampling_${1}_$3.log" 2>&1; }
  alternate "${SAMPLING_ROUNDS:-2}" "${SAMPLING_BINS:-new=$BIN/peregrine_sampling_bench}" "sampling bench" sampling_run
  for f in "$OUT"/sampling_*.jsonl; do
    [ -f "$f" ] || continue
    echo "== $(basename "$f" .jsonl)"
    "$PY" -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print("  %-12s B=%-4d %8.2f us" % (r["setting"], r["batch"], r["time_us"]))' "$f" || status=1
  done
  exit $status
fi

# bench_run NAME PORT ARGS...: one peregrine bench run, its JSON line in kv_bench.jsonl.
bench_run() {
  local name="$1" port="$2"
  shift 2
  timeout "${BENCH_TIMEOUT:-200}" "$PEREGRINE" bench --base-url "http://127.0.0.1:$port" "$@" \
    --result-file "$OUT/kv_bench_$name.jsonl" >"$OUT/bench_$name.log" 2>&1 || status=1
  grep -E "output throughput|TTFT|TPOT|completed|failed" "$OUT/bench_$name.log" | head -8 | sed "s/^/  $name: /"
}
metrics() {  # metrics PORT NAME: the KV and prefix-cache series
  curl -s "http://127.0.0.1:$1/metrics" | grep -E "^peregrine:(kv_cache|prefix_cache|num_preemptions|num_requests)" \
    | tee "$OUT/metrics_$2.txt" | sed "s/^/  /"
}

if [ "$PHASE" = "kv-serve" ]; then
  OLD="${PEREGRINE_OLD:-}"
  STEPS="${STEPS:-throughput prefix context long}"
  SHORT="--max-num-seqs 64 --max-model-len 4096 --max-num-batched-tokens 2048"
  if [[ " $STEPS " == *" throughput "* ]]; then
    for which in old new new_nocache; do
      bin="$PEREGRINE"; extra=""
      [ "$which" = old ] && { bin="$OLD"; extra="${PEREGRINE_OLD_ARGS:-}"; }
      [ "$which" = new_nocache ] && extra="--disable-prefix-caching"
      [ -x "$bin" ] || continue
      # shellcheck disable=SC2086
      start_server "tput_$which" 8201 "$bin" $FLASH4 $SHORT $extra
      bench_run "tput_$which" 8201 --num-prompts 128 --input-len 256 --output-len 64 --concurrency 64 --warmup 4
      stop_server
    done
  fi
  if [[ " $STEPS " == *" prefix "* ]]; then
    # 256 requests sharing an 8K-token system prompt, with and without the prefix cache.
    for which in cache nocache; do
      extra=""
      [ "$which" = nocache ] && extra="--disable-prefix-caching"
      # shellcheck disable=SC2086
      start_server "prefix_$which" 8202 "$PEREGRINE" $FLASH4 --max-num-seqs 64 --max-model-len 16384 $extra
      BENCH_TIMEOUT=240 bench_run "prefix_$which" 8202 --num-prompts 256 --prefix-len 8192 --input-len 64 \
        --output-len 16 --concurrency 64 --warmup 1
      timeout 120 "$PY" "$ROOT/tools/kv_compare.py" --url http://127.0.0.1:8202 --num 8 --prefix-words 8192 \
        --out "$OUT/greedy_$which.jsonl" || status=1
      metrics 8202 "prefix_$which"
      stop_server
    done
    "$PY" "$ROOT/tools/kv_compare.py" --compare "$OUT/greedy_cache.jsonl" "$OUT/greedy_nocache.jsonl" \
      | tee "$OUT/greedy_compare.json"
  fi
  if [[ " $STEPS " == *" context "* ]]; then
    # The per-slot design's state at 1M (the pre-change binary reserves it per slot).
    if [ -x "$OLD" ]; then
      # shellcheck disable=SC2086
      start_server old_1m 8203 "$OLD" $FLASH4 --max-num-seqs 16 --max-model-len 1048576 ${PEREGRINE_OLD_ARGS:-}
      stop_server
    fi
    nvidia-smi --query-gpu=memory.used,memory.total --format=csv >"$OUT/smi_before.txt" 2>&1
    # shellcheck disable=SC2086
    start_server ctx_1m 8204 "$PEREGRINE" $FLASH4 --max-num-seqs 64 --max-model-len 1048576
    nvidia-smi --query-gpu=memory.used,memory.total --format=csv | tee "$OUT/smi_1m.txt"
    metrics 8204 ctx_1m_start
    bench_run ctx_4k 8204 --num-prompts 64 --input-len 4000 --output-len 64 --concurrency 64
    bench_run ctx_8k 8204 --num-prompts 2 --input-len 8000 --output-len 128 --concurrency 1 --warmup 0
    BENCH_TIMEOUT=240 bench_run ctx_200k 8204 --num-prompts 2 --input-len 200000 --output-len 128 --concurrency 1 --warmup 0
    metrics 8204 ctx_1m_after
    if [[ " $STEPS " == *" long "* ]]; then
      # One 500K-token prompt beside 16 short streams.
      BENCH_TIMEOUT=400 bench_run ctx_500k 8204 --num-prompts 1 --input-len 500000 --output-len 32 --concurrency 1 \
        --warmup 0 --seed 5 &
      LONG=$!
      sleep 2
      bench_run ctx_500k_side 8204 --num-prompts 96 --input-len 256 --output-len 64 --concurrency 16 --warmup 0
      wait $LONG
      metrics 8204 ctx_1m_long
    fi
    stop_server
    grep -E "KV cache" "$OUT/serve_ctx_1m.log" >"$OUT/kv_report_1m.txt"
  fi
  if [[ " $STEPS " == *" long_threshold "* ]]; then
    # The same 500K prompt beside 16 streams, with prefill chunks capped while requests wait.
    # shellcheck disable=SC2086
    start_server ctx_1m_cap 8205 "$PEREGRINE" $FLASH4 --max-num-seqs 64 --max-model-len 1048576 \
      --long-prefill-token-threshold 1024
    BENCH_TIMEOUT=400 bench_run ctx_500k_cap 8205 --num-prompts 1 --input-len 500000 --output-len 32 --concurrency 1 \
      --warmup 0 --seed 5 &
    LONG=$!
    sleep 2
    bench_run ctx_500k_cap_side 8205 --num-prompts 96 --input-len 256 --output-len 64 --concurrency 16 --warmup 0
    wait $LONG
    stop_server
  fi
  exit $status
fi

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
  "$PEREGRINE" serve --device cuda --port 8124 --model-path "$DEMO_MODEL" >"$OUT/serve_demo.log" 2>&1 &
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
if [ "$PHASE" = "pd" ]; then
  export PEREGRINE_DISAGGREGATION_SECRET=pd-measurement-secret-0123456789
  if [ -x "$BIN/kv_transfer_bench" ]; then
    echo "== KV transfer (UCX, host)"
    timeout 120 "$BIN/kv_transfer_bench" --tls default,tcp --pages 65 --page-bytes 1048576 --reps 8 \
      --json "$OUT/kv_transfer.jsonl" 2>"$OUT/kv_transfer.log" | tee -a "$OUT/kv_transfer.log" || status=1
  fi
  if [ -x "$BIN/peregrine_kv_ipc_bench" ]; then
    echo "== KV transfer (CUDA IPC, two processes)"
    # A 1,024-token request at 4 layers (~1.5 MB), and 65 MB (a long prompt at more layers).
    for shape in "5 12 24576" "65 16 65536"; do
      set -- $shape
      timeout 60 "$BIN/peregrine_kv_ipc_bench" --pages "$1" --regions "$2" --region-bytes "$3" \
        --json "$OUT/kv_ipc.jsonl" 2>&1 | tee -a "$OUT/kv_ipc.log" || status=1
    done
  fi
  PD_ARGS="$FLASH4 --max-num-seqs 64 --max-model-len 4096 --max-num-batched-tokens 2048"
  LOAD="--num-prompts ${PD_PROMPTS:-128} --input-len ${PD_INPUT:-1024} --output-len ${PD_OUTPUT:-128}"
  start_server colocated 8301 "$PEREGRINE" $PD_ARGS --gpu-memory-utilization 0.85
  for c in ${PD_LEVELS:-16 64}; do bench_run "colocated_c$c" 8301 $LOAD --concurrency "$c"; done
  stop_server
  for backend in ${PD_BACKENDS:-ucx cuda_ipc}; do
    start_server "prefill_$backend" 8302 "$PEREGRINE" $PD_ARGS --gpu-memory-utilization 0.42 \
      --disaggregation-mode prefill --disaggregation-bootstrap-port 8998 --disaggregation-transfer-backend "$backend"
    PREFILL=$SERVER
    # The fraction counts what the prefill process holds as used: 0.85 leaves the decode ~0.43.
    start_server "decode_$backend" 8303 "$PEREGRINE" $PD_ARGS --gpu-memory-utilization 0.85 \
      --disaggregation-mode decode --disaggregation-transfer-backend "$backend"
    DECODE=$SERVER
    "$PEREGRINE" router --port 8304 --pd-disaggregation --prefill http://127.0.0.1:8302 8998 \
      --decode http://127.0.0.1:8303 >"$OUT/router_$backend.log" 2>&1 &
    ROUTER=$!
    for i in $(seq 1 30); do curl -sf http://127.0.0.1:8304/health >/dev/null 2>&1 && break; sleep 0.5; done
    # Without a live prefill server the router serves whole requests on the decode server:
    # that is not a disaggregated run.
    kill -0 $PREFILL 2>/dev/null || { echo "the $backend prefill server is not running: no pd run"; status=1; }
    for c in ${PD_LEVELS:-16 64}; do bench_run "pd_${backend}_c$c" 8304 $LOAD --concurrency "$c"; done
    for p in 8302 8303; do
      curl -s "http://127.0.0.1:$p/metrics" | grep -E "^peregrine:(kv_transfer|num_requests|kv_cache_usage)" \
        | sed "s/^/  $backend $p /" | tee -a "$OUT/metrics_pd.txt"
    done
    grep -c "through host memory\|did not load" "$OUT/serve_prefill_$backend.log" "$OUT/serve_decode_$backend.log"
    kill -INT $ROUTER 2>/dev/null; wait $ROUTER 2>/dev/null
    kill -INT $DECODE $PREFILL 2>/dev/null; wait $DECODE $PREFILL 2>/dev/null
  done
  exit $status
fi

if [ "$PHASE" = "load" ]; then
  CKPT="${LOAD_DIR:-/tmp/peregrine-flash-hf}"
  if [ ! -f "$CKPT/config.json" ]; then
    echo "== writing the checkpoint"
    timeout 400 $PY "$ROOT/tools/write_hf_flash_checkpoint.py" "$CKPT" --layers "${LOAD_LAYERS:-2}" 2>&1 | tail -3 \
      | tee "$OUT/load_write.log"
  fi
  # load_once NAME DIR CHECKPOINT EXPERTS DENSE: one server start from DIR, its JSON line.
  load_once() {
    local name="$1" dir="$2" kind="$3" experts="$4" dense="$5" bytes secs
    bytes=$(cat "$dir"/*.safetensors | wc -c)
    cat "$dir"/*.safetensors >/dev/null  # in the page cache
    echo "== $kind checkpoint: $bytes bytes in $(ls "$dir"/*.safetensors | wc -l) shards"
    start_server "$name" 8401 "$PEREGRINE" --model-path "$dir" --expert-format "$experts" --dense-format "$dense" \
      --max-model-len 4096 --max-num-seqs 8
    secs=$(grep -o "loaded in [0-9.]* s" "$OUT/serve_$name.log" | grep -o "[0-9.]*" | head -1)
    if [ -n "$secs" ]; then
      echo "{\"checkpoint\":\"$kind\",\"experts\":\"$experts\",\"dense\":\"$dense\",\"checkpoint_bytes\":$bytes,\"seconds\":$secs,\"gb_per_s\":$($PY -c "print(round($bytes / 1e9 / $secs, 3))")}" \
        | tee -a "$OUT/load.jsonl"
      curl -s http://127.0.0.1:8401/v1/completions -H 'Content-Type: application/json' \
        -d '{"prompt":"Hello","max_tokens":4}' | head -c 300; echo
    else
      echo "load $name: the server did not load the checkpoint"; status=1
    fi
    stop_server
  }
  for fmt in "bf16 bf16" "mxfp4 bf16" "mxfp4 fp8"; do
    set -- $fmt
    load_once "load_$1_$2" "$CKPT" hf "$1" "$2"
  done
  # The same model in the official release's format (FP8 dense, MXFP4 experts as stored).
  OFFICIAL="${LOAD_OFFICIAL_DIR:-$CKPT-official}"
  if [ ! -f "$OFFICIAL/config.json" ]; then
    echo "== converting to the official format"
    timeout 400 $PY "$ROOT/tools/write_hf_flash_checkpoint.py" "$CKPT" --official "$OFFICIAL" 2>&1 | tail -2 \
      | tee "$OUT/load_official_write.log"
  fi
  load_once load_official "$OFFICIAL" official mxfp4 fp8
  exit $status
fi

if [ "$PHASE" = "ncu" ]; then
  # Nsight Compute over one run of a benchmark: the first NCU_COUNT launches of the kernels
  # matching NCU_KERNELS, the sections in NCU_SECTIONS, as text.
  NCU="$(command -v ncu || true)"
  for candidate in /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
    [ -z "$NCU" ] && [ -x "$candidate" ] && NCU="$candidate"
  done
  [ -n "$NCU" ] || { echo "no ncu on this machine"; exit 1; }
  args=()
  for section in ${NCU_SECTIONS:-SpeedOfLight SchedulerStats WarpStateStats MemoryWorkloadAnalysis Occupancy \
    LaunchStats InstructionStats}; do args+=(--section "$section"); done
  # shellcheck disable=SC2086
  timeout 400 "$NCU" --clock-control none -k "regex:${NCU_KERNELS:-MoeMxfp4MmaKernel|MoeExpertGemmKernel}" \
    -c "${NCU_COUNT:-4}" "${args[@]}" ${NCU_CMD:-$BIN/peregrine_moe_bench --format mxfp4 --batch 1} \
    >"$OUT/ncu.txt" 2>&1 || status=1
  grep -E "^  [A-Za-z_].*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|No Eligible|Achieved Occupancy" \
    "$OUT/ncu.txt" | head -80
  exit $status
fi

if [ "$PHASE" = "all-reduce" ]; then
  ranks="${AR_RANKS:-$(nvidia-smi -L | wc -l)}"
  echo "== custom all-reduce vs NCCL, $ranks ranks"
  NCCL_NVLS_ENABLE=0 timeout 300 "$BIN/peregrine_all_reduce_bench" --ranks "$ranks" --out "$OUT/all_reduce.jsonl" \
    2>&1 | tee "$OUT/all_reduce.log"
  exit "${PIPESTATUS[0]}"
fi

echo "unknown phase $PHASE (tests or serve)" >&2
exit 2
