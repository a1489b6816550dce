"""Issue 33: group-limited routing (DeepSeek-V3's n_group 8 / topk_group 4). A token's experts lie in its
best groups, so DeepEP's dispatch, which sends a token once to each rank and each node holding any of
them, reaches fewer nodes: the count against a simulation of the router and a hand-worked case, and the
model fields read from every place a model is described."""

from __future__ import annotations

import dataclasses
from math import comb

import numpy as np
import pytest

from supercluster.errors import InputError
from supercluster.formats.hf import from_hf_config
from supercluster.formats.load import load_model
from supercluster.formats.megatron_args import model_args, model_from_args, parse_args
from supercluster.network.twolevel import TokenDispatch, _grouped_reach, node_dedup_factor


def _simulated_reach(experts, top_k, groups, group_topk, units, draws=20000):
    """Distinct units a token reaches, as the router picks: group_topk groups at random, then top_k
    distinct experts among theirs."""
    rng, size = np.random.default_rng(11), experts // groups
    total = 0
    for _ in range(draws):
        chosen = rng.choice(groups, group_topk, replace=False)
        pool = np.concatenate([np.arange(j * size, (j + 1) * size) for j in chosen])
        total += len({int(e) * units // experts for e in rng.choice(pool, top_k, replace=False)})
    return total / draws


@pytest.mark.parametrize("units", [8, 4, 64, 5])
def test_the_reach_of_grouped_routing_is_the_routers_own(units):
    """DeepSeek-V3 (256 experts, top-8, best 4 of 8 groups) over 8 or 4 nodes, 64 ranks, and 5 blocks
    that cut across the groups: the counted mean within 1 % of 20,000 simulated tokens."""
    assert _grouped_reach(256, 8, 8, 4, units) == pytest.approx(_simulated_reach(256, 8, 8, 4, units), rel=0.01)


def test_groups_on_nodes_cap_the_nodes_a_token_reaches():
    """Groups as wide as a node: a node is reached only if its group is chosen (4 of 8) and then holds one
    of the 8 experts drawn from the 128 of the chosen groups; never more nodes than chosen groups."""
    by_hand = 8 * (4 / 8) * (1 - comb(96, 8) / comb(128, 8))
    assert _grouped_reach(256, 8, 8, 4, 8) == pytest.approx(by_hand, rel=1e-12)
    assert _grouped_reach(256, 8, 8, 4, 8) < 4 < 8 * float(node_dedup_factor(256, 8, 8))
    # one group of all the experts is no limit: the ungrouped count
    for experts, top_k, units in ((256, 8, 8), (128, 8, 4), (160, 6, 5)):
        assert _grouped_reach(experts, top_k, 1, 1, units) / top_k == pytest.approx(
            float(node_dedup_factor(experts, top_k, units)), rel=1e-12)


def test_grouped_routing_narrows_deepeps_dispatch_and_nothing_else():
    """DeepSeek-V3 on 1,024 H100 (EP 64 over eight nodes): with DeepEP the cross-node bytes shrink to
    the grouped reach and the exposed dispatch falls; the plain all-to-all (a copy per expert) and a
    fixed gate are unchanged, and so is the busiest rank's load."""
    from supercluster.hardware.specs import get_gpu
    from supercluster.job import default_network, estimate
    from supercluster.parallelism.framework import get_framework
    from supercluster.parallelism.layout import Layout

    ranks, nodes = TokenDispatch(256, 8, "random", 8, 4).factors(64, 8, 8)
    assert float(nodes) == pytest.approx(_grouped_reach(256, 8, 8, 4, 8) / 8)
    assert float(ranks) == pytest.approx(_grouped_reach(256, 8, 8, 4, 64) / 8)
    assert TokenDispatch(256, 8, "round-robin", 8, 4).factors(64, 8, 8) == \
        TokenDispatch(256, 8, "round-robin").factors(64, 8, 8)

    grouped = load_model("deepseek-v3")
    assert (grouped.router_groups, grouped.router_group_topk) == (8, 4)
    plain_routing = dataclasses.replace(grouped, router_groups=0, router_group_topk=0)
    gpu = get_gpu("h100-sxm")
    net = default_network(gpu, num_gpus=1024)
    layout = Layout(tp=2, pp=8, vpp=4, dp=64, ep=64, expert_tp=1, global_batch=8192, seq_len=4096, zero_stage=1)

    def step(model, fw):
        return estimate(model, gpu=gpu, num_gpus=1024, layout=layout, framework=get_framework(fw), network=net)

    deep_g, deep_u = step(grouped, "nemo-megatron+deepep"), step(plain_routing, "nemo-megatron+deepep")
    assert deep_g.ledger["exposed_ep_comm"] < 0.85 * deep_u.ledger["exposed_ep_comm"]
    assert deep_g.moe["dispatch_call_s"] < deep_u.moe["dispatch_call_s"]
    assert deep_g.moe["load_factor"] == deep_u.moe["load_factor"]
    a2a_g, a2a_u = step(grouped, "nemo-megatron"), step(plain_routing, "nemo-megatron")
    assert a2a_g.step_time_s == a2a_u.step_time_s


def test_every_model_description_carries_the_groups():
    """config.json n_group / topk_group and Megatron's --moe-router-num-groups / --moe-router-group-topk
    read as the fields; the export writes them back; keeping every group is no limit."""
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 61,
           "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280, "intermediate_size": 18432,
           "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1,
           "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
           "qk_rope_head_dim": 64, "v_head_dim": 128, "n_group": 8, "topk_group": 4, "rms_norm_eps": 1e-6,
           "rope_theta": 10000}
    m = from_hf_config(cfg)
    assert (m.router_groups, m.router_group_topk) == (8, 4)
    assert from_hf_config({**cfg, "n_group": 1, "topk_group": 1}).router_groups == 0
    text = " ".join(model_args(m))
    assert "--moe-router-num-groups 8 --moe-router-group-topk 4" in text
    back = model_from_args(parse_args(text + " --vocab-size 129280"), "back")
    assert (back.router_groups, back.router_group_topk) == (8, 4)


@pytest.mark.parametrize("fields, field", [
    ({"router_groups": 6, "router_group_topk": 2}, "model.router_groups"),      # 6 does not cut 256
    ({"router_groups": 8, "router_group_topk": 0}, "model.router_group_topk"),
    ({"router_groups": 8, "router_group_topk": 9}, "model.router_group_topk"),
    ({"router_groups": 128, "router_group_topk": 2}, "model.router_group_topk"),  # 4 experts < top-8
])
def test_impossible_groups_are_refused_by_name(fields, field):
    with pytest.raises(InputError) as err:
        dataclasses.replace(load_model("deepseek-v3"), **fields)
    assert field in str(err.value)
    with pytest.raises(InputError, match="model.router_groups"):
        dataclasses.replace(load_model("llama3-8b"), router_groups=8, router_group_topk=4)


def test_groups_that_cannot_route_are_refused_by_the_field_that_states_them():
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 1024, "num_hidden_layers": 4,
           "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 32000, "intermediate_size": 4096,
           "moe_intermediate_size": 512, "n_routed_experts": 64, "num_experts_per_tok": 8, "n_group": 6,
           "topk_group": 2, "rms_norm_eps": 1e-6}
    with pytest.raises(InputError, match="^config.json n_group"):
        from_hf_config(cfg)
    with pytest.raises(InputError, match="^config.json n_group"):
        from_hf_config({**cfg, "n_group": 32, "topk_group": 2})  # 2 groups of 2 experts hold fewer than 8
    args = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --vocab-size 32000 --num-experts 64 "
            "--moe-router-topk 8 --moe-ffn-hidden-size 512 --moe-router-num-groups 6 --moe-router-group-topk 2")
    with pytest.raises(InputError, match="^moe-router-num-groups"):
        model_from_args(parse_args(args), "bad")
