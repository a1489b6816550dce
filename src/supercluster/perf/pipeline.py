"""Stage 4 of the step: the work of the heaviest pipeline stage, and the schedule around it.

* A stage's work per micro-batch: its layers (forward, backward, recompute, exposed TP / CP / EP
  traffic), on the last stage the head and loss, and each multi-token-prediction module. Where its
  layers sit follows the framework's split (even, torchtitan's "middle", or Megatron-Core's with the
  embedding and the loss counted as layers) or an explicit layout (:mod:`supercluster.parallelism.pplayout`).
* Pipeline bubble: (p - 1) / v micro-batch slots of the slowest stage per schedule (Narayanan et
  al. 2021); DualPipe's from the DeepSeek-V3 report (Table 2); uneven interleaved chunks from the
  schedule's longest path (:func:`uneven_interleaving`).
* Pipeline sends: p2p of each micro-batch's activations per chunk boundary, exposed in the fill and
  drain where the framework overlaps them, every one otherwise; Megatron's scatter/gather splits a
  send over the TP ranks' NICs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..models.spec import ModelSpec
from ..network.twolevel import Network
from ..parallelism import pplayout
from ..parallelism.framework import Framework
from ..parallelism.pplayout import chunk_layers
from ..parallelism.schedule import chunk_durations, makespan, makespan_bound
from .columns import Rows
from .comm import CommTimes
from .compute import LayerWork


def chunk_work(model: ModelSpec, fw: Framework, pp: int, vpp: int, stages: list[str] | None = None,
               counts_head: bool = False) -> np.ndarray:
    """Per (stage, chunk) of the pipeline: its layer-like blocks, MTP modules and heads, shape
    (pp, vpp, 3). An explicit layout places them itself; the framework's split otherwise, with the
    MTP modules in the split's slots where it counts the embedding and the loss (as the cost model
    prices them), after the last chunk's layers otherwise, and the head on the last chunk."""
    if stages is not None:
        return pplayout.chunk_blocks(stages, pp)
    split = chunk_layers(model.num_layers + (model.mtp_layers if counts_head else 0), pp, vpp, counts_head,
                         fw.pp_split)
    out = np.zeros((pp, vpp, 3))
    out[:, :, 0] = split
    out[-1, -1] += [0 if counts_head else model.mtp_layers, model.mtp_layers, 1]
    return out


