"""Figures of what the commands compute: ``--plot FILE`` on estimate, plan, compare, validate,
goodput, train, scale, sweep, simulate and fabric --compare.

Each figure is drawn from the very object the command prints with ``--json`` (or, for the
timeline, its Perfetto trace), so a plot can never say something the numbers do not. Matplotlib
draws them off-screen; the file's suffix picks the format (.png, .svg or .pdf). Matplotlib is a
dependency of the package (``report`` draws its figures after a plain install).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError, require
from ..units import GiB as GIB

#: File suffixes ``save`` writes, by matplotlib's backend for each.
FORMATS = (".png", ".svg", ".pdf")

#: The ledger's parts in the order the estimate subtracts them from the step, and their colours:
#: useful work first (ideal compute, green), then what the GPU wastes computing, then waiting.
LEDGER_COLOURS = {
    "ideal_compute": "#2e7d32", "gemm_inefficiency": "#81c784", "attention_inefficiency": "#aed581",
    "memory_bound_ops": "#dce775", "kernel_launch": "#ffe082", "comm_contention": "#ffcc80",
    "recompute": "#fff176", "exposed_tp_comm": "#4fc3f7",
    "exposed_cp_comm": "#29b6f6", "exposed_ep_comm": "#0288d1", "exposed_pp_comm": "#7986cb",
    "stage_imbalance": "#f48fb1", "pipeline_bubble": "#e57373", "exposed_dp_comm": "#ba68c8", "optimizer": "#a1887f",
    "stragglers": "#9e9e9e",
}
MEMORY_COLOURS = {"mem_weights_bytes": "#1565c0", "mem_grads_bytes": "#42a5f5", "mem_optimizer_bytes": "#90caf9",
                  "mem_activations_bytes": "#ffb74d", "mem_other_bytes": "#bdbdbd"}
#: Timeline streams (simulate's trace threads) and the colour of each kind of task on them.
TASK_COLOURS = {"F": "#43a047", "B": "#1e88e5", "send": "#fb8c00", "dp_sync": "#8e24aa", "optimizer": "#a1887f",
                "stragglers": "#9e9e9e"}
TASK_LABELS = {"F": "forward", "B": "backward", "send": "p2p send", "dp_sync": "exposed data-parallel sync",
               "optimizer": "optimizer", "stragglers": "stragglers"}
_NO_MATPLOTLIB = "needs matplotlib (a dependency of supercluster-planner): pip install matplotlib"


def check_path(path: str) -> Path:
    """The figure's path, refused up front (before any pricing) when its suffix is not a format or
    matplotlib is not installed."""
    p = Path(path)
    require(p.suffix.lower() in FORMATS, "plot",
            f"{path!r}: the suffix picks the format; allowed: {', '.join(FORMATS)}")
    require_matplotlib()
    return p


def require_matplotlib() -> None:
    """Refuse, before any work, a figure matplotlib is not installed to draw."""
    import importlib.util

    require(importlib.util.find_spec("matplotlib") is not None, "plot", _NO_MATPLOTLIB)


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise InputError("plot", _NO_MATPLOTLIB) from None
    matplotlib.use("Agg")  # off-screen: no display needed, never a window
    import matplotlib.pyplot as plt

    return plt


def svg(fig: Any) -> str:
    """``fig`` as SVG text (for a page that carries its figures inline), then released."""
    import io

    plt = _pyplot()
    buf = io.StringIO()
    try:
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    finally:
        plt.close(fig)
    return buf.getvalue()


def save(fig: Any, path: str) -> Path:
    """Write ``fig`` to ``path`` (its suffix the format) and release it."""
    p = check_path(path)
    plt = _pyplot()
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")  # (whole or not at all: renamed into place)
    try:
        fig.savefig(tmp, dpi=150, bbox_inches="tight", format=p.suffix.lstrip(".").lower())
        os.replace(tmp, p)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError("plot", f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return p


def validation(rows: Sequence[dict[str, Any]], *, title: str, group: str = "kind",
               bound: float = 0.25, label_worst: int = 5) -> Any:
    """Predicted against measured step time, log-log, one point per supported row coloured by
    ``group`` (kind, gpu or framework): the diagonal, a +-10 % band and the +-``bound`` band
    (the issue's 25 %); the ``label_worst`` rows furthest off are named."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    pts = [r for r in rows if r.get("supported") and r.get("predicted_step_time_s") and r.get("measured_step_time_s")]
    require(bool(pts), "runs", "no supported row to plot")
    lo = min(min(r["predicted_step_time_s"], r["measured_step_time_s"]) for r in pts) / 1.5
    hi = max(max(r["predicted_step_time_s"], r["measured_step_time_s"]) for r in pts) * 1.5
    xs = [lo, hi]
    ax.plot(xs, xs, color="black", lw=0.8)
    ax.fill_between(xs, [x * (1 - bound) for x in xs], [x * (1 + bound) for x in xs], color="#eeeeee", zorder=0,
                    label=f"±{100 * bound:.0f} %")
    ax.fill_between(xs, [x * 0.9 for x in xs], [x * 1.1 for x in xs], color="#d6d6d6", zorder=0, label="±10 %")
    names = sorted({str(r.get(group) or "?") for r in pts})
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    for i, name in enumerate(names):
        sel = [r for r in pts if str(r.get(group) or "?") == name]
        ax.scatter([r["measured_step_time_s"] for r in sel], [r["predicted_step_time_s"] for r in sel], s=22,
                   color=cmap(i % cmap.N), edgecolors="white", linewidths=0.4, label=f"{name} ({len(sel)})",
                   zorder=3)
    placed: list[tuple[float, float]] = []
    for r in sorted(pts, key=lambda r: -abs(r["error"]))[:label_worst]:
        xy = (r["measured_step_time_s"], r["predicted_step_time_s"])
        # a label beside an already named point goes one line lower instead of over it
        near = sum(abs(math.log10(xy[0] / x)) < 0.05 and abs(math.log10(xy[1] / y)) < 0.05 for x, y in placed)
        placed.append(xy)
        ax.annotate(f"{r['id']} {100 * r['error']:+.0f} %", xy, fontsize=6.5, xytext=(4, -3 - 8 * near),
                    textcoords="offset points")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured step time (s)",
           ylabel="predicted step time (s)", title=title)
    ax.legend(fontsize=7.5, loc="upper left", title=group, title_fontsize=8)
    ax.grid(True, which="major", lw=0.3)
    return fig


