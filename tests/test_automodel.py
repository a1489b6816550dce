"""NeMo AutoModel's benchmark behaviour: the round-robin gate seen through DeepEP's dispatch, FSDP2
with reshard_after_forward off, 16-bit parameters as the optimizer's master."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from supercluster.errors import InputError
from supercluster.job import estimate
from supercluster.network.twolevel import TokenDispatch, node_dedup_factor
from supercluster.parallelism.framework import get_framework
from supercluster.parallelism.layout import Layout


def test_round_robin_gate_reaches_whole_blocks_of_experts():
    """Token i's experts are 8i ... 8i + 7 (mod 256): on EP 64 (4 experts a rank, 32 a node) two ranks
    of one node, against about 7.6 ranks on 5.3 nodes for a balanced random router."""
    rr, rnd = TokenDispatch(256, 8, "round-robin"), TokenDispatch(256, 8)
    ranks, nodes = rr.factors(64, 8, 8)
    assert (float(ranks), float(nodes)) == (2 / 8, 1 / 8)
    r_ranks, r_nodes = rnd.factors(64, 8, 8)
    assert float(r_nodes) == pytest.approx(float(node_dedup_factor(256, 8, 8)))
    assert float(r_ranks) == pytest.approx(float(node_dedup_factor(256, 8, 64)))
    assert 0.9 < float(r_ranks) < 1.0 and 0.6 < float(r_nodes) < 0.7
    # Qwen3 30B-A3B on one node, EP 8 (16 experts a rank): each token's 8 experts sit on one rank
    ranks, nodes = TokenDispatch(128, 8, "round-robin").factors(8, 8, 1)
    assert (float(ranks), float(nodes)) == (1 / 8, 1.0)
    # worked by hand: 10 experts, top 3, 5 ranks of 2: every run of 3 experts spans 2 ranks
    ranks, _ = TokenDispatch(10, 3, "round-robin").factors(5, 5, 1)
    assert float(ranks) == pytest.approx(2 / 3)


def test_a_contiguous_run_never_reaches_more_than_random_picks():
    for experts, top_k, g, n in itertools.product((8, 32, 128, 256), (1, 2, 4, 8), (1, 2, 4, 8, 16, 64),
                                                  (1, 2, 4, 8)):
        if experts % g or top_k > experts:
            continue
        k = -(-g // n)
        rr = TokenDispatch(experts, top_k, "round-robin").factors(g, min(n, g), k)
        rnd = TokenDispatch(experts, top_k).factors(g, min(n, g), k)
        assert np.all(np.asarray(rr) <= np.asarray(rnd) + 1e-12), (experts, top_k, g, n)


def test_unknown_router_is_refused_by_name():
    with pytest.raises(InputError) as e:
        TokenDispatch(8, 2, "hash")
    assert e.value.field == "router"


DSV3_256 = dict(gpu="h100-sxm", num_gpus=256,
                layout=Layout(tp=1, pp=4, dp=64, ep=64, vpp=8, global_batch=512, seq_len=4096, recompute="full",
                              zero_stage=3))


def test_the_gate_changes_deepep_traffic_and_the_busiest_ranks_load_only():
    plain = estimate("deepseek-v3", framework="automodel", **DSV3_256)
    gate = estimate("deepseek-v3", framework="automodel+round-robin-gate", **DSV3_256)
    assert gate.ledger["exposed_ep_comm"] < 0.3 * plain.ledger["exposed_ep_comm"]
    for name in ("ideal_compute", "exposed_dp_comm"):
        assert gate.ledger[name] == pytest.approx(plain.ledger[name])
    # the gate gives every rank the same tokens: the experts no longer wait for a busiest rank
    assert gate.moe["load_factor"] == 1.0 < plain.moe["load_factor"]
    assert gate.ledger["gemm_inefficiency"] < plain.ledger["gemm_inefficiency"]
    # a one-copy-per-expert all-to-all (no DeepEP) moves the same bytes whichever experts a token picks:
    # only the busiest rank's share of them differs
    no_deepep = dataclasses.replace(get_framework("automodel"), ep_node_dedup=False)
    a = estimate("deepseek-v3", framework=no_deepep, **DSV3_256)
    b = estimate("deepseek-v3", framework=dataclasses.replace(no_deepep, moe_router="round-robin"), **DSV3_256)
    assert b.step_time_s < a.step_time_s and b.moe["load_factor"] == 1.0


def test_parameters_kept_gathered_trade_memory_for_one_gather():
    """FSDP2 reshard_after_forward=False: no second gather in the backward; every layer's weights
    gathered at the turn of a micro-batch."""
    fw = get_framework("automodel")
    resharding = dataclasses.replace(fw, zero3_reshard_after_forward=True)
    kw = dict(gpu="h100-sxm", num_gpus=64, layout=Layout(dp=64, global_batch=256, seq_len=4096, zero_stage=3))
    kept, freed = estimate("llama3-8b", framework=fw, **kw), estimate("llama3-8b", framework=resharding, **kw)
    assert kept.memory["mem_weights_bytes"] > 10 * freed.memory["mem_weights_bytes"]
    # the whole model in bf16 (but the input embedding, which only the first stage's lookup reads)
    assert kept.memory["mem_weights_bytes"] == pytest.approx(8.03e9 * 2, rel=0.1)
    assert kept.ledger["exposed_dp_comm"] <= freed.ledger["exposed_dp_comm"]


def test_sixteen_bit_master_weights_hold_a_third_of_the_optimizer_state():
    fw = get_framework("automodel")
    mixed = dataclasses.replace(fw, optimizer_bytes_per_param=12.0, grad_bytes=4)
    kw = dict(gpu="h100-sxm", num_gpus=8, layout=Layout(dp=8, ep=8, global_batch=64, micro_batch=4,
                                                         seq_len=4096, recompute="full", zero_stage=3))
    a, b = estimate("qwen3-30b-a3b", framework=fw, **kw), estimate("qwen3-30b-a3b", framework=mixed, **kw)
    assert a.memory["mem_optimizer_bytes"] == pytest.approx(b.memory["mem_optimizer_bytes"] / 3)
    assert a.memory["mem_grads_bytes"] == pytest.approx(b.memory["mem_grads_bytes"] / 2)  # bf16 gradients
    # and the Adam step moves 2 x 4 + 6 bytes a parameter instead of 2 x 12 + 6 (plus the gradients it reads)
    assert a.ledger["optimizer"] < 0.6 * b.ledger["optimizer"]


SUPER_64 = dict(gpu="h100-sxm", num_gpus=64,
                layout=Layout(dp=64, ep=64, micro_batch=2, global_batch=512, seq_len=4096, recompute="full",
                              zero_stage=3))


@pytest.mark.parametrize("row_id, model, kw", [
    ("AM2510-DSV3-H100-bf16-256", "deepseek-v3", DSV3_256),
    ("AM2602-NEMOTRON3-SUPER-H100-bf16-64", "nemotron3-super-120b", SUPER_64),
])
def test_published_runs_are_priced_only_with_the_gate_they_ran(row_id, model, kw):
    """NeMo AutoModel's DeepSeek-V3 on 256 H100 (8.18 s a step) and Nemotron 3 Super on 64 (7.29 s):
    within 15 % priced with the gate the benchmark ran (-9 % and +4 %); priced with a learned router's
    spread, the all-to-all makes each over 25 % slower (DeepSeek-V3's +27 %: its group-limited routing
    keeps a token's experts on fewer nodes)."""
    from supercluster.validation.validate import load_rows

    row = next(r for r in load_rows("heldout") if r["id"] == row_id)
    measured = float(row["step_time_s"])
    gate = estimate(model, framework="automodel+round-robin-gate", **kw).step_time_s
    learned = estimate(model, framework="automodel", **kw).step_time_s
    assert abs(gate / measured - 1) <= 0.15 and learned / measured - 1 > 0.25
