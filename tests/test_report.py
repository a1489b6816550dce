"""The shareable report: every part is the object its own command prints, the figures sit beside it."""

from __future__ import annotations

import json
import re

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
    # (the job's own GPU leads the comparison)
    assert [c["gpu"] for c in d["compare"]] == ["h100-sxm", "b200", "a100-40gb"]
    assert d["compare"][0]["best"]["step_time_s"] == best["step_time_s"]
    md = (out / "report.md").read_text()
    assert "|  | the job's answer |" in md  # (the summary table has a header, not an empty row)
    page = (out / "report.html").read_text()
    assert page.count("<svg") == 5 and "<table>" in page and best["layout"] in page
    assert not re.search(r'(src|href)="(https?:)?//|@import|<script|<link', page)  # (nothing fetched)
    for fig in ("plan.png", "step.png", "run.png", "goodput.png", "compare.png"):
        assert (out / fig).read_bytes()[:4] == b"\x89PNG" and f"]({fig})" in md
    assert best["layout"] in md and "How far to trust it" in md and "Which faster part buys the most" in md
    assert "| scale-out bandwidth (NIC) | " in md
    assert "## Where the traffic goes" in md and all(f"| {p['group']} | " in md for p in est["placement"])
    # a 64-GPU job's power and network cost read in kW and $k / $M, not as 0.1 MW and $0.0 M
    cost = next(x for x in md.splitlines() if x.startswith("| cost |"))
    net = next(x for x in md.splitlines() if x.startswith("| network |"))
    assert " kW |" in cost and re.search(r"\$[\d.,]+ [kM] \|$", net), (cost, net)
    assert "| GPU | layout | step s | time | cost | energy |" in md


def test_a_report_directory_that_is_a_file_is_refused_before_any_work(tmp_path):
    f = tmp_path / "taken"
    f.write_text("x")
    r = runner.invoke(app, ["report", *JOB, "--out", str(f)])
    assert isinstance(r.exception, InputError) and r.exception.field == "out"
    r = runner.invoke(app, ["report", *JOB, "--gpu-types", "h100-sxm,nope", "--out", str(tmp_path / "r")])
    assert isinstance(r.exception, InputError) and r.exception.field == "gpu"
    assert not (tmp_path / "r").exists()


def _chromium() -> str | None:
    import os
    import shutil

    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.environ.get("SUPERCLUSTER_REQUIRE_BROWSER"):
        pytest.fail("SUPERCLUSTER_REQUIRE_BROWSER is set (.ci/run installs Debian's chromium) but no chromium found")
    return found


#: headless Chromium as root on a closed network (no sandbox, no background connections)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def test_the_html_report_loads_in_a_browser_with_every_figure_drawn(tmp_path):
    """report.html opened in headless Chromium (Debian's chromium; .ci/run installs it): the page loads
    with no console message, and every figure is an inline SVG with drawn content."""
    import re
    import subprocess

    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium on this machine (.ci/run installs Debian's chromium)")
    out = tmp_path / "rep"
    r = runner.invoke(app, ["report", *JOB, "--gpu-types", "b200", "--out", str(out)])
    assert r.exit_code == 0, r.output
    res = subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                          "--enable-logging=stderr", "--v=0", "--dump-dom", (out / "report.html").as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "CONSOLE" not in res.stderr, [x for x in res.stderr.splitlines() if "CONSOLE" in x]
    dom = res.stdout
    figures = re.findall(r'<figure id="(\w+)">(.*?)</figure>', dom, re.S)
    assert [f for f, _ in figures] == ["plan", "step", "run", "goodput", "compare"]
    for name, svg in figures:
        assert svg.lstrip().startswith("<svg") and svg.count("<path") > 10, name
    assert "Which faster part buys the most" in dom and dom.count("<table>") >= 4


def test_the_committed_screenshot_is_a_laptop_width_page_of_the_report():
    """docs/report.png, written by docs/report_screenshot.py (headless Chromium on report.html)."""
    import struct
    from pathlib import Path

    png = (Path(__file__).parent.parent / "docs" / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1280, 2400)
