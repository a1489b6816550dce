"""One job, one shareable report: ``supercluster report`` plans the job, prices its best layout, runs
it through failures and checkpoints, sizes its network and, if asked, plans it on other GPU types;
then writes ``report.html`` (one self-contained page, its figures inline as SVG), ``report.md`` with
the same figures as PNG files beside it, and ``report.json`` with every number.

Each part is the very object its own command prints with ``--json`` (plan, estimate, train, fabric,
compare) and each figure the one that command draws with ``--plot``: the report adds only the page.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError, require
from ..files import write_atomic
from ..hardware.specs import GpuSpec, get_gpu, get_system
from ..job import default_network, estimate, placement
from ..models.spec import ModelSpec
from ..network.fabric import build_fabric, fabric_summary
from ..parallelism.framework import Framework
from ..planner.search import compare_gpus, plan
from ..planner.sensitivity import sensitivity
from ..reliability.run import RunOptions, analyse_run
from ..units import GiB, fmt_count, fmt_seconds, fmt_usd, fmt_watt_hours, fmt_watts
from ..validation.evidence import evidence_for, no_runs_line
from . import plots
from .tables import breakdown_json


def build(model: ModelSpec, gpu: GpuSpec, num_gpus: int, *, global_batch: int, seq_len: int, framework: Framework,
          precisions: tuple[str, ...] = ("bf16",), tokens: float | None = None, gpu_types: Sequence[str] = (),
          options: RunOptions | None = None) -> dict[str, Any]:
    """Every part of the report for training ``model`` on ``num_gpus`` x ``gpu`` (see the module doc)."""
    options = options or RunOptions()
    res = plan(model, gpu, num_gpus, global_batch=global_batch, seq_len=seq_len, framework=framework,
               precisions=precisions, top=10)
    lay = res.best.layout
    net = default_network(gpu, num_gpus=num_gpus)
    b = estimate(model, gpu=gpu, num_gpus=num_gpus, layout=lay, framework=framework, network=net)
    sens = [r.as_json() for r in sensitivity(model, gpu=gpu, num_gpus=num_gpus, layout=lay, framework=framework,
                                             network=net)]
    step = breakdown_json(b, (lay, framework, model), model=model.key, gpu=gpu.key, gpus=num_gpus,
                          layout=lay.short(), framework=framework.key)
    step["placement"] = placement(model, lay, net)
    run = analyse_run(model, gpu, num_gpus, framework=framework, layout=lay, tokens=tokens, options=options).summary()
    system = get_system(gpu.system)
    fabric = fabric_summary(build_fabric(num_gpus, gpu, system), gpu, system)
    # (the job's own GPU leads the comparison, so the others are read against it)
    kinds = [gpu.key, *(k for k in dict.fromkeys(gpu_types) if k != gpu.key)]
    others = compare_gpus(model, [get_gpu(k) for k in kinds], num_gpus, global_batch=global_batch,
                          seq_len=seq_len, framework=framework, precisions=precisions,
                          tokens=float(run["tokens"])) if gpu_types else []  # type: ignore[arg-type]
    ev = evidence_for(model, gpu, framework.family, lay.precision, num_gpus, seq_len)
    return {"job": {"model": model.key, "model_name": model.name, "gpu": gpu.key, "gpu_name": gpu.name,
                    "gpus": num_gpus, "global_batch": global_batch, "seq_len": seq_len, "framework": framework.key,
                    "precisions": list(precisions), "tokens": run["tokens"], "rates": options.rates},
            "plan": res.to_json(), "step": step, "sensitivity": sens, "run": run, "fabric": fabric,
            "compare": others,
            "evidence": ev.as_json() if ev else None,
            "evidence_line": ev.line() if ev else no_runs_line(model)}


def write(report: dict[str, Any], out_dir: str | Path) -> Path:
    """Write ``report.html`` (self-contained: its figures inline as SVG), ``report.md`` with the same
    figures as PNG files beside it, and ``report.json`` into ``out_dir``; returns report.html's path."""
    out = Path(out_dir)
    try:
        out.mkdir(exist_ok=True)
    except OSError as exc:
        raise InputError("out", f"cannot create {out}: {exc.strerror or exc}") from None
    job, step, run = report["job"], report["step"], report["run"]
    title = f"{job['model_name']} on {job['gpus']:,} x {job['gpu']}"
    figures = {
        "plan": lambda: plots.plan(report["plan"], title=f"{title}: the layouts searched",
                                   hbm_bytes=step["hbm_bytes"]),
        "step": lambda: plots.ledger(step, title=f"{title}, {step['layout']}: one step"),
        "run": lambda: plots.run_ledger(run, title=f"{title}: where the peak FLOPs go"),
        "goodput": lambda: plots.goodput(run, title=f"{title}: failures and checkpoints"),
    }
    if any(r["fits"] for r in report["compare"]):
        figures["compare"] = lambda: plots.compare(report["compare"], title=f"{job['model_name']} on "
                                                                             f"{job['gpus']:,} GPUs of each type")
    svgs = {}
    for name, draw in figures.items():
        plots.save(draw(), str(out / f"{name}.png"))
        svgs[name] = plots.svg(draw())
    blocks = _blocks(report, set(figures))
    write_atomic(out / "report.json", json.dumps(report, indent=2, default=str))
    write_atomic(out / "report.md", _markdown(blocks))
    page = out / "report.html"
    write_atomic(page, _html(blocks, svgs, title=f"{job['model_name']} on {job['gpus']:,} x {job['gpu_name']}"))
    return page


