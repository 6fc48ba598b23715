#!/usr/bin/env python3
"""Batch invariance of a running Peregrine server, checked over HTTP (standard library only).

Sends each prompt alone (one request at a time), then all of them at once from as many
threads, and compares every completion's text, token logprobs and top alternatives exactly.
Greedy and seeded sampled requests (temperature 0.8, top_p 0.95), logprobs on. With
--enable-deterministic-inference every request must come back identical; the same run against
a server without the flag shows what rounding alone does.

  python3 tools/determinism_check.py --base-url http://127.0.0.1:8000 --name det --out out.jsonl
  exit code 1 when --expect-identical and any request differs.
"""
import argparse
import concurrent.futures
import json
import sys
import urllib.request

WORDS = ("river stone lantern orbit velvet signal harbor copper meadow thunder quiet ember "
         "glacier pocket violin saddle prism canyon marble whisper").split()


def prompts(count):
    out = []
    for i in range(count):
        n = 3 + (i * 7) % 40  # prompts of different lengths: other chunkings and batch mates
        out.append(" ".join(WORDS[(i * 5 + j * 3) % len(WORDS)] for j in range(n)))
    return out


def complete(base_url, model, prompt, index, max_tokens):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "logprobs": 3}
    if index % 2 == 0:
        body["temperature"] = 0
    else:
        body.update(temperature=0.8, top_p=0.95, seed=1000 + index)
    req = urllib.request.Request(base_url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        choice = json.loads(r.read())["choices"][0]
    lp = choice.get("logprobs") or {}
    return {"text": choice["text"], "tokens": lp.get("tokens"), "logprobs": lp.get("token_logprobs"),
            "top": lp.get("top_logprobs"), "finish": choice.get("finish_reason")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--out")
    ap.add_argument("--expect-identical", action="store_true")
    a = ap.parse_args()
    with urllib.request.urlopen(a.base_url + "/v1/models", timeout=60) as r:
        model = json.loads(r.read())["data"][0]["id"]
    ps = prompts(a.requests)
    alone = [complete(a.base_url, model, p, i, a.max_tokens) for i, p in enumerate(ps)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(ps)) as pool:
        together = list(pool.map(lambda ip: complete(a.base_url, model, ip[1], ip[0], a.max_tokens),
                                 enumerate(ps)))
    same_text = sum(x["text"] == y["text"] for x, y in zip(alone, together))
    same_all = sum(x == y for x, y in zip(alone, together))
    tokens = sum(len(x["tokens"] or []) for x in alone)
    summary = {"name": a.name, "requests": len(ps), "max_tokens": a.max_tokens, "completion_tokens": tokens,
               "same_text": same_text, "same_text_and_logprobs": same_all}
    print(json.dumps(summary))
    for i, (x, y) in enumerate(zip(alone, together)):
        if x != y:
            first = next((j for j, (u, v) in enumerate(zip(x["logprobs"] or [], y["logprobs"] or [])) if u != v), None)
            print(f"  request {i} ({'greedy' if i % 2 == 0 else 'seeded'}): text {'same' if x['text'] == y['text'] else 'differs'}, "
                  f"first logprob difference at token {first}")
    if a.out:
        with open(a.out, "a") as f:
            f.write(json.dumps(summary) + "\n")
    if a.expect_identical and same_all != len(ps):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
