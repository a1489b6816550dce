"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): the lightning indexer and top-k sparse MLA priced
against hand-worked numbers, and the refusals around it."""
import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from supercluster.errors import InputError
from supercluster.formats.hf import from_hf_config
from supercluster.formats.launchers import export
from supercluster.formats.load import load_model
from supercluster.hardware.specs import get_gpu
from supercluster.job import default_network, estimate
from supercluster.models.catalog import model_catalog
from supercluster.models.spec import ModelSpec
from supercluster.parallelism.framework import get_framework
from supercluster.parallelism.layout import Layout
from supercluster.perf.step import step_breakdown

V32 = {
    "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
    "num_nextn_predict_layers": 1, "index_head_dim": 128, "index_n_heads": 64, "index_topk": 2048,
    "hidden_act": "silu", "tie_word_embeddings": False,
}
#: one layer's indexer: wq_b (q_lora 1536 -> 64 x 128), wk (7168 -> 128), its LayerNorm, weights_proj (7168 -> 64)
INDEXER = 1536 * 64 * 128 + 7168 * 128 + 2 * 128 + 7168 * 64


def _dense(cfg):
    return {k: v for k, v in cfg.items() if not k.startswith("index_")}


def test_import_reads_the_indexer_and_adds_exactly_its_weights():
    m, dense = from_hf_config(V32), from_hf_config(_dense(V32))
    assert (m.index_topk, m.index_heads, m.index_head_dim) == (2048, 64, 128)
    assert INDEXER == 13_959_424
    # 61 layers and the MTP module's block, each with its indexer
    assert m.num_params - dense.num_params == 62 * INDEXER
    assert not m.context_parallel_ok and dense.context_parallel_ok


def test_preset_is_deepseek_v3_with_the_indexer():
    v3, v32 = model_catalog()["deepseek-v3"], load_model("deepseek-v3.2")
    assert v32.num_params - v3.num_params == 61 * INDEXER
    assert v32.index_topk == 2048 and v32.seq_len == 131072


def test_flops_at_128k_by_hand():
    m = from_hf_config(V32)
    s = 131072
    keys = 2048 - 2048 ** 2 / (2 * s)  # min(i, k) keys for the i-th token, averaged: 2032
    assert float(m.sparse_keys(s, causal=True)) == keys == 2032
    # sparse MLA in its MQA form: (512 + 64) query-key and 512 value widths shared by 128 heads
    per_layer = 2 * 128 * (576 + 512) * 2032
    assert per_layer == 565_968_896
    assert float(m.attention_flops_per_token(s, causal=True)) == (61 + 1) * per_layer
    fwd, bwd = m.indexer_flops_per_token(s, causal=True)
    assert float(fwd) == 62 * 2 * 64 * 128 * (s / 2)       # every preceding key, 2 H_I d_I per pair
    assert float(bwd) == 62 * 4 * 64 * 128 * 2032          # the KL gradient through the selected keys only
    dense = from_hf_config(_dense(V32))
    # the point of DSA: at 128K a token costs about a third of the dense model's FLOPs
    ratio = m.model_flops_per_token(s, causal=True) / dense.model_flops_per_token(s, causal=True)
    assert 0.3 < ratio < 0.4


def test_up_to_topk_tokens_attention_is_dense():
    m, dense = from_hf_config(V32), from_hf_config(_dense(V32))
    for s in (1024, 2048):
        assert float(m.attention_flops_per_token(s, causal=True)) == float(dense.attention_flops_per_token(s, True))
        assert [float(x) for x in m.indexer_flops_per_token(s, causal=True)] == [0.0, 0.0]
    assert bool(m.sparse_active(4096)) and not bool(m.sparse_active(2048))


def _step(model, seq, recompute="full"):
    gpu = get_gpu("b200")
    lay = Layout(tp=1, pp=8, dp=16, ep=16, micro_batch=1, global_batch=256, seq_len=seq, precision="fp8",
                 recompute=recompute)
    return step_breakdown(model, layout=lay, gpu=gpu, net=default_network(gpu, num_gpus=lay.num_gpus),
                          fw=get_framework("nemo-megatron"))


def test_long_sequences_train_faster_and_the_ledger_still_sums():
    m, dense = from_hf_config(V32), from_hf_config(_dense(V32))
    sparse_b, dense_b = _step(m, 65536), _step(dense, 65536)
    assert sparse_b.step_time_s < 0.8 * dense_b.step_time_s
    assert sum(sparse_b.ledger.values()) == pytest.approx(sparse_b.step_time_s, rel=1e-12)
    assert sparse_b.ledger["attention_inefficiency"] > 0
    # short sequences: dense attention, the indexer's projections only
    short_s, short_d = _step(m, 2048), _step(dense, 2048)
    assert short_d.step_time_s <= short_s.step_time_s < 1.01 * short_d.step_time_s


def test_memory_keeps_the_selected_indices():
    m = from_hf_config(V32)
    wider = dataclasses.replace(m, index_topk=4096)  # same shapes, twice the int32 indices per token
    a, b = (_step(x, 65536, recompute="none").memory["mem_activations_bytes"] for x in (m, wider))
    # 2048 more int32 indices per token on each of the first stage's 7 layers (Megatron-Core counts the
    # embedding as one), for its 8 micro-batches in flight
    assert b - a == pytest.approx(4 * 2048 * 65536 * 7 * 8, rel=1e-12)


def test_refusals_name_the_field():
    with pytest.raises(InputError, match="cp"):
        Layout(tp=1, pp=1, dp=4, cp=2, global_batch=8, seq_len=8192).check_model(from_hf_config(V32))
    with pytest.raises(InputError, match="index_n_heads"):
        from_hf_config({**V32, "index_n_heads": 0})
    with pytest.raises(InputError, match="index_topk_freq"):
        from_hf_config({**V32, "index_topk_freq": 2})
    with pytest.raises(InputError, match="kv_lora_rank|MLA"):
        from_hf_config({k: v for k, v in V32.items() if k != "kv_lora_rank"})
    with pytest.raises(InputError, match="compress_ratios"):  # DeepSeek-V4's compressed attention
        from_hf_config({**V32, "compress_ratios": [0, 4, 128]})
    base = model_catalog()["deepseek-v3"]
    with pytest.raises(InputError, match="model.index_heads"):
        dataclasses.replace(base, index_topk=2048)
    with pytest.raises(InputError, match="MLA"):
        ModelSpec(key="x", name="x", num_layers=4, d_model=1024, ffn_dim=4096, num_heads=8, num_kv_heads=8,
                  head_dim=128, vocab_size=1000, index_topk=64, index_heads=4, index_head_dim=32)
    gpu = get_gpu("a100-80gb")
    lay = Layout(tp=1, pp=1, dp=8, micro_batch=1, global_batch=8, seq_len=8192)
    with pytest.raises(InputError, match="sparse attention"):
        estimate(from_hf_config(V32), gpu=gpu, num_gpus=8, layout=lay, framework=get_framework("deepspeed-legacy"))


def test_megatron_export_names_the_variant():
    lay = Layout(tp=1, pp=8, dp=16, ep=16, global_batch=256, seq_len=65536)
    text = export(lay, "megatron", load_model("deepseek-v3.2"))
    assert "--experimental-attention-variant dsa --dsa-indexer-n-heads 64 --dsa-indexer-head-dim 128 " \
           "--dsa-indexer-topk 2048" in text


def test_cli_estimate_and_plan(tmp_path):
    from typer.testing import CliRunner

    from supercluster.cli import app
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(V32))
    r = CliRunner().invoke(app, ["estimate", "--model", str(cfg), "--gpu", "b200", "--gpus", "1024", "--tp", "1",
                                 "--pp", "8", "--vpp", "1", "--ep", "64", "--global-batch", "512", "--seq-len",
                                 "131072", "--precision", "fp8", "--recompute", "full", "--json", "--no-evidence"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert np.isfinite(d["step_time_s"]) and d["step_time_s"] > 0
    r = subprocess.run([sys.executable, "-m", "supercluster", "estimate", "--model", "deepseek-v3.2", "--gpus", "1024",
                        "--tp", "1", "--pp", "8", "--cp", "2", "--ep", "64", "--global-batch", "512", "--seq-len",
                        "131072"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "error: cp: context parallelism of sparse attention" in r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
