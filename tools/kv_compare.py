#!/usr/bin/env python3
"""Greedy completions of prompts that share a long prefix, from a running server, written as
JSON lines (prompt index, token ids, cached prompt tokens); with --compare A B, the fraction of
requests (and of tokens, up to the first difference) two such files agree on.

Used by tools/gpu_run.sh to compare a server with and without prefix caching. Standard library
only (the GPU machine has no extra packages)."""
import argparse
import json
import random
import sys
import urllib.request


def prompts(num, prefix_words, suffix_words, seed):
    words = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
             "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an"]
    rng = random.Random(seed)
    prefix = " ".join(rng.choice(words) for _ in range(prefix_words))
    return [prefix + " " + " ".join(rng.choice(words) for _ in range(suffix_words)) for _ in range(num)]


def run(url, num, prefix_words, suffix_words, max_tokens, out):
    with open(out, "w") as f:
        for i, p in enumerate(prompts(num, prefix_words, suffix_words, 7)):
            body = json.dumps({"model": "deepseek-v4", "prompt": p, "max_tokens": max_tokens, "temperature": 0,
                               "ignore_eos": True, "logprobs": 0}).encode()
            req = urllib.request.Request(url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=600) as r:
                resp = json.loads(r.read())
            choice = resp["choices"][0]
            tokens = choice.get("logprobs", {}).get("tokens") or [choice["text"]]
            cached = (resp.get("usage", {}).get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            f.write(json.dumps({"index": i, "tokens": tokens, "text": choice["text"], "cached": cached,
                                "prompt_tokens": resp["usage"]["prompt_tokens"]}) + "\n")


def compare(a, b):
    ra = [json.loads(l) for l in open(a)]
    rb = [json.loads(l) for l in open(b)]
    same = sum(x["text"] == y["text"] for x, y in zip(ra, rb))
    agree = total = 0
    for x, y in zip(ra, rb):
        n = 0
        for s, t in zip(x["tokens"], y["tokens"]):
            if s != t:
                break
            n += 1
        agree += n
        total += len(x["tokens"])
    print(json.dumps({"requests": len(ra), "identical": same, "tokens_before_first_difference": agree,
                      "tokens": total, "cached_a": [x["cached"] for x in ra], "cached_b": [y["cached"] for y in rb]}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    ap.add_argument("--num", type=int, default=8)
    ap.add_argument("--prefix-words", type=int, default=8192)
    ap.add_argument("--suffix-words", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2)
    a = ap.parse_args()
    if a.compare:
        compare(*a.compare)
    else:
        run(a.url, a.num, a.prefix_words, a.suffix_words, a.max_tokens, a.out)
    sys.exit(0)
