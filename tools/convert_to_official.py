#!/usr/bin/env python3
"""Rewrites an HF-saved float32 DeepSeek-V4 checkpoint in the official release's format.

Writes two directories from one HF `save_pretrained` directory (config.json + float32
safetensors, as transformers' DeepseekV4ForCausalLM saves it):

  --official DIR     the official dialect: names without the `model.` prefix (`embed.weight`,
                     `hc_head_fn`, `layers.N.attn.kv_norm.weight`, ...), sharded with a
                     model.safetensors.index.json, and the release's storage types:
                       FP8 e4m3 + F8_E8M0 128x128 block scales `<name>.scale`
                         for attn.{wq_a,wq_b,wkv,wo_a,wo_b}, attn.indexer.wq_b and
                         ffn.shared_experts.{w1,w2,w3} (and mtp.N.{e_proj,h_proj});
                       MXFP4 routed experts ffn.experts.E.w{1,2,3}: I8 [out, in/2] holding two
                         e2m1 codes per byte (low nibble = even column) + F8_E8M0 [out, in/32];
                       BF16 for embed/head, norm weights, ffn.gate.weight, the compressors'
                         wkv/wgate and indexer.weights_proj;
                       F32 for attn_sink, hc_*, ape and ffn.gate.bias; I64 for tid2eid.
                     config.json uses the official/legacy keys (compress_ratios with the MTP
                     slot, num_hash_layers, qk_rope_head_dim, rope_scaling) instead of HF's.
  --dequantised DIR  the same model in the HF dialect and float32, every value equal to what
                     the official directory dequantises to (HF names, HF config.json).

Quantisation rules (fixed so both directories hold bit-identical values):
  FP8 block scale   s = 2^ceil(log2(max(amax, 1e-4) / 448)) per 128x128 block (edge blocks
                    partial), the smallest power of two that keeps the block within e4m3's
                    range, as the reference quantiser does with UE8M0 scales; codes are
                    e4m3(w / s) rounded to nearest, ties to even.
  MXFP4 scale       s = 2^ceil(log2(max(amax, 1e-4) / 6)) per 32 consecutive inputs; codes are
                    the nearest e2m1 value of w / s, ties to the even code.
  BF16              round to nearest even.
  The 1e-4 floor gives all-zero blocks a finite scale. Dequantised value = decode(code) * s,
  exact in float32.

Needs numpy and safetensors only. Usage:
  convert_to_official.py HF_DIR --official OUT --dequantised OUT [--shards 2]
"""
import argparse
import json
import os
import re
import sys

import numpy as np
from safetensors.numpy import load_file

FP8_MAX = 448.0
FP4_MAX = 6.0
AMAX_FLOOR = 1e-4
FP8_BLOCK = 128
FP4_BLOCK = 32

LAYER = r"^(?:layers|mtp)\.\d+\."
FP8_NAMES = re.compile(LAYER + r"(?:attn\.(?:wq_a|wq_b|wkv|wo_a|wo_b)|attn\.indexer\.wq_b|"
                       r"ffn\.shared_experts\.w[123]|e_proj|h_proj)\.weight$")
FP4_NAMES = re.compile(LAYER + r"ffn\.experts\.\d+\.w[123]\.weight$")
F32_NAMES = re.compile(r"^(?:(?:mtp\.\d+\.)?hc_head_(?:fn|base|scale)|" + LAYER[1:] +
                       r"(?:attn\.attn_sink|hc_(?:attn|ffn)_(?:fn|base|scale)|"
                       r"attn\.(?:indexer\.)?compressor\.ape|ffn\.gate\.bias))$")
BF16_NAMES = re.compile(r"^(?:embed\.weight|head\.weight|norm\.weight|" + LAYER[1:] +
                        r"(?:attn_norm|ffn_norm|enorm|hnorm|norm|attn\.q_norm|attn\.kv_norm|"
                        r"attn\.(?:indexer\.)?compressor\.(?:wkv|wgate|norm)|"
                        r"attn\.indexer\.weights_proj|ffn\.gate)\.weight)$")
I64_NAMES = re.compile(LAYER + r"ffn\.gate\.tid2eid$")

E2M1_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def fail(message):
    sys.exit(f"convert_to_official: {message}")