def ledger(breakdown: dict[str, Any], *, title: str) -> Any:
    """The step as the ledger splits it (one stacked bar, parts in the estimate's order, summing to
    the step time) beside the memory per GPU (stacked, against the GPU's HBM)."""
    plt = _pyplot()
    fig, (ax, am) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [3, 1]})
    left = 0.0
    step = float(breakdown["step_time_s"])
    for name, seconds in breakdown["ledger"].items():
        if seconds <= 0:
            continue
        ax.barh(0, seconds, left=left, color=LEDGER_COLOURS.get(name, "#607d8b"), edgecolor="white", lw=0.5,
                label=f"{name.replace('_', ' ')} {seconds:.3g} s ({100 * seconds / step:.1f} %)")
        left += seconds
    ax.set(yticks=[], xlabel="seconds", xlim=(0, step * 1.02),
           title=f"step {step:.3g} s, MFU {100 * breakdown['mfu']:.1f} %")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=3, frameon=False)
    bottom = 0.0
    for key, colour in MEMORY_COLOURS.items():
        v = float(breakdown["memory"].get(key, 0.0)) / GIB
        if v > 0:
            am.bar(0, v, bottom=bottom, color=colour, edgecolor="white", lw=0.5,
                   label=f"{key[4:-6]} {v:,.1f} GiB")
            bottom += v
    hbm = float(breakdown["hbm_bytes"]) / GIB
    am.axhline(hbm, color="red" if not breakdown["fits"] else "black", lw=1, ls="--")
    am.text(0.45, hbm, f" HBM {hbm:,.0f} GiB", va="bottom", ha="right", fontsize=7)
    am.set(xticks=[], ylabel="GiB per GPU", xlim=(-0.6, 0.6), ylim=(0, max(bottom, hbm) * 1.12),
           title="fits" if breakdown["fits"] else "does not fit")
    am.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.05), frameon=False)
    fig.suptitle(title, fontsize=9)
    return fig


#: The run ledger's lines beyond the step's: what failures and checkpoints cost (train's ledger).
RUN_COLOURS = {"checkpoint_stalls": "#6d4c41", "failed_work": "#c62828", "restarts": "#ad1457",
               "degraded_replicas": "#4e342e"}


