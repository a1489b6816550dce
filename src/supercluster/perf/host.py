"""Stage 2 of the step, its host side: the kernels a layer pass launches, counted in the frameworks'
layer code, and the seconds its GPU waits for the host to launch them (:func:`host_bound`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..models.spec import ModelSpec
from ..parallelism.framework import Framework
from .columns import Rows
from .compute import LayerWork, layer_ops

#: TP collectives per layer and pass (attention and MLP: an all-reduce each, or an all-gather and a
#: reduce-scatter each under sequence parallelism; Megatron-Core's TE linears)
TP_CALLS_PER_LAYER = (2.0, 4.0)
#: Kernels Transformer Engine's K/V ring (AttnFuncWithCPAndKVP2P, context_parallel.py) launches per layer
#: beyond one attention call, as (forward per extra step, forward once, backward per extra step,
#: backward once): forward, each step after the first its send/receive, its attention kernel and its
#: softmax-statistics correction, and after the ring one output correction per step (4 per step, 1
#: more for the first); backward, each step after the first its send/receive of K/V and of dK/dV and
#: its attention backward (3), and every step its dQ update, dK/dV concatenation and dK/dV update (3)
#: = 6 per step, 3 more for the first
CP_RING_OPS = (4.0, 1.0, 6.0, 3.0)
#: Kernels an MoE layer launches per micro-batch besides its dense part and its experts' GEMMs,
#: counted in Megatron-Core 0.15 (moe/router.py TopKRouter with moe_router_fusion, an fp32 router and
#: an auxiliary loss; moe/token_dispatcher.py MoEAlltoAllTokenDispatcher with moe_permute_fusion;
#: moe/experts.py TEGroupedMLP). "pre", before the dispatcher waits for the router's counts: the router
#: input cast and gating GEMM, the fused top-k, the aux-loss scores, counts, reduction and loss and its
#: attachment (9); the counts' sums, reshape-sums and slices and their all-gather over the TP x EP group
#: (8); five device-to-host copies of the splits and counts; the fused permute (row map, permute: 2) = 24.
#: "post", after it: the tokens' and probabilities' all-to-alls, the fused sort by local expert, the
#: weighted activation, the unsort, the combine all-to-all, the fused unpermute = 7. "bwd": the
#: backward of those: unpermute, combine all-to-all, unsort, activation, sort, two all-to-alls,
#: permute, aux loss (2), top-k, router dgrad and wgrad GEMMs and casts (4) = 16. "low": in fp8 / fp4
#: the experts' inputs are padded to the GEMM alignment (tokens, probabilities) and unpadded (3, and 3
#: in the backward). "shared": a shared expert's FC1, activation and FC2 (3; 6 in the backward).
#: Other frameworks' dispatchers are priced with these counts (an assumption).
MOE_OPS = {"pre": 24.0, "post": 7.0, "bwd": 16.0, "low": 3.0, "shared": 3.0}
#: Quantisation kernels per quantised tensor, by fp8 recipe (Transformer Engine 2.9 quantizer.cpp:
#: current scaling computes the amax, the scale and the cast: 3; MXFP8 and blockwise one cast; delayed
#: scaling's split_quantize is one fused multi-tensor cast per call, counted per call; NVFP4 one cast)
QUANT_KERNELS = {"delayed": 0.0, "current": 3.0, "blockwise": 1.0, "mxfp8": 1.0}


def host_bound(model: ModelSpec, fw: Framework, rows: Rows, work: LayerWork, tp_f: np.ndarray, tp_b: np.ndarray,
               ep_f: np.ndarray, ep_b: np.ndarray, host_op_s: float) -> LayerWork:
    """The layer with the seconds its GPU waits for the host to launch its kernels.

    The host launches a layer pass's kernels one after another (:func:`.compute.layer_ops`, plus its TP
    collectives, plus a K/V ring's :func:`cp_ring_ops`, plus an MoE layer's :func:`moe_host_ops`) at the
    PyTorch launch cost ``host_op_s`` (data/kernels.toml [host] op_launch_s, slower from a Grace host)
    while the GPU runs the ones already queued; the pass takes the longer of the two, so a layer whose
    kernels each take less than a launch (few tokens per GPU, wide TP, many small experts) is
    host-bound. The GPU's side of a pass is its compute and the TP and EP communication left exposed
    (``tp_f`` / ``tp_b``, ``ep_f`` / ``ep_b``; what hides under the GEMMs is already inside the
    compute's time).

    Where the MoE dispatcher makes the host wait for the router's counts (:attr:`Framework.moe_dispatch_sync`,
    dropless or unpadded token-drop routing), the GPU's queue is empty when the host resumes: the
    experts' kernels (post) cannot have been launched under the attention's compute (pre), so the
    forward takes max(G, H, H_post + G_pre) for GPU seconds G = G_pre + G_post and host seconds
    H = H_pre + H_post; the GPU's post part is the experts' GEMMs and the dispatch and combine left
    exposed. The backward reuses the forward's counts and never waits.

    Under CUDA graphs the captured kernels are replayed by one launch (0 per kernel). A calibrated
    profile has measured its own per-kernel cost (``op_overhead_s``) and is not host-priced again. Full
    recompute's forward launches its kernels (and waits) again."""
    launch = 0.0 if fw.cuda_graphs else host_op_s
    ops_f, ops_b = layer_ops(model, fw)
    calls = np.where(rows.tp > 1, np.where(rows.sp, TP_CALLS_PER_LAYER[1], TP_CALLS_PER_LAYER[0]), 0.0)
    ring_f, ring_b = cp_ring_ops(fw, rows)
    f_moe = model.num_moe_layers / model.num_layers
    pre, post, bwd = moe_host_ops(model, fw, rows)
    gpu_f, gpu_b = work.t_fwd + tp_f + ep_f, work.t_bwd + tp_b + ep_b
    h_pre = (ops_f + calls + ring_f + f_moe * pre) * launch
    h_post = f_moe * post * launch
    host_f = np.maximum(h_pre + h_post - gpu_f, 0.0)
    host_b = np.maximum((ops_b + calls + ring_b + f_moe * bwd) * launch - gpu_b, 0.0)
    waits = model.is_moe and fw.moe_dispatch_sync and not fw.moe_pad_to_capacity
    if waits:
        # (on the mean layer: exact where every layer is MoE, a dense layer's share spread over them else)
        g_post = f_moe * work.t_experts_f + ep_f
        stall = np.maximum(np.minimum(h_post - g_post, (gpu_f - g_post) - h_pre), 0.0)
        host_f = host_f + stall
    return replace(work, t_fwd=work.t_fwd + host_f, t_bwd=work.t_bwd + host_b, t_host_f=host_f, t_host_b=host_b,
                   t_rc=work.t_rc + np.where(rows.rc == 2, rows.frc * host_f, 0.0))


