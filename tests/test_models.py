"""Formulas against hand-worked numbers."""

from __future__ import annotations

import dataclasses
import json

import pytest

from supercluster.errors import InputError
from supercluster.formats.hf import from_hf_config
from supercluster.formats.load import load_model
from supercluster.models.catalog import model_catalog


def test_gpt3_175b_parameters_match_megatron_formula():
    # Narayanan et al. eq. 2 without position embeddings: P = 12 l h^2 (1 + 13/(12h) + V/(12 l h)).
    m = load_model("gpt3-175b")
    layers, h, v = 96, 12288, 50257
    megatron = 12 * layers * h**2 * (1 + 13 / (12 * h) + v / (12 * layers * h))
    # We ignore biases (13/(12h) counts 4 bias/norm vectors of h per layer beyond the 2 norm weights).
    assert m.num_params == pytest.approx(megatron, rel=2e-4)
    assert 174.4e9 < m.num_params < 174.8e9


def test_llama3_405b_flops_per_token_by_hand():
    m = load_model("llama3-405b")
    h, f, a, k, d, L, V, s = 16384, 53248, 128, 8, 128, 126, 128000, 8192
    attn = h * a * d + 2 * h * k * d + a * d * h
    mlp = 3 * h * f
    n_matmul = L * (attn + mlp) + V * h  # logits; input embedding is a lookup
    by_hand = 6 * n_matmul + 12 * L * a * d * s
    assert m.model_flops_per_token(s) == pytest.approx(by_hand, rel=1e-12)
    # NVIDIA's DGXC README counts 2.17e16 FLOPs per 8192-token sequence (vocab 128256): within 2 %.
    assert m.model_flops_per_token(s) * s == pytest.approx(2.17e16, rel=0.02)
    # Causal counting halves the attention term only.
    assert m.model_flops_per_token(s) - m.model_flops_per_token(s, causal=True) == pytest.approx(6 * L * a * d * s)


def test_moe_active_parameters():
    mix = load_model("mixtral-8x7b")
    assert mix.num_params == pytest.approx(46.7e9, rel=0.01)
    assert mix.num_active_params == pytest.approx(12.9e9, rel=0.01)
    ds = load_model("deepseek-v3")
    assert ds.num_params == pytest.approx(671e9, rel=0.01)
    assert ds.num_active_params == pytest.approx(37e9, rel=0.03)


def test_every_preset_has_a_source_and_positive_sizes():
    for key, m in model_catalog().items():
        assert m.source, key
        assert m.num_params > 0 and m.num_active_params <= m.num_params


def test_hf_config_llama_gqa_and_explicit_head_dim():
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
           "vocab_size": 128256, "hidden_act": "silu", "head_dim": 160}
    m = from_hf_config(cfg)
    assert (m.mlp, m.num_kv_heads, m.head_dim) == ("swiglu", 8, 160)
    assert m.attn_params == 4096 * 32 * 160 * 2 + 2 * 4096 * 8 * 160


