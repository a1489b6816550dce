"""Data-parallel synchronisation under ZeRO 0-2 as the frameworks run it: ZeRO-2 reduce-scatters every
micro-batch's gradients (it keeps only its shard), DeepSpeed overlaps its stage 0-2 traffic only when
asked (overlap_comm defaults to stage 3) and gathers the updated parameters inside the optimizer step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from supercluster.errors import InputError
from supercluster.formats.load import load_model
from supercluster.hardware.specs import get_gpu
from supercluster.job import default_network, estimate
from supercluster.parallelism.framework import Framework, framework_catalog, get_framework
from supercluster.parallelism.layout import Layout

GBS, DP = 64, 8  # 8 micro-batches of 1 sequence per data-parallel rank


@pytest.fixture(scope="module")
def job():
    model, gpu = load_model("llama3-8b"), get_gpu("a100-80gb")
    return model, gpu, default_network(gpu, num_gpus=DP)


def _dp(job, zero: int, fw: Framework) -> tuple[float, float]:
    model, gpu, net = job
    lay = Layout(tp=1, pp=1, dp=DP, micro_batch=1, global_batch=GBS, seq_len=4096, zero_stage=zero)
    b = estimate(model, gpu=gpu, num_gpus=DP, layout=lay, framework=fw, network=net)
    return b.ledger["exposed_dp_comm"], b.step_time_s


def _local_params(model) -> float:
    """The parameters one GPU holds at TP 1, PP 1 (the step's own count, perf.sync.local_params)."""
    from supercluster.perf.columns import layout_columns, read_rows
    from supercluster.perf.sync import local_params

    fw = get_framework("megatron")
    lay = Layout(tp=1, pp=1, dp=DP, micro_batch=1, global_batch=GBS, seq_len=4096)
    dense, experts = local_params(model, fw, read_rows(model, layout_columns(lay, fw)))
    return float((dense + experts)[0])


def test_zero2_reduce_scatters_every_micro_batch(job):
    """Without overlap the step carries one reduce-scatter of the gradients per micro-batch under
    ZeRO-2 and one per step under ZeRO-1: the difference is exactly (m - 1) reduce-scatters."""
    model, _, net = job
    fw = replace(get_framework("megatron"), dp_overlap=False)
    z1, _ = _dp(job, 1, fw)
    z2, _ = _dp(job, 2, fw)
    rs = float(net.collective_time_s("reduce_scatter", _local_params(model) * fw.grad_reduce_bytes, DP, 1))
    m = GBS // DP
    assert z2 - z1 == pytest.approx((m - 1) * rs, rel=1e-9)


def test_zero2_under_overlap_still_pays_per_micro_batch(job):
    """Overlapped, each micro-batch's reduce-scatter leaves at least its last bucket exposed, so ZeRO-2
    with gradient accumulation is never cheaper in DP time than ZeRO-1; in HBM, ZeRO-1 accumulates each
    micro-batch's gradients into the whole fp32 main gradients (read and written) where ZeRO-2 copies
    them, fresh, into the reduce-scatter's fp32 input (read in 16 bits)."""
    model, gpu, net = job
    fw = get_framework("megatron")
    z1, z2 = _dp(job, 1, fw)[0], _dp(job, 2, fw)[0]
    assert z2 > z1
    b1, b2 = (estimate(model, gpu=gpu, num_gpus=DP, framework=fw, network=net,
                       layout=Layout(dp=DP, global_batch=GBS, seq_len=4096, zero_stage=z)) for z in (1, 2))
    # per parameter of the layers (the embedding left out) and micro-batch (its 8 micro-batches), less the
    # one 16-bit weight-sized operand the GEMM's backward already moves: ZeRO-1 2 x 4 - 2 bytes, ZeRO-2
    # 2 + 4 - 2, at the achievable HBM rate
    layers = _local_params(model) - model.vocab_size * model.d_model
    acc = (GBS // DP) * layers * (6.0 - 4.0) / (gpu.hbm_bytes_per_s * 0.85)
    assert b1.ledger["memory_bound_ops"] - b2.ledger["memory_bound_ops"] == pytest.approx(acc, rel=1e-6)


def test_deepspeed_stages_0_to_2_are_exposed_unless_overlap_comm(job):
    """DeepSpeed's overlap_comm is on by default at stage 3 only: its ZeRO 0-2 traffic runs exposed;
    "+dp-overlap" (overlap_comm: true) hides the gradient reduction, but the parameter gather inside
    the optimizer step stays exposed."""
    ds = get_framework("deepspeed")
    assert (ds.dp_overlap_from_zero, ds.param_gather_in_step) == (3, True)
    bare = replace(ds, dp_overlap=False)
    for zero in (0, 1, 2):
        assert _dp(job, zero, ds)[0] == pytest.approx(_dp(job, zero, bare)[0], rel=1e-12)
    on = get_framework("deepspeed+dp-overlap")
    assert on.dp_overlap_from_zero == 0
    hidden, exposed = _dp(job, 1, on)[0], _dp(job, 1, ds)[0]
    assert hidden < exposed
    # the gather in the step stays: more than a profile that hides it under the next forward
    assert hidden > _dp(job, 1, replace(on, param_gather_in_step=False))[0]


def _catalog_refuses(monkeypatch, key: str, field: str, value) -> None:
    """The framework catalog, read with ``key``'s ``field`` set to ``value``, is refused naming ``field``."""
    from supercluster.parallelism import framework as f

    real = f.load_package_toml

    def patched(name):
        t = real(name)
        return {**t, key: {**t[key], field: value}} if name == "frameworks.toml" else t

    framework_catalog.cache_clear()
    monkeypatch.setattr(f, "load_package_toml", patched)
    try:
        with pytest.raises(InputError, match=field):
            framework_catalog()
    finally:
        monkeypatch.undo()
        framework_catalog.cache_clear()


def test_a_profile_states_a_zero_stage_for_its_overlap(monkeypatch):
    _catalog_refuses(monkeypatch, "deepspeed", "dp_overlap_from_zero", 5)


def test_the_framework_catalog_says_from_which_stage_deepspeed_overlaps():
    from rich.console import Console

    from supercluster.reports.tables import frameworks_table

    console = Console(width=400, record=True)
    console.print(frameworks_table(framework_catalog()))
    rows = {line.split("│")[1].strip(): line for line in console.export_text().splitlines() if line.count("│") > 3}
    assert "y (z3+)" in rows["deepspeed"] and "(z" not in rows["megatron"]


@pytest.mark.parametrize("name", ["deepspeed", "deepspeed+dp-overlap", "deepspeed+no-dp-overlap"])
@pytest.mark.parametrize("zero", [1, 2, 3])
def test_a_deepspeed_export_states_the_overlap_it_was_priced_with_and_reads_back_the_same(name, zero, tmp_path):
    """The JSON says overlap_comm as the priced profile runs this stage, and reading it back prices the same
    step (one job, one answer)."""
    import json

    from supercluster import Job, estimate
    from supercluster.formats.launchers import export

    fw = get_framework(name)
    lay = Layout(tp=1, pp=1, dp=DP, micro_batch=1, global_batch=GBS, seq_len=4096, zero_stage=zero)
    text = export(lay, "deepspeed", framework=fw)
    want = fw.dp_overlap and zero >= fw.dp_overlap_from_zero
    assert json.loads(text)["zero_optimization"]["overlap_comm"] is want
    path = tmp_path / "ds.json"
    path.write_text(text)
    job = Job.from_config(str(path), gpu="a100-80gb", num_gpus=DP, model="llama3-8b")
    back = job.framework
    assert (back.dp_overlap and zero >= back.dp_overlap_from_zero) is want
    assert back.key == ("deepspeed" if want is (zero == 3) else name)  # a suffix only where it differs
    direct = estimate(Job.of("llama3-8b", gpu="a100-80gb", layout=lay, framework=fw, network=job.network))
    assert estimate(job).step_time_s == pytest.approx(direct.step_time_s, rel=1e-12)


def test_a_deepspeed_config_with_a_non_boolean_overlap_comm_is_refused_by_name(tmp_path):
    from supercluster.formats.launchers import read_config

    path = tmp_path / "ds.json"
    path.write_text('{"train_batch_size": 64, "zero_optimization": {"stage": 1, "overlap_comm": "yes"}}')
    with pytest.raises(InputError, match=r"zero_optimization.overlap_comm: must be true or false"):
        read_config(str(path), num_gpus=8)


def test_fsdp_zero2_gathers_the_parameters_for_every_micro_batch(job):
    """PyTorch's SHARD_GRAD_OP (FSDP2 without resharding after the forward) unshards before each forward
    and reshards after each backward: without overlap, (m - 1) more all-gathers a step than a stack that
    gathers once after its optimizer step; ZeRO-3 and, under PP, a stage kept gathered are unaffected."""
    model, _, net = job
    fw = replace(get_framework("torchtitan"), dp_overlap=False)
    assert fw.zero2_regather and not get_framework("megatron").zero2_regather
    once = replace(fw, zero2_regather=False)
    ag = float(net.collective_time_s("all_gather", _local_params(model) * 2.0, DP, 1))  # bf16 parameters
    m = GBS // DP
    assert _dp(job, 2, fw)[0] - _dp(job, 2, once)[0] == pytest.approx((m - 1) * ag, rel=1e-9)
    assert _dp(job, 3, fw)[0] == pytest.approx(_dp(job, 3, once)[0], rel=1e-12)


def test_the_last_gradient_bucket_stays_exposed_at_the_frameworks_bucket_size(job):
    """DeepSpeed reduces in buckets of reduce_bucket_size (5e8) elements: on a model of fewer parameters
    than one bucket, overlap_comm hides nothing of the reduction, as if it were off; with smaller
    buckets than the model, the overlap hides all but the last (the calls' latencies aside)."""
    on = get_framework("deepspeed+dp-overlap")
    assert on.dp_bucket_params == 5e8 and get_framework("megatron").dp_bucket_params == 0
    whole = replace(on, dp_bucket_params=1e12)  # one bucket holds every parameter
    off = replace(get_framework("deepspeed+no-dp-overlap"), dp_bucket_params=1e12)
    assert _dp(job, 1, whole)[0] == pytest.approx(_dp(job, 1, off)[0], rel=1e-12)
    assert _dp(job, 1, on)[0] < _dp(job, 1, whole)[0]


def test_megatron_without_overlap_reduces_each_buffer_in_one_call(job):
    """Megatron-Core makes one bucket of a buffer when it does not overlap the reduction ("Set bucket_size
    to infinity if overlap_grad_reduce is False"): ZeRO-1 without overlap is exactly one reduce-scatter
    and one all-gather of the local parameters, one latency each."""
    model, _, net = job
    fw = replace(get_framework("megatron"), dp_overlap=False)
    p = _local_params(model)
    rs = float(net.collective_time_s("reduce_scatter", p * fw.grad_reduce_bytes, DP, 1))
    ag = float(net.collective_time_s("all_gather", p * 2.0, DP, 1))
    assert _dp(job, 1, fw)[0] == pytest.approx(rs + ag, rel=1e-9)


def test_each_bucket_is_a_call_at_its_own_size(job):
    """DeepSpeed reduces and gathers in buckets of its reduce_bucket_size whatever the overlap: without
    overlap its ZeRO-1 step makes ceil(P / bucket) calls of each collective, each priced at its own
    size (NCCL's protocol and latency for a bucket), where one bucket would make one call of the same
    bytes; the difference is at least the extra calls' zero-byte latencies."""
    model, _, net = job
    ds = get_framework("deepspeed")
    p = _local_params(model)
    calls = -(-p // ds.dp_bucket_params)
    assert calls >= 10  # an 8B model in 5e8-element buckets
    split = sum(calls * float(net.collective_time_s(kind, p * w / calls, DP, 1))
                - float(net.collective_time_s(kind, p * w, DP, 1))
                for kind, w in (("reduce_scatter", ds.grad_reduce_bytes), ("all_gather", 2.0)))
    lat = float(net.collective_time_s("reduce_scatter", 0.0, DP, 1) + net.collective_time_s("all_gather", 0.0, DP, 1))
    one = replace(ds, dp_bucket_params=10.0 * p)
    assert _dp(job, 1, ds)[0] - _dp(job, 1, one)[0] == pytest.approx(split, rel=1e-9)
    assert split >= (calls - 1) * lat


def test_megatron_buckets_only_the_first_interleaved_chunk():
    """Megatron-Core turns bucketing off for an interleaved stage's model chunks after the first ("Turn off
    bucketing for model_chunk 2 onwards"): with v chunks a stage reduces ceil(P / v / bucket) buckets of
    its first chunk and one call for each other chunk; DeepSpeed, no interleaving, buckets them all."""
    import numpy as np

    from supercluster.perf.columns import layout_columns, read_rows
    from supercluster.perf.sync import bucketed_s, local_params

    model, gpu = load_model("llama3-70b"), get_gpu("h100-sxm")
    net = default_network(gpu, num_gpus=256)
    fw = get_framework("megatron")
    lay = Layout(tp=8, pp=4, dp=8, vpp=5, global_batch=256, seq_len=8192)
    rows = read_rows(model, layout_columns(lay, fw))
    dense, experts = local_params(model, fw, rows)
    bucket = 40e6
    stride, w = rows.groups["dp"][1][0], {"reduce_scatter": 4.0}
    size = float(dense[0]) * 4.0

    def t(b: float) -> float:
        return float(net.collective_time_s("reduce_scatter", b, 8, stride))

    got = float(bucketed_s(fw, net, rows, dense, experts, bucket, True, w)["reduce_scatter"][0])
    first = np.ceil(float(dense[0]) / 5 / bucket)
    # the first chunk in `first` buckets, each other chunk one call
    assert got == pytest.approx(first * t(size / 5 / first) + 4 * t(size / 5), rel=1e-9)
    flat = float(bucketed_s(replace(fw, dp_bucket_params=bucket), net, rows, dense, experts, bucket,
                            True, w)["reduce_scatter"][0])
    calls = np.ceil(float(dense[0]) / bucket)
    assert flat == pytest.approx(calls * t(size / calls), rel=1e-9) and flat > got
    # unbucketed (no overlap, Megatron-Core): one call of it all
    one = float(bucketed_s(fw, net, rows, dense, experts, bucket, False, w)["reduce_scatter"][0])
    assert one == pytest.approx(t(size), rel=1e-12)


def test_zero3_calls_are_priced_at_their_own_size(job):
    """ZeRO-3's per-layer gathers and reduce-scatters are NCCL calls of a layer's bytes each: splitting the
    same bytes into twice the calls costs the difference of n calls of S / n (each at its own size's
    protocol and latency), never less than the extra calls' zero-byte latencies. Without overlap and
    with one micro-batch per step, a gather in the forward and again in the backward, one reduce-scatter."""
    from supercluster.perf.sync import calls_s

    model, _, net = job
    fw = replace(get_framework("megatron"), dp_overlap=False)
    lay = Layout(tp=1, pp=1, dp=DP, micro_batch=1, global_batch=DP, seq_len=4096, zero_stage=3)
    gpu = get_gpu("a100-80gb")

    def exposed(per_layer: int) -> float:
        f = replace(fw, zero3_gathers_per_layer=per_layer)
        return estimate(model, gpu=gpu, num_gpus=DP, layout=lay, framework=f, network=net).ledger["exposed_dp_comm"]

    p, n = _local_params(model), float(model.num_layers)
    ag, rs = p * 2.0, p * fw.grad_reduce_bytes

    def cost(calls: float) -> float:
        gathers = 2.0 * calls_s(net, "all_gather", ag, calls, DP, 1)
        return float(gathers + calls_s(net, "reduce_scatter", rs, calls, DP, 1))

    assert exposed(2) - exposed(1) == pytest.approx(cost(2 * n) - cost(n), rel=1e-9)
    for kind, size in (("all_gather", ag), ("reduce_scatter", rs)):
        one, many = float(calls_s(net, kind, size, 1.0, DP, 1)), float(calls_s(net, kind, size, 4 * n, DP, 1))
        assert one == pytest.approx(float(net.collective_time_s(kind, size, DP, 1)), rel=1e-12)
        assert many - one >= (4 * n - 1) * float(net.collective_time_s(kind, 0.0, DP, 1))


def test_a_device_synchronising_gather_leaves_every_reduce_scatter_exposed(job):
    """DeepSpeed before v0.4 synchronises the device before each ZeRO-3 gather, which waits for its
    reduction stream too: with overlap_comm on, its reduce-scatters hide under no compute, so the step
    carries the whole per-micro-batch reduce-scatter time that an overlapping framework hides under its
    backward. The gathers are exposed alike in both (neither prefetches)."""
    model, gpu, net = job
    lay = Layout(tp=1, pp=1, dp=DP, micro_batch=1, global_batch=GBS, seq_len=4096, zero_stage=3)
    legacy = get_framework("deepspeed-legacy")
    assert legacy.zero3_gather_syncs_device and not legacy.zero3_prefetch and legacy.dp_overlap

    def dp(fw: Framework) -> float:
        return estimate(model, gpu=gpu, num_gpus=DP, layout=lay, framework=fw, network=net).ledger["exposed_dp_comm"]

    synced = dp(legacy)
    hidden = dp(replace(legacy, zero3_gather_syncs_device=False))
    exposed = dp(replace(legacy, zero3_gather_syncs_device=False, dp_overlap=False))
    assert synced == pytest.approx(exposed, rel=1e-12)
    assert synced > hidden


def test_a_profile_cannot_prefetch_behind_a_device_synchronise(monkeypatch):
    _catalog_refuses(monkeypatch, "deepspeed-legacy", "zero3_prefetch", True)
