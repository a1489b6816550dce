"""Predict the published runs of a CSV (``../shared/validation/public-runs.csv`` format).

Each scored row is predicted from its own columns only: architecture, GPU key, framework,
layout, batch, precision, recompute and ZeRO/FSDP (:func:`supercluster.formats.runs.row_setup`). Values
the model does not know fall back to documented defaults (the framework's default recompute and ZeRO
stage; an unknown framework gets the default profile), and the fallback is written into the row's
``reason``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError, require
from ..formats.runs import iter_rows, load_rows, row_model, row_setup  # noqa: F401 (row_model: for callers)
from ..job import Job, price_many
from ..parallelism.published import framework_named
from ..perf.step import StepBreakdown


@dataclass(frozen=True, slots=True)
class RowResult:
    id: str
    predicted_step_time_s: float | None
    measured_step_time_s: float | None
    error: float | None
    supported: bool
    reason: str
    group: str = ""
    layout: str = ""
    gpu: str = ""
    framework: str = ""
    kind: str = ""  # dense | moe
    #: memory per GPU the model predicts, and whether it fits the GPU (a run that ran and does not is a
    #: model error: counted as a memory miss)
    memory_per_gpu_bytes: float | None = None
    fits: bool | None = None
    #: the layout as priced, whole (Layout.label: degrees, micro-batch, ZeRO, recompute, SP)
    layout_label: str = ""
    #: the step's data-parallel traffic at the network's rate, none hidden (StepBreakdown.dp_traffic_s): a
    #: measured step shorter than it moved less than the row states (counted as a traffic miss)
    dp_traffic_s: float | None = None
    #: the row names no framework profile: priced with the default one (its reason says which), so its
    #: figure is an approximation, counted apart from the rows of a known framework
    approximated: bool = False

    @property
    def traffic_miss(self) -> bool:
        """The run measured faster than its own data-parallel traffic, as the row states it, can run."""
        return bool(self.supported and self.measured_step_time_s and self.dp_traffic_s
                    and self.dp_traffic_s > self.measured_step_time_s)


#: What ``by_group`` can summarise the rows by.
GROUP_KEYS = ("gpu", "framework", "kind")


def published_ranks(path: str | Path | None = None,
                    progress: Callable[[int, int], None] | None = None) -> dict[str, object]:
    """For every scored row, the rank of its published layout among the planner's feasible layouts
    (one plan a row: seconds each for the large MoE rows; ``progress(done, total)`` after each)."""
    from ..planner.search import plan

    out: list[dict[str, object]] = []
    scored = [r for r in load_rows(path) if (r.get("scored") or "").strip().lower() == "yes"]
    for row in scored:
        if progress is not None:
            progress(len(out), len(scored))
        try:
            job, _ = Job.from_row(row)
            layout = job.layout
            res = plan(job.model, job.gpu, layout.num_gpus, global_batch=layout.global_batch, seq_len=layout.seq_len,
                       framework=job.framework, precisions=(layout.precision,), top=1, network=job.network)
        except InputError as exc:
            out.append({"id": row.get("id"), "rank": None, "feasible": 0, "reason": str(exc)})
            continue
        rank = res.rank_of(layout)
        out.append({"id": row.get("id"), "rank": rank, "feasible": res.feasible, "best": res.best.layout.short(),
                    "best_step_time_s": res.best.step_time_s,
                    "reason": "" if rank else "published layout outside the search space or predicted not to fit"})
    ranked = [r for r in out if r["rank"]]
    pct = sorted(100.0 * r["rank"] / r["feasible"] for r in ranked)  # type: ignore[operator]
    summary = {
        "rows": len(out), "ranked": len(ranked),
        "top1": sum(r["rank"] == 1 for r in ranked), "top10": sum(r["rank"] <= 10 for r in ranked),  # type: ignore[operator]
        "top100": sum(r["rank"] <= 100 for r in ranked),  # type: ignore[operator]
        "median_percentile": float(np.median(pct)) if pct else None,
        "p90_percentile": float(np.percentile(pct, 90)) if pct else None,
    }
    return {"rows": out, "summary": summary}


def predict_row(row: dict[str, str]) -> RowResult:
    """One row of a runs CSV predicted (:func:`predict_rows` of one)."""
    return predict_rows([row])[0]


def predict_rows(rows: list[dict[str, str]]) -> list[RowResult]:
    """Rows of a runs CSV predicted, each from its own columns, in order; the rows that share a model, GPU,
    GPU count and framework are priced together (:func:`supercluster.job.price_many`)."""
    read = [_read_row(row) for row in rows]
    jobs = [x[0] for x in read if not isinstance(x, RowResult)]
    try:
        priced = iter(price_many(jobs))
    except InputError:
        # a job that passed its checks and still cannot be priced must not stop the file: price one by
        # one, and the row that fails is unsupported with its reason
        priced = iter([_price_one(job) for job in jobs])
    out = []
    for row, x in zip(rows, read, strict=True):
        if isinstance(x, RowResult):
            out.append(x)
            continue
        b = next(priced)
        out.append(_result(row, *x, b) if isinstance(b, StepBreakdown) else
                   RowResult(row.get("id", "?"), None, x[2], None, False, b, "",
                             gpu=(row.get("gpu") or "").strip(), framework=(row.get("framework") or "").strip()))
    return out


def _price_one(job: Job) -> StepBreakdown | str:
    """A job's step, or why it cannot be priced."""
    try:
        return price_many([job])[0]
    except InputError as exc:
        return str(exc)


