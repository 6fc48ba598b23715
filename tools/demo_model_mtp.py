"""The DeepSeek-V4 multi-token-prediction (MTP) block, which HF transformers' `deepseek_v4`
does not build (DeepseekV4PreTrainedModel drops `mtp.*` tensors on load).

One MTP layer (`num_nextn_predict_layers: 1`) as the V4 paper and the official release lay it
out: for position t,
  e        = e_proj(enorm(embed(token[t+1])))                    the main model's embedding
  stream_j = h_proj(hnorm(main_stream_j[t])) + e, j < hc_mult    the main model's last
                                                                 4-stream state, before hc_head
then one V4 decoder block in the MTP slot (window-only attention, learned-routing MoE, its own
mHC mixers), its own hc_head and norm, and the main model's head: logits for token[t+2].
e_proj(x) + h_proj(y) is the official split of one projection of concat(x, y).

Tensor names (`mtp.0.*`) are the HF save_pretrained dialect of a decoder layer (what
revert_weight_conversion writes for `model.layers.N.*`, checked in `save_names`), which
tools/convert_to_official.py turns into the release's names.
"""
import torch
from torch import nn
from transformers import DeepseekV4Config
from transformers.core_model_loading import revert_weight_conversion
from transformers.masking_utils import create_sliding_window_causal_mask
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as v4

PREFIX = "mtp.0."

# Decoder-layer module keys -> the HF-saved names, for a window-only, learned-routing block.
# (Fused experts are handled apart: gate_up_proj [E, 2I, D] -> w1, w3; down_proj -> w2.)
LAYER_NAMES = {
    "self_attn.q_a_proj.weight": "attn.wq_a.weight",
    "self_attn.q_a_norm.weight": "attn.q_norm.weight",
    "self_attn.q_b_proj.weight": "attn.wq_b.weight",
    "self_attn.kv_proj.weight": "attn.wkv.weight",
    "self_attn.kv_norm.weight": "attn.norm.weight",
    "self_attn.o_a_proj.weight": "attn.wo_a.weight",
    "self_attn.o_b_proj.weight": "attn.wo_b.weight",
    "self_attn.sinks": "attn.attn_sink",
    "mlp.gate.weight": "ffn.gate.weight",
    "mlp.gate.e_score_correction_bias": "ffn.gate.bias",
    "mlp.shared_experts.gate_proj.weight": "ffn.shared_experts.w1.weight",
    "mlp.shared_experts.down_proj.weight": "ffn.shared_experts.w2.weight",
    "mlp.shared_experts.up_proj.weight": "ffn.shared_experts.w3.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "attn_hc.fn": "hc_attn_fn", "attn_hc.base": "hc_attn_base", "attn_hc.scale": "hc_attn_scale",
    "ffn_hc.fn": "hc_ffn_fn", "ffn_hc.base": "hc_ffn_base", "ffn_hc.scale": "hc_ffn_scale",
}
# The block's own tensors outside the decoder layer (already official names).
HEAD_NAMES = {
    "enorm.weight": "enorm.weight", "hnorm.weight": "hnorm.weight",
    "e_proj.weight": "e_proj.weight", "h_proj.weight": "h_proj.weight",
    "norm.weight": "norm.weight",
    "hc_head.hc_fn": "hc_head_fn", "hc_head.hc_base": "hc_head_base", "hc_head.hc_scale": "hc_head_scale",
}


def slot_config(config):
    """The main config with one more layer, the MTP slot: window-only attention, learned MoE
    (compress_ratios' trailing 0 in the release's config)."""
    fields = config.to_dict()
    fields.update(num_hidden_layers=config.num_hidden_layers + 1,
                  layer_types=list(config.layer_types) + ["sliding_attention"],
                  mlp_layer_types=list(config.mlp_layer_types) + ["moe"])
    for key in ("architectures", "transformers_version", "dtype", "torch_dtype"):
        fields.pop(key, None)
    slot = DeepseekV4Config(**fields)
    slot._attn_implementation = "eager"
    slot._experts_implementation = config._experts_implementation
    return slot


