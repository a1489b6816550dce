"""The command line: JSON contracts, tables, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
import traceback

import pytest
from typer.testing import CliRunner

from supercluster.cli import app
from supercluster.errors import InputError

runner = CliRunner()


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """A command run in this process as the installed entry point runs it (``supercluster.cli.main``):
    an :class:`InputError` becomes one ``error:`` line and exit 2; any other exception its traceback
    on stderr and exit 1. (In-process: a new interpreter per call would cost more than most commands;
    :func:`test_the_installed_entry_point_prints_one_error_line` runs the real one.)"""
    r = runner.invoke(app, list(args))
    err, code = r.stderr, r.exit_code
    if isinstance(r.exception, InputError):
        err, code = err + f"error: {r.exception}\n", 2
    elif r.exception is not None and not isinstance(r.exception, SystemExit):
        err, code = err + "".join(traceback.format_exception(r.exception)), 1
    return subprocess.CompletedProcess(["supercluster", *args], code, r.stdout, err)


def test_the_installed_entry_point_prints_one_error_line():
    """The real entry point in a new interpreter: a user mistake is one line on stderr, exit 2."""
    r = subprocess.run([sys.executable, "-m", "supercluster", "estimate", "--gpu", "nope"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.startswith("error: gpu: unknown GPU 'nope'; known: ") and r.stderr.count("\n") == 1


def test_estimate_json_has_the_contract_keys():
    r = runner.invoke(app, ["estimate", "--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "64", "--tp", "4",
                            "--pp", "4", "--cp", "2", "--vpp", "5", "--global-batch", "128", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    for key in ("step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu",
                "memory_per_gpu_bytes", "fits", "ledger"):
        assert key in d
    assert sum(d["ledger"].values()) == pytest.approx(d["step_time_s"], rel=1e-9)
    assert d["tokens_per_s"] == pytest.approx(128 * 8192 / d["step_time_s"])


def test_a_gpu_key_in_any_case_is_that_key_in_every_view():
    args = ["estimate", "--model", "llama3-8b", "--gpus", "64", "--tp", "1", "--pp", "1", "--global-batch", "64",
            "--json"]
    upper = json.loads(runner.invoke(app, [*args, "--gpu", "H200"]).output)
    lower = json.loads(runner.invoke(app, [*args, "--gpu", "h200"]).output)
    assert upper == lower
    r = run("estimate", "--gpu", "H100 PCIe", "--gpus", "8", "--tp", "8", "--pp", "1")
    assert r.returncode == 2 and "unknown GPU 'H100 PCIe'" in r.stderr

def test_estimate_prices_deepseek_v3_with_its_mtp_module():
    args = ["estimate", "--gpu", "b200", "--gpus", "256", "--tp", "1", "--pp", "16", "--vpp", "1", "--ep", "8",
            "--global-batch", "1024", "--seq-len", "4096", "--precision", "fp8", "--json"]
    plain = json.loads(runner.invoke(app, [*args, "--model", "deepseek-v3"]).output)
    r = runner.invoke(app, [*args, "--model", "deepseek-v3+mtp"])
    assert r.exit_code == 0, r.output
    mtp = json.loads(r.output)
    assert mtp["step_time_s"] > plain["step_time_s"] and mtp["memory_per_gpu_bytes"] > plain["memory_per_gpu_bytes"]
    assert sum(mtp["ledger"].values()) == pytest.approx(mtp["step_time_s"], rel=1e-9)


def test_estimate_default_is_llama3_405b_on_16k_h100():
    r = runner.invoke(app, ["estimate"])
    assert r.exit_code == 0
    assert "Llama 3 405B" in r.output and "16,384" in r.output and "MFU" in r.output
    # the main job on built-in defaults is a layout the model says fits (Megatron-Core recipe defaults)
    d = json.loads(runner.invoke(app, ["estimate", "--json"]).output)
    assert d["fits"] is True and "nemo-megatron" in r.output


def test_estimate_takes_a_config_json(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 16,
                             "num_attention_heads": 16, "num_key_value_heads": 4, "intermediate_size": 8192,
                             "vocab_size": 32000}))
    r = runner.invoke(app, ["estimate", "--model", str(p), "--gpus", "8", "--tp", "1", "--pp", "1",
                            "--vpp", "1", "--global-batch", "8", "--seq-len", "4096", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["fits"] is True


def test_estimate_without_pipeline_does_not_interleave_by_default():
    # vpp defaults to 4 only under pipeline parallelism; --pp 1 alone must not trip "vpp needs pp > 1"
    r = runner.invoke(app, ["estimate", "--model", "llama3-8b", "--gpus", "8", "--tp", "1", "--pp", "1",
                            "--global-batch", "8", "--seq-len", "4096", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["layout"].startswith("tp1-pp1-dp8")
    r4 = runner.invoke(app, ["estimate", "--json"])
    assert "vpp4" in json.loads(r4.output)["layout"]


@pytest.mark.parametrize("kind", ["gpus", "systems", "models", "frameworks"])
def test_catalog(kind):
    r = runner.invoke(app, ["catalog", kind, "--json"])
    assert r.exit_code == 0
    assert len(json.loads(r.output)) >= 5


def test_catalog_frameworks_names_the_era_profiles():
    d = json.loads(runner.invoke(app, ["catalog", "frameworks", "--json"]).output)
    assert d["megatron-legacy"]["attention"] == "unfused" and d["megatron-legacy"]["era_of"] == "megatron"
    assert d["hai-llm"]["ep_overlap"] is True and d["torchtitan"]["elementwise"] == "eager"
    assert runner.invoke(app, ["catalog", "frameworks"]).exit_code == 0


def test_a_global_batch_no_layout_divides_says_which_would():
    """100,000 GPUs have a data-parallel degree of at least 25 (a factor 5**5 no power-of-two TP, PP or CP
    takes); the default batch of 2,048 fits none, and the error says so in a user's numbers."""
    r = run("goodput", "--gpus", "100000", "--days", "30")
    assert r.returncode == 2
    msg = r.stderr.strip()
    assert msg.startswith("error: global_batch: 2,048") and "on 100,000 GPUs" in msg and "is 25:" in msg, msg
    from supercluster.hardware.specs import get_gpu
    from supercluster.models.catalog import model_catalog
    from supercluster.planner.search import candidate_columns

    model = model_catalog()["llama3-405b"]
    cols = candidate_columns(model, get_gpu("h100-sxm"), 100_000, global_batch=25, seq_len=8192)
    assert int(cols["dp"].min()) == 25

