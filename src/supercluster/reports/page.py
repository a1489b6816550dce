"""One job, one shareable report: ``supercluster report`` plans the job, prices its best layout, runs
it through failures and checkpoints, sizes its network and, if asked, plans it on other GPU types;
then writes ``report.md`` with its figures beside it and ``report.json`` with every number.

Each part is the very object its own command prints with ``--json`` (plan, estimate, train, fabric,
compare) and each figure the one that command draws with ``--plot``: the report adds only the page.
"""

from __future__ import annotations

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
from ..units import GiB
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
    others = compare_gpus(model, [get_gpu(k) for k in gpu_types], num_gpus, global_batch=global_batch,
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
    """Write ``report.md``, ``report.json`` and the figures into ``out_dir``; returns report.md's path."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError("out", f"cannot create {out}: {exc.strerror or exc}") from None
    job, step, run = report["job"], report["step"], report["run"]
    title = f"{job['model_name']} on {job['gpus']:,} x {job['gpu']}"
    figures = {
        "plan.png": lambda: plots.plan(report["plan"], title=f"{title}: the layouts searched",
                                       hbm_bytes=step["hbm_bytes"]),
        "step.png": lambda: plots.ledger(step, title=f"{title}, {step['layout']}: one step"),
        "run.png": lambda: plots.run_ledger(run, title=f"{title}: where the peak FLOPs go"),
        "goodput.png": lambda: plots.goodput(run, title=f"{title}: failures and checkpoints"),
    }
    if any(r["fits"] for r in report["compare"]):
        figures["compare.png"] = lambda: plots.compare(report["compare"], title=f"{job['model_name']} on "
                                                                                 f"{job['gpus']:,} GPUs of each type")
    for name, draw in figures.items():
        plots.save(draw(), str(out / name))
    write_atomic(out / "report.json", json.dumps(report, indent=2, default=str))
    md = out / "report.md"
    write_atomic(md, _markdown(report, figures))
    return md


def _markdown(report: dict[str, Any], figures: dict[str, Any]) -> str:
    job, best, step, run, fab = (report["job"], report["plan"]["best"], report["step"], report["run"],
                                 report["fabric"])
    lines = [
        f"# {job['model_name']} on {job['gpus']:,} x {job['gpu_name']}",
        "",
        f"Global batch {job['global_batch']:,} x {job['seq_len']:,} tokens, {job['tokens']:.3g} tokens to train, "
        f"{job['framework']}; every number below is in `report.json` and comes from `supercluster` "
        f"(plan, estimate, train, fabric, compare).",
        "",
        "| | |",
        "|---|---|",
        f"| best layout | {best['layout']}, micro-batch {best['micro_batch']}, {best['precision']}, recompute "
        f"{best['recompute']}, ZeRO {best['zero_stage']} (of {report['plan']['feasible']:,} that fit, "
        f"{report['plan']['evaluated']:,} searched) |",
        f"| step | {step['step_time_s']:.3f} s, {step['tflops_per_gpu']:.0f} TFLOP/s per GPU, MFU "
        f"{100 * step['mfu']:.1f} % |",
        f"| memory per GPU | {step['memory_per_gpu_bytes'] / GiB:.1f} of {step['hbm_bytes'] / GiB:.0f} GiB |",
        f"| time to train | {run['wall_days_p50']:,.1f} days (p10-p90 {run['wall_days_p10']:,.1f}-"
        f"{run['wall_days_p90']:,.1f}; {run['failure_free_days']:,.1f} failure-free) |",
        f"| goodput | ETTR {100 * run['ettr_p50']:.1f} %, job MTBF {run['job_mtbf_h']:,.2f} h, checkpoint every "
        f"{run['checkpoint_interval_s'] / 60:,.1f} min |",
        f"| cost | {run['gpu_hours'] / 1e6:,.2f} M GPU-hours, ${run['cost_usd'] / 1e6:,.2f} M, "
        f"{run['energy_mwh']:,.0f} MWh at {run['facility_power_mw']:,.1f} MW |",
        f"| network | {len(fab['tiers'])} tier(s) of {fab['switch']}, {fab['total_switches']:,} switches, "
        f"{fab['transceivers']:,} transceivers, ${fab['network_capex_usd'] / 1e6:,.1f} M |",
        "",
        f"How far to trust it: {report['evidence_line']}",
        "",
        "## The layouts searched",
        "",
        "![plan](plan.png)",
        "",
        "## One step, where the time goes",
        "",
        "![step](step.png)",
        "",
        "## Which faster part buys the most",
        "",
        "The same step priced with one hardware rate scaled, the rest and the fabric's topology kept "
        "(`supercluster estimate --sensitivity`):",
        "",
        *_sensitivity_rows(report["sensitivity"]),
        "",
        "## Where the traffic goes",
        "",
        "Each parallel group of the best layout on the sized fabric (`supercluster estimate --placement`; "
        "slowdown: how many times slower than its NIC a flow runs when every group of its kind communicates):",
        "",
        "| group | members | rank stride | scale-up domains | span GPUs | tops out at | groups at once | slowdown |",
        "|---|---|---|---|---|---|---|---|",
        *[f"| {r['group']} | {r['members']:,} | {r['stride']:,} | {r['domains']:,} | {r['span_gpus']:,} | "
          f"{r['tier_name']} | {r['concurrent_groups']:,} | {r['slowdown']:.2f}x |" for r in step.get("placement", [])],
        "",
        "## The whole run, from peak FLOPs to useful work",
        "",
        "![run](run.png)",
        "",
        "## Failures and checkpoints",
        "",
        "![goodput](goodput.png)",
        "",
    ]
    if report["compare"]:
        lines += ["## The same job on other GPU types", "", "| GPU | layout | step s | days | cost | MWh |",
                  "|---|---|---|---|---|---|"]
        for r in report["compare"]:
            if r["fits"]:
                lines.append(f"| {r['gpu']} | {r['best']['layout']} | {r['best']['step_time_s']:.3f} | "
                             f"{r['days_to_train']:,.1f} (failure-free) | ${r['cost_usd'] / 1e6:,.2f} M | "
                             f"{r['energy_mwh']:,.0f} |")
            else:
                lines.append(f"| {r['gpu']} | {r['reason']} | - | - | - | - |")
        lines.append("")
        if "compare.png" in figures:
            lines += ["![compare](compare.png)", ""]
    return "\n".join(lines)


def _sensitivity_rows(rows: list[dict[str, Any]]) -> list[str]:
    """The sensitivity as a markdown table: one row per resource, a step and a speedup per factor."""
    factors = sorted({r["factor"] for r in rows})
    by: dict[str, dict[float, dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["label"], {})[r["factor"]] = r
    head = ["| faster part | " + " | ".join(f"step at x{f:g} | speedup" for f in factors) + " |",
            "|---|" + "---|---|" * len(factors)]
    return head + [f"| {label} | " + " | ".join(f"{fs[f]['step_time_s']:.3f} s | {fs[f]['speedup']:.3f}x"
                                                for f in factors) + " |" for label, fs in by.items()]


#: what ``write`` puts in the report's directory
REPORT_FILES = ("report.md", "report.json", "plan.png", "step.png", "run.png", "goodput.png", "compare.png")


def check_out(out_dir: str, force: bool = False) -> None:
    """The report's directory: refused up front if it is a file or a symbolic link, if it holds a
    report already (unless ``force``), or if matplotlib is missing."""
    from ..files import check_output

    p = Path(out_dir)
    require(not p.is_symlink(), "out", f"{out_dir} is a symbolic link; give the folder itself")
    require(not p.exists() or p.is_dir(), "out", f"{out_dir} exists and is not a directory")
    if p.is_dir():
        for name in REPORT_FILES:
            check_output(p / name, "out", force=force)
    plots.require_matplotlib()
