#!/usr/bin/env python3
"""Golden fixture for the block drafter in DSpark's layout (docs/decisions/0005-block-drafter-format.md),
its reference forward built from HF transformers' `deepseek_v4` modules.

The target is tests/fixtures/v4_tiny_plain_hc2/model (read, not changed). The drafter gets
random weights in the released layout: `mtp.0.main_proj` / `main_norm`, STAGES window-attention
decoder stages with learned routing (`mtp.<s>.` + the layer names of the target's own sliding
layer), and on the last stage `norm`, `hc_head_{fn,base,scale}`, `markov_head.markov_w{1,2}`
and `confidence_head.proj.weight`.

The reference: the target's decoder-layer outputs at TARGET_LAYERS (forward hooks), averaged
over the hyper-connection lanes and concatenated, give main_x = rms_norm(main_proj(taps)) for
every committed position. A DeepseekV4ForCausalLM of STAGES sliding, learned-routing layers (the
drafter's stages), with the drafter's head mixer and norm and the target's lm_head, runs over
inputs_embeds = [main_x of positions 0..T-1; embed(anchor), embed(noise) x (BLOCK - 1)]: its causal
sliding-window attention is the drafter's window over the committed rows plus the block's
causal rows. Block row i's logits, plus markov_w2 @ markov_w1[the token before it] (the anchor,
then each position's argmax), pick its token; the confidence is sigmoid(proj @ [hidden, markov
row]).

Writes tests/fixtures/dspark_tiny/ (no golden.safetensors, so the whole-model fixture tests
leave it alone):
  model/config.json        the target's config with the dspark keys and num_nextn_predict_layers
  model/model.safetensors  the target's tensors and the drafter's (fp32)
  drafter_golden.safetensors
      tokens [N] i64; anchors [A] i64 (draft after tokens[:T] with anchor tokens[T]);
      block_logits [A, BLOCK, V] f32 (after the Markov term); block_tokens [A, BLOCK] i64;
      confidence [A, BLOCK] f32
  meta.json                the smallest top-1/top-2 gap of the corrected logits, versions

Needs torch and transformers 5.17 (CPU, float64 reference). Usage:
  python3 tools/make_dspark_fixture.py [--out tests/fixtures]
"""
import argparse
import json
import math
import os
import sys
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_v4_fixtures import randomise  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.path.join(ROOT, "tests", "fixtures", "v4_tiny_plain_hc2", "model")
STAGES, BLOCK, RANK, NOISE = 2, 4, 16, 5
TARGET_LAYERS = [0, 2]
ANCHORS = [3, 9, 17, 30]  # window 8: the later blocks see a wrapped window
MIN_GAP = 1e-5


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def layer_output(o):
    return o[0] if isinstance(o, tuple) else o


