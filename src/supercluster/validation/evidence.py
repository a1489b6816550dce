"""How far to trust an estimate: the model's own error on published runs like it.

Every estimate is a model; the published runs shipped with the package (``public`` and ``heldout``,
see :mod:`supercluster.validation.validate`) say how far that model has been from measurements of the same
kind. :func:`evidence_for` picks the scored runs closest to a configuration, loosening the match
until at least :data:`MIN_RUNS` remain:

1. same framework family, GPU architecture, kind (dense, MoE, or a hybrid with Mamba or Gated DeltaNet
   layers) and GEMM precision class (16-bit or 8/4-bit)
2. same framework family, architecture and kind
3. same architecture and kind
4. kind

and reports the spread of the model's errors on them (predicted / measured - 1), computed now from
the shipped files and the current cost model, never stored. It is a record of past accuracy, not a
correction: the estimate itself is unchanged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from ..errors import InputError
from ..formats.runs import SHIPPED_RUNS, _int, load_rows, parse_precision, publication_year, row_model
from ..hardware.specs import GpuSpec, get_gpu
from ..models.spec import ModelSpec
from ..parallelism.framework import get_framework
from ..parallelism.published import resolve_framework
from .validate import predict_row

#: the fewest runs a basis needs before it is reported
MIN_RUNS = 3


@dataclass(frozen=True, slots=True)
class Evidence:
    """The model's errors on the published runs closest to a configuration."""

    basis: str  # what the runs share with the configuration, e.g. "nemo-megatron, hopper, dense, 16-bit"
    ids: tuple[str, ...]
    errors: tuple[float, ...]  # predicted / measured - 1, in the order of ``ids``
    #: the (at most :data:`NEAREST`) runs of the basis closest in active parameters, GPU count and
    #: sequence length, closest first (an ordering for display, not a weight in any number)
    nearest: tuple[str, ...] = ()
    #: how far the configuration lies outside these runs (GPU count, sequence, model size past
    #: :data:`EXTRAPOLATION` times theirs), said beside the errors; empty where it lies among them
    beyond: tuple[str, ...] = ()

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

    def error_of(self, run_id: str) -> float:
        return self.errors[self.ids.index(run_id)]

    def as_json(self) -> dict[str, object]:
        return {"basis": self.basis, "runs": self.runs, "median_error": self.median_error, "mape": self.mape,
                "min_error": self.min_error, "max_error": self.max_error, "ids": list(self.ids),
                "nearest": [{"id": i, "error": self.error_of(i)} for i in self.nearest],
                "extrapolated": list(self.beyond)}

    def line(self) -> str:
        lo, hi, mid = 100 * self.min_error, 100 * self.max_error, 100 * self.median_error
        near = ", ".join(f"{i} {100 * self.error_of(i):+.1f} %" for i in self.nearest)
        closest = f"; closest: {near}" if near else ""
        beyond = f". Extrapolated, so these errors may not apply: {'; '.join(self.beyond)}" if self.beyond else ""
        return (f"published runs like this one ({self.basis}: {self.runs}): predicted vs measured step "
                f"{lo:+.1f} … {hi:+.1f} % (median {mid:+.1f} %, MAPE {100 * self.mape:.1f} %; below 0: predicted "
                f"faster){closest}; supercluster validate [--runs heldout] lists them{beyond}")


def _low(precision: str) -> bool:
    return precision in ("fp8", "fp4")


def model_kind(model: ModelSpec) -> str:
    """The kind of model a basis matches on, as printed: dense, MoE, Mamba hybrid or Gated DeltaNet hybrid
    (:attr:`ModelSpec.kind`)."""
    return {"moe": "MoE", "mamba-hybrid": "Mamba hybrid", "gdn-hybrid": "Gated DeltaNet hybrid"}.get(model.kind,
                                                                                                   model.kind)


def no_runs_line(model: ModelSpec) -> str:
    """What the evidence line says where fewer than :data:`MIN_RUNS` shipped runs are of the model's
    kind (:func:`evidence_for` None): none, or the few there are with the model's error on each."""
    kind = model_kind(model)
    few = [(r.id, e) for r in _runs() if r.kind == kind and (e := _error(r.set_name, r.id)) is not None]
    if not few:
        return (f"published runs like this one: none ({kind}: no shipped run of this kind), so this "
                "estimate is unchecked against measurement")
    runs = ", ".join(f"{i} {100 * e:+.1f} %" for i, e in few)
    return (f"published runs like this one ({kind}): only {len(few)}, fewer than {MIN_RUNS}: {runs}; so this "
            "estimate is barely checked against measurement")