def cp_ring_ops(fw: Framework, rows: Rows) -> tuple[np.ndarray, np.ndarray]:
    """Kernels a layer's K/V ring launches beyond one attention call, (forward, backward): Transformer
    Engine's p2p ring (:data:`CP_RING_OPS`); 0 without CP and for the other CP types (their own host
    work is not counted)."""
    ring = (rows.cp > 1) & (fw.cp_rotate == "p2p")
    f_step, f_once, b_step, b_once = CP_RING_OPS
    return (np.where(ring, f_step * (rows.cp - 1.0) + f_once, 0.0),
            np.where(ring, b_step * (rows.cp - 1.0) + b_once, 0.0))


def moe_host_ops(model: ModelSpec, fw: Framework, rows: Rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Kernels one MoE layer launches per micro-batch besides its dense part: before the dispatcher
    waits for the router's counts, after it (the experts), and in the backward (:data:`MOE_OPS`;
    0 for a dense model). With one launch per local expert (:attr:`Framework.moe_expert_launches`
    "per_expert") each of the E / ep local experts launches its FC1 and FC2 GEMMs forward, their
    data- and weight-gradient GEMMs backward, and :data:`QUANT_KERNELS` per quantised input and output
    gradient; a grouped kernel launches once per GEMM and quantises once per call."""
    zero = np.zeros_like(rows.tp)
    if not model.is_moe:
        return zero, zero, zero
    low = np.where(rows.fp8 | rows.fp4, 1.0, 0.0)
    if fw.moe_expert_launches == "per_expert":
        q = np.where(rows.fp8, QUANT_KERNELS[fw.fp8_recipe], np.where(rows.fp4, 1.0, 0.0))
        fused = 2.0 * np.where(rows.fp8 & (fw.fp8_recipe == "delayed"), 1.0, 0.0)
        n = float(model.num_experts) / rows.ep
        gemm_f, gemm_b = n * 2.0 * (1.0 + q) + fused, n * 2.0 * (2.0 + q) + fused
    else:
        gemm_f, gemm_b = 2.0 * (1.0 + low), 2.0 * (2.0 + low)
    shared = MOE_OPS["shared"] if model.shared_width else 0.0
    post = MOE_OPS["post"] + MOE_OPS["low"] * low + shared + gemm_f
    bwd = MOE_OPS["bwd"] + MOE_OPS["low"] * low + 2.0 * shared + gemm_b
    return MOE_OPS["pre"] + zero, post, bwd
