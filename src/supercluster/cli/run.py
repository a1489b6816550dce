"""supercluster goodput, train, scale: from step time to time-to-train."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from ..formats.load import load_model
from ..hardware.specs import get_gpu
from ..parallelism.layout import Layout
from ..reports import plots
from ..reports import tables as reports
from ..validation import evidence as evidence_lines
from .app import (
    CLI_FRAMEWORK,
    AsyncOpt,
    ElasticOpt,
    ForceOpt,
    FrameworkOpt,
    GbsOpt,
    GpuOpt,
    GpusOpt,
    IntervalOpt,
    LayoutOpt,
    ModelOpt,
    NicOpt,
    NodeOpt,
    PlotOpt,
    PriceOpt,
    PueOpt,
    RatesOpt,
    RecomputeOpt,
    SeedOpt,
    SeqOpt,
    SparesOpt,
    StorageOpt,
    TrialsOpt,
    _emit_json,
    _num,
    _out,
    _plot,
    _run_options,
    app,
)


def _layout_arg(layout: str | None, gbs: int, seq: int, recompute: str, precision: str) -> Layout | None:
    if layout is None:
        return None
    return Layout.from_string(layout, global_batch=gbs, seq_len=seq, recompute=recompute, precision=precision)


def _analyse(model: str, gpu: str, gpus: int, framework: str, layout: Layout | None, global_batch: int,
             seq_len: int, opts: Any, nic_gbit_per_gpu: float | None = None, gpus_per_node: int | None = None,
             **horizon: Any) -> dict[str, Any]:
    from ..hardware.specs import get_system, with_network
    from ..job import stated_network
    from ..parallelism.framework import get_framework
    from ..reliability.run import analyse_run

    g = get_gpu(gpu)
    net = stated_network(g, gpus, nic_gbit_per_gpu=nic_gbit_per_gpu, gpus_per_node=gpus_per_node)[0]
    system = with_network(get_system(g.system), gpus_per_node=gpus_per_node) if gpus_per_node else None
    r = analyse_run(load_model(model), g, gpus, framework=get_framework(framework), layout=layout,
                    global_batch=global_batch, seq_len=seq_len, options=opts, network=net, system=system, **horizon)
    return r.summary()


@app.command()
def goodput(
    gpu: GpuOpt = "h100-sxm",
    gpus: GpusOpt = 16384,
    days: Annotated[float, _num(help="wall-clock days of the run")] = 54.0,
    model: Annotated[str, typer.Option(help="model (sets checkpoint size and step)")] = "llama3-405b",
    layout: LayoutOpt = None, recompute: RecomputeOpt = "none", global_batch: GbsOpt = 2048,
    seq_len: SeqOpt = 8192, framework: FrameworkOpt = CLI_FRAMEWORK,
    rates: RatesOpt = "llama3", trials: TrialsOpt = 10000, seed: SeedOpt = 0, asynchronous: AsyncOpt = False,
    hot_spares: SparesOpt = False, elastic: ElasticOpt = False, storage_bw: StorageOpt = None,
    interval: IntervalOpt = None, pue: PueOpt = 1.1, gpu_hour_usd: PriceOpt = None,
    nic_gbit_per_gpu: NicOpt = None, gpus_per_node: NodeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    plot: PlotOpt = None,
    force: ForceOpt = False,
) -> None:
    """Interruptions, checkpoint interval and effective training time (ETTR) of a run of --days."""
    opts = _run_options(rates, trials, seed, asynchronous, hot_spares, elastic, storage_bw, interval, pue, gpu_hour_usd)
    s = _analyse(model, gpu, gpus, framework, _layout_arg(layout, global_batch, seq_len, recompute, "bf16"),
                 global_batch, seq_len, opts, nic_gbit_per_gpu, gpus_per_node, days=days)
    _plot(plot, lambda: plots.goodput(s, title=f"{days:g} days on {gpus:,} x {gpu} ({model}, {s['layout']}), "
                                                f"rates {rates}"))
    if as_json:
        _emit_json(s)
        return
    reports.print_run(_out(), s, f"{days:g} days on {gpus:,} x {gpu} ({model}): where the peak FLOPs went")


@app.command()
def train(
    model: ModelOpt = "llama3-405b",
    gpu: GpuOpt = "h100-sxm",
    gpus: GpusOpt = 16384,
    tokens: Annotated[float | None, _num(help="token budget (default: 20 per parameter, Chinchilla)")] = None,
    layout: LayoutOpt = None, recompute: RecomputeOpt = "none", global_batch: GbsOpt = 2048,
    seq_len: SeqOpt = 8192, framework: FrameworkOpt = CLI_FRAMEWORK,
    precision: Annotated[str, typer.Option(help="bf16 | fp8 (with --layout)")] = "bf16",
    deadline_days: Annotated[float | None, _num(help="also: compute-optimal model for it")] = None,
    rates: RatesOpt = "llama3", trials: TrialsOpt = 10000, seed: SeedOpt = 0, asynchronous: AsyncOpt = False,
    hot_spares: SparesOpt = False, elastic: ElasticOpt = False, storage_bw: StorageOpt = None,
    interval: IntervalOpt = None, pue: PueOpt = 1.1, gpu_hour_usd: PriceOpt = None,
    nic_gbit_per_gpu: NicOpt = None, gpus_per_node: NodeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    plot: PlotOpt = None,
    force: ForceOpt = False,
) -> None:
    """Time to train a token budget: days, GPU-hours, MWh, dollars and the run's entropy ledger."""
    from ..reliability.run import compute_optimal_for_deadline

    opts = _run_options(rates, trials, seed, asynchronous, hot_spares, elastic, storage_bw, interval, pue, gpu_hour_usd)
    g = get_gpu(gpu)
    s = _analyse(model, gpu, gpus, framework, _layout_arg(layout, global_batch, seq_len, recompute, precision),
                 global_batch, seq_len, opts, nic_gbit_per_gpu, gpus_per_node, tokens=tokens)
    if deadline_days is not None:
        s["compute_optimal_for_deadline"] = compute_optimal_for_deadline(s["model_flops_per_s"], deadline_days,
                                                                         s["ettr_mean"])
    # the days scale with the step time, so the step's evidence bounds them too
    ev = evidence_lines.evidence_for(load_model(model), g, framework, precision, gpus, seq_len)
    s["evidence"] = ev.as_json() if ev else None
    title = f"training {model} on {gpus:,} x {gpu}: where the peak FLOPs go"
    _plot(plot, lambda: plots.run_ledger(s, title=f"{title} ({s['layout']}, {s['wall_days_p50']:,.1f} days)"))
    if as_json:
        _emit_json(s)
        return
    reports.print_run(_out(), s, title)
    if deadline_days is not None:
        c = s["compute_optimal_for_deadline"]
        _out().print(f"compute-optimal for {deadline_days:g} days at this MFU and ETTR: {c['params'] / 1e9:,.0f} B "
                     f"parameters on {c['tokens'] / 1e12:,.1f} T tokens ({c['compute_flops']:.2e} FLOP)")
    if ev is not None:
        _out().print(ev.line() + " (the days scale with the step)", style="dim", markup=False)
    else:
        _out().print(evidence_lines.no_runs_line(load_model(model)), style="dim", markup=False)


