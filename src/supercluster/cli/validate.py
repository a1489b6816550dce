"""supercluster validate: the cost model against published runs."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from ..errors import InputError
from ..reports import plots
from ..reports import tables as reports
from ..validation import validate as validation
from .app import (
    ForceOpt,
    PlotOpt,
    _emit_json,
    _out,
    _plot,
    _pricing_bar,
    app,
)


@app.command()
def validate(
    runs: Annotated[str | None, typer.Option(help="runs CSV, or a shipped set: public (default) | heldout "
                                                      "(other published runs, a check only)")] = None,
    ranks: Annotated[bool, typer.Option("--ranks", help="instead: where each published layout ranks among the "
                                                        "planner's feasible layouts")] = False,
    by: Annotated[str | None, typer.Option(help="also summarise the rows by gpu | framework | kind (dense / moe): "
                                                "count, MAPE, error range")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    plot: PlotOpt = None,
    force: ForceOpt = False,
) -> None:
    """Predict every scored published run and report per-row error, MAPE and the worst row."""
    if by is not None:
        validation.check_group_key(by)  # before the (slower) predictions, and in --ranks mode too
    if plot is not None and ranks:
        raise InputError("plot", "draws the per-row errors; it does not go with --ranks")
    if ranks:

        with _pricing_bar("ranking the published layouts") as bar:
            rk = validation.published_ranks(runs, progress=bar)
        if as_json:
            _emit_json(rk)
            return
        t = reports.ranks_table(rk)
        con = _out()
        con.print(t)
        sm = rk["summary"]
        con.print(f"ranked {sm['ranked']} of {sm['rows']} rows: #1 {sm['top1']}, top 10 {sm['top10']}, top 100 "
                  f"{sm['top100']}; median percentile {sm['median_percentile']}, p90 {sm['p90_percentile']}")
        return
    with _pricing_bar("pricing runs") as bar:
        res = validation.validate(runs, progress=lambda rows: bar(rows, None))
    groups = validation.by_group(res["rows"], by) if by else None  # type: ignore[arg-type]
    _plot(plot, lambda: plots.validation(
        [dataclasses.asdict(r) for r in res["rows"]], group=by or "kind",  # type: ignore[attr-defined]
        title=f"{runs or 'public'} runs: MAPE {100 * res['mape']:.1f} %, worst {100 * res['worst_abs_error']:.1f} % "
              f"({res['worst_row']})"))
    if as_json:
        out = dict(res)
        out["rows"] = [dataclasses.asdict(r) for r in res["rows"]]  # type: ignore[attr-defined]
        if groups is not None:
            out["groups"] = groups
        _emit_json(out)
        return
    con = _out()
    con.print(reports.validation_table(res))
    if groups is not None:
        con.print(reports.groups_table(groups, f"by {by}"))
    approx = f" ({res['approximated']} approximated: no profile for their framework)" if res["approximated"] else ""
    con.print(f"MAPE {100 * res['mape']:.1f}% | worst {100 * res['worst_abs_error']:.1f}% ({res['worst_row']}) | "
              f"supported {100 * res['supported_fraction']:.0f}%{approx}")
    rk = res["ranking"]
    pairwise = "-" if rk["pairwise"] is None else f"{100 * rk['pairwise']:.0f} %"  # type: ignore[index]
    con.print(f"memory: {res['memory_misses']} row(s) that ran predicted not to fit | traffic: "
              f"{res['traffic_misses']} row(s) measured faster than their own data-parallel traffic | ranking: "
              f"{rk['groups']} "  # type: ignore[index]
              f"job(s) measured at several layouts, the predicted fastest is the measured fastest (within "
              f"{100 * rk['tie']:.0f} %) in {rk['picks']}, pairs of layouts in measured order "  # type: ignore[index]
              f"{rk['pairs_in_order']}/{rk['pairs']} ({pairwise})")  # type: ignore[index]
    for g in rk["by_group"]:  # type: ignore[index]
        if not g["pick_right"] or g["pairs_in_order"] < g["pairs"]:
            con.print(f"  {g['group']}: measured {g['measured_order']}, predicted {g['predicted_order']}")
