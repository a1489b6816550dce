"""How far to trust an estimate: the model's own error on published runs like it.

Every estimate is a model; the published runs shipped with the package (``public`` and ``heldout``,
see :mod:`supercluster.validate`) say how far that model has been from measurements of the same
kind. :func:`evidence_for` picks the scored runs closest to a configuration, loosening the match
until at least :data:`MIN_RUNS` remain:

1. same framework family, GPU architecture, dense / MoE and GEMM precision class (16-bit or 8/4-bit)
2. same framework family, architecture and dense / MoE
3. same architecture and dense / MoE
4. dense / MoE

and reports the spread of the model's errors on them (predicted / measured - 1), computed now from
the shipped files and the current cost model, never stored. It is a record of past accuracy, not a
correction: the estimate itself is unchanged.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from .errors import InputError
from .framework import get_framework, resolve_framework
from .hardware import GpuSpec, get_gpu
from .models import ModelSpec
from .validate import SHIPPED_RUNS, _int, load_rows, parse_precision, predict_row, publication_year

#: the fewest runs a basis needs before it is reported
MIN_RUNS = 3


@dataclass(frozen=True, slots=True)
class Evidence:
    """The model's errors on the published runs closest to a configuration."""

    basis: str  # what the runs share with the configuration, e.g. "nemo-megatron, hopper, dense, 16-bit"
    ids: tuple[str, ...]
    errors: tuple[float, ...]  # predicted / measured - 1, in the order of ``ids``

    @property
    def runs(self) -> int:
        return len(self.ids)

    @property
    def median_error(self) -> float:
        return statistics.median(self.errors)

    @property
    def mape(self) -> float:
        return sum(abs(e) for e in self.errors) / len(self.errors)

    @property
    def min_error(self) -> float:
        return min(self.errors)

    @property
    def max_error(self) -> float:
        return max(self.errors)

    def as_json(self) -> dict[str, object]:
        return {"basis": self.basis, "runs": self.runs, "median_error": self.median_error, "mape": self.mape,
                "min_error": self.min_error, "max_error": self.max_error, "ids": list(self.ids)}

    def line(self) -> str:
        lo, hi, mid = 100 * self.min_error, 100 * self.max_error, 100 * self.median_error
        return (f"published runs like this one ({self.basis}: {self.runs}): the model read them "
                f"{lo:+.1f} … {hi:+.1f} % (median {mid:+.1f} %, MAPE {100 * self.mape:.1f} %); "
                "supercluster validate [--runs heldout] lists them")


def _low(precision: str) -> bool:
    return precision in ("fp8", "fp4")


@dataclass(frozen=True, slots=True)
class _Run:
    set_name: str
    id: str
    family: str
    arch: str
    moe: bool
    low: bool


@cache
def _runs() -> tuple[_Run, ...]:
    """The scored shipped runs with the features a basis matches on (no prediction yet)."""
    out = []
    for set_name in SHIPPED_RUNS:
        for row in _rows(set_name).values():
            if (row.get("scored") or "").strip().lower() != "yes":
                continue
            try:
                fw, _ = resolve_framework(row.get("framework") or "", publication_year(row.get("source") or ""))
                arch = get_gpu((row.get("gpu") or "").strip()).arch
                moe = _int(row, "moe_experts", 0) > 0
            except InputError:
                continue
            out.append(_Run(set_name, row["id"], fw.family, arch, moe, _low(parse_precision(row.get("precision", "")))))
    return tuple(out)


@cache
def _rows(set_name: str) -> dict[str, dict[str, str]]:
    return {r.get("id", ""): r for r in load_rows(set_name)}


@cache
def _error(set_name: str, run_id: str) -> float | None:
    """The model's error on one shipped run (None where it cannot price it)."""
    r = predict_row(_rows(set_name)[run_id])
    return r.error if r.supported else None


def evidence_for(model: ModelSpec, gpu: GpuSpec, framework: str, precision: str) -> Evidence | None:
    """The model's error on the published runs closest to ``model`` on ``gpu`` under ``framework`` in
    ``precision`` (see the module docstring for the order of bases); None if even the loosest basis
    has fewer than :data:`MIN_RUNS` scored runs."""
    fam, moe, low = get_framework(framework).family, model.is_moe, _low(precision)
    kind, prec = ("MoE" if moe else "dense"), ("8/4-bit" if low else "16-bit")
    bases: tuple[tuple[str, Callable[[_Run], bool]], ...] = (
        (f"{fam}, {gpu.arch}, {kind}, {prec}",
         lambda r: r.family == fam and r.arch == gpu.arch and r.moe == moe and r.low == low),
        (f"{fam}, {gpu.arch}, {kind}", lambda r: r.family == fam and r.arch == gpu.arch and r.moe == moe),
        (f"any framework, {gpu.arch}, {kind}", lambda r: r.arch == gpu.arch and r.moe == moe),
        (f"any framework or GPU, {kind}", lambda r: r.moe == moe),
    )
    for basis, match in bases:
        picked = [(r.id, e) for r in _runs() if match(r) and (e := _error(r.set_name, r.id)) is not None]
        if len(picked) >= MIN_RUNS:
            return Evidence(basis, tuple(i for i, _ in picked), tuple(e for _, e in picked))
    return None
