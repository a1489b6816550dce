"""Launcher configs both ways: a plan exported to Megatron-LM, torchtitan or DeepSpeed reads back as
the same layout and prices as it was planned; a malformed config names its field."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

import supercluster as sc
from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.formats import launchers
from supercluster.formats.load import load_model
from supercluster.job import estimate
from supercluster.parallelism import pplayout
from supercluster.parallelism.layout import Layout
from supercluster.parallelism.pplayout import chunk_layers
from supercluster.parallelism.pplayout import parse as parse_layout
from supercluster.planner.search import candidate_columns

runner = CliRunner()


@pytest.mark.parametrize("fmt", ["megatron", "torchtitan-toml", "deepspeed"])
@pytest.mark.parametrize("layout", [
    Layout(tp=8, pp=16, dp=128, vpp=4, global_batch=2048, seq_len=8192, recompute="selective", zero_stage=1,
           sequence_parallel=True),
    Layout(tp=2, pp=1, dp=32, cp=2, global_batch=256, micro_batch=2, seq_len=4096, precision="fp8",
           recompute="full", zero_stage=3, sequence_parallel=True),
    Layout(tp=1, pp=4, dp=8, ep=8, global_batch=64, seq_len=2048, zero_stage=2, sequence_parallel=False),
])
def test_launcher_round_trip(tmp_path, fmt, layout, llama3_70b):
    if fmt == "deepspeed" and layout.vpp > 1:  # DeepSpeed's PipelineEngine has no interleaved schedule
        with pytest.raises(InputError, match="^vpp: DeepSpeed's pipeline engine runs 1F1B"):
            launchers.export(layout, fmt)
        return
    text = launchers.export(layout, fmt, llama3_70b)
    path = tmp_path / {"megatron": "args.sh", "torchtitan-toml": "job.toml", "deepspeed": "ds.json"}[fmt]
    path.write_text(text)
    back = launchers.load_layout(path, num_gpus=layout.num_gpus, num_layers=llama3_70b.num_layers)
    expect = layout
    if fmt == "torchtitan-toml" and layout.zero_stage == 1:  # FSDP2 has no ZeRO-1
        expect = dataclasses.replace(expect, zero_stage=2)
    if fmt == "torchtitan-toml" and layout.vpp > 1:  # interleaved chunks travel as torchtitan's own split points
        per = chunk_layers(llama3_70b.num_layers, layout.pp, layout.vpp, split="middle")
        expect = dataclasses.replace(expect, pp_layout=pplayout.from_stage_layers(
            [per[s][c] for c in range(layout.vpp) for s in range(layout.pp)]))
    if fmt == "megatron" and layout.tp == 1:
        expect = dataclasses.replace(expect, sequence_parallel=False)
    assert back == expect


def test_launcher_import_errors(tmp_path):
    bad = tmp_path / "ds.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="JSON"):
        launchers.load_layout(bad, num_gpus=8)
    args = tmp_path / "args.sh"
    args.write_text("--tensor-model-parallel-size 8 --global-batch-size 64")
    with pytest.raises(InputError, match="divisible"):
        launchers.load_layout(args, num_gpus=12)


@pytest.mark.parametrize("name,text,field", [
    ("job.toml", "parallelism = 3\n", "parallelism"),  # a value where a table belongs
    ("job.toml", "[parallelism]\ntensor_parallel_degree = 1.5\n", "tensor_parallel_degree"),
    ("job.toml", "[parallelism]\ntensor_parallel_degree = true\n", "tensor_parallel_degree"),
    ("job.toml", "[parallelism]\ntensor_parallel_degree = 0\n", "tensor_parallel_degree"),
    ("job.toml", "[training]\nseq_len = inf\n", "seq_len"),
    ("ds.json", '{"train_batch_size": 64, "zero_optimization": 3}', "zero_optimization"),
    ("ds.json", '{"train_batch_size": 64, "pipeline": {"stages": 0}}', "config"),
    ("args.sh", "--global-batch-size 64 --tensor-model-parallel-size 2.5", "tensor-model-parallel-size"),
])
def test_a_malformed_launcher_config_names_its_field(tmp_path, name, text, field):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as exc:
        launchers.load_layout(path, num_gpus=8, num_layers=32)
    assert exc.value.field == field


def test_estimate_reads_a_launcher_config(tmp_path):
    p = tmp_path / "job.toml"
    p.write_text(launchers.to_torchtitan_toml(Layout(tp=8, dp=8, global_batch=64, seq_len=8192, zero_stage=3,
                                                     sequence_parallel=True)))
    r = runner.invoke(app, ["estimate", "--model", "llama3-70b", "--config", str(p), "--gpus", "64", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["layout"] == "tp8-pp1-dp8"


def _megatron_round_trip(tmp_path, layout, model):
    """Export ``layout`` as Megatron-LM arguments, read them back; (text, layout read)."""
    text = launchers.export(layout, "megatron", model)
    path = tmp_path / "args.sh"
    path.write_text(text)
    return text, launchers.load_layout(path, num_gpus=layout.num_gpus)


def test_megatron_block_recompute_round_trips(tmp_path, llama3_70b):
    lay = Layout(tp=4, pp=4, dp=4, vpp=5, global_batch=128, seq_len=8192, recompute="full", recompute_layers=2,
                 sequence_parallel=True)
    text, back = _megatron_round_trip(tmp_path, lay, llama3_70b)
    assert "--recompute-method block --recompute-num-layers 2" in text
    assert back == lay


def test_expert_tp_round_trips_and_the_planner_searches_it(tmp_path):
    from supercluster.formats.load import load_model

    qwen = load_model("qwen3-235b-a22b")
    lay = Layout(tp=2, pp=8, dp=16, ep=32, vpp=4, global_batch=2048, seq_len=4096, precision="fp8", expert_tp=1,
                 sequence_parallel=True)
    text, back = _megatron_round_trip(tmp_path, lay, qwen)
    assert "--expert-tensor-parallel-size 1" in text
    assert back == lay
    from supercluster.hardware.specs import get_gpu

    cols = candidate_columns(qwen, get_gpu("h100-sxm"), 256, global_batch=2048, seq_len=4096)
    folded = (cols["etp"] == 1) & (cols["tp"] > 1)
    assert folded.any() and ((cols["dp"] * cols["cp"]) % cols["ep"] != 0)[folded].any()


def test_megatron_recompute_modules_round_trip_and_stay_megatron(tmp_path):
    from supercluster.errors import InputError
    from supercluster.formats import launchers
    from supercluster.formats.load import load_model

    qwen = load_model("qwen3-30b-a3b")
    lay = Layout(dp=8, ep=8, global_batch=512, seq_len=4096, recompute="selective",
                 recompute_modules=("moe_act", "layernorm"), sequence_parallel=False)
    text, back = _megatron_round_trip(tmp_path, lay, qwen)
    assert "--recompute-granularity selective --recompute-modules layernorm moe_act" in text
    assert back == lay and back.recompute_modules == ("layernorm", "moe_act")
    with pytest.raises(InputError, match="recompute_modules"):
        launchers.export(lay, "torchtitan")


def test_megatron_export_names_the_mtp_modules(tmp_path):
    import dataclasses

    from supercluster.formats.load import load_model

    ds = load_model("deepseek-v3")
    lay = Layout(pp=16, dp=16, ep=8, global_batch=1024, seq_len=4096, sequence_parallel=False)
    text, back = _megatron_round_trip(tmp_path, lay, dataclasses.replace(ds, mtp_layers=1))
    assert "--mtp-num-layers 1" in text and back == lay
    assert "--mtp-num-layers" not in launchers.export(lay, "megatron", ds)


def test_an_explicit_pipeline_layout_round_trips_through_megatron_arguments(tmp_path):
    from supercluster.formats.load import load_model

    ds = load_model("deepseek-v3+mtp")
    lay = Layout(pp=8, vpp=2, dp=32, ep=8, global_batch=1024, seq_len=4096, sequence_parallel=False,
                 pp_layout="Et*4|(t*4|)*14,tmL")
    text, back = _megatron_round_trip(tmp_path, lay, ds)
    assert "--pipeline-model-parallel-layout 'Et*4|(t*4|)*14,tmL'" in text
    assert "--num-layers-per-virtual-pipeline-stage" not in text and back == lay


def test_megatron_uneven_first_and_last_stages_read_as_a_layout():
    """--decoder-first/last-pipeline-num-layers (Llama 3 405B's 126 layers on 16 stages, 7 on the first
    and the last, as the Llama 3 paper describes) read as the layout string that says the same."""
    from supercluster.errors import InputError

    args = ("--tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 --num-layers 126 "
            "--global-batch-size 2048 --seq-length 8192 --micro-batch-size 1 ")
    lay = launchers.from_megatron_args(args + "--decoder-first-pipeline-num-layers 7 "
                                       "--decoder-last-pipeline-num-layers 7", num_gpus=16384)
    assert lay.pp_layout is not None and lay.vpp == 1
    assert parse_layout(lay.pp_layout) == parse_layout("Et*7|(t*8|)*14,t*7L")
    one = launchers.from_megatron_args(args + "--decoder-first-pipeline-num-layers 6", num_gpus=16384)
    assert [s.count("t") for s in parse_layout(one.pp_layout)] == [6] + [8] * 15
    with pytest.raises(InputError, match="^decoder-first-pipeline-num-layers: the 121 layers left"):
        launchers.from_megatron_args(args + "--decoder-first-pipeline-num-layers 5", num_gpus=16384)


def test_torchtitan_split_points_carry_an_explicit_layout_both_ways(tmp_path):
    """torchtitan's pipeline_parallel_split_points name the first layer of every stage after the first;
    a layout exports to them and reads back (the model sizes the last stage); DeepSpeed's config has no
    such setting and torchtitan no MTP module, each a clear error."""
    lay = Layout(tp=8, pp=4, dp=2, global_batch=64, seq_len=8192, zero_stage=2, sequence_parallel=True,
                 pp_layout="Et*20|t*21|t*20|t*19L")
    text = launchers.export(lay, "torchtitan-toml")
    assert 'pipeline_parallel_split_points = ["layers.20", "layers.41", "layers.61"]' in text
    assert "--parallelism.pipeline_parallel_split_points layers.20,layers.41,layers.61" in \
        launchers.to_torchtitan_overrides(lay)
    path = tmp_path / "job.toml"
    path.write_text(text)
    assert launchers.load_layout(path, num_gpus=64, num_layers=80) == lay
    with pytest.raises(InputError, match="^pipeline_parallel_split_points: needs the model"):
        launchers.load_layout(path, num_gpus=64)
    with pytest.raises(InputError, match="^pp_layout: DeepSpeed's config has no explicit pipeline layout"):
        launchers.export(lay, "deepspeed")
    mtp = Layout(pp=16, dp=16, ep=8, global_batch=1024, seq_len=4096, pp_layout="Et*4|(t*4|)*14,tmL")
    with pytest.raises(InputError, match="^pp_layout: torchtitan has no multi-token-prediction"):
        launchers.export(mtp, "torchtitan-toml")
    r = CliRunner().invoke(app, ["estimate", "--config", str(path), "--model", "llama3-70b", "--gpus", "64",
                                 "--framework", "torchtitan", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["pp_layout"] == "Et*20|t*21|t*20|t*19L"


def test_a_dualpipe_plan_is_not_exported_to_a_launcher_that_runs_1f1b():
    import json

    from typer.testing import CliRunner

    from supercluster.cli import app

    # (kept at ZeRO-1, the plan pipelines: with FSDP a 70B model on 256 GPUs runs best as data parallel)
    args = ["plan", "--model", "llama3-70b", "--gpu", "h800", "--gpus", "256", "--global-batch", "512",
            "--seq-len", "4096", "--framework", "hai-llm", "--zero", "1"]
    assert json.loads(CliRunner().invoke(app, [*args, "--json"]).output)["best"]["pp"] > 1
    r = CliRunner().invoke(app, [*args, "--export", "megatron"])
    assert r.exit_code != 0 and "hai-llm does not run a megatron config" in str(r.exception)


#: layouts each exported in both of torchtitan's config formats (its TOML and its Python job config)
PP_70B = Layout(tp=8, pp=4, dp=4, vpp=4, global_batch=128, seq_len=8192, zero_stage=2)
ASYNC_TP_70B = Layout(tp=8, dp=32, global_batch=512, micro_batch=16, seq_len=8192, zero_stage=3, recompute="full")


@pytest.mark.parametrize("framework, fmt, name, layout", [
    *[("torchtitan", fmt, "llama3-70b", PP_70B) for fmt in ("torchtitan-toml", "torchtitan")],
    *[("torchtitan+compile+tp-overlap", fmt, "llama3-70b", ASYNC_TP_70B) for fmt in ("torchtitan-toml", "torchtitan")],
    ("torchtitan+compile", "torchtitan-toml", "llama3-70b",
     Layout(tp=4, pp=8, dp=4, vpp=2, micro_batch=2, global_batch=256, seq_len=8192, zero_stage=3, precision="fp8",
            recompute="full")),
    ("torchtitan+compile", "torchtitan-toml", "mixtral-8x7b",
     Layout(tp=2, dp=16, ep=4, expert_tp=1, global_batch=256, seq_len=8192, zero_stage=2)),
    ("torchtitan+compile", "torchtitan", "llama3-405b",
     Layout(tp=8, pp=8, dp=4, vpp=2, micro_batch=2, global_batch=256, seq_len=8192, zero_stage=3, precision="fp8",
            recompute="full")),
    ("torchtitan+compile", "torchtitan", "qwen3-30b-a3b",
     Layout(tp=2, dp=16, ep=4, expert_tp=1, global_batch=256, seq_len=4096, zero_stage=2)),
    ("deepspeed", "deepspeed", "llama3-70b",
     Layout(tp=2, dp=16, cp=2, global_batch=128, seq_len=8192, zero_stage=3, recompute="full")),
])
def test_an_exported_config_prices_as_it_was_planned(tmp_path, framework, fmt, name, layout):
    """A job config written for a layout reads back as that layout under the framework it describes
    (torchtitan, compiled where it says so; DeepSpeed), so estimate --config prices the same step. A
    torchtitan 0.3 launch line names its model (its config function) and its GPUs (torchrun's)."""
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import get_framework

    m, fw = load_model(name), get_framework(framework)
    planned = estimate(m, gpu=get_gpu("h100-sxm"), num_gpus=layout.num_gpus, layout=layout, framework=fw)
    path = tmp_path / {"torchtitan-toml": "job.toml", "torchtitan": "launch.sh", "deepspeed": "ds.json"}[fmt]
    path.write_text(launchers.export(layout, fmt, m, fw))
    given = [] if fmt == "torchtitan" else ["--model", name, "--gpus", str(layout.num_gpus)]
    r = runner.invoke(app, ["estimate", "--config", str(path), *given, "--gpu", "h100-sxm", "--json"])
    assert r.exit_code == 0, r.output
    back = json.loads(r.output)
    assert back["framework"] == framework
    assert back["step_time_s"] == pytest.approx(planned.step_time_s, rel=1e-12)


def test_a_megatron_launch_with_the_ep_overlap_gives_its_streams_32_connections():
    m = load_model("qwen3-30b-a3b")
    lay = sc.Layout(tp=2, pp=2, vpp=2, dp=8, ep=8, global_batch=64, seq_len=4096)
    with_overlap = launchers.export(lay, "megatron-launch", m, sc.get_framework("megatron+ep-overlap"))
    plain = launchers.export(lay, "megatron-launch", m, sc.get_framework("megatron"))
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=32" in with_overlap
    assert "--overlap-moe-expert-parallel-comm" in with_overlap
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in plain and "overlap-moe" not in plain
