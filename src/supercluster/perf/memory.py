"""Stage 6 of the step: bytes per GPU on the most loaded pipeline stage.

Weights, gradients and optimizer states as the framework shards them (ZeRO 1-3, FSDP under PP; over
the shard group of hybrid sharding, each replica holding a whole sharded copy), and
the activation census of Korthikanti et al. 2022, generalised to GQA, gated MLPs, MoE, MLA, hybrids
and flash attention, with what recompute drops; the micro-batches in flight per stage follow the
pipeline schedule (:func:`in_flight_microbatches`). A framework that stores activations in low
precision as DeepSeek-V3's does (its report, sec. 3.3.4: the attention output once in E5M6, the MoE
SwiGLU inputs in FP8 with the SwiGLU output recomputed) keeps those at their stored width.
"""

from __future__ import annotations

import numpy as np

from ..models.spec import GATED, ModelSpec
from ..parallelism.framework import Framework
from ..units import GiB
from .columns import Rows, zero_groups
from .compute import mean_mlp_width, mlp_widths

#: bytes an element of DeepSeek's E5M6 activation format takes (1 sign, 5 exponent and 6 mantissa bits;
#: DeepSeek-V3 report sec. 3.3.4; see Framework.low_precision_activations)
E5M6_BYTES = 1.5
FRAMEWORK_RESERVE_BYTES = 3 * GiB  # CUDA context, NCCL buffers, cuBLAS workspace (assumed)


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


def optimizer_bytes(fw: Framework, rows: Rows) -> np.ndarray:
    """Optimizer-state bytes per parameter of each 16-bit row (:meth:`Framework.optimizer_state_bytes`;
    fp8 / fp4 layouts are not bf16)."""
    bf16 = (rows.lowp == 0) & ~rows.fp32 & (rows.zero >= 1)
    return np.where(bf16, fw.optimizer_state_bytes(True, True), fw.optimizer_state_bytes(False, False))


def zero3_gathered_elements(model: ModelSpec, fw: Framework) -> float:
    """Parameter elements ZeRO-3 / FSDP holds gathered beyond its shard at the peak (before TP sharding).

    A framework that prefetches holds the layer it runs and the next one gathered: two layers. One that
    gathers each weight on its own and releases it after its submodule, without prefetch (DeepSpeed
    before v0.4: the coordinator fetched a submodule's parameters in its pre-forward hook and released
    them in its post-forward hook; frameworks.toml ``zero3_prefetch`` false, ``zero3_gathers_per_layer`` >
    1), holds one weight: at its peak, in the backward, the largest weight of a layer gathered, its full
    gradient before the reduce-scatter, and, through PyTorch's list-form collectives
    (``zero3_list_collectives``), the flat buffer the reduce-scatter copies its input into."""
    if fw.zero3_prefetch or fw.zero3_gathers_per_layer <= 1:
        return 2.0 * (max(model.attn_params, model.ssm_params, model.gdn_params) + model.dense_mlp_params)
    return largest_layer_weight(model) * (2.0 + float(fw.zero3_list_collectives))


def largest_layer_weight(model: ModelSpec) -> float:
    """Elements of a layer's largest weight tensor, as Megatron's GPT layer holds them: the fused QKV
    projection, the output projection, FC1 (gate and up fused where gated) or FC2; an MLA or recurrent
    mixer counted whole (an upper bound)."""
    h, a, k, d, dv = (float(x) for x in (model.d_model, model.num_heads, model.num_kv_heads, model.qk_dim,
                                         model.v_dim))
    if model.kv_lora_rank or model.ssm_params or model.gdn_params:
        mixer = float(max(model.attn_params, model.ssm_params, model.gdn_params))
    else:
        mixer = max(h * (a * d * (2.0 if model.attn_output_gate else 1.0) + 2.0 * k * d), a * dv * h)
    ffn = float(model.ffn_dim)
    return max(mixer, (model.mlp_mats - 1) * h * ffn, ffn * h)


