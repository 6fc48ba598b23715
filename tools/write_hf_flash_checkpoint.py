#!/usr/bin/env python3
"""Writes a DeepSeek-V4 checkpoint at V4-Flash widths with HF transformers, as a new user would
get one: the model built from its config with random weights (on the GPU when there is one)
and saved by `save_pretrained` in bf16, sharded. For timing the server's checkpoint loading
(`tools/gpu_run.sh load`); the values are noise.

--official DIR also writes the same model in the official release's format (FP8 dense with
UE8M0 128x128 block scales, MXFP4 routed experts, BF16/F32 for the rest), by the naming,
storage and config rules of tools/convert_to_official.py; the quantisation runs here in PyTorch
on the GPU (same rounding rules), since that script's numpy path is sized for test fixtures.
With an existing OUT_DIR only the conversion runs.

Usage: write_hf_flash_checkpoint.py OUT_DIR [--layers N] [--shard-size 5GB] [--official DIR]
"""
import argparse
import json
import os
import sys
import time

import torch
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import convert_to_official as co  # noqa: E402

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


def pow2_scale(amax, qmax):
    """Smallest power of two >= max(amax, floor) / qmax and its UE8M0 byte (as co.pow2_scale)."""
    m, e = torch.frexp(torch.clamp(amax.double(), min=co.AMAX_FLOOR) / qmax)
    exponent = torch.where(m == 0.5, e - 1, e)
    if exponent.min() < -127 or exponent.max() > 127:
        co.fail("a block scale is outside the UE8M0 range")
    return torch.ldexp(torch.ones_like(m), exponent), (exponent + 127).to(torch.uint8)


def quantise_fp8(w):
    """-> (e4m3 codes [out, in], ue8m0 [ceil(out/128), ceil(in/128)]) as uint8 tensors."""
    b = co.FP8_BLOCK
    rows, cols = -(-w.shape[0] // b), -(-w.shape[1] // b)
    padded = torch.zeros(rows * b, cols * b, dtype=torch.float32, device=w.device)
    padded[:w.shape[0], :w.shape[1]] = w.abs()
    scale, bits = pow2_scale(padded.view(rows, b, cols, b).amax(dim=(1, 3)), co.FP8_MAX)
    full = scale.repeat_interleave(b, 0).repeat_interleave(b, 1)[:w.shape[0], :w.shape[1]]
    codes = (w.double() / full).to(torch.float8_e4m3fn)  # nearest, ties to even
    return codes.view(torch.uint8), bits


def quantise_mxfp4(w):
    """-> (packed [out, in/2] two e2m1 codes per byte, low nibble even column; ue8m0 [out, in/32])."""
    b = co.FP4_BLOCK
    if w.shape[1] % b != 0:
        co.fail(f"expert weight with {w.shape[1]} inputs is not a multiple of {b}")
    scale, bits = pow2_scale(w.abs().view(w.shape[0], -1, b).amax(dim=2), co.FP4_MAX)
    x = w.double() / scale.repeat_interleave(b, 1)
    values = torch.tensor(co.E2M1_VALUES, dtype=torch.float64, device=w.device)
    mids = (values[1:] + values[:-1]) / 2
    a = x.abs()
    idx = torch.bucketize(a, mids)  # a tie lands on the lower value, as np.searchsorted(left)
    tie = (idx < len(mids)) & (a == mids[idx.clamp(max=len(mids) - 1)])
    idx = torch.where(tie & (idx % 2 == 1), idx + 1, idx)
    codes = (idx | torch.where(torch.signbit(x), 8, 0)).to(torch.uint8)
    return codes[:, 0::2] | (codes[:, 1::2] << 4), bits


def host(t):
    return t.contiguous().cpu().numpy()


def write_official(hf_dir, out_dir, num_shards):
    """Converts the HF checkpoint in hf_dir tensor by tensor on the GPU into out_dir."""
    start = time.time()
    with open(os.path.join(hf_dir, "config.json")) as f:
        hf_config = json.load(f)
    files = co.shard_files(hf_dir)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = {}
    for file in files:
        with safe_open(os.path.join(hf_dir, file), framework="pt", device=device) as shard:
            for hf_name in shard.keys():
                w = shard.get_tensor(hf_name)
                name = co.official_name(hf_name)
                if co.I64_NAMES.match(name):
                    out[name] = ("I64", w.shape, host(w.long()))
                elif co.FP8_NAMES.match(name):
                    codes, bits = quantise_fp8(w.float())
                    out[name] = ("F8_E4M3", w.shape, host(codes))
                    out[name[:-len(".weight")] + ".scale"] = ("F8_E8M0", bits.shape, host(bits))
                elif co.FP4_NAMES.match(name):
                    packed, bits = quantise_mxfp4(w.float())
                    out[name] = ("I8", packed.shape, host(packed).view("int8"))
                    out[name[:-len(".weight")] + ".scale"] = ("F8_E8M0", bits.shape, host(bits))
                elif co.BF16_NAMES.match(name):
                    out[name] = ("BF16", w.shape, host(w.to(torch.bfloat16).view(torch.int16)).view("uint16"))
                elif co.F32_NAMES.match(name):
                    out[name] = ("F32", w.shape, host(w.float()))
                else:
                    co.fail(f"no storage rule for tensor {hf_name} (official name {name})")
    co.write_official(out_dir, out, co.official_config(hf_config), num_shards)
    size = sum(t[2].nbytes for t in out.values())
    print(f"{len(out)} official tensors, {size / 1e9:.2f} GB, written in {time.time() - start:.1f} s to {out_dir}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--shard-size", default="5GB")
    ap.add_argument("--official", help="also write the official-format checkpoint here")
    ap.add_argument("--official-shards", type=int, default=4)
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.out, "config.json")):
        write_hf(a)
    if a.official:
        write_official(a.out, a.official, a.official_shards)


def write_hf(a):
    from transformers import AutoConfig, AutoModelForCausalLM

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