def test_every_framework_option_is_named_in_the_help_of_every_command():
    """--framework's help is one text for every command, and it names each catalog profile and each
    suffix the parser takes (MoE routing included), so a user can find the option without the source."""
    import click
    import typer

    from supercluster.cli.app import FRAMEWORK_HELP
    from supercluster.parallelism.framework import framework_catalog
    from supercluster.parallelism.suffixes import CAPACITY_PREFIX, SUFFIXES

    for name in [*framework_catalog(), *SUFFIXES, CAPACITY_PREFIX]:
        assert name in FRAMEWORK_HELP, name
    cli = typer.main.get_command(app)
    helps = {p.help for cmd in cli.commands.values()
             for c in (cmd.commands.values() if isinstance(cmd, click.Group) else [cmd])
             for p in c.params if p.name == "framework"}
    assert helps == {FRAMEWORK_HELP}

@pytest.mark.parametrize("args, field", [
    (["estimate", "--gpu", "h900"], "gpu"),
    (["estimate", "--gpu", "tpu-v4"], "gpu"),  # known, but no published achieved-matmul rate to price it
    (["estimate", "--model", "gpt-9"], "model"),
    (["estimate", "--tp", "3", "--dp", "1", "--gpus", "48", "--pp", "16", "--model", "llama3-405b"], "tp"),
    (["estimate", "--gpus", "1000", "--tp", "8"], "dp"),  # (a layout option given: no planner fallback)
    (["estimate", "--gpus", "-8"], "gpus"),
    (["estimate", "--dp", "64"], "gpus"),
    (["estimate", "--global-batch", "100", "--pp", "16"], "global_batch"),
    (["estimate", "--micro-batch", "-1"], "micro_batch"),
    (["estimate", "--precision", "int3"], "precision"),
    (["estimate", "--gpu", "a100-80gb", "--precision", "fp8"], "precision"),
    (["validate", "--runs", "/nonexistent.csv"], "runs"),
    (["estimate", "--recompute-layers", "2"], "recompute_layers"),
    (["estimate", "--model", "qwen3-235b-a22b", "--gpus", "256", "--tp", "2", "--pp", "8", "--vpp", "4",
      "--ep", "32", "--global-batch", "2048", "--seq-len", "4096"], "ep"),
    (["estimate", "--expert-tp", "3"], "expert_tp"),
    (["estimate", "--framework", "megatron+overlap"], "framework"),
    (["estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "2", "--pp", "1", "--global-batch", "256",
      "--framework", "composer"], "tp"),
    (["estimate", "--recompute", "selective", "--recompute-modules", "mla_up_proj"], "recompute_modules"),
    (["estimate", "--recompute-modules", "mlp"], "recompute_modules"),
    (["simulate", "--layout", "tp4-pp4-dp4", "--jitter", "-1"], "jitter"),
    (["estimate", "--recompute", "selective", "--recompute-modules", "moe_act"], "recompute_modules"),
    (["simulate", "--layout", "tp3-pp4-dp4", "--gpus", "48"], "tp"),
    (["simulate", "--layout", "tp1-pp2-dp4", "--gpus", "8", "--model", "llama3-8b", "--global-batch", "16",
      "--framework", "composer"], "pp"),
    (["simulate", "--layout", "tp4-pp4-dp4", "--trace", "/nonexistent/dir/t.json"], "trace"),
    # the real culprit is named before the data-parallel degree is derived from the defaults
    (["estimate", "--gpus", "8", "--model", "nope"], "model"),
    (["estimate", "--gpus", "8", "--seq-len", "-5"], "seq_len"),
    (["estimate", "--gpus", "8", "--dp", "-1"], "dp"),
    (["estimate", "--gpus", "8", "--tp", "3"], "dp: gpus 8 is not divisible by tp x pp x cp = 3 x 16 x 1 (defaults"),
    (["estimate", "--pp-layout", "Et*63|Xt"], "pp_layout: cannot read 'X'"),
    (["estimate", "--pp-layout", "Et*63|t*63L"], "pp_layout: has 2 stages; pp x vpp = 16 x 1"),
    (["simulate", "--pp-layout", "Et*40|t*40L"], "pp_layout: needs --layout"),
    # (a layout's chunks per rank are derived only once pp is known to be positive)
    (["estimate", "--pp", "0", "--pp-layout", "Et*63|t*63L"], "pp: must be a positive integer, got 0"),
])
def test_bad_input_is_one_line_exit_2(args, field):
    r = run(*args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = [x for x in r.stderr.strip().splitlines() if x]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}"), r.stderr


