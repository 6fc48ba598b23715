#!/bin/bash
# CPU: the demo model served with and without speculation, greedy, 1 and 16 streams.
cd "$(dirname "$0")/.."
OUT=bench/results/cpu/speculative
rm -f $OUT/demo_spec_bench.jsonl $OUT/demo_spec_bench.log
for cfg in "none|" "mtp|--speculative-algorithm mtp --speculative-num-steps 3" "ddtree|--speculative-algorithm ddtree --speculative-num-steps 4 --speculative-num-draft-tokens 10 --speculative-eagle-topk 3"; do
  name=${cfg%%|*}; flags=${cfg#*|}
  ./build-cpu/peregrine serve --port 18123 --threads 2 $flags > "${TMPDIR:-/tmp}/serve_$name.log" 2>&1 &
  pid=$!
  for i in $(seq 60); do curl -sf http://127.0.0.1:18123/health >/dev/null && break; sleep 0.5; done
  echo "=== $name: $flags" >> $OUT/demo_spec_bench.log
  ./build-cpu/peregrine bench --base-url http://127.0.0.1:18123 --concurrency 1,16 --num-prompts 16 --input-len 128 --output-len 64 \
     --extra-body '{"temperature": 0}' --result-file "${TMPDIR:-/tmp}/spec_$name.jsonl" >> $OUT/demo_spec_bench.log 2>&1
  python3 -c "
import json,sys
for l in open('"${TMPDIR:-/tmp}/spec_$name.jsonl"'):
    j=json.loads(l); j['speculative']='$name'; j['speculative_flags']='$flags'; print(json.dumps(j))" >> $OUT/demo_spec_bench.jsonl
  rm -f "${TMPDIR:-/tmp}/spec_$name.jsonl"
  kill $pid; wait $pid
done
