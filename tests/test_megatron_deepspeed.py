"""Megatron-DeepSpeed has its own profile: DeepSpeed's engine (ZeRO, pipeline, Ulysses CP) training
Megatron-LM's model code, whose core attention is unfused and whose dropout is 0.1 unless the run says
otherwise (megatron/arguments.py: --use-flash-attn-v1 / -v2 / -triton off by default). A run that used
FlashAttention says so with ``+flash-attn``; runs from before 2023 keep DeepSpeed's era profile. GPT-NeoX,
Megatron's model code on DeepSpeed with "global" (unfused) attention by default, reads as it too."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import supercluster as sc
from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.parallelism.framework import _inherited, get_framework
from supercluster.parallelism.layout import Layout
from supercluster.parallelism.published import resolve_framework

LAYOUT = Layout(tp=1, pp=1, dp=8, micro_batch=4, global_batch=64, seq_len=2048, precision="fp16",
                recompute="full", zero_stage=1)


def _step(framework: str) -> sc.StepBreakdown:
    return sc.estimate("llama2-7b", gpu="a100-80gb", num_gpus=8, layout=LAYOUT, framework=framework)


def test_megatron_deepspeed_is_deepspeeds_engine_with_megatrons_unfused_attention():
    fw, ds = get_framework("megatron-deepspeed"), get_framework("deepspeed")
    assert (fw.attention, fw.dropout, fw.family) == ("unfused", True, "deepspeed")
    # everything the engine does is DeepSpeed's (the profile is based on it)
    assert (fw.zero_max_with_pp, fw.dp_overlap_from_zero, fw.cp_rotate, fw.interleaved_pipeline) == \
        (ds.zero_max_with_pp, ds.dp_overlap_from_zero, ds.cp_rotate, ds.interleaved_pipeline)
    unfused, flash, engine = _step("megatron-deepspeed"), _step("megatron-deepspeed+flash-attn"), _step("deepspeed")
    # the score matrix through HBM (softmax, dropout) costs more than FlashAttention-2's fused kernel
    assert unfused.ledger["attention_inefficiency"] > flash.ledger["attention_inefficiency"]
    assert unfused.step_time_s > flash.step_time_s
    assert get_framework("megatron-deepspeed+flash-attn").attention == "sdpa"  # FlashAttention-2's kernels
    assert unfused.step_time_s > engine.step_time_s


@pytest.mark.parametrize("published, year, key", [
    ("Megatron-DeepSpeed", 2024, "megatron-deepspeed"),
    ("deepspeed-megatron", 2024, "megatron-deepspeed"),
    ("Megatron-DeepSpeed (--use-flash-attn-v2)", 2024, "megatron-deepspeed+flash-attn"),
    ("microsoft Megatron DeepSpeed with FlashAttention-2", 2024, "megatron-deepspeed+flash-attn"),
    # (a run before 2023 reads as DeepSpeed's era profile, as it did before the profile existed)
    ("Megatron-DeepSpeed", 2021, "deepspeed-legacy"),
    ("deepspeed-megatron", 2022, "deepspeed-legacy"),
    ("DeepSpeed", 2024, "deepspeed"),
    # GPT-NeoX: Megatron's model code on DeepSpeed, its attention "global" (unfused) unless configured "flash"
    ("GPT-NeoX", 2024, "megatron-deepspeed"),
    ("GPT-NeoX with flash attention", 2024, "megatron-deepspeed+flash-attn"),
    ("GPT-NeoX", 2022, "deepspeed-legacy"),
])
def test_a_published_megatron_deepspeed_run_reads_as_its_profile(published, year, key):
    assert resolve_framework(published, year)[0].key == key


def test_flash_attention_is_refused_where_the_attention_is_already_fused():
    with pytest.raises(InputError) as e:
        get_framework("megatron+flash-attn")
    assert e.value.field == "framework" and "already runs fused attention" in str(e.value)
    # a published name that mentions it on such a profile keeps the profile's own kernel
    assert resolve_framework("Megatron-LM with flash attention")[0].key == "megatron"


def test_a_megatron_deepspeed_plan_exported_as_a_deepspeed_config_reads_back_at_its_step(tmp_path):
    job = ["--model", "llama2-7b", "--gpu", "a100-80gb", "--gpus", "8", "--global-batch", "64", "--seq-len", "2048"]
    runner = CliRunner()
    out = runner.invoke(app, ["plan", *job, "--framework", "megatron-deepspeed", "--top", "1", "--json"],
                        catch_exceptions=False)
    best = json.loads(out.stdout)["best"]
    cfg = runner.invoke(app, ["plan", *job, "--framework", "megatron-deepspeed", "--export", "deepspeed"],
                        catch_exceptions=False).stdout
    assert json.loads(cfg)["supercluster"]["framework"] == "megatron-deepspeed"
    path = tmp_path / "ds.json"
    path.write_text(cfg, encoding="utf-8")
    back = json.loads(runner.invoke(app, ["estimate", *job[:6], "--config", str(path), "--no-evidence", "--json"],
                                    catch_exceptions=False).stdout)
    assert back["framework"] == "megatron-deepspeed"
    assert back["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-9)
    # a config naming a profile DeepSpeed does not run is refused by its field
    bad = tmp_path / "bad.json"
    bad.write_text(cfg.replace('"megatron-deepspeed"', '"torchtitan"'), encoding="utf-8")
    r = runner.invoke(app, ["estimate", *job[:6], "--config", str(bad), "--no-evidence"])
    assert r.exit_code != 0 and "supercluster.framework" in r.output + str(r.exception)


def test_a_profile_is_based_on_one_level_only():
    raw = {"a": {"attention": "flash", "doc": "a", "era_of": "x"}, "b": {"based_on": "a", "doc": "b"},
           "c": {"based_on": "b", "doc": "c"}}
    assert _inherited(raw, "b") == {"attention": "flash", "doc": "b"}  # (not a's doc or era)
    with pytest.raises(InputError) as e:
        _inherited(raw, "c")
    assert e.value.field == "framework c.based_on"
