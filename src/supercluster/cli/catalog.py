"""supercluster catalog: what the catalogs hold."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from ..hardware.specs import gpu_catalog, system_catalog
from ..models.catalog import model_catalog
from ..reports import tables as reports
from .app import (
    CatalogKind,
    _emit_json,
    _out,
    app,
)


@app.command()
def catalog(kind: Annotated[CatalogKind, typer.Argument(help="what to list")] = CatalogKind.gpus,
            as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """List the built-in GPUs, systems, models, network parts or framework profiles with their figures."""
    if kind.value == "network":
        from .._toml import load_package_toml

        net = {k: v for k, v in load_package_toml("network.toml").items() if k in ("switches", "nics", "scaleup",
                                                                                     "optics", "collectives")}
        if as_json:
            _emit_json(net)
            return
        from rich.table import Table

        con = _out()
        for section, items in net.items():
            if section == "collectives":
                continue
            t = Table(title=section)
            cols = sorted({c for v in items.values() for c in v})
            t.add_column("key")
            for c in cols:
                t.add_column(c)
            for key, v in items.items():
                t.add_row(key, *[str(v.get(c, "")) for c in cols])
            con.print(t)
        return
    if kind.value == "frameworks":
        from ..parallelism.framework import framework_catalog

        fws = framework_catalog()
        if as_json:
            _emit_json({k: dataclasses.asdict(v) for k, v in fws.items()})
            return
        _out().print(reports.frameworks_table(fws))
        return
    data = {"gpus": gpu_catalog, "systems": system_catalog, "models": model_catalog}[kind.value]()
    if as_json:
        _emit_json({k: dataclasses.asdict(v) for k, v in data.items()})
        return
    table = {"gpus": reports.gpus_table, "systems": reports.systems_table, "models": reports.models_table}[kind.value]
    _out().print(table(data))  # type: ignore[operator]
