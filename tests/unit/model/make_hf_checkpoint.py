#!/usr/bin/env python3
"""Writes a small random DeepSeek-V4 checkpoint laid out as transformers 5.17 `save_pretrained`
does (float32, `model.` prefix, `attn.norm` for kv_norm, nested rope_parameters), for the
converter test. Dimensions are chosen so that fp8 weights have several and partial 128x128
blocks; some rows are scaled up or down and one block is zero so the block scales differ, and
one expert row holds exact e2m1 rounding ties.

Usage: make_hf_checkpoint.py OUT_DIR [--seed N]
"""
import argparse
import json
import os

import numpy as np
from safetensors.numpy import save_file

S, C, H = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"

CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "dtype": "float32",
    "vocab_size": 300, "hidden_size": 192, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 64, "qk_rope_head_dim": 16,
    "partial_rotary_factor": 0.25, "q_lora_rank": 160, "o_groups": 2, "o_lora_rank": 48,
    "sliding_window": 16, "max_position_embeddings": 256, "index_n_heads": 2,
    "index_head_dim": 32, "index_topk": 4, "n_routed_experts": 4, "n_shared_experts": 1,
    "num_experts_per_tok": 2, "moe_intermediate_size": 96, "hc_mult": 2, "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-06, "rms_norm_eps": 1e-06, "routed_scaling_factor": 1.5, "swiglu_limit": 10.0,
    "scoring_func": "sqrtsoftplus", "norm_topk_prob": True, "hidden_act": "silu",
    "num_nextn_predict_layers": 1, "bos_token_id": 0, "eos_token_id": 1,
    "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
    "layer_types": [S, C, H, C], "mlp_layer_types": ["hash_moe", "hash_moe", "moe", "moe"],
    "compress_rates": {C: 4, H: 8}, "compress_rope_theta": 160000.0, "rope_theta": 10000.0,
    "rope_parameters": {
        "main": {"partial_rotary_factor": 0.25, "rope_theta": 10000.0, "rope_type": "default"},
        "compress": {"attention_factor": 1.0, "beta_fast": 32, "beta_slow": 1, "factor": 4.0,
                     "original_max_position_embeddings": 64, "partial_rotary_factor": 0.25,
                     "rope_theta": 160000.0, "rope_type": "yarn", "type": "yarn"}},
    "transformers_version": "5.17.0",
}


def shapes(c):
    """HF save_pretrained names and shapes for config `c`."""
    V, Hd, D, Q = c["vocab_size"], c["hidden_size"], c["head_dim"], c["q_lora_rank"]
    nh, G, R = c["num_attention_heads"], c["o_groups"], c["o_lora_rank"]
    IH, ID, I, E = c["index_n_heads"], c["index_head_dim"], c["moe_intermediate_size"], c["n_routed_experts"]
    hc, K = c["hc_mult"], c["num_experts_per_tok"]
    mix = (2 + hc) * hc
    out = {"head.weight": (V, Hd), "model.embed_tokens.weight": (V, Hd), "model.norm.weight": (Hd,),
           "model.hc_head.hc_fn": (hc, hc * Hd), "model.hc_head.hc_base": (hc,),
           "model.hc_head.hc_scale": (1,)}
    for i, (attn, mlp) in enumerate(zip(c["layer_types"], c["mlp_layer_types"])):
        p = f"model.layers.{i}."
        out.update({
            p + "attn.attn_sink": (nh,), p + "attn.norm.weight": (D,), p + "attn.q_norm.weight": (Q,),
            p + "attn.wq_a.weight": (Q, Hd), p + "attn.wq_b.weight": (nh * D, Q),
            p + "attn.wkv.weight": (D, Hd), p + "attn.wo_a.weight": (G * R, nh * D // G),
            p + "attn.wo_b.weight": (Hd, G * R), p + "attn_norm.weight": (Hd,),
            p + "ffn_norm.weight": (Hd,), p + "ffn.gate.weight": (E, Hd),
            p + "ffn.shared_experts.w1.weight": (I, Hd), p + "ffn.shared_experts.w2.weight": (Hd, I),
            p + "ffn.shared_experts.w3.weight": (I, Hd)})
        for kind in ("attn", "ffn"):
            out.update({p + f"hc_{kind}_fn": (mix, hc * Hd), p + f"hc_{kind}_base": (mix,),
                        p + f"hc_{kind}_scale": (3,)})
        for e in range(E):
            out.update({p + f"ffn.experts.{e}.w1.weight": (I, Hd),
                        p + f"ffn.experts.{e}.w2.weight": (Hd, I),
                        p + f"ffn.experts.{e}.w3.weight": (I, Hd)})
        out[p + ("ffn.gate.tid2eid" if mlp == "hash_moe" else "ffn.gate.bias")] = (
            (V, K) if mlp == "hash_moe" else (E,))
        if attn != S:
            ratio = c["compress_rates"][attn]
            width = 2 * D if attn == C else D  # CSA compressors overlap two blocks
            out.update({p + "attn.compressor.ape": (ratio, width), p + "attn.compressor.norm.weight": (D,),
                        p + "attn.compressor.wkv.weight": (width, Hd),
                        p + "attn.compressor.wgate.weight": (width, Hd)})
        if attn == C:
            q = p + "attn.indexer."
            out.update({q + "compressor.ape": (ratio, 2 * ID), q + "compressor.norm.weight": (ID,),
                        q + "compressor.wkv.weight": (2 * ID, Hd), q + "compressor.wgate.weight": (2 * ID, Hd),
                        q + "weights_proj.weight": (IH, Hd), q + "wq_b.weight": (IH * ID, Q)})
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    tensors = {}
    for name, shape in shapes(CONFIG).items():
        if name.endswith("tid2eid"):
            tensors[name] = rng.integers(0, CONFIG["n_routed_experts"], size=shape, dtype=np.int64)
            continue
        w = rng.standard_normal(shape).astype(np.float32) * np.float32(0.05)
        if w.ndim == 2 and w.shape[0] > 3:
            w[0] *= np.float32(300.0)   # a loud row: its blocks get large scales
            w[1] *= np.float32(1e-3)    # a quiet row
            w[2, :32] = 0.0             # an all-zero MXFP4 block (and part of an fp8 block)
        tensors[name] = w
    # Exact e2m1 ties at scale 1 (amax 6): 0.25, 0.75, 1.25, 1.75, 2.5, 3.5 and 5, both signs.
    ties = np.array([6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5] * 4, dtype=np.float32)
    ties[8:16] *= -1
    tensors["model.layers.2.ffn.experts.1.w3.weight"][3, :32] = ties
    os.makedirs(args.out_dir, exist_ok=True)
    save_file(tensors, os.path.join(args.out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(args.out_dir, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)


if __name__ == "__main__":
    main()
