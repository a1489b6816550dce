"""An MoE layer's host work (issues 32 and 33): the kernels its router, dispatcher and experts launch,
and the wait for the router's counts that a dropless dispatcher makes the host take."""

from dataclasses import replace

import numpy as np
import pytest

import supercluster as sc
from supercluster.hardware.kernels import host_op_launch_s
from supercluster.parallelism.framework import get_framework
from supercluster.perf.columns import layout_columns, read_rows
from supercluster.perf.host import MOE_OPS, QUANT_KERNELS, moe_host_ops

MODEL = "qwen3-30b-a3b"  # 128 experts of width 768, top-8: fine-grained, many small GEMMs


def _layout(ep: int = 8, micro_batch: int = 1) -> sc.Layout:
    return sc.Layout(tp=1, dp=8, ep=ep, micro_batch=micro_batch, global_batch=64, seq_len=4096,
                     precision="fp8", recompute="none", zero_stage=1)


def _step(fw: sc.Framework | str, layout: sc.Layout | None = None, gpu: str = "b200") -> sc.StepBreakdown:
    return sc.estimate(MODEL, gpu=gpu, num_gpus=8, layout=layout or _layout(), framework=fw)


def _ops(fw: sc.Framework, layout: sc.Layout) -> tuple[float, float, float]:
    model = sc.load_model(MODEL)
    rows = read_rows(model, layout_columns(layout, fw), "tp-cp-ep-dp-pp")
    return tuple(float(x[0]) for x in moe_host_ops(model, fw, rows))  # type: ignore[return-value]


def test_each_local_expert_launches_its_gemms_and_quantisations():
    """Transformer Engine's grouped linear: a GEMM per local expert, forward FC1 and FC2, backward their
    data and weight gradients, and under current scaling three kernels per quantised tensor; a grouped
    kernel launches once per GEMM whatever the expert count."""
    fw = get_framework("nemo-megatron+fp8-current")
    pre, post, bwd = _ops(fw, _layout(ep=8))
    q = QUANT_KERNELS["current"]
    assert pre == MOE_OPS["pre"]
    assert post == MOE_OPS["post"] + MOE_OPS["low"] + 16 * 2 * (1 + q)
    assert bwd == MOE_OPS["bwd"] + MOE_OPS["low"] + 16 * 2 * (2 + q)
    # half the experts a GPU at EP 16 would halve the per-expert launches; here: EP 4, 32 a GPU
    assert _ops(fw, _layout(ep=4))[1] - MOE_OPS["post"] - MOE_OPS["low"] == 32 * 2 * (1 + q)
    grouped = replace(fw, moe_expert_launches="grouped")
    assert _ops(grouped, _layout(ep=8))[1] == MOE_OPS["post"] + MOE_OPS["low"] + 2 * 2
    # delayed scaling casts all of a call's tensors in one fused kernel
    delayed = get_framework("nemo-megatron")
    assert _ops(delayed, _layout(ep=8))[1] == MOE_OPS["post"] + MOE_OPS["low"] + 16 * 2 + 2


def test_a_fine_grained_moe_layer_waits_for_its_launches_unless_graphed():
    """At one micro-batch of 4,096 tokens the 16 local experts' GEMMs are shorter than their launches:
    the host sets the pace (the ledger's kernel_launch); fewer launches (a grouped kernel) wait less,
    CUDA graphs not at all, and a micro-batch eight times larger keeps the GPU busier than the host."""
    te = get_framework("nemo-megatron+fp8-current")
    eager = _step(te)
    assert eager.ledger["kernel_launch"] > 0.1 * eager.step_time_s
    grouped = _step(replace(te, moe_expert_launches="grouped"))
    assert grouped.ledger["kernel_launch"] < eager.ledger["kernel_launch"]
    assert grouped.step_time_s < eager.step_time_s
    graphed = _step(replace(te, cuda_graphs=True))
    assert graphed.ledger["kernel_launch"] == 0.0
    big = _step(te, _layout(micro_batch=8))
    assert big.ledger["kernel_launch"] / big.step_time_s < eager.ledger["kernel_launch"] / eager.step_time_s
    assert eager.moe is not None and eager.moe["host_kernels"] == pytest.approx(sum(_ops(te, _layout())))


def test_waiting_for_the_routers_counts_costs_what_the_attention_could_have_hidden():
    """The dropless dispatcher's wait empties the GPU's queue, so the experts' launches cannot run
    ahead under the attention's compute: the forward takes max(G, H, H_post + G_pre), never less than
    without the wait, and no more than the host's experts' part besides the GPU's pre part. Padding
    every expert to its capacity (static shapes) has no wait."""
    te = get_framework("nemo-megatron")
    bf16 = replace(_layout(ep=2), precision="bf16")  # 64 experts a GPU, on H100: the experts' part host-bound
    waits, free = _step(te, bf16, "h100-sxm"), _step(replace(te, moe_dispatch_sync=False), bf16, "h100-sxm")
    assert free.ledger["kernel_launch"] == 0.0  # the layer as a whole keeps the GPU the busier
    assert waits.ledger["kernel_launch"] > 0.0
    assert waits.moe is not None and waits.moe["host_waits"]
    # (the wait is at most the experts' host launches: H_post x MoE layers x micro-batches)
    model = sc.load_model(MODEL)
    post = _ops(te, bf16)[1] * host_op_launch_s() * model.num_moe_layers * waits.microbatches
    assert waits.ledger["kernel_launch"] < post
    padded = get_framework("nemo-megatron+capacity-1+pad-to-capacity")
    held = _step(padded, bf16, "h100-sxm")
    assert held.moe is not None and held.moe["host_waits"] is False
    assert held.ledger["kernel_launch"] == 0.0


def test_a_dense_model_has_no_moe_host_work():
    fw = get_framework("nemo-megatron")
    model = sc.load_model("llama3-8b")
    lay = sc.Layout(tp=1, dp=8, global_batch=64, seq_len=4096)
    rows = read_rows(model, layout_columns(lay, fw), "tp-cp-ep-dp-pp")
    assert all(np.all(x == 0) for x in moe_host_ops(model, fw, rows))


def test_a_grace_host_launches_the_same_kernels_slower():
    """GB200's kernels are launched by a Grace CPU, which runs PyTorch's host work 2.75x slower than an
    x86 server's Xeon (kernels.toml [host] grace_op_factor): the same host-bound layer waits longer for
    its launches, and a layer the GPU keeps busy is not slowed at all."""
    from supercluster.hardware.specs import get_gpu

    grace = get_gpu("gb200")
    assert grace.host_cpu == "grace" and get_gpu("b200").host_cpu == "intel"
    x86 = replace(grace, host_cpu="intel")
    fw = get_framework("nemo-megatron+fp8-current")
    lay = _layout(micro_batch=2)
    on_grace, on_x86 = (sc.estimate(MODEL, gpu=g, num_gpus=8, layout=lay, framework=fw) for g in (grace, x86))
    assert on_grace.ledger["kernel_launch"] > on_x86.ledger["kernel_launch"] > 0.0
    assert on_grace.step_time_s > on_x86.step_time_s
    assert host_op_launch_s("grace") == pytest.approx(host_op_launch_s() * 37.08 / 13.48, rel=1e-3)
    dense = sc.Layout(tp=1, dp=8, global_batch=64, seq_len=4096)
    a, b = (sc.estimate("llama3-8b", gpu=g, num_gpus=8, layout=dense, framework="nemo-megatron") for g in (grace, x86))
    assert a.ledger["kernel_launch"] == b.ledger["kernel_launch"] == 0.0
    assert a.step_time_s == b.step_time_s
