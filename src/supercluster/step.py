"""The cost model: one training step priced per GPU, over numpy columns of layouts.

Every view (estimate, validate, planner, goodput) calls :func:`step_columns`; nothing else
holds a cost formula. Inputs are a model, a GPU, a network, a framework profile and a dict of
equal-length integer columns (one row per layout); outputs are columns in seconds, bytes and
FLOPs. :func:`step_breakdown` wraps one layout into a :class:`StepBreakdown`.

Legend: L layers, h width, a / k query / KV heads, dq / dv head dims, V vocab, s sequence,
b micro-batch, T = b s / cp tokens per GPU per micro-batch, m micro-batches per step,
Lh layers on the heaviest pipeline stage.

Physics, each with its source:
* Each GEMM of a layer is its FLOPs at the tensor-core rate plus its operands through HBM, one
  after the other (DeepGEMM's published shapes: data/kernels.toml [gemm]); the tensor-core rate is
  the one that gives back the GPU's measured GEMM rate at transformer training shapes (fprop, dgrad,
  wgrad; data/gpus.toml gemm_*_frac; hardware.tensor_frac), so few tokens per GPU or per expert pay
  for their weights' traffic; fp8 / fp4 casts are added as HBM traffic; backward is 2x forward. A
  calibrated profile's rate, measured in situ, keeps the roofline (the slower of the two).
* Attention with flash kernels does causal work s^2/2; backward does 2.5x the forward matmul
  work (FA2 paper); each at the kernel's published fraction of peak (data/kernels.toml). The
  unfused attention of pre-2023 frameworks does the full s^2 in batched GEMMs and moves the
  score matrix through HBM (softmax, dropout): :func:`_unfused_attention`.
* Norms, activations, residual adds, RoPE, MoE permutes are memory-bound: bytes counted per
  token, priced at HBM bandwidth — as fused kernels (:func:`_fused_layer_bytes`) or op by op
  for eager PyTorch (:func:`_eager_layer_bytes`); the backward moves 2x the forward bytes
  (reads saved input and incoming gradient, writes one).
* Collectives go through the :class:`~supercluster.network.Network` interface.
* Pipeline bubble (p-1)/v micro-batch slots of the slowest stage (Narayanan et al. 2021).
* Optimizer: Adam with fp32 master weights is memory-bound, 30 B per local parameter shard.
* Stragglers: multi-GPU steps lose the published 10.4 % of GPU time to waiting for the slowest
  rank (STRAGGLER25); shown as its own ledger line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import pplayout
from .errors import require
from .framework import (
    AttentionEfficiency,
    Framework,
    attention_efficiency,
    attention_length_factor,
    hbm_frac,
    host_op_launch_s,
    host_view_op_s,
    quantize_bytes_per_element,
    straggler_waste_frac,
)
from .hardware import GpuSpec
from .layout import Layout
from .models import GATED, ModelSpec
from .network import Network, TokenDispatch
from .schedule import chunk_durations, makespan, makespan_bound
from .units import GiB

RECOMPUTE_CODE = {"none": 0, "selective": 1, "full": 2}
#: ``rcm`` column: Megatron-Core ``--recompute-modules`` as bits; 0 = the framework's selective policy
#: (Megatron: core_attn alone). Only read with ``recompute`` selective.
RECOMPUTE_MODULE_BIT = {"core_attn": 1, "layernorm": 2, "moe_act": 4, "mlp": 8, "moe": 16, "mla_up_proj": 32}


def module_bits(modules: tuple[str, ...]) -> int:
    """The ``rcm`` code of a set of recompute modules."""
    return sum(RECOMPUTE_MODULE_BIT[x] for x in modules)


def module_names(bits: int) -> tuple[str, ...]:
    """The recompute modules of an ``rcm`` code."""
    return tuple(name for name, bit in RECOMPUTE_MODULE_BIT.items() if bits & bit)


COLUMNS = ("tp", "pp", "dp", "cp", "ep", "vpp", "mb", "gbs", "seq", "zero", "recompute", "sp", "lowp")
#: ``lowp`` column: the GEMM operand precision below 16 bits (0 = bf16/fp16, or fp32 on a CPU profile).
LOWP_CODE = {"fp8": 1, "fp4": 2}
#: Kernels per transformer layer per micro-batch (forward, backward), counted in a Megatron /
#: nanoGPT block: 4 GEMMs + attention + 2 norms, 2 residual adds, activation, RoPE, dropout-free
#: (12 forward); backward launches about twice as many. Only priced when a calibrated profile
#: measured a per-kernel overhead (``GpuSpec.op_overhead_s``).
OPS_PER_LAYER = (12.0, 24.0)

#: Ledger lines, in the order they are printed; they sum exactly to ``step_time_s``.
LEDGER = (
    "ideal_compute", "gemm_inefficiency", "attention_inefficiency", "memory_bound_ops", "recompute",
    "exposed_tp_comm", "exposed_cp_comm", "exposed_ep_comm", "exposed_pp_comm", "pipeline_bubble",
    "exposed_dp_comm", "optimizer", "stragglers",
)
ADAM_BYTES_PER_PARAM = 30.0  # read fp32 param, grad, m, v (16); write param, m, v (12) + bf16 copy (2)
FRAMEWORK_RESERVE_BYTES = 3 * GiB  # CUDA context, NCCL buffers, cuBLAS workspace (assumed)
DDP_BUCKET_PARAMS = 40e6  # Megatron-Core default gradient bucket (max(40M, 1M x dp))


def _col(cols: dict[str, np.ndarray], name: str) -> np.ndarray:
    return np.asarray(cols[name], dtype=float)


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


DEFAULT_RANK_ORDER = "tp-cp-ep-dp-pp"


def group_shapes(order: str, tp: np.ndarray, cp: np.ndarray, dp: np.ndarray, pp: np.ndarray, ep: np.ndarray,
                 etp: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each parallel group the step communicates over, as (members, rank stride): ``tp``, ``cp``,
    ``ep`` (within dp x cp, or over TP ranks first where expert TP < TP: MoE parallel folding),
    ``dp`` (the dense weights' data-parallel group, dp x cp), ``edp`` (the experts' data-parallel
    group, TP x CP x DP / (EP x expert TP)) and ``pp``. The cost model prices every collective on
    these; :meth:`supercluster.fabric.FabricNetwork.placement` says where their traffic goes."""
    stride = rank_strides(order, tp, cp, dp, pp)
    s_tp, s_dpcp = stride["tp"], stride["dpcp"]
    return {"tp": (tp, s_tp), "cp": (cp, stride["cp"]),
            "ep": (ep, np.where(etp == tp, s_dpcp, s_tp * etp)),
            "dp": (dp * cp, s_dpcp),
            "edp": (tp * dp * cp / (ep * etp), np.where(etp == tp, s_dpcp * ep, s_tp * ep * etp)),
            "pp": (pp, stride["pp"])}


def chunk_layers(num_layers: int, pp: int, vpp: int, counts_head: bool = False,
                 split: str = "even") -> list[list[int]]:
    """Transformer layers on each (stage, chunk); chunk c of stage s is virtual stage c pp + s.

    ``split`` "even": the L (or L + 2, where the embedding and the loss take a layer's slot each)
    slots spread evenly in model order, the earlier chunks taking the remainder. "middle"
    (torchtitan's generate_split_points): the first chunk takes floor(L / (pp vpp)), each middle
    chunk one more while the remainder lasts, the last chunk what is left."""
    n = pp * vpp
    if split == "middle":
        base, extra = divmod(num_layers, n)
        per = [base] * n
        for k in range(1, n - 1):
            if extra == 0:
                break
            per[k] += 1
            extra -= 1
        per[-1] += extra
    else:
        slots = num_layers + (2 if counts_head else 0)
        base, rem = divmod(slots, n)
        per = [base + (1 if k < rem else 0) for k in range(n)]
        if counts_head:
            per[0] -= 1
            per[-1] -= 1
    require(min(per) >= 0 and (split != "middle" or min(per) >= 1), "pp",
            f"pp x vpp = {pp} x {vpp} leaves a chunk without a layer")
    return [[per[c * pp + s] for c in range(vpp)] for s in range(pp)]


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