@app.command()
def scale(
    model: ModelOpt = "llama3-8b",
    gpu: GpuOpt = "gb200",
    max_gpus: Annotated[int, typer.Option(help="largest cluster (sizes are powers of 4 from 1)")] = 1048576,
    tokens: Annotated[float | None, _num(help="token budget (default: 20 per parameter)")] = 15e12,
    seq_len: SeqOpt = 8192, framework: FrameworkOpt = CLI_FRAMEWORK,
    rates: RatesOpt = "llama3", trials: TrialsOpt = 2000, seed: SeedOpt = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON rows")] = False,
    plot: PlotOpt = None,
    force: ForceOpt = False,
) -> None:
    """From one GPU to a million: step time, job MTBF, checkpoint interval, ETTR and days to train."""
    from rich.progress import track

    from ..network.fabric import check_gpu_count
    from ..parallelism.framework import get_framework
    from ..reliability.run import RunOptions, scale_table

    check_gpu_count(max_gpus, "max_gpus")
    sizes, n = [], 1
    while n <= max_gpus:
        sizes.append(n)
        n *= 4
    m, g, fw = load_model(model), get_gpu(gpu), get_framework(framework)
    opts = RunOptions(rates=rates, trials=trials, seed=seed)
    rows = []
    # (on stderr, so that --json stays clean)
    for size in track(sizes, description="planning and simulating", disable=not sys.stderr.isatty(), transient=True,
                      console=Console(stderr=True)):
        rows += scale_table(m, g, [size], framework=fw, tokens=tokens, seq_len=seq_len, options=opts)
    _plot(plot, lambda: plots.scale(rows, title=f"{m.name} on {gpu}, {tokens or 20 * m.num_params:.3g} tokens, "
                                                f"rates {rates}, {framework}"))
    if as_json:
        _emit_json(rows)
        return
    t = reports.scale_table(rows, f"{m.name} on {gpu}, {tokens or 20 * m.num_params:.3g} tokens, rates {rates}")
    _out().print(t)
