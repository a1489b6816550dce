"""One job, one answer: the Python API, every command and a plan's export read back price the same
job at the same step time (to 0.1 %)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from supercluster.cli import app
from supercluster.job import estimate
from supercluster.parallelism.framework import DEFAULT_FRAMEWORK
from supercluster.parallelism.layout import Layout

JOB = ["--model", "llama3-70b", "--gpus", "64", "--global-batch", "64", "--seq-len", "8192"]
LABEL = "tp8-pp1-dp8-full"


def _json(args: list[str]) -> dict:
    r = CliRunner().invoke(app, [*args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_the_api_and_the_cli_share_one_default_framework():
    lay = Layout.from_string(LABEL, global_batch=64, seq_len=8192)
    api = estimate("llama3-70b", gpu="h100-sxm", num_gpus=64, layout=lay)
    cli = _json(["estimate", *JOB, "--layout", LABEL])
    assert cli["framework"] == DEFAULT_FRAMEWORK == "nemo-megatron"
    assert api.step_time_s == pytest.approx(cli["step_time_s"], rel=1e-9)


@pytest.mark.parametrize("framework", [None, "megatron", "torchtitan"])
@pytest.mark.parametrize("label", [LABEL, "tp4-pp2-dp8"])
def test_a_layout_label_prices_the_same_in_estimate_train_goodput_and_simulate(framework, label):
    fw = ["--framework", framework] if framework else []
    est = _json(["estimate", *JOB, "--layout", label, *fw, "--no-evidence"])["step_time_s"]
    train = _json(["train", *JOB, "--layout", label, *fw, "--trials", "50"])["step_time_s"]
    good = _json(["goodput", *JOB, "--layout", label, *fw, "--trials", "50"])["step_time_s"]
    # the timeline lays the priced step out; with jitter off it ends when the step does
    sim = _json(["simulate", *JOB, "--layout", label, *fw])["step_time_s"]
    assert train == pytest.approx(est, rel=1e-3) and good == pytest.approx(est, rel=1e-3)
    assert sim == pytest.approx(est, rel=1e-3)


def test_each_plan_rows_label_reads_back_at_its_step():
    """plan --json gives each layout's whole label (micro-batch, ZeRO, recompute, replicas), which
    estimate --layout reads back to the same job and step; its short "layout" alone would not."""
    job = ["--model", "llama3-8b", "--gpus", "64", "--global-batch", "1024", "--seq-len", "8192"]
    top = _json(["plan", *job, "--top", "3"])["top"]
    for row in top:
        back = _json(["estimate", *job, "--layout", row["label"], "--no-evidence"])
        assert back["step_time_s"] == pytest.approx(row["step_time_s"], rel=1e-9), row["label"]
    assert any(row["label"] != row["layout"] for row in top)

@pytest.mark.parametrize("fmt, suffix", [("megatron", ".sh"), ("megatron-launch", ".sh"), ("torchtitan", ".sh"),
                                         ("torchtitan-toml", ".toml"), ("deepspeed", ".json")])
def test_a_plans_export_read_back_prices_the_plan(tmp_path, fmt, suffix):
    """plan --export writes the launcher's config; estimate --config reads it back (its framework
    from the config) at the plan's step time."""
    job = ["--model", "llama3-8b", "--gpus", "64", "--global-batch", "256"]
    best = _json(["plan", *job, "--top", "1", *(["--framework", "deepspeed"] if fmt == "deepspeed" else []),
                  ] if not fmt.startswith("torchtitan") else ["plan", *job, "--top", "1", "--framework", "torchtitan"]
                 )["best"]
    r = CliRunner().invoke(app, ["plan", *job, "--export", fmt], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    path = tmp_path / f"plan{suffix}"
    path.write_text(r.stdout, encoding="utf-8")
    back = _json(["estimate", "--model", "llama3-8b", "--gpus", "64", "--config", str(path), "--no-evidence"])
    assert back["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-3), (fmt, best["layout"], back["layout"])


def test_a_megatron_launch_script_starts_the_planned_gpus_and_reads_back_without_them(tmp_path):
    """The megatron-launch export is a torchrun script over whole nodes (the GPU's system: 8 a node, one
    node below that) whose read-back needs no --gpus and no --model: the same job, the same step."""
    job = ["--model", "llama3-70b", "--gpus", "64", "--global-batch", "128"]
    best = _json(["plan", *job, "--top", "1"])["best"]
    r = CliRunner().invoke(app, ["plan", *job, "--export", "megatron-launch"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("#!/bin/bash\n") and "NNODES=${NNODES:-8}\nGPUS_PER_NODE=8\n" in r.stdout
    assert "  pretrain_gpt.py \\\n" in r.stdout and r.stdout.rstrip().endswith("$DATA_ARGS $TRAIN_ARGS")
    path = tmp_path / "launch.sh"
    path.write_text(r.stdout, encoding="utf-8")
    back = _json(["estimate", "--config", str(path), "--no-evidence"])
    assert back["gpus"] == 64 and back["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-3)
    four = CliRunner().invoke(app, ["plan", "--model", "llama3-8b", "--gpus", "4", "--global-batch", "32",
                                    "--export", "megatron-launch"], catch_exceptions=False).stdout
    assert "NNODES=${NNODES:-1}\nGPUS_PER_NODE=4\n" in four


def test_an_export_is_planned_under_the_framework_that_runs_it():
    r = CliRunner().invoke(app, ["plan", "--model", "llama3-8b", "--gpus", "64", "--export", "torchtitan",
                                 "--framework", "deepspeed"])
    assert r.exit_code != 0 and "deepspeed does not run a torchtitan config" in str(r.exception)


def test_the_deadline_model_counts_the_flops_the_run_achieves():
    """A faster fp8 run does more work in the same days than a slower bf16 one (MFU is against each
    precision's own peak, so MFU x the bf16 peak undercounted fp8)."""
    job = ["train", "--model", "llama3-70b", "--gpus", "64", "--global-batch", "64", "--layout", "tp8-pp1-dp8",
           "--trials", "50", "--deadline-days", "10"]
    bf16 = _json([*job, "--precision", "bf16"])
    fp8 = _json([*job, "--precision", "fp8"])
    assert fp8["step_time_s"] < bf16["step_time_s"]
    assert fp8["compute_optimal_for_deadline"]["compute_flops"] > bf16["compute_optimal_for_deadline"]["compute_flops"]


def test_rank_of_ranks_the_layout_it_is_given():
    """A published layout with a setting the search does not vary (here: full recompute of 4 layers a
    chunk) is ranked at its own step time, not as the searched layout without it."""
    from supercluster.formats.load import load_model
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import get_framework
    from supercluster.planner.search import plan

    m, g, fw = load_model("llama3-8b"), get_gpu("h100-sxm"), get_framework("megatron")
    res = plan(m, g, 16, global_batch=128, seq_len=8192, framework=fw)
    plain = Layout(tp=2, pp=2, dp=4, global_batch=128, seq_len=8192, recompute="full")
    part = Layout(tp=2, pp=2, dp=4, global_batch=128, seq_len=8192, recompute="full", recompute_layers=4)
    t_plain = estimate(m, gpu=g, num_gpus=16, layout=plain, framework=fw).step_time_s
    t_part = estimate(m, gpu=g, num_gpus=16, layout=part, framework=fw).step_time_s
    assert t_part < t_plain
    assert res.rank_of(part) < res.rank_of(plain)
    times = res.columns["score"][res.columns["feasible"]]
    assert res.rank_of(part) == 1 + int((times < t_part * (1 - 1e-12)).sum())


def test_a_job_from_a_runs_row_or_a_launcher_config_prices_as_validate_and_estimate_do(tmp_path):
    from supercluster.job import Job
    from supercluster.validation.validate import load_rows, predict_row

    row = next(r for r in load_rows("public") if r["id"] == "DGXC-L31-405B-bf16-2304")
    job, _ = Job.from_row(row)
    assert estimate(job).step_time_s == predict_row(row).predicted_step_time_s
    r = CliRunner().invoke(app, ["plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256", "--export",
                                 "torchtitan-toml"], catch_exceptions=False)
    (tmp_path / "job.toml").write_text(r.stdout, encoding="utf-8")
    cfg = Job.from_config(str(tmp_path / "job.toml"), model="llama3-8b", gpu="h100-sxm", num_gpus=64)
    assert cfg.framework.key == "torchtitan"
    back = _json(["estimate", "--model", "llama3-8b", "--gpus", "64", "--config", str(tmp_path / "job.toml"),
                  "--no-evidence"])
    assert estimate(cfg).step_time_s == pytest.approx(back["step_time_s"], rel=1e-12)


def test_jobs_priced_together_price_as_they_do_one_by_one():
    """validate prices the rows of one model, GPU, GPU count and framework in one pass of the cost
    model (price_many); every number is the one the job gets alone."""
    from supercluster.formats.runs import load_rows
    from supercluster.job import Job, check_job, price, price_many

    jobs = []
    for name in ("public", "heldout"):
        for row in load_rows(name):
            try:
                jobs.append(check_job(Job.from_row(row)[0]))
            except ValueError:
                continue
    # the shipped rows hold several layouts of one job: some groups price more than one row
    assert len({(j.model, j.gpu.key, j.num_gpus, j.framework) for j in jobs}) < len(jobs)
    together = price_many(jobs)
    for job, b in zip(jobs, together, strict=True):
        alone = price(job)
        assert b.step_time_s == alone.step_time_s and b.ledger == alone.ledger and b.memory == alone.memory, job


def test_the_framework_a_runs_row_names_is_the_one_the_cli_takes():
    """Megatron-DeepSpeed under either word order (the MT-NLG rows write "deepspeed-megatron") is the
    Megatron-DeepSpeed profile on the command line as in a runs row, where the row's year then picks its
    era (DeepSpeed's, before 2023)."""
    from supercluster.parallelism.framework import get_framework
    from supercluster.parallelism.published import resolve_framework

    assert get_framework("deepspeed-megatron").key == get_framework("megatron-deepspeed").key == "megatron-deepspeed"
    fw, note = resolve_framework("deepspeed-megatron", 2022)
    assert (fw.key, note) == ("deepspeed-legacy", None)
    assert resolve_framework("deepspeed-megatron", 2024) == (get_framework("megatron-deepspeed"), None)
    a, b = (_json(["estimate", *JOB, "--layout", LABEL, "--framework", name])["step_time_s"]
            for name in ("deepspeed-megatron", "megatron-deepspeed"))
    assert a == b