def _uneven_interleaving(model: ModelSpec, fw: Framework, stages: list[str] | None, pp: np.ndarray,
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

    ``bound``: price those rows by :func:`supercluster.schedule.makespan_bound` instead, a lower
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


def step_columns(model: ModelSpec, gpu: GpuSpec, net: Network, fw: Framework,
                 cols: dict[str, np.ndarray], rank_order: str = DEFAULT_RANK_ORDER,
                 stages: list[str] | None = None, schedule_bound: bool = False) -> dict[str, np.ndarray]:
    """Price every layout row of ``cols``; returns columns (seconds, bytes, FLOPs).

    ``cols`` holds the integer columns of :data:`COLUMNS`; ``recompute`` uses
    :data:`RECOMPUTE_CODE`, ``sp`` is 0/1 and ``lowp`` uses :data:`LOWP_CODE`. Assumes rows already validated.
    ``stages``, the virtual stages of an explicit pipeline layout (:func:`supercluster.pplayout.parse`),
    replaces the framework's split for every row (all rows then share its pp and vpp).

    Where the chunks of an interleaved schedule differ (the "middle" split, an explicit layout),
    the schedule's longest path (:func:`supercluster.schedule.makespan`) prices the pipeline, and the
    column ``pipeline_by_chunks`` is 1 on those rows: the timeline then lays out each chunk's own work.
    With ``schedule_bound`` those rows get a lower bound of that path instead (no walk; every other
    column is exact): the planner's first pass, which then prices exactly the rows that can matter.
    """
    tp, pp, dp, cp, ep, vpp = (_col(cols, c) for c in ("tp", "pp", "dp", "cp", "ep", "vpp"))
    mb, gbs, seq, zero = (_col(cols, c) for c in ("mb", "gbs", "seq", "zero"))
    rc = _col(cols, "recompute")
    # expert tensor parallelism (Megatron-Core MoE parallel folding); tp where not given
    etp = _col(cols, "etp") if "etp" in cols else tp
    # Full recompute of only the first ``rcl`` layers of each pipeline chunk (Megatron-Core
    # recompute_method "block" with recompute_num_layers; 0 = every layer): ``frc`` is that share.
    rcl = _col(cols, "rcl") if "rcl" in cols else np.zeros_like(rc)
    sp = (_col(cols, "sp") > 0) & (tp > 1)
    lowp = _col(cols, "lowp")
    fp8, fp4 = lowp == LOWP_CODE["fp8"], lowp == LOWP_CODE["fp4"]
    fp32 = (_col(cols, "fp32") > 0) if "fp32" in cols else np.zeros(tp.shape, dtype=bool)
    groups = group_shapes(rank_order, tp, cp, dp, pp, ep, etp)
    s_tp, s_cp, s_dpcp, s_pp = groups["tp"][1], groups["cp"][1], groups["dp"][1], groups["pp"][1]

    L, h, V = model.num_layers, float(model.d_model), float(model.vocab_size)
    a, k, dq, dv = float(model.num_heads), float(model.num_kv_heads), float(model.qk_dim), float(model.v_dim)
    f_moe = model.num_moe_layers / L
    # (a hybrid: w_attn is its mixers' matmul weights per layer, attention and the recurrent ones)
    w_attn = (model.attention_layers * model.attn_params + model.recurrent_matmul_params) / L
    w_mlp = (model.num_dense_layers * model.dense_mlp_params + model.num_moe_layers * model.moe_active_mlp_params) / L
    f_act = mean_mlp_width(model)
    act_passes = 3.0 if GATED[model.mlp] else 2.0

    # "16" = the layout's non-fp8 precision: bf16, or fp32 on a calibrated CPU profile.
    if fp32.any():
        peak16 = np.where(fp32, gpu.peak("fp32"), gpu.peak_flops_per_s.get("bf16", 0.0))
        ceiling16 = np.where(fp32, gpu.gemm_flops_per_s("fp32"),
                             gpu.gemm_flops_per_s("bf16") if gpu.peak_flops_per_s.get("bf16") else 0.0)
    else:
        peak16, ceiling16 = gpu.peak("bf16"), gpu.gemm_flops_per_s("bf16")
    # GEMMs in fp8 or fp4 (Transformer Engine recipes: every linear layer's fprop, dgrad and wgrad);
    # attention, norms and the logits stay in 16 bits.
    peak, ceiling = peak16, ceiling16
    for low, key in ((fp8, "fp8"), (fp4, "fp4")):
        if gpu.peak_flops_per_s.get(key):
            peak = np.where(low, gpu.peak_flops_per_s[key], peak)
            ceiling = np.where(low, gpu.gemm_flops_per_s(key), ceiling)
    # The layers' GEMMs: tensor-core work plus operand traffic, not overlapped (kernels.toml [gemm]);
    # a calibrated profile's rates were measured in situ and keep the roofline (max of the two).
    in_situ = not gpu.gemm_tensor_frac
    tensor = ceiling
    if not in_situ:
        tensor = np.full_like(ceiling, gpu.gemm_tensor_flops_per_s("bf16"))
        for low, key in ((fp8, "fp8"), (fp4, "fp4")):
            if gpu.peak_flops_per_s.get(key):
                tensor = np.where(low, gpu.gemm_tensor_flops_per_s(key), tensor)
    unfused = fw.attention == "unfused"
    if gpu.attention_frac is not None:
        att = AttentionEfficiency(fwd_frac=gpu.attention_frac[0], bwd_frac=gpu.attention_frac[1],
                                  source="calibration")
    elif not unfused:
        att = attention_efficiency(fw.attention, gpu.arch)
    # (a calibrated profile's attention rate prices the recurrences; sparse attention needs its own kernels)
    require(not unfused or not (model.index_topk or (model.recurrent_layers and gpu.attention_frac is None)),
            "framework", f"{fw.key} runs attention unfused (before FlashAttention); {model.name}'s "
            + ("sparse attention needs the fused sparse kernels" if model.index_topk else
               "Mamba / Gated DeltaNet layers need the fused chunked kernels") + " of newer stacks")
    mem_bw = gpu.hbm_bytes_per_s * hbm_frac()

    m = gbs / (dp * mb)
    # gradient-accumulation steps run as separate pipeline schedules (torchtitan, NeMo AutoModel), each
    # with its own fill and drain; ms micro-batches in each
    ga = _col(cols, "ga") if "ga" in cols else np.ones_like(m)
    ms = m / ga
    T = mb * seq / cp
    tok_sp = np.where(sp, T / tp, T)
    kv_local = np.maximum(k / tp, 1.0)

    # ---- compute per layer per micro-batch (seconds) -----------------------------------
    gemm_f = 2.0 * T * (w_attn + w_mlp) / tp
    # causal (windowed, or sparse top-k) keys at the widths the kernel multiplies (sparse MLA: its MQA form)
    attn_f = 2.0 * T * (a / tp) * model.attention_width_keys(seq, causal=True)
    # DeepSeek Sparse Attention's lightning indexer: scores over every preceding key forward, gradients
    # through the selected keys backward; its heads split over TP as the attention's do (0 without DSA)
    idx_fwd, idx_bwd = model.indexer_flops_per_token(seq, causal=True)
    idx_f, idx_b = T * idx_fwd / L / tp, T * idx_bwd / L / tp
    el = np.where(fp32, 4.0, 2.0)  # activation bytes
    low_el = np.where(fp4, 0.5, np.where(fp8, 1.0, el))  # GEMM operand bytes
    # fp8 / fp4 GEMMs also pay Transformer Engine's quantisation passes (HBM bytes per quantised element)
    q_el = np.where(fp4, quantize_bytes_per_element(gpu.arch, "fp4"),
                    np.where(fp8, quantize_bytes_per_element(gpu.arch, "fp8"), 0.0))
    # (the weights are cast once per step: Transformer Engine caches them after the first micro-batch)
    t_gemm_f = _layer_gemm_time(model, T, tp, ep, tensor, low_el, el, mem_bw, etp, q_el, q_el / (gbs / (dp * mb)),
                                overlap=in_situ)
    drop = 1.0 if fw.dropout else 0.0
    if unfused:
        t_attn_f, t_attn_b, t_score_f, t_score_b = _unfused_attention(
            T * (a / tp) * seq, dq, dv, el, drop, ceiling16, mem_bw)
    else:
        # (sparse MLA at the flash kernel's efficiency: DeepSeek's FlashMLA sparse prefill kernel reaches
        # 640 TFLOP/s on H800, FlashAttention-3's range; the indexer likewise, in 16 bits, an assumption:
        # DeepSeek runs it in fp8)
        # (below long sequences the kernel runs slower: the sequence each rank attends over, seq / cp; a
        # calibrated profile's rate is its own measurement and is not scaled)
        short = attention_length_factor(seq / cp) if gpu.attention_frac is None else 1.0
        t_attn_f = (attn_f + idx_f) / (peak16 * gpu.clock_frac * att.fwd_frac * short)
        t_attn_b = (2.5 * attn_f + idx_b) / (peak16 * gpu.clock_frac * att.bwd_frac * short)
        t_score_f = t_score_b = np.zeros_like(tp)
    # The chunked recurrences (Mamba-2's SSD scan, mamba_chunk_scan_combined; Gated DeltaNet's delta
    # rule, FLA's chunk_gated_delta_rule): Triton kernels of chunked matmuls with masking, like
    # FlashAttention's, priced at the attention kernel's efficiency and with its 2.5x backward (no
    # published rate for these kernels; an assumption). 0 in a transformer.
    rec_f = T * model.recurrent_flops_per_token() / L / tp
    if model.recurrent_layers:
        t_rec_f = rec_f / (peak16 * gpu.clock_frac * att.fwd_frac)
        t_rec_b = 2.5 * rec_f / (peak16 * gpu.clock_frac * att.bwd_frac)
    else:
        t_rec_f = t_rec_b = np.zeros_like(tp)
    if fw.elementwise == "eager":
        bytes_f = _eager_layer_bytes(model, T, tok_sp, tp, kv_local, el, f_act, f_moe)
    else:
        bytes_f = _fused_layer_bytes(model, T, tok_sp, tp, kv_local, el, act_passes, f_act, f_moe)
    bytes_f = bytes_f + drop * 2.0 * h * tok_sp  # the masks of the two hidden dropouts (fused bias-dropout-add)
    t_mem_f = bytes_f / mem_bw + OPS_PER_LAYER[0] * gpu.op_overhead_s
    t_fwd = t_gemm_f + t_attn_f + t_mem_f + t_score_f + t_rec_f
    t_bwd = 2.0 * t_gemm_f + t_attn_b + 2.0 * t_mem_f + t_score_b + t_rec_b
    # Megatron-Core selective recompute modules (0 = core_attn alone, Korthikanti et al. 2022)
    rcm = _col(cols, "rcm").astype(np.int64) if "rcm" in cols else np.zeros(tp.shape, dtype=np.int64)
    mods = np.where(rc == 1, np.where(rcm == 0, RECOMPUTE_MODULE_BIT["core_attn"], rcm), 0)
    has = {name: (mods & bit) > 0 for name, bit in RECOMPUTE_MODULE_BIT.items()}
    f_dense, f_moew, f_routed = mlp_widths(model)
    w_dense = model.num_dense_layers * model.dense_mlp_params / L
    w_moe = model.num_moe_layers * model.moe_active_mlp_params / L
    # MLA's up-projections (the low-rank latents to per-head q, and k / v without RoPE)
    nope = model.qk_dim - model.qk_rope_head_dim
    w_up = float(model.q_lora_rank * a * model.qk_dim + model.kv_lora_rank * a * (nope + model.v_dim)) \
        if model.kv_lora_rank else 0.0
    if fw.selective_recompute == "op":
        # torchtitan per-op SAC: the outputs of every other matmul and of SDPA are saved; the other
        # matmuls and every non-matmul op (norms, activation, RoPE, adds) run again.
        t_sel = op_sac_recompute_frac(model) * t_gemm_f + t_mem_f
    else:
        # Each recomputed module's forward runs again in the backward: core attention; the MoE
        # layers' pre-MLP norm (Transformer Engine fuses the others into their linears, where
        # Megatron-Core does not recompute them); the experts' activation; a dense MLP or a whole MoE
        # layer (its GEMMs by their FLOP share of the layer's, activation, permutes; the all-to-alls
        # are added below).
        act_t = el * T * act_passes / tp / mem_bw
        t_sel = (np.where(has["core_attn"], t_attn_f + t_score_f, 0.0)
                 + np.where(has["layernorm"], f_moe * 2.0 * el * h * tok_sp / mem_bw, 0.0)
                 + np.where(has["moe_act"] & ~has["moe"], act_t * f_routed, 0.0)
                 + np.where(has["mlp"], t_gemm_f * w_dense / (w_attn + w_mlp) + act_t * f_dense
                            + (1.0 - f_moe) * 2.0 * el * h * tok_sp / mem_bw, 0.0)
                 + np.where(has["moe"], t_gemm_f * w_moe / (w_attn + w_mlp) + act_t * f_moew
                            + el * f_moe * 4.0 * model.top_k * model.expert_width * tok_sp / mem_bw, 0.0)
                 + np.where(has["mla_up_proj"], t_gemm_f * w_up / (w_attn + w_mlp), 0.0))
    chunk = np.ceil(model.num_layers / (pp * vpp))
    frc = np.where(rc == 2, np.where(rcl > 0, np.minimum(1.0, rcl / chunk), 1.0), 0.0)
    t_rc = np.where(rc == 2, frc * t_fwd, np.where(rc == 1, t_sel, 0.0))

    # ---- communication per layer per micro-batch ----------------------------------------
    act_bytes = T * h * el
    half = net.collective_time_s("all_gather", act_bytes, tp, s_tp)
    ar = net.collective_time_s("all_reduce", act_bytes, tp, s_tp)
    # Attention and a dense MLP each all-gather / reduce-scatter (SP) or all-reduce their activations;
    # an MoE MLP does not: its dispatcher moves the tokens (below), so MoE layers keep half of these.
    # (a hybrid's single-block layers: one mixer or one MLP each, one set of collectives)
    dense_share = 1.0 - 0.5 * (f_moe + (model.mlp_only_layers + model.mixer_only_layers) / L)
    tp_f = np.where(sp, 4.0 * half, 2.0 * ar) * dense_share
    tp_b = np.where(sp, 6.0 * half, 2.0 * ar) * dense_share  # SP re-gathers the input for the weight gradient
    if fw.tp_comm_overlap:
        # Pipelined in tp chunks with the GEMMs: one chunk of communication cannot hide.
        tp_fx = np.maximum(tp_f - t_gemm_f, tp_f / tp)
        tp_bx = np.maximum(tp_b - 2.0 * t_gemm_f, tp_b / tp)
    else:
        tp_fx, tp_bx = tp_f, tp_b
    # a recomputed dense MLP gathers its (SP) input and reduces its output again
    tp_x = tp_fx + tp_bx + frc * tp_fx + np.where(
        has["mlp"], tp_fx * (1.0 - f_moe - model.mixer_only_layers / L) / (2.0 * dense_share), 0.0)

    kv_el = T * (a / tp if fw.cp_kv_repeated else kv_local) * (dq + dv)  # this rank's K and V
    if fw.cp_rotate == "allgather":
        cp_f, cp_fx, cp_b, cp_bx, cp_mem_f, cp_mem_b, ring_bytes = _allgather_ring_attention(
            net, cp, s_cp, kv_el, T * (a / tp), dq, dv, el, t_attn_f, t_attn_b, mem_bw)
        t_fwd, t_bwd = t_fwd + cp_mem_f, t_bwd + cp_mem_b
        t_rc = t_rc + np.where(rc == 2, frc * cp_mem_f, 0.0)
    else:
        ring_step = net.collective_time_s("p2p", kv_el * el, cp, s_cp)
        cp_f = (cp - 1.0) * ring_step
        cp_b = 2.0 * cp_f  # K/V and their gradients travel in the backward ring
        cp_fx, cp_bx = np.maximum(cp_f - t_attn_f, 0.0), np.maximum(cp_b - t_attn_b, 0.0)
        cp_mem_f = cp_mem_b = ring_bytes = np.zeros_like(tp)
    cp_x = cp_fx * (1.0 + frc) + cp_bx

    if model.is_moe:
        # Megatron-Core's all-to-all dispatcher: EP all-to-all of each rank's tokens x top_k, then (expert
        # TP > 1) an all-gather of the dispatched tokens over the expert-TP ranks for the TP-sharded
        # experts; the combine does the reverse (reduce-scatter, all-to-all); the backward mirrors both.
        # Not pipelined with GEMMs. With expert TP < TP (MoE parallel folding) the EP group runs over TP
        # ranks first (stride tp-stride x etp) instead of within dp x cp.
        s_ep = groups["ep"][1]
        # (a latent MoE dispatches its tokens at the experts' latent width)
        hx = float(model.expert_width)
        # (DeepEP: each token goes once to every rank, and crosses once to every node, holding any of
        # its experts; where they are depends on how the router spreads them)
        dedup = {"dedup": TokenDispatch(float(model.num_experts), float(model.top_k), fw.moe_router)
                 } if fw.ep_node_dedup else {}
        a2a = net.collective_time_s("all_to_all", tok_sp * model.top_k * hx * el, ep, s_ep, **dedup)
        tp_tokens = np.where(etp > 1, net.collective_time_s("all_gather", T * (etp / tp) * model.top_k * hx * el, etp,
                                                            s_tp), 0.0)
        ep_x = f_moe * (a2a + tp_tokens) * (4.0 + 2.0 * frc + 2.0 * has["moe"])
        if fw.ep_overlap and fw.ep_overlap_bounded:
            # Megatron-Core overlap-moe-expert-parallel-comm: another micro-batch's compute runs under
            # the all-to-alls, so only what exceeds a layer's compute stays exposed
            ep_x = np.maximum(ep_x - (t_fwd + t_bwd + t_rc), 0.0)
        elif fw.ep_overlap:  # DualPipe: the DeepSeek-V3 report states the all-to-all is fully hidden
            ep_x = np.zeros_like(ep_x)
    else:
        ep_x = np.zeros_like(tp)

    # ---- one pipeline stage, one micro-batch --------------------------------------------
    head_f = 2.0 * T * h * V / tp
    t_head = 3.0 * head_f / ceiling16 + 5.0 * 4.0 * T * V / tp / mem_bw  # logits in bf16, fp32 loss
    # Vocabulary-parallel embedding and head (Megatron): the embedding output is all-reduced in the
    # forward, the head input gradient in the backward (SP: all-gather / reduce-scatter instead),
    # and the cross-entropy all-reduces three fp32 statistics per token (max, sum of exp, target).
    tp_head = np.where(sp, 2.0 * half, 2.0 * ar) + 3.0 * net.collective_time_s("all_reduce", T * 4.0, tp, s_tp)
    t_layer = t_fwd + t_bwd + t_rc + tp_x + cp_x + ep_x
    # Multi-token prediction on the last stage: per module a block (priced as an average layer), its
    # 2h -> h projection (a GEMM, forward and backward) and the shared head and loss once more.
    mtp = float(model.mtp_layers)
    proj_f = 2.0 * T * 2.0 * h * h / tp
    t_proj = 3.0 * proj_f / ceiling
    t_head_pass = t_head + tp_head  # the head and the loss, once
    t_head_pass_f = t_head / 3.0 + tp_head / 2.0  # its forward share
    t_mtp_one = t_proj + t_head_pass  # what one MTP module costs beyond a layer

    def work_s(blocks: np.ndarray | float, mtps: np.ndarray | float, heads: np.ndarray | float) -> np.ndarray:
        """A stage's (or chunk's) work per micro-batch: its layer-like blocks, what each MTP module adds
        beyond its block, and its passes of the head (schedule.chunk_durations splits the same sum)."""
        return blocks * t_layer + mtps * t_mtp_one + heads * t_head_pass

    fwd_share = (t_fwd + tp_fx + cp_fx) / np.maximum(t_fwd + t_bwd + t_rc + tp_x + cp_x, 1e-30)
    # Heaviest stage: ceil(L / (pp vpp)) layers per virtual chunk, and the last stage also runs the
    # head (and any MTP modules). A framework that counts the embedding and the loss as one layer each
    # in the split (Megatron-Core account_for_*_in_pipeline_split) puts the head where a layer would
    # be, and each MTP module in a layer's slot too (as Megatron-Bridge's DeepSeek-V3 layouts place
    # their "m", e.g. "Et|(tt|)*30mL"); it is used where it makes the slowest stage faster, and
    # allows pp x vpp up to L + 2 + mtp.
    Lh = np.ceil(L / (pp * vpp)) * vpp
    t_stage = work_s(Lh + mtp, mtp, 1.0)
    # (Lh_last: layer-like blocks on the last stage, its layers and the MTP blocks)
    rank_blocks = None if stages is None else pplayout.rank_blocks(stages, int(np.max(pp)))
    if rank_blocks is not None:
        # an explicit layout: each rank's layers, MTP modules (a layer, their projection and a pass
        # of the head each) and head; the slowest rank sets the pace
        n_t, n_m, n_l = (rank_blocks[:, i][:, None] for i in range(3))
        t_rank = work_s(n_t + n_m, n_m, n_l)
        r = np.argmax(t_rank, axis=0)
        t_stage = t_rank[r, np.arange(t_rank.shape[1])]
        Lh = n_t[r, 0] * np.ones_like(t_layer)
        Lh_first = (n_t[0, 0] + n_m[0, 0]) * np.ones_like(t_layer)
        Lh_last = (n_t[-1, 0] + n_m[-1, 0]) * np.ones_like(t_layer)
        Lc = (n_t[r, 0] + n_m[r, 0]) * np.ones_like(t_layer)
        projs, heads = n_m[r, 0] * np.ones_like(t_layer), (n_l[r, 0] + n_m[r, 0]) * np.ones_like(t_layer)
        bal = np.zeros(t_layer.shape, dtype=bool)
    elif fw.pp_split_counts_head:
        Lh_bal = np.ceil((L + 2.0 + mtp) / (pp * vpp)) * vpp
        t_last = work_s(Lh_bal - 1.0, mtp, 1.0)
        t_bal = np.maximum(Lh_bal * t_layer, t_last)
        bal = (pp > 1) & ((t_bal < t_stage) | (pp * vpp > L))
        Lh, t_stage = np.where(bal, Lh_bal, Lh), np.where(bal, t_bal, t_stage)
        Lh_first = np.where(bal, Lh_bal - 1.0, Lh)  # the first stage holds the embedding in a layer's place
        Lh_last = np.where(bal, Lh_bal - 1.0, Lh + mtp)  # and the last one the loss
        # The ledger charges the heaviest stage's work: a middle stage's Lh layers, or the last
        # stage's Lh - 1 layer slots and the head, whichever is longer (not Lh layers and the head).
        middle = bal & (Lh_bal * t_layer >= t_last)
        Lc, head_on = np.where(bal & ~middle, Lh_bal - 1.0, Lh + mtp), np.where(middle, 0.0, 1.0)
    elif fw.pp_split == "middle":
        # torchtitan's split: the last stage holds its (fewer) layers and the head; the heaviest stage
        # is whichever of it and the fullest middle stage takes longer
        first, last, other = _middle_split_stages(L, pp, vpp)
        t_last = work_s(last + mtp, mtp, 1.0)
        t_stage = np.maximum(other * t_layer, t_last)
        middle = other * t_layer > t_last
        Lh = np.where(middle, other, last)
        Lh_first, Lh_last = first, last + mtp
        Lc, head_on = np.where(middle, other, last + mtp), np.where(middle, 0.0, 1.0)
    else:
        Lh_first, Lh_last = Lh, Lh + mtp
        Lc, head_on = Lh + mtp, np.ones_like(t_layer)
    bubble = ga * (pp - 1.0) / vpp * t_stage
    dual = fw.pipeline_schedule == "dualpipe"
    if dual:
        # DualPipe (DeepSeek-V3 report Table 2): (pp/2 - 1)(F&B + B - 3W) per stage and micro-batch,
        # F&B = F + B (a forward and a backward chunk run as a pair, each one's communication under the
        # other's compute), B the backward (with its recompute and exposed sends), W its weight-gradient
        # GEMMs (one forward GEMM pass per layer)
        b_part = t_stage * (1.0 - fwd_share)
        w_part = t_stage * t_gemm_f / np.maximum(t_layer, 1e-30)
        bubble = np.where(pp > 1, ga * np.maximum(pp / 2.0 - 1.0, 0.0)
                          * np.maximum(t_stage + b_part - 3.0 * w_part, 0.0), 0.0)
    if rank_blocks is None:
        heads = head_on * (1.0 + mtp)  # the head runs once more per MTP module where the last stage is heaviest
        projs = head_on * mtp  # and each MTP module's 2h -> h projection

    # Megatron's scatter/gather optimisation (Narayanan et al. 2021, section 4.1): without sequence
    # parallelism each TP rank sends 1/tp of the activation over its own NIC and the receiving
    # stage all-gathers it over the scale-up links; with SP the activation is already sharded.
    sg = fw.pp_scatter_gather & ~sp & (tp > 1)
    pp_bytes = np.where(sg, T * h * el / tp, tok_sp * h * el)
    t_p2p = net.collective_time_s("p2p", pp_bytes, pp, s_pp) + np.where(sg, half, 0.0)
    # (each schedule's fill and drain: ga of them)
    pp_steps = np.where(((vpp > 1) | dual) & fw.pp_overlap, 2.0 * ga * (pp - 1.0), 2.0 * (m * vpp + ga * (pp - 1.0)))
    pp_x = np.where(pp > 1, pp_steps * t_p2p, 0.0)
    # (the timeline ends each pipeline operation with an equal share of the exposed sends)
    pp_send = np.where(pp > 1, pp_x / (2.0 * (m * vpp + ga * (pp - 1.0))), 0.0)
    # the parts of a stage, for pricing (and laying out) each chunk with its own work
    chunk_parts = dict(layer_time_s=t_layer, layer_forward_frac=fwd_share, head_time_s=t_head_pass,
                       head_forward_s=t_head_pass_f, mtp_time_s=t_mtp_one, mtp_forward_s=t_proj / 3.0 + t_head_pass_f)
    by_chunks = np.zeros(np.broadcast(t_stage, pp).shape, dtype=bool)
    if stages is not None or fw.pp_split == "middle":
        # (one schedule's walk, ga times)
        bubble, pp_x, by_chunks = _uneven_interleaving(model, fw, stages, pp, vpp, ms, t_stage, bubble / ga, pp_x / ga,
                                                       pp_send, chunk_parts, bound=schedule_bound)
        bubble, pp_x = bubble * ga, pp_x * ga

    # ---- data parallel and optimizer -----------------------------------------------------
    shared_mlp = model.num_dense_layers * model.dense_mlp_params + model.num_moe_layers * (
        model.shared_expert_params + model.d_model * model.num_experts)
    # (MTP modules counted like layers: their blocks take layer slots in the split)
    mtp_experts = mtp * model.num_experts * model.expert_params
    dense_params = (model.mixer_params + model.sublayers * h + shared_mlp + mtp * model.mtp_block_params
                    - mtp_experts) / (tp * pp) + V * h / tp
    expert_params = (model.num_moe_layers * model.num_experts * model.expert_params + mtp_experts) / (pp * ep * etp)
    if dual:
        # DualPipe keeps two stages' parameters on every rank (Table 2: "Parameter 2x"): their weights,
        # gradients, optimizer states, gradient reduction and update
        copies = np.where(pp > 1, 2.0, 1.0)
        dense_params, expert_params = dense_params * copies, expert_params * copies
    dpg = dp * cp
    edpg, s_edp = groups["edp"]  # expert data-parallel group: ETP x EP x EDP = TP x CP x DP
    grb, gb = fw.grad_reduce_bytes, fw.grad_bytes

    def dp_time(kind: str, params: np.ndarray, width: float, group: np.ndarray, stride: np.ndarray) -> np.ndarray:
        return np.asarray(net.collective_time_s(kind, params * width, group, stride))

    rs = dp_time("reduce_scatter", dense_params, grb, dpg, s_dpcp) + dp_time("reduce_scatter", expert_params, grb,
                                                                          edpg, s_edp)
    # parameters are all-gathered in 16 bits, or in fp8 / fp4 where the framework keeps them so
    pg = np.where(fw.fp8_param_gather, low_el, el)
    ag = dp_time("all_gather", dense_params, pg, dpg, s_dpcp) + dp_time("all_gather", expert_params, pg, edpg,
                                                                         s_edp)
    arr = dp_time("all_reduce", dense_params, grb, dpg, s_dpcp) + dp_time("all_reduce", expert_params, grb, edpg,
                                                                         s_edp)
    # Compute already hiding TP or CP traffic is not free to hide DP traffic as well, so the
    # windows exclude it (keeps "faster compute is never slower" true).
    hid_f = (tp_f - tp_fx) + (cp_f - cp_fx)
    hid_b = (tp_b - tp_bx) + (cp_b - cp_bx)
    win_f = Lh * (t_fwd + tp_fx + cp_fx - hid_f)
    win_b = Lh * (t_bwd + t_rc + tp_bx + cp_bx - hid_b)
    bucket = np.minimum(1.0, np.maximum(DDP_BUCKET_PARAMS, 1e6 * dpg) / (dense_params + expert_params))
    # ZeRO-3 / FSDP: per micro-batch, gathers in forward and backward (and again for a
    # recomputed forward where the framework releases parameters), one reduce-scatter, split into
    # Lh x gathers_per_layer (reduces_per_layer) collectives whose latency adds up.
    n_coll = Lh * fw.zero3_gathers_per_layer
    n_rs = Lh * (fw.zero3_reduces_per_layer or fw.zero3_gathers_per_layer)
    # The bytes are those of the whole-stage collectives above; each extra call adds its latency
    # (the time of a zero-byte call on the same group).
    ag3 = ag + (n_coll - 1.0) * net.collective_time_s("all_gather", 0.0, dpg, s_dpcp)
    # ... and the copies the framework makes around each gather, at HBM speed
    ag3 = ag3 + fw.zero3_gather_copy_bytes * (dense_params + expert_params) * pg / mem_bw
    rs3 = rs + (n_rs - 1.0) * net.collective_time_s("reduce_scatter", 0.0, dpg, s_dpcp)
    # Through list-form collectives each call also launches one copy per rank on the host: a gather's
    # copies follow its NCCL kernel, launched while it runs (the gather takes the longer of the two); a
    # reduce-scatter's copies come before its kernel, and no compute hides them (the host launches that
    # compute; the device is synchronised around the gathers).
    launch = float(fw.zero3_list_collectives) * dpg * host_op_launch_s()
    # ... and where the framework builds the per-rank views in its own Python loop, that loop runs
    # first, on the host, before the call is made
    view_ag = fw.zero3_gather_views_per_rank * dpg * host_view_op_s()
    view_rs = fw.zero3_reduce_views_per_rank * dpg * host_view_op_s()
    ag3 = n_coll * view_ag + np.maximum(ag3, n_coll * launch)
    # (per micro-batch; once a schedule where FSDP keeps a pipeline stage gathered, below)
    host = np.where((pp > 1) & fw.fsdp_pp_unsharded, ga, m) * n_rs * (launch + view_rs)
    # (a framework that keeps the parameters gathered from the forward to the backward gathers once)
    ag3_b = ag3 * (1.0 + frc * float(fw.zero3_regather_on_recompute)) * float(fw.zero3_reshard_after_forward)
    # Overlap windows: forward compute hides parameter gathers, backward compute hides the
    # backward gathers and the gradient reduce-scatters together (one window, shared).
    if fw.dp_overlap:
        dp_low = np.where(zero == 0, np.maximum(arr - win_b, arr * bucket),
                          np.maximum(rs - win_b, rs * bucket) + np.maximum(ag - win_f, ag * bucket))
        if fw.zero3_prefetch:
            dp_z3 = m * (np.maximum(ag3 - win_f, ag3 / n_coll) + np.maximum(ag3_b + rs3 - win_b, rs3 / n_rs))
        else:
            dp_z3 = m * (ag3 + ag3_b + np.maximum(rs3 - win_b, rs3 / n_rs))
    else:
        dp_low = np.where(zero == 0, arr, rs + ag)
        dp_z3 = m * (ag3 + ag3_b + rs3)
    if fw.fsdp_pp_unsharded:
        # under PP: one gather before the first micro-batch's forward, one reduce-scatter after the last
        # backward, each hidden behind one micro-batch's compute at most; per schedule (torch's pipeline
        # stage reshards and reduces at the last backward of each schedule step)
        dp_z3 = np.where(pp > 1, ga * (np.maximum(ag3 - win_f, ag3 / n_coll) + np.maximum(rs3 - win_b, rs3 / n_rs)),
                         dp_z3)
    dp_z3 = dp_z3 + host
    dp_x = np.where(dpg > 1, np.where(zero >= 3, dp_z3, dp_low), 0.0)

    local = dense_params + expert_params
    shard = np.where(zero >= 1, dense_params / dpg + expert_params / edpg, local)
    # Adam reads and writes its states (the framework's optimizer bytes: fp32 master, m and v = 12, as
    # ADAM_BYTES_PER_PARAM counts them), reads a 4-byte gradient and writes the 2-byte copy: 2 S + 6
    adam = np.where(fp32, ADAM_BYTES_PER_PARAM, 2.0 * fw.optimizer_bytes_per_param + 6.0)
    t_opt = (shard * adam + np.where(zero >= 2, shard, local) * 2.0 * gb) / mem_bw

    # ---- the ledger -----------------------------------------------------------------------
    # (Lc layers and head_on heads: the heaviest stage's work per micro-batch, which sums to t_stage)
    attn_model = 3.0 * (attn_f + rec_f) + idx_f + idx_b  # attention-like model FLOPs of a layer, fwd + bwd
    ideal = m * (Lc * (3.0 * gemm_f / peak + attn_model / peak16) + heads * 3.0 * head_f / peak16
                 + projs * 3.0 * proj_f / peak)
    gemm_ineff = m * (Lc * 3.0 * (t_gemm_f - gemm_f / peak)
                      + heads * 3.0 * (head_f / ceiling16 - head_f / peak16)
                      + projs * (t_proj - 3.0 * proj_f / peak))
    attn_ineff = m * Lc * (t_attn_f + t_attn_b + t_rec_f + t_rec_b - attn_model / peak16)
    mem_ops = m * (Lc * (3.0 * t_mem_f + t_score_f + t_score_b + cp_mem_f + cp_mem_b)
                   + heads * 5.0 * 4.0 * T * V / tp / mem_bw)
    ledger = {
        "ideal_compute": ideal, "gemm_inefficiency": gemm_ineff, "attention_inefficiency": attn_ineff,
        "memory_bound_ops": mem_ops, "recompute": m * Lc * t_rc,
        "exposed_tp_comm": m * (Lc * tp_x + heads * tp_head),
        "exposed_cp_comm": m * Lc * cp_x, "exposed_ep_comm": m * Lc * ep_x, "exposed_pp_comm": pp_x,
        "pipeline_bubble": bubble, "exposed_dp_comm": dp_x, "optimizer": t_opt,
    }
    rest = sum(ledger[name] for name in LEDGER if name != "stragglers")
    waste = straggler_waste_frac() if gpu.straggler_frac is None else gpu.straggler_frac
    sync = np.where(tp * pp * dp * cp > 1, waste, 0.0)
    ledger["stragglers"] = rest * sync / (1.0 - sync)
    step = rest + ledger["stragglers"]

    # ---- FLOP accounting and memory ------------------------------------------------------
    num_gpus = tp * pp * dp * cp
    tokens = gbs * seq
    model_flops = tokens * model.model_flops_per_token(seq, causal=False)
    fwd_layers_flops = tokens * 2.0 * (model.matmul_params_per_token() - (1.0 + mtp) * V * h) + tokens * \
        (model.attention_flops_per_token(seq, causal=False) + model.recurrent_flops_per_token()
         + model.indexer_flops_per_token(seq, causal=False)[0])
    sel_flops = tokens * (np.where(has["core_attn"], model.attention_flops_per_token(seq, causal=False), 0.0)
                          + 2.0 * L * (np.where(has["mlp"], w_dense, 0.0) + np.where(has["moe"], w_moe, 0.0)
                                       + np.where(has["mla_up_proj"], w_up, 0.0)))
    if fw.selective_recompute == "op":
        sel_flops = tokens * model.attention_flops_per_token(seq, causal=False)
    rc_flops = np.where(rc == 2, frc * fwd_layers_flops, np.where(rc == 1, sel_flops, 0.0))
    out = {name: np.asarray(v, dtype=float) * np.ones_like(tp) for name, v in ledger.items()}
    out.update(_memory(model, fw, tp, etp, pp, cp, ep, vpp, ms, T, tok_sp, sp, zero, rc, frc, lowp, fp32, dense_params,
                       expert_params, dpg, edpg, Lh_first, Lh_last, low_el, kv_local, f_act, ring_bytes,
                       # unfused attention keeps the softmax output (and dropout mask and output) per token
                       (a / tp) * seq * (el * (1.0 + drop) + drop) if unfused else np.zeros_like(tp),
                       has, el, seq))
    # MFU (PaLM / Megatron convention: 6N + 12 L a d s model FLOPs, full non-causal attention, no
    # recompute) and HFU (recomputed FLOPs counted too) over the dense peak of the precision used
    machine_peak = step * num_gpus * peak
    out.update(
        step_time_s=step, num_gpus=num_gpus, tokens_per_step=tokens, model_flops=model_flops,
        hardware_flops=model_flops + rc_flops, peak_flops_per_s=peak, microbatches=m,
        mfu=model_flops / machine_peak, hfu=(model_flops + rc_flops) / machine_peak, tokens_per_s=tokens / step,
        params_per_gpu=local,
        # one micro-batch on the heaviest stage (all its chunks), and its forward share: what the
        # timeline simulator lays out on the pipeline schedule
        stage_time_s=t_stage, stage_forward_s=Lc * t_layer * fwd_share + heads * t_head_pass_f
        + projs * t_proj / 3.0,
        **chunk_parts,
        split_counts_head=np.asarray(bal, dtype=float) if fw.pp_split_counts_head else np.zeros_like(t_layer),
        pipeline_by_chunks=by_chunks.astype(float) * np.ones_like(tp), pp_send_s=pp_send * np.ones_like(tp),
    )
    return out


def in_flight_microbatches(pp: np.ndarray, vpp: np.ndarray, m: np.ndarray, stage: np.ndarray | int = 0
                           ) -> np.ndarray:
    """Micro-batches whose activations pipeline ``stage`` holds at its peak: min(m, pp - stage) under
    1F1B; (2 (pp - stage - 1) + (vpp - 1) pp + 1) / vpp chunks' worth under Megatron-Core's
    interleaving (its warm-up, plus the first steady forward), so pp + (pp - 1) / vpp on the first
    stage; and m when m = pp, where the interleaved schedule runs every forward first. The
    timeline's schedule is checked to hold exactly this many on every stage."""
    pp, vpp, m, s = (np.asarray(x, dtype=float) for x in (pp, vpp, m, stage))
    inter = np.where(m > pp, np.minimum(m, (2.0 * (pp - s - 1.0) + (vpp - 1.0) * pp + 1.0) / vpp), m)
    return np.where(pp > 1, np.where(vpp > 1, inter, np.minimum(m, pp - s)), 1.0)


def stage_activation_bytes(layers: np.ndarray | float, layer_bytes: np.ndarray, extra_bytes: np.ndarray,
                           logits_bytes: np.ndarray, pp: np.ndarray, vpp: np.ndarray, m: np.ndarray,
                           stage: np.ndarray | int) -> np.ndarray:
    """Activation bytes pipeline ``stage`` holds at its peak: its ``layers`` layers' activations
    (``layer_bytes`` per layer and micro-batch) for the micro-batches it holds in flight, the
    micro-batch-independent ``extra_bytes``, and on the last stage the logits."""
    last = np.asarray(stage) == np.asarray(pp) - 1
    return (layers * layer_bytes * in_flight_microbatches(pp, vpp, m, stage) + extra_bytes
            + np.where(last, logits_bytes, 0.0))


def mlp_widths(model: ModelSpec) -> tuple[float, float, float]:
    """Activated MLP width per token averaged over the layers, split as (dense layers' MLPs, MoE
    layers' top_k routed + shared experts, the routed experts alone)."""
    L = model.num_layers
    return (model.num_dense_layers * model.ffn_dim / L,
            model.num_moe_layers * (model.top_k * model.moe_ffn_dim + model.shared_width) / L,
            model.num_moe_layers * model.top_k * model.moe_ffn_dim / L)


def mean_mlp_width(model: ModelSpec) -> float:
    """Activated MLP width per token, averaged over the layers (MoE: top_k routed + shared experts)."""
    dense, moe, _ = mlp_widths(model)
    return dense + moe


def _fused_layer_bytes(model: ModelSpec, T: np.ndarray, tok_sp: np.ndarray, tp: np.ndarray, kv_local: np.ndarray,
                       el: np.ndarray, act_passes: float, f_act: float, f_moe: float) -> np.ndarray:
    """Forward HBM bytes of a layer's memory-bound ops as fused kernels (Transformer Engine, apex,
    Megatron): each norm, add, activation and RoPE reads its inputs and writes its output once.
    (Per layer, averaged over a hybrid's layers: attention's share, each block's norm and add, and
    the recurrent mixers' own passes.)"""
    h, a, dq, dv = float(model.d_model), float(model.num_heads), float(model.qk_dim), float(model.v_dim)
    f_att, n_sub = model.layer_shares
    return el * (
        5.0 * n_sub * h * tok_sp  # each block's norm and residual add (read + write passes): LN1, add, LN2, add
        + T * act_passes * f_act / tp  # activation function: read inputs, write output
        + f_att * T * (a / tp + kv_local) * (dq + dv)  # flash attention reads q, k, v and writes o
        + f_att * T * 2.0 * (a / tp + kv_local) * dq  # RoPE on q and k (read + write)
        + f_moe * 4.0 * model.top_k * model.expert_width * tok_sp  # token permute / unpermute, dispatch + combine
    ) + T * model.recurrent_bytes_per_token(el) / tp


def _eager_layer_bytes(model: ModelSpec, T: np.ndarray, tok_sp: np.ndarray, tp: np.ndarray,
                       kv_local: np.ndarray, el: np.ndarray, f_act: float, f_moe: float) -> np.ndarray:
    """Forward HBM bytes of a layer's memory-bound ops run op by op (PyTorch eager, torchtitan's
    Llama code without torch.compile): every PyTorch op is its own kernel.

    RMSNorm (x.float(), pow, mean, x * rsqrt, type_as, * weight): 4 el + 28 bytes per element;
    residual add 3 el; RoPE through complex fp32 (float, complex multiply, type_as): 2 el + 16;
    repeat_kv copies K and V to every query head under GQA; SwiGLU (silu, multiply) 5 el, GELU
    2 el; SDPA reads q and the repeated k, v and writes o; MoE permutes as fused.
    """
    h, a, dq, dv = float(model.d_model), float(model.num_heads), float(model.qk_dim), float(model.v_dim)
    f_att, n_sub = model.layer_shares
    heads = a / tp
    gqa = heads > kv_local
    kv_eff = np.where(gqa, heads, kv_local)
    return (
        n_sub * (4.0 * el + 28.0) * h * tok_sp  # two RMSNorms (one per block)
        + n_sub * 3.0 * el * h * tok_sp  # two residual adds
        + f_att * T * (heads + kv_local) * dq * (2.0 * el + 16.0)  # RoPE on q and k
        + np.where(gqa, f_att * el * T * (kv_local + heads) * (dq + dv), 0.0)  # repeat_kv: read k, v, write expanded
        + el * T * f_act / tp * (5.0 if GATED[model.mlp] else 2.0)  # activation
        + f_att * el * T * (heads * dq + kv_eff * (dq + dv) + heads * dv)  # SDPA reads q, k, v, writes o
        + el * f_moe * 4.0 * model.top_k * model.expert_width * tok_sp  # token permute / unpermute
    ) + T * model.recurrent_bytes_per_token(el) / tp


def _gemm(M: np.ndarray, K: np.ndarray | float, N: np.ndarray | float, rate: np.ndarray, el_in: np.ndarray,
          el_out: np.ndarray, mem_bw: float, q_el: np.ndarray | float = 0.0,
          q_w: np.ndarray | float = 0.0, overlap: bool = False) -> np.ndarray:
    """One GEMM (M x K) @ (K x N): its FLOPs at the tensor-core ``rate`` plus its operands (inputs and
    weights in the GEMM precision, output in 16 bit) through HBM (kernels.toml [gemm]: the sum, not
    the roofline's max, matches DeepGEMM's published small- and large-M shapes); with ``overlap`` (a
    rate measured in situ) the roofline, whichever is slower. Training shapes are compute bound; few
    tokens per GPU or per expert are not. In fp8 / fp4 the quantisation of its input and (backward)
    output gradient, ``q_el`` HBM bytes per element over forward and backward, and of its weight
    (``q_w`` per element, amortised over the step's micro-batches) is added: a third of it to this
    forward time (the backward is priced as twice it)."""
    compute, memory = 2.0 * M * K * N / rate, (el_in * (M * K + K * N) + el_out * M * N) / mem_bw
    return (np.maximum(compute, memory) if overlap else compute + memory) + \
        (q_el * (M * K + M * N) + q_w * K * N) / (3.0 * mem_bw)


def _layer_gemm_time(model: ModelSpec, T: np.ndarray, tp: np.ndarray, ep: np.ndarray, rate: np.ndarray,
                     el_in: np.ndarray, el_out: np.ndarray, mem_bw: float, etp: np.ndarray | None = None,
                     q_el: np.ndarray | float = 0.0, q_w: np.ndarray | float = 0.0,
                     overlap: bool = False) -> np.ndarray:
    """Forward GEMM seconds of one layer (mean over dense and MoE layers) for T tokens per GPU.

    Attention: the input projections (Q, K, V, or MLA's factors) as one GEMM and the output
    projection. MLP: the input (gate + up fused when gated) and output GEMMs. MoE: each of the
    E / ep local experts sees T (etp / tp) top_k ep / E tokens on average, its width split over the
    expert-TP ranks (etp = tp: like the dense MLP); shared experts see every token; the router is a
    T x h x E GEMM. Latent MoE: the experts read and write the latent width, and its two projections
    (h -> latent, latent -> h) run on every token, priced like TP-split linears (the same FLOPs as
    full weights on the sequence-parallel shard of the tokens).
    """
    h = float(model.d_model)
    out_w = float(model.num_heads * model.v_dim)
    attn = _gemm(T, h, (model.attn_params / h - out_w) / tp, rate, el_in, el_out, mem_bw, q_el, q_w, overlap) + _gemm(
        T, out_w / tp, h, rate, el_in, el_out, mem_bw, q_el, q_w, overlap)
    up = model.mlp_mats - 1.0

    def mlp(tokens: np.ndarray, width: float, split: np.ndarray = tp, h_in: float = h) -> np.ndarray:
        return _gemm(tokens, h_in, up * width / split, rate, el_in, el_out, mem_bw, q_el, q_w, overlap) + _gemm(
            tokens, width / split, h_in, rate, el_in, el_out, mem_bw, q_el, q_w, overlap)

    total = model.attention_layers * attn
    # the recurrent mixers' input projection (Mamba-2: z, x, B, C, dt; Gated DeltaNet: q, k, v, z, beta,
    # decay) and output projection
    for layers, in_width, out_width in model.recurrent_projections:
        total = total + layers * (_gemm(T, h, in_width / tp, rate, el_in, el_out, mem_bw, q_el, q_w, overlap)
                                  + _gemm(T, out_width / tp, h, rate, el_in, el_out, mem_bw, q_el, q_w, overlap))
    if model.num_dense_layers:
        total = total + model.num_dense_layers * mlp(T, float(model.ffn_dim))
    if model.num_moe_layers:
        E = float(model.num_experts)
        e_tp = tp if etp is None else etp
        per_expert = T * (e_tp / tp) * model.top_k * ep / E
        moe = (E / ep) * mlp(per_expert, float(model.moe_ffn_dim), e_tp, float(model.expert_width)) + _gemm(
            T, h, E, rate, el_in, el_out, mem_bw, overlap=overlap)
        if model.moe_latent_dim:  # latent MoE: down to the experts' width before the dispatch, up after
            lat = float(model.moe_latent_dim)
            moe = moe + _gemm(T, h, lat / tp, rate, el_in, el_out, mem_bw, q_el, q_w, overlap) + _gemm(
                T, lat / tp, h, rate, el_in, el_out, mem_bw, q_el, q_w, overlap)
        if model.shared_width:
            moe = moe + mlp(T, float(model.shared_width))
        total = total + model.num_moe_layers * moe
    return total / model.num_layers


def op_sac_recompute_frac(model: ModelSpec) -> float:
    """Share of a layer's forward matmul FLOPs that per-op selective checkpointing recomputes.

    torchtitan's policy saves the output of every other matmul in forward order (q, k, v, o, then
    gate, up, down or fc1, fc2): k, o and up (or fc2) run again; a mean over dense and MoE layers.
    """
    h, a, k, dq, dv = model.d_model, model.num_heads, model.num_kv_heads, model.qk_dim, model.v_dim
    f = mean_mlp_width(model)
    mats = [h * a * dq, h * k * dq, h * k * dv, a * dv * h] + ([h * f] * 3 if GATED[model.mlp] else [h * f] * 2)
    return float(sum(mats[1::2]) / sum(mats))


def _unfused_attention(E: np.ndarray, dq: float, dv: float, el: np.ndarray, drop: float, gemm_rate: np.ndarray,
                       mem_bw: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Core attention before FlashAttention, over ``E`` score elements (tokens x local heads x keys).

    Returns (matmul forward, matmul backward, elementwise forward, elementwise backward) seconds.
    The four batched matmuls of the forward/backward pairs (Q K^T, P V; dP = dO V^T, dV = P^T dO,
    dQ = dS K, dK = dS^T Q) run over every key, the causal mask being applied after the product; each
    is a roofline kernel (GEMM rate or the score matrix it writes / reads in HBM, whichever is slower).
    Elementwise, per score element: fused scale-mask-softmax reads and writes it (backward reads the
    output and the gradient, writes one); dropout reads and writes it and writes / reads a 1-byte mask.
    """
    def mm(head_dim: float) -> np.ndarray:
        return np.maximum(2.0 * E * head_dim / gemm_rate, el * E / mem_bw)

    t_mm_f = mm(dq) + mm(dv)
    t_mm_b = 2.0 * mm(dv) + 2.0 * mm(dq)
    t_el_f = E * (2.0 * el + drop * (2.0 * el + 1.0)) / mem_bw
    t_el_b = E * (3.0 * el + drop * (2.0 * el + 1.0)) / mem_bw
    return t_mm_f, t_mm_b, t_el_f, t_el_b


def _allgather_ring_attention(net: Network, cp: np.ndarray, s_cp: np.ndarray, kv_el: np.ndarray, hq: np.ndarray,
                              dq: float, dv: float, el: np.ndarray, t_attn_f: np.ndarray, t_attn_b: np.ndarray,
                              mem_bw: float) -> tuple[np.ndarray, ...]:
    """PyTorch's ring attention with the all-gather rotater, per layer and micro-batch: seconds of
    (forward comm, forward exposed, backward comm, backward exposed, forward merges, backward merges),
    and the bytes it holds during a layer's backward (gathered 16-bit K/V, fp32 accumulators for the
    Q, K and V gradients, two fp32 K/V-gradient buffers in flight).

    As written in ``torch.distributed.tensor.experimental._attention`` (Dec 2024, the torch of
    torchtitan's published CP runs): with load balancing each of a rank's ``cp`` blocks is 1/cp of
    its attention work. Forward: one all-gather of K/V, hidden only under the first (diagonal)
    block. Backward: K/V all-gathered again (hidden under the first block's backward); after each
    block the accumulated K/V gradients (fp32) go to the next rank, hidden under the next block, and
    the last send is waited for. Merges run as eager ops in fp32; bytes per element: the block
    output cast to fp32 (el + 4), the update ``out - sigmoid(lse_b - lse) (out - out_b)`` as three
    elementwise ops (12 + 8 + 12), on blocks holding only the second half of the queries (half of
    them) a torch.cat rebuilding the whole output (8); blocks hold 0.75 of the queries on average;
    K and V concatenated (2 el) before each send. Backward: fp32 gradient buffers zeroed (4) and
    cast back at the end (4 + el); per block each gradient accumulated in fp32 (8 + el), on the
    half-blocks a cat (8), and the K/V gradients concatenated for the send (8).
    """
    ring = cp > 1.0
    q_el, o_el = hq * dq, hq * dv
    ag = net.collective_time_s("all_gather", kv_el * el * cp, cp, s_cp)
    blk_f, blk_b = t_attn_f / cp, t_attn_b / cp
    send = net.collective_time_s("p2p", kv_el * 4.0, cp, s_cp)  # fp32 K/V gradients
    comm_f = ag
    exp_f = np.maximum(ag - blk_f, 0.0)
    comm_b = ag + cp * send
    exp_b = np.maximum(ag - blk_b, 0.0) + (cp - 1.0) * np.maximum(send - blk_b, 0.0) + send
    merge_f = ((el + 4.0) * o_el * 2.0 + (cp - 1.0) * (0.75 * (el + 4.0 + 32.0) + 0.5 * 8.0) * o_el
               + (cp - 1.0) * 2.0 * el * kv_el)
    acc = 0.75 * (8.0 + el) + 4.0
    merge_b = (cp * (acc * (q_el + kv_el) + 8.0 * kv_el) + (cp - 1.0) * 2.0 * el * kv_el
               + (8.0 + el) * (q_el + kv_el))
    held = kv_el * el * cp + 4.0 * (q_el + kv_el) + 2.0 * 4.0 * kv_el
    zero = np.zeros_like(cp)
    return tuple(np.where(ring, x, zero)
                 for x in (comm_f, exp_f, comm_b, exp_b, merge_f / mem_bw, merge_b / mem_bw, held))


def _memory(model: ModelSpec, fw: Framework, tp: np.ndarray, etp: np.ndarray, pp: np.ndarray, cp: np.ndarray,
            ep: np.ndarray,
            vpp: np.ndarray, m: np.ndarray, T: np.ndarray, tok_sp: np.ndarray, sp: np.ndarray, zero: np.ndarray,
            rc: np.ndarray, frc: np.ndarray, lowp: np.ndarray, fp32: np.ndarray, dense_params: np.ndarray,
            expert_params: np.ndarray,
            dpg: np.ndarray, edpg: np.ndarray, Lh: np.ndarray, Lh_last: np.ndarray, low_el: np.ndarray,
            kv_local: np.ndarray,
            f_act: float, ring_bytes: np.ndarray, score_tok: np.ndarray, has: dict[str, np.ndarray],
            el: np.ndarray, seq: np.ndarray) -> dict[str, np.ndarray]:
    """Bytes per GPU on the most loaded pipeline stage: the first (``Lh`` layers, the most
    micro-batches in flight) or, under pipeline parallelism, the last (``Lh_last`` layers, fewer
    micro-batches, and the logits), whichever holds more."""
    h, a = float(model.d_model), float(model.num_heads)
    dq, dv = float(model.qk_dim), float(model.v_dim)
    local = dense_params + expert_params
    shard = dense_params / dpg + expert_params / edpg
    # ZeRO-3 / FSDP keeps its shard plus the two layers being gathered (never more than unsharded).
    gathered = 2.0 * (max(model.attn_params, model.ssm_params, model.gdn_params) + model.dense_mlp_params) / tp
    low = lowp > 0
    # bf16 weights, plus their fp8 / fp4 copy for the GEMMs, or that copy alone (fp8_param_gather)
    w_bytes = np.where(fp32, 4.0, np.where(low, np.where(fw.fp8_param_gather, 0.0, 2.0) + low_el, 2.0))
    weights = np.where(zero >= 3, np.minimum(local, shard + gathered), local) * w_bytes
    grads = np.where(zero >= 2, shard, local) * fw.grad_bytes
    if fw.fsdp_pp_unsharded:
        # Under PP the stage stays gathered and its gradients accumulate unsharded in the reduce dtype
        # until the last micro-batch's reduce-scatter, which frees them (so the peak holds the whole
        # gradients, not the shard as well): ZeRO-2 and -3 then hold what ZeRO-1 holds.
        # (experts that no data-parallel group shards stay outside FSDP: plain gradients, stored bytes)
        keep = (zero >= 2) & (pp > 1)
        weights = np.where(keep, local * w_bytes, weights)
        kept = dense_params * fw.grad_reduce_bytes + expert_params * np.where(edpg > 1, fw.grad_reduce_bytes,
                                                                              fw.grad_bytes)
        grads = np.where(keep, kept, grads)
    if not fw.zero3_reshard_after_forward:
        # the gathered parameters stay from each layer's forward to its backward: at the turn of a
        # micro-batch every layer of the stage is gathered
        weights = np.where(zero >= 3, local * w_bytes, weights)
    # (fp32 master,) Adam m and v: 12 bytes, or what the framework keeps (16-bit parameters as the master)
    optimizer = np.where(zero >= 1, shard, local) * np.where(fp32, 8.0, fw.optimizer_bytes_per_param)
    # Activation census (Korthikanti et al. 2022, generalised to GQA / gated MLP / MoE, flash attention):
    # SP-shardable: the two LN inputs (2 B), the QKV and FC1 inputs and, with dropout, two masks (1 B);
    # a dropout of probability 0 saves no mask (PyTorch returns its input). Transformer Engine saves a
    # linear layer's input for the weight gradient in the GEMM precision (fp8 / fp4 quantised), so in
    # fp8 the QKV, FC1 and FC2 inputs shrink and the attention output is kept twice (16-bit for the
    # attention backward, quantised for the output projection).
    mlp_tensors = 3.0 if GATED[model.mlp] else 2.0  # gated: gate, up, product; else: act in, act out
    f_moe = model.num_moe_layers / model.num_layers
    f_dense, f_moew, f_routed = mlp_widths(model)
    sp_frac = np.where(sp, 1.0 / tp, 1.0)  # the share of an h-wide tensor a rank keeps (SP shards it)
    # (a hybrid: per layer on average, attention's tensors on its share of the layers, one norm and one
    # linear input per block, and the Mamba mixers' own)
    f_att, n_sub = model.layer_shares
    ln_in = 0.5 * n_sub * (4.0 + (2.0 if fw.dropout else 0.0)) * h * sp_frac  # the norms' inputs (and dropout masks)
    lin_in = low_el * h * sp_frac  # the QKV input; likewise the FC1 input (an MoE layer's router / dispatch input)

    def mlp_int(width: float) -> np.ndarray:  # FC1 output(s) in 16 bits, the FC2 input in the GEMM precision
        return (2.0 * (mlp_tensors - 1.0) + low_el) * width / tp

    attn = 2.0 * ((a / tp + kv_local) * dq + kv_local * dv + (a / tp) * dv) + np.where(low, low_el * (a / tp) * dv, 0.0)
    if model.attn_output_gate:  # gated attention keeps its gate (a query's width) for the gating's backward
        attn = attn + 2.0 * (a / tp) * dv
    if model.index_topk:  # (where the sequence is longer than the top-k: dense MLA below it)
        # sparse MLA in its MQA form keeps the absorbed queries, the shared latent key (its value is the
        # latent's first part) and the latent-wide output, then the output projection's input (a value
        # head per query head, in the GEMM precision); the selected keys' indices (int32, k per token)
        # and the indexer's queries, key (16-bit) and head weights (fp32)
        sq, sv = (float(x) for x in model.sparse_score_dims)
        hi = model.index_heads / tp
        attn = np.where(model.sparse_active(seq),
                        2.0 * ((a / tp) * sq + sq + (a / tp) * sv) + low_el * (a / tp) * dv + 4.0 * model.index_topk
                        + 2.0 * (hi + 1.0) * model.index_head_dim + 4.0 * hi, attn)
    moe_tok = f_moe * model.top_k * model.expert_width * (
        2.0 * sp_frac  # the combined expert outputs (16-bit), for the gate-weight gradient
        # the experts' input, gathered over expert TP, saved by the grouped FC1 in the GEMM precision
        + np.where(low, low_el, 2.0) * np.where(etp > 1, etp / tp, sp_frac))
    per_tok = (ln_in + n_sub * lin_in + f_att * attn + mlp_int(f_act) + moe_tok
               + model.recurrent_saved_per_token(low_el) / tp)
    none_tok = per_tok + score_tok  # what a layer keeps without recompute
    # Selective recompute drops what the recomputed modules saved (Megatron-Core recompute_modules;
    # its default, core_attn, drops the attention scores: Korthikanti et al. 2022): the MoE layers'
    # pre-MLP norm output (layernorm, or the whole MoE layer), the experts' FC2 input (moe_act),
    # a dense MLP's or an MoE layer's internals (mlp, moe).
    save = (np.where(has["layernorm"] | has["moe"], f_moe * lin_in, 0.0)
            + np.where(has["moe"], mlp_int(f_moew) + moe_tok,
                       np.where(has["moe_act"], low_el * f_routed / tp, 0.0))
            + np.where(has["mlp"], (1.0 - f_moe) * lin_in + mlp_int(f_dense), 0.0)
            # MLA's up-projected q (when q is compressed), k and v, which the attention had saved
            + np.where(has["mla_up_proj"], 2.0 * ((a / tp if model.q_lora_rank else 0.0) * dq
                                                  + kv_local * (dq + dv)), 0.0))
    per_tok = np.where(rc == 1, per_tok - save + np.where(has["core_attn"], 0.0, score_tok), none_tok)
    if fw.selective_recompute == "op":
        # per-op SAC keeps the layer input, the saved matmul outputs (q, v, gate or fc1, down) and the
        # attention output; SP shards the h-wide ones.
        h_sh = np.where(sp, h / tp, h)
        op_tok = 2.0 * (2.0 * h_sh + (a / tp) * (dq + dv) + kv_local * dv + f_act / tp)
        per_tok = np.where(rc == 1, op_tok, per_tok)
    # full recompute keeps only each recomputed layer's input; the other layers keep everything
    per_tok = np.where(rc == 2, frc * np.where(sp, 2.0 * h / tp, 2.0 * h) + (1.0 - frc) * none_tok, per_tok)
    # A recomputed layer needs its full activations once more during its backward; PyTorch ring
    # attention holds its working set (0 otherwise).
    extra = np.where((rc == 2) & (frc > 0), (34.0 * h / tp + score_tok) * T, 0.0) + ring_bytes
    logits = fw.loss_bytes_per_logit * T * model.vocab_size / tp * (1.0 + model.mtp_layers)  # MTP: one more each
    activations = np.maximum(stage_activation_bytes(Lh, per_tok * T, extra, logits, pp, vpp, m, 0),
                             stage_activation_bytes(Lh_last, per_tok * T, extra, logits, pp, vpp, m, pp - 1))
    if fw.pipeline_schedule == "dualpipe":
        # DualPipe holds pp + 1 micro-batches of activations (DeepSeek-V3 report Table 2), and the rank
        # with one direction's first stage has the other's last, with its logits
        held = np.minimum(m, pp + 1.0)
        activations = np.where(pp > 1, np.maximum(Lh, Lh_last) * per_tok * T * held + extra + logits, activations)
    total = weights + grads + optimizer + activations + FRAMEWORK_RESERVE_BYTES
    return {
        "mem_weights_bytes": weights, "mem_grads_bytes": grads, "mem_optimizer_bytes": optimizer,
        "mem_activations_bytes": activations, "mem_other_bytes": FRAMEWORK_RESERVE_BYTES * np.ones_like(total),
        "memory_per_gpu_bytes": total,
        # the parts, for per-stage memory on the timeline (simulate): one layer's activations for one
        # micro-batch, what every micro-batch-independent byte adds, and the last stage's logits
        "mem_layer_activation_bytes": per_tok * T, "mem_extra_activation_bytes": extra, "mem_logits_bytes": logits,
    }


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


def layout_columns(layout: Layout, fw: Framework) -> dict[str, np.ndarray]:
    """One layout as 1-row columns for :func:`step_columns`."""
    sp = fw.sequence_parallel if layout.sequence_parallel is None else layout.sequence_parallel
    vals = dict(tp=layout.tp, pp=layout.pp, dp=layout.dp, cp=layout.cp, ep=layout.ep, vpp=layout.vpp,
                mb=layout.micro_batch, gbs=layout.global_batch, seq=layout.seq_len, zero=layout.zero_stage,
                recompute=RECOMPUTE_CODE[layout.recompute], sp=int(bool(sp)), lowp=LOWP_CODE.get(layout.precision, 0),
                rcl=layout.recompute_layers, etp=layout.etp, ga=layout.grad_accum,
                fp32=int(layout.precision == "fp32"),
                rcm=module_bits(layout.recompute_modules))
    return {k: np.array([v]) for k, v in vals.items()}


def step_breakdown(model: ModelSpec, *, layout: Layout, gpu: GpuSpec, net: Network, fw: Framework,
                   rank_order: str = DEFAULT_RANK_ORDER) -> StepBreakdown:
    """Price one layout (already validated against model and GPU count)."""
    layout.check_model(model, extra_pp_layers=fw.extra_pp_layers)
    require("mla_up_proj" not in layout.recompute_modules or model.kv_lora_rank > 0, "recompute_modules",
            f"mla_up_proj recomputes MLA's up-projections; {model.name} has no MLA (kv_lora_rank 0)")
    moe_mods = [x for x in layout.recompute_modules if x in ("moe", "moe_act")]
    require(not moe_mods or model.is_moe, "recompute_modules",
            f"{', '.join(moe_mods)} recompute MoE layers; {model.name} is dense (use mlp, core_attn or layernorm)")
    require(not layout.recompute_modules or fw.selective_recompute == "attention", "recompute_modules",
            f"are Megatron-Core's; framework {fw.key} recomputes by its own selective policy "
            f"({fw.selective_recompute}); leave them out")
    stages = None if layout.pp_layout is None else pplayout.parse(layout.pp_layout)
    out = step_columns(model, gpu, net, fw, layout_columns(layout, fw), rank_order, stages=stages)
    first = {k: float(np.asarray(v).reshape(-1)[0]) for k, v in out.items()}
    mem_keys = ("mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes", "mem_activations_bytes",
                "mem_other_bytes", "memory_per_gpu_bytes")
    return StepBreakdown(
        step_time_s=first["step_time_s"], ledger={k: first[k] for k in LEDGER}, num_gpus=int(first["num_gpus"]),
        tokens_per_step=first["tokens_per_step"], model_flops=first["model_flops"],
        hardware_flops=first["hardware_flops"], peak_flops_per_s=first["peak_flops_per_s"],
        memory={k: first[k] for k in mem_keys}, hbm_bytes=gpu.hbm_bytes, microbatches=first["microbatches"],
        mfu=first["mfu"], hfu=first["hfu"], tokens_per_s=first["tokens_per_s"],
    )