def test_hf_config_mixtral_and_deepseek():
    mix = from_hf_config({"architectures": ["MixtralForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
                          "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                          "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2})
    assert mix.num_active_params == pytest.approx(load_model("mixtral-8x7b").num_active_params, rel=1e-9)
    ds = from_hf_config({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
                         "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
                         "moe_intermediate_size": 2048, "vocab_size": 129280, "n_routed_experts": 256,
                         "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
                         "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                         "qk_rope_head_dim": 64, "v_head_dim": 128})
    assert ds.num_params == load_model("deepseek-v3").num_params
    # its published config.json carries one multi-token-prediction module (num_nextn_predict_layers)
    mtp = from_hf_config({**DSV3_HF, "num_nextn_predict_layers": 1})
    block = mtp.attn_params + 4 * 7168 + mtp.moe_mlp_params + 2 * 7168 * 7168  # embedding and head shared
    assert mtp.mtp_layers == 1 and mtp.num_params - ds.num_params == block
    assert 11.5e9 < block < 11.7e9  # the checkpoint's 14B MTP module less its own embedding and head copies
    # each module: its block, its projection and the shared head once more per token (fwd + bwd = 6 x)
    extra = mtp.model_flops_per_token(4096, causal=True) - ds.model_flops_per_token(4096, causal=True)
    h, a_qkv = 7168, 128 * (192 + 128)
    assert extra == pytest.approx(6 * (mtp.attn_params + mtp.moe_active_mlp_params + 2 * h * h + 129280 * h)
                                  + 3 * 2 * a_qkv * 2048, rel=1e-9)
    with pytest.raises(InputError, match="mtp_layers"):
        from_hf_config({**DSV3_HF, "num_nextn_predict_layers": -1})


DSV3_HF = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
           "num_attention_heads": 128, "num_key_value_heads": 128, "intermediate_size": 18432,
           "moe_intermediate_size": 2048, "vocab_size": 129280, "n_routed_experts": 256, "n_shared_experts": 1,
           "num_experts_per_tok": 8, "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
           "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}


MAVERICK_TEXT = {"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
                 "intermediate_size_mlp": 16384, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
                 "num_hidden_layers": 48, "num_local_experts": 128, "num_experts_per_tok": 1,
                 "interleave_moe_layer_step": 2, "attention_chunk_size": 8192, "vocab_size": 202048,
                 "hidden_act": "silu", "tie_word_embeddings": False, "rope_theta": 500000.0, "rms_norm_eps": 1e-05,
                 "use_qk_norm": True}


def test_hf_config_llama4_nested_interleaved_moe_shared_expert_and_chunked_attention():
    # Llama 4 Maverick: 400 B parameters, 17 B active (Meta's model card); the language model sits in text_config
    m = from_hf_config({"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
                        "text_config": MAVERICK_TEXT})
    assert (m.num_moe_layers, m.ffn_dim, m.moe_ffn_dim, m.num_shared_experts, m.top_k) == (24, 16384, 8192, 1, 1)
    assert m.num_params == pytest.approx(400e9, rel=0.01) and m.num_active_params == pytest.approx(17e9, rel=0.02)
    # Scout: MoE in every layer, 16 experts: 109 B with its vision encoder, 17 B active
    scout = from_hf_config({"model_type": "llama4", "text_config": {**MAVERICK_TEXT, "num_local_experts": 16,
                                                                    "interleave_moe_layer_step": 1}})
    assert scout.num_moe_layers == 48 and scout.num_active_params == pytest.approx(17e9, rel=0.02)
    # chunked attention on the RoPE layers (3 in 4 by default), global on the others
    assert (m.attention_chunk, m.window_layers) == (8192, 36)
    assert float(m.mean_keys(8192, causal=True)) == 4096.0  # one chunk: plain causal
    assert float(m.mean_keys(32768, causal=True)) == (12 * 16384 + 36 * 4096) / 48
    one_and_a_half = (8192**2 + 4096**2) / 2 / 12288  # a full chunk and half of the next
    assert float(m.mean_keys(12288, causal=True)) == pytest.approx((12 * 6144 + 36 * one_and_a_half) / 48)
    explicit = from_hf_config({"model_type": "llama4", "text_config": {**MAVERICK_TEXT, "no_rope_layers": [1, 0] * 24}})
    assert explicit.window_layers == 24
    with pytest.raises(InputError, match="interleave_moe_layer_step"):
        from_hf_config({"model_type": "llama4", "text_config": {**MAVERICK_TEXT, "interleave_moe_layer_step": 0}})
    with pytest.raises(InputError, match="^config.json"):
        from_hf_config({"model_type": "llama4", "text_config": {**MAVERICK_TEXT, "interleave_moe_layer_step": "x"}})


def test_hf_config_qwen_moe_shared_expert_width_and_gpt_oss_top_k():
    # Qwen1.5-MoE-A2.7B: 14.3 B parameters, 2.7 B active (its model card); one shared expert 4 experts wide
    q = from_hf_config({"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 2048, "intermediate_size": 5632,
                        "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
                        "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 24,
                        "num_experts": 60, "num_experts_per_tok": 4, "vocab_size": 151936, "decoder_sparse_step": 1,
                        "mlp_only_layers": []})
    assert q.num_shared_experts == 4 and q.num_params == pytest.approx(14.3e9, rel=0.01)
    assert q.num_active_params == pytest.approx(2.7e9, rel=0.01)
    dense_first = from_hf_config({**{"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 2048,
                                     "moe_intermediate_size": 1408, "num_attention_heads": 16, "num_hidden_layers": 24,
                                     "num_experts": 60, "num_experts_per_tok": 4, "vocab_size": 151936},
                                  "mlp_only_layers": [0, 1, 2, 3]})
    assert dense_first.num_moe_layers == 20
    oss = from_hf_config({"architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "num_hidden_layers": 36,
                          "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
                          "intermediate_size": 2880, "num_local_experts": 128, "experts_per_token": 4,
                          "vocab_size": 201088})
    assert oss.top_k == 4


@pytest.mark.parametrize("cfg", [{}, {"hidden_size": "big", "num_hidden_layers": 2, "num_attention_heads": 2,
                                      "vocab_size": 10}, {"hidden_size": 10, "num_hidden_layers": 2,
                                                          "num_attention_heads": 3, "vocab_size": 10}])
def test_malformed_hf_config_is_an_input_error(cfg):
    with pytest.raises(InputError):
        from_hf_config(cfg)


def test_a_count_that_is_not_a_whole_number_or_is_absurd_is_refused_by_name():
    base = {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 1000,
            "intermediate_size": 1024}
    assert from_hf_config({**base, "intermediate_size": 1024.0}).ffn_dim == 1024  # a float that is whole is fine
    for field, value, match in (("intermediate_size", 1.5, "whole number"), ("num_key_value_heads", True, "whole"),
                                ("num_hidden_layers", 10**12, "past any real model"),
                                ("hidden_size", float("nan"), "whole number"),
                                ("moe_intermediate_size", 10**9, "past any real model")):
        cfg = {**base, field: value}
        if field == "moe_intermediate_size":
            cfg.update(num_local_experts=8, num_experts_per_tok=2)
        with pytest.raises(InputError, match=match) as exc:
            from_hf_config(cfg)
        assert field in exc.value.field or field.replace("moe_intermediate_size", "moe_ffn_dim") in exc.value.field


def test_load_model_from_path_and_errors(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
                             "vocab_size": 1000, "intermediate_size": 1024}))
    assert load_model(str(p)).d_model == 512
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_model(str(bad))
    with pytest.raises(InputError, match="unknown model"):
        load_model("gpt-9")


def test_sliding_window_attention_counts_only_the_window(tmp_path):
    """GPT-OSS: every other layer attends to 128 tokens. A windowed layer's causal keys average
    w - w^2 / (2 s); the config's layer_types say which layers are local."""
    import json

    import pytest

    from supercluster.formats.load import load_model

    m = load_model("gpt-oss-120b")
    assert (m.sliding_window, m.window_layers) == (128, 18)
    s, w = 4096, 128
    assert m.mean_keys(s, causal=True) == pytest.approx((s / 2 + (w - w * w / (2 * s))) / 2)
    assert m.mean_keys(s, causal=False) == pytest.approx((s + w) / 2)
    dense_like = load_model("llama3-8b")
    assert dense_like.mean_keys(s, causal=True) == s / 2
    cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
           "intermediate_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8,
           "head_dim": 64, "num_local_experts": 128, "num_experts_per_tok": 4, "vocab_size": 201088,
           "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    hf = load_model(str(p))
    assert (hf.sliding_window, hf.window_layers) == (128, 18)
    assert hf.attention_flops_per_token(s, causal=False) == pytest.approx(m.attention_flops_per_token(s, causal=False))
    # Qwen2-style: use_sliding_window false means no local layers
    cfg2 = {"hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 8, "vocab_size": 1000,
            "sliding_window": 4096, "use_sliding_window": False}
    p.write_text(json.dumps(cfg2))
    assert load_model(str(p)).window_layers == 0


def test_a_plus_mtp_suffix_adds_multi_token_prediction_modules(tmp_path):
    ds = load_model("deepseek-v3")
    one, two = load_model("deepseek-v3+mtp"), load_model("deepseek-v3+mtp2")
    assert (one.mtp_layers, two.mtp_layers, ds.mtp_layers) == (1, 2, 0)
    assert one.name == "DeepSeek-V3 671B + 1 MTP" and two.num_params - one.num_params == one.num_params - ds.num_params
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DSV3_HF))
    assert load_model(f"{path}+mtp").mtp_layers == 1 and load_model(str(path)).mtp_layers == 0
    with pytest.raises(InputError, match=r"unknown model 'nope'.*\+mtp"):
        load_model("nope+mtp")


