"""Mamba-2 hybrids (Nemotron-H): layer counts, parameters, FLOPs, import, pricing and refusals."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from supercluster.errors import InputError
from supercluster.formats.hf import from_hf_config
from supercluster.formats.launchers import to_megatron_args
from supercluster.formats.load import load_model
from supercluster.hardware.specs import get_gpu
from supercluster.job import estimate
from supercluster.models.spec import ModelSpec, hybrid_counts
from supercluster.parallelism.framework import get_framework
from supercluster.parallelism.layout import Layout
from supercluster.perf.step import LEDGER

NH56 = load_model("nemotronh-56b")
H100 = get_gpu("h100-sxm")

# nvidia/Nemotron-H-56B-Base-8K config.json (the fields read)
NH56_HF = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 8192,
    "hybrid_override_pattern": NH56.hybrid_pattern, "num_hidden_layers": 118, "num_attention_heads": 64,
    "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 32768, "mamba_num_heads": 256,
    "mamba_head_dim": 64, "ssm_state_size": 256, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128, "expand": 2,
    "mlp_hidden_act": "relu2", "vocab_size": 131072, "tie_word_embeddings": False, "max_position_embeddings": 8192,
}
# nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B config.json: Mamba-2, attention and MoE layers
NANO_HF = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 2688,
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME", "num_hidden_layers": 52,
    "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128, "intermediate_size": 1856,
    "moe_intermediate_size": 1856, "moe_shared_expert_intermediate_size": 3712, "n_routed_experts": 128,
    "n_shared_experts": 1, "num_experts_per_tok": 6, "mamba_num_heads": 64, "mamba_head_dim": 64,
    "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128, "expand": 2, "mlp_hidden_act": "relu2",
    "vocab_size": 131072, "tie_word_embeddings": False,
}


def test_pattern_counts_and_the_56b_presets_layers():
    # 118 layers of one block each: 54 Mamba-2 mixers, 10 attention, 54 squared-ReLU MLPs (NVIDIA's count)
    assert (NH56.num_layers, NH56.ssm_layers, NH56.attention_layers, NH56.mlp_layers) == (118, 54, 10, 54)
    assert NH56.sublayers == 118 and NH56.kind == "mamba-hybrid"
    assert hybrid_counts("M-*E") == dict(num_layers=4, ssm_layers=1, mixer_only_layers=2, mlp_only_layers=2,
                                         first_dense_layers=1)
    llama = load_model("llama3-70b")  # a transformer: every layer is attention + MLP
    assert (llama.attention_layers, llama.mlp_layers, llama.sublayers, llama.kind) == (80, 80, 160, "dense")


@pytest.mark.parametrize(("key", "published_b"), [("nemotronh-8b", 8.0), ("nemotronh-47b", 47.0),
                                                  ("nemotronh-56b", 56.0)])
def test_preset_sizes_match_the_published_names(key, published_b):
    assert load_model(key).num_params / 1e9 == pytest.approx(published_b, rel=0.015)


def test_mamba2_mixer_weights_by_hand():
    # in_proj: h x (2 d_inner + 2 G N + H) = 8192 x (32768 + 4096 + 256); out_proj: 16384 x 8192;
    # conv over x, B, C (16384 + 4096 channels, 4 taps + bias); A, D, dt bias per head; gated-norm weight
    assert NH56.ssm_matmul_params == 8192 * 37120 + 16384 * 8192
    assert NH56.ssm_params == NH56.ssm_matmul_params + 20480 * 5 + 3 * 256 + 16384


def test_model_flops_match_nvidias_count_for_nemotron_h_56b():
    # dgxc-benchmarking nemotron-h/README.md: 2.816e15 model FLOPs per 8,192-token sequence, counted with
    # a 256-token scan chunk, full (non-causal) attention and no norms
    m = dataclasses.replace(NH56, ssm_chunk=256)
    assert m.model_flops_per_token(8192) * 8192 == pytest.approx(2.816e15, rel=1e-3)
    # the scan's own FLOPs (beyond its projections): 2 Q N G + 2 Q d_inner + 4 N d_inner per Mamba layer
    assert NH56.ssm_scan_flops_per_token() == 54 * (2 * 128 * 256 * 8 + 2 * 128 * 16384 + 4 * 256 * 16384)


def test_nemotron_h_config_json_imports_as_the_preset(tmp_path):
    got = from_hf_config(NH56_HF)
    differ = {f.name for f in dataclasses.fields(ModelSpec) if getattr(got, f.name) != getattr(NH56, f.name)}
    assert differ == {"key", "name", "source"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(NH56_HF))
    assert load_model(str(path)).num_params == NH56.num_params


def test_nemotron_3_nano_imports_with_its_moe_layers():
    # NVIDIA: 31.6 B parameters, 3.6 B active counting the embeddings (3.2 B without the input embedding)
    m = from_hf_config(NANO_HF)
    assert (m.ssm_layers, m.attention_layers, m.num_moe_layers, m.num_dense_layers) == (23, 6, 23, 0)
    assert m.num_params / 1e9 == pytest.approx(31.6, abs=0.05)
    assert m.num_active_params / 1e9 == pytest.approx(3.6, abs=0.05)
    assert (m.num_active_params - m.vocab_size * m.d_model) / 1e9 == pytest.approx(3.2, abs=0.05)
    # newer configs list the same layers by name
    names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    listed = {k: v for k, v in NANO_HF.items() if k != "hybrid_override_pattern"}
    listed["layers_block_type"] = [names[c] for c in NANO_HF["hybrid_override_pattern"]]
    assert from_hf_config(listed).num_params == m.num_params


# ibm-granite/granite-4.0-h-small config.json (the fields read; its Mamba heads and head dim are the
# config class defaults: 128 heads, head dim "auto" = expand x hidden / heads)
GRANITE_SMALL_HF = {
    "model_type": "granitemoehybrid", "hidden_size": 4096, "num_hidden_layers": 40, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_local_experts": 72, "num_experts_per_tok": 10, "shared_intermediate_size": 1536,
    "intermediate_size": 768, "mamba_d_state": 128, "mamba_d_conv": 4, "mamba_expand": 2, "tie_word_embeddings": True,
    "vocab_size": 100352, "layer_types": (["mamba"] * 4 + ["attention"] + ["mamba"] * 5) * 4,
}
# ibm-ai-platform/Bamba-9B: Mamba-2 everywhere but three attention layers, each layer with a SwiGLU MLP
BAMBA_HF = {
    "model_type": "bamba", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "attn_layer_indices": [9, 18, 27],
    "mamba_n_heads": 128, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_expand": 2,
    "tie_word_embeddings": False,
}


def test_granite_4_h_and_bamba_import_with_a_mixer_and_an_mlp_in_every_layer():
    # IBM: Granite 4.0-H-Small 32 B total, 9 B active; Bamba-9B 9.78 B
    g = from_hf_config(GRANITE_SMALL_HF)
    assert (g.ssm_layers, g.attention_layers, g.num_moe_layers, g.sublayers) == (36, 4, 40, 80)
    assert (g.ssm_heads, g.ssm_head_dim, g.ssm_groups, g.ssm_chunk, g.shared_width) == (128, 64, 1, 256, 1536)
    assert g.num_params / 1e9 == pytest.approx(32.2, abs=0.1)
    assert g.num_active_params / 1e9 == pytest.approx(9, abs=0.25)
    b = from_hf_config(BAMBA_HF)
    assert (b.ssm_layers, b.attention_layers, b.num_dense_layers, b.mlp) == (29, 3, 32, "swiglu")
    assert b.num_params / 1e9 == pytest.approx(9.78, abs=0.01)
    # a dense Granite 4.0-H: no experts, its MLP is the shared one
    dense = from_hf_config({**GRANITE_SMALL_HF, "num_local_experts": 0, "shared_intermediate_size": 8192})
    assert not dense.is_moe and dense.ffn_dim == 8192
    # each prices (no Megatron pattern to export: their layers hold a mixer and an MLP)
    assert _price(b, _layout(tp=1, dp=8, global_batch=8, seq_len=4096, precision="bf16")).step_time_s > 0
    with pytest.raises(InputError, match="^model: .*without its layer pattern"):
        to_megatron_args(_layout(), b)


@pytest.mark.parametrize(("change", "field", "says"), [
    ({"hybrid_override_pattern": "M-X*"}, "hybrid_override_pattern", "unknown layer symbols"),
    ({"num_hidden_layers": 120}, "hybrid_override_pattern", "118 layers"),
    ({"mamba_head_dim": 0}, "mamba_head_dim", "whole number > 0"),
    ({"n_groups": 1.5}, "n_groups", "whole number > 0"),
    ({"layers_block_type": ["mamba", "rnn"], "hybrid_override_pattern": None}, "layers_block_type", "rnn"),
    ({"hybrid_override_pattern": None}, "hybrid_override_pattern", "missing: a Nemotron-H config lists its layers"),
    ({"mamba_head_dim": None, "mamba_num_heads": None}, "mamba_num_heads", "dividing expand x hidden_size"),
])
def test_a_malformed_hybrid_config_names_its_field(change, field, says):
    with pytest.raises(InputError, match=f"^config.json {field}: .*{says}"):
        from_hf_config({**NH56_HF, **change})


@pytest.mark.parametrize(("base", "change", "field", "says"), [
    (GRANITE_SMALL_HF, {"layer_types": ["mamba"] * 39}, "layer_types", "must list the 40 layers"),
    (GRANITE_SMALL_HF, {"layer_types": ["mamba"] * 39 + ["rnn"]}, "layer_types", "rnn"),
    (GRANITE_SMALL_HF, {"mamba_n_heads": 100}, "mamba_n_heads", "dividing mamba_expand x hidden_size"),
    (BAMBA_HF, {"attn_layer_indices": [9, 40]}, "attn_layer_indices", "indices in 0..31"),
    (BAMBA_HF, {"mamba_d_state": -1}, "mamba_d_state", "whole number > 0"),
])
def test_a_malformed_granite_or_bamba_config_names_its_field(base, change, field, says):
    with pytest.raises(InputError, match=f"^config.json {field}: .*{says}"):
        from_hf_config({**base, **change})


def test_a_pattern_that_disagrees_with_the_counts_is_refused():
    with pytest.raises(InputError, match="^model.hybrid_pattern: its layer counts"):
        dataclasses.replace(NH56, ssm_layers=53)
    with pytest.raises(InputError, match="^model.ssm_heads: must be > 0"):
        dataclasses.replace(NH56, hybrid_pattern="", ssm_heads=0)


def _layout(**kw) -> Layout:
    d = dict(tp=8, pp=1, dp=4, cp=1, ep=1, vpp=1, micro_batch=1, global_batch=96, seq_len=8192, precision="fp8",
             recompute="none", zero_stage=1)
    return Layout(**{**d, **kw})


def _price(model: ModelSpec, layout: Layout, fw: str = "nemo-megatron"):
    """The job checked (supercluster.job.check_job) and priced."""
    return estimate(model, gpu=H100, num_gpus=layout.num_gpus, layout=layout, framework=get_framework(fw))


def test_tp_must_divide_the_mamba_heads_and_groups_and_cp_is_refused():
    small = dataclasses.replace(NH56, hybrid_pattern="", ssm_groups=4, ssm_heads=256)  # 4 groups
    with pytest.raises(InputError, match="^tp: 8 must divide the 4 Mamba groups"):
        _price(small, _layout())
    with pytest.raises(InputError, match="^cp: context parallelism of Mamba / Gated DeltaNet layers is not modelled"):
        _price(NH56, _layout(cp=2, dp=2, global_batch=48))
    with pytest.raises(InputError, match="^framework: megatron-legacy runs attention unfused"):
        _price(NH56, _layout(), "megatron-legacy")


def test_ideal_compute_is_the_models_flop_count_at_peak():
    # one GPU, bf16: the layer-averaged pricing of Mamba, attention and MLP layers adds up to the model's
    # own count (causal attention, the scan, the head), each at the bf16 peak
    m = load_model("nemotronh-8b")
    lay = _layout(tp=1, dp=1, global_batch=2, precision="bf16", seq_len=4096)
    b = _price(m, lay, "megatron")
    tokens = 2 * 4096
    assert b.ledger["ideal_compute"] * H100.peak("bf16") == pytest.approx(
        tokens * m.model_flops_per_token(4096, causal=True), rel=1e-9)
    assert sum(b.ledger[k] for k in LEDGER) == pytest.approx(b.step_time_s, rel=1e-12)


def test_a_mamba_layer_costs_more_than_nothing_and_less_than_attention_at_long_context():
    # the same stack with its Mamba mixers swapped for attention: slower at 64K tokens (attention is
    # quadratic in the sequence, the scan linear); with FlashAttention both keep O(s) activations, the
    # Mamba mixer more (its input projection's 18,560-wide output against q, k, v and o)
    m = load_model("nemotronh-8b")
    attn = dataclasses.replace(m, hybrid_pattern=m.hybrid_pattern.replace("M", "*"), ssm_layers=0)
    lay = _layout(tp=8, dp=1, global_batch=1, seq_len=65536, precision="bf16")
    hyb, full = _price(m, lay), _price(attn, lay)
    assert hyb.step_time_s < full.step_time_s
    assert hyb.memory["mem_activations_bytes"] > full.memory["mem_activations_bytes"] > 0
    # at 4K tokens a Mamba mixer's wider projections (32 M vs 25 M weights) cost more than attention does
    short = _layout(tp=8, dp=1, global_batch=8, seq_len=4096, precision="bf16")
    assert _price(m, short).step_time_s > _price(attn, short).step_time_s


def test_megatron_export_carries_the_pattern_and_mamba_widths():
    args = to_megatron_args(_layout(), NH56)
    assert f"--hybrid-override-pattern '{NH56.hybrid_pattern}'" in args
    assert "--mamba-num-heads 256 --mamba-head-dim 64 --mamba-state-dim 256 --mamba-num-groups 8" in args
    patternless = dataclasses.replace(NH56, hybrid_pattern="")
    with pytest.raises(InputError, match="^model: .*without its layer pattern"):
        to_megatron_args(_layout(), patternless)


def test_planner_keeps_to_layouts_a_hybrid_can_run():
    from supercluster.planner.search import candidate_columns

    cols = candidate_columns(NH56, H100, 256, global_batch=768, seq_len=8192, precisions=("fp8",))
    assert set(np.unique(cols["cp"])) == {1}
    assert all(256 % t == 0 and 8 % t == 0 for t in np.unique(cols["tp"]))


# Qwen/Qwen3-Next-80B-A3B (Qwen3-Coder-Next) config.json: Gated DeltaNet on three layers in four, gated
# attention on the fourth, 512 experts of 512 (top 10) and a shared expert in every layer
QWEN3_NEXT_HF = {
    "model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48, "vocab_size": 151936, "head_dim": 256,
    "num_attention_heads": 16, "num_key_value_heads": 2, "num_experts": 512, "num_experts_per_tok": 10,
    "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "intermediate_size": 5120,
    "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_num_value_heads": 32,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "tie_word_embeddings": False, "rope_theta": 10000000,
    "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06,
}


def test_qwen3_next_imports_with_its_gated_deltanet_and_gated_attention_layers():
    m = from_hf_config(QWEN3_NEXT_HF)
    assert (m.gdn_layers, m.attention_layers, m.num_moe_layers, m.attn_output_gate, m.kind) == (36, 12, 48, True,
                                                                                                "gdn-hybrid")
    # the safetensors headers count 79,674,391,296 weights, 3,874,929,408 of them active; the import leaves
    # out only each layer's shared-expert gate (2,048 weights) and each attention layer's q / k norms (512)
    left_out = 48 * 2048 + 12 * 512
    assert m.num_params + left_out == 79_674_391_296
    assert m.num_active_params + left_out == 3_874_929_408
    # a Gated DeltaNet mixer by hand: in-projections 2048 x (2 x 2048 + 2 x 4096 + 2 x 32), out 4096 x 2048,
    # conv over q, k, v (8192 channels, 4 taps, no bias), A and dt bias per value head, norm weight 128
    assert m.gdn_matmul_params == 2048 * 12352 + 4096 * 2048
    assert m.gdn_params == m.gdn_matmul_params + 8192 * 4 + 2 * 32 + 128
    # the chunked delta rule per value head and token: 6 C dk + 4 C dv + 6 dk dv + 2 C^2 / 3 (C = 64)
    assert m.gdn_flops_per_token() == pytest.approx(36 * 32 * (6 * 64 * 128 + 4 * 64 * 128 + 6 * 128 * 128
                                                                + 2 * 64 * 64 / 3))
    # the same layers spelled as a layer_types list (Qwen3.5)
    listed = {**QWEN3_NEXT_HF, "model_type": "qwen3_5_moe",
              "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 12}
    assert from_hf_config(listed).num_params == m.num_params


def test_a_gated_deltanet_model_prices_and_keeps_to_layouts_it_can_run():
    m = from_hf_config(QWEN3_NEXT_HF)
    lay = _layout(tp=1, dp=8, ep=8, global_batch=64, seq_len=4096, precision="bf16")
    b = _price(m, lay, "megatron")
    assert sum(b.ledger[k] for k in LEDGER) == pytest.approx(b.step_time_s, rel=1e-12)
    # at one GPU the layer-averaged pricing adds up to the model's own FLOP count at peak
    one = _price(m, _layout(tp=1, dp=1, ep=1, global_batch=1, seq_len=4096, precision="bf16"), "megatron")
    assert one.ledger["ideal_compute"] * H100.peak("bf16") == pytest.approx(
        4096 * m.model_flops_per_token(4096, causal=True), rel=1e-9)
    four = dataclasses.replace(m, gdn_k_heads=4, num_kv_heads=8)  # 8 KV heads: the GDN heads refuse tp 8
    with pytest.raises(InputError, match="^tp: 8 must divide the 4 Gated DeltaNet key heads"):
        _price(four, _layout(tp=8, dp=1, global_batch=4, seq_len=4096))
    with pytest.raises(InputError, match="^cp: context parallelism of Mamba / Gated DeltaNet layers"):
        _price(m, _layout(tp=1, cp=2, dp=4, ep=8, global_batch=64, seq_len=4096))
    from supercluster.planner.search import candidate_columns

    cols = candidate_columns(m, H100, 64, global_batch=512, seq_len=4096)
    assert set(np.unique(cols["cp"])) == {1}


@pytest.mark.parametrize(("change", "field", "says"), [
    ({"layer_types": ["linear_attention"] * 47}, "layer_types", "must list the 48 layers"),
    ({"layer_types": ["linear_attention"] * 47 + ["mamba"]}, "layer_types", "mamba"),
    ({"full_attention_interval": 0}, "full_attention_interval", "whole number >= 1"),
    ({"linear_num_value_heads": 24}, "gdn_k_heads", "16 must divide gdn_v_heads 24"),
    ({"linear_key_head_dim": "auto"}, "linear_key_head_dim", "whole number > 0"),
    ({"attn_output_gate": "yes"}, "attn_output_gate", "true or false"),
])
def test_a_malformed_gated_deltanet_config_names_its_field(change, field, says):
    with pytest.raises(InputError, match=f"^(config.json|model.) ?{field}: .*{says}"):
        from_hf_config({**QWEN3_NEXT_HF, **change})


def test_a_gdn_estimate_names_its_one_published_run_and_advises_no_cp(monkeypatch):
    from supercluster.reports.tables import fit_reason
    from supercluster.validation import evidence

    m = from_hf_config(QWEN3_NEXT_HF)
    # one shipped Gated DeltaNet run (Qwen3-Next on 128 H100), fewer than a basis needs: named, with its error
    assert evidence.evidence_for(m, H100, "nemo-megatron", "bf16", 64, 4096) is None
    line = evidence.no_runs_line(m)
    from supercluster.validation.validate import validate

    err = next(r.error for r in validate("heldout")["rows"] if r.id == "MZOO-QWEN3NEXT-80B-H100-EP32-128")
    assert f"(Gated DeltaNet hybrid): only 1, fewer than 3: MZOO-QWEN3NEXT-80B-H100-EP32-128 {100 * err:+.1f} %" \
        in line
    # a kind with no shipped run at all says so
    with monkeypatch.context() as mp:
        mp.setattr(evidence, "_runs", lambda: ())
        assert "none (Gated DeltaNet hybrid: no shipped run of this kind)" in evidence.no_runs_line(m)
    # the Mamba hybrids have their nine DGX Cloud runs
    ev = evidence.evidence_for(NH56, H100, "nemo-megatron", "fp8", 128, 8192)
    assert ev is not None and ev.runs == 8 and "Mamba hybrid" in ev.basis
    lay = _layout(tp=1, dp=64, ep=8, global_batch=512, seq_len=4096, precision="bf16")
    b = _price(m, lay)
    assert not b.fits
    tips = fit_reason(b, lay, get_framework("nemo-megatron"), m)
    assert "a larger --pp" in tips and "--cp" not in tips
    assert "--cp" in fit_reason(b, lay, get_framework("nemo-megatron"))  # (no model given: every remedy)
