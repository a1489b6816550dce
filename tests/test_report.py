"""The shareable report: every part is the object its own command prints, the figures sit beside it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("matplotlib")

from supercluster.cli import app  # noqa: E402
from supercluster.errors import InputError  # noqa: E402

runner = CliRunner()
JOB = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64", "--global-batch", "256", "--seq-len", "4096",
       "--trials", "50"]


def test_the_report_is_the_commands_own_answers_on_one_page(tmp_path):
    out = tmp_path / "rep"
    r = runner.invoke(app, ["report", *JOB, "--gpu-types", "b200,a100-40gb", "--out", str(out)])
    assert r.exit_code == 0, r.output
    d = json.loads((out / "report.json").read_text())
    # the plan's best layout, priced by estimate, is the report's step, to the last bit
    best = d["plan"]["best"]
    est = json.loads(runner.invoke(app, [
        "estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "64", "--tp", str(best["tp"]),
        "--pp", str(best["pp"]), "--cp", str(best["cp"]), "--vpp", str(best["vpp"]), "--micro-batch",
        str(best["micro_batch"]), "--global-batch", "256", "--seq-len", "4096", "--zero", str(best["zero_stage"]),
        "--recompute", best["recompute"], "--json", "--no-evidence", "--sensitivity"]).stdout)
    assert d["step"]["step_time_s"] == est["step_time_s"] == best["step_time_s"]
    assert d["step"]["placement"] == est["placement"]  # and where its traffic goes is estimate's answer
    # and its "which faster part" table is estimate --sensitivity of that layout
    assert [(r["resource"], r["factor"], r["step_time_s"]) for r in d["sensitivity"]] == \
        [(r["resource"], r["factor"], r["step_time_s"]) for r in est["sensitivity"]]
    # the run is that step through failures: its ledger sums to the peak, its step is the plan's
    run = d["run"]
    assert run["step_time_s"] == best["step_time_s"] and run["layout"] == best["layout"]
    assert sum(run["ledger_flops"].values()) == pytest.approx(run["peak_flops_total"], rel=1e-9)
    assert [c["gpu"] for c in d["compare"]] == ["b200", "a100-40gb"]
    md = (out / "report.md").read_text()
    for fig in ("plan.png", "step.png", "run.png", "goodput.png", "compare.png"):
        assert (out / fig).read_bytes()[:4] == b"\x89PNG" and f"]({fig})" in md
    assert best["layout"] in md and "How far to trust it" in md and "Which faster part buys the most" in md
    assert "| scale-out bandwidth (NIC) | " in md
    assert "## Where the traffic goes" in md and all(f"| {p['group']} | " in md for p in est["placement"])


def test_a_report_directory_that_is_a_file_is_refused_before_any_work(tmp_path):
    f = tmp_path / "taken"
    f.write_text("x")
    r = runner.invoke(app, ["report", *JOB, "--out", str(f)])
    assert isinstance(r.exception, InputError) and r.exception.field == "out"
    r = runner.invoke(app, ["report", *JOB, "--gpu-types", "h100-sxm,nope", "--out", str(tmp_path / "r")])
    assert isinstance(r.exception, InputError) and r.exception.field == "gpu"
    assert not (tmp_path / "r").exists()
