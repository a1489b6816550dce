from __future__ import annotations

import pytest

from supercluster.estimate import estimate
from supercluster.layout import Layout
from supercluster.step import LEDGER


def test_ledger_sums_to_step_time_and_names_every_loss(llama3_70b, h100):
    # DGXC Llama 3.1 70B recipe layout (TP4 PP4 CP2 VP5).
    lay = Layout(tp=4, pp=4, dp=2, cp=2, vpp=5, micro_batch=1, global_batch=128, seq_len=8192, precision="fp8")
    b = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=lay, framework="nemo-megatron")
    assert set(b.ledger) == set(LEDGER)
    assert sum(b.ledger.values()) == pytest.approx(b.step_time_s, rel=1e-12)
    assert all(v >= 0 for v in b.ledger.values())
    assert b.ledger["pipeline_bubble"] > 0 and b.ledger["exposed_tp_comm"] > 0
    assert 0.2 < b.mfu < 0.7 and b.fits


def test_bubble_is_the_1f1b_fraction(llama3_70b, h100):
    # With comm-free stages the bubble is (p - 1) / v slots of one micro-batch stage time.
    for vpp in (1, 2):
        lay = Layout(tp=8, pp=4, dp=1, vpp=vpp, micro_batch=1, global_batch=16, seq_len=4096)
        b = estimate(llama3_70b, gpu=h100, num_gpus=32, layout=lay)
        rest = b.step_time_s - b.ledger["stragglers"]
        stage_work = (rest - b.ledger["pipeline_bubble"] - b.ledger["exposed_pp_comm"] - b.ledger["optimizer"]
                      - b.ledger["exposed_dp_comm"])
        assert b.ledger["pipeline_bubble"] == pytest.approx(stage_work / 16 * 3 / vpp, rel=1e-9)


def test_recompute_costs_time_and_saves_memory(llama3_70b, h100):
    base = dict(tp=8, pp=4, dp=2, micro_batch=1, global_batch=32, seq_len=8192)
    none = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**base))
    full = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**base, recompute="full"))
    assert full.step_time_s > none.step_time_s and full.ledger["recompute"] > 0
    assert full.memory_per_gpu_bytes < none.memory_per_gpu_bytes
    assert full.hfu > full.mfu


def test_fp8_is_faster_than_bf16_on_hopper(llama3_70b, h100):
    lay = dict(tp=4, pp=4, dp=4, micro_batch=1, global_batch=64, seq_len=8192)
    bf16 = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**lay))
    fp8 = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**lay, precision="fp8"))
    assert 1.1 < bf16.step_time_s / fp8.step_time_s < 2.0


def test_model_too_big_does_not_fit(h100):
    from supercluster.reports import fit_reason

    b = estimate("llama3-405b", gpu=h100, num_gpus=8, layout=Layout(tp=8, global_batch=1, seq_len=8192))
    assert not b.fits and b.memory_per_gpu_bytes > h100.hbm_bytes
    assert "largest term optimizer" in fit_reason(b) and "GiB over" in fit_reason(b)


def test_single_gpu_has_no_communication(h100):
    b = estimate("llama2-7b", gpu="a100-80gb", num_gpus=1, layout=Layout(global_batch=4, seq_len=4096))
    assert b.ledger["stragglers"] == 0 and b.ledger["exposed_dp_comm"] == 0 and b.ledger["exposed_tp_comm"] == 0