def _middle_split_stages(num_layers: int, pp: np.ndarray, vpp: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row, under the "middle" split: layers of the first stage, of the last stage and the most
    any stage but the last holds (each summed over its chunks)."""
    first, last, other = (np.zeros(pp.shape) for _ in range(3))
    code = pp.astype(np.int64) * 4096 + vpp.astype(np.int64)
    for c in np.unique(code):
        p, v = int(c // 4096), int(c % 4096)
        stages = [sum(x) for x in chunk_layers(num_layers, p, v, split="middle")] if p * v <= num_layers \
            else [num_layers] * p  # (refused by Layout.check_model; kept finite here)
        sel = code == c
        first[sel], last[sel], other[sel] = stages[0], stages[-1], max(stages[:-1] or [0])
    return first, last, other


def unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of a 2-D array in lexicographic order, and each row's index among them:
    ``np.unique(a, axis=0, return_inverse=True)``, by one lexsort of the columns (np.unique sorts
    the rows as opaque byte strings, ten times slower on the planner's 10^5-row tables)."""
    a = np.asarray(a)
    if len(a) == 0:
        return a[:0], np.zeros(0, dtype=np.int64)
    order = np.lexsort(a.T[::-1])
    srt = a[order]
    new = np.concatenate(([True], np.any(srt[1:] != srt[:-1], axis=1)))
    inverse = np.empty(len(a), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return srt[new], inverse


#: the parts of a stage the pipeline schedule prices each chunk from (schedule.chunk_durations)
CHUNK_PARTS = ("layer_time_s", "layer_forward_frac", "head_time_s", "head_forward_s", "mtp_time_s", "mtp_forward_s")


def uneven_interleaving(model: ModelSpec, fw: Framework, stages: list[str] | None, pp: np.ndarray,
                         vpp: np.ndarray, m: np.ndarray, t_stage: np.ndarray, bubble: np.ndarray, pp_x: np.ndarray,
                         pp_send: np.ndarray, parts: dict[str, np.ndarray], bound: bool = False
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bubble and exposed pipeline send time of the rows whose interleaved chunks carry different
    work, from the schedule's longest path; also which rows those are.

    Under interleaving with uneven chunks a stage can wait for a light chunk's input while a heavy
    one holds the stage before it, in the steady state too, so the closed form (pp - 1) / vpp stage-
    times undercounts (Llama 3.1 405B, torchtitan split, pp 16, vpp 3: by 6.6 % of the step). Each
    operation is priced as the timeline prices it (``parts``: its chunk's layers, MTP modules and
    head, and an equal share of the exposed sends), and what the makespan adds over m stage-times
    and the sends is the bubble (or, where the sends overlap the fill, less send time).

    ``bound``: price those rows by :func:`supercluster.parallelism.schedule.makespan_bound` instead, a lower
    bound of the longest path that costs no walk (the planner walks only the rows that can win)."""
    shape = np.broadcast(t_stage, pp, m, vpp).shape
    pp, vpp, m, t_stage, bubble, pp_x = (np.broadcast_to(np.asarray(x, dtype=float), shape).copy()
                                         for x in (pp, vpp, m, t_stage, bubble, pp_x))
    pp_send = np.broadcast_to(pp_send, shape)
    parts = {k: np.broadcast_to(np.asarray(v, dtype=float), shape) for k, v in parts.items()}
    by_chunks = np.zeros(shape, dtype=bool)
    cand = (pp > 1) & (vpp > 1) & (np.mod(m, np.maximum(pp, 1.0)) == 0)
    for p, v in unique_rows(np.stack([pp[cand], vpp[cand]], axis=1).astype(np.int64))[0]:
        p, v = int(p), int(v)
        if stages is None and p * v > model.num_layers:
            continue  # (refused by Layout.check_model)
        work = chunk_work(model, fw, p, v, stages)
        others = work.copy()
        others[-1, -1, 1:] = 0.0
        if np.all(work[:, :, 0] == work[0, 0, 0]) and not others[:, :, 1:].any():
            continue  # even chunks, MTP modules and head on the last one: the closed form holds
        sel = cand & (pp == p) & (vpp == v)
        # layouts that differ only where the pipeline does not see it (ZeRO stage, optimizer) run alike
        if bound:
            span = makespan_bound(m[sel], chunk_durations(work, *(parts[k][sel] for k in CHUNK_PARTS), pp_send[sel]))
        else:
            keys = np.stack([m[sel], pp_send[sel], *(parts[k][sel] for k in CHUNK_PARTS)], axis=1)
            uniq, inverse = unique_rows(keys)
            span = makespan(p, v, uniq[:, 0].astype(np.int64), chunk_durations(work, *uniq[:, 2:].T, uniq[:, 1]))
            span = span[inverse]
        extra = span - m[sel] * t_stage[sel] - pp_x[sel]
        bubble[sel] = np.maximum(extra, 0.0)
        pp_x[sel] = pp_x[sel] + np.minimum(extra, 0.0)
        by_chunks[sel] = True
    return bubble, pp_x, by_chunks


@dataclass(frozen=True, slots=True)
class StageTimes:
    """The heaviest pipeline stage per micro-batch: ``t_stage`` seconds; ``Lc`` layer-like blocks,
    ``heads`` passes of the head and ``projs`` MTP projections it runs (they sum to ``t_stage``);
    ``Lh`` the layers whose compute hides data-parallel traffic, ``Lh_first`` / ``Lh_last`` the
    layers on the first and last stage (for memory). The parts each chunk is priced from
    (``chunk_parts``, :data:`CHUNK_PARTS`); ``split_counts_head`` marks rows whose split counts the
    embedding and the loss as layers."""

    t_layer: np.ndarray
    fwd_share: np.ndarray
    t_head_pass: np.ndarray
    t_head_pass_f: np.ndarray
    t_mtp_one: np.ndarray
    t_stage: np.ndarray
    Lh: np.ndarray
    Lh_first: np.ndarray
    Lh_last: np.ndarray
    Lc: np.ndarray
    heads: np.ndarray
    projs: np.ndarray
    split_counts_head: np.ndarray
    chunk_parts: dict[str, np.ndarray]


def stage_times(model: ModelSpec, fw: Framework, rows: Rows, work: LayerWork, comm: CommTimes,
                stages: list[str] | None) -> StageTimes:
    """One micro-batch on the heaviest pipeline stage (see the module's physics)."""
    pp, vpp, L = rows.pp, rows.vpp, model.num_layers
    t_layer = work.t_fwd + work.t_bwd + work.t_rc + comm.tp_x + comm.cp_x + comm.ep_x
    # Multi-token prediction on the last stage: per module a block (priced as an average layer), its
    # 2h -> h projection (a GEMM, forward and backward) and the shared head and loss once more.
    mtp = float(model.mtp_layers)
    t_head_pass = work.t_head + comm.tp_head  # the head and the loss, once
    t_head_pass_f = work.t_head / 3.0 + comm.tp_head / 2.0  # its forward share
    t_mtp_one = work.t_proj + t_head_pass  # what one MTP module costs beyond a layer

    def work_s(blocks: np.ndarray | float, mtps: np.ndarray | float, heads: np.ndarray | float) -> np.ndarray:
        """A stage's (or chunk's) work per micro-batch: its layer-like blocks, what each MTP module adds
        beyond its block, and its passes of the head (schedule.chunk_durations splits the same sum)."""
        return blocks * t_layer + mtps * t_mtp_one + heads * t_head_pass

    def step_s(blocks: np.ndarray | float, mtps: np.ndarray | float, heads: np.ndarray | float) -> np.ndarray:
        """A stage's work in a step: its micro-batches' and its blocks' fp8 / fp4 weight casts, once a
        step. Which stage is heaviest is judged on it, so the ledger's ``stage_imbalance`` (the
        heaviest stage's lines over the mean stage's) is never negative."""
        return rows.m * work_s(blocks, mtps, heads) + blocks * work.t_wcast

    fwd_share = (work.t_fwd + comm.tp_fx + comm.cp_fx) / np.maximum(
        work.t_fwd + work.t_bwd + work.t_rc + comm.tp_x + comm.cp_x, 1e-30)
    # Heaviest stage: ceil(L / (pp vpp)) layers per virtual chunk, and the last stage also runs the
    # head (and any MTP modules). A framework that counts the embedding and the loss as one layer each
    # in the split (Megatron-Core account_for_*_in_pipeline_split) puts the head where a layer would
    # be, and each MTP module in a layer's slot too (as Megatron-Bridge's DeepSeek-V3 layouts place
    # their "m", e.g. "Et|(tt|)*30mL"); it is used where it makes the slowest stage faster, and
    # allows pp x vpp up to L + 2 + mtp. (Megatron-Core takes it as the account_for_* flags where the
    # L + 2 slots divide evenly over the chunks, else as an explicit pipeline layout: the export writes
    # whichever applies, :func:`supercluster.formats.megatron_args.split_args`.)
    Lh = np.ceil(L / (pp * vpp)) * vpp
    t_stage = work_s(Lh + mtp, mtp, 1.0)
    bal = np.zeros(t_layer.shape, dtype=bool)
    head_on = np.ones_like(t_layer)
    rank_blocks = None if stages is None else pplayout.rank_blocks(stages, int(np.max(pp)))
    if rank_blocks is not None:
        # an explicit layout: each rank's layers, MTP modules (a layer, their projection and a pass
        # of the head each) and head; the slowest rank sets the pace
        n_t, n_m, n_l = (rank_blocks[:, i][:, None] for i in range(3))
        t_rank = work_s(n_t + n_m, n_m, n_l)
        r = np.argmax(step_s(n_t + n_m, n_m, n_l), axis=0)
        t_stage = t_rank[r, np.arange(t_rank.shape[1])]
        Lh = n_t[r, 0] * np.ones_like(t_layer)
        Lh_first = (n_t[0, 0] + n_m[0, 0]) * np.ones_like(t_layer)
        Lh_last = (n_t[-1, 0] + n_m[-1, 0]) * np.ones_like(t_layer)
        Lc = (n_t[r, 0] + n_m[r, 0]) * np.ones_like(t_layer)
        projs, heads = n_m[r, 0] * np.ones_like(t_layer), (n_l[r, 0] + n_m[r, 0]) * np.ones_like(t_layer)
    elif fw.pp_split_counts_head:
        Lh_bal = np.ceil((L + 2.0 + mtp) / (pp * vpp)) * vpp
        t_last = work_s(Lh_bal - 1.0, mtp, 1.0)
        t_bal = np.maximum(Lh_bal * t_layer, t_last)
        bal = (pp > 1) & ((t_bal < t_stage) | (pp * vpp > L))
        Lh = np.where(bal, Lh_bal, Lh)
        Lh_first = np.where(bal, Lh_bal - 1.0, Lh)  # the first stage holds the embedding in a layer's place
        Lh_last = np.where(bal, Lh_bal - 1.0, Lh + mtp)  # and the last one the loss
        # The ledger charges the heaviest stage's work: a middle stage's Lh layers, or the last
        # stage's Lh - 1 layer slots and the head, whichever does more in a step (not Lh layers and the head).
        middle = bal & (step_s(Lh_bal, 0.0, 0.0) >= step_s(Lh_bal - 1.0, mtp, 1.0))
        t_stage = np.where(bal, np.where(middle, Lh_bal * t_layer, t_last), t_stage)
        # (a middle stage holds no MTP module: those sit on the last stage)
        Lc = np.where(middle, Lh, np.where(bal, Lh_bal - 1.0, Lh + mtp))
        head_on = np.where(middle, 0.0, 1.0)
    elif fw.pp_split == "middle":
        # torchtitan's split: the last stage holds its (fewer) layers and the head; the heaviest stage
        # is whichever of it and the fullest middle stage does more in a step
        first, last, other = _middle_split_stages(L, pp, vpp)
        t_last = work_s(last + mtp, mtp, 1.0)
        middle = step_s(other, 0.0, 0.0) > step_s(last + mtp, mtp, 1.0)
        t_stage = np.where(middle, other * t_layer, t_last)
        Lh = np.where(middle, other, last)
        Lh_first, Lh_last = first, last + mtp
        Lc, head_on = np.where(middle, other, last + mtp), np.where(middle, 0.0, 1.0)
    else:
        Lh_first, Lh_last = Lh, Lh + mtp
        Lc = Lh + mtp
    if rank_blocks is None:
        heads = head_on * (1.0 + mtp)  # the head runs once more per MTP module where the last stage is heaviest
        projs = head_on * mtp  # and each MTP module's 2h -> h projection
    chunk_parts = dict(layer_time_s=t_layer, layer_forward_frac=fwd_share, head_time_s=t_head_pass,
                       head_forward_s=t_head_pass_f, mtp_time_s=t_mtp_one,
                       mtp_forward_s=work.t_proj / 3.0 + t_head_pass_f)
    return StageTimes(t_layer=t_layer, fwd_share=fwd_share, t_head_pass=t_head_pass, t_head_pass_f=t_head_pass_f,
                      t_mtp_one=t_mtp_one, t_stage=t_stage, Lh=Lh, Lh_first=Lh_first, Lh_last=Lh_last, Lc=Lc,
                      heads=heads, projs=projs,
                      split_counts_head=np.asarray(bal, dtype=float) if fw.pp_split_counts_head
                      else np.zeros_like(t_layer), chunk_parts=chunk_parts)


@dataclass(frozen=True, slots=True)
class PipeTimes:
    """Per step: the pipeline ``bubble`` and exposed sends ``pp_x`` (seconds); ``pp_send`` the exposed
    send time the timeline ends each pipeline operation with; ``by_chunks`` the rows priced by the
    schedule's longest path (their chunks carry different work)."""

    bubble: np.ndarray
    pp_x: np.ndarray
    pp_send: np.ndarray
    by_chunks: np.ndarray


def pipeline_times(model: ModelSpec, fw: Framework, net: Network, rows: Rows, work: LayerWork, comm: CommTimes,
                   st: StageTimes, stages: list[str] | None, schedule_bound: bool = False) -> PipeTimes:
    """The schedule's bubble and exposed pipeline sends per step (see the module's physics)."""
    pp, vpp, ga, m, tp, sp = rows.pp, rows.vpp, rows.ga, rows.m, rows.tp, rows.sp
    t_stage = st.t_stage
    bubble = ga * (pp - 1.0) / vpp * t_stage
    dual = fw.pipeline_schedule == "dualpipe"
    if dual:
        # DualPipe (DeepSeek-V3 report Table 2): (pp/2 - 1)(F&B + B - 3W) per stage and micro-batch,
        # F&B = F + B (a forward and a backward chunk run as a pair, each one's communication under the
        # other's compute), B the backward (with its recompute and exposed sends), W its weight-gradient
        # GEMMs (one forward GEMM pass per layer)
        b_part = t_stage * (1.0 - st.fwd_share)
        w_part = t_stage * work.t_gemm_f / np.maximum(st.t_layer, 1e-30)
        bubble = np.where(pp > 1, ga * np.maximum(pp / 2.0 - 1.0, 0.0)
                          * np.maximum(t_stage + b_part - 3.0 * w_part, 0.0), 0.0)
    # Megatron's scatter/gather optimisation (Narayanan et al. 2021, section 4.1): without sequence
    # parallelism each TP rank sends 1/tp of the activation over its own NIC and the receiving
    # stage all-gathers it over the scale-up links; with SP the activation is already sharded.
    h = float(model.d_model)
    sg = fw.pp_scatter_gather & ~sp & (tp > 1)
    pp_bytes = np.where(sg, rows.T * h * rows.el / tp, rows.tok_sp * h * rows.el)
    t_p2p = net.collective_time_s("p2p", pp_bytes, pp, rows.groups["pp"][1]) + np.where(sg, comm.half, 0.0)
    # (each schedule's fill and drain: ga of them)
    pp_steps = np.where(((vpp > 1) | dual) & fw.pp_overlap, 2.0 * ga * (pp - 1.0), 2.0 * (m * vpp + ga * (pp - 1.0)))
    pp_x = np.where(pp > 1, pp_steps * t_p2p, 0.0)
    # (the timeline ends each pipeline operation with an equal share of the exposed sends)
    pp_send = np.where(pp > 1, pp_x / (2.0 * (m * vpp + ga * (pp - 1.0))), 0.0)
    by_chunks = np.zeros(np.broadcast(t_stage, pp).shape, dtype=bool)
    if stages is not None or fw.pp_split == "middle":
        # (one schedule's walk, ga times)
        bubble, pp_x, by_chunks = uneven_interleaving(model, fw, stages, pp, vpp, rows.ms, t_stage, bubble / ga,
                                                      pp_x / ga, pp_send, st.chunk_parts, bound=schedule_bound)
        bubble, pp_x = bubble * ga, pp_x * ga
    return PipeTimes(bubble=bubble, pp_x=pp_x, pp_send=pp_send, by_chunks=by_chunks)
