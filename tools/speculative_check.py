#!/usr/bin/env python3
"""Speculative decoding over HTTP: the same completions with and without it.

Sends a fixed set of requests (greedy and seeded sampled, with logprobs, a stop string, a
repetition penalty) to a running server and writes each response's text, token logprobs and
finish reason as one JSON line; with --compare FILE it also checks them against a file an
earlier run wrote (the server without speculation), request by request, and exits 1 on any
difference. Standard library only (runs on the GPU machine as is).

  python3 tools/speculative_check.py --base-url http://127.0.0.1:8000 --out plain.jsonl
  python3 tools/speculative_check.py --base-url http://127.0.0.1:8001 --out mtp.jsonl --compare plain.jsonl
"""
import argparse
import json
import sys
import urllib.request

PROMPTS = [
    "def fibonacci(n):\n",
    "import os\nimport sys\n\n\ndef main():\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n",
    "# Read a file line by line\nwith open(path) as f:\n",
    "for i in range(10):\n    for j in range(10):\n",
    "The quick brown fox",
]


def requests():
    out = []
    for i, prompt in enumerate(PROMPTS):
        out.append({"prompt": prompt, "max_tokens": 64, "temperature": 0, "logprobs": 2})
        out.append({"prompt": prompt, "max_tokens": 64, "temperature": 0.8, "top_p": 0.9, "seed": 100 + i,
                    "logprobs": 1, "stop": ["\n\n\n"]})
    out.append({"prompt": PROMPTS[0], "max_tokens": 48, "temperature": 0, "repetition_penalty": 1.2})
    return out


def post(base_url, body):
    req = urllib.request.Request(base_url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--compare")
    a = ap.parse_args()
    rows = []
    for body in requests():
        body = dict(body, model="deepseek-v4")
        choice = post(a.base_url, body)["choices"][0]
        lp = choice.get("logprobs") or {}
        rows.append({"text": choice["text"], "finish": choice["finish_reason"],
                     "logprobs": lp.get("token_logprobs")})
    with open(a.out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    if not a.compare:
        return 0
    want = [json.loads(l) for l in open(a.compare)]
    same = sum(1 for x, y in zip(rows, want) if x == y)
    print(f"{same}/{len(want)} responses identical to {a.compare}")
    for i, (x, y) in enumerate(zip(rows, want)):
        if x != y:
            print(f"request {i} differs: {x['text'][:60]!r} vs {y['text'][:60]!r}")
    return 0 if same == len(want) and len(rows) == len(want) else 1


if __name__ == "__main__":
    sys.exit(main())
