"""supercluster fabric: the scale-out network for N GPUs."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import InputError
from ..hardware.specs import get_gpu
from ..reports import plots
from ..reports import tables as reports
from ..units import fmt_bytes, fmt_usd, fmt_watts
from .app import (
    ForceOpt,
    GpusOpt,
    PlotOpt,
    _emit_json,
    _gpu_key,
    _num,
    _out,
    _over,
    _plot,
    app,
)


@app.command()
def fabric(
    gpus: GpusOpt = 16384,
    gpu: Annotated[str, typer.Option(help="GPU key (its default system sets node, NIC and host power)",
                                     callback=_gpu_key)] = "h100-sxm",
    switch: Annotated[str | None, typer.Option(help="scale-out switch (default by NIC speed)")] = None,
    tiers: Annotated[int | None, typer.Option(help="tiers (default: the fewest that reach --gpus)")] = None,
    oversubscription: Annotated[str | None, typer.Option(
        help="down:up of each tier below the top, leaf first, e.g. 2:1 or 1,2 (the top tier has no uplinks)")] = None,
    planes: Annotated[int | None, typer.Option(help="independent network planes",
                                               show_default="the system's NIC ports per GPU")] = None,
    sharp: Annotated[bool, typer.Option("--sharp", help="in-network all-reduce (switches that support it)")] = False,
    pue: Annotated[float, _num(help="facility PUE")] = 1.1,
    compare: Annotated[bool, typer.Option("--compare", help="every catalog switch x 1/2/4/8 planes side by side")]
    = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    plot: PlotOpt = None,
    force: ForceOpt = False,
) -> None:
    """Size the scale-out fabric for N GPUs: tiers, switches, optics, bisection, power and cost."""
    if plot is not None and not compare:
        raise InputError("plot", "draws the options side by side: use it with --compare")

    from ..hardware.specs import get_system
    from ..network.fabric import build_fabric, compare_options, fabric_summary

    g = get_gpu(gpu)
    system = get_system(g.system)
    over = _over(oversubscription)
    if compare:
        rows = compare_options(gpus, g, system, pue=pue, oversubscription=over)
        _plot(plot, lambda: plots.fabric_options(rows, title=f"{gpus:,} x {gpu}: fabric options (rail-optimized "
                                                              f"Clos, PUE {pue:g})"))
        if as_json:
            _emit_json(rows)
            return
        t = reports.fabric_options_table(rows, f"{gpus:,} x {gpu}: fabric options (rail-optimized Clos, PUE {pue:g})")
        _out().print(t)
        return
    fab = build_fabric(gpus, g, system, switch=switch, tiers=tiers, oversubscription=over, planes=planes)
    s = fabric_summary(fab, g, system, pue=pue, sharp=sharp)
    if as_json:
        _emit_json(s)
        return
    t = reports.fabric_tiers_table(s, f"{gpus:,} x {gpu} on {fab.switch.name}, {fab.planes} plane(s) of "
                                   f"{fab.link_gbit:g} Gb/s links")
    con = _out()
    con.print(t)
    con.print(f"switches {s['total_switches']:,} | transceivers {s['transceivers']:,} | bisection "
              f"{fmt_bytes(s['bisection_bytes_per_s'])}/s | max {s['max_hops']} switch hops")
    con.print(f"power {fmt_watts(s['power_w'])} at PUE {pue:g} (GPUs {fmt_watts(s['gpu_power_w'])}, hosts "
              f"{fmt_watts(s['host_power_w'])}, network {fmt_watts(s['network_power_w'])}) | capex "
              f"{fmt_usd(s['capex_usd'])} (network {fmt_usd(s['network_capex_usd'])}; hosts not priced)")
    con.print(f"all-reduce of {s['allreduce_bytes'] / 1e12:g} TB over all GPUs: {s['allreduce_time_s']:.3f} s")
