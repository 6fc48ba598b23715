#!/usr/bin/env python3
"""Golden fixtures for the DeepSeek-V4 forward pass, made with HF transformers' `deepseek_v4`.

Builds tiny random V4 configs that together cover every layer type (sliding, CSA, HCA),
hash and learned MoE, YaRN and plain RoPE, and hc_mult != 4; randomises every parameter and
persistent buffer (including those HF initialises to zero: sinks, tid2eid, selection bias,
position bias, hc base/scale); and writes, per config, into tests/fixtures/<name>/:

  model/config.json, model/model.safetensors   the checkpoint as `save_pretrained` writes it (fp32)
  golden.safetensors               prompt_ids [T] i64, full_logits [T, V] f32,
                                   generated_ids [N] i64 (greedy), step_logits [N, V] f32
                                   (step_logits[i] is the distribution that chose generated_ids[i])
  meta.json                        sizes, the smallest top-1/top-2 logit gap seen (how robust the
                                   greedy tokens are to rounding), the cache-vs-no-cache check

Needs torch and transformers 5.17 (runs on CPU or GPU; fp32 throughout, deterministic).
Usage: python3 tools/make_v4_fixtures.py [--out tests/fixtures]
"""
import argparse
import json
import math
import os

import torch
from safetensors.torch import save_file
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

S, C, H = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"

BASE = dict(
    vocab_size=512, hidden_size=64, moe_intermediate_size=32, num_attention_heads=4,
    head_dim=32, q_lora_rank=32, qk_rope_head_dim=16, num_experts_per_tok=3,
    n_routed_experts=8, o_groups=2, o_lora_rank=16, index_n_heads=8, index_head_dim=24,
    routed_scaling_factor=1.5, swiglu_limit=10.0, max_position_embeddings=4096,
    bos_token_id=0, eos_token_id=1,
)

CONFIGS = {
    # Every layer type, YaRN on compressed layers, hash + learned MoE, hc_mult 4.
    "v4_tiny_yarn": dict(
        BASE, num_hidden_layers=5, layer_types=[S, C, H, C, H],
        mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe", "moe"],
        compress_rates={C: 4, H: 16}, sliding_window=16, index_topk=8, hc_mult=4,
        rope_parameters={"rope_type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 64,
                         "beta_fast": 32, "beta_slow": 1},
        prompt_len=320),
    # Plain RoPE everywhere, hc_mult 2, CSA first.
    "v4_tiny_plain_hc2": dict(
        BASE, num_hidden_layers=3, layer_types=[C, S, H],
        mlp_layer_types=["hash_moe", "moe", "moe"],
        compress_rates={C: 4, H: 8}, sliding_window=8, index_topk=16, hc_mult=2,
        compress_rope_theta=50000.0, prompt_len=300),
    # The real ratios (4 / 128) and window 128, hc_mult 3, one hash layer.
    "v4_tiny_r128_hc3": dict(
        BASE, num_hidden_layers=3, layer_types=[H, C, S],
        mlp_layer_types=["hash_moe", "moe", "moe"],
        compress_rates={C: 4, H: 128}, sliding_window=128, index_topk=32, hc_mult=3,
        rope_parameters={"rope_type": "yarn", "factor": 16.0,
                         "original_max_position_embeddings": 256,
                         "beta_fast": 32, "beta_slow": 1},
        prompt_len=400),
    # The CUDA backend's fast-kernel shapes (8 heads x 64, indexer 8 x 64) with choices that
    # bf16 cannot flip: the indexer keeps every entry (top-k >= entries), learned routing
    # picks every expert (K = E, the weights still vary), and every greedy step's top-1 /
    # top-2 gap is a clear fraction of the logits' spread (bf16_margin below).
    "v4_tiny_gpu": dict(
        BASE, num_hidden_layers=3, layer_types=[S, C, H],
        mlp_layer_types=["hash_moe", "moe", "moe"],
        num_attention_heads=8, head_dim=64, qk_rope_head_dim=32, index_n_heads=8, index_head_dim=64,
        n_routed_experts=4, num_experts_per_tok=4,
        compress_rates={C: 4, H: 16}, sliding_window=16, index_topk=128, hc_mult=4,
        rope_parameters={"rope_type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 64,
                         "beta_fast": 32, "beta_slow": 1},
        vocab_size=32, prompt_len=320, bf16_margin=0.06),
    # The same guarantees at shapes only the shape-generic kernels serve (4 heads x 32, indexer
    # 8 x 24, hc_mult 2), so the whole-model comparison covers them too.
    "v4_tiny_gpu_generic": dict(
        BASE, num_hidden_layers=3, layer_types=[C, S, H],
        mlp_layer_types=["hash_moe", "moe", "moe"],
        n_routed_experts=4, num_experts_per_tok=4,
        compress_rates={C: 4, H: 8}, sliding_window=8, index_topk=128, hc_mult=2,
        compress_rope_theta=50000.0, vocab_size=32, prompt_len=300, bf16_margin=0.06),
}
NEW_TOKENS = 40


