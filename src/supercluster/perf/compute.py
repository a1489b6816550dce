"""Stage 2 of the step: each layer's work counted (FLOPs, HBM bytes) and priced on the GPU.

Legend: L layers, h width, a / k query / KV heads, dq / dv head dims, V vocab, s sequence,
T tokens per GPU per micro-batch (:class:`~.columns.Rows`).

* Each GEMM of a layer is its FLOPs at the tensor-core rate plus its operands through HBM, one
  after the other (DeepGEMM's published shapes: data/kernels.toml [gemm]); the tensor-core rate is
  the one that gives back the GPU's measured GEMM rate at transformer training shapes (fprop, dgrad,
  wgrad; data/gpus.toml gemm_*_frac; hardware.tensor_frac), so few tokens per GPU or per expert pay
  for their weights' traffic, and a shape that fills the SMs' tile waves worse than those runs
  slower (tile and wave quantisation, :mod:`.gemm`); fp8 / fp4 casts are added as HBM traffic
  (each GEMM input and output gradient once a micro-batch, both its copies in one pass, the weights
  once a step: data/kernels.toml [quantize]); backward is 2x forward. A calibrated profile's rate,
  measured in situ, keeps the roofline (the slower of the two).
* Attention with flash kernels does causal work s^2/2; backward does 2.5x the forward matmul
  work (FA2 paper); each at the kernel's published fraction of peak (data/kernels.toml), slower
  on the shorter sequence each rank attends over and below head dim 128, as each kernel measured
  with the causal mask ([attention_length], [attention_head_rate]); on Blackwell the forward is
  the longer of its matmuls and its softmax's exponentials on the special-function units
  (:func:`attention_forward_s`). The
  unfused attention of pre-2023 frameworks does the full s^2 in batched GEMMs and moves the
  score matrix through HBM (softmax, dropout): :func:`unfused_attention`.
* Norms, activations, residual adds, RoPE, MoE permutes are memory-bound: bytes counted per
  token, priced at HBM bandwidth — as fused kernels (:func:`fused_layer_bytes`) or op by op
  for eager PyTorch (:func:`eager_layer_bytes`); the backward moves 2x the forward bytes
  (reads saved input and incoming gradient, writes one).
* Weight gradients accumulate, every micro-batch, into the gradients a framework keeps whole
  (ZeRO 0 / 1): each weight's main gradient read and written, every local expert's too
  (:func:`grad_accumulation_s`; Megatron-LM's fused wgrad accumulation); ZeRO-2 / -3 copy each
  fresh gradient into the reduce-scatter's input instead (PyTorch FSDP2's chunk_cat copy-in).
* Recompute: full recompute runs the forward again (of the first ``rcl`` layers of a chunk where
  set); selective recompute runs the recomputed modules' forward again.
* The host launches each pass's kernels (counted in the frameworks' layer code, an MoE layer's router,
  dispatcher and per-expert GEMMs included, unfused attention's five kernels for one, no rotary
  kernels in a model without RoPE) while the GPU runs them; a pass takes the longer of the
  two. A Grace host (GB200, GB300) launches each 2.75x slower than an x86 server (data/kernels.toml
  [host]). A dropless MoE dispatcher makes the host wait for the router's counts, so the experts'
  kernels cannot be launched ahead under the attention's compute: :func:`.host.host_bound`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import require
from ..hardware.kernels import (
    AttentionEfficiency,
    GemmGrid,
    attention_efficiency,
    attention_head_padding,
    attention_head_rate,
    attention_length_factor,
    fp8_kernel_frac,
    gemm_grid,
    hbm_frac,
    host_op_launch_s,
    quantize_bytes_per_element,
)
from ..hardware.specs import GpuSpec
from ..models.spec import GATED, ModelSpec
from ..parallelism.framework import Framework
from .columns import Rows
from .gemm import GemmCost, layer_gemm_s, routed_expert_gemm_s
from .spread import moe_load_factor

#: Kernels a transformer layer launches per micro-batch (forward, backward), counted in the layer code.
#: "fused" (Megatron-Core with Transformer Engine): norm + QKV GEMM (LayerNormLinear), RoPE on q and
#: on k, fused attention, output GEMM, bias-dropout-add, norm + FC1 GEMM, activation, FC2 GEMM,
#: bias-dropout-add = 12. "eager" (torchtitan's Llama block without torch.compile): RMSNorm in 6 ops,
#: twice; wq, wk, wv; RoPE through complex fp32 (2 casts, 2 complex multiplies, 2 casts back);
#: repeat_kv on k and v; SDPA; wo; residual add; w1, w3, silu, multiply, w2; residual add = 34. The
#: backward launches about twice the forward's (each GEMM a data and a weight gradient). TP
#: collectives are added per layer (:data:`.host.TP_CALLS_PER_LAYER`).
OPS_PER_LAYER = {"fused": (12.0, 24.0), "eager": (34.0, 68.0)}
#: Kernels unfused attention (Megatron-LM before FlashAttention, megatron/model/transformer.py
#: CoreAttention) launches per layer beyond one fused attention kernel, (forward, backward): forward the
#: scores' baddbmm, FusedScaleMaskSoftmax, the attention dropout, the context bmm and the permuted copy
#: of the context (5 for 1); backward two matmuls for each of the two batched matmuls, the softmax's and
#: the dropout's backward and the copy's (7 for 1).
UNFUSED_ATTENTION_OPS = (4.0, 6.0)
#: Kernels of the rotary embedding in the fused count (on q and on k, forward and backward)
ROPE_OPS = (2.0, 2.0)


def layer_ops(model: ModelSpec, fw: Framework) -> tuple[float, float]:
    """Kernels a layer launches per micro-batch, (forward, backward), besides its collectives:
    :data:`OPS_PER_LAYER` by the framework's elementwise mode; in the fused count, none for a rotary
    embedding the model does not have (learned or ALiBi positions: GPT-3, BLOOM, MPT), and
    :data:`UNFUSED_ATTENTION_OPS` more where the framework runs attention unfused."""
    ops_f, ops_b = OPS_PER_LAYER[fw.elementwise]
    if fw.elementwise == "fused" and model.position_embedding != "rope":
        ops_f, ops_b = ops_f - ROPE_OPS[0], ops_b - ROPE_OPS[1]
    if fw.attention == "unfused":
        ops_f, ops_b = ops_f + UNFUSED_ATTENTION_OPS[0], ops_b + UNFUSED_ATTENTION_OPS[1]
    return ops_f, ops_b


@dataclass(frozen=True, slots=True)
class Rates:
    """What the GPU does per second for each row: dense ``peak`` and measured GEMM ``ceiling`` of the
    GEMM precision (``peak16`` / ``ceiling16``: 16-bit, or fp32 on a CPU profile), the tensor-core
    ``tensor`` rate GEMMs are priced at, memory-bound bytes per second, the HBM bytes fp8 / fp4
    quantisation moves per element (``q_el``), the host seconds to launch one op (``host_op_s``,
    by the GPU's host CPU; 0 for a calibrated profile, which measured its own per-kernel cost), and
    how its GEMM kernels tile the SMs (``grid``; None for a profile or a GPU with no SM count)."""

    peak16: np.ndarray
    ceiling16: np.ndarray
    peak: np.ndarray
    ceiling: np.ndarray
    tensor: np.ndarray
    in_situ: bool
    att: AttentionEfficiency | None
    mem_bw: float
    q_el: np.ndarray
    host_op_s: float
    grid: GemmGrid | None = None


def rates(gpu: GpuSpec, fw: Framework, rows: Rows) -> Rates:
    """The GPU's rates for each row's precision (data/gpus.toml, data/kernels.toml, or a profile)."""
    fp8, fp4, fp32 = rows.fp8, rows.fp4, rows.fp32
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
    # (the fp8 recipe's own kernel: MXFP8's block-scaled GEMM runs below the tensorwise one)
    kernel = fp8_kernel_frac(gpu.arch, fw.fp8_recipe)
    tensor, ceiling = np.where(fp8, tensor * kernel, tensor), np.where(fp8, ceiling * kernel, ceiling)
    att = None
    if gpu.attention_frac is not None:
        att = AttentionEfficiency(fwd_frac=gpu.attention_frac[0], bwd_frac=gpu.attention_frac[1],
                                  source="calibration")
    elif fw.attention != "unfused":
        att = attention_efficiency(fw.attention, gpu.arch)
    # fp8 / fp4 GEMMs also pay Transformer Engine's quantisation passes (HBM bytes per quantised element,
    # by the framework's fp8 recipe), or the framework's own where it quantises with its own kernels
    q_fp8 = (fw.fp8_quantize_bytes_per_element or quantize_bytes_per_element(gpu.arch, "fp8", fw.fp8_recipe)
             ) if np.any(fp8) else 0.0
    q_el = np.where(fp4, quantize_bytes_per_element(gpu.arch, "fp4"), np.where(fp8, q_fp8, 0.0))
    return Rates(peak16=peak16, ceiling16=ceiling16, peak=peak, ceiling=ceiling, tensor=tensor, in_situ=in_situ,
                 att=att, mem_bw=gpu.hbm_bytes_per_s * hbm_frac(), q_el=q_el,
                 host_op_s=gpu.host_launch_s if gpu.host_launch_s is not None
                 else 0.0 if in_situ else host_op_launch_s(gpu.host_cpu),
                 grid=None if in_situ else gemm_grid(gpu.sm_count))


@dataclass(frozen=True, slots=True)
class LayerWork:
    """One layer (the mean over a model's layer kinds) and the head, per micro-batch and GPU.

    FLOPs (forward): ``gemm_f`` the layer's GEMMs, ``attn_f`` its causal attention, ``idx_f`` /
    ``idx_b`` the sparse-attention indexer forward / backward, ``rec_f`` the chunked recurrences,
    ``head_f`` the output head, ``proj_f`` an MTP module's projection. Seconds: each part forward and
    backward (``t_score_*``: unfused attention's elementwise passes over the scores), ``t_mem_f`` the
    memory-bound ops forward, ``t_wcast`` the fp8 / fp4 weight casts of the layer, once a step (forward
    and backward: not a micro-batch's work), ``t_fwd`` / ``t_bwd`` / ``t_rc`` the layer's forward, backward and
    recompute, ``t_head`` the head with its loss, ``t_proj`` an MTP projection. ``score_tok``: bytes
    per token unfused attention keeps for its backward. ``w_*``: matmul weights per layer."""

    gemm_f: np.ndarray
    attn_f: np.ndarray
    idx_f: np.ndarray
    idx_b: np.ndarray
    rec_f: np.ndarray
    head_f: np.ndarray
    proj_f: np.ndarray
    t_gemm_f: np.ndarray
    t_wcast: np.ndarray
    t_attn_f: np.ndarray
    t_attn_b: np.ndarray
    t_score_f: np.ndarray
    t_score_b: np.ndarray
    t_rec_f: np.ndarray
    t_rec_b: np.ndarray
    t_mem_f: np.ndarray
    t_fwd: np.ndarray
    t_bwd: np.ndarray
    t_rc: np.ndarray
    t_head: np.ndarray
    t_host_f: np.ndarray
    t_host_b: np.ndarray
    t_cont_f: np.ndarray
    t_cont_b: np.ndarray
    t_proj: np.ndarray
    score_tok: np.ndarray
    w_attn: float
    w_mlp: float
    w_dense: float
    w_moe: float
    w_up: float
    drop: float
    #: the busiest expert-parallel rank's tokens over the mean (:func:`~.spread.moe_load_factor`; 1 dense)
    moe_load: np.ndarray
    #: forward GEMM seconds of one MoE layer's routed experts on the busiest rank (0 dense)
    t_experts_f: np.ndarray
    #: seconds a micro-batch's weight gradients of the layer take to accumulate into the main-gradient
    #: buffer, inside ``t_bwd`` (:func:`grad_accumulation_s`)
    t_gacc: np.ndarray
    #: of ``t_gemm_f``, the seconds the layer's GEMM shapes lose to the SMs' tile waves beyond the
    #: reference layer's (:class:`~supercluster.hardware.kernels.GemmGrid`; 0 without a grid)
    t_tiling_f: np.ndarray
    #: of ``t_gemm_f``, the seconds of the fp8 / fp4 casts of the layer's GEMM inputs (forward) and
    #: output gradients (backward: twice this), once a micro-batch (0 in 16 bits)
    t_cast_f: np.ndarray


def check_kernels(model: ModelSpec, fw: Framework, gpu: GpuSpec) -> None:
    """Unfused attention (before FlashAttention) has no kernels for sparse attention or recurrences
    (a calibrated profile's attention rate prices the recurrences)."""
    require(fw.attention != "unfused" or not (model.index_topk or (model.recurrent_layers
                                                                   and gpu.attention_frac is None)),
            "framework", f"{fw.key} runs attention unfused (before FlashAttention); {model.name}'s "
            + ("sparse attention needs the fused sparse kernels" if model.index_topk else
               "Mamba / Gated DeltaNet layers need the fused chunked kernels") + " of newer stacks")


def layer_work(model: ModelSpec, gpu: GpuSpec, fw: Framework, rows: Rows, r: Rates) -> LayerWork:
    """Count one layer's work per micro-batch and price it with ``r`` (see the module's physics);
    :func:`check_kernels` has passed."""
    tp, ep, etp, seq, T, tok_sp, kv_local = rows.tp, rows.ep, rows.etp, rows.seq, rows.T, rows.tok_sp, rows.kv_local
    el, low_el, mem_bw = rows.el, rows.low_el, r.mem_bw
    L, h, V, a = model.num_layers, float(model.d_model), float(model.vocab_size), float(model.num_heads)
    f_moe = model.num_moe_layers / L
    # (a hybrid: w_attn is its mixers' matmul weights per layer, attention and the recurrent ones)
    w_attn = (model.attention_layers * model.attn_params + model.recurrent_matmul_params) / L
    w_mlp = (model.num_dense_layers * model.dense_mlp_params + model.num_moe_layers * model.moe_active_mlp_params) / L
    f_act = mean_mlp_width(model)
    act_passes = 3.0 if GATED[model.mlp] else 2.0
    unfused = fw.attention == "unfused"

    gemm_f = 2.0 * T * (w_attn + w_mlp) / tp
    # causal (windowed, or sparse top-k) keys at the widths the kernel multiplies (sparse MLA: its MQA form)
    attn_f = 2.0 * T * (a / tp) * model.attention_width_keys(seq, causal=True)
    # DeepSeek Sparse Attention's lightning indexer: scores over every preceding key forward, gradients
    # through the selected keys backward; its heads split over TP as the attention's do (0 without DSA)
    idx_fwd, idx_bwd = model.indexer_flops_per_token(seq, causal=True)
    idx_f, idx_b = T * idx_fwd / L / tp, T * idx_bwd / L / tp
    rec_f = T * model.recurrent_flops_per_token() / L / tp  # Mamba-2 / Gated DeltaNet chunked recurrences
    # (the experts run the busiest rank's tokens: every rank waits for it at the combine)
    load = (moe_load_factor(T * (etp / tp) * model.top_k, ep, fw.moe_router, fw.moe_capacity_factor,
                            fw.moe_pad_to_capacity) if model.is_moe else np.ones_like(tp))
    cost = GemmCost(r.tensor, low_el, el, mem_bw, r.q_el, overlap=r.in_situ, grid=r.grid,
                    expert_streams=fw.moe_expert_streams if fw.moe_expert_launches == "per_expert" else 0)
    t_gemm_f = layer_gemm_s(model, T, tp, ep, cost, etp, load)
    t_experts_f = routed_expert_gemm_s(model, T, tp, ep, cost, etp, load) if model.is_moe else np.zeros_like(tp)
    t_tiling_f = (t_gemm_f - layer_gemm_s(model, T, tp, ep, replace(cost, grid=None), etp, load)
                  if cost.grid is not None else np.zeros_like(tp))  # (None in situ: Rates.grid)
    # The weights are cast once per step (Transformer Engine caches them after the first micro-batch):
    # the layer's weight casts, forward and backward, per step, not per micro-batch (0 in 16 bits)
    t_wcast, t_cast_f = np.zeros_like(tp), np.zeros_like(tp)
    if np.any(r.q_el > 0):
        t_wcast = 3.0 * (layer_gemm_s(model, T, tp, ep, replace(cost, q_w=r.q_el), etp, load) - t_gemm_f)
        t_cast_f = t_gemm_f - layer_gemm_s(model, T, tp, ep, replace(cost, q_el=0.0), etp, load)
    drop = 1.0 if fw.dropout else 0.0
    t_attn_f, t_attn_b, t_score_f, t_score_b = _attention_s(model, gpu, fw, rows, r, attn_f, idx_f, idx_b, drop)
    t_rec_f, t_rec_b = _recurrent_s(model, gpu, rows, r)
    if fw.elementwise == "eager":
        bytes_f = eager_layer_bytes(model, T, tok_sp, tp, kv_local, el, f_act, f_moe)
    else:
        bytes_f = fused_layer_bytes(model, T, tok_sp, tp, kv_local, el, act_passes, f_act, f_moe)
    bytes_f = bytes_f + drop * 2.0 * h * tok_sp  # the masks of the two hidden dropouts (fused bias-dropout-add)
    t_mem_f = bytes_f / mem_bw + layer_ops(model, fw)[0] * gpu.op_overhead_s
    t_fwd = t_gemm_f + t_attn_f + t_mem_f + t_score_f + t_rec_f
    t_gacc = grad_accumulation_s(model, fw, rows, mem_bw)
    t_bwd = 2.0 * t_gemm_f + t_attn_b + 2.0 * t_mem_f + t_score_b + t_rec_b + t_gacc
    w_dense = model.num_dense_layers * model.dense_mlp_params / L
    w_moe = model.num_moe_layers * model.moe_active_mlp_params / L
    # MLA's up-projections (the low-rank latents to per-head q, and k / v without RoPE)
    nope = model.qk_dim - model.qk_rope_head_dim
    w_up = float(model.q_lora_rank * a * model.qk_dim + model.kv_lora_rank * a * (nope + model.v_dim)) \
        if model.kv_lora_rank else 0.0
    t_sel = _selective_recompute_s(model, fw, rows, t_gemm_f, t_attn_f, t_score_f, t_mem_f, act_passes, mem_bw,
                                   w_attn + w_mlp, w_dense, w_moe, w_up)
    head_f = 2.0 * T * h * V / tp
    proj_f = 2.0 * T * 2.0 * h * h / tp
    return LayerWork(
        gemm_f=gemm_f, attn_f=attn_f, idx_f=idx_f, idx_b=idx_b, rec_f=rec_f, head_f=head_f, proj_f=proj_f,
        t_gemm_f=t_gemm_f, t_wcast=t_wcast, t_attn_f=t_attn_f, t_attn_b=t_attn_b, t_score_f=t_score_f,
        t_score_b=t_score_b, t_rec_f=t_rec_f, t_rec_b=t_rec_b, t_mem_f=t_mem_f, t_fwd=t_fwd, t_bwd=t_bwd,
        t_host_f=np.zeros_like(tp), t_host_b=np.zeros_like(tp), t_cont_f=np.zeros_like(tp),
        t_cont_b=np.zeros_like(tp),
        t_rc=np.where(rows.rc == 2, rows.frc * t_fwd, np.where(rows.rc == 1, t_sel, 0.0))
        + _cached_act_recompute_s(model, fw, rows, act_passes, mem_bw),
        t_head=3.0 * head_f / r.ceiling16 + 5.0 * 4.0 * T * V / tp / mem_bw,  # logits in bf16, fp32 loss
        t_proj=3.0 * proj_f / r.ceiling,
        # unfused attention keeps the softmax output (and dropout mask and output) per token
        score_tok=(a / tp) * seq * (el * (1.0 + drop) + drop) if unfused else np.zeros_like(tp),
        w_attn=w_attn, w_mlp=w_mlp, w_dense=w_dense, w_moe=w_moe, w_up=w_up, drop=drop,
        moe_load=load * np.ones_like(tp), t_experts_f=t_experts_f, t_gacc=t_gacc, t_tiling_f=t_tiling_f,
        t_cast_f=t_cast_f)


def _attention_s(model: ModelSpec, gpu: GpuSpec, fw: Framework, rows: Rows, r: Rates, attn_f: np.ndarray,
                 idx_f: np.ndarray, idx_b: np.ndarray, drop: float) -> tuple[np.ndarray, ...]:
    """Seconds of a layer's attention per micro-batch, (forward, backward, forward and backward of the
    unfused score matrix through HBM): the unfused kernels of pre-2023 frameworks, else the fused kernel
    at its published rate (its FLOPs ``attn_f``; a DeepSeek Sparse Attention indexer's ``idx_f`` /
    ``idx_b`` beside it)."""
    tp, seq, T = rows.tp, rows.seq, rows.T
    a, dq, dv = float(model.num_heads), float(model.qk_dim), float(model.v_dim)
    if fw.attention == "unfused":
        return unfused_attention(T * (a / tp) * seq, dq, dv, rows.el, drop, r.ceiling16, r.mem_bw)
    assert r.att is not None
    # (sparse MLA at the flash kernel's efficiency: DeepSeek's FlashMLA sparse prefill kernel reaches
    # 640 TFLOP/s on H800, FlashAttention-3's range; the indexer likewise, in 16 bits, an assumption:
    # DeepSeek runs it in fp8)
    # (below long sequences the kernel runs slower: the sequence each rank attends over, seq / cp for a
    # ring; a calibrated profile's rate is its own measurement and is not scaled)
    # (all-to-all CP: the whole sequence, for 1 / cp of the heads)
    attended = seq if fw.cp_rotate == "a2a" else seq / rows.cp
    catalog = gpu.attention_frac is None
    short = attention_length_factor(attended, fw.attention) if catalog else 1.0
    # (the kernel's tiles run at its own head dim: a head of 112 costs one of 128 in Triton's kernel;
    # below 128 the kernel runs slower, its matmuls at ``head_f`` / ``head_b`` of its rate)
    pad = attention_head_padding(fw.attention, dq, dv)
    head_f, head_b = attention_head_rate(fw.attention, dq * pad) if catalog else (1.0, 1.0)
    t_attn_f = attention_forward_s(r.att, gpu, pad * attn_f / head_f, T * (a / tp) * model.attention_score_keys(
        seq, causal=True), r.peak16, short) + idx_f / (r.peak16 * gpu.clock_frac * r.att.fwd_frac * short)
    t_attn_b = (2.5 * pad * attn_f / head_b + idx_b) / (r.peak16 * gpu.clock_frac * r.att.bwd_frac * short)
    zero = np.zeros_like(tp)
    return t_attn_f, t_attn_b, zero, zero


def _recurrent_s(model: ModelSpec, gpu: GpuSpec, rows: Rows, r: Rates) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of a hybrid layer's chunked recurrences per micro-batch, (forward, backward): Mamba-2's
    SSD scan (mamba_chunk_scan_combined) and Gated DeltaNet's delta rule (FLA's chunk_gated_delta_rule)
    are Triton kernels of chunked matmuls with masking, like FlashAttention's, priced at the attention
    kernel's efficiency and with its 2.5x backward (no published rate for these kernels; an
    assumption). 0 in a transformer."""
    if not model.recurrent_layers:
        zero = np.zeros_like(rows.tp)
        return zero, zero
    assert r.att is not None
    rec_f = rows.T * model.recurrent_flops_per_token() / model.num_layers / rows.tp
    return (rec_f / (r.peak16 * gpu.clock_frac * r.att.fwd_frac),
            2.5 * rec_f / (r.peak16 * gpu.clock_frac * r.att.bwd_frac))


def layer_params(model: ModelSpec) -> tuple[float, float]:
    """Parameters of the model's layers, (dense, routed experts): the mixers, norms, dense MLPs, shared
    experts and routers; the routed experts of every MoE layer (embedding, head and MTP left out)."""
    shared = model.num_dense_layers * model.dense_mlp_params + model.num_moe_layers * (
        model.shared_expert_params + model.d_model * model.num_experts)
    dense = model.mixer_params + model.sublayers * float(model.d_model) + shared
    return float(dense), float(model.num_moe_layers * model.num_experts * model.expert_params)


def grad_accumulation_s(model: ModelSpec, fw: Framework, rows: Rows, mem_bw: float) -> np.ndarray:
    """Seconds per layer and micro-batch the weight gradients take to accumulate into the gradients
    the framework keeps whole across micro-batches (ZeRO 0 / 1, and FSDP keeping a pipeline stage
    gathered): each weight-gradient GEMM reads and writes its weight's main gradient (Megatron-LM
    --gradient-accumulation-fusion: wgrad_gemm_accum_fp32, C += A^T B, main_grad in fp32 or, with
    bf16 gradients, in bf16; Transformer Engine's fuse_wgrad_accumulation likewise; autograd's
    AccumulateGrad where nothing is fused, which moves more). Every local weight does, every expert's
    included, however few tokens it saw. The GEMM's own operands are priced in :func:`gemm_s`, whose
    backward (twice the forward) counts the weight-sized operand twice in the GEMM precision: the
    data gradient's read of the weight and, standing for the weight gradient's output, one more. The
    accumulation moves ``2 grad_bytes`` per weight element instead of that one: the difference is
    this term. ZeRO-2 / -3 reduce-scatter each micro-batch's gradients instead of keeping them whole,
    copying each fresh gradient into the reduce-scatter's input first (read in 16 bits, written at the
    reduce precision; their shard's accumulation, 1 / dp of it, left out). The embedding and the head
    are left out."""
    dense, experts = layer_params(model)
    L = float(model.num_layers)
    dense, experts = dense / (L * rows.tp), experts / (L * rows.ep * rows.etp)
    whole = (rows.zero <= 1) | ((rows.zero >= 2) & fw.fsdp_pp_unsharded & (rows.pp > 1))
    kept = 2.0 * fw.grad_bytes
    # (sharded each micro-batch: the fresh 16-bit gradient is copied into the reduce-scatter's input at
    # the reduce precision: PyTorch FSDP2 foreach_reduce_scatter_copy_in, chunk_cat into a reduce_dtype
    # buffer; DeepSpeed's contiguous-gradient bucket copy; Megatron-FSDP's bucket accumulation alike)
    copied = rows.el + fw.grad_reduce_bytes
    extra = np.maximum(np.where(whole, kept, copied) - rows.low_el, 0.0)
    return (dense + experts) * extra / mem_bw


def _selective_recompute_s(model: ModelSpec, fw: Framework, rows: Rows, t_gemm_f: np.ndarray, t_attn_f: np.ndarray,
                           t_score_f: np.ndarray, t_mem_f: np.ndarray, act_passes: float, mem_bw: float,
                           w_layer: float, w_dense: float, w_moe: float, w_up: float) -> np.ndarray:
    """Seconds of a layer's selective recompute per micro-batch."""
    # torchtitan per-op SAC: the outputs of every other matmul and of SDPA are saved; the other
    # matmuls and every non-matmul op (norms, activation, RoPE, adds) run again (rows naming their
    # modules recompute those instead: MaxText's remat policies, below)
    op = op_sac_recompute_frac(model) * t_gemm_f + t_mem_f if fw.selective_recompute == "op" else None
    # Each recomputed module's forward runs again in the backward: core attention; the MoE
    # layers' pre-MLP norm (Transformer Engine fuses the others into their linears, where
    # Megatron-Core does not recompute them); the experts' activation; a dense MLP or a whole MoE
    # layer (its GEMMs by their FLOP share of the layer's, activation, permutes; the all-to-alls
    # are added with the communication).
    has, el, T, tok_sp, h = rows.has, rows.el, rows.T, rows.tok_sp, float(model.d_model)
    f_moe = model.num_moe_layers / model.num_layers
    f_dense, f_moew, f_routed = mlp_widths(model)
    act_t = el * T * act_passes / rows.tp / mem_bw
    modules = (np.where(has["core_attn"], t_attn_f + t_score_f, 0.0)
               + np.where(has["layernorm"], f_moe * 2.0 * el * h * tok_sp / mem_bw, 0.0)
               + np.where(has["moe_act"] & ~has["moe"] & ~_caches_act(fw, rows), act_t * f_routed, 0.0)
               + np.where(has["mlp"], t_gemm_f * w_dense / w_layer + act_t * f_dense
                          + (1.0 - f_moe) * 2.0 * el * h * tok_sp / mem_bw, 0.0)
               + np.where(has["moe"], t_gemm_f * w_moe / w_layer + act_t * f_moew
                          + el * f_moe * 4.0 * model.top_k * model.expert_width * tok_sp / mem_bw, 0.0)
               + np.where(has["mla_up_proj"], t_gemm_f * w_up / w_layer, 0.0))
    return modules if op is None else np.where(rows.named, modules, op)


def _caches_act(fw: Framework, rows: Rows) -> np.ndarray:
    """Rows whose MoE layers keep the SwiGLU inputs and recompute its output in the backward
    (:attr:`Framework.low_precision_activations`, fp8 / fp4 layouts)."""
    return fw.low_precision_activations & (rows.lowp > 0)


def _cached_act_recompute_s(model: ModelSpec, fw: Framework, rows: Rows, act_passes: float,
                            mem_bw: float) -> np.ndarray:
    """Seconds per layer and micro-batch of the MoE layers' SwiGLU forward run again in the backward
    where its output is not kept (:func:`_caches_act`): an activation pass over the routed and shared
    experts' width that reads its cached inputs and writes its output (for the FC2 weight gradient) in
    the GEMM precision; 0 where the recompute runs the whole MoE layer's forward anyway (full
    recompute's share, a recomputed ``moe`` module)."""
    _, f_moew, _ = mlp_widths(model)
    act = rows.low_el * rows.T * act_passes / rows.tp / mem_bw * f_moew
    redone = np.where(rows.rc == 2, rows.frc, np.where((rows.rc == 1) & rows.has["moe"], 1.0, 0.0))
    return np.where(_caches_act(fw, rows), act * (1.0 - redone), 0.0)


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


def fused_layer_bytes(model: ModelSpec, T: np.ndarray, tok_sp: np.ndarray, tp: np.ndarray, kv_local: np.ndarray,
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


def eager_layer_bytes(model: ModelSpec, T: np.ndarray, tok_sp: np.ndarray, tp: np.ndarray,
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


def op_sac_recompute_frac(model: ModelSpec) -> float:
    """Share of a layer's forward matmul FLOPs that per-op selective checkpointing recomputes.

    torchtitan's policy saves the output of every other matmul in forward order (q, k, v, o, then
    gate, up, down or fc1, fc2): k, o and up (or fc2) run again; a mean over dense and MoE layers.
    """
    h, a, k, dq, dv = model.d_model, model.num_heads, model.num_kv_heads, model.qk_dim, model.v_dim
    f = mean_mlp_width(model)
    mats = [h * a * dq, h * k * dq, h * k * dv, a * dv * h] + ([h * f] * 3 if GATED[model.mlp] else [h * f] * 2)
    return float(sum(mats[1::2]) / sum(mats))


def unfused_attention(E: np.ndarray, dq: float, dv: float, el: np.ndarray, drop: float, gemm_rate: np.ndarray,
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


def attention_forward_s(att: AttentionEfficiency, gpu: GpuSpec, flops: np.ndarray, scores: np.ndarray,
                        peak16: np.ndarray, short: np.ndarray | float) -> np.ndarray:
    """Seconds of a fused attention forward of ``flops`` over ``scores`` score elements: at the kernel's
    measured fraction of the 16-bit peak, or, where the kernel's forward is bound by the softmax's
    exponentials (kernels.toml [flash.blackwell] exp_frac: one per score element on the special-function
    units) and the GPU's exponential rate is catalogued (gpus.toml sfu_tera_exp_per_s), the longer of its
    matmuls at ``mma_frac`` and its exponentials at ``exp_frac`` of that rate: a Blackwell Ultra, with
    twice Blackwell's exponential rate, runs the same kernel matmul-bound."""
    rate = peak16 * gpu.clock_frac * short
    if not (att.exp_frac > 0 and gpu.sfu_exp_per_s > 0):
        return flops / (rate * att.fwd_frac)
    exp_s = scores / (gpu.sfu_exp_per_s * gpu.clock_frac * att.exp_frac * short)
    return np.maximum(flops / (rate * att.mma_frac), exp_s)


def contended(rows: Rows, work: LayerWork, hidden_f: np.ndarray, hidden_b: np.ndarray, frac: float) -> LayerWork:
    """The layer with the compute its hidden communication slows: for the ``hidden_f`` / ``hidden_b``
    seconds a collective runs under the forward / backward, it holds ``frac`` of the SMs
    (data/kernels.toml [overlap]), so the compute beside it takes ``frac`` of that time longer. Full
    recompute's forward runs its collectives again."""
    cf, cb = frac * np.maximum(hidden_f, 0.0), frac * np.maximum(hidden_b, 0.0)
    return replace(work, t_fwd=work.t_fwd + cf, t_bwd=work.t_bwd + cb, t_cont_f=cf, t_cont_b=cb,
                   t_rc=work.t_rc + np.where(rows.rc == 2, rows.frc * cf, 0.0))