@dataclass(frozen=True, slots=True)
class _Run:
    set_name: str
    id: str
    family: str
    arch: str
    kind: str
    low: bool
    active_params: float
    gpus: int
    seq_len: int
    gpu: str = ""


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
                spec = row_model(row)
                gpus, seq = _int(row, "num_gpus"), _int(row, "seq_len")
            except InputError:
                continue
            out.append(_Run(set_name, row["id"], fw.family, arch, model_kind(spec),
                            _low(parse_precision(row.get("precision", ""))), float(spec.num_active_params), gpus, seq,
                            (row.get("gpu") or "").strip()))
    return tuple(out)


@cache
def _rows(set_name: str) -> dict[str, dict[str, str]]:
    return {r.get("id", ""): r for r in load_rows(set_name)}


@cache
def _error(set_name: str, run_id: str) -> float | None:
    """The model's error on one shipped run (None where it cannot price it)."""
    r = predict_row(_rows(set_name)[run_id])
    return r.error if r.supported else None


#: closest runs named with the evidence
NEAREST = 3


def _distance(r: _Run, active: float, gpus: int | None, seq_len: int | None, gpu: str = "") -> float:
    """How far a run is from the configuration: orders of magnitude apart in active parameters, half
    weight on GPU count, a quarter on sequence length, and half a unit for another GPU of the
    architecture (a display order only)."""
    d = abs(math.log(r.active_params / active)) + (0.5 if gpu and r.gpu != gpu else 0.0)
    if gpus:
        d += 0.5 * abs(math.log(r.gpus / gpus))
    if seq_len:
        d += 0.25 * abs(math.log(r.seq_len / seq_len))
    return d


#: a configuration more than this many times past the runs of its basis (or below them) is extrapolated
EXTRAPOLATION = 4.0


def _beyond(runs: list[_Run], active: float, num_gpus: int | None, seq_len: int | None) -> tuple[str, ...]:
    """What of a configuration lies past :data:`EXTRAPOLATION` times the range of ``runs``."""
    out = []
    for what, value, seen, unit in (("GPUs", num_gpus, [r.gpus for r in runs], ""),
                                    ("tokens a sequence", seq_len, [r.seq_len for r in runs], ""),
                                    ("active parameters", active / 1e9, [r.active_params / 1e9 for r in runs], " B")):
        if value is None or not seen:
            continue
        lo, hi = min(seen), max(seen)

        def show(x: float, unit: str = unit) -> str:
            return f"{x:,.0f}{unit}" if x >= 10 else f"{x:.2g}{unit}"

        if value > EXTRAPOLATION * hi:
            out.append(f"{show(value)} {what}, the runs reach {show(hi)}")
        elif value * EXTRAPOLATION < lo:
            out.append(f"{show(value)} {what}, the runs start at {show(lo)}")
    return tuple(out)


def evidence_for(model: ModelSpec, gpu: GpuSpec, framework: str, precision: str, num_gpus: int | None = None,
                 seq_len: int | None = None) -> Evidence | None:
    """The model's error on the published runs closest to ``model`` on ``gpu`` under ``framework`` in
    ``precision`` (see the module docstring for the order of bases), naming the :data:`NEAREST` of them
    closest in size, GPU count (``num_gpus``) and ``seq_len``; None if even the loosest basis has
    fewer than :data:`MIN_RUNS` scored runs."""
    fam, kind, low = get_framework(framework).family, model_kind(model), _low(precision)
    prec = "8/4-bit" if low else "16-bit"
    bases: tuple[tuple[str, Callable[[_Run], bool]], ...] = (
        (f"{fam}, {gpu.arch}, {kind}, {prec}",
         lambda r: r.family == fam and r.arch == gpu.arch and r.kind == kind and r.low == low),
        (f"{fam}, {gpu.arch}, {kind}", lambda r: r.family == fam and r.arch == gpu.arch and r.kind == kind),
        (f"any framework, {gpu.arch}, {kind}", lambda r: r.arch == gpu.arch and r.kind == kind),
        (f"any framework or GPU, {kind}" + ("" if any(r.arch == gpu.arch for r in _runs()) else
                                              f"; none shipped on {gpu.arch}"), lambda r: r.kind == kind),
    )
    active = float(model.num_active_params)
    for basis, match in bases:
        picked = [(r, e) for r in _runs() if match(r) and (e := _error(r.set_name, r.id)) is not None]
        if len(picked) >= MIN_RUNS:
            near = sorted(picked, key=lambda x: (_distance(x[0], active, num_gpus, seq_len, gpu.key),
                                                 x[0].id))[:NEAREST]
            return Evidence(basis, tuple(r.id for r, _ in picked), tuple(e for _, e in picked),
                            tuple(r.id for r, _ in near), _beyond([r for r, _ in picked], active, num_gpus, seq_len))
    return None
