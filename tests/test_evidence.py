"""The evidence an estimate reports: the model's own errors on the closest published runs."""

import json

import pytest
from typer.testing import CliRunner

from supercluster.cli import app
from supercluster.formats.load import load_model
from supercluster.hardware.specs import get_gpu
from supercluster.parallelism.framework import get_framework
from supercluster.parallelism.published import resolve_framework
from supercluster.validation.evidence import MIN_RUNS, evidence_for
from supercluster.validation.validate import load_rows, validate

runner = CliRunner()


def _shipped_errors() -> dict[str, float]:
    out = {}
    for name in ("public", "heldout"):
        out |= {r.id: r.error for r in validate(name)["rows"] if r.error is not None}
    return out


def test_evidence_is_the_validation_error_of_runs_of_the_same_kind():
    ev = evidence_for(load_model("llama3-405b"), get_gpu("h100-sxm"), "nemo-megatron", "bf16")
    assert ev is not None and ev.basis == "nemo-megatron, hopper, dense, 16-bit" and ev.runs >= MIN_RUNS
    # the same numbers validate prints (one cost model), for runs that share every feature of the basis
    errors = _shipped_errors()
    assert ev.errors == pytest.approx([errors[i] for i in ev.ids])
    rows = {r["id"]: r for name in ("public", "heldout") for r in load_rows(name)}
    for i in ev.ids:
        fw, _ = resolve_framework(rows[i]["framework"])
        assert fw.family == "nemo-megatron" and get_gpu(rows[i]["gpu"]).arch == "hopper"
        assert not (rows[i].get("moe_experts") or "").strip() and "fp8" not in rows[i]["precision"].lower()
    assert ev.min_error <= ev.median_error <= ev.max_error
    assert ev.mape == pytest.approx(sum(abs(e) for e in ev.errors) / ev.runs)


def test_evidence_loosens_the_match_until_enough_runs_remain():
    # no published run on MI300X: the basis falls back to every dense run, and says so
    ev = evidence_for(load_model("gpt3-175b"), get_gpu("mi300x"), "megatron", "bf16")
    assert ev is not None and ev.basis == "any framework or GPU, dense; none shipped on cdna3"
    assert "none shipped on cdna3" in ev.line()
    # a GPU whose architecture has shipped runs falls back without that note
    loose = evidence_for(load_model("gpt3-175b"), get_gpu("h100-sxm"), "composer", "fp4")
    assert loose is not None and "none shipped" not in loose.basis
    moe = evidence_for(load_model("qwen3-30b-a3b"), get_gpu("b200"), "nemo-megatron", "fp8", 8, 4096)
    assert moe is not None and moe.basis.endswith("MoE, 8/4-bit")
    # the closest published runs are this very configuration's, on this very GPU (Megatron-Bridge 25.09, 25.11
    # and 26.02, 8 B200, 4K tokens), before the same runs on GB200 or GB300
    assert moe.nearest == ("MB2509-QWEN3-30B-B200-fp8cs-8", "MB2511-QWEN3-30B-B200-mxfp8-8",
                           "MB2602-QWEN3-30B-B200-mxfp8-8")
    assert set(moe.nearest) <= set(moe.ids) and f"closest: {moe.nearest[0]}" in moe.line()
    assert get_framework("torchtitan-2024+compile").family == "torchtitan"


def test_estimate_reports_its_evidence_unless_asked_not_to():
    d = json.loads(runner.invoke(app, ["estimate", "--json"]).output)
    assert d["evidence"]["runs"] >= MIN_RUNS
    assert set(d["evidence"]) >= {"basis", "median_error", "mape", "ids", "nearest"}
    assert all(n["id"] in d["evidence"]["ids"] for n in d["evidence"]["nearest"])
    assert "evidence" not in json.loads(runner.invoke(app, ["estimate", "--json", "--no-evidence"]).output)
    text = runner.invoke(app, ["estimate"]).output
    assert "published runs like this one (nemo-megatron, hopper, dense, 16-bit" in text


def test_plan_reports_the_evidence_of_its_best_layout():
    d = json.loads(runner.invoke(app, ["plan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "16",
                                       "--seq-len", "4096", "--json"]).output)
    assert d["evidence"]["basis"].startswith("nemo-megatron, hopper, dense")


def test_train_reports_the_evidence_of_its_step():
    d = json.loads(runner.invoke(app, ["train", "--model", "llama3-8b", "--gpus", "64", "--trials", "200",
                                       "--json"]).output)
    assert d["evidence"]["basis"].startswith("nemo-megatron, hopper, dense, 16-bit")


def test_the_evidence_line_says_when_the_job_lies_far_outside_its_runs():
    """A million GB200 against published runs of at most a few hundred: the errors are shown, and the
    line says they are extrapolated and how far; the quick start, among its runs, says nothing more."""
    import json as _json

    from typer.testing import CliRunner

    from supercluster.cli import app

    far = CliRunner().invoke(app, ["estimate", "--gpus", "1048576", "--gpu", "gb200", "--layout",
                                   "tp8-pp16-dp8192-vpp4", "--global-batch", "131072", "--json"])
    ev = _json.loads(far.stdout)["evidence"]
    assert ev["extrapolated"] and ev["extrapolated"][0].startswith("1,048,576 GPUs, the runs reach")
    near = _json.loads(CliRunner().invoke(app, ["estimate", "--json"]).stdout)["evidence"]
    assert near["extrapolated"] == []
