"""The step: its stages run in order, the ledger, FLOP accounting and :class:`StepBreakdown`.

Every view (estimate, validate, planner, sweep, simulate, goodput) prices through
:func:`step_columns`; nothing else holds a cost formula. Inputs are a model, a GPU, a network, a
framework profile and a dict of equal-length integer columns (one row per layout,
:mod:`~supercluster.perf.columns`); outputs are columns in seconds, bytes and FLOPs.
:func:`step_breakdown` wraps one layout into a :class:`StepBreakdown`.

Stages: read the rows (:func:`~.columns.read_rows`) -> the GPU's rates and each layer's work
(:mod:`~.compute`) -> its collectives (:mod:`~.comm`) -> the heaviest pipeline stage and the
schedule (:mod:`~.pipeline`) -> data-parallel sync and the optimizer (:mod:`~.sync`) -> the ledger
(below) -> memory (:mod:`~.memory`).

Stragglers: the ranks of a job wait for each other, so the slowest of its GPUs sets the pace of the
compute-bound work; identical GPUs differ in sustained speed by a measured spread (data/kernels.toml
[synchronization]), and the expected slowest of N is :func:`expected_max_normal` standard
deviations slower than the mean: its own ledger line, growing with the GPU count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import require
from ..hardware.kernels import comm_sm_frac, gpu_speed_sigma
from ..hardware.specs import GpuSpec
from ..models.spec import ModelSpec
from ..network.twolevel import Network, domain_split
from ..parallelism import pplayout
from ..parallelism.framework import Framework
from ..parallelism.layout import Layout
from .columns import DEFAULT_RANK_ORDER, Rows, layouts_columns, read_rows
from .comm import CommTimes, ep_call_paths_s, layer_comm
from .compute import LayerWork, Rates, contended, layer_work, rates
from .host import host_bound, moe_host_ops
from .memory import memory_bytes
from .pipeline import PipeTimes, StageTimes, pipeline_times, stage_times
from .spread import expected_max_normal
from .sync import SyncTimes, sync_times

#: Ledger lines, in the order they are printed; they sum exactly to ``step_time_s``.
LEDGER = (
    "ideal_compute", "gemm_inefficiency", "attention_inefficiency", "memory_bound_ops", "kernel_launch",
    "comm_contention", "recompute",
    "exposed_tp_comm", "exposed_cp_comm", "exposed_ep_comm", "exposed_pp_comm", "stage_imbalance", "pipeline_bubble",
    "exposed_dp_comm", "optimizer", "stragglers",
)
MEMORY_KEYS = ("mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes", "mem_activations_bytes",
               "mem_other_bytes", "memory_per_gpu_bytes")


def step_columns(model: ModelSpec, gpu: GpuSpec, net: Network, fw: Framework,
                 cols: dict[str, np.ndarray], rank_order: str = DEFAULT_RANK_ORDER,
                 stages: list[str] | None = None, schedule_bound: bool = False) -> dict[str, np.ndarray]:
    """Price every layout row of ``cols``; returns columns (seconds, bytes, FLOPs).

    ``cols`` holds the integer columns of :data:`~.columns.COLUMNS`; ``recompute`` uses
    :data:`~.columns.RECOMPUTE_CODE`, ``sp`` is 0/1 and ``lowp`` uses :data:`~.columns.LOWP_CODE`.
    Assumes rows already validated. ``stages``, the virtual stages of an explicit pipeline layout
    (:func:`supercluster.parallelism.pplayout.parse`), replaces the framework's split for every row (all rows then
    share its pp and vpp).

    Where the chunks of an interleaved schedule differ (the "middle" split, an explicit layout),
    the schedule's longest path (:func:`supercluster.parallelism.schedule.makespan`) prices the pipeline, and the
    column ``pipeline_by_chunks`` is 1 on those rows: the timeline then lays out each chunk's own work.
    With ``schedule_bound`` those rows get a lower bound of that path instead (no walk; every other
    column is exact): the planner's first pass, which then prices exactly the rows that can matter.
    """
    rows = read_rows(model, cols, rank_order)
    r = rates(gpu, fw, rows)
    work = layer_work(model, gpu, fw, rows, r)
    comm, work = layer_comm(model, fw, net, rows, work, r.mem_bw)
    # the dispatch and combine left exposed in the forward and in the backward (a full recompute's
    # share runs in its own forward, priced as the forward again)
    ep_f, ep_b = comm.ep_x * comm.ep_share_f, comm.ep_x * comm.ep_share_b
    work = host_bound(model, fw, rows, work, comm.tp_fx, comm.tp_bx, ep_f, ep_b, r.host_op_s)
    frac = 0.0 if r.in_situ else comm_sm_frac()
    work = contended(rows, work, comm.held_f, comm.held_b, frac)
    st = stage_times(model, fw, rows, work, comm, stages)
    pipe = pipeline_times(model, fw, net, rows, work, comm, st, stages, schedule_bound)
    sync = sync_times(model, fw, net, rows, work, comm, st.Lh, r.mem_bw, frac, gpu.host_cpu)
    ledger = step_ledger(model, gpu, rows, r, work, comm, st, pipe, sync)
    ep_up, ep_out = ep_call_paths_s(model, fw, net, rows, work)
    out = {name: np.asarray(v, dtype=float) * np.ones_like(rows.tp) for name, v in ledger.items()}
    out.update(flop_columns(model, fw, rows, work, sum(ledger[k] for k in LEDGER), r.peak))
    out.update(memory_bytes(model, fw, rows, sync.dense_params, sync.expert_params, st.Lh_first, st.Lh_last,
                            comm.ring_bytes, work.score_tok))
    out.update(
        microbatches=rows.m, params_per_gpu=sync.dense_params + sync.expert_params, dp_traffic_s=sync.dp_traffic,
        # one micro-batch on the heaviest stage (all its chunks), and its forward share: what the
        # timeline simulator lays out on the pipeline schedule
        stage_time_s=st.t_stage, stage_forward_s=st.Lc * st.t_layer * st.fwd_share + st.heads * st.t_head_pass_f
        + st.projs * work.t_proj / 3.0,
        **st.chunk_parts, split_counts_head=st.split_counts_head,
        pipeline_by_chunks=pipe.by_chunks.astype(float) * np.ones_like(rows.tp),
        pp_send_s=pipe.pp_send * np.ones_like(rows.tp),
        weight_cast_s=weight_cast_s(st.Lc, work) * np.ones_like(rows.tp),
        # of the gemm_inefficiency line, what the GEMM shapes lose to the SMs' tile waves (forward and backward)
        gemm_tiling_delta_s=rows.m * st.Lc * 3.0 * work.t_tiling_f,
        # ... and what its fp8 / fp4 casts take: each micro-batch's inputs and output gradients, the weights once
        gemm_cast_s=rows.m * st.Lc * 3.0 * work.t_cast_f + weight_cast_s(st.Lc, work),
        # an MoE layer's routing as priced: the busiest EP rank's tokens over the mean, one dispatch (or
        # combine) call and how many a layer makes, and the share of its bytes that leave the scale-up domain
        moe_load_factor=work.moe_load, ep_call_s=comm.ep_call, ep_calls=comm.ep_calls,
        # ... that call's transfer on the scale-up links and on the scale-out network
        ep_call_scaleup_s=ep_up, ep_call_scaleout_s=ep_out,
        ep_remote_share=_remote_share(rows, gpu),
        # ... and the kernels an MoE layer launches per micro-batch beyond a dense layer's (forward + backward)
        moe_host_kernels=sum(moe_host_ops(model, fw, rows)),
    )
    return out


def _remote_share(rows: Rows, gpu: GpuSpec) -> np.ndarray:
    """The share of an all-to-all's bytes that cross the scale-out network: (g - n) / g for the EP group
    of g ranks, n of them in one scale-up domain (before any per-node deduplication)."""
    g, stride = rows.groups["ep"]
    n, _ = domain_split(g, stride, float(gpu.scaleup_domain))
    return np.where(g > 1, (g - n) / np.maximum(g, 1.0), 0.0)


def step_ledger(model: ModelSpec, gpu: GpuSpec, rows: Rows, r: Rates, work: LayerWork, comm: CommTimes, st: StageTimes,
                pipe: PipeTimes, sync: SyncTimes) -> dict[str, np.ndarray]:
    """The step's seconds by cause (:data:`LEDGER`); they sum to the step time.

    The pipeline runs at the pace of its heaviest stage (``Lc`` layer-like blocks, ``heads`` passes of
    the head and ``projs`` MTP projections per micro-batch), but a GPU of the job does on average a
    ``1 / pp`` share of the model: the per-layer lines are that mean stage's, and what the heaviest
    stage does beyond it (its extra layers, or the head) is ``stage_imbalance``, the time the other
    stages wait for it. Ideal compute is so the job's FLOPs per GPU at the dense peak (GEMMs at the
    GEMM precision's, attention and the head at 16 bits), the same for every layout of one job; each
    kernel's shortfall from it is its inefficiency line."""
    V, mtp, pp = float(model.vocab_size), float(model.mtp_layers), rows.pp
    heavy = _stage_lines(rows, r, work, comm, V, st.Lc, st.heads, st.projs)
    mean = _stage_lines(rows, r, work, comm, V, (model.num_layers + mtp) / pp, (1.0 + mtp) / pp, mtp / pp)
    ledger = {
        **mean, "exposed_pp_comm": pipe.pp_x, "stage_imbalance": sum(heavy[k] - mean[k] for k in heavy),
        "pipeline_bubble": pipe.bubble, "exposed_dp_comm": sync.dp_x + sync.dp_cont, "optimizer": sync.t_opt,
    }
    # the slowest GPU sets the pace of the heaviest stage's compute-bound work
    sigma = gpu_speed_sigma() if gpu.speed_sigma is None else gpu.speed_sigma
    paced = heavy["ideal_compute"] + heavy["gemm_paced"] + heavy["attention_inefficiency"] + heavy["recompute"] \
        + pipe.bubble
    ledger["stragglers"] = paced * sigma * expected_max_normal(rows.tp * rows.pp * rows.dp * rows.cp)
    ledger["gemm_inefficiency"] = ledger.pop("gemm_paced") + ledger.pop("weight_casts")
    return {k: ledger[k] for k in LEDGER}


