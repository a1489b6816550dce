"""Command line: each command parses its options, calls one library function and renders the
result (``supercluster.reports``). User mistakes print one ``error: <field>: ...`` line and exit 2."""

from __future__ import annotations

import sys

import typer

from ..errors import InputError
from . import calibrate, catalog, estimate, fabric, plan, run, simulate, sweep, validate  # noqa: F401 (commands)
from .app import app

__all__ = ["app", "main"]


def main() -> None:
    """Entry point: user mistakes print one line and exit 2, never a traceback."""
    try:
        app(standalone_mode=True)
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
