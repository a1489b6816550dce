"""supercluster simulate: one step laid out on the pipeline schedule."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ..errors import InputError
from ..formats.load import load_model
from ..hardware.specs import get_gpu
from ..parallelism.layout import Layout
from ..planner.fallback import fixed_settings
from ..reports import plots
from ..reports import tables as reports
from .app import (
    CLI_FRAMEWORK,
    ForceOpt,
    FrameworkOpt,
    GbsOpt,
    GpuOpt,
    GpusOpt,
    LayoutOpt,
    ModelOpt,
    NicOpt,
    NodeOpt,
    PlotOpt,
    SeedOpt,
    SeqOpt,
    _emit_json,
    _given_options,
    _num,
    _out,
    _output_path,
    _plot,
    _spinner,
    app,
)


@app.command()
def simulate(
    ctx: typer.Context,
    model: ModelOpt = "llama3-70b",
    gpu: GpuOpt = "h100-sxm",
    gpus: GpusOpt = 64,
    layout: LayoutOpt = None,
    recompute: Annotated[str, typer.Option(help="none | selective | full",
                                           show_default="none; without --layout, the planner's choice")] = "none",
    global_batch: GbsOpt = 128, seq_len: SeqOpt = 8192,
    precision: Annotated[str, typer.Option(help="bf16 | fp16 | fp8 | fp4")] = "bf16",
    framework: FrameworkOpt = CLI_FRAMEWORK,
    jitter: Annotated[float, _num(help="log-normal sigma of each operation's duration (0 = none)")] = 0.0,
    seed: SeedOpt = 0,
    exact_stages: Annotated[bool, typer.Option("--exact-stages", help="each stage its own layers (and the last "
                                               "the head) instead of the ledger's heaviest stage")] = False,
    trace: Annotated[str | None, typer.Option(help="write a Chrome / Perfetto trace JSON here",
                                              callback=_output_path)] = None,
    pp_layout: Annotated[str | None, typer.Option(help="explicit pipeline layout (as estimate --pp-layout; "
                                                  "with --layout)")] = None,
    nic_gbit_per_gpu: NicOpt = None,
    gpus_per_node: NodeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    plot: PlotOpt = None,
    force: ForceOpt = False,
) -> None:
    """Lay one step out on the pipeline schedule: when each stage computes, sends and idles."""
    from ..job import default_network
    from ..parallelism.framework import get_framework
    from ..planner.search import plan
    from ..simulation.timeline import simulate as run_sim

    m, g, fw = load_model(model), get_gpu(gpu), get_framework(framework)
    net = default_network(g, num_gpus=gpus, nic_gbit_per_gpu=nic_gbit_per_gpu, gpus_per_node=gpus_per_node)
    if pp_layout is not None and not layout:
        raise InputError("pp_layout", "needs --layout (the parallel degrees it splits)")
    lay = Layout.from_string(layout, global_batch=global_batch, seq_len=seq_len, recompute=recompute,
                             precision=precision, pp_layout=pp_layout) if layout else \
        plan(m, g, gpus, global_batch=global_batch, seq_len=seq_len, framework=fw, precisions=(precision,),
             top=1, fixed=fixed_settings(seq_len, precision, recompute=recompute)
             if "recompute" in _given_options(ctx) else None, network=net).best.layout
    lay.check_gpus(gpus)
    ops = 2 * lay.num_microbatches * lay.vpp * lay.pp
    # a spinner for the big schedules (about 40,000 operations a second)
    with _spinner(f"simulating {ops:,} operations on {lay.pp} stage(s)", enabled=ops >= 20000):
        tl = run_sim(m, layout=lay, gpu=g, net=net, fw=fw, jitter=jitter, seed=seed, exact_stages=exact_stages)
    if trace:
        from ..files import check_output, write_atomic

        write_atomic(check_output(trace, "trace", force=force, inputs=(model,)), json.dumps(tl.to_trace()))
    _plot(plot, lambda: plots.timeline(tl.to_trace(), title=f"{model} on {gpus:,} x {gpu}, {lay.short()} (mb "
                                                            f"{lay.micro_batch}): one step, {tl.step_time_s:.3g} s"))
    s = {**tl.summary(), "layout": lay.short(), "micro_batch": lay.micro_batch, "trace": trace,
         "gantt": tl.gantt() if tl.pp <= 32 else []}
    if as_json:
        _emit_json(s)
        return
    reports.print_timeline(_out(), s, f"{model} on {gpus:,} x {gpu}, {lay.short()} (mb {lay.micro_batch}): "
                                      "one step on the pipeline schedule")