def official_name(name):
    """HF save_pretrained name -> official name."""
    if name.startswith("model."):
        name = name[len("model."):]
    renames = {"embed_tokens.weight": "embed.weight", "lm_head.weight": "head.weight",
               "hc_head.hc_fn": "hc_head_fn", "hc_head.hc_base": "hc_head_base",
               "hc_head.hc_scale": "hc_head_scale"}
    if name in renames:
        return renames[name]
    # HF saves the attention's kv_norm as `attn.norm`; an MTP block (`mtp.N.*`, written
    # beside the HF checkpoint in the same dialect) does too.
    return re.sub(r"^((?:layers|mtp)\.\d+\.attn)\.norm\.weight$", r"\1.kv_norm.weight", name)


# ---- number formats -------------------------------------------------------------------------

def pow2_scale(amax, qmax):
    """Smallest power of two >= max(amax, floor) / qmax, as float64, with its exponent."""
    m, e = np.frexp(np.maximum(amax.astype(np.float64), AMAX_FLOOR) / qmax)
    exponent = np.where(m == 0.5, e - 1, e)  # exact powers of two keep their exponent
    if exponent.min() < -127 or exponent.max() > 127:
        fail("a block scale is outside the UE8M0 range")
    return np.ldexp(1.0, exponent), (exponent + 127).astype(np.uint8)


def e4m3_decode_table():
    codes = np.arange(256)
    exp = (codes >> 3) & 0xF
    man = codes & 0x7
    mag = np.where(exp == 0, np.ldexp(man.astype(np.float64), -9),
                   np.ldexp(1.0 + man / 8.0, exp - 7))
    mag = np.where((exp == 0xF) & (man == 0x7), np.nan, mag)
    return np.where(codes & 0x80, -mag, mag).astype(np.float32)


def e4m3_encode(x):
    """float64 values with |x| <= 448 -> e4m3 codes, round to nearest even."""
    a = np.abs(x)
    sign = np.where(np.signbit(x), 0x80, 0).astype(np.int64)
    sub = np.rint(a * 512.0).astype(np.int64)  # multiples of 2^-9; 8 is the code of 2^-6
    m, e = np.frexp(np.where(a > 0, a, 1.0))
    exp = e - 1
    mant = np.rint(np.ldexp(a, -exp) * 8.0).astype(np.int64)  # 8..16
    exp = np.where(mant == 16, exp + 1, exp)
    mant = np.where(mant == 16, 8, mant)
    normal = ((exp + 7) << 3) | (mant - 8)
    code = np.where(a < 2.0 ** -6, sub, normal)
    if code.max(initial=0) > 0x7E:
        fail("an fp8 value exceeded 448 after scaling")
    return (code | sign).astype(np.uint8)


def e2m1_encode(x):
    """float64 values with |x| <= 6 -> e2m1 codes (4 bits), nearest, ties to the even code."""
    a = np.abs(x)
    mids = (E2M1_VALUES[1:] + E2M1_VALUES[:-1]) / 2
    idx = np.searchsorted(mids, a, side="left")  # a tie lands on the lower value
    tie = (idx < len(mids)) & (a == mids[np.minimum(idx, len(mids) - 1)])
    idx = np.where(tie & (idx % 2 == 1), idx + 1, idx)
    return (idx | np.where(np.signbit(x), 8, 0)).astype(np.uint8)


def e2m1_decode(codes):
    mag = E2M1_VALUES[codes & 7]
    return np.where(codes & 8, -mag, mag).astype(np.float32)


