"""Figures: drawn from the objects the commands print as JSON, saved by suffix, bad paths refused early."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

pytest.importorskip("matplotlib")

from matplotlib.collections import PathCollection, PolyCollection  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from supercluster.cli import app  # noqa: E402
from supercluster.errors import InputError  # noqa: E402
from supercluster.reports import plots  # noqa: E402

runner = CliRunner()
ESTIMATE = ["estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "4", "--pp", "4", "--cp", "2", "--vpp", "5",
            "--global-batch", "128", "--json"]


def _json(args: list[str]) -> dict:
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _bars(ax) -> list[Rectangle]:
    return [p for p in ax.patches if isinstance(p, Rectangle) and p.get_width() > 0 and p.get_height() > 0]


def test_the_ledger_bar_adds_up_to_the_step_and_the_memory_bar_to_the_memory_per_gpu():
    d = _json(ESTIMATE)
    fig = plots.ledger(d, title="t")
    ax, am = fig.axes
    widths = [b.get_width() for b in _bars(ax)]
    assert len(widths) == sum(v > 0 for v in d["ledger"].values())
    assert sum(widths) == pytest.approx(d["step_time_s"], rel=1e-12)
    assert sum(b.get_height() for b in _bars(am)) * plots.GIB == pytest.approx(d["memory_per_gpu_bytes"], rel=1e-12)
    # the bars sit end to end in the ledger's order: each starts where the one before ended
    lefts = [b.get_x() for b in _bars(ax)]
    assert lefts == pytest.approx([sum(widths[:i]) for i in range(len(widths))])


def test_the_validation_scatter_has_one_point_per_supported_row_and_names_the_worst():
    d = _json(["validate", "--json"])
    fig = plots.validation(d["rows"], title="t", label_worst=3)
    ax = fig.axes[0]
    pts = sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection))
    assert pts == sum(bool(r["supported"]) for r in d["rows"])
    worst = max(d["rows"], key=lambda r: abs(r["error"]))
    labels = [t.get_text() for t in ax.texts]
    assert len(labels) == 3 and labels[0].startswith(worst["id"])
    # measured on x, predicted on y: the worst row's point is where its numbers put it
    offsets = [tuple(p) for c in ax.collections if isinstance(c, PathCollection) for p in c.get_offsets()]
    assert (worst["measured_step_time_s"], worst["predicted_step_time_s"]) in offsets


def test_the_timeline_draws_every_task_of_the_simulated_step_once():
    from supercluster.formats.load import load_model
    from supercluster.hardware.specs import get_gpu
    from supercluster.job import default_network
    from supercluster.parallelism.framework import get_framework
    from supercluster.parallelism.layout import Layout
    from supercluster.simulation.timeline import simulate

    g = get_gpu("h100-sxm")
    lay = Layout.from_string("tp4-pp4-dp2-cp2-vpp5", global_batch=64, seq_len=8192)
    tl = simulate(load_model("llama3-70b"), layout=lay, gpu=g, net=default_network(g, num_gpus=64),
                  fw=get_framework("nemo-megatron"))
    fig = plots.timeline(tl.to_trace(), title="t")
    ax = fig.axes[0]
    spans = sum(len(c.get_paths()) for c in ax.collections if isinstance(c, PolyCollection))
    assert spans == len(tl.tasks)
    assert ax.get_xlim()[1] == pytest.approx(tl.step_time_s * 1.01)


def test_the_plan_figure_marks_the_best_layout_at_its_memory_and_step_time():
    r = runner.invoke(app, ["plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256", "--json",
                            "--no-evidence"])
    d = json.loads(r.stdout)
    fig = plots.plan(d, title="t", hbm_bytes=80e9)
    star = list(fig.axes[0].collections[-1].get_offsets()[0])
    assert star == pytest.approx([d["best"]["memory_per_gpu_bytes"] / plots.GIB, d["best"]["step_time_s"]])


def test_scale_and_fabric_figures_draw_one_point_per_row():
    rows = _json(["scale", "--model", "llama3-8b", "--max-gpus", "64", "--trials", "20", "--json"])
    ax = plots.scale(rows, title="t").axes[0]
    assert len(ax.lines[0].get_xdata()) == sum(bool(r["fits"]) for r in rows)
    opts = _json(["fabric", "--gpus", "4096", "--gpu", "h100-sxm", "--compare", "--json"])
    cost, power = plots.fabric_options(opts, title="t").axes
    assert sorted(b.get_width() * 1e9 for b in _bars(cost)) == pytest.approx(sorted(r["network_capex_usd"]
                                                                                    for r in opts))
    assert sorted(b.get_width() * 1e6 for b in _bars(power)) == pytest.approx(sorted(r["network_power_w"]
                                                                                     for r in opts))


def test_plot_writes_the_format_its_suffix_names_and_keeps_json_on_stdout(tmp_path):
    png, svg = tmp_path / "ledger.png", tmp_path / "ledger.svg"
    d = _json([*ESTIMATE, "--plot", str(png)])
    assert d["step_time_s"] > 0  # stdout is still exactly one JSON object
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = runner.invoke(app, ["simulate", "--layout", "tp4-pp4-dp2-cp2-vpp5", "--plot", str(svg)])
    assert r.exit_code == 0, r.output
    assert b"<svg" in svg.read_bytes()[:500]


@pytest.mark.parametrize("args", [
    ["validate", "--plot", "out.jpg"],
    ["estimate", "--plot", "ledger"],
    ["fabric", "--gpus", "4096", "--plot", "f.png"],  # one fabric is a table; the figure compares options
    ["validate", "--ranks", "--plot", "v.png"],
])
def test_a_plot_that_cannot_be_drawn_is_one_error_line_before_any_pricing(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, args)
    assert r.exit_code != 0 and isinstance(r.exception, InputError) and r.exception.field == "plot"
    assert not any(tmp_path.iterdir())


def test_a_missing_matplotlib_is_named_with_how_to_install_it(monkeypatch):
    d = _json(ESTIMATE)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(InputError, match=r"pip install matplotlib"):
        plots.ledger(d, title="t")
    # ... and the command says so when it parses --plot, before it prices anything
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else object())
    r = runner.invoke(app, ["validate", "--plot", "v.png"])
    assert isinstance(r.exception, InputError) and "pip install matplotlib" in str(r.exception)
    assert "MAPE" not in r.output


def test_an_unwritable_path_is_an_error_naming_it(tmp_path):
    fig = plots.ledger(_json(ESTIMATE), title="t")
    with pytest.raises(InputError, match="cannot write"):
        plots.save(fig, str(tmp_path / "no-such-dir" / "x.png"))


def test_the_sweep_figure_draws_one_line_per_question_through_its_fitting_cells():
    cells = [{"model": "m", "gpu": g, "gpus": n, "seq_len": 8192, "global_batch": 64, "precision": "bf16",
              "best": None if (g, n) == ("b", 8) else {"tokens_per_s_per_gpu": 1000.0 * n + (g == "b")}}
             for g in ("a", "b") for n in (8, 64, 512)]
    ax = plots.sweep(cells, title="t").axes[0]
    assert [list(line.get_xdata()) for line in ax.lines] == [[8, 64, 512], [64, 512]]
    assert list(ax.lines[1].get_ydata()) == [64001.0, 512001.0]


def test_the_run_waterfall_steps_down_from_peak_to_the_useful_flops():
    s = _json(["train", "--model", "llama3-8b", "--gpus", "64", "--tokens", "1e11", "--trials", "50", "--json"])
    ax = plots.run_ledger(s, title="t").axes[0]
    bars = _bars(ax)
    peak, losses, useful = bars[0], bars[1:-1], bars[-1]
    assert peak.get_width() == pytest.approx(100.0)
    assert len(losses) == sum(v > 0 for k, v in s["ledger_flops"].items() if k != "ideal_compute")
    # each loss starts where the next one ends, and the last ends at the useful share
    for a, b in zip(losses, losses[1:], strict=False):
        assert b.get_x() + b.get_width() == pytest.approx(a.get_x())
    assert losses[-1].get_x() == pytest.approx(useful.get_width())
    assert useful.get_width() == pytest.approx(100.0 * s["useful_flops"] / s["peak_flops_total"])


def test_the_goodput_figure_draws_the_ettr_curve_whose_peak_is_the_interval_chosen():
    s = _json(["goodput", "--model", "llama3-70b", "--gpus", "4096", "--days", "10", "--trials", "200", "--json"])
    curve = s["ettr_by_interval"]
    assert len(curve) > 20 and all(0.0 < e <= 1.0 for _, e in curve)
    best_t = max(curve, key=lambda p: p[1])[0]
    # the closed form's optimum and the simulated choice (a 25-point grid over 0.2x-5x) agree within a step
    assert best_t / s["checkpoint_interval_s"] == pytest.approx(1.0, rel=0.35)
    ae, ac = plots.goodput(s, title="t").axes
    assert list(ae.lines[0].get_ydata()) == pytest.approx([100 * e for _, e in curve])
    assert len(_bars(ac)) == min(10, sum(v > 0 for v in s["expected_by_component"].values()))


def test_the_compare_figure_draws_each_gpu_types_days_dollars_and_energy():
    rows = _json(["compare", "--model", "llama3-8b", "--gpu-types", "h100-sxm,b200", "--gpus", "16",
                  "--global-batch", "64", "--json"])
    days, usd, mwh = plots.compare(rows, title="t").axes
    assert [b.get_width() for b in _bars(days)] == pytest.approx([r["days_to_train"] for r in rows])
    assert [b.get_width() * 1e6 for b in _bars(usd)] == pytest.approx([r["cost_usd"] for r in rows])
    assert [b.get_width() for b in _bars(mwh)] == pytest.approx([r["energy_mwh"] for r in rows])


@pytest.mark.parametrize("draw, what", [
    (lambda: plots.validation([{"id": "x", "supported": False, "predicted_step_time_s": None,
                                "measured_step_time_s": 1.0, "error": None}], title="t"), "runs"),
    (lambda: plots.scale([{"gpus": 8, "fits": False}], title="t"), "scale"),
    (lambda: plots.compare([{"gpu": "h100-sxm", "fits": False, "reason": "no layout fits"}], title="t"), "compare"),
    (lambda: plots.sweep([{"model": "m", "gpu": "g", "gpus": 8, "seq_len": 1, "global_batch": 1, "precision": "bf16",
                           "best": None}], title="t"), "sweep"),
    (lambda: plots.fabric_options([], title="t"), "fabric"),
])
def test_a_figure_with_nothing_to_draw_is_an_error_naming_why(draw, what):
    with pytest.raises(InputError) as exc:
        draw()
    assert exc.value.field == what


def test_matplotlib_comes_with_the_package():
    """``report`` and ``--plot`` work after ``pip install .``: matplotlib is a base dependency."""
    import tomllib
    from pathlib import Path

    meta = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert any(d.startswith("matplotlib") for d in meta["project"]["dependencies"])