def test_malformed_csv_and_config_are_clear_errors(tmp_path):
    bad = tmp_path / "runs.csv"
    bad.write_text("a,b\n1,2\n")
    r = run("validate", "--runs", str(bad))
    assert r.returncode == 2 and "missing columns" in r.stderr
    cfg = tmp_path / "config.json"
    cfg.write_text("[1, 2")
    r = run("estimate", "--model", str(cfg))
    assert r.returncode == 2 and "not valid JSON" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args,field", [
    (["fabric", "--gpus", "-5"], "gpus"), (["fabric", "--switch", "nope"], "switch"),
    (["fabric", "--gpus", "2000000", "--tiers", "2"], "largest reachable"),
    (["plan", "--objective", "fast"], "objective"), (["plan", "--headroom", "2"], "headroom"),
    (["goodput", "--days", "-1"], "days"), (["goodput", "--rates", "nope"], "rates"),
    (["train", "--tokens", "-5"], "tokens"), (["scale", "--max-gpus", "0"], "max_gpus"),
    (["sweep", "--db", "unused.duckdb", "--tp", "a"], "tp"), (["verify", "--profile", "/nonexistent"], "profile"),
    (["estimate", "--config", "/nonexistent"], "config"),
])
def test_new_commands_refuse_bad_input_in_one_line(args, field):
    r = run(*args)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and field in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [["train", "--tokens", "inf"], ["goodput", "--days", "nan"],
                                  ["plan", "--headroom", "nan"], ["simulate", "--jitter", "inf"]])