def to_bf16_bits(w):
    if not np.all(np.isfinite(w)):
        fail("non-finite weight")
    b = w.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16_bits(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def block_amax(w, rows, cols):
    """Per-block max |w| for blocks of rows x cols, edge blocks partial."""
    out_r, out_c = -(-w.shape[0] // rows), -(-w.shape[1] // cols)
    padded = np.zeros((out_r * rows, out_c * cols), dtype=np.float64)
    padded[:w.shape[0], :w.shape[1]] = np.abs(w)
    return padded.reshape(out_r, rows, out_c, cols).max(axis=(1, 3))


def quantise_fp8(w):
    """-> (e4m3 codes [out, in], ue8m0 [ceil(out/128), ceil(in/128)], dequantised f32)."""
    scale, scale_bits = pow2_scale(block_amax(w, FP8_BLOCK, FP8_BLOCK), FP8_MAX)
    full = np.repeat(np.repeat(scale, FP8_BLOCK, 0), FP8_BLOCK, 1)[:w.shape[0], :w.shape[1]]
    codes = e4m3_encode(w.astype(np.float64) / full)
    deq = e4m3_decode_table()[codes] * full.astype(np.float32)
    return codes, scale_bits, deq


def quantise_mxfp4(w):
    """-> (packed I8 [out, in/2], ue8m0 [out, in/32], dequantised f32)."""
    if w.shape[1] % FP4_BLOCK != 0:
        fail(f"expert weight with {w.shape[1]} inputs is not a multiple of {FP4_BLOCK}")
    scale, scale_bits = pow2_scale(block_amax(w, 1, FP4_BLOCK), FP4_MAX)
    full = np.repeat(scale, FP4_BLOCK, 1)
    codes = e2m1_encode(w.astype(np.float64) / full)
    deq = e2m1_decode(codes) * full.astype(np.float32)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8).view(np.int8)
    return packed, scale_bits, deq


# ---- safetensors writing (fp8 dtypes have no numpy type, so the header is written here) ------

ITEM_BYTES = {"I64": 8, "F32": 4, "BF16": 2, "F8_E4M3": 1, "F8_E8M0": 1, "I8": 1}


def write_safetensors(path, tensors):
    """tensors: {name: (safetensors dtype, shape, contiguous numpy array of the raw bytes)}."""
    # Widest dtypes first keeps every tensor aligned to its element size.
    order = sorted(tensors, key=lambda n: (-ITEM_BYTES[tensors[n][0]], n))
    header, offset = {}, 0
    for name in order:
        dtype, shape, array = tensors[name]
        size = array.nbytes
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for name in order:
            f.write(np.ascontiguousarray(tensors[name][2]).tobytes())


# ---- config ---------------------------------------------------------------------------------

def official_config(hf):
    """HF config.json -> the official release's keys for the same model."""
    n = hf["num_hidden_layers"]
    rates = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
    rates.update(hf.get("compress_rates") or {})
    layer_types = hf.get("layer_types")
    mlp_types = hf.get("mlp_layer_types")
    if layer_types is None or mlp_types is None:
        fail("config.json lacks layer_types / mlp_layer_types (not an HF-saved V4 config)")
    ratio = {"sliding_attention": 0, **rates}
    ratios = [ratio[t] for t in layer_types[:n]] + [0] * hf.get("num_nextn_predict_layers", 1)
    num_hash = 0
    while num_hash < n and mlp_types[num_hash] == "hash_moe":
        num_hash += 1
    if any(t != "moe" for t in mlp_types[num_hash:n]):
        fail("mlp_layer_types is not hash_moe layers followed by moe layers")

    rope = hf.get("rope_parameters") or {}
    if not (isinstance(rope.get("main"), dict) and isinstance(rope.get("compress"), dict)):
        fail("rope_parameters is not the nested {main, compress} form HF saves")
    main, compress = rope["main"], rope["compress"]
    if main.get("rope_type", main.get("type", "default")) != "default":
        fail("the official format has no scaling on the main (sliding-window) RoPE table")
    head_dim = hf["head_dim"]
    factor = hf.get("partial_rotary_factor") or 64 / 512

    out = {k: v for k, v in hf.items()
           if k not in ("layer_types", "mlp_layer_types", "compress_rates", "rope_parameters",
                        "partial_rotary_factor", "dtype", "torch_dtype")}
    out["compress_ratios"] = ratios
    if rates != {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}:
        # Only 0/4/128 are implied by compress_ratios alone; other rates travel as legacy keys.
        out["compress_rate_csa"] = rates["compressed_sparse_attention"]
        out["compress_rate_hca"] = rates["heavily_compressed_attention"]
    out["num_hash_layers"] = num_hash
    out["qk_rope_head_dim"] = int(head_dim * factor)
    out["rope_theta"] = main.get("rope_theta", hf.get("rope_theta", 10000.0))
    out["compress_rope_theta"] = compress.get("rope_theta", hf.get("rope_theta", 10000.0))
    if compress.get("rope_type", compress.get("type", "default")) == "yarn":
        scaling = {"type": "yarn", "factor": compress["factor"],
                   "original_max_position_embeddings": compress.get(
                       "original_max_position_embeddings", hf["max_position_embeddings"]),
                   "beta_fast": compress.get("beta_fast") or 32,
                   "beta_slow": compress.get("beta_slow") or 1}
        if compress.get("attention_factor", 1.0) != 1.0:
            scaling["attention_factor"] = compress["attention_factor"]
        out["rope_scaling"] = scaling
    out["torch_dtype"] = "bfloat16"
    out["expert_dtype"] = "fp4"
    out["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
                                  "activation_scheme": "dynamic",
                                  "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
    return out


# ---- driver ---------------------------------------------------------------------------------

def shard_files(directory):
    """The checkpoint's safetensors files: its index's, else every one in the directory."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = sorted(f for f in os.listdir(directory) if f.endswith(".safetensors"))
    if not files:
        fail(f"no safetensors files in {directory}")
    return files


def load_hf(directory):
    files = shard_files(directory)
    tensors = {}
    for file in files:
        for name, array in load_file(os.path.join(directory, file)).items():
            if name in tensors:
                fail(f"tensor {name} is stored twice")
            tensors[name] = array
    return tensors


def convert(hf_tensors):
    """-> (official {name: (dtype, shape, bytes array)}, dequantised {hf name: f32 array})."""
    official, dequantised = {}, {}
    for hf_name, w in sorted(hf_tensors.items()):
        name = official_name(hf_name)
        if I64_NAMES.match(name):
            official[name] = ("I64", w.shape, w.astype(np.int64))
            dequantised[hf_name] = w.astype(np.int64)
            continue
        if w.dtype != np.float32:
            fail(f"{hf_name} is {w.dtype}; the input must be a float32 checkpoint")
        if FP8_NAMES.match(name):
            codes, scale, deq = quantise_fp8(w)
            official[name] = ("F8_E4M3", w.shape, codes)
            official[name[:-len(".weight")] + ".scale"] = ("F8_E8M0", scale.shape, scale)
        elif FP4_NAMES.match(name):
            packed, scale, deq = quantise_mxfp4(w)
            official[name] = ("I8", packed.shape, packed)
            official[name[:-len(".weight")] + ".scale"] = ("F8_E8M0", scale.shape, scale)
        elif BF16_NAMES.match(name):
            bits = to_bf16_bits(w)
            official[name] = ("BF16", w.shape, bits)
            deq = from_bf16_bits(bits)
        elif F32_NAMES.match(name):
            official[name] = ("F32", w.shape, w)
            deq = w
        else:
            fail(f"no storage rule for tensor {hf_name} (official name {name})")
        dequantised[hf_name] = deq.astype(np.float32)
    return official, dequantised


def write_official(out_dir, tensors, config, num_shards):
    os.makedirs(out_dir, exist_ok=True)
    names = sorted(tensors)
    shards = [names[i::num_shards] for i in range(num_shards)]
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{num_shards:05d}.safetensors"
        write_safetensors(os.path.join(out_dir, file), {n: tensors[n] for n in shard})
        for n in shard:
            weight_map[n] = file
            total += tensors[n][2].nbytes
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def write_dequantised(out_dir, tensors, hf_config):
    os.makedirs(out_dir, exist_ok=True)
    raw = {n: ("I64" if a.dtype == np.int64 else "F32", a.shape, a) for n, a in tensors.items()}
    write_safetensors(os.path.join(out_dir, "model.safetensors"), raw)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hf_dir")
    parser.add_argument("--official", required=True, help="output directory, official dialect")
    parser.add_argument("--dequantised", required=True, help="output directory, HF dialect f32")
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args()

    with open(os.path.join(args.hf_dir, "config.json")) as f:
        hf_config = json.load(f)
    if hf_config.get("model_type") != "deepseek_v4":
        fail(f"model_type is {hf_config.get('model_type')!r}, not 'deepseek_v4'")
    official, dequantised = convert(load_hf(args.hf_dir))
    write_official(args.official, official, official_config(hf_config), max(1, args.shards))
    write_dequantised(args.dequantised, dequantised, hf_config)
    print(f"wrote {len(official)} official tensors to {args.official} and "
          f"{len(dequantised)} dequantised tensors to {args.dequantised}")


if __name__ == "__main__":
    main()
