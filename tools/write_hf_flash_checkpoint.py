#!/usr/bin/env python3
"""Writes a DeepSeek-V4 checkpoint at V4-Flash widths with HF transformers, as a new user would
get one: the model built from its config with random weights (on the GPU when there is one)
and saved by `save_pretrained` in bf16, sharded. For timing the server's checkpoint loading
(`tools/gpu_run.sh load`); the values are noise.

Usage: write_hf_flash_checkpoint.py OUT_DIR [--layers N] [--shard-size 5GB]
"""
import argparse
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

S, C, H = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"


def flash_config(layers):
    # bench/configs/deepseek-v4-flash in transformers' keys; CSA and HCA layers alternate.
    kinds = [C if i % 2 == 0 else H for i in range(layers)]
    return dict(
        vocab_size=129280, hidden_size=4096, num_hidden_layers=layers, num_attention_heads=64,
        num_key_value_heads=1, head_dim=512, qk_rope_head_dim=64, partial_rotary_factor=0.125,
        q_lora_rank=1024, o_groups=8, o_lora_rank=1024, sliding_window=128,
        max_position_embeddings=65536, index_n_heads=64, index_head_dim=128, index_topk=512,
        n_routed_experts=256, n_shared_experts=1, num_experts_per_tok=6, moe_intermediate_size=2048,
        hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6, routed_scaling_factor=1.5,
        swiglu_limit=10.0, scoring_func="sqrtsoftplus", norm_topk_prob=True, hidden_act="silu",
        num_nextn_predict_layers=1, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, layer_types=kinds, mlp_layer_types=["moe"] * layers,
        compress_rates={C: 4, H: 128}, compress_rope_theta=160000.0, rope_theta=10000.0,
        rope_parameters={
            "main": {"partial_rotary_factor": 0.125, "rope_theta": 10000.0, "rope_type": "default"},
            "compress": {"attention_factor": 1.0, "beta_fast": 32, "beta_slow": 1, "factor": 16.0,
                         "original_max_position_embeddings": 65536, "partial_rotary_factor": 0.125,
                         "rope_theta": 160000.0, "rope_type": "yarn", "type": "yarn"}},
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--shard-size", default="5GB")
    a = ap.parse_args()
    config = AutoConfig.for_model("deepseek_v4", **flash_config(a.layers))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    start = time.time()
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    built = time.time()
    model.save_pretrained(a.out, max_shard_size=a.shard_size)
    params = sum(p.numel() for p in model.parameters())
    print(f"{params / 1e9:.2f}B parameters built in {built - start:.1f} s on {device}, "
          f"saved in {time.time() - built:.1f} s to {a.out}")


if __name__ == "__main__":
    main()