def _stage_lines(rows: Rows, r: Rates, work: LayerWork, comm: CommTimes, V: float, Lc: np.ndarray | float,
                 heads: np.ndarray | float, projs: np.ndarray | float) -> dict[str, np.ndarray]:
    """The per-stage ledger lines per step of a stage of ``Lc`` layer-like blocks, ``heads`` passes of
    the head (over a vocabulary of ``V``) and ``projs`` MTP projections per micro-batch: the GEMMs'
    shortfall in two parts, ``gemm_paced`` (per micro-batch, paced by the slowest GPU) and
    ``weight_casts`` (:func:`weight_cast_s`: memory bound, not paced)."""
    m, peak, peak16, T, tp = rows.m, r.peak, r.peak16, rows.T, rows.tp
    attn_model = 3.0 * (work.attn_f + work.rec_f) + work.idx_f + work.idx_b  # attention-like FLOPs, fwd + bwd
    return {
        "ideal_compute": m * (Lc * (3.0 * work.gemm_f / peak + attn_model / peak16) + heads * 3.0 * work.head_f / peak16
                              + projs * 3.0 * work.proj_f / peak),
        "gemm_paced": m * (Lc * 3.0 * (work.t_gemm_f - work.gemm_f / peak)
                           + heads * 3.0 * (work.head_f / r.ceiling16 - work.head_f / peak16)
                           + projs * (work.t_proj - 3.0 * work.proj_f / peak)),
        "weight_casts": weight_cast_s(Lc, work),
        "attention_inefficiency": m * Lc * (work.t_attn_f + work.t_attn_b + work.t_rec_f + work.t_rec_b
                                            - attn_model / peak16),
        "memory_bound_ops": m * (Lc * (3.0 * work.t_mem_f + work.t_score_f + work.t_score_b + comm.cp_mem_f
                                       + comm.cp_mem_b + work.t_gacc) + heads * 5.0 * 4.0 * T * V / tp / r.mem_bw),
        "kernel_launch": m * Lc * (work.t_host_f + work.t_host_b),
        "comm_contention": m * Lc * (work.t_cont_f + work.t_cont_b),
        "recompute": m * Lc * work.t_rc,
        "exposed_tp_comm": m * (Lc * comm.tp_x + heads * comm.tp_head),
        "exposed_cp_comm": m * Lc * comm.cp_x, "exposed_ep_comm": m * Lc * comm.ep_x,
    }


