"""supercluster plan, compare, report: the fastest layout, on each GPU type, on one page."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from ..errors import InputError
from ..formats.load import load_model
from ..hardware.specs import get_gpu
from ..job import stated_network
from ..parallelism.layout import Layout
from ..planner.fallback import fixed_settings
from ..reports import plots
from ..reports import tables as reports
from ..units import fmt_seconds, fmt_usd, fmt_watt_hours
from ..validation import evidence as evidence_lines
from .app import (
    CLI_FRAMEWORK,
    FRAMEWORK_HELP,
    OBJECTIVE_HELP,
    ForceOpt,
    FrameworkOpt,
    GbsOpt,
    GpuOpt,
    GpusOpt,
    KeepMbOpt,
    KeepRecomputeOpt,
    KeepZeroOpt,
    ModelOpt,
    NicOpt,
    NodeOpt,
    PlotOpt,
    PrecisionAnyOpt,
    RatesOpt,
    SeedOpt,
    SeqOpt,
    TrialsOpt,
    _emit_json,
    _num,
    _out,
    _plot,
    _pricing_bar,
    _spinner,
    app,
)


@app.command()
def plan(
    model: ModelOpt = "llama3-405b",
    gpu: GpuOpt = "h100-sxm",
    gpus: GpusOpt = 16384,
    global_batch: GbsOpt = 2048,
    seq_len: SeqOpt = 8192,
    precision: PrecisionAnyOpt = "bf16",
    objective: Annotated[str, typer.Option(help=OBJECTIVE_HELP)] = "time",
    framework: Annotated[str | None, typer.Option(help=FRAMEWORK_HELP,
                                                  show_default=f"{CLI_FRAMEWORK}; with --export, the framework "
                                                  "that runs it: torchtitan, deepspeed, maxtext, or "
                                                  f"{CLI_FRAMEWORK} for megatron")] = None,
    headroom: Annotated[float, _num(help="fraction of HBM kept free (0-1)")] = 0.0,
    top: Annotated[int, typer.Option(help="rows in the table")] = 10,
    micro_batch: KeepMbOpt = None,
    zero: KeepZeroOpt = None,
    recompute: KeepRecomputeOpt = None,
    gpu_hour_usd: Annotated[float | None, _num(help="price of a GPU-hour (default: ownership cost)")] = None,
    nic_gbit_per_gpu: NicOpt = None,
    gpus_per_node: NodeOpt = None,
    export: Annotated[str | None, typer.Option(help="print the winner as megatron (its arguments) | megatron-launch (a "
                                                    "torchrun script) | torchtitan (a torchtitan 0.3 launch line) | "
                                                    "torchtitan-toml | deepspeed | maxtext (a MaxText launch "
                                                    "line)")] = None,
    tokens: Annotated[float | None, _num(help="token budget: also days, dollars and MWh to train it "
                                                 "(failure-free; supercluster train adds failures)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    evidence: Annotated[bool, typer.Option(help="also report the model's error on the published runs closest "
                                           "to the best layout's kind")] = True,
    plot: PlotOpt = None,
    force: ForceOpt = False,
) -> None:
    """Search every legal layout; the fastest (or cheapest) that fits, why, and how to launch it."""

    from ..formats.launchers import export as export_layout
    from ..formats.launchers import export_framework
    from ..parallelism.framework import get_framework
    from ..planner.search import plan as run_plan

    framework = export_framework(export, framework) if export else framework or CLI_FRAMEWORK
    m, g, fw = load_model(model), get_gpu(gpu), get_framework(framework)
    precs = ("bf16", "fp8") if precision == "any" else (precision,)
    fixed = fixed_settings(seq_len, precs[0], micro_batch=micro_batch, zero=zero, recompute=recompute)
    # (the run's own network, where it states one: the search and the export price the same)
    net = stated_network(g, gpus, nic_gbit_per_gpu=nic_gbit_per_gpu, gpus_per_node=gpus_per_node)[0]
    with _pricing_bar() as progress:
        res = run_plan(m, g, gpus, global_batch=global_batch, seq_len=seq_len, framework=fw,
                       objective=objective, precisions=precs, headroom=headroom, top=top, gpu_hour_usd=gpu_hour_usd,
                       progress=progress, fixed=fixed, network=net)
    if export:
        from ..hardware.specs import get_system
        from ..job import estimate

        # (how the winner's pipeline split was priced: the export tells the framework the same split)
        step = estimate(m, gpu=g, num_gpus=gpus, layout=res.best.layout, framework=fw, network=net)
        typer.echo(export_layout(res.best.layout, export, m, fw, counts_head=step.split_counts_head,
                                 gpus_per_node=gpus_per_node or get_system(g.system).gpus_per_node), nl=False)
        return
    if tokens is not None and tokens <= 0:
        raise InputError("tokens", f"must be > 0, got {tokens}")
    found = res.to_json()
    _plot(plot, lambda: plots.plan(found, title=f"{m.name} on {gpus:,} x {gpu}, global batch {global_batch:,} x "
                                               f"{seq_len:,}, {framework}", hbm_bytes=g.hbm_bytes))
    ev = (evidence_lines.evidence_for(m, g, framework, res.best.layout.precision, res.best.layout.num_gpus, seq_len)
          if evidence else None)
    if as_json:
        extra = {"budget": res.best.budget(tokens)} if tokens else {}
        if evidence:
            extra["evidence"] = ev.as_json() if ev else None
        _emit_json(extra | found)
        return
    reports.print_plan(_out(), res, f"{reports.model_label(m)} on {gpus:,} x {gpu}: best layouts by {objective}")
    if tokens:
        b = res.best.budget(tokens)
        _out().print(f"{tokens:.3g} tokens with #1: {fmt_seconds(b['days_to_train'] * 86400.0)} (failure-free), "
                     f"{fmt_usd(b['cost_usd'])}, {fmt_watt_hours(b['energy_mwh'] * 1e6)}")
    if ev is not None:
        _out().print(ev.line(), style="dim", markup=False)
    elif evidence:
        _out().print(evidence_lines.no_runs_line(m), style="dim", markup=False)


@app.command()
def compare(
    model: ModelOpt = "llama3-70b",
    gpu_types: Annotated[str, typer.Option("--gpu-types", help="comma-separated GPU keys (supercluster catalog "
                                           "gpus)")] = "a100-80gb,h100-sxm,h200,b200,gb200,mi300x",
    gpus: GpusOpt = 1024,
    global_batch: GbsOpt = 1024,
    seq_len: SeqOpt = 8192,
    precision: PrecisionAnyOpt = "bf16",
    objective: Annotated[str, typer.Option(help=OBJECTIVE_HELP)] = "time",
    framework: FrameworkOpt = CLI_FRAMEWORK,
    tokens: Annotated[float | None, _num(help="token budget for days, dollars and MWh (default: 20 per "
                                                 "parameter)")] = None,
    micro_batch: KeepMbOpt = None,
    zero: KeepZeroOpt = None,
    recompute: KeepRecomputeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON rows")] = False,
    plot: PlotOpt = None,
    force: ForceOpt = False,
) -> None:
    """Which GPU? Plan the same job on each GPU type: best layout, throughput, days, dollars, MWh."""
    from rich.progress import track

    from ..parallelism.framework import get_framework
    from ..planner.search import compare_gpus
    from ..planner.sweep import parse_axis

    m, fw = load_model(model), get_framework(framework)
    kinds = [get_gpu(k) for k in parse_axis(gpu_types, str, "gpu_types")]
    precs = ("bf16", "fp8") if precision == "any" else (precision,)
    for p in precs:  # an unknown precision, a batch or sequence out of range: one error, not a row per GPU
        Layout(precision=p, global_batch=global_batch, seq_len=seq_len)
    fixed = fixed_settings(seq_len, precs[0], micro_batch=micro_batch, zero=zero, recompute=recompute)
    rows = []
    for g in track(kinds, description="planning", disable=len(kinds) < 2 or not sys.stderr.isatty(),
                   transient=True, console=Console(stderr=True)):
        rows += compare_gpus(m, [g], gpus, global_batch=global_batch, seq_len=seq_len, framework=fw,
                             objective=objective, precisions=precs, tokens=tokens, fixed=fixed)
    tok = tokens if tokens is not None else 20.0 * m.num_params
    title = f"{m.name} on {gpus:,} GPUs, global batch {global_batch:,} x {seq_len:,}, {tok:.3g} tokens, {framework}"
    _plot(plot, lambda: plots.compare(rows, title=title))
    if as_json:
        _emit_json(rows)
        return
    t = reports.compare_table(rows, title, objective)
    _out().print(t)
    _out().print("days are failure-free: supercluster train --gpu ... adds interruptions and checkpoints",
                 style="dim")


@app.command()
def report(
    model: ModelOpt = "llama3-70b",
    gpu: GpuOpt = "h100-sxm",
    gpus: GpusOpt = 1024,
    global_batch: GbsOpt = 1024,
    seq_len: SeqOpt = 8192,
    precision: PrecisionAnyOpt = "bf16",
    framework: FrameworkOpt = CLI_FRAMEWORK,
    tokens: Annotated[float | None, _num(help="token budget (default: 20 per parameter)")] = None,
    gpu_types: Annotated[str, typer.Option("--gpu-types", help="also plan the job on these GPU types, "
                                           "comma-separated (empty: none)")] = "",
    rates: RatesOpt = "llama3", trials: TrialsOpt = 2000, seed: SeedOpt = 0,
    out: Annotated[str, typer.Option(help="directory for report.html, report.md, report.json and the "
                                          "figures")] = "report",
    force: ForceOpt = False,
) -> None:
    """One job, one shareable report: plan, step, run with failures, network, other GPUs, figures."""
    from ..parallelism.framework import get_framework
    from ..planner.sweep import parse_axis
    from ..reliability.run import RunOptions
    from ..reports import page as _report

    _report.check_out(out, force)
    m, g, fw = load_model(model), get_gpu(gpu), get_framework(framework)
    kinds = parse_axis(gpu_types, str, "gpu_types") if gpu_types.strip() else ()
    for k in kinds:
        get_gpu(k)
    precs = ("bf16", "fp8") if precision == "any" else (precision,)
    with _spinner("planning, pricing and simulating the run"):
        r = _report.build(m, g, gpus, global_batch=global_batch, seq_len=seq_len, framework=fw, precisions=precs,
                          tokens=tokens, gpu_types=kinds, options=RunOptions(rates=rates, trials=trials, seed=seed))
        md = _report.write(r, out)
    typer.echo(f"wrote {md} (open it in a browser; and report.md, report.json, "
               f"{len(list(md.parent.glob('*.png')))} figures)")
