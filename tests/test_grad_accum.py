"""Gradient accumulation as separate pipeline schedules (torchtitan, NeMo AutoModel): each of the
``grad_accum`` schedules of a step pays its own fill and drain."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.formats import launchers
from supercluster.formats.load import load_model
from supercluster.hardware.specs import get_gpu
from supercluster.job import default_network, estimate
from supercluster.parallelism.framework import get_framework
from supercluster.parallelism.layout import Layout
from supercluster.simulation.timeline import simulate

GPU = get_gpu("h100-sxm")


def _lay(**kw):
    base = dict(tp=8, pp=4, dp=2, global_batch=64, seq_len=4096, recompute="full")
    return Layout(**{**base, **kw})


def test_each_schedule_pays_its_fill_and_drain():
    """Even chunks (Megatron's split, Llama 3 70B on 4 stages): the bubble is (pp - 1) / vpp stage
    times per schedule, so two schedules double it and leave the compute alone."""
    one = estimate("llama3-70b", gpu=GPU, num_gpus=64, layout=_lay(), framework="megatron")
    two = estimate("llama3-70b", gpu=GPU, num_gpus=64, layout=_lay(grad_accum=2), framework="megatron")
    assert two.ledger["pipeline_bubble"] == pytest.approx(2 * one.ledger["pipeline_bubble"], rel=1e-12)
    for name in ("ideal_compute", "recompute", "exposed_tp_comm"):
        assert two.ledger[name] == pytest.approx(one.ledger[name], rel=1e-12)
    # 32 micro-batches a rank: sends 2 (32 + 3) before, 2 (32 + 2 x 3) after
    assert two.ledger["exposed_pp_comm"] == pytest.approx(one.ledger["exposed_pp_comm"] * 38 / 35, rel=1e-9)
    # without a pipeline there is nothing to fill: accumulation changes nothing
    flat = dict(tp=8, pp=1, dp=8, global_batch=64, seq_len=4096)
    a = estimate("llama3-70b", gpu=GPU, num_gpus=64, layout=Layout(**flat), framework="megatron")
    b = estimate("llama3-70b", gpu=GPU, num_gpus=64, layout=Layout(**flat, grad_accum=4), framework="megatron")
    assert a.step_time_s == b.step_time_s


@pytest.mark.parametrize("model, fw, kw", [
    ("llama3-70b", "megatron", dict(vpp=2)),
    # torchtitan's uneven split walks the schedule: one walk, twice
    ("llama3.1-405b", "torchtitan", dict(pp=8, dp=1, vpp=3, global_batch=32)),
])
def test_the_timeline_lays_out_the_schedules_one_after_another(model, fw, kw):
    m = load_model(model)
    lay = _lay(**{**kw, "grad_accum": 2})
    net = default_network(GPU, num_gpus=lay.num_gpus)
    b = estimate(m, gpu=GPU, num_gpus=lay.num_gpus, layout=lay, framework=fw, network=net)
    t = simulate(m, layout=lay, gpu=GPU, net=net, fw=get_framework(fw))
    assert t.step_time_s == pytest.approx(b.step_time_s, rel=1e-9) and t.summary()["schedules"] == 2
    # the first stage's second schedule starts only after its first one's last backward
    first = sorted((x for x in t.tasks if x.stage == 0 and x.kind in "FB"), key=lambda x: x.start_s)
    ms = lay.schedule_microbatches
    last_b = max(x.end_s for x in first if x.micro_batch < ms)
    assert min(x.start_s for x in first if x.micro_batch >= ms) >= last_b - 1e-12


def test_fewer_micro_batches_in_flight():
    """1F1B holds min(m, pp) micro-batches on the first stage: 8 stages, 16 micro-batches a rank in 4
    schedules hold 4, in one schedule 8."""
    lay = dict(tp=8, pp=8, dp=1, global_batch=16, seq_len=4096)
    one = estimate("llama3.1-405b", gpu=GPU, num_gpus=64, layout=Layout(**lay), framework="megatron")
    four = estimate("llama3.1-405b", gpu=GPU, num_gpus=64, layout=Layout(**lay, grad_accum=4), framework="megatron")
    assert four.memory["mem_activations_bytes"] < 0.6 * one.memory["mem_activations_bytes"]


def test_bad_grad_accum_names_the_field():
    with pytest.raises(InputError) as e:
        Layout(dp=2, global_batch=12, grad_accum=4)  # 6 micro-batches a rank
    assert e.value.field == "grad_accum"
    with pytest.raises(InputError) as e:
        Layout(grad_accum=0)
    assert e.value.field == "grad_accum"
    r = subprocess.run([sys.executable, "-m", "supercluster", "estimate", "--model", "llama3-8b", "--gpus", "8",
                        "--tp", "1", "--pp", "1", "--global-batch", "16", "--grad-accum", "3", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error: grad_accum") and "Traceback" not in r.stderr


def test_layout_strings_carry_it():
    lay = Layout.from_string("tp8-pp4-dp2-ga4", global_batch=64)
    assert lay.grad_accum == 4 and lay.schedule_microbatches == 8 and lay.short() == "tp8-pp4-dp2-ga4"
    r = CliRunner().invoke(app, ["estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "4",
                                 "--vpp", "1", "--global-batch", "64", "--grad-accum", "2", "--json", "--no-evidence"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["layout"].endswith("-ga2")


def test_torchtitan_local_batch_is_one_schedule_both_ways(tmp_path):
    """Under PP a torchtitan step runs global / (dp x local_batch_size) schedule passes."""
    lay = _lay(grad_accum=4, zero_stage=3)
    text = launchers.export(lay, "torchtitan-toml", load_model("llama3-70b"))
    assert "local_batch_size = 8" in text and "global_batch_size = 64" in text
    path = tmp_path / "job.toml"
    path.write_text(text)
    back = launchers.load_layout(path, num_gpus=64, num_layers=80)
    assert back.grad_accum == 4 and back.schedule_microbatches == 8
    # torchtitan 0.3's launch line says the same (its GPUs from torchrun)
    text = launchers.export(lay, "torchtitan", load_model("llama3-70b"))
    assert "--training.local_batch_size 8" in text and "--training.global_batch_size 64" in text
    path = tmp_path / "launch.sh"
    path.write_text(text)
    back = launchers.load_layout(path)
    assert back.grad_accum == 4 and back.schedule_microbatches == 8 and back.num_gpus == 64
    # Megatron-LM and DeepSpeed run a step's micro-batches in one schedule
    for fmt in ("megatron", "deepspeed"):
        with pytest.raises(InputError) as e:
            launchers.export(dataclasses.replace(lay, vpp=1), fmt)
        assert e.value.field == "grad_accum"
    assert "--global-batch-size 64" in launchers.export(_lay(grad_accum=1), "megatron")


def test_a_torchtitan_global_batch_must_hold_whole_schedule_passes(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text("[parallelism]\ndata_parallel_shard_degree = 4\npipeline_parallel_degree = 2\n"
                    "[training]\nlocal_batch_size = 3\nglobal_batch_size = 16\nseq_len = 2048\n")
    with pytest.raises(InputError) as e:
        launchers.load_layout(path, num_gpus=8, num_layers=32)
    assert e.value.field == "global_batch_size" and "local_batch_size" in str(e.value)
