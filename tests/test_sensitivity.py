"""estimate --sensitivity: the step re-priced with one hardware rate scaled, through the one cost model."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.formats.load import load_model
from supercluster.hardware.specs import get_gpu
from supercluster.job import default_network, estimate
from supercluster.parallelism.framework import get_framework
from supercluster.parallelism.layout import Layout
from supercluster.planner.sensitivity import RESOURCES, scaled_gpu, scaled_network, sensitivity

runner = CliRunner()
H100 = get_gpu("h100-sxm")
NEMO = get_framework("nemo-megatron")


def _sens(model: str, gpus: int, layout: Layout, gpu=H100, fw=NEMO, **kw):
    return sensitivity(load_model(model), gpu=gpu, num_gpus=gpus, layout=layout, framework=fw,
                       network=default_network(gpu, num_gpus=gpus), **kw)


@pytest.mark.parametrize("fw", ["nemo-megatron", "torchtitan", "deepspeed", "megatron-legacy"])
def test_one_gpu_waits_on_no_link_and_scales_exactly_with_all_its_rates(fw):
    # one GPU: no collective, so the links buy nothing; every other term is work over a rate, so a machine
    # with every rate doubled takes exactly half the step (no hidden fixed time)
    rows = _sens("llama3-8b", 1, Layout(global_batch=4, seq_len=4096, recompute="full"), fw=get_framework(fw))
    by = {(r.resource, r.factor): r for r in rows}
    for res in ("scaleup_bandwidth", "scaleout_bandwidth"):
        assert by[(res, 2.0)].step_time_s == by[(res, 2.0)].base_step_time_s
    assert by[("all", 2.0)].speedup == pytest.approx(2.0, rel=1e-9)
    assert by[("all", 1.1)].elasticity == pytest.approx(-1.0, rel=1e-9)


def test_the_answer_names_the_part_the_step_waits_on():
    # Llama 3 405B's default layout is compute-bound (its TP stays in the node, its DP overlapped)...
    dense = _sens("llama3-405b", 16384, Layout(tp=8, pp=16, dp=128, vpp=4, global_batch=2048, seq_len=8192))
    # ...DeepSeek-V3 with EP 64 over 1,024 H100 sends its all-to-all through the NICs
    moe = _sens("deepseek-v3", 1024, Layout(tp=2, pp=16, dp=32, ep=64, expert_tp=1, global_batch=8192,
                                            seq_len=4096))
    for rows, top in ((dense, "tensor_flops"), (moe, "scaleout_bandwidth")):
        single = [r for r in rows if r.resource != "all" and r.factor == 2.0]
        assert max(single, key=lambda r: r.speedup).resource == top
    # a faster NIC buys the MoE step far more than the dense one
    nic = {id(rows): next(r for r in rows if r.resource == "scaleout_bandwidth" and r.factor == 2.0).speedup
           for rows in (dense, moe)}
    assert nic[id(moe)] > 1.2 > 1.05 > nic[id(dense)]


def test_a_row_is_the_estimate_of_the_scaled_machine():
    # the sensitivity is no second model: a row equals estimate() of the GPU and network it describes
    layout = Layout(tp=4, pp=4, dp=4, cp=2, vpp=5, global_batch=128, seq_len=8192)
    net = default_network(H100, num_gpus=128)
    m = load_model("llama3-70b")
    for r in sensitivity(m, gpu=H100, num_gpus=128, layout=layout, framework=NEMO, network=net):
        g = scaled_gpu(H100, r.resource, r.factor)
        t = estimate(m, gpu=g, num_gpus=128, layout=layout, framework=NEMO,
                     network=scaled_network(net, g, r.resource, r.factor)).step_time_s
        assert t == r.step_time_s


def test_scaling_touches_only_its_own_rate():
    g = scaled_gpu(H100, "hbm_bandwidth", 2.0)
    assert g.hbm_bytes_per_s == 2 * H100.hbm_bytes_per_s and g.peak_flops_per_s == H100.peak_flops_per_s
    g = scaled_gpu(H100, "tensor_flops", 2.0)
    assert g.peak_flops_per_s["fp8"] == 2 * H100.peak_flops_per_s["fp8"] and g.hbm_bytes_per_s == H100.hbm_bytes_per_s
    net = default_network(H100, num_gpus=64)
    up = scaled_network(net, scaled_gpu(H100, "scaleup_bandwidth", 2.0), "scaleup_bandwidth", 2.0)
    assert up.scaleup_busbw_bytes_per_s == 2 * net.scaleup_busbw_bytes_per_s
    assert up.scaleout_bytes_per_s == net.scaleout_bytes_per_s
    assert up.fabric is net.fabric  # the topology stays
    with pytest.raises(InputError, match="factor"):
        _sens("llama3-8b", 8, Layout(dp=8, global_batch=8, seq_len=2048), factors=(0.5,))


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([("llama3-70b", 64, dict(tp=4, pp=2, dp=8, vpp=5)),
                        ("llama3-8b", 256, dict(tp=1, pp=1, dp=256, zero_stage=3)),
                        ("mixtral-8x7b", 64, dict(tp=2, pp=4, dp=8, ep=8, vpp=2)),
                        ("llama3-405b", 1024, dict(tp=8, pp=8, dp=8, cp=2, vpp=2))]),
       st.sampled_from(["h100-sxm", "gb200", "mi300x", "a100-80gb"]), st.floats(1.01, 8.0))
def test_no_faster_part_slows_the_step_and_all_together_beat_each_alone(case, gpu, factor):
    model, gpus, lay = case
    rows = _sens(model, gpus, Layout(global_batch=gpus * 2, seq_len=4096, **lay), gpu=get_gpu(gpu),
                 factors=(factor,))
    assert {r.resource for r in rows} == set(RESOURCES)
    assert all(-1.0 - 1e-9 <= r.elasticity <= 1e-12 for r in rows)
    together = next(r for r in rows if r.resource == "all").step_time_s
    assert all(together <= r.step_time_s * (1 + 1e-12) for r in rows)


def test_cli_prints_the_table_and_json():
    args = ["estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "4", "--pp", "4", "--cp", "2", "--vpp", "5",
            "--global-batch", "128", "--sensitivity", "--no-evidence"]
    r = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "Which faster part buys the most" in r.output and "scale-out bandwidth (NIC)" in r.output
    r = runner.invoke(app, [*args, "--json"])
    d = json.loads(r.stdout)
    assert len(d["sensitivity"]) == 2 * len(RESOURCES)
    assert {"resource", "factor", "step_time_s", "speedup", "elasticity"} <= set(d["sensitivity"][0])
    assert "sensitivity" not in json.loads(runner.invoke(app, args[:-2] + ["--json"]).stdout)


def test_cli_refuses_sensitivity_on_a_measured_profile(tmp_path):
    prof = tmp_path / "p.toml"
    prof.write_text("x = 1\n")
    r = runner.invoke(app, ["estimate", "--profile", str(prof), "--sensitivity", "--gpus", "8", "--tp", "8", "--pp",
                            "1", "--global-batch", "8", "--model", "llama3-8b"])
    # (the command line turns an InputError into one "error: field: ..." line and exit 2)
    assert isinstance(r.exception, InputError) and r.exception.field == "sensitivity"
    assert "--profile" in str(r.exception)