def weight_cast_s(Lc: np.ndarray | float, work: LayerWork) -> np.ndarray:
    """Seconds a step of a stage's fp8 / fp4 weight casts (its ``Lc`` layer-like blocks), once before
    its first micro-batch."""
    return Lc * work.t_wcast


def flop_columns(model: ModelSpec, fw: Framework, rows: Rows, work: LayerWork, step: np.ndarray,
                 peak: np.ndarray) -> dict[str, np.ndarray]:
    """The step time and what it achieves: model FLOPs (PaLM / Megatron convention: 6N + 12 L a d s,
    full non-causal attention, no recompute), hardware FLOPs (recomputed FLOPs counted too), and
    MFU and HFU over the dense ``peak`` of the precision used: computed here once, for every view."""
    seq, rc, has, L = rows.seq, rows.rc, rows.has, model.num_layers
    h, V, mtp = float(model.d_model), float(model.vocab_size), float(model.mtp_layers)
    num_gpus = rows.tp * rows.pp * rows.dp * rows.cp
    tokens = rows.gbs * seq
    model_flops = tokens * model.model_flops_per_token(seq, causal=False)
    fwd_layers_flops = tokens * 2.0 * (model.matmul_params_per_token() - (1.0 + mtp) * V * h) + tokens * \
        (model.attention_flops_per_token(seq, causal=False) + model.recurrent_flops_per_token()
         + model.indexer_flops_per_token(seq, causal=False)[0])
    sel_flops = tokens * (np.where(has["core_attn"], model.attention_flops_per_token(seq, causal=False), 0.0)
                          + 2.0 * L * (np.where(has["mlp"], work.w_dense, 0.0) + np.where(has["moe"], work.w_moe, 0.0)
                                       + np.where(has["mla_up_proj"], work.w_up, 0.0)))
    if fw.selective_recompute == "op":  # (per-op SAC, where a row names no modules)
        sel_flops = np.where(rows.named, sel_flops, tokens * model.attention_flops_per_token(seq, causal=False))
    rc_flops = np.where(rc == 2, rows.frc * fwd_layers_flops, np.where(rc == 1, sel_flops, 0.0))
    machine_peak = step * num_gpus * peak
    return dict(step_time_s=step, num_gpus=num_gpus, tokens_per_step=tokens, model_flops=model_flops,
                hardware_flops=model_flops + rc_flops, peak_flops_per_s=peak,
                mfu=model_flops / machine_peak, hfu=(model_flops + rc_flops) / machine_peak, tokens_per_s=tokens / step)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepBreakdown:
    """One layout priced: time ledger, throughput, FLOP utilisation and memory per GPU."""

    step_time_s: float
    ledger: dict[str, float]
    num_gpus: int
    tokens_per_step: float
    model_flops: float
    hardware_flops: float
    peak_flops_per_s: float
    memory: dict[str, float]
    hbm_bytes: float
    microbatches: float
    #: model FLOPs (6N + 12 L a d s, full non-causal attention; PaLM / Megatron convention, no
    #: recompute) over the dense peak of the precision used
    mfu: float
    #: as ``mfu``, counting recomputed FLOPs too
    hfu: float
    tokens_per_s: float
    #: the pipeline split counts the embedding and the loss as a layer each (a profile that can, where it
    #: makes the slowest stage faster): what an export must tell the framework
    split_counts_head: bool = False
    #: an MoE job's routing as priced (None for a dense model): experts, top_k, ep, experts_per_gpu, router
    #: ("random": balanced, "round-robin": a fixed gate), dropless, capacity_factor (token-drop: each expert
    #: keeps at most that times the mean; 0 dropless) and padded (inputs padded to capacity), load_factor
    #: (the busiest EP rank's tokens over the mean), dispatch_call_s and dispatch_calls (per MoE layer and
    #: micro-batch), dispatch_scaleup_s and dispatch_scaleout_s (that call's transfer on each path; the rest
    #: of dispatch_call_s is latency and the expert-TP gather; None where a measured network does not tell
    #: the paths apart), remote_byte_share (before node_dedup: DeepEP's one copy a node), host_kernels (the
    #: kernels an MoE layer launches per micro-batch beyond a dense layer's, forward and backward) and
    #: host_waits (the host waits for the router's counts before the experts' kernels)
    moe: dict[str, object] | None = None
    #: the step's data-parallel traffic at the network's rate, one collective after another and none
    #: hidden (:func:`~.sync.dp_traffic_s`): a floor under any step that carries it
    dp_traffic_s: float = 0.0
    #: of the ``gemm_inefficiency`` line, the seconds the layers' GEMM shapes lose to the SMs' tile waves
    #: beyond the shapes the GPU's GEMM rate was measured at (:class:`~supercluster.hardware.kernels.GemmGrid`)
    gemm_tiling_delta_s: float = 0.0
    #: of the ``gemm_inefficiency`` line, the seconds of the fp8 / fp4 casts before the layers' GEMMs (each
    #: micro-batch's inputs and output gradients, the weights once a step; kernels.toml [quantize])
    gemm_cast_s: float = 0.0

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.num_gpus

    @property
    def tflops_per_gpu(self) -> float:
        """Achieved model TFLOP/s per GPU (MFU numerator, PaLM convention)."""
        return self.model_flops / self.step_time_s / self.num_gpus / 1e12

    @property
    def memory_per_gpu_bytes(self) -> float:
        return self.memory["memory_per_gpu_bytes"]

    @property
    def fits(self) -> bool:
        return self.memory_per_gpu_bytes <= self.hbm_bytes


