"""MaxText launch lines read into a layout and written from one: the mesh axes, the -1 axes that take
the GPUs left, per-device batch, remat policy and quantization, and the same step either way."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import supercluster as sc
from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.formats import launchers, maxtext
from supercluster.parallelism.layout import Layout

#: NVIDIA dgxc-benchmarking's MaxText Llama 2 70B FP8 recipe (maxtext/configure.sh) on 256 nodes
RECIPE = """#!/bin/bash
nsys profile -s none python3 /opt/maxtext/MaxText/train.py /opt/maxtext/MaxText/configs/base.yml \\
  run_name=llama2 steps=50 use_iota_embed=true scan_layers=true per_device_batch_size=2 \\
  model_name=llama2-70b remat_policy=save_qkv_proj enable_checkpointing=false attention=cudnn_flash_te \\
  max_target_length=4096 quantization=fp8 hardware=gpu_multiprocess dcn_fsdp_parallelism=16 \\
  ici_fsdp_parallelism=8 ici_data_parallelism=1 dcn_data_parallelism=16 ici_tensor_parallelism=1 \\
  dcn_tensor_parallelism=1
"""


def test_a_recipe_reads_as_fsdp_over_16_nodes_replicated_across_the_rest():
    preset, lay = maxtext.from_launch(RECIPE, 2048)
    assert preset == "llama2-70b"
    assert (lay.tp, lay.pp, lay.cp, lay.dp, lay.dp_replicate, lay.zero_stage) == (1, 1, 1, 2048, 16, 3)
    assert (lay.micro_batch, lay.global_batch, lay.seq_len, lay.precision) == (2, 4096, 4096, "fp8")
    assert (lay.recompute, lay.recompute_modules) == ("selective", ("core_attn", "layernorm", "mlp"))


def test_the_minus_one_axes_take_the_gpus_of_a_node_and_the_nodes_left():
    line = "python3 -m MaxText.train MaxText/configs/base.yml model_name=llama2-7b per_device_batch_size=4"
    _, lay = maxtext.from_launch(line, 16)  # base.yml: ici_fsdp -1 (8 a node), dcn_data -1 (2 nodes)
    assert (lay.dp, lay.dp_replicate, lay.zero_stage, lay.recompute, lay.seq_len) == (16, 2, 3, "full", 2048)
    tp = line + " ici_tensor_parallelism=2 ici_fsdp_parallelism=-1 dcn_fsdp_parallelism=2 dcn_data_parallelism=1"
    _, lay = maxtext.from_launch(tp, 16)
    assert (lay.tp, lay.dp, lay.dp_replicate, lay.micro_batch) == (2, 8, 1, 8)  # (4 a GPU x TP 2 a data rank)


@pytest.mark.parametrize("line, field", [
    (RECIPE.replace("remat_policy=save_qkv_proj", "remat_policy=qkv_proj_offloaded"), "remat_policy"),
    (RECIPE.replace("ici_fsdp_parallelism=8", "ici_fsdp_parallelism=3"), "ici_parallelism"),
    (RECIPE.replace("per_device_batch_size=2", "per_device_batch_size=0.5"), "per_device_batch_size"),
    ("python3 train.py model_name=x", "config"),
])
def test_a_line_the_layout_cannot_hold_is_refused_by_name(line, field):
    with pytest.raises(InputError) as err:
        maxtext.from_launch(line, 2048)
    assert err.value.field == field


def test_the_gpu_count_must_be_given():
    with pytest.raises(InputError, match="^gpus: a MaxText launch line does not say"):
        maxtext.from_launch(RECIPE, None)


@pytest.mark.parametrize("label", ["tp1-pp1-dp2048-rep16-mb2-z3-selective(core_attn,layernorm,mlp)",
                                   "tp2-pp1-dp256-cp2-mb2-z3-full", "tp4-pp4-dp8-ga2-mb1-z0-none"])
def test_an_export_reads_back_as_the_same_step(label, tmp_path):
    gpus = 2048 if "rep16" in label else 1024 if "cp2" in label else 128
    lay = Layout.from_string(label, global_batch=4096 if gpus == 2048 else 1024, seq_len=4096)
    job = sc.Job.of("llama2-70b", gpu="h100-sxm", num_gpus=gpus, layout=lay, framework="maxtext")
    path = tmp_path / "launch.sh"
    path.write_text(launchers.export(job.layout, "maxtext", sc.load_model("llama2-70b")))
    model, fw, back = launchers.read_config(path, num_gpus=gpus)
    assert (model, fw) == ("llama2-70b", "maxtext")
    assert back.label() == job.layout.label() and back.global_batch == lay.global_batch
    again = sc.Job.of(model, gpu="h100-sxm", num_gpus=gpus, layout=back, framework=fw)
    assert sc.estimate(again).step_time_s == pytest.approx(sc.estimate(job).step_time_s, rel=1e-12)


def test_a_layout_maxtext_cannot_run_is_refused_on_export():
    lay = Layout(tp=1, dp=64, zero_stage=1, global_batch=64)
    with pytest.raises(InputError, match="^zero_stage: MaxText shards with FSDP"):
        launchers.export(lay, "maxtext", sc.load_model("llama2-70b"))
    lay = Layout(tp=1, dp=64, zero_stage=3, recompute="selective", global_batch=64)
    with pytest.raises(InputError, match="^recompute: selective has no MaxText remat_policy"):
        launchers.export(lay, "maxtext", sc.load_model("llama2-70b"))


def test_plan_exports_maxtext_and_estimate_reads_it_back(tmp_path):
    runner = CliRunner()
    args = ["--model", "llama2-70b", "--gpus", "2048", "--global-batch", "4096", "--seq-len", "4096"]
    r = runner.invoke(app, ["plan", *args, "--export", "maxtext"])
    assert r.exit_code == 0, r.output
    assert "remat_policy=" in r.output and "dcn_data_parallelism=" in r.output
    path = tmp_path / "launch.sh"
    path.write_text(r.output)
    best = runner.invoke(app, ["plan", *args, "--framework", "maxtext", "--json"])
    e = runner.invoke(app, ["estimate", "--config", str(path), "--gpus", "2048", "--json"])
    assert e.exit_code == 0, e.output
    planned = json.loads(best.output)["top"][0]
    assert json.loads(e.output)["step_time_s"] == pytest.approx(planned["step_time_s"], rel=1e-9)