_BASE = {"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2,
         "intermediate_size": 5120, "vocab_size": 151936}


@pytest.mark.parametrize(("extra", "field"), [
    # MiniMax-01: lightning (linear) attention layers listed in attn_type_list
    ({"model_type": "minimax", "attn_type_list": [0] * 7 + [1]}, "attn_type_list"),
    # Kimi Linear: Kimi Delta Attention layers
    ({"model_type": "kimi_linear", "linear_attn_config": {"kda_layers": [1, 2, 3]}}, "linear_attn_config"),
    # Jamba: Mamba-1 (selective scan) layers between attention layers
    ({"model_type": "jamba", "attn_layer_period": 8, "mamba_d_state": 16}, "mamba_d_state"),
    # Falcon-H1: attention and Mamba-2 side by side in every layer
    ({"model_type": "falcon_h1", "mamba_d_state": 256, "mamba_n_heads": 24}, "mamba_d_state"),
    # DeepSeek-V4: compressed and sparse attention layers (DeepSeek-V3.2's sparse attention alone is priced)
    ({"model_type": "deepseek_v4", "compress_ratios": [0, 4, 128], "index_topk": 512, "index_n_heads": 64},
     "compress_ratios"),
    ({"model_type": "deepseek_v4", "hc_mult": 4}, "hc_mult"),
    # a layer_types list naming a kind that is not softmax attention
    ({"layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 12},
     "layer_types"),
    # a pure state-space model recognised by its model_type
    ({"model_type": "mamba2"}, "model_type"),
])
def test_layers_the_cost_model_does_not_price_are_refused_by_name(extra, field):
    """A hybrid (Mamba, linear attention) or sparse-attention config would otherwise be priced as a
    softmax-attention transformer: a wrong number without a word. It is a clear error instead."""
    with pytest.raises(InputError, match=f"^config.json {field}: .*not modelled"):
        from_hf_config({**_BASE, **extra})


def test_softmax_attention_layer_types_still_import():
    cfg = {**_BASE, "model_type": "qwen3", "layer_types": ["full_attention"] * 48}
    assert from_hf_config(cfg).window_layers == 0
    gemma = {**_BASE, "model_type": "gemma3_text", "sliding_window": 512,
             "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 8}
    assert from_hf_config(gemma).window_layers == 40
    # MiniMax-M2 is softmax attention + MoE (its model_type shares a prefix with linear-attention MiniMax-01)
    assert from_hf_config({**_BASE, "model_type": "minimax_m2"}).num_layers == 48


@pytest.mark.parametrize(("cfg", "mats"), [
    # Phi-3-mini: a gated (SwiGLU) MLP although its family name starts like Phi-2's
    ({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 3072, "num_hidden_layers": 32,
      "num_attention_heads": 32, "intermediate_size": 8192, "vocab_size": 32064, "hidden_act": "silu"}, 3),
    # Phi-2: GELU, not gated
    ({"architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_size": 2560, "num_hidden_layers": 32,
      "num_attention_heads": 32, "intermediate_size": 10240, "vocab_size": 51200, "hidden_act": "gelu_new"}, 2),
    # GPT-2 and GPT-NeoX by architecture class alone
    ({"architectures": ["GPT2LMHeadModel"], "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257}, 2),
    ({"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 6144, "num_hidden_layers": 44,
      "num_attention_heads": 64, "intermediate_size": 24576, "vocab_size": 50432}, 2),
    # OLMo 2: a Llama-style gated MLP
    ({"model_type": "olmo2", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
      "intermediate_size": 11008, "vocab_size": 100352}, 3),
])
def test_gated_or_plain_mlp_follows_the_model_family(cfg, mats):
    assert from_hf_config(cfg).mlp_mats == mats


def test_phi3_mini_imports_at_its_published_size():
    m = from_hf_config({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 3072,
                        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                        "intermediate_size": 8192, "vocab_size": 32064})
    # Microsoft's model card: 3.8B parameters (32 x (4 h^2 + 3 h f) + 2 V h, norms aside)
    assert m.num_params == pytest.approx(3.82e9, rel=0.01)


def test_mpt_and_dbrx_configs_import():
    # mosaicml/mpt-7b: MPT's own field names, a plain GELU MLP expansion_ratio x d_model wide (6.7B)
    mpt = from_hf_config({"architectures": ["MPTForCausalLM"], "model_type": "mpt", "d_model": 4096,
                          "n_heads": 32, "n_layers": 32, "expansion_ratio": 4, "max_seq_len": 2048,
                          "vocab_size": 50432, "attn_config": {"attn_impl": "triton"}})
    assert (mpt.ffn_dim, mpt.mlp_mats, mpt.seq_len) == (16384, 2, 2048)
    assert mpt.num_params == pytest.approx(6.65e9, rel=0.01)
    # databricks/dbrx-base: GQA and 16 gated experts, top 4, in nested configs (132B total, 36B active)
    dbrx = from_hf_config({"architectures": ["DbrxForCausalLM"], "model_type": "dbrx", "d_model": 6144,
                           "n_heads": 48, "n_layers": 40, "max_seq_len": 32768, "vocab_size": 100352,
                           "attn_config": {"kv_n_heads": 8},
                           "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4}})
    assert (dbrx.num_kv_heads, dbrx.num_experts, dbrx.top_k, dbrx.moe_ffn_dim) == (8, 16, 4, 10752)
    assert dbrx.num_params == pytest.approx(132e9, rel=0.01)
    assert dbrx.num_active_params == pytest.approx(36e9, rel=0.02)


def test_embedding_tying_follows_the_family_when_the_config_is_silent():
    gpt2 = from_hf_config({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 768, "n_layer": 12,
                           "n_head": 12, "vocab_size": 50257})
    assert gpt2.tied_embeddings  # GPT-2 small: 124M with the tied head (wte 38.6M counted once)
    llama = from_hf_config({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                            "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000})
    assert not llama.tied_embeddings
    said = from_hf_config({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
                           "tie_word_embeddings": False})
    assert not said.tied_embeddings


def test_an_moe_config_without_its_top_k_is_an_error_not_a_guess():
    base = {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8}
    with pytest.raises(InputError, match="^config.json num_experts_per_tok: missing for an MoE config"):
        from_hf_config(base)
    assert from_hf_config({**base, "num_experts_per_tok": 2}).top_k == 2
    # ERNIE 4.5 names: moe_k, moe_num_shared_experts, moe_layer_start_index
    ernie = from_hf_config({"model_type": "ernie4_5_moe", "hidden_size": 8192, "num_hidden_layers": 54,
                            "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 28672,
                            "moe_intermediate_size": 3584, "vocab_size": 103424, "moe_num_experts": 64,
                            "moe_k": 8, "moe_layer_start_index": 3})
    assert (ernie.top_k, ernie.first_dense_layers, ernie.num_experts) == (8, 3, 64)
    # Baidu's name for it: ERNIE-4.5-300B-A47B
    assert ernie.num_params == pytest.approx(300e9, rel=0.01)
    assert ernie.num_active_params == pytest.approx(47e9, rel=0.03)


def test_arctic_residual_mlp_is_an_always_on_shared_expert_of_its_own_width():
    """Snowflake Arctic (modeling_arctic.py): every MoE layer also runs a d_model-wide SwiGLU residual
    MLP on every token; Snowflake states 480 B parameters, 17 B active."""
    cfg = {"architectures": ["ArcticForCausalLM"], "model_type": "arctic", "hidden_size": 7168,
           "intermediate_size": 4864, "num_hidden_layers": 35, "num_attention_heads": 56, "num_key_value_heads": 8,
           "num_local_experts": 128, "num_experts_per_tok": 2, "moe_layer_frequency": 1,
           "parallel_attn_mlp_res": True, "vocab_size": 32000, "tie_word_embeddings": False}
    m = from_hf_config(cfg)
    assert m.shared_width == 7168 and m.num_moe_layers == 35
    assert m.num_params == pytest.approx(480e9, rel=0.005) and m.num_active_params == pytest.approx(17e9, rel=0.02)
    plain = from_hf_config({**cfg, "parallel_attn_mlp_res": False})
    assert m.num_active_params - plain.num_active_params == 35 * 3 * 7168 * 7168
    # every other layer MoE: the dense ones are intermediate_size wide
    assert from_hf_config({**cfg, "moe_layer_frequency": 2}).num_moe_layers == 17
    # DeepSeek's moe_layer_freq counts from first_k_dense_replace
    ds = {"hidden_size": 1024, "num_hidden_layers": 10, "num_attention_heads": 8, "vocab_size": 1000,
          "intermediate_size": 4096, "moe_intermediate_size": 512, "n_routed_experts": 16, "num_experts_per_tok": 2,
          "first_k_dense_replace": 2, "moe_layer_freq": 2}
    assert from_hf_config(ds).num_moe_layers == 4  # layers 2, 4, 6, 8


def test_chatglm_field_names_import():
    """ChatGLM3-6B (THUDM/chatglm3-6b config.json): padded_vocab_size, kv_channels as the head width,
    multi_query_group_num K/V heads, ffn_hidden_size; the model card's 6.24 B parameters."""
    cfg = {"model_type": "chatglm", "architectures": ["ChatGLMModel"], "hidden_size": 4096, "kv_channels": 128,
           "ffn_hidden_size": 13696, "multi_query_attention": True, "multi_query_group_num": 2,
           "num_attention_heads": 32, "num_layers": 28, "padded_vocab_size": 65024, "seq_length": 8192,
           "tie_word_embeddings": False}
    m = from_hf_config(cfg)
    assert (m.num_kv_heads, m.head_dim, m.vocab_size, m.mlp, m.seq_len) == (2, 128, 65024, "swiglu", 8192)
    assert m.num_params == pytest.approx(6.24e9, rel=0.005)
    assert from_hf_config({**cfg, "multi_query_attention": False}).num_kv_heads == 32


def test_multi_query_configs_have_one_kv_head():
    falcon7 = from_hf_config({"architectures": ["FalconForCausalLM"], "model_type": "falcon", "hidden_size": 4544,
                              "num_hidden_layers": 32, "num_attention_heads": 71, "multi_query": True,
                              "vocab_size": 65024, "parallel_attn": True})
    assert falcon7.num_kv_heads == 1 and falcon7.mlp_mats == 2 and falcon7.tied_embeddings
    assert falcon7.num_params == pytest.approx(6.92e9, rel=0.01)  # TII: Falcon-7B, 7B (6.92B)
    falcon40 = from_hf_config({"model_type": "RefinedWeb", "hidden_size": 8192, "n_layer": 60, "n_head": 128,
                               "n_head_kv": 8, "vocab_size": 65024})
    assert falcon40.num_kv_heads == 8 and falcon40.mlp_mats == 2


def test_llama4_maverick_preset_is_its_hugging_face_config():
    # the preset (which the held-out Llama 4 rows take their structure from) is the import of Meta's config
    preset, hf = load_model("llama4-maverick"), from_hf_config({"model_type": "llama4", "text_config": MAVERICK_TEXT})
    same = ("key", "name", "seq_len", "source")
    assert dataclasses.replace(preset, **{k: getattr(hf, k) for k in same}) == hf


def test_llama4_scout_preset_is_its_hugging_face_config():
    scout = {**MAVERICK_TEXT, "num_local_experts": 16, "interleave_moe_layer_step": 1}
    preset, hf = load_model("llama4-scout"), from_hf_config({"model_type": "llama4", "text_config": scout})
    same = ("key", "name", "seq_len", "source")
    assert dataclasses.replace(preset, **{k: getattr(hf, k) for k in same}) == hf


@pytest.mark.parametrize("key, total_b", [("qwen3-8b", 8.2), ("qwen3-32b", 32.8), ("qwen2.5-72b", 72.7)])
def test_qwen_dense_presets_have_their_published_sizes(key, total_b):
    # Qwen's model cards: Qwen3-8B 8.2 B, Qwen3-32B 32.8 B, Qwen2.5-72B 72.7 B parameters
    m = load_model(key)
    assert m.num_params == pytest.approx(total_b * 1e9, rel=0.005) and not m.is_moe


def test_a_hugging_face_model_folder_is_read_through_its_config_and_named_after_it(tmp_path):
    import json as _json

    from typer.testing import CliRunner

    from supercluster.cli import app

    folder = tmp_path / "Llama-3.1-8B"
    folder.mkdir()
    (folder / "config.json").write_text(_json.dumps({
        "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "intermediate_size": 14336, "vocab_size": 128256, "architectures": ["LlamaForCausalLM"]}), encoding="utf-8")
    by_folder, by_file = load_model(str(folder)), load_model(str(folder / "config.json"))
    assert by_folder == by_file and by_folder.key == "Llama-3.1-8B"
    with pytest.raises(InputError, match="folder without a config.json"):
        load_model(str(tmp_path))
    r = CliRunner().invoke(app, ["estimate", "--model", str(folder), "--gpus", "8", "--layout", "tp1-pp1-dp8",
                                 "--global-batch", "32", "--json"])
    d = _json.loads(r.stdout)
    assert d["model_name"] == "Llama-3.1-8B" and abs(d["model_params"] / 8.03e9 - 1) < 0.01
    text = CliRunner().invoke(app, ["estimate", "--model", str(folder), "--gpus", "8", "--layout", "tp1-pp1-dp8",
                                    "--global-batch", "32"]).stdout
    assert "Llama-3.1-8B (8.0 B parameters) on 8 x h100-sxm" in text


def test_hf_config_says_how_the_model_is_built():
    """Norm, positions and biases as config.json says them: what a launcher export must write."""
    base = {"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 1000,
            "intermediate_size": 4096}
    qwen25 = from_hf_config({**base, "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
                             "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "attention_bias": True})
    assert (qwen25.norm, qwen25.position_embedding, qwen25.rope_base, qwen25.qkv_bias, qwen25.linear_bias,
            qwen25.qk_norm) == ("rmsnorm", "rope", 1e6, True, False, False)
    gpt2 = from_hf_config({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
                           "n_positions": 1024, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"})
    assert (gpt2.norm, gpt2.position_embedding, gpt2.linear_bias) == ("layernorm", "learned", True)
    bloom = from_hf_config({**base, "model_type": "bloom", "layer_norm_epsilon": 1e-5})
    assert (bloom.position_embedding, bloom.linear_bias) == ("alibi", True)
    qwen3 = from_hf_config({**base, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
                            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0})
    assert qwen3.qk_norm
    with pytest.raises(InputError, match="^config.json rope_theta: must be a number"):
        from_hf_config({**base, "rope_theta": "big"})
