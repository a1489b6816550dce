"""Layouts as integer columns, and back: the one mapping the cost model, planner, sweep and
simulator share, and the per-row quantities every stage reads (:class:`Rows`).

Legend: b micro-batch, s sequence, T = b s / cp tokens per GPU per micro-batch, m micro-batches
per data-parallel rank and step, ga pipeline schedules per step (gradient accumulation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import require
from ..models.spec import ModelSpec
from ..parallelism.framework import Framework
from ..parallelism.layout import Layout

RECOMPUTE_CODE = {"none": 0, "selective": 1, "full": 2}
RECOMPUTE_NAME = {v: k for k, v in RECOMPUTE_CODE.items()}
#: ``rcm`` column: Megatron-Core ``--recompute-modules`` as bits; 0 = the framework's selective policy
#: (Megatron: core_attn alone). Only read with ``recompute`` selective.
RECOMPUTE_MODULE_BIT = {"core_attn": 1, "layernorm": 2, "moe_act": 4, "mlp": 8, "moe": 16, "mla_up_proj": 32}
#: ``lowp`` column: the GEMM operand precision below 16 bits (0 = bf16/fp16, or fp32 on a CPU profile).
LOWP_CODE = {"fp8": 1, "fp4": 2}
#: the integer columns every layout row has; ``etp``, ``rcl``, ``ga``, ``fp32``, ``rcm`` and ``rep`` are optional
COLUMNS = ("tp", "pp", "dp", "cp", "ep", "vpp", "mb", "gbs", "seq", "zero", "recompute", "sp", "lowp")
DEFAULT_RANK_ORDER = "tp-cp-ep-dp-pp"


def module_bits(modules: tuple[str, ...]) -> int:
    """The ``rcm`` code of a set of recompute modules."""
    return sum(RECOMPUTE_MODULE_BIT[x] for x in modules)


def module_names(bits: int) -> tuple[str, ...]:
    """The recompute modules of an ``rcm`` code."""
    return tuple(name for name, bit in RECOMPUTE_MODULE_BIT.items() if bits & bit)


def layout_columns(layout: Layout, fw: Framework) -> dict[str, np.ndarray]:
    """One layout as 1-row columns (sequence parallelism: the framework's where the layout leaves it)."""
    return layouts_columns([layout], fw)


#: the columns :func:`layouts_columns` writes, in the order of :func:`_layout_values`
LAYOUT_COLUMNS = COLUMNS + ("rcl", "etp", "ga", "fp32", "rcm", "rep")


def _layout_values(layout: Layout, fw: Framework) -> tuple[int, ...]:
    sp = fw.sequence_parallel if layout.sequence_parallel is None else layout.sequence_parallel
    return (layout.tp, layout.pp, layout.dp, layout.cp, layout.ep, layout.vpp, layout.micro_batch,
            layout.global_batch, layout.seq_len, layout.zero_stage, RECOMPUTE_CODE[layout.recompute], int(bool(sp)),
            LOWP_CODE.get(layout.precision, 0), layout.recompute_layers, layout.etp, layout.grad_accum,
            int(layout.precision == "fp32"), module_bits(layout.recompute_modules), layout.dp_replicate)


def layouts_columns(layouts: list[Layout], fw: Framework) -> dict[str, np.ndarray]:
    """Layouts as integer columns, one row each, built as one array (sequence parallelism: the
    framework's where a layout leaves it)."""
    table = np.array([_layout_values(lay, fw) for lay in layouts], dtype=np.int64).reshape(-1, len(LAYOUT_COLUMNS))
    return {k: table[:, j].copy() for j, k in enumerate(LAYOUT_COLUMNS)}


def row_layout(cols: dict[str, np.ndarray], i: int, precisions: tuple[str, ...] = ("bf16",)) -> Layout:
    """Row ``i`` of ``cols`` as a :class:`Layout` (the inverse of :func:`layout_columns`); ``precisions``
    names the 16-bit precision a ``lowp`` of 0 stands for (the first not below 16 bits, else bf16)."""
    def get(name: str, default: int) -> int:
        return int(cols[name][i]) if name in cols else default

    tp, lowp = int(cols["tp"][i]), int(cols["lowp"][i])
    precision = "fp32" if get("fp32", 0) else next((p for p in precisions if LOWP_CODE.get(p, 0) == lowp), "bf16")
    etp = get("etp", tp)
    return Layout(tp=tp, pp=int(cols["pp"][i]), dp=int(cols["dp"][i]), cp=int(cols["cp"][i]), ep=int(cols["ep"][i]),
                  vpp=int(cols["vpp"][i]), micro_batch=int(cols["mb"][i]), global_batch=int(cols["gbs"][i]),
                  seq_len=int(cols["seq"][i]), precision=precision, recompute=RECOMPUTE_NAME[int(cols["recompute"][i])],
                  zero_stage=int(cols["zero"][i]), sequence_parallel=bool(cols["sp"][i]),
                  recompute_layers=get("rcl", 0), expert_tp=None if etp == tp else etp,
                  recompute_modules=module_names(get("rcm", 0)), grad_accum=get("ga", 1),
                  dp_replicate=get("rep", 1))


def rank_strides(order: str, tp: np.ndarray, cp: np.ndarray, dp: np.ndarray,
                 pp: np.ndarray) -> dict[str, np.ndarray]:
    """Rank stride of each parallel dimension for a rank order such as ``tp-cp-dp-pp`` (innermost
    first, Megatron-Core's convention; EP is carved innermost out of the adjacent dp x cp block).
    ``dpcp`` is the stride of that block."""
    dims = order.lower().replace("ep-", "").replace("-ep", "").split("-")
    require(sorted(dims) == ["cp", "dp", "pp", "tp"], "rank_order",
            f"{order!r} must order tp, cp, dp and pp once each (ep optional), e.g. tp-cp-ep-dp-pp")
    require(abs(dims.index("cp") - dims.index("dp")) == 1, "rank_order",
            f"cp and dp must be adjacent in {order!r}: the optimizer shards over dp x cp")
    size = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    stride, acc = {}, np.ones_like(tp)
    for d in dims:
        stride[d] = acc
        acc = acc * size[d]
    stride["dpcp"] = np.minimum(stride["cp"], stride["dp"])
    return stride


def group_shapes(order: str, tp: np.ndarray, cp: np.ndarray, dp: np.ndarray, pp: np.ndarray, ep: np.ndarray,
                 etp: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each parallel group the step communicates over, as (members, rank stride): ``tp``, ``cp``,
    ``ep`` (within dp x cp, or over TP ranks first where expert TP < TP: MoE parallel folding),
    ``dp`` (the dense weights' data-parallel group, dp x cp), ``edp`` (the experts' data-parallel
    group, TP x CP x DP / (EP x expert TP)) and ``pp``. The cost model prices every collective on
    these; :meth:`supercluster.network.fabric.FabricNetwork.placement` says where their traffic goes."""
    stride = rank_strides(order, tp, cp, dp, pp)
    s_tp, s_dpcp = stride["tp"], stride["dpcp"]
    return {"tp": (tp, s_tp), "cp": (cp, stride["cp"]),
            "ep": (ep, np.where(etp == tp, s_dpcp, s_tp * etp)),
            "dp": (dp * cp, s_dpcp),
            "edp": (tp * dp * cp / (ep * etp), np.where(etp == tp, s_dpcp * ep, s_tp * ep * etp)),
            "pp": (pp, stride["pp"])}


@dataclass(frozen=True, slots=True)
class Rows:
    """The layout rows as float columns, and what every stage derives from them alone.

    ``sp`` holds where sequence parallelism is on (tp > 1); ``has`` maps each recompute module to
    the rows that recompute it (selective rows; the framework's policy, core_attn, where none is
    named); ``frc`` is the share of each chunk's layers fully recomputed (Megatron-Core block method:
    the first ``rcl`` layers, 0 = all); ``el`` / ``low_el`` are the bytes of an activation and of a
    GEMM operand (fp8: 1, fp4: 0.5)."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    vpp: np.ndarray
    mb: np.ndarray
    gbs: np.ndarray
    seq: np.ndarray
    zero: np.ndarray
    rc: np.ndarray
    etp: np.ndarray
    sp: np.ndarray
    fp8: np.ndarray
    fp4: np.ndarray
    fp32: np.ndarray
    lowp: np.ndarray
    has: dict[str, np.ndarray]
    frc: np.ndarray
    m: np.ndarray
    ga: np.ndarray
    ms: np.ndarray
    T: np.ndarray
    tok_sp: np.ndarray
    kv_local: np.ndarray
    el: np.ndarray
    low_el: np.ndarray
    groups: dict[str, tuple[np.ndarray, np.ndarray]]
    #: replicas of the ZeRO / FSDP shard group (hybrid sharding; 1: one group over all of dp x cp)
    rep: np.ndarray
    #: selective rows that name their recompute modules (where a framework's own selective policy, such as
    #: per-op SAC, would otherwise apply)
    named: np.ndarray


def _col(cols: dict[str, np.ndarray], name: str) -> np.ndarray:
    return np.asarray(cols[name], dtype=float)


def read_rows(model: ModelSpec, cols: dict[str, np.ndarray], rank_order: str = DEFAULT_RANK_ORDER) -> Rows:
    """The integer columns of :data:`COLUMNS` (and the optional ones) as :class:`Rows`."""
    tp, pp, dp, cp, ep, vpp = (_col(cols, c) for c in ("tp", "pp", "dp", "cp", "ep", "vpp"))
    mb, gbs, seq, zero = (_col(cols, c) for c in ("mb", "gbs", "seq", "zero"))
    rc = _col(cols, "recompute")
    # expert tensor parallelism (Megatron-Core MoE parallel folding); tp where not given
    etp = _col(cols, "etp") if "etp" in cols else tp
    rcl = _col(cols, "rcl") if "rcl" in cols else np.zeros_like(rc)
    sp = (_col(cols, "sp") > 0) & (tp > 1)
    lowp = _col(cols, "lowp")
    fp8, fp4 = lowp == LOWP_CODE["fp8"], lowp == LOWP_CODE["fp4"]
    fp32 = (_col(cols, "fp32") > 0) if "fp32" in cols else np.zeros(tp.shape, dtype=bool)
    m = gbs / (dp * mb)
    # gradient-accumulation steps run as separate pipeline schedules (torchtitan, NeMo AutoModel), each
    # with its own fill and drain; ms micro-batches in each
    ga = _col(cols, "ga") if "ga" in cols else np.ones_like(m)
    T = mb * seq / cp
    el = np.where(fp32, 4.0, 2.0)  # activation bytes
    # Megatron-Core selective recompute modules (0 = core_attn alone, Korthikanti et al. 2022)
    rcm = _col(cols, "rcm").astype(np.int64) if "rcm" in cols else np.zeros(tp.shape, dtype=np.int64)
    mods = np.where(rc == 1, np.where(rcm == 0, RECOMPUTE_MODULE_BIT["core_attn"], rcm), 0)
    chunk = np.ceil(model.num_layers / (pp * vpp))
    return Rows(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, mb=mb, gbs=gbs, seq=seq, zero=zero, rc=rc, etp=etp, sp=sp,
        fp8=fp8, fp4=fp4, fp32=fp32, lowp=lowp,
        has={name: (mods & bit) > 0 for name, bit in RECOMPUTE_MODULE_BIT.items()},
        frc=np.where(rc == 2, np.where(rcl > 0, np.minimum(1.0, rcl / chunk), 1.0), 0.0),
        m=m, ga=ga, ms=m / ga, T=T, tok_sp=np.where(sp, T / tp, T),
        kv_local=np.maximum(float(model.num_kv_heads) / tp, 1.0), el=el,
        low_el=np.where(fp4, 0.5, np.where(fp8, 1.0, el)),
        groups=group_shapes(rank_order, tp, cp, dp, pp, ep, etp),
        rep=_col(cols, "rep") if "rep" in cols else np.ones_like(tp), named=(rc == 1) & (rcm > 0))


def zero_groups(rows: Rows) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The ZeRO / FSDP groups of hybrid sharding, as (members, rank stride): ``dps`` / ``edps``, the
    dense weights' and the experts' shard groups (the innermost dp x cp / rep and edp / rep ranks of
    their data-parallel groups: the whole group where ``rep`` is 1), and ``dpr`` / ``edpr``, the
    ``rep`` replicas of each shard, one rank of every shard group apart (PyTorch FSDP2's HSDP mesh
    (replicate, shard); MaxText's DCN data parallelism outside its FSDP axis)."""
    dpg, s_dp = rows.dp * rows.cp, rows.groups["dp"][1]
    edpg, s_edp = rows.groups["edp"]
    rep = rows.rep
    return {"dps": (dpg / rep, s_dp), "dpr": (rep, s_dp * dpg / rep),
            "edps": (edpg / rep, s_edp), "edpr": (rep, s_edp * edpg / rep)}
