"""tools/train_demo_model.py --smoke: 3 CPU steps on a few stdlib files, then the checks that
matter for the committed checkpoint: every output exists, the release-format directory is
within the size budget, holds the MTP block under the release's names and the storage types
the converter promises, and the held-out metrics are finite for all three evaluations."""
import json
import math
import os
import struct
import subprocess
import sys

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "DeepseekV4ForCausalLM"):
    pytest.skip("transformers has no deepseek_v4", allow_module_level=True)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "tools", "train_demo_model.py")


def headers(directory):
    out = {}
    for file in os.listdir(directory):
        if file.endswith(".safetensors"):
            with open(os.path.join(directory, file), "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                out.update({k: v for k, v in json.loads(f.read(n)).items() if k != "__metadata__"})
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    args = [sys.executable, SCRIPT, "--smoke", "--out", str(out)]
    if os.environ.get("PEREGRINE_TOKENIZER"):
        args += ["--tokenizer", os.environ["PEREGRINE_TOKENIZER"]]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(out / "results.json") as f:
        return out, json.load(f)


def test_outputs_exist(run):
    out, _ = run
    for rel in ("hf/config.json", "hf/model.safetensors", "hf/mtp.safetensors", "hf/generation_config.json",
                "official/config.json", "official/model.safetensors.index.json",
                "official/generation_config.json", "dequantised/model.safetensors", "data_manifest.json"):
        assert (out / rel).exists(), rel


def test_official_within_budget(run):
    out, results = run
    total = sum(os.path.getsize(out / "official" / f) for f in os.listdir(out / "official"))
    assert total == results["official_sizes"]["total_bytes"]
    assert total <= 20_000_000 and results["within_budget"]
    with open(out / "official" / "model.safetensors.index.json") as f:
        weight_map = json.load(f)["weight_map"]
    assert weight_map["embed.weight"] != weight_map["head.weight"]  # 8.3 MB each, apart


def test_official_layout(run):
    out, _ = run
    with open(out / "official" / "config.json") as f:
        config = json.load(f)
    assert config["compress_ratios"] == [0, 4, 128, 4, 0]  # + the MTP slot
    assert config["num_hash_layers"] == 1 and config["num_nextn_predict_layers"] == 1
    assert config["hc_mult"] == 4 and config["vocab_size"] == 129280
    h = headers(out / "official")
    expected = {
        "embed.weight": "BF16", "head.weight": "BF16", "hc_head_fn": "F32",
        "layers.0.ffn.gate.tid2eid": "I64", "layers.1.ffn.gate.bias": "F32",
        "layers.1.attn.wq_b.weight": "F8_E4M3", "layers.1.attn.wq_b.scale": "F8_E8M0",
        "layers.1.attn.indexer.wq_b.weight": "F8_E4M3", "layers.2.attn.compressor.ape": "F32",
        "layers.3.ffn.experts.7.w2.weight": "I8", "layers.3.ffn.experts.7.w2.scale": "F8_E8M0",
        "mtp.0.e_proj.weight": "F8_E4M3", "mtp.0.h_proj.scale": "F8_E8M0",
        "mtp.0.enorm.weight": "BF16", "mtp.0.hnorm.weight": "BF16", "mtp.0.norm.weight": "BF16",
        "mtp.0.attn.kv_norm.weight": "BF16", "mtp.0.attn.wq_a.weight": "F8_E4M3",
        "mtp.0.ffn.gate.bias": "F32", "mtp.0.ffn.experts.0.w1.weight": "I8",
        "mtp.0.hc_head_fn": "F32", "mtp.0.hc_attn_fn": "F32",
    }
    for name, dtype in expected.items():
        assert name in h and h[name]["dtype"] == dtype, name
    assert h["layers.0.ffn.gate.tid2eid"]["shape"] == [129280, 2]
    assert not any(n.startswith("mtp.0.attn.compressor") or n.endswith("mtp.0.ffn.gate.tid2eid") for n in h)


def test_training_and_eval(run):
    out, results = run
    assert results["training"]["steps"] == 3
    for entry in results["training"]["log"]:
        assert math.isfinite(entry["loss"]) and math.isfinite(entry["mtp_loss"])
    for label in ("hf_fp32", "hf_bf16", "dequantised_fp32"):
        metrics = results["eval"][label]
        assert math.isfinite(metrics["ppl"]) and math.isfinite(metrics["mtp_ppl"]), label
        assert 0 <= metrics["mtp_top1_t_plus_2"] <= 1
    with open(out / "official" / "generation_config.json") as f:
        gen = json.load(f)
    assert gen["bos_token_id"] == 0 and gen["eos_token_id"] == 1
    with open(out / "data_manifest.json") as f:
        manifest = json.load(f)
    assert manifest["splits"]["train"]["files"] > 0 and manifest["splits"]["heldout"]["files"] > 0