def _read_row(row: dict[str, str]) -> RowResult | tuple[Job, str | None, float | None]:
    """A row's checked job, the note of what it left to defaults and its measured step time; or, where the
    row cannot be priced, its result (unsupported, with the reason)."""
    rid = row.get("id", "?")
    raw = (row.get("step_time_s") or "").strip()
    try:
        measured: float | None = float(raw) if raw else None
    except ValueError:
        measured = math.nan
    gpu_key, fw_name = (row.get("gpu") or "").strip(), (row.get("framework") or "").strip()
    if measured is not None and not (math.isfinite(measured) and measured > 0):
        return RowResult(rid, None, None, None, False, f"step_time_s: {raw!r} is not a positive number of seconds",
                         "", gpu=gpu_key, framework=fw_name)
    try:
        job, note = Job.from_row(row)
        return job, note, measured
    except InputError as exc:
        return RowResult(rid, None, measured, None, False, str(exc), "", gpu=gpu_key, framework=fw_name)


def _result(row: dict[str, str], job: Job, note: str | None, measured: float | None, b: StepBreakdown) -> RowResult:
    err = b.step_time_s / measured - 1.0 if measured else None
    fw, layout = job.framework, job.layout
    # one job measured at several layouts: the same model, GPU, GPU count, batch, sequence, GEMM precision and
    # framework (as the model reads them: a release or an fp8 recipe of the same framework is the same job)
    group = "|".join(str(x) for x in ((row.get("model_name") or "").strip(), job.gpu.key, layout.num_gpus,
                                      layout.global_batch, layout.seq_len, layout.precision, fw.family))
    reason = "; ".join(x for x in (note, f"{fw.key}, {layout.recompute_label} recompute, zero {layout.zero_stage}")
                       if x)
    return RowResult(row.get("id", "?"), b.step_time_s, measured, err, True, reason, group, layout.short(),
                     gpu=job.gpu.key, framework=fw.key, kind=job.model.kind,
                     memory_per_gpu_bytes=b.memory_per_gpu_bytes, fits=b.fits, layout_label=layout.label(),
                     dp_traffic_s=b.dp_traffic_s, approximated=not framework_named(row.get("framework") or ""))


#: Rows read, checked and priced together by :func:`validate` (memory stays bounded on any file).
CHUNK_ROWS = 65536


def validate(path: str | Path | None = None, progress: Callable[[int], None] | None = None) -> dict[str, object]:
    """Predict every scored row; per-row error, MAPE, worst row, ranking agreement. The file is streamed
    (:func:`supercluster.formats.runs.iter_rows`) and priced :data:`CHUNK_ROWS` rows at a time;
    ``progress(rows_read)`` is called after each chunk."""
    results: list[RowResult] = []
    chunk: list[dict[str, str]] = []
    for i, row in enumerate(iter_rows(path), 1):
        if (row.get("scored") or "").strip().lower() == "yes":
            chunk.append(row)
        if len(chunk) == CHUNK_ROWS:
            results += predict_rows(chunk)
            chunk = []
        if progress is not None and i % CHUNK_ROWS == 0:
            progress(i)
    results += predict_rows(chunk)
    require(bool(results), "runs", f"{path or 'public'} has no scored rows (scored = yes): nothing to validate")
    errs = [abs(r.error) for r in results if r.supported and r.error is not None]
    n = len(results)
    # Unsupported rows count as misses of 100 %.
    miss = [1.0 for r in results if not r.supported]
    mape = (sum(errs) + sum(miss)) / n
    worst = max(errs + miss, default=0.0)
    worst_row = max((r for r in results if r.error is not None), key=lambda r: abs(r.error or 0), default=None)
    return {
        "rows": results, "mape": mape, "worst_abs_error": worst,
        "worst_row": worst_row.id if worst_row else None,
        "supported_fraction": (n - len(miss)) / n, "ranking": ranking(results),
        "memory_misses": sum(r.fits is False for r in results),
        "traffic_misses": sum(r.traffic_miss for r in results),
        "approximated": sum(r.approximated for r in results),
    }