def run_ledger(summary: dict[str, Any], *, title: str) -> Any:
    """Where a training run's peak FLOPs go (train's ledger): a waterfall from peak x GPUs x wall
    clock down, each loss a step of its own share, to the useful model FLOPs that remain."""
    plt = _pyplot()
    peak = float(summary["peak_flops_total"])
    losses = [(k, v) for k, v in summary["ledger_flops"].items() if k != "ideal_compute" and v > 0]
    fig, ax = plt.subplots(figsize=(10, 1.4 + 0.32 * (len(losses) + 2)))
    labels, level = ["peak x GPUs x wall"], 100.0
    ax.barh(0, level, color="#455a64")
    for i, (name, flops) in enumerate(losses, start=1):
        share = 100.0 * flops / peak
        level -= share
        ax.barh(i, share, left=level, color={**LEDGER_COLOURS, **RUN_COLOURS}.get(name, "#607d8b"))
        ax.text(level + share, i, f" -{share:.2f} %", va="center", fontsize=7)
        labels.append(name.replace("_", " "))
    useful = 100.0 * float(summary["useful_flops"]) / peak
    ax.barh(len(labels), useful, color=LEDGER_COLOURS["ideal_compute"])
    ax.text(useful, len(labels), f" {useful:.1f} % useful model FLOPs", va="center", fontsize=7.5)
    labels.append("useful model FLOPs")
    ax.set_yticks(range(len(labels)), labels, fontsize=7.5)
    ax.invert_yaxis()
    ax.set(xlim=(0, 112), xlabel="% of peak FLOPs x GPUs x wall clock", title=title)
    ax.grid(True, axis="x", lw=0.3)
    return fig


def goodput(summary: dict[str, Any], *, title: str, top: int = 10) -> Any:
    """What failures cost a run (goodput's and train's summary): the mean ETTR against the
    checkpoint interval (closed form), with the interval used, Young's and Daly's marked, beside
    the expected interruptions by component (the ``top`` most frequent)."""
    plt = _pyplot()
    fig, (ae, ac) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 2]})
    curve = summary["ettr_by_interval"]
    require(bool(curve), "goodput", "no checkpoint interval to plot")
    ae.plot([t / 60 for t, _ in curve], [100 * e for _, e in curve], color="#1e88e5", label="mean ETTR")
    for key, name, style in (("checkpoint_interval_s", "used", "-"), ("checkpoint_interval_young_s", "Young", ":"),
                             ("checkpoint_interval_daly_s", "Daly", "--")):
        t = summary[key]
        if math.isfinite(t):
            ae.axvline(t / 60, color="black", lw=0.8, ls=style, label=f"{name} {t / 60:,.1f} min")
    ae.scatter([summary["checkpoint_interval_s"] / 60], [100 * summary["ettr_p50"]], color="#e53935", zorder=3,
               label=f"simulated median {100 * summary['ettr_p50']:.1f} %")
    ae.set(xscale="log", xlabel="checkpoint interval (minutes)", ylabel="ETTR (%)",
           title=f"job MTBF {summary['job_mtbf_h']:,.2f} h, {summary['interruptions_p50']:,.0f} interruptions")
    ae.legend(fontsize=7)
    ae.grid(True, which="major", lw=0.3)
    comp = sorted(summary["expected_by_component"].items(), key=lambda kv: -kv[1])[:top]
    ac.barh(range(len(comp)), [v for _, v in comp], color="#8e24aa")
    ac.set_yticks(range(len(comp)), [k.replace("_", " ") for k, _ in comp], fontsize=7)
    ac.invert_yaxis()
    ac.set(xlabel="expected interruptions over the run", title="by component")
    fig.suptitle(title, fontsize=9)
    return fig