def _known(x: float) -> float | None:
    """``x``, or None where it is NaN (a figure the network cannot give)."""
    return None if math.isnan(x) else x


def _moe(model: ModelSpec, fw: Framework, layout: Layout, col: dict[str, float]) -> dict[str, object] | None:
    """:attr:`StepBreakdown.moe` from one row of :func:`step_columns`."""
    if not model.is_moe:
        return None
    return {"experts": model.num_experts, "top_k": model.top_k, "ep": layout.ep,
            "experts_per_gpu": model.num_experts / layout.ep, "router": fw.moe_router,
            "router_groups": model.router_groups, "router_group_topk": model.router_group_topk,
            "dropless": fw.moe_capacity_factor <= 0, "capacity_factor": fw.moe_capacity_factor,
            "padded": fw.moe_pad_to_capacity,
            "load_factor": col["moe_load_factor"], "dispatch_call_s": col["ep_call_s"],
            "dispatch_calls": col["ep_calls"], "remote_byte_share": col["ep_remote_share"],
            # (None where a measured network does not tell the paths apart)
            "dispatch_scaleup_s": _known(col["ep_call_scaleup_s"]),
            "dispatch_scaleout_s": _known(col["ep_call_scaleout_s"]),
            "node_dedup": bool(fw.ep_node_dedup), "host_kernels": col["moe_host_kernels"],
            "host_waits": bool(fw.moe_dispatch_sync and not fw.moe_pad_to_capacity)}


