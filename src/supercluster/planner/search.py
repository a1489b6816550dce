"""The planner: every legal layout of a job priced in one vectorized pass, the fastest that fits on top.

The search space is the cross product of TP, PP, CP, EP, interleaving (vpp), micro-batch, ZeRO
stage, recompute policy, sequence parallelism and (optionally) precision, filtered by the same
divisibility rules :class:`~supercluster.parallelism.layout.Layout` enforces, then priced by
:func:`~supercluster.perf.step.step_columns` — the cost model the estimate uses. Only the winners
become :class:`Layout` objects.

Objectives: ``time`` (step time, hence also time to train a token budget), ``cost`` (dollars per
token: GPU-hours at a price) and ``energy`` (joules per token). With a fixed GPU count the three
rank alike, so for ``cost`` and ``energy`` the planner may also use fewer GPUs of the cluster
(N, N/2, N/4, N/8): a smaller job is often cheaper per token though slower.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from ..errors import InputError, require
from ..hardware.specs import GpuSpec, get_system
from ..job import Job, check_job, default_network
from ..job import price as price_job
from ..models.spec import ModelSpec
from ..network import costs
from ..network.fabric import check_gpu_count
from ..network.twolevel import Network
from ..parallelism import rules
from ..parallelism.framework import Framework, with_suffixes
from ..parallelism.layout import Layout
from ..parallelism.suffixes import CP_A2A_SUFFIX
from ..perf.columns import LOWP_CODE, RECOMPUTE_CODE, RECOMPUTE_NAME, module_bits, module_names, row_layout
from ..perf.compute import check_kernels
from ..perf.step import LEDGER, step_columns

OBJECTIVES = ("time", "cost", "energy")
MICRO_BATCHES = (1, 2, 4, 8, 16, 32)
VPP = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16)
ZERO = (0, 1, 2, 3)
MAX_CP = 32
#: settings a search can be told to keep (``plan(fixed=...)``): column -> the field users know
FIXABLE = {"mb": "micro_batch", "zero": "zero_stage", "recompute": "recompute", "rcm": "recompute_modules",
           "sp": "sequence_parallel", "rep": "dp_replicate"}
#: Hybrid sharding searched: FSDP (ZeRO-3) shard groups of this many scale-up domains (the domain's largest
#: power of two GPUs: 8 on an HGX node, 64 of an NVL72), their replicas all-reducing the gradient shards;
#: each only where the framework replicates shard groups and the group is smaller than dp x cp. (ZeRO 1-2,
#: which gather and reduce once a step, gain a fraction of a percent from it: priced when a layout asks.)
SHARD_DOMAINS = (1, 4, 16, 64)

#: Selective recompute modules searched for MoE models where the framework has them: the default
#: (core_attn) and the cheap pair the Megatron-Bridge MoE recipes use (layernorm, moe_act).
MOE_MODULE_SETS = ((), ("layernorm", "moe_act"))


#: scores this close count as a tie in ``PlanResult.rank_of``
TIE_RTOL = 1e-12


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One priced layout: enough to print, export or re-estimate it."""

    layout: Layout
    num_gpus: int
    step_time_s: float
    mfu: float
    memory_per_gpu_bytes: float
    cost_usd_per_mtok: float
    energy_j_per_token: float
    ledger: dict[str, float]
    rank: int
    #: False where rows the planner left at a lower bound could place this one (a Pareto entry far
    #: behind the best): ``rank`` is then an upper bound of the rank (``PlanResult.rank_of`` is exact)
    rank_exact: bool = True

    def budget(self, tokens: float) -> dict[str, float]:
        """Failure-free days, dollars and MWh to train ``tokens`` with this layout."""
        steps = tokens / (self.layout.global_batch * self.layout.seq_len)
        return {"tokens": tokens, "days_to_train": steps * self.step_time_s / 86400.0,
                "cost_usd": self.cost_usd_per_mtok * tokens / 1e6,
                "energy_mwh": self.energy_j_per_token * tokens / 3.6e9}

    def to_json(self) -> dict[str, object]:
        lay = self.layout
        return {
            # "label": the whole layout as estimate --layout reads it back (micro-batch, ZeRO, recompute)
            "layout": lay.short(), "label": lay.label(),
            "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "cp": lay.cp, "ep": lay.ep, "vpp": lay.vpp,
            "micro_batch": lay.micro_batch, "global_batch": lay.global_batch, "seq_len": lay.seq_len,
            "precision": lay.precision, "recompute": lay.recompute,
            "recompute_modules": list(lay.recompute_modules), "zero_stage": lay.zero_stage,
            "sequence_parallel": bool(lay.sequence_parallel), "num_gpus": self.num_gpus,
            "step_time_s": self.step_time_s, "mfu": self.mfu, "memory_per_gpu_bytes": self.memory_per_gpu_bytes,
            "cost_usd_per_mtok": self.cost_usd_per_mtok, "energy_j_per_token": self.energy_j_per_token,
            "ledger": self.ledger, "rank": self.rank, "rank_exact": self.rank_exact,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanResult:
    best: Candidate
    top: list[Candidate]
    pareto: list[Candidate]
    why: list[tuple[str, float]]  # ledger lines (winner - runner-up), most decisive first
    evaluated: int
    feasible: int
    seconds: float
    objective: str
    #: every layout searched; ``step_time_s``-derived ``score`` is a lower bound on rows still marked
    #: ``schedule_bound`` (uneven interleavings no better than the top and off the Pareto front)
    columns: dict[str, np.ndarray] = field(repr=False)
    #: prices given rows by their schedule where they still hold a bound, updating score and rank
    refine: Callable[[np.ndarray], bool] | None = field(default=None, repr=False, compare=False)
    #: a layout's score by the objective, priced by the cost model as the search prices it, or None
    #: where it does not fit
    score_of: Callable[[Layout], float | None] | None = field(default=None, repr=False, compare=False)
    #: an MoE plan: the best fitting layout at each expert-parallel degree searched, by EP
    by_ep: list[Candidate] = field(default_factory=list)
    #: where the best layout rings K/V over cp > 1 ranks (a Transformer Engine p2p profile): its step
    #: under all-to-all CP instead (the framework's ``+cp-a2a``), or None (not runnable, or no such ring)
    cp_a2a_step_time_s: float | None = None

    def to_json(self) -> dict[str, object]:
        """What ``supercluster plan --json`` prints (besides a budget and the evidence)."""
        return {"best": self.best.to_json(), "top": [c.to_json() for c in self.top],
                "pareto": [c.to_json() for c in self.pareto], "why": dict(self.why), "evaluated": self.evaluated,
                "feasible": self.feasible, "seconds": self.seconds, "objective": self.objective,
                **({"by_ep": [c.to_json() for c in self.by_ep]} if self.by_ep else {}),
                **({"cp_a2a_step_time_s": self.cp_a2a_step_time_s} if self.cp_a2a_step_time_s is not None else {})}

    def rank_of(self, layout: Layout) -> int | None:
        """1-based rank of ``layout`` among the feasible layouts by the objective: one more than the
        searched layouts that score strictly better; None where it does not fit or cannot run. The layout is priced
        whole, as estimate prices it (its recompute layers, gradient accumulation and pipeline layout
        too, which the search does not vary); rows whose bound could place them ahead are priced
        exactly first."""
        assert self.score_of is not None, "a PlanResult from plan() prices layouts"
        score = self.score_of(layout)
        if score is None:
            return None
        c = self.columns
        ahead = score * (1.0 - TIE_RTOL)  # (the same layout priced alone or among others: equal to rounding)
        if self.refine is not None:
            self.refine(np.flatnonzero(c["feasible"] & (c["score"] < ahead)))
        return 1 + int(np.count_nonzero(c["feasible"] & (c["score"] < ahead)))


def _divisors(n: int, most: int | None = None) -> list[int]:
    """The divisors of ``n`` in increasing order, those up to ``most`` where given. Found up to the
    square root of ``n`` (a GPU count of 2^31 has 32 of them, found in 46,341 steps, not 2^31), or
    by trial up to ``most`` where that is fewer steps: the work is bounded by the smaller of the two,
    whatever ``n`` is."""
    if most is not None and most * most < n:
        return [d for d in range(1, most + 1) if n % d == 0]
    small, large, d = [], [], 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    out = small + large[::-1]
    return out if most is None else [d for d in out if d <= most]


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def _cross(base: dict[str, np.ndarray], name: str, values: list[int]) -> dict[str, np.ndarray]:
    n, k = len(next(iter(base.values()))), len(values)
    out = {key: np.repeat(col, k) for key, col in base.items()}
    out[name] = np.tile(np.asarray(values, dtype=np.int64), n)
    return out


def _keep(cols: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    return {k: v[mask] for k, v in cols.items()}


def candidate_columns(model: ModelSpec, gpu: GpuSpec, num_gpus: int, *, global_batch: int, seq_len: int,
                      precisions: tuple[str, ...] = ("bf16",), gpu_counts: tuple[int, ...] | None = None,
                      max_tp: int | None = None, max_cp: int = MAX_CP, max_pp: int | None = None,
                      max_vpp: int | None = None, extra_pp_layers: int = 0,
                      module_sets: tuple[tuple[str, ...], ...] = ((),),
                      hybrid_shard: bool = False) -> dict[str, np.ndarray]:
    """Every legal layout as integer columns (the :data:`~supercluster.perf.columns.COLUMNS` plus ``gpus``);
    ``extra_pp_layers``: pipeline slots the framework fills with the embedding and the loss;
    ``module_sets``: the selective recompute module sets to try (``()`` = the framework's policy);
    ``hybrid_shard``: also the replicated shard groups of :data:`SHARD_DOMAINS` (column ``rep``)."""
    counts = gpu_counts or (num_gpus,)
    on = " or ".join(f"{c:,}" for c in counts)  # (the counts as a user reads them: "100,000 or 50,000")
    tp_cap = max_tp or max(gpu.scaleup_domain, 8)
    rows: list[tuple[int, int, int, int]] = []
    for n in counts:
        for tp in _pow2_upto(min(tp_cap, model.num_heads)):
            if n % tp:
                continue
            for pp in _divisors(n // tp, min(model.num_layers, max_pp or model.num_layers)):
                for cp in _pow2_upto(min(max_cp, n // (tp * pp))):
                    if (n // tp // pp) % cp:
                        continue
                    rows.append((n, tp, pp, cp))
    require(bool(rows), "gpus", f"no tp x pp x cp divides {on} GPUs for {model.name}")
    arr = np.asarray(rows, dtype=np.int64)
    cols = {"gpus": arr[:, 0], "tp": arr[:, 1], "pp": arr[:, 2], "cp": arr[:, 3]}
    cols["dp"] = cols["gpus"] // (cols["tp"] * cols["pp"] * cols["cp"])
    eps = [e for e in _divisors(model.num_experts)] if model.is_moe else [1]
    cols = _cross(cols, "ep", eps)
    # expert TP = tp (EP within dp x cp) or, for MoE with tp > 1, 1 (MoE parallel folding: EP over TP too)
    cols = _cross(cols, "efold", [0, 1] if model.is_moe else [0])
    # (folding with tp = 1 is the unfolded layout again: kept once)
    cols = _keep(cols, (cols["efold"] == 0) | (cols["tp"] > 1))
    cols["etp"] = np.where(cols.pop("efold") > 0, 1, cols["tp"])
    cols = _keep(cols, ((cols["tp"] * cols["dp"] * cols["cp"] // cols["etp"]) % cols["ep"] == 0)
                 & ((cols["etp"] < cols["tp"]) | ((cols["dp"] * cols["cp"]) % cols["ep"] == 0)))
    cols = _cross(cols, "vpp", [v for v in VPP if max_vpp is None or v <= max_vpp])
    cols = _keep(cols, (cols["vpp"] == 1) | (cols["pp"] > 1))
    # the model's rules, from the table Layout.check_model raises by
    cols = _keep(cols, rules.keeps(model, {**cols, "seq": np.full(len(cols["tp"]), seq_len)}, extra_pp_layers))
    require(len(cols["tp"]) > 0, "gpus", f"no tp x pp x cp divides {on} GPUs for {model.name}")
    least_dp = int(cols["dp"].min())
    cols = _cross(cols, "mb", list(MICRO_BATCHES))
    cols = _keep(cols, global_batch % (cols["dp"] * cols["mb"]) == 0)
    require(len(cols["tp"]) > 0, "global_batch",
            f"{global_batch:,} is not a multiple of dp x micro_batch for any layout on {on} GPUs; the "
            f"smallest data-parallel degree there is {least_dp:,}: give a multiple of it")
    cols = _cross(cols, "zero", list(ZERO))
    if hybrid_shard:
        cols = _replicas(cols, gpu.scaleup_domain)
    cols = _cross(cols, "recompute", [0, 1, 2])
    if module_sets != ((),):
        # (selective rows take each set, () being the framework's own policy; the other rows none)
        bits = sorted({module_bits(m) for m in module_sets})
        cols = _cross(cols, "rcm", bits if 0 in bits else [0, *bits])
        selective = cols["recompute"] == RECOMPUTE_CODE["selective"]
        cols = _keep(cols, np.where(selective, np.isin(cols["rcm"], bits), cols["rcm"] == 0))
    cols = _cross(cols, "sp", [0, 1])
    cols = _keep(cols, (cols["sp"] == 0) | (cols["tp"] > 1))
    cols = _cross(cols, "lowp", sorted({LOWP_CODE.get(p, 0) for p in precisions}))
    n = len(cols["tp"])
    cols["gbs"] = np.full(n, global_batch, dtype=np.int64)
    cols["seq"] = np.full(n, seq_len, dtype=np.int64)
    return cols


def _replicas(cols: dict[str, np.ndarray], domain: int) -> dict[str, np.ndarray]:
    """``cols`` with a ``rep`` column: 1 (one shard group over dp x cp) and, on ZeRO-3 rows, each
    replication whose shard group spans :data:`SHARD_DOMAINS` scale-up domains' worth of ranks, where that
    is fewer than dp x cp and divides the dense and the experts' data-parallel groups."""
    unit = 1 << (max(int(domain), 1).bit_length() - 1)  # the domain's largest power of two
    cols = _cross(cols, "shard", [0, *(unit * k for k in SHARD_DOMAINS)])
    shard, dpcp = cols.pop("shard"), cols["dp"] * cols["cp"]
    rep = np.where(shard > 0, np.maximum(dpcp // np.maximum(shard, 1), 1), 1)
    edp = cols["tp"] * dpcp // (cols["ep"] * cols["etp"])
    ok = (shard == 0) | ((cols["zero"] == 3) & (shard < dpcp) & (dpcp % np.maximum(shard, 1) == 0)
                         & (rep > 1) & (cols["dp"] % rep == 0) & (edp % rep == 0))
    cols["rep"] = rep
    return _keep(cols, ok)


def _undominated(by: np.ndarray, rows: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The ``rows`` that no row of ``by`` beats in both ``a`` and ``b`` (ties kept)."""
    if by.size == 0:
        return rows
    o = by[np.argsort(b[by], kind="stable")]
    best_a = np.minimum.accumulate(a[o])
    pos = np.searchsorted(b[o], b[rows], side="right") - 1
    limit = np.where(pos >= 0, best_a[np.maximum(pos, 0)], np.inf)
    return rows[a[rows] <= limit]


def pareto_mask(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Rows not dominated when minimising both ``a`` and ``b``."""
    order = np.lexsort((b, a))
    b_sorted = np.asarray(b, dtype=float)[order]
    # kept: strictly below every b of the rows sorted before it (smaller a, or equal a and smaller b)
    before = np.concatenate(([np.inf], np.minimum.accumulate(b_sorted)[:-1]))
    keep = np.zeros(len(a), dtype=bool)
    keep[order[b_sorted < before]] = True
    return keep


#: Layouts priced per call of the cost model: small enough to stay in cache (a 2.8M-layout MoE search
#: runs 2.3x faster in chunks than in one call, benchmarks/bench_layouts.py) and to report progress.
CHUNK_ROWS = 131072
#: The cost model's output columns the planner keeps (the ledger parts explain the winners).
PLAN_COLUMNS = ("step_time_s", "tokens_per_step", "memory_per_gpu_bytes", "model_flops", "num_gpus",
                "peak_flops_per_s", "mfu", *LEDGER)


def _price_in_chunks(model: ModelSpec, gpu: GpuSpec, net: Network, framework: Framework,
                     cols: dict[str, np.ndarray], progress: Callable[[int, int], None] | None,
                     schedule_bound: bool = False) -> dict[str, np.ndarray]:
    n = len(cols["tp"])
    keep = (*PLAN_COLUMNS, "pipeline_by_chunks")
    parts = []
    for i in range(0, n, CHUNK_ROWS):
        out = step_columns(model, gpu, net, framework, {k: v[i:i + CHUNK_ROWS] for k, v in cols.items()},
                           schedule_bound=schedule_bound)
        parts.append({k: np.broadcast_to(out[k], out["step_time_s"].shape) for k in keep})
        if progress is not None:
            progress(min(i + CHUNK_ROWS, n), n)
    return {k: np.concatenate([p[k] for p in parts]) for k in keep}


#: The most rows a plan returns: every one is a priced candidate built as a Layout
MAX_TOP = 10_000
#: Rows priced exactly per refinement pass of the planner, at least (besides its top and Pareto rows).
REFINE_ROWS = 512


def _search_columns(model: ModelSpec, gpu: GpuSpec, num_gpus: int, *, global_batch: int, seq_len: int,
                    framework: Framework, precisions: tuple[str, ...], objective: str,
                    fixed: dict[str, int] | None) -> dict[str, np.ndarray]:
    """Every layout the search prices, as columns: the candidates (on fewer GPUs too where the objective
    is not time) that ``framework`` can run, keeping the ``fixed`` settings (see :func:`plan`)."""
    counts = (num_gpus,)
    if objective != "time":
        counts = tuple(c for c in (num_gpus, num_gpus // 2, num_gpus // 4, num_gpus // 8)
                       if c >= 1 and (c == num_gpus or num_gpus % c == 0))
    cols = candidate_columns(model, gpu, num_gpus, global_batch=global_batch, seq_len=seq_len,
                             precisions=precisions, gpu_counts=counts,
                             max_cp=MAX_CP if framework.context_parallel else 1,
                             max_tp=None if framework.tensor_parallel else 1,
                             max_pp=None if framework.pipeline_parallel else 1,
                             max_vpp=None if framework.interleaved_pipeline else 1,
                             extra_pp_layers=framework.extra_pp_layers,
                             module_sets=framework.module_sets or (
                                 MOE_MODULE_SETS if model.is_moe and framework.recompute_modules else ((),)),
                             hybrid_shard=framework.hybrid_shard)
    cols = _keep(cols, framework.schedule_ok(cols["pp"], cols["gbs"] // (cols["dp"] * cols["mb"]), cols["vpp"]))
    cols = _keep(cols, framework.sequence_parallel_ok(model.is_moe, cols["tp"], cols["sp"]))
    cols = _keep(cols, framework.zero_ok(cols["zero"], cols["pp"]))
    cols = _keep(cols, framework.ep_overlap_ok(model.is_moe, cols["pp"], cols["vpp"], cols["ep"], cols["zero"],
                                               cols["recompute"], cols["lowp"], model.mtp_layers))
    cols = _keep(cols, framework.cp_heads_ok(model, cols["tp"], cols["cp"]))
    require(len(cols["tp"]) > 0, "global_batch", f"no layout gives {framework.key}'s {framework.pipeline_schedule} "
            "schedule the micro-batches it needs (DualPipe: an even number, at least 2 x pp)")
    for name, value in (fixed or {}).items():
        require(name in FIXABLE, "fixed", f"unknown setting {name!r}; allowed: {', '.join(FIXABLE)}")
        if name == "rcm" and name not in cols:  # (searched for MoE only: the modules given, on selective rows)
            cols["rcm"] = np.where(cols["recompute"] == RECOMPUTE_CODE["selective"], value, 0)
        if name == "rep" and name not in cols:  # (searched only where the framework replicates shard groups)
            cols["rep"] = np.ones_like(cols["tp"])
        hit = cols[name] == value
        cols = _keep(cols, hit | (cols["tp"] == 1) if name == "sp" else hit)
        require(len(cols["tp"]) > 0, FIXABLE[name], f"no legal layout of {model.name} on {num_gpus} GPUs keeps "
                f"{FIXABLE[name]} " + (RECOMPUTE_NAME[value] if name == "recompute" else ",".join(module_names(value))
                                       if name == "rcm" else str(value)))
    return cols


def plan(model: ModelSpec, gpu: GpuSpec, num_gpus: int, *, global_batch: int, seq_len: int,
         framework: Framework, objective: str = "time", precisions: tuple[str, ...] = ("bf16",),
         headroom: float = 0.0, top: int = 10, network: Network | None = None,
         gpu_hour_usd: float | None = None, pue: float = costs.DEFAULT_PUE,
         progress: Callable[[int, int], None] | None = None,
         fixed: dict[str, int] | None = None) -> PlanResult:
    """Search every legal layout; the best by ``objective`` that fits within ``1 - headroom`` of HBM.

    ``progress(done, total)`` is called as the layouts are priced (in chunks of :data:`CHUNK_ROWS`).
    ``fixed`` holds settings the search must keep, by column: ``mb``, ``zero``, ``recompute``
    (:data:`~supercluster.perf.columns.RECOMPUTE_CODE`), ``rcm`` (:func:`~supercluster.perf.columns.module_bits` of
    the selective recompute modules) and ``sp`` (which binds only where tp > 1)."""
    t0 = time.perf_counter()
    _check_plan_args(model, gpu, num_gpus, global_batch=global_batch, seq_len=seq_len, framework=framework,
                     objective=objective, precisions=precisions, headroom=headroom, top=top,
                     gpu_hour_usd=gpu_hour_usd)
    cols = _search_columns(model, gpu, num_gpus, global_batch=global_batch, seq_len=seq_len, framework=framework,
                           precisions=precisions, objective=objective, fixed=fixed)
    net = network or default_network(gpu, num_gpus=num_gpus)
    # First pass: uneven interleavings get a lower bound of their schedule (no walk); the rows that
    # can still be among the best or on the Pareto front are then priced exactly (refine).
    out = _price_in_chunks(model, gpu, net, framework, cols, progress, schedule_bound=True)
    bound = out.pop("pipeline_by_chunks") > 0
    system = get_system(gpu.system)
    price = gpu_hour_usd if gpu_hour_usd is not None else costs.gpu_hour_usd(gpu, system)
    watts = costs.facility_power_w_per_gpu(gpu, system, pue=pue, num_gpus=num_gpus)
    tokens = out["tokens_per_step"]
    feasible = out["memory_per_gpu_bytes"] <= gpu.hbm_bytes * (1.0 - headroom)
    n_feasible = int(feasible.sum())
    if n_feasible == 0:
        lean = float(np.min(out["memory_per_gpu_bytes"]))
        raise InputError("gpus", f"no layout of {model.name} fits on {num_gpus} x {gpu.key}: the leanest needs "
                         f"{lean / 2**30:.1f} GiB per GPU of {gpu.hbm_bytes * (1 - headroom) / 2**30:.1f} GiB "
                         "usable; add GPUs or shorten seq_len")
    base, cols = cols, dict(cols, feasible=feasible, schedule_bound=bound)

    def scores(step: np.ndarray | float, gpus: np.ndarray | float, tok: np.ndarray | float) -> dict[str, object]:
        """Each objective's score of a step: seconds, dollars per million tokens, joules per token."""
        return {"time": step, "cost": step * gpus * price / 3600.0 / tok * 1e6, "energy": step * gpus * watts / tok}

    def rescore(ranks: bool = True) -> None:
        """Scores (and ranks) from the current step times: a score's lower bound where bound."""
        s = scores(out["step_time_s"], cols["gpus"], tokens)
        out["usd_per_mtok"], out["j_per_tok"], cols["score"] = s["cost"], s["energy"], s[objective]
        if ranks:
            order = np.argsort(np.where(feasible, cols["score"], np.inf), kind="stable")
            cols["rank"] = np.empty(len(order), dtype=np.int64)
            cols["rank"][order] = np.arange(1, len(order) + 1)
            out["order"] = order

    def refine(idx: np.ndarray, ranks: bool = True) -> bool:
        """Price rows ``idx`` by their schedule where they hold a bound; False if none did."""
        idx = np.unique(idx[bound[idx]])
        if idx.size == 0:
            return False
        exact = _price_in_chunks(model, gpu, net, framework, {k: v[idx] for k, v in base.items()}, None)
        for k in PLAN_COLUMNS:
            out[k][idx] = exact[k]
        bound[idx] = False
        rescore(ranks)
        return True

    second = "memory" if objective == "time" else "time"

    def other() -> np.ndarray:
        return {"memory": out["memory_per_gpu_bytes"], "time": out["step_time_s"]}[second]

    rescore(ranks=False)
    feas_idx = np.flatnonzero(feasible)
    # A row dominated by an exactly priced one stays dominated once priced itself (pricing only
    # raises a bound): the Pareto front is sought among the others, the live rows, alone.
    live = _undominated(feas_idx[~bound[feas_idx]], feas_idx, cols["score"], other()) if bound.any() else feas_idx
    front = _refine_best_and_front(cols, feasible, live, max(top, REFINE_ROWS), other, refine)
    ep_rows = _best_by_ep(cols, feasible, refine) if model.is_moe else []
    rescore()
    # ranks below the lowest bound left are exact (every row that could be ahead was priced)
    lowest_bound = float(np.min(cols["score"][bound & feasible], initial=np.inf))

    def cand(i: int) -> Candidate:
        return _candidate(cols, out, i, precisions, exact=bool(cols["score"][i] < lowest_bound))

    by_ep = [cand(i) for i in ep_rows]
    top_c = [cand(int(i)) for i in out["order"][:min(top, n_feasible)]]
    pareto = sorted((cand(int(i)) for i in front), key=lambda c: c.rank)[:50]
    job = Job(model=model, gpu=gpu, num_gpus=num_gpus, layout=top_c[0].layout, framework=framework, network=net)
    return PlanResult(best=top_c[0], top=top_c, pareto=pareto, why=_why(top_c), evaluated=len(out["order"]),
                      feasible=n_feasible, seconds=time.perf_counter() - t0, objective=objective, columns=cols,
                      refine=refine, score_of=partial(_score_of, job, objective, headroom, scores), by_ep=by_ep,
                      cp_a2a_step_time_s=_cp_a2a_step_s(job))


def _check_plan_args(model: ModelSpec, gpu: GpuSpec, num_gpus: int, *, global_batch: int, seq_len: int,
                     framework: Framework, objective: str, precisions: tuple[str, ...], headroom: float, top: int,
                     gpu_hour_usd: float | None) -> None:
    """Every argument of :func:`plan` checked before any layout is priced, each error naming its field."""
    require(objective in OBJECTIVES, "objective", f"unknown {objective!r}; allowed: {', '.join(OBJECTIVES)}")
    require(0.0 <= headroom < 1.0, "headroom", f"must be in [0, 1), got {headroom}")
    require(1 <= top <= MAX_TOP, "top", f"must be 1-{MAX_TOP:,} (the rows of the table), got {top}")
    require(gpu_hour_usd is None or gpu_hour_usd >= 0.0, "gpu_hour_usd", f"must be >= 0 USD, got {gpu_hour_usd}")
    check_gpu_count(num_gpus)
    Layout(global_batch=global_batch, seq_len=seq_len)  # (the one range check of a batch and a sequence)
    for p in precisions:
        gpu.peak(p)
    check_kernels(model, framework, gpu)


def _score_of(job: Job, objective: str, headroom: float, scores: Callable[..., dict[str, object]],
              layout: Layout) -> float | None:
    """``layout`` for ``job``'s model, GPUs and framework priced whole by the cost model, scored as the
    search scores its rows (None where the framework cannot run it on this model, or it does not fit)."""
    try:
        b = price_job(check_job(dataclasses.replace(job, layout=layout)))
    except InputError:
        return None
    if b.memory_per_gpu_bytes > job.gpu.hbm_bytes * (1.0 - headroom):
        return None
    return float(scores(b.step_time_s, b.num_gpus, b.tokens_per_step)[objective])  # type: ignore[arg-type]


def _refine_best_and_front(cols: dict[str, np.ndarray], feasible: np.ndarray, live: np.ndarray, k: int,
                           other: Callable[[], np.ndarray], refine: Callable[..., bool]) -> np.ndarray:
    """Price exactly, until none is left, every row still holding a bound that could be among the ``k``
    best or on the Pareto front of score and ``other()`` among the ``live`` rows; the front's rows."""
    while True:
        # a bound below the k-th best score could still win, a live bound on the front could stay there
        masked = np.where(feasible, cols["score"], np.inf)
        best = np.argpartition(masked, k)[:k] if len(masked) > k else np.arange(len(masked))
        front = live[pareto_mask(cols["score"][live], other()[live])]
        if not refine(np.concatenate([best[feasible[best]], front]), ranks=False):
            return front


def _candidate(cols: dict[str, np.ndarray], out: dict[str, np.ndarray], i: int, precisions: tuple[str, ...],
               exact: bool) -> Candidate:
    """Row ``i`` of the search as a :class:`Candidate` (``exact``: its rank is final)."""
    return Candidate(layout=row_layout(cols, i, precisions), num_gpus=int(cols["gpus"][i]),
                     step_time_s=float(out["step_time_s"][i]), mfu=float(out["mfu"][i]),
                     memory_per_gpu_bytes=float(out["memory_per_gpu_bytes"][i]),
                     cost_usd_per_mtok=float(out["usd_per_mtok"][i]), energy_j_per_token=float(out["j_per_tok"][i]),
                     ledger={k: float(out[k][i]) for k in LEDGER}, rank=int(cols["rank"][i]), rank_exact=exact)


def _why(top: list[Candidate]) -> list[tuple[str, float]]:
    """The ledger lines in which the winner and the runner-up differ (winner - runner-up), most decisive first."""
    if len(top) < 2:
        return []
    a, b = top[0].ledger, top[1].ledger
    return sorted(((k, a[k] - b[k]) for k in LEDGER if abs(a[k] - b[k]) > 1e-12), key=lambda kv: kv[1])


def _cp_a2a_step_s(job: Job) -> float | None:
    """The step of ``job`` under all-to-all CP, where it rings K/V with Transformer Engine's p2p CP over
    more than one rank; None where it does not, or where all-to-all CP cannot split its heads."""
    fw = job.framework
    if job.layout.cp <= 1 or fw.cp_rotate != "p2p" or not fw.context_parallel:
        return None
    try:
        return price_job(check_job(dataclasses.replace(job, framework=with_suffixes(fw, [CP_A2A_SUFFIX])))).step_time_s
    except InputError:
        return None


def _best_by_ep(cols: dict[str, np.ndarray], feasible: np.ndarray, refine: Callable[..., bool]) -> list[int]:
    """The best fitting row at each expert-parallel degree searched (an MoE plan's answer to "what does
    EP buy?"), each priced exactly: a row still holding its schedule's lower bound is priced and the
    degree's best sought again."""
    out = []
    for ep in np.unique(cols["ep"]):
        while True:
            masked = np.where(feasible & (cols["ep"] == ep), cols["score"], np.inf)
            i = int(np.argmin(masked))
            if not np.isfinite(masked[i]) or not refine(np.array([i]), False):
                break
        if np.isfinite(masked[i]):
            out.append(i)
    return out


def compare_gpus(model: ModelSpec, gpus: list[GpuSpec], num_gpus: int, *, global_batch: int, seq_len: int,
                 framework: Framework, objective: str = "time", precisions: tuple[str, ...] = ("bf16",),
                 tokens: float | None = None, headroom: float = 0.0,
                 fixed: dict[str, int] | None = None) -> list[dict[str, object]]:
    """The same question asked of several GPU types: each one's best layout by ``objective`` (the
    planner's whole search, on its own default fabric and price, keeping the ``fixed`` settings),
    with the failure-free days, dollars and MWh to train ``tokens`` (default: 20 per parameter). A
    GPU type on which no layout fits, or which lacks a precision asked for, is a row saying why
    rather than an error."""
    require(bool(gpus), "gpu_types", "needs at least one GPU type")
    # the question's own mistakes are one error, not a row per GPU type
    require(objective in OBJECTIVES, "objective", f"unknown {objective!r}; allowed: {', '.join(OBJECTIVES)}")
    check_gpu_count(num_gpus)
    require(global_batch >= 1, "global_batch", f"must be a positive integer, got {global_batch}")
    require(seq_len >= 1, "seq_len", f"must be a positive integer, got {seq_len}")
    require(0.0 <= headroom < 1.0, "headroom", f"must be in [0, 1), got {headroom}")
    tok = tokens if tokens is not None else 20.0 * model.num_params
    require(tok > 0, "tokens", f"must be > 0, got {tok}")
    rows: list[dict[str, object]] = []
    for g in gpus:
        usable = tuple(p for p in precisions if g.peak_flops_per_s.get(p, 0.0) > 0)
        if not usable:
            rows.append({"gpu": g.key, "fits": False, "reason": f"no {' or '.join(precisions)} tensor cores"})
            continue
        try:
            res = plan(model, g, num_gpus, global_batch=global_batch, seq_len=seq_len, framework=framework,
                       objective=objective, precisions=usable, headroom=headroom, top=1, fixed=fixed)
        except InputError as exc:
            rows.append({"gpu": g.key, "fits": False, "reason": str(exc)})
            continue
        best = res.best
        rows.append({"gpu": g.key, "fits": True, "reason": "", "best": best.to_json(),
                     "tokens_per_s_per_gpu": best.layout.global_batch * best.layout.seq_len
                     / (best.step_time_s * best.num_gpus), **best.budget(tok)})
    return rows