#: the report as blocks, rendered to Markdown and to HTML alike: ("h1" | "h2" | "p", text), ("table",
#: header, rows) or ("figure", name)
Block = tuple[Any, ...]


def _blocks(report: dict[str, Any], figures: set[str]) -> list[Block]:
    job, best, step, run, fab = (report["job"], report["plan"]["best"], report["step"], report["run"],
                                 report["fabric"])
    summary = [
        ("best layout", f"{best['layout']}, micro-batch {best['micro_batch']}, {best['precision']}, recompute "
                        f"{best['recompute']}, ZeRO {best['zero_stage']} (of {report['plan']['feasible']:,} that "
                        f"fit, {report['plan']['evaluated']:,} searched)"),
        ("step", f"{step['step_time_s']:.3f} s, {step['tflops_per_gpu']:.0f} TFLOP/s per GPU, MFU "
                 f"{100 * step['mfu']:.1f} %"),
        ("memory per GPU", f"{step['memory_per_gpu_bytes'] / GiB:.1f} of {step['hbm_bytes'] / GiB:.0f} GiB"),
        ("time to train", f"{run['wall_days_p50']:,.2f} days (p10-p90 {run['wall_days_p10']:,.2f}-"
                          f"{run['wall_days_p90']:,.2f}; {run['failure_free_days']:,.2f} failure-free)"),
        ("goodput", f"ETTR {100 * run['ettr_p50']:.1f} %, job MTBF {run['job_mtbf_h']:,.2f} h, checkpoint every "
                    f"{run['checkpoint_interval_s'] / 60:,.1f} min"),
        ("cost", f"{fmt_count(run['gpu_hours'])} GPU-hours, {fmt_usd(run['cost_usd'])}, "
                 f"{fmt_watt_hours(run['energy_mwh'] * 1e6)} at {fmt_watts(run['facility_power_mw'] * 1e6)}"),
        ("network", f"{len(fab['tiers'])} tier(s) of {fab['switch']}, {fab['total_switches']:,} switches, "
                    f"{fab['transceivers']:,} transceivers, {fmt_usd(fab['network_capex_usd'])}"),
    ]
    b: list[Block] = [
        ("h1", f"{job['model_name']} on {job['gpus']:,} x {job['gpu_name']}"),
        ("p", f"Global batch {job['global_batch']:,} x {job['seq_len']:,} tokens, {job['tokens']:.3g} tokens to "
              f"train, {job['framework']}; every number below is in `report.json` and comes from `supercluster` "
              "(plan, estimate, train, fabric, compare)."),
        ("table", ("", "the job's answer"), summary),
        ("p", f"How far to trust it: {report['evidence_line']}"),
        ("h2", "The layouts searched"), ("figure", "plan"),
        ("h2", "One step, where the time goes"), ("figure", "step"),
        ("h2", "Which faster part buys the most"),
        ("p", "The same step priced with one hardware rate scaled, the rest and the fabric's topology kept "
              "(`supercluster estimate --sensitivity`):"),
        ("table", *_sensitivity_table(report["sensitivity"])),
        ("h2", "Where the traffic goes"),
        ("p", "Each parallel group of the best layout on the sized fabric (`supercluster estimate --placement`; "
              "slowdown: how many times slower than its NIC a flow runs when every group of its kind "
              "communicates):"),
        ("table", ("group", "members", "rank stride", "scale-up domains", "span GPUs", "tops out at",
                   "groups at once", "slowdown"),
         [(r["group"], f"{r['members']:,}", f"{r['stride']:,}", f"{r['domains']:,}", f"{r['span_gpus']:,}",
           r["tier_name"], f"{r['concurrent_groups']:,}", f"{r['slowdown']:.2f}x") for r in step.get("placement", [])]),
        ("h2", "The whole run, from peak FLOPs to useful work"), ("figure", "run"),
        ("h2", "Failures and checkpoints"), ("figure", "goodput"),
    ]
    if report["compare"]:
        rows = [(r["gpu"], r["best"]["layout"], f"{r['best']['step_time_s']:.3f}",
                 f"{fmt_seconds(r['days_to_train'] * 86400.0)} (failure-free)", fmt_usd(r["cost_usd"]),
                 fmt_watt_hours(r["energy_mwh"] * 1e6)) if r["fits"] else (r["gpu"], r["reason"], "-", "-", "-", "-")
                for r in report["compare"]]
        b += [("h2", "The same job on other GPU types"),
              ("table", ("GPU", "layout", "step s", "time", "cost", "energy"), rows)]
        if "compare" in figures:
            b.append(("figure", "compare"))
    return b