def step_breakdown(model: ModelSpec, *, layout: Layout, gpu: GpuSpec, net: Network, fw: Framework,
                   rank_order: str = DEFAULT_RANK_ORDER) -> StepBreakdown:
    """Price one layout of a job :func:`supercluster.job.check_job` passed."""
    return step_breakdowns(model, layouts=[layout], gpu=gpu, net=net, fw=fw, rank_order=rank_order)[0]


def step_breakdowns(model: ModelSpec, *, layouts: list[Layout], gpu: GpuSpec, net: Network, fw: Framework,
                    rank_order: str = DEFAULT_RANK_ORDER) -> list[StepBreakdown]:
    """Price several checked layouts of one model, GPU, network and framework in one pass of
    :func:`step_columns` (one column row per layout); they share an explicit pipeline layout, if any."""
    require(len({lay.pp_layout for lay in layouts}) <= 1, "layouts", "priced together share one pp_layout")
    if not layouts:
        return []
    stages = None if layouts[0].pp_layout is None else pplayout.parse(layouts[0].pp_layout)
    cols = layouts_columns(layouts, fw)
    out = step_columns(model, gpu, net, fw, cols, rank_order, stages=stages)
    n = len(layouts)
    # (a column of one value is every row's; each row's values as one dict, built per row in C)
    keys = list(out)
    flat = [np.broadcast_to(np.asarray(out[k], dtype=float), (n,)).tolist() for k in keys]
    res = []
    for i, values in enumerate(zip(*flat, strict=True)):
        first = dict(zip(keys, values, strict=True))
        res.append(StepBreakdown(
            step_time_s=first["step_time_s"], ledger={k: first[k] for k in LEDGER}, num_gpus=int(first["num_gpus"]),
            tokens_per_step=first["tokens_per_step"], model_flops=first["model_flops"],
            hardware_flops=first["hardware_flops"], peak_flops_per_s=first["peak_flops_per_s"],
            memory={k: first[k] for k in MEMORY_KEYS}, hbm_bytes=gpu.hbm_bytes, microbatches=first["microbatches"],
            mfu=first["mfu"], hfu=first["hfu"], tokens_per_s=first["tokens_per_s"],
            split_counts_head=bool(first["split_counts_head"]), moe=_moe(model, fw, layouts[i], first),
            dp_traffic_s=first["dp_traffic_s"], gemm_tiling_delta_s=first["gemm_tiling_delta_s"],
            gemm_cast_s=first["gemm_cast_s"],
        ))
    return res
