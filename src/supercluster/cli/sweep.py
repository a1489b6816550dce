"""supercluster sweep: a grid of scenarios priced into DuckDB, resumable."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console

from ..formats.load import load_model
from ..hardware.specs import get_gpu
from ..parallelism.layout import Layout
from ..reports import plots
from ..reports import tables as reports
from .app import (
    CLI_FRAMEWORK,
    ForceOpt,
    FrameworkOpt,
    PlotOpt,
    _out,
    _plot,
    app,
)


@app.command()
def sweep(
    db: Annotated[str, typer.Option(help="DuckDB file (new, or resumed if same grid)")] = "sweep.duckdb",
    models: Annotated[str, typer.Option(help="comma-separated model keys")] = "llama3-8b,llama3-70b",
    gpu_types: Annotated[str, typer.Option("--gpu-types", help="comma-separated GPU keys")] = "h100-sxm,b200",
    sizes: Annotated[str, typer.Option(help="comma-separated GPU counts")] = "64,256,1024",
    tp: Annotated[str, typer.Option(help="TP values")] = "1,2,4,8",
    pp: Annotated[str, typer.Option(help="PP values")] = "1,2,4,8",
    cp: Annotated[str, typer.Option(help="CP values")] = "1,2",
    micro_batch: Annotated[str, typer.Option(help="micro-batch values")] = "1,2",
    recompute: Annotated[str, typer.Option(help="recompute values")] = "none,selective,full",
    zero: Annotated[str, typer.Option(help="ZeRO stages")] = "1,3",
    seq_len: Annotated[str, typer.Option(help="sequence lengths")] = "8192",
    global_batch: Annotated[str, typer.Option(help="global batch sizes")] = "1024",
    precision: Annotated[str, typer.Option(help="precisions")] = "bf16",
    framework: FrameworkOpt = CLI_FRAMEWORK,
    executor: Annotated[str, typer.Option(help="local (processes) | ray (a Ray cluster, --address; a local Ray "
                                                "instance takes seconds to start, then prices as fast as local "
                                                "processes)")] = "local",
    address: Annotated[str | None, typer.Option(help="Ray cluster address (with --executor ray)")] = None,
    workers: Annotated[int, typer.Option(help="local processes or Ray CPUs")] = 2,
    chunk: Annotated[int, typer.Option(help="scenarios per task and per transaction")] = 500,
    log: Annotated[bool, typer.Option("--log", help="print a line per committed chunk instead of a bar")] = False,
    plot: PlotOpt = None,
    force: ForceOpt = False,
) -> None:
    """Price a grid of scenarios into DuckDB; rerun the same command to resume after a kill.

    Prints, on stderr, the fastest layout that fits for each model, GPU type, size, batch, sequence
    and precision (from the database: a resumed sweep reports every scenario stored); stdout's one
    line is the JSON count of scenarios."""
    from rich.progress import Progress

    from ..network.fabric import largest_fabric
    from ..parallelism.framework import get_framework
    from ..planner.sweep import SweepGrid, best_per_cell, parse_axis, print_progress_line, run_sweep

    get_framework(framework)
    grid = SweepGrid(model=parse_axis(models, str, "models"), gpu=parse_axis(gpu_types, str, "gpu-types"),
                     gpus=parse_axis(sizes, int, "sizes", maximum=largest_fabric()[0]), tp=parse_axis(tp, int, "tp"),
                     pp=parse_axis(pp, int, "pp"),
                     cp=parse_axis(cp, int, "cp"), micro_batch=parse_axis(micro_batch, int, "micro-batch"),
                     recompute=parse_axis(recompute, str, "recompute"), zero=parse_axis(zero, int, "zero", 0),
                     seq_len=parse_axis(seq_len, int, "seq-len"),
                     global_batch=parse_axis(global_batch, int, "global-batch"),
                     precision=parse_axis(precision, str, "precision"), framework=framework)
    for m in grid.model:
        load_model(m)
    for g in grid.gpu:
        get_gpu(g)
    for p in grid.precision:  # values no scenario could use: one error now, not a table of failed rows
        Layout(precision=p)
    for r in grid.recompute:
        Layout(recompute=r)
    for z in grid.zero:
        Layout(zero_stage=z)
    if log:
        res = run_sweep(grid, db, executor=executor, workers=workers, chunk=chunk, address=address,
                        progress=print_progress_line)
    else:
        with Progress(console=_out()) as bar:
            task = bar.add_task("scenarios", total=grid.size)
            res = run_sweep(grid, db, executor=executor, workers=workers, chunk=chunk, address=address,
                            progress=lambda done, total: bar.update(task, completed=done))
    cells = best_per_cell(db)
    Console(stderr=True, width=160).print(reports.sweep_table(cells, f"{db}: the fastest layout that fits, per cell"))
    _plot(plot, lambda: plots.sweep(cells, title=f"{db} ({grid.framework})"))
    typer.echo(json.dumps(res))
