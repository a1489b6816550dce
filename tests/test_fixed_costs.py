"""The step's fixed and synchronisation costs (issue 32): the slowest GPU's pace, host kernel
launches, and the SMs hidden communication takes from compute."""

from dataclasses import replace

import pytest

import supercluster as sc
from supercluster.parallelism.framework import comm_sm_frac, get_framework, gpu_speed_sigma
from supercluster.perf.step import expected_max_normal


def _step(num_gpus: int, layout: sc.Layout, framework: str = "nemo-megatron", model: str = "llama3-8b"):
    return sc.estimate(model, gpu="h100-sxm", num_gpus=num_gpus, layout=layout, framework=framework)


def test_expected_slowest_of_n_grows_with_n():
    z = [float(expected_max_normal(n)) for n in (1, 2, 8, 128, 16384)]
    assert z[0] == 0.0 and z == sorted(z)
    assert z[2] == pytest.approx(1.42, abs=0.02) and z[4] == pytest.approx(3.96, abs=0.05)


def test_the_slowest_gpu_paces_more_of_the_step_on_more_gpus():
    """The same per-GPU work on 8 and on 1,024 GPUs: the wait grows with the count (sigma x E[max of
    N]), and one GPU waits for nobody."""
    one = _step(1, sc.Layout(tp=1, dp=1, global_batch=4, micro_batch=1, seq_len=4096))
    assert one.ledger["stragglers"] == 0.0
    small = _step(8, sc.Layout(tp=1, dp=8, global_batch=32, micro_batch=1, seq_len=4096))
    big = _step(1024, sc.Layout(tp=1, dp=1024, global_batch=4096, micro_batch=1, seq_len=4096))
    share = [b.ledger["stragglers"] / b.step_time_s for b in (small, big)]
    assert 0 < share[0] < share[1] < 0.08
    paced = sum(small.ledger[k] for k in ("ideal_compute", "gemm_inefficiency", "attention_inefficiency",
                                          "recompute", "pipeline_bubble"))
    assert small.ledger["stragglers"] == pytest.approx(paced * gpu_speed_sigma() * float(expected_max_normal(8)))


def test_a_short_layer_waits_for_its_kernel_launches_unless_graphed():
    """Llama 3 8B at 128 tokens a micro-batch over TP 8: each layer's kernels take less than a launch,
    so the host sets part of the pace (the TP calls most of the rest); CUDA graphs replay the kernels
    with one launch and the wait goes."""
    layout = sc.Layout(tp=8, dp=1, global_batch=8, micro_batch=1, seq_len=128)
    eager = _step(8, layout)
    assert eager.ledger["kernel_launch"] > 0.05 * eager.step_time_s
    fw = replace(get_framework("nemo-megatron"), cuda_graphs=True)
    graphed = sc.estimate("llama3-8b", gpu="h100-sxm", num_gpus=8, layout=layout, framework=fw)
    assert graphed.ledger["kernel_launch"] == 0.0 and graphed.step_time_s < eager.step_time_s
    # a long layer keeps the GPU busier than the host: no wait
    long = _step(8, sc.Layout(tp=8, dp=1, global_batch=8, micro_batch=1, seq_len=8192))
    assert long.ledger["kernel_launch"] == 0.0


def test_hidden_tp_traffic_costs_the_sms_it_holds():
    """Under TP overlap (NeMo) the hidden TP traffic slows the compute beside it; without overlap
    (plain Megatron-LM) nothing is hidden and nothing is charged."""
    layout = sc.Layout(tp=8, dp=1, global_batch=8, micro_batch=1, seq_len=8192)
    nemo = _step(8, layout, "nemo-megatron")
    plain = _step(8, layout, "megatron")
    assert 0 < nemo.ledger["comm_contention"] < comm_sm_frac() * nemo.step_time_s
    assert plain.ledger["comm_contention"] == 0.0


def test_run_options_reach_the_step_from_a_name_and_from_a_runs_row():
    """What a published run did (CUDA graphs, TP / DP overlap) is said on the framework's name or in a
    runs-CSV column (yes / no; blank: the framework's default) and priced as that behaviour."""
    from supercluster.formats.runs import row_setup
    from supercluster.validation.validate import load_rows

    fw = get_framework("megatron+tp-overlap+cuda-graphs+no-dp-overlap")
    assert fw.tp_comm_overlap and fw.sequence_parallel and fw.cuda_graphs and not fw.dp_overlap
    layout = sc.Layout(tp=8, dp=8, global_batch=64, micro_batch=1, seq_len=8192)
    plain = _step(64, layout, "megatron", "llama3-70b")
    overlapped = _step(64, layout, "megatron+tp-overlap", "llama3-70b")
    assert overlapped.ledger["exposed_tp_comm"] < plain.ledger["exposed_tp_comm"]
    row = dict(next(r for r in load_rows() if r["id"] == "DGXC-L31-70B-bf16-64"))
    assert row_setup(row)[2].tp_comm_overlap  # NeMo's default
    _, _, fw_row, _ = row_setup(dict(row, tp_comm_overlap="no", cuda_graphs="yes"))
    assert not fw_row.tp_comm_overlap and fw_row.cuda_graphs
    with pytest.raises(sc.InputError, match="tp_comm_overlap"):
        row_setup(dict(row, tp_comm_overlap="maybe"))