def test_a_number_option_must_be_finite(args):
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "is not a finite number" in r.output and f"'{args[1]}'" in r.output


def test_validate_ranks_on_a_small_runs_file(tmp_path):
    from supercluster.validation.validate import load_rows

    rows = [r for r in load_rows() if r["id"] in ("TT-A100-L3-8B-selop", "TT-A100-L2-13B-noAC")]
    import csv

    p = tmp_path / "runs.csv"
    with p.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    r = runner.invoke(app, ["validate", "--runs", str(p), "--ranks", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["summary"]["rows"] == 2
    assert all(1 <= x["rank"] <= x["feasible"] for x in d["rows"])
    # (one plan a row, seconds each on the large rows: the command's bar hears of every row)
    from supercluster.validation.validate import published_ranks

    seen: list[tuple[int, int]] = []
    assert published_ranks(p, progress=lambda done, total: seen.append((done, total)))["summary"]["rows"] == 2
    assert seen == [(0, 2), (1, 2)]


def test_scale_reports_sizes_too_small_to_hold_the_model():
    r = runner.invoke(app, ["scale", "--model", "gpt-oss-120b", "--gpu", "gb300", "--max-gpus", "16", "--trials",
                            "100", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [x["fits"] for x in rows] == [False, False, True]
    assert "no layout" in rows[0]["reason"] and rows[2]["step_time_s"] > 0


def test_scale_reports_sizes_a_data_parallel_only_framework_cannot_lay_out():
    # Composer has only data parallelism: past 1,024 GPUs the 1,024-sequence batch has no legal layout
    r = runner.invoke(app, ["scale", "--model", "llama3-8b", "--gpu", "h100-sxm", "--framework", "composer",
                            "--max-gpus", "4096", "--trials", "100", "--json"])
    assert r.exit_code == 0, r.output
    rows = {x["gpus"]: x for x in json.loads(r.output)}
    # (data parallelism alone: its FSDP shard groups replicated or not, HYBRID_SHARD)
    assert rows[1024]["fits"] and rows[1024]["layout"].startswith("tp1-pp1-dp1024")
    assert not rows[4096]["fits"] and rows[4096]["reason"].startswith("global_batch")
    r = runner.invoke(app, ["scale", "--model", "llama3-8b", "--gpu", "h100-sxm", "--framework", "composer",
                            "--max-gpus", "4096", "--trials", "100"])
    assert r.exit_code == 0 and "no legal layout" in r.output


def test_estimate_takes_megatron_recompute_modules():
    args = ["estimate", "--model", "qwen3-30b-a3b", "--gpu", "gb200", "--gpus", "8", "--tp", "1", "--pp", "1",
            "--vpp", "1", "--ep", "8", "--micro-batch", "4", "--global-batch", "512", "--seq-len", "4096",
            "--precision", "fp8", "--framework", "nemo-megatron", "--json"]
    plain = json.loads(runner.invoke(app, args).output)
    r = runner.invoke(app, [*args, "--recompute", "selective", "--recompute-modules", "layernorm,moe_act"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["memory_per_gpu_bytes"] < plain["memory_per_gpu_bytes"] and d["ledger"]["recompute"] > 0


def test_estimate_refuses_a_hybrid_config_json_in_one_line(tmp_path):
    p = tmp_path / "config.json"
    # MiniMax-01: lightning (linear) attention on seven layers in eight
    p.write_text(json.dumps({"model_type": "minimax", "hidden_size": 6144, "num_hidden_layers": 80,
                             "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 200064,
                             "attn_type_list": ([0] * 7 + [1]) * 10}))
    r = run("estimate", "--model", str(p), "--gpus", "8", "--tp", "1", "--pp", "1")
    assert r.returncode == 2
    assert "config.json attn_type_list" in r.stderr + r.stdout and "not modelled" in r.stderr + r.stdout
    assert "Traceback" not in r.stderr


def test_estimate_without_layout_options_plans_one_when_the_default_does_not_suit():
    """No layout option and a job the 405B default cannot lay out (8 GPUs; 32 layers): the estimate
    is the planner's winner, announced on stderr and marked in the JSON; the settings given are kept."""
    base = ["--model", "llama3-8b", "--gpus", "8", "--global-batch", "64", "--seq-len", "4096"]
    r = run("estimate", *base, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    p = json.loads(run("plan", *base, "--json").stdout)["best"]
    assert d["layout_from"] == "planner" and d["layout"] == p["layout"]
    assert d["step_time_s"] == pytest.approx(p["step_time_s"], rel=1e-9) and d["fits"]
    assert "planner's fastest layout that fits" in r.stderr and "pp 16" in r.stderr
    kept = run("estimate", *base, "--micro-batch", "2", "--zero", "3", "--recompute", "full", "--json")
    k = json.loads(kept.stdout)
    assert "-mb2-z3-full" in kept.stderr and k["layout_from"] == "planner"
    assert k["step_time_s"] > d["step_time_s"]  # full recompute given: kept, and it costs time
    # 16,384 GPUs divide the default, but 32 layers do not take pp 16 x vpp 4: planned as well
    assert json.loads(run("estimate", "--model", "llama3-8b", "--json").stdout)["layout_from"] == "planner"
    # the quick start's default suits its job: priced as it is
    assert "layout_from" not in json.loads(run("estimate", "--json").stdout)


@pytest.mark.parametrize("args, start", [
    # nothing fits: the planner's reason, then the default's
    (["--model", "llama3-405b", "--gpus", "8"], "error: gpus: no layout of Llama 3 405B fits on 8 x h100-sxm"),
    (["--model", "llama3-8b", "--gpus", "8", "--global-batch", "48", "--micro-batch", "3"],
     "error: micro_batch: no legal layout of Llama 3 8B on 8 GPUs keeps micro_batch 3"),
    # a bad setting is named as such, not planned around
    (["--model", "llama3-8b", "--gpus", "8", "--recompute", "sometimes"], "error: recompute: unknown 'sometimes'"),
])
def test_estimate_planner_fallback_errors_are_one_line(args, start):
    r = run("estimate", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = [x for x in r.stderr.strip().splitlines() if x]
    assert len(lines) == 1 and lines[0].startswith(start), r.stderr


def test_no_option_help_is_eaten_as_rich_markup():
    # rich drops "[word ...]" from help text as a markup tag: defaults in words go through show_default
    import re

    import click
    import typer

    cli = typer.main.get_command(app)
    for name, cmd in cli.commands.items():
        subs = cmd.commands.values() if isinstance(cmd, click.Group) else [cmd]
        for c in subs:
            for p in c.params:
                assert not re.search(r"(?<!\\)\[[a-z#/@]", getattr(p, "help", None) or ""), (name, p.name, p.help)
    r = runner.invoke(app, ["plan", "--help"], env={"COLUMNS": "200"})
    assert "keep this ZeRO stage 0-3" in r.output and "(searched)" in r.output


def test_the_memory_line_counts_its_parts_in_the_units_of_its_total():
    import re

    r = runner.invoke(app, ["estimate"], env={"COLUMNS": "400"})
    line = next(x for x in r.output.splitlines() if x.startswith("memory per GPU"))
    total = float(re.search(r"memory per GPU ([\d.]+) GiB", line).group(1))
    scale = {"GiB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 1024**2}
    parts = [float(v) * scale[u] for v, u in re.findall(r"(?:weights|grads|optimizer|activations|other) ([\d.]+) (\w+)",
                                                            line)]
    assert len(parts) == 5 and sum(parts) == pytest.approx(total, abs=0.3), line