def memory_bytes(model: ModelSpec, fw: Framework, rows: Rows, dense_params: np.ndarray, expert_params: np.ndarray,
                 Lh: np.ndarray, Lh_last: np.ndarray, ring_bytes: np.ndarray,
                 score_tok: np.ndarray) -> dict[str, np.ndarray]:
    """Bytes per GPU on the most loaded pipeline stage: the first (``Lh`` layers, the most
    micro-batches in flight) or, under pipeline parallelism, the last (``Lh_last`` layers, fewer
    micro-batches, and the logits), whichever holds more. ``ring_bytes``: what ring attention holds
    during a layer's backward; ``score_tok``: bytes per token unfused attention keeps."""
    pp, vpp, m, T, h, tp = rows.pp, rows.vpp, rows.ms, rows.T, float(model.d_model), rows.tp
    weights, grads, optimizer = state_bytes(model, fw, rows, dense_params, expert_params)
    per_tok = layer_bytes_per_token(model, fw, rows, score_tok)
    # A recomputed layer needs its full activations once more during its backward; PyTorch ring
    # attention holds its working set (0 otherwise).
    extra = np.where((rows.rc == 2) & (rows.frc > 0), (34.0 * h / tp + score_tok) * T, 0.0) + ring_bytes
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


def state_bytes(model: ModelSpec, fw: Framework, rows: Rows, dense_params: np.ndarray,
                expert_params: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights, gradients, optimizer states) in bytes per GPU, as the framework shards them over the
    dense weights' data-parallel group and the experts' (ZeRO 1-3; FSDP kept gathered under PP), or
    over the shard groups of hybrid sharding (each replica holds a whole sharded copy)."""
    zero, pp, fp32 = rows.zero, rows.pp, rows.fp32
    zg = zero_groups(rows)
    dpg, edpg = zg["dps"][0], zg["edps"][0]
    local = dense_params + expert_params
    shard = dense_params / dpg + expert_params / edpg
    # ZeRO-3 / FSDP keeps its shard plus the two layers being gathered (never more than unsharded); a
    # framework that gathers each weight on its own, without prefetch, one weight at a time
    gathered = zero3_gathered_elements(model, fw) / rows.tp
    low = rows.lowp > 0
    # bf16 weights, plus their fp8 / fp4 copy for the GEMMs, or that copy alone (fp8_param_gather)
    w_bytes = np.where(fp32, 4.0, np.where(low, np.where(fw.fp8_param_gather, 0.0, 2.0) + rows.low_el, 2.0))
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
    optimizer = np.where(zero >= 1, shard, local) * np.where(fp32, 8.0, optimizer_bytes(fw, rows))
    return weights, grads, optimizer


def layer_bytes_per_token(model: ModelSpec, fw: Framework, rows: Rows, score_tok: np.ndarray) -> np.ndarray:
    """Activation bytes one layer keeps per token for its backward, under the row's recompute.

    The census of Korthikanti et al. 2022, generalised to GQA / gated MLP / MoE, flash attention:
    SP-shardable: the two LN inputs (2 B), the QKV and FC1 inputs and, with dropout, two masks (1 B);
    a dropout of probability 0 saves no mask (PyTorch returns its input). Transformer Engine saves a
    linear layer's input for the weight gradient in the GEMM precision (fp8 / fp4 quantised), so in
    fp8 the QKV, FC1 and FC2 inputs shrink and the attention output is kept twice (16-bit for the
    attention backward, quantised for the output projection). ``score_tok``: what unfused attention
    keeps besides (its scores)."""
    tp, etp, sp, low_el, kv_local, has = rows.tp, rows.etp, rows.sp, rows.low_el, rows.kv_local, rows.has
    h, a = float(model.d_model), float(model.num_heads)
    dq, dv = float(model.qk_dim), float(model.v_dim)
    low = rows.lowp > 0
    mlp_tensors = 3.0 if GATED[model.mlp] else 2.0  # gated: gate, up, product; else: act in, act out
    f_moe = model.num_moe_layers / model.num_layers
    f_dense, f_moew, f_routed = mlp_widths(model)
    # padded to capacity, each expert's input (and all that its FC1 / FC2 save) holds capacity_factor
    # times the mean tokens (Megatron-Core --moe-pad-expert-input-to-capacity)
    cap = fw.moe_capacity_factor if fw.moe_pad_to_capacity else 1.0
    f_act = mean_mlp_width(model) + (cap - 1.0) * f_routed
    f_moew, f_routed = f_moew + (cap - 1.0) * f_routed, cap * f_routed
    sp_frac = np.where(sp, 1.0 / tp, 1.0)  # the share of an h-wide tensor a rank keeps (SP shards it)
    # (a hybrid: per layer on average, attention's tensors on its share of the layers, one norm and one
    # linear input per block, and the Mamba mixers' own)
    f_att, n_sub = model.layer_shares
    ln_in = 0.5 * n_sub * (4.0 + (2.0 if fw.dropout else 0.0)) * h * sp_frac  # the norms' inputs (and dropout masks)
    lin_in = low_el * h * sp_frac  # the QKV input; likewise the FC1 input (an MoE layer's router / dispatch input)

    def mlp_int(width: float) -> np.ndarray:  # FC1 output(s) in 16 bits, the FC2 input in the GEMM precision
        return (2.0 * (mlp_tensors - 1.0) + low_el) * width / tp

    # DeepSeek's low-precision caching (Framework.low_precision_activations): the MoE layers' FC1 outputs
    # in the GEMM precision, their FC2 input not kept (recomputed); the attention output once, in E5M6
    cache = fw.low_precision_activations & low
    moe_cut = np.where(cache, (2.0 - low_el) * (mlp_tensors - 1.0) + low_el, 0.0) * f_moew / tp
    dense_att = ~model.sparse_active(rows.seq) if model.index_topk else True
    att_cut = np.where(cache & dense_att, (2.0 + low_el - E5M6_BYTES) * (a / tp) * dv, 0.0)

    # (the combined expert outputs, 16-bit, for the gate-weight gradient, unless the gate weights the
    # experts' activation)
    outputs = 0.0 if fw.moe_probs_in_experts else 2.0 * sp_frac
    moe_tok = cap * f_moe * model.top_k * model.expert_width * (
        outputs
        # the experts' input, gathered over expert TP, saved by the grouped FC1 in the GEMM precision
        + np.where(low, low_el, 2.0) * np.where(etp > 1, etp / tp, sp_frac))
    per_tok = (ln_in + n_sub * lin_in + f_att * (_attention_bytes_per_token(model, rows) - att_cut) + mlp_int(f_act)
               - moe_cut + moe_tok + model.recurrent_saved_per_token(low_el) / tp)
    none_tok = per_tok + score_tok  # what a layer keeps without recompute
    # Selective recompute drops what the recomputed modules saved (Megatron-Core recompute_modules;
    # its default, core_attn, drops the attention scores: Korthikanti et al. 2022): the MoE layers'
    # pre-MLP norm output (layernorm, or the whole MoE layer), the experts' FC2 input (moe_act),
    # a dense MLP's or an MoE layer's internals (mlp, moe).
    save = (np.where(has["layernorm"] | has["moe"], f_moe * lin_in, 0.0)
            + np.where(has["moe"], mlp_int(f_moew) - moe_cut + moe_tok,
                       np.where(has["moe_act"] & ~cache, low_el * f_routed / tp, 0.0))
            + np.where(has["mlp"], (1.0 - f_moe) * lin_in + mlp_int(f_dense), 0.0)
            # MLA's up-projected q (when q is compressed), k and v, which the attention had saved
            + np.where(has["mla_up_proj"], 2.0 * ((a / tp if model.q_lora_rank else 0.0) * dq
                                                  + kv_local * (dq + dv)), 0.0))
    per_tok = np.where(rows.rc == 1, per_tok - save + np.where(has["core_attn"], 0.0, score_tok), none_tok)
    if fw.selective_recompute == "op":
        # per-op SAC keeps the layer input, the saved matmul outputs (q, v, gate or fc1, down) and the
        # attention output; SP shards the h-wide ones.
        h_sh = np.where(sp, h / tp, h)
        op_tok = 2.0 * (2.0 * h_sh + (a / tp) * (dq + dv) + kv_local * dv + f_act / tp)
        per_tok = np.where((rows.rc == 1) & ~rows.named, op_tok, per_tok)
    # full recompute keeps only each recomputed layer's input; the other layers keep everything
    frc = rows.frc
    return np.where(rows.rc == 2, frc * np.where(sp, 2.0 * h / tp, 2.0 * h) + (1.0 - frc) * none_tok, per_tok)


def _attention_bytes_per_token(model: ModelSpec, rows: Rows) -> np.ndarray:
    """What an attention layer keeps per token: q, k, v and the output in 16 bits (and in fp8 / fp4
    the output projection's quantised input), a gated attention's gate, or sparse MLA's own tensors."""
    tp, low_el, kv_local = rows.tp, rows.low_el, rows.kv_local
    a, dq, dv = float(model.num_heads), float(model.qk_dim), float(model.v_dim)
    low = rows.lowp > 0
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
        attn = np.where(model.sparse_active(rows.seq),
                        2.0 * ((a / tp) * sq + sq + (a / tp) * sv) + low_el * (a / tp) * dv + 4.0 * model.index_topk
                        + 2.0 * (hi + 1.0) * model.index_head_dim + 4.0 * hi, attn)
    return attn