def randomise(model, cfg, gen):
    """Random values for every parameter and persistent buffer, scaled so activations and
    logits have spread (greedy tokens then have clear margins)."""
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif p.dim() >= 2:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=gen) * (1.5 / math.sqrt(fan_in)))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    for name, b in model.named_buffers():
        with torch.no_grad():
            if name.endswith("tid2eid"):
                rows = [torch.randperm(cfg.n_routed_experts, generator=gen)[: cfg.num_experts_per_tok]
                        for _ in range(b.shape[0])]
                b.copy_(torch.stack(rows))
            elif name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn(b.shape, generator=gen) * 0.3)
    # Positive indexer head weights (as trained indexers mostly have) keep scores above zero,
    # so the top-k boundary never falls on exact ReLU-zero ties.
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("weights_proj.weight"):
                p.copy_(p.abs() + 0.5 / math.sqrt(p.shape[-1]))
    # HC scales near 1 and modest biases keep Sinkhorn and sigmoids out of saturation.
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("hc.scale") or name.endswith("hc_scale"):
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=gen))


class MarginProbe:
    """Records how far every discrete choice is from a tie: the indexer's k-th vs (k+1)-th
    score among causally valid entries, the router's k-th vs (k+1)-th biased score, for
    every query. A fixture whose choices sit on a near-tie would make the reference itself
    unstable (a different matmul blocking flips the pick), so such seeds are rejected."""

    def __init__(self, model, cfg):
        self.min_index_gap = float("inf")
        self.min_router_gap = float("inf")
        self.positions = None
        self.handles = []
        for layer in model.model.layers:
            comp = layer.self_attn.compressor
            if comp is not None and hasattr(comp, "indexer"):
                ratio, k = comp.indexer.compress_rate, comp.indexer.index_topk
                self.handles.append(comp.indexer.register_forward_pre_hook(self._positions))
                self.handles.append(comp.indexer.scorer.register_forward_hook(
                    lambda m, i, o, ratio=ratio, k=k: self._index(o, ratio, k)))
            gate = layer.mlp.gate
            if hasattr(gate, "e_score_correction_bias"):
                self.handles.append(gate.register_forward_hook(
                    lambda m, i, o: self._router(m, i[0])))

    def _positions(self, module, args):
        self.positions = args[2][0]

    def _index(self, scores, ratio, k):
        for s in range(scores.shape[1]):
            valid = min(int(self.positions[s] + 1) // ratio, scores.shape[2])
            if valid > k:
                top = scores[0, s, :valid].topk(k + 1).values
                gap = float(top[k - 1] - top[k]) / max(1.0, float(top[k - 1].abs()))
                self.min_index_gap = min(self.min_index_gap, gap)

    def _router(self, gate, x):
        logits = x.reshape(-1, gate.hidden_dim) @ gate.weight.t()
        sel = torch.sqrt(torch.nn.functional.softplus(logits)) + gate.e_score_correction_bias
        if gate.top_k >= sel.shape[-1]:
            return  # every expert is picked: no choice to flip
        top = sel.topk(gate.top_k + 1, dim=-1).values
        gap = (top[:, -2] - top[:, -1]) / top[:, -2].abs().clamp(min=1.0)
        self.min_router_gap = min(self.min_router_gap, float(gap.min()))


# Smallest accepted gap between a chosen and a rejected candidate, relative to the
# candidate's magnitude: far above fp32 rounding (~1e-6), so an fp32 engine picks the same.
MIN_CHOICE_GAP = 1e-5


@torch.no_grad()
def make(name, spec, out_dir, seed, stride=1):
    for attempt in range(0, 2000 * stride, stride):
        if make_once(name, spec, out_dir, seed + 7919 * attempt):
            return
    raise SystemExit(f"{name}: no seed gave well-separated choices")


@torch.no_grad()
def make_once(name, spec, out_dir, seed):
    spec = dict(spec)
    prompt_len = spec.pop("prompt_len")
    bf16_margin = spec.pop("bf16_margin", None)
    cfg = DeepseekV4Config(**spec)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = DeepseekV4ForCausalLM(cfg).float().eval()
    randomise(model, cfg, gen)
    if bf16_margin is not None:
        # Weights exactly representable in bf16: a bf16 engine then rounds activations only.
        with torch.no_grad():
            for p in model.parameters():
                if p.is_floating_point():
                    p.copy_(p.to(torch.bfloat16).float())

    d = os.path.join(out_dir, name)
    model_dir = os.path.join(d, "model")
    os.makedirs(model_dir, exist_ok=True)
    model.save_pretrained(model_dir, safe_serialization=True)
    for f in os.listdir(model_dir):
        if f.startswith("generation_config"):
            os.remove(os.path.join(model_dir, f))

    # Reload from disk so the golden logits come from exactly the saved weights.
    # The reference runs in float64: its discrete choices (indexer top-k, expert top-k,
    # greedy argmax) are then exact, and the fp32 goldens carry no reference rounding.
    model = DeepseekV4ForCausalLM.from_pretrained(
        model_dir, dtype=torch.float64, experts_implementation="eager", attn_implementation="eager").eval()
    probe = MarginProbe(model, cfg)

    prompt = torch.randint(2, cfg.vocab_size, (1, prompt_len), generator=gen)
    full = model(input_ids=prompt, use_cache=False).logits[0]

    out = model(input_ids=prompt, use_cache=True)
    cache = out.past_key_values
    logits = out.logits[0, -1]
    generated, steps = [], []
    for _ in range(NEW_TOKENS):
        steps.append(logits.clone())
        tok = int(torch.argmax(logits))
        generated.append(tok)
        out = model(input_ids=torch.tensor([[tok]]), past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        logits = out.logits[0, -1]
    step_logits = torch.stack(steps)
    # Greedy steps a bf16 engine must reproduce: each step's top-1/top-2 gap relative to the
    # spread of that step's logits.
    step_top2 = step_logits.topk(2, dim=-1).values
    rel_gap = float(((step_top2[:, 0] - step_top2[:, 1]) / step_logits.std(dim=-1)).min())
    if bf16_margin is not None and rel_gap < bf16_margin:
        print(name, "seed", seed, "rejected: greedy gap %.3f of the logits' spread" % rel_gap)
        return False

    # Cross-check HF itself: a no-cache forward over prompt + generated tokens must give the
    # same distributions as the incremental path.
    seq = torch.cat([prompt[0], torch.tensor(generated[:-1])]).unsqueeze(0)
    again = model(input_ids=seq, use_cache=False).logits[0, prompt_len - 1:]
    cache_err = float((again - step_logits).norm() / step_logits.norm())

    if min(probe.min_index_gap, probe.min_router_gap) < MIN_CHOICE_GAP:
        print(name, "seed", seed, "rejected: index gap %.2e, router gap %.2e"
              % (probe.min_index_gap, probe.min_router_gap))
        return False

    both = torch.cat([full, step_logits])
    top2 = both.topk(2, dim=-1).values
    min_gap = float((top2[:, 0] - top2[:, 1]).min())

    full, step_logits = full.float(), step_logits.float()
    save_file({
        "prompt_ids": prompt[0].to(torch.int64).contiguous(),
        "full_logits": full.contiguous(),
        "generated_ids": torch.tensor(generated, dtype=torch.int64),
        "step_logits": step_logits.contiguous(),
    }, os.path.join(d, "golden.safetensors"))
    meta = {"prompt_len": prompt_len, "min_index_gap": probe.min_index_gap,
            "min_router_gap": probe.min_router_gap, "new_tokens": NEW_TOKENS, "seed": seed,
            "min_top1_top2_gap": min_gap, "min_greedy_gap_over_spread": rel_gap,
            "bf16_margins": bf16_margin is not None, "cache_vs_full_rel_l2": cache_err,
            "transformers": __import__("transformers").__version__,
            "torch": torch.__version__}
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(name, meta)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"))
    ap.add_argument("--only", nargs="*", help="make only these fixtures")
    ap.add_argument("--search", type=int, nargs=2, default=[0, 1], metavar=("START", "STRIDE"),
                    help="seed attempts START, START+STRIDE, ... (parallel searches)")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    for i, (name, spec) in enumerate(CONFIGS.items()):
        if args.only and name not in args.only:
            continue
        make(name, spec, args.out, seed=1000 + i + 7919 * args.search[0], stride=args.search[1])


if __name__ == "__main__":
    main()