def _sensitivity_table(rows: list[dict[str, Any]]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The sensitivity as a table: one row per resource, a step and a speedup per factor."""
    factors = sorted({r["factor"] for r in rows})
    by: dict[str, dict[float, dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["label"], {})[r["factor"]] = r
    head = ("faster part", *[x for f in factors for x in (f"step at x{f:g}", "speedup")])
    return head, [(label, *[x for f in factors for x in (f"{fs[f]['step_time_s']:.3f} s",
                                                         f"{fs[f]['speedup']:.3f}x")]) for label, fs in by.items()]


def _markdown(blocks: list[Block]) -> str:
    lines: list[str] = []
    for kind, *rest in blocks:
        if kind in ("h1", "h2"):
            lines += [("# " if kind == "h1" else "## ") + rest[0], ""]
        elif kind == "p":
            lines += [rest[0], ""]
        elif kind == "figure":
            lines += [f"![{rest[0]}]({rest[0]}.png)", ""]
        else:
            head, rows = rest
            lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                      *["| " + " | ".join(row) + " |" for row in rows], ""]
    return "\n".join(lines)


_CSS = """body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}h1{font-size:1.6em}h2{font-size:1.25em;margin-top:1.8em;
border-bottom:1px solid #ddd}table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}th{background:#f3f3f3}
figure{margin:1em 0}figure svg{width:100%;height:auto}code{background:#f3f3f3;padding:0 .2em}"""


def _inline(text: str) -> str:
    """Escaped text with its `code` spans as <code>."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _html(blocks: list[Block], svgs: dict[str, str], *, title: str) -> str:
    """One page, nothing fetched: the blocks as HTML, each figure its own inline SVG."""
    body: list[str] = []
    for kind, *rest in blocks:
        if kind in ("h1", "h2", "p"):
            body.append(f"<{kind}>{_inline(rest[0])}</{kind}>")
        elif kind == "figure":
            svg = svgs[rest[0]]
            body.append(f'<figure id="{rest[0]}">{svg[svg.index("<svg"):]}</figure>')
        else:
            head, rows = rest
            body.append("<table><thead><tr>" + "".join(f"<th>{_inline(h)}</th>" for h in head) + "</tr></thead><tbody>"
                        + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in rows)
                        + "</tbody></table>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{html.escape(title)}'
            f"</title><style>{_CSS}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n")


#: what ``write`` puts in the report's directory
REPORT_FILES = ("report.html", "report.md", "report.json", "plan.png", "step.png", "run.png", "goodput.png",
                "compare.png")


def check_out(out_dir: str, force: bool = False) -> None:
    """The report's directory: refused up front if it is a file or a symbolic link, if it holds a
    report already (unless ``force``), if the folder it would be made in does not exist (only the
    report's own folder is created), or if matplotlib is missing."""
    from ..files import check_output

    p = Path(out_dir)
    try:
        require(not p.is_symlink(), "out", f"{out_dir} is a symbolic link; give the folder itself")
        require(not p.exists() or p.is_dir(), "out", f"{out_dir} exists and is not a directory")
        parent = p.parent if str(p.parent) else Path(".")
        require(p.is_dir() or parent.is_dir(), "out", f"folder {parent} does not exist (the report makes only "
                                                      f"its own folder, {p.name})")
    except OSError as exc:  # a name too long for the file system
        raise InputError("out", f"cannot use {str(p)[:80]}: {exc.strerror or exc}") from None
    if p.is_dir():
        for name in REPORT_FILES:
            check_output(p / name, "out", force=force)
    plots.require_matplotlib()