@torch.no_grad()
def make_once(out_dir, seed):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    target = DeepseekV4ForCausalLM.from_pretrained(
        TARGET, dtype=torch.float64, experts_implementation="eager", attn_implementation="eager").eval()
    cfg = target.config
    d, hc, vocab, eps = cfg.hidden_size, cfg.hc_mult, cfg.vocab_size, cfg.rms_norm_eps
    sliding = [i for i, t in enumerate(cfg.layer_types) if t == "sliding_attention"
               and cfg.mlp_layer_types[i] == "moe"]
    assert sliding, "the target needs a sliding, learned-routing layer to name the stages' tensors after"

    spec = cfg.to_dict()
    for k in ("architectures", "transformers_version", "_name_or_path", "dtype", "torch_dtype", "model_type"):
        spec.pop(k, None)
    spec.update(num_hidden_layers=STAGES, layer_types=["sliding_attention"] * STAGES,
                mlp_layer_types=["moe"] * STAGES, num_nextn_predict_layers=0)
    dcfg = DeepseekV4Config(**spec)
    dcfg._attn_implementation = "eager"
    dcfg._experts_implementation = "eager"  # float64: the grouped-mm experts take fp32/bf16 only
    drafter = DeepseekV4ForCausalLM(dcfg).float().eval()
    randomise(drafter, dcfg, gen)
    drafter.get_output_embeddings().weight.copy_(target.get_output_embeddings().weight.float())
    main_proj = torch.randn(d, len(TARGET_LAYERS) * d, generator=gen) * (1.5 / math.sqrt(len(TARGET_LAYERS) * d))
    main_norm = 1.0 + 0.2 * torch.randn(d, generator=gen)
    markov_w1 = torch.randn(vocab, RANK, generator=gen) * 0.5
    markov_w2 = torch.randn(vocab, RANK, generator=gen) * (1.5 / math.sqrt(RANK))
    conf_w = torch.randn(1, d + RANK, generator=gen) / math.sqrt(d + RANK)

    # The drafter's tensors under mtp.*, named as the target's own sliding layer names them.
    with tempfile.TemporaryDirectory() as tmp:
        drafter.save_pretrained(tmp, safe_serialization=True)
        stored = {}
        for f in os.listdir(tmp):
            if f.endswith(".safetensors"):
                with safe_open(os.path.join(tmp, f), "pt") as sf:
                    for k in sf.keys():
                        stored[k] = sf.get_tensor(k)
    with safe_open(os.path.join(TARGET, "model.safetensors"), "pt") as sf:
        target_tensors = {k: sf.get_tensor(k) for k in sf.keys()}
    ref_prefix = f"model.layers.{sliding[0]}."
    layer_names = {k[len(ref_prefix):] for k in target_tensors if k.startswith(ref_prefix)}
    tensors = dict(target_tensors)
    last = f"mtp.{STAGES - 1}."
    top = {"model.norm.weight": last + "norm.weight", "model.hc_head.hc_fn": last + "hc_head_fn",
           "model.hc_head.hc_base": last + "hc_head_base", "model.hc_head.hc_scale": last + "hc_head_scale"}
    for s in range(STAGES):
        prefix = f"model.layers.{s}."
        names = {k[len(prefix):] for k in stored if k.startswith(prefix)}
        assert names == layer_names, f"stage {s} tensors differ from the target layer's: {names ^ layer_names}"
        for rest in names:
            canonical = "attn.kv_norm.weight" if rest == "attn.norm.weight" else rest
            tensors[f"mtp.{s}.{canonical}"] = stored[prefix + rest].float().contiguous()
    for k, v in top.items():
        tensors[v] = stored[k].float().contiguous()
    tensors["mtp.0.main_proj.weight"] = main_proj
    tensors["mtp.0.main_norm.weight"] = main_norm
    tensors[last + "markov_head.markov_w1"] = markov_w1
    tensors[last + "markov_head.markov_w2"] = markov_w2
    tensors[last + "confidence_head.proj.weight"] = conf_w

    # The reference in float64.
    drafter = drafter.double()
    taps = {}
    hooks = [target.model.layers[L].register_forward_hook(
        lambda m, i, o, L=L: taps.__setitem__(L, layer_output(o))) for L in TARGET_LAYERS]
    n = max(ANCHORS) + 1
    tokens = torch.randint(2, vocab, (1, n), generator=gen)
    target(input_ids=tokens[:, : n - 1], use_cache=False)
    for h in hooks:
        h.remove()
    for L in TARGET_LAYERS:
        assert taps[L].shape == (1, n - 1, hc, d), f"layer {L} output {tuple(taps[L].shape)}"
    tap = torch.cat([taps[L].mean(dim=-2) for L in TARGET_LAYERS], dim=-1)
    main_x = rms_norm(tap @ main_proj.double().T, main_norm.double(), eps)

    hidden = {}
    drafter.get_output_embeddings().register_forward_pre_hook(lambda m, a: hidden.__setitem__("h", a[0]))
    embed = target.model.embed_tokens
    w1, w2, cw = markov_w1.double(), markov_w2.double(), conf_w.double()[0]
    all_logits, all_tokens, all_conf, min_gap = [], [], [], float("inf")
    for t in ANCHORS:
        block = torch.tensor([[int(tokens[0, t])] + [NOISE] * (BLOCK - 1)])
        x = torch.cat([main_x[:, :t], embed(block)], dim=1)
        logits = drafter(inputs_embeds=x, use_cache=False).logits[0, t:]
        h = hidden["h"][0, t:]
        before = int(tokens[0, t])
        rows, picks, confs = [], [], []
        for i in range(BLOCK):
            r = w1[before]
            row = logits[i] + w2 @ r
            top2 = row.topk(2).values
            min_gap = min(min_gap, float(top2[0] - top2[1]) / max(1.0, float(top2[0].abs())))
            before = int(torch.argmax(row))
            rows.append(row)
            picks.append(before)
            confs.append(torch.sigmoid(cw @ torch.cat([h[i], r])))
        all_logits.append(torch.stack(rows))
        all_tokens.append(picks)
        all_conf.append(torch.stack(confs))
    if min_gap < MIN_GAP:
        print("seed", seed, "rejected: corrected-logit gap %.2e" % min_gap)
        return False

    d_out = os.path.join(out_dir, "dspark_tiny")
    model_dir = os.path.join(d_out, "model")
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(TARGET, "config.json")) as f:
        config = json.load(f)
    config.update(num_nextn_predict_layers=STAGES, dspark_block_size=BLOCK, dspark_noise_token_id=NOISE,
                  dspark_target_layer_ids=TARGET_LAYERS, dspark_markov_rank=RANK)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, os.path.join(model_dir, "model.safetensors"))
    save_file({
        "tokens": tokens[0].to(torch.int64).contiguous(),
        "anchors": torch.tensor(ANCHORS, dtype=torch.int64),
        "block_logits": torch.stack(all_logits).float().contiguous(),
        "block_tokens": torch.tensor(all_tokens, dtype=torch.int64),
        "confidence": torch.stack(all_conf).float().contiguous(),
    }, os.path.join(d_out, "drafter_golden.safetensors"))
    import transformers
    with open(os.path.join(d_out, "meta.json"), "w") as f:
        json.dump({"seed": seed, "min_corrected_gap": min_gap, "stages": STAGES, "block": BLOCK,
                   "target_layers": TARGET_LAYERS, "anchors": ANCHORS,
                   "transformers": transformers.__version__, "torch": torch.__version__}, f, indent=1)
    print("wrote", d_out, "seed", seed, "min gap %.3e" % min_gap)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures"))
    ap.add_argument("--seed", type=int, default=4242)
    args = ap.parse_args()
    for attempt in range(200):
        if make_once(args.out, args.seed + 7919 * attempt):
            return
    raise SystemExit("no seed gave well-separated choices")


if __name__ == "__main__":
    main()