def plan(result: dict[str, Any], *, title: str, hbm_bytes: float) -> Any:
    """The planner's layouts: memory per GPU against step time for its top rows and its Pareto
    front (fastest for each memory), the best marked and named, the GPU's HBM as a line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    front = sorted(result["pareto"], key=lambda c: c["memory_per_gpu_bytes"])
    ax.step([c["memory_per_gpu_bytes"] / GIB for c in front], [c["step_time_s"] for c in front], where="post",
            color="#1e88e5", lw=1, label=f"Pareto front ({len(front)})")
    ax.scatter([c["memory_per_gpu_bytes"] / GIB for c in front], [c["step_time_s"] for c in front], s=14,
               color="#1e88e5")
    top = result["top"]
    ax.scatter([c["memory_per_gpu_bytes"] / GIB for c in top], [c["step_time_s"] for c in top], s=30,
               facecolors="none", edgecolors="#fb8c00", label=f"top {len(top)} by {result['objective']}")
    best = result["best"]
    ax.scatter([best["memory_per_gpu_bytes"] / GIB], [best["step_time_s"]], marker="*", s=180, color="#d81b60",
               zorder=4, label="best")
    name = f"{best['layout']} mb{best['micro_batch']} {best['precision']} {best['recompute']} zero{best['zero_stage']}"
    ax.annotate(name, (best["memory_per_gpu_bytes"] / GIB, best["step_time_s"]), fontsize=7,
                xytext=(6, 6), textcoords="offset points")
    ax.axvline(hbm_bytes / GIB, color="black", lw=0.8, ls="--")
    ax.text(hbm_bytes / GIB, ax.get_ylim()[1], " HBM", va="top", fontsize=7)
    ax.set(yscale="log", xlabel="memory per GPU (GiB)", ylabel="step time (s)",
           title=f"{title}\n{result['feasible']:,} feasible of {result['evaluated']:,} layouts")
    ax.legend(fontsize=7.5)
    ax.grid(True, lw=0.3)
    return fig


def scale(rows: Sequence[dict[str, Any]], *, title: str) -> Any:
    """From one GPU to many (scale's rows): days to train with failures (each size's layout named),
    and the step's MFU beside the run's ETTR, against GPUs."""
    plt = _pyplot()
    ok = [r for r in rows if r.get("fits")]
    require(bool(ok), "scale", "no size has a layout that fits: nothing to plot")
    fig, (ad, ae) = plt.subplots(1, 2, figsize=(11, 4))
    n = [r["gpus"] for r in ok]
    ad.plot(n, [r["days_p50"] for r in ok], marker="o", color="#1e88e5")
    for r in ok:
        ad.annotate(r["layout"], (r["gpus"], r["days_p50"]), fontsize=6, xytext=(4, 3), textcoords="offset points")
    ad.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="days (median, with failures)", title="time to train")
    ae.plot(n, [100 * r["mfu"] for r in ok], marker="o", color="#43a047", label="MFU (step)")
    ae.plot(n, [100 * r["ettr_p50"] for r in ok], marker="s", color="#e53935", label="ETTR (median)")
    ae.set(xscale="log", ylim=(0, 100), xlabel="GPUs", ylabel="%", title="where the time goes")
    ae.legend(fontsize=7.5)
    for a in (ad, ae):
        a.grid(True, which="major", lw=0.3)
    fig.suptitle(title, fontsize=9)
    return fig


def sweep(cells: Sequence[dict[str, Any]], *, title: str) -> Any:
    """A sweep's answer: tokens per second per GPU of each cell's fastest fitting layout against the
    GPU count, one line per model, GPU type, sequence, batch and precision (a cell where nothing fits
    is left out of its line)."""
    plt = _pyplot()
    lines: dict[str, list[tuple[int, float]]] = {}
    for c in cells:
        if c["best"] is not None:
            key = f"{c['model']} on {c['gpu']}, {c['precision']}, {c['global_batch']:,} x {c['seq_len']:,}"
            lines.setdefault(key, []).append((c["gpus"], c["best"]["tokens_per_s_per_gpu"]))
    require(bool(lines), "sweep", "no cell has a layout that fits: nothing to plot")
    fig, ax = plt.subplots(figsize=(8.5, 5))
    for key, pts in lines.items():
        pts.sort()
        ax.plot([n for n, _ in pts], [v for _, v in pts], marker="o", label=key)
    ax.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="tokens / s per GPU (fastest layout that fits)",
           title=title)
    ax.legend(fontsize=7)
    ax.grid(True, which="major", lw=0.3)
    return fig


def compare(rows: Sequence[dict[str, Any]], *, title: str) -> Any:
    """compare's rows: for each GPU type its failure-free days, dollars and MWh to train the budget
    (three panels sharing the GPU axis); a type where nothing fits is named with an empty bar."""
    plt = _pyplot()
    require(any(r["fits"] for r in rows), "compare", "no GPU type has a layout that fits: nothing to plot")
    fig, axes = plt.subplots(1, 3, sharey=True, figsize=(11, 1.2 + 0.4 * len(rows)))
    y = list(range(len(rows)))
    for ax, (key, scale, label, colour) in zip(axes, (("days_to_train", 1.0, "days (failure-free)", "#1e88e5"),
                                                     ("cost_usd", 1e6, "US$ million", "#43a047"),
                                                     ("energy_mwh", 1.0, "MWh at the facility", "#fb8c00")),
                                               strict=True):
        vals = [r[key] / scale if r["fits"] else 0.0 for r in rows]
        ax.barh(y, vals, color=colour)
        for i, (r, v) in enumerate(zip(rows, vals, strict=True)):
            ax.text(v, i, f" {v:,.3g}" if r["fits"] else " does not fit", va="center", fontsize=7)
        ax.set(xlabel=label, xlim=(0, max(vals) * 1.3))
        ax.grid(True, axis="x", lw=0.3)
    axes[0].set_yticks(y, [str(r["gpu"]) for r in rows], fontsize=8)
    axes[0].invert_yaxis()
    fig.suptitle(title, fontsize=9)
    return fig


def timeline(trace: dict[str, Any], *, title: str, max_stages: int = 64) -> Any:
    """The simulated step: one row per pipeline stage and stream (compute, p2p, dp), each task a
    bar (forward, backward, send, the step's tail: exposed data-parallel sync, optimizer,
    stragglers) from the timeline's trace events."""
    plt = _pyplot()
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    tasks = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    require(bool(tasks), "simulate", "the timeline has no task to plot")
    lanes = sorted({(e["pid"], e["tid"]) for e in tasks})
    require(len({p for p, _ in lanes}) <= max_stages, "plot",
            f"more than {max_stages} pipeline stages do not make a readable timeline; use --trace and Perfetto")
    row = {lane: i for i, lane in enumerate(lanes)}
    fig, ax = plt.subplots(figsize=(11, 0.9 + 0.32 * len(lanes)))
    for kind, colour in TASK_COLOURS.items():
        spans: dict[tuple[int, int], list[tuple[float, float]]] = {}
        for e in tasks:
            if _task_kind(e["name"]) == kind:
                spans.setdefault((e["pid"], e["tid"]), []).append((e["ts"] / 1e6, e["dur"] / 1e6))
        for lane, xs in spans.items():  # one artist per lane and kind: thousands of tasks stay fast
            ax.broken_barh(xs, (row[lane] - 0.4, 0.8), facecolors=colour, edgecolor="white", lw=0.1)
        if spans:
            ax.barh(0, 0, color=colour, label=TASK_LABELS[kind])
    ax.set_yticks(range(len(lanes)), [f"stage {p} {names.get((p, t), t)}" for p, t in lanes], fontsize=7)
    ax.invert_yaxis()
    end = max((e["ts"] + e["dur"]) / 1e6 for e in tasks)
    ax.set(xlabel="seconds", xlim=(0, end * 1.01), title=title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return fig


def _task_kind(name: str) -> str:
    return name.split(" ", 1)[0]


def fabric_options(rows: Sequence[dict[str, Any]], *, title: str) -> Any:
    """fabric --compare's options side by side, cheapest network first: one row per switch and
    plane count (its tiers and switch count written beside it), the network's capital cost and
    its power in two panels sharing the rows."""
    plt = _pyplot()
    require(bool(rows), "fabric", "no fabric option to plot")
    opts = sorted(rows, key=lambda r: (r["network_capex_usd"], r["network_power_w"]))
    fig, (ac, ap) = plt.subplots(1, 2, sharey=True, figsize=(11, 1.2 + 0.3 * len(opts)))
    y = list(range(len(opts)))
    ac.barh(y, [r["network_capex_usd"] / 1e9 for r in opts], color="#1e88e5")
    ap.barh(y, [r["network_power_w"] / 1e6 for r in opts], color="#fb8c00")
    for i, r in enumerate(opts):
        ac.text(r["network_capex_usd"] / 1e9, i, f" {len(r['tiers'])} tiers, {r['total_switches']:,} switches",
                va="center", fontsize=6.5)
    ac.set_yticks(y, [f"{r['switch']} x{r['planes']} ({r['link_gbit']:g}G)" for r in opts], fontsize=7)
    ac.invert_yaxis()
    top = max(r["network_capex_usd"] for r in opts) / 1e9
    ac.set(xlabel="network capital cost (US$ billion)", xlim=(0, top * 1.45))
    ap.set(xlabel="network power (MW, switches and optics)")
    for a in (ac, ap):
        a.grid(True, axis="x", lw=0.3)
    mw, usd = [r["power_w"] / 1e6 for r in opts], [r["capex_usd"] / 1e9 for r in opts]
    fig.suptitle(f"{title}\nthe whole cluster (GPUs, hosts, network): {min(mw):,.0f}-{max(mw):,.0f} MW at the "
                 f"facility, ${min(usd):,.1f}-{max(usd):,.1f} B", fontsize=9)
    return fig


__all__ = ["FORMATS", "GIB", "check_path", "require_matplotlib", "save", "svg", "validation", "ledger", "run_ledger",
           "goodput", "plan", "scale", "sweep", "compare", "timeline", "fabric_options"]
