"""Latent MoE (Nemotron 3 Super): experts and all-to-alls in a narrower latent space."""

import dataclasses

import pytest

from supercluster.errors import InputError
from supercluster.formats.hf import from_hf_config
from supercluster.formats.load import load_model
from supercluster.formats.megatron_args import model_args, model_from_args, parse_args
from supercluster.hardware.specs import get_gpu
from supercluster.job import default_network, estimate
from supercluster.models.spec import ModelSpec
from supercluster.parallelism.layout import Layout

# nvidia/NVIDIA-Nemotron-3-Super-120B-A12B config.json, the fields the model reads (as transcribed in
# public test fixtures)
SUPER_HF = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "hidden_size": 4096, "head_dim": 128,
    "hybrid_override_pattern": "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*"
                               "EMEMEMEME",
    "num_hidden_layers": 88, "intermediate_size": 2688, "mamba_head_dim": 64, "mamba_num_heads": 128,
    "max_position_embeddings": 262144, "mlp_hidden_act": "relu2", "moe_intermediate_size": 2688,
    "moe_latent_size": 1024, "moe_shared_expert_intermediate_size": 5376, "mtp_hybrid_override_pattern": "*E",
    "n_groups": 8, "n_routed_experts": 512, "n_shared_experts": 1, "num_attention_heads": 32,
    "num_experts_per_tok": 22, "num_key_value_heads": 2, "num_nextn_predict_layers": 1, "ssm_state_size": 128,
    "chunk_size": 128, "conv_kernel": 4, "expand": 2, "tie_word_embeddings": False, "vocab_size": 131072,
}


def test_nemotron_3_super_imports_with_its_published_weight_count():
    m = from_hf_config(SUPER_HF)
    assert (m.moe_latent_dim, m.expert_width, m.num_moe_layers, m.ssm_layers, m.attention_layers) == \
        (1024, 1024, 40, 40, 8)
    # hand-worked: an expert is 2 x 1024 x 2688 (squared ReLU: up and down), the projections 2 x 4096 x 1024
    assert m.expert_params == 5_505_024 and m.latent_proj_params == 8_388_608
    # the BF16 checkpoint's 123,611,012,096 weights less its MTP module's 2,942,324,736 (safetensors
    # headers), to the weight; the MTP module itself within one norm vector (4,096)
    assert m.num_params - m.mtp_block_params == 123_611_012_096 - 2_942_324_736
    assert abs(m.mtp_block_params - 2_942_324_736) <= 4096
    preset = load_model("nemotron3-super-120b")
    assert preset.num_params == m.num_params - m.mtp_block_params
    assert 12.7e9 < preset.num_active_params < 12.8e9  # "A12B"


def test_the_latent_width_shrinks_the_dispatch_and_the_experts_not_the_rest():
    sup = load_model("nemotron3-super-120b")
    wide = dataclasses.replace(sup, moe_latent_dim=0)  # the same experts on d_model
    gpu = get_gpu("h100-sxm")
    lay = Layout(tp=1, pp=4, dp=64, ep=64, global_batch=1024, seq_len=8192, zero_stage=1)
    net = default_network(gpu, num_gpus=256)
    a = estimate(sup, gpu=gpu, num_gpus=256, layout=lay, framework="nemo-megatron", network=net)
    b = estimate(wide, gpu=gpu, num_gpus=256, layout=lay, framework="nemo-megatron", network=net)
    # EP 64 crosses the scale-out NICs, bandwidth-bound: a quarter of the bytes, about a quarter of the time
    ratio = a.ledger["exposed_ep_comm"] / b.ledger["exposed_ep_comm"]
    assert 0.24 < ratio < 0.3
    assert a.step_time_s < b.step_time_s
    assert sup.num_params < wide.num_params  # experts 1024 wide, not 4096


def test_latent_moe_and_its_mtp_block_round_trip_through_megatron_arguments():
    sup = load_model("nemotron3-super-120b+mtp")
    text = " ".join(model_args(sup))
    assert "--moe-latent-size 1024" in text and "--squared-relu" in text
    assert "--mtp-num-layers 1 --mtp-hybrid-override-pattern '*E'" in text  # attention + MoE, as Super's
    back = model_from_args(parse_args(text), "back")
    assert (back.moe_latent_dim, back.mtp_layers, back.num_params) == (1024, 1, sup.num_params)
    # an MTP block of other layers is not the one priced: refused by name, both ways in
    with pytest.raises(InputError, match="^mtp-hybrid-override-pattern: '\\*M\\*E'"):
        model_from_args(parse_args(text.replace("'*E'", "'*M*E'")), "back")
    with pytest.raises(InputError, match="^config.json mtp_hybrid_override_pattern: .*not modelled"):
        from_hf_config({**SUPER_HF, "mtp_hybrid_override_pattern": "*M*E"})


@pytest.mark.parametrize("change, field", [
    ({"moe_latent_size": 0}, "config.json moe_latent_size"),
    ({"moe_latent_size": "wide"}, "config.json moe_latent_size"),
])
def test_a_bad_latent_width_names_its_field(change, field):
    with pytest.raises(InputError) as e:
        from_hf_config({**SUPER_HF, **change})
    assert e.value.field == field


def test_a_latent_width_without_experts_is_refused():
    with pytest.raises(InputError, match="^model.moe_latent_dim: a latent width goes with routed experts"):
        ModelSpec(key="x", name="x", num_layers=2, d_model=64, ffn_dim=256, num_heads=4, num_kv_heads=4,
                  head_dim=16, vocab_size=100, moe_latent_dim=32)