def check_group_key(key: str) -> None:
    require(key in GROUP_KEYS, "by", f"unknown {key!r}; allowed: {', '.join(GROUP_KEYS)}")


def by_group(results: list[RowResult], key: str) -> list[dict[str, object]]:
    """Rows summarised by ``key`` (gpu, framework or kind): count, MAPE and the error range of each
    group, unsupported rows counted as misses of 100 % as in the overall MAPE; largest group first."""
    check_group_key(key)
    groups: dict[str, list[RowResult]] = {}
    for r in results:
        groups.setdefault(getattr(r, key) or "?", []).append(r)
    out = []
    for name, rs in groups.items():
        errs = [r.error for r in rs if r.supported and r.error is not None]
        misses = sum(not r.supported for r in rs)
        out.append({"group": name, "rows": len(rs), "unsupported": misses,
                    "mape": (sum(abs(e) for e in errs) + misses) / len(rs),
                    "min_error": min(errs, default=None), "max_error": max(errs, default=None)})
    return sorted(out, key=lambda g: (-int(g["rows"]), str(g["group"])))  # type: ignore[call-overload]


#: measured steps this close (relative) are a tie: no order between them, and either is a right pick
RANK_TIE = 0.02


def _order(a: float, b: float) -> int:
    return 0 if abs(a - b) < RANK_TIE * min(a, b) else (1 if a > b else -1)


def _pairs(rs: list[RowResult]) -> tuple[int, int]:
    """Pairs of rows of different layouts whose measured steps are not a tie, and how many of them the
    prediction orders as measured."""
    meas = np.array([r.measured_step_time_s for r in rs], dtype=float)
    pred = np.array([r.predicted_step_time_s for r in rs], dtype=float)
    labels = np.unique([r.layout_label for r in rs], return_inverse=True)[1]
    i, j = np.triu_indices(len(rs), k=1)
    a, b = meas[i], meas[j]
    keep = (np.abs(a - b) >= RANK_TIE * np.minimum(a, b)) & (labels[i] != labels[j])
    return int(keep.sum()), int(((pred[i] > pred[j]) == (a > b))[keep].sum())


def ranking(results: list[RowResult]) -> dict[str, object]:
    """Where one job (model, GPU, GPU count, global batch, sequence, precision, framework) was measured
    at several layouts: is the layout predicted fastest the measured fastest (within :data:`RANK_TIE`),
    and how many pairs of layouts does the prediction order as measured (measured ties left out)?
    Rows of one layout (the same layout measured in two releases or fp8 recipes, say) form no pair,
    and the pick is right if any row of the predicted fastest layout ran within the tie of the fastest."""
    groups: dict[str, list[RowResult]] = {}
    for r in results:
        if r.supported and r.predicted_step_time_s and r.measured_step_time_s:
            groups.setdefault(r.group, []).append(r)
    detail, picks, pairs, right = [], 0, 0, 0
    for g, rs in groups.items():
        if len({r.layout_label for r in rs}) < 2:
            continue
        fastest = min(r.measured_step_time_s for r in rs)  # type: ignore[type-var]
        pick = min(rs, key=lambda r: r.predicted_step_time_s or 0.0).layout_label
        ok = any(_order(r.measured_step_time_s, fastest) == 0 for r in rs  # type: ignore[arg-type]
                 if r.layout_label == pick)
        n_pairs, n_right = _pairs(rs)
        picks, pairs, right = picks + ok, pairs + n_pairs, right + n_right
        detail.append({"group": g, "rows": len(rs),
                       "measured_order": [r.id for r in sorted(rs, key=lambda r: r.measured_step_time_s or 0.0)],
                       "predicted_order": [r.id for r in sorted(rs, key=lambda r: r.predicted_step_time_s or 0.0)],
                       "pick": pick, "pick_right": ok, "pairs": n_pairs, "pairs_in_order": n_right})
    return {"groups": len(detail), "picks": picks, "pairs": pairs, "pairs_in_order": right,
            "pairwise": right / pairs if pairs else None, "tie": RANK_TIE, "by_group": detail}