class MtpBlock(nn.Module):
    def __init__(self, model):
        """model: the DeepseekV4ForCausalLM this block predicts for (its config and its
        weight initialisation are used; its embedding and head are passed to forward)."""
        super().__init__()
        config = model.config
        self.slot = config.num_hidden_layers
        self.config = slot_config(config)
        d, eps = config.hidden_size, config.rms_norm_eps
        self.enorm = v4.DeepseekV4RMSNorm(d, eps)
        self.hnorm = v4.DeepseekV4RMSNorm(d, eps)
        self.e_proj = nn.Linear(d, d, bias=False)
        self.h_proj = nn.Linear(d, d, bias=False)
        self.block = v4.DeepseekV4DecoderLayer(self.config, self.slot)
        self.hc_head = v4.DeepseekV4HyperHead(config)
        self.norm = v4.DeepseekV4RMSNorm(d, eps)
        for module in self.modules():
            if module is not self:
                model._init_weights(module)

    def forward(self, streams, next_ids, embed_tokens, rotary_emb):
        """streams [B, T, hc, D]: the main model's state before hc_head at positions 0..T-1;
        next_ids [B, T]: the tokens at positions 1..T. -> [B, T, D], the hidden state the
        shared head maps to logits for the tokens at positions 2..T+1."""
        e = self.e_proj(self.enorm(embed_tokens(next_ids)))
        x = self.h_proj(self.hnorm(streams)) + e.unsqueeze(2)
        positions = torch.arange(next_ids.shape[1], device=next_ids.device).unsqueeze(0)
        rope = {kind: rotary_emb(e, position_ids=positions, layer_type=kind)
                for kind in ("main", "compress")}
        mask = create_sliding_window_causal_mask(config=self.config, inputs_embeds=e, attention_mask=None,
                                                 past_key_values=None, position_ids=positions)
        if not isinstance(mask, torch.Tensor):
            raise RuntimeError("expected a dense sliding-window mask for eager attention")
        x = self.block(x, position_embeddings=rope, position_ids=positions, attention_mask=mask,
                       past_key_values=None)
        return self.norm(self.hc_head(x))

    # ---- names ------------------------------------------------------------------------------

    def save_names(self, model):
        """-> {saved name: float32 tensor}, the `mtp.0.*` tensors in HF's save dialect.
        Cross-checked against HF's own reverse mapping for a decoder layer."""
        out = {}
        sd = self.state_dict()
        for key, name in HEAD_NAMES.items():
            out[PREFIX + name] = sd[key]
        block = {k[len("block."):]: v for k, v in sd.items() if k.startswith("block.")}
        inter = self.config.moe_intermediate_size
        for key, value in block.items():
            if key == "mlp.experts.gate_up_proj":
                for e in range(value.shape[0]):
                    out[f"{PREFIX}ffn.experts.{e}.w1.weight"] = value[e, :inter]
                    out[f"{PREFIX}ffn.experts.{e}.w3.weight"] = value[e, inter:]
            elif key == "mlp.experts.down_proj":
                for e in range(value.shape[0]):
                    out[f"{PREFIX}ffn.experts.{e}.w2.weight"] = value[e]
            elif key in LAYER_NAMES:
                out[PREFIX + LAYER_NAMES[key]] = value
            else:
                raise SystemExit(f"MTP block tensor {key} has no saved name")
        # HF's reverse mapping of the same tensors as if they were layer `slot`.
        hf_prefix = f"model.layers.{self.slot}."
        reverted = revert_weight_conversion(model, {hf_prefix + k: v for k, v in block.items()})
        expected = {PREFIX + k[len(hf_prefix):]: v for k, v in reverted.items()}
        mine = {k: v for k, v in out.items() if k[len(PREFIX):] not in HEAD_NAMES.values()}
        if set(expected) != set(mine) or any(not torch.equal(expected[k], mine[k]) for k in mine):
            raise SystemExit("MTP tensor names disagree with transformers' save mapping: "
                             f"{sorted(set(expected) ^ set(mine))[:6]}")
        return {k: v.detach().float().contiguous().cpu() for k, v in out.items()}

    def load_names(self, tensors):
        """Inverse of save_names: tensors {saved name: tensor} -> this module's weights."""
        sd = {}
        for key, name in HEAD_NAMES.items():
            sd[key] = tensors[PREFIX + name]
        for key, name in LAYER_NAMES.items():
            sd["block." + key] = tensors[PREFIX + name]
        num_experts = self.config.n_routed_experts
        sd["block.mlp.experts.gate_up_proj"] = torch.stack([
            torch.cat([tensors[f"{PREFIX}ffn.experts.{e}.w1.weight"],
                       tensors[f"{PREFIX}ffn.experts.{e}.w3.weight"]]) for e in range(num_experts)])
        sd["block.mlp.experts.down_proj"] = torch.stack(
            [tensors[f"{PREFIX}ffn.experts.{e}.w2.weight"] for e in range(num_experts)])
        self.load_state_dict(sd, strict=True)
