"""Stage 5 of the step: data-parallel synchronisation and the optimizer step.

* Gradients are all-reduced (ZeRO 0) or reduce-scattered, and parameters all-gathered (ZeRO 1 / 2),
  over the dense weights' data-parallel group (dp x cp) and the experts' (TP x CP x DP / (EP x
  expert TP)); overlapped with the backward (and the next forward) where the framework does, in
  buckets (Megatron-Core's default: max(40M, 1M x dp) parameters; one a buffer without overlap),
  one of which stays exposed; each bucket is a call of its own, priced at its own size (NCCL's
  protocol and latency for that size: :func:`calls_s`).
  ZeRO-2 keeps only its gradient shard, so it reduce-scatters every micro-batch (:func:`zero2_calls`);
  DeepSpeed overlaps stages 0-2 only when asked and gathers inside the optimizer step.
* ZeRO-3 / FSDP: per micro-batch, gathers in forward and backward (again for a recomputed forward
  where the framework reshards), a reduce-scatter, each split into per-layer calls, each priced at
  its own size, whose host launches and copies add up too (the framework's counts: data/frameworks.toml).
  Prefetched gathers hide under compute, and reduce-scatters under the backward; where the framework
  synchronises the device before every gather (DeepSpeed before v0.4), neither hides, the synchronise
  waiting for the reduce-scatters on their side stream too.
* Hybrid sharding (a layout's ``dp_replicate`` N): every ZeRO / FSDP collective above runs within a
  shard group of dp x cp / N ranks, and each reduce-scatter's gradient shard is then all-reduced over
  the N replicas (FSDP2's HSDP, Megatron-Core's distributed-optimizer instances), hidden like it.
* Optimizer: Adam with fp32 master weights is memory-bound, 30 B per local parameter shard; before
  it, the gradient norm reads the shard's gradients and all-reduces one number over the job.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hardware.kernels import host_op_launch_s, host_view_op_s
from ..models.spec import ModelSpec
from ..network.twolevel import Network
from ..parallelism.framework import Framework
from .columns import Rows, zero_groups
from .comm import CommTimes
from .compute import LayerWork, layer_params
from .memory import optimizer_bytes

ADAM_BYTES_PER_PARAM = 30.0  # read fp32 param, grad, m, v (16); write param, m, v (12) + bf16 copy (2)
DDP_BUCKET_PARAMS = 40e6  # Megatron-Core default gradient bucket (max(40M, 1M x dp))


@dataclass(frozen=True, slots=True)
class SyncTimes:
    """Per step and GPU: exposed data-parallel traffic ``dp_x`` and the optimizer ``t_opt`` (seconds);
    the dense and expert parameters a GPU holds, and the two data-parallel group sizes."""

    dense_params: np.ndarray
    expert_params: np.ndarray
    dpg: np.ndarray
    edpg: np.ndarray
    dp_x: np.ndarray
    t_opt: np.ndarray
    #: the compute the hidden part of the traffic slows, holding SMs beside it (perf.compute.contended)
    dp_cont: np.ndarray
    #: every data-parallel collective of the step at the network's rate, one after another, none hidden and
    #: no per-call latency: a floor under any step that carries this traffic (:func:`dp_traffic_s`)
    dp_traffic: np.ndarray


def local_params(model: ModelSpec, fw: Framework, rows: Rows) -> tuple[np.ndarray, np.ndarray]:
    """Dense and expert parameters per GPU (MTP modules counted like layers: their blocks take
    layer slots in the split); DualPipe keeps two stages' parameters on every rank (DeepSeek-V3
    report Table 2: "Parameter 2x")."""
    tp, pp, h, V = rows.tp, rows.pp, float(model.d_model), float(model.vocab_size)
    mtp = float(model.mtp_layers)
    dense_layers, expert_layers = layer_params(model)
    mtp_experts = mtp * model.num_experts * model.expert_params
    dense_params = (dense_layers + mtp * model.mtp_block_params - mtp_experts) / (tp * pp) + V * h / tp
    expert_params = (expert_layers + mtp_experts) / (pp * rows.ep * rows.etp)
    if fw.pipeline_schedule == "dualpipe":
        copies = np.where(pp > 1, 2.0, 1.0)
        dense_params, expert_params = dense_params * copies, expert_params * copies
    return dense_params, expert_params


def sync_times(model: ModelSpec, fw: Framework, net: Network, rows: Rows, work: LayerWork, comm: CommTimes,
               Lh: np.ndarray, mem_bw: float, sm_frac: float, host_cpu: str) -> SyncTimes:
    """Data-parallel traffic left exposed and the optimizer step (see the module's physics); ``Lh``
    layers of compute on the heaviest stage hide the traffic; ``host_cpu`` runs the host's part."""
    dense_params, expert_params = local_params(model, fw, rows)
    dpg = rows.dp * rows.cp
    edpg = rows.groups["edp"][0]  # expert data-parallel group: ETP x EP x EDP = TP x CP x DP
    zg = zero_groups(rows)  # the shard groups the collectives run over, and their replicas
    grb, gb, zero = fw.grad_reduce_bytes, fw.grad_bytes, rows.zero

    def dp_time(kind: str, params: np.ndarray, width: float, group: np.ndarray, stride: np.ndarray) -> np.ndarray:
        # (a group with no parameters, a dense model's experts, or of one rank makes no call and pays no latency)
        return np.where((params > 0) & (group > 1), net.collective_time_s(kind, params * width, group, stride), 0.0)

    def both(kind: str, width: float, replicas: bool = False) -> np.ndarray:
        # (the dense weights' and the experts' collectives over their shard groups, or, ``replicas``, of
        # one shard over the replicas of the group)
        if not replicas:
            return (dp_time(kind, dense_params, width, *zg["dps"])
                    + dp_time(kind, expert_params, width, *zg["edps"]))
        return (dp_time(kind, dense_params / zg["dps"][0], width, *zg["dpr"])
                + dp_time(kind, expert_params / zg["edps"][0], width, *zg["edpr"]))

    rs = both("reduce_scatter", grb)
    # parameters are all-gathered in 16 bits, or in fp8 / fp4 where the framework keeps them so
    pg = np.where(fw.fp8_param_gather, rows.low_el, rows.el)
    ag = both("all_gather", pg)
    arr = both("all_reduce", grb)
    # Hybrid sharding: each shard group reduce-scatters, then the replicas all-reduce their gradient shard
    # (FSDP2 HSDP's post-backward reduce-scatter then all-reduce; Megatron-Core's distributed optimizer
    # instances alike), once a reduce-scatter
    rar = both("all_reduce", grb, replicas=True)
    # Compute already hiding TP or CP traffic is not free to hide DP traffic as well, so the
    # windows exclude it (keeps "faster compute is never slower" true).
    win_f = Lh * (work.t_fwd + comm.tp_fx + comm.cp_fx - comm.hidden_f)
    win_b = Lh * (work.t_bwd + work.t_rc + comm.tp_bx + comm.cp_bx - comm.hidden_b)
    # the last gradient bucket of a backward is reduced after it: the framework's bucket, or Megatron-Core's
    per_bucket = fw.dp_bucket_params or np.maximum(DDP_BUCKET_PARAMS, 1e6 * dpg)
    bucket = np.minimum(1.0, per_bucket / (dense_params + expert_params))
    overlapped = fw.overlaps_dp(zero)
    rs_n, ag_n = zero2_calls(fw, rows)
    dp_bw = np.where(zero == 0, arr, rs_n * (rs + rar) + ag_n * ag)  # ZeRO 0-2: all of the step's DP traffic
    # ... made one call per bucket, each at its own size (a bucket's gradient shard all-reduced over the replicas)
    made = bucketed_s(fw, net, rows, dense_params, expert_params, per_bucket, overlapped,
                      {"reduce_scatter": grb, "all_gather": pg, "all_reduce": grb})
    # (one replica group makes no call: rep 1)
    shards = zg["dps"][0]
    rar_b = bucketed_s(fw, net, rows, dense_params / shards, expert_params / zg["edps"][0], per_bucket / shards,
                       overlapped, {"all_reduce": grb}, (zg["dpr"], zg["edpr"]))["all_reduce"]
    rs_b, ag_b, arr_b = made["reduce_scatter"] + rar_b, made["all_gather"], made["all_reduce"]
    dp_all = np.where(zero == 0, arr_b, rs_n * rs_b + ag_n * ag_b)
    # (the gather in the optimizer step runs under no compute)
    ag_x = ag_b if fw.param_gather_in_step else np.maximum(ag_b - win_f, ag_b * bucket)
    dp_low = np.where(zero == 0, np.maximum(arr_b - win_b, arr_b * bucket),
                      rs_n * np.maximum(rs_b - win_b, rs_b * bucket) + ag_n * ag_x)
    dp_low = np.where(overlapped, dp_low, dp_all)
    # (ZeRO-3 / FSDP: its own per-layer calls, each priced at its own size, from the whole-stage bytes)
    dp_z3 = _fsdp_s(fw, net, rows, dense_params + expert_params, ag, rs, rar, pg, win_f, win_b, Lh, mem_bw,
                    host_cpu)
    dp_x = np.where(dpg > 1, np.where(zero >= 3, dp_z3, dp_low), 0.0)
    # what of the traffic ran under compute holds SMs from it (ZeRO-3: its calls per micro-batch)
    total = np.where(zero >= 3, rows.m * (ag * (1.0 + float(fw.zero3_reshard_after_forward)) + rs + rar), dp_all)
    dp_cont = np.where((dpg > 1) & overlapped, sm_frac * np.maximum(total - dp_x, 0.0), 0.0)
    # (a tied embedding's gradient sync between the pipeline's ends, after the schedule: exposed)
    dp_x = dp_x + tied_embedding_sync_s(model, fw, net, rows)

    local = dense_params + expert_params
    shard = np.where(zero >= 1, dense_params / zg["dps"][0] + expert_params / zg["edps"][0], local)
    # Adam reads and writes its states (the framework's optimizer bytes: fp32 master, m and v = 12, as
    # ADAM_BYTES_PER_PARAM counts them), reads a 4-byte gradient and writes the 2-byte copy: 2 S + 6
    adam = np.where(rows.fp32, ADAM_BYTES_PER_PARAM, 2.0 * optimizer_bytes(fw, rows) + 6.0)
    t_opt = (shard * adam + np.where(zero >= 2, shard, local) * 2.0 * gb) / mem_bw
    # Gradient clipping reads every fp32 gradient of the shard once for its norm (Megatron-LM
    # clip_grads.py get_grad_norm_fp32: multi_tensor_l2norm; FSDP2 / DeepSpeed alike) and all-reduces
    # the norm over every GPU of the job (model- and data-parallel groups): one 4-byte call's latency
    world = rows.tp * rows.pp * rows.dp * rows.cp
    t_opt = t_opt + 4.0 * shard / mem_bw + np.asarray(net.collective_time_s("all_reduce", 4.0, world, 1))
    return SyncTimes(dense_params=dense_params, expert_params=expert_params, dpg=dpg, edpg=edpg, dp_x=dp_x,
                     t_opt=t_opt, dp_cont=dp_cont, dp_traffic=dp_traffic_s(fw, rows, ag, rs + rar, dp_bw))


def tied_embedding_sync_s(model: ModelSpec, fw: Framework, net: Network, rows: Rows) -> np.ndarray:
    """Seconds, per step, of the all-reduce that keeps a tied word embedding the same on the first and
    the last pipeline stage: each holds a copy (the input embedding, the output head) and sums the
    other's gradient into its own after the schedule, before the optimizer, under no compute
    (Megatron-Core finalize_model_grads._allreduce_word_embedding_grads over the embedding group, as
    Megatron-LM 2021's _allreduce_embedding_grads; DeepSpeed's PipelineEngine _exec_reduce_tied_grads).
    Two ranks, pp - 1 stages apart; the gradient of V x h / tp parameters at the framework's gradient
    bytes. 0 without pipeline parallelism or with untied embeddings."""
    if not model.tied_embeddings:
        return np.zeros_like(rows.pp)
    size = float(model.vocab_size) * float(model.d_model) / rows.tp * fw.grad_bytes
    apart = rows.groups["pp"][1] * np.maximum(rows.pp - 1.0, 1.0)
    return np.where(rows.pp > 1, net.collective_time_s("all_reduce", size, 2.0, apart), 0.0)


def calls_s(net: Network, kind: str, size: np.ndarray, calls: np.ndarray | float, group: np.ndarray,
            stride: np.ndarray) -> np.ndarray:
    """Seconds of ``calls`` equal collectives that carry ``size`` bytes in all, each priced at its own
    size: NCCL picks each call's protocol (and so its latency and bandwidth) by that size, so many
    small calls pay more than one large call of the same bytes (at least one call)."""
    calls = np.maximum(calls, 1.0)
    return calls * net.collective_time_s(kind, size / calls, group, stride)


def bucketed_s(fw: Framework, net: Network, rows: Rows, dense_params: np.ndarray, expert_params: np.ndarray,
               per_bucket: np.ndarray | float, overlapped: np.ndarray | bool, widths: dict[str, np.ndarray | float],
               groups: tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
               ) -> dict[str, np.ndarray]:
    """Seconds of the step's ZeRO 0-2 data-parallel collective of each kind as the framework makes it:
    the dense and the expert gradients are each reduced (and the parameters gathered) one bucket of
    ``per_bucket`` parameters at a time, one call a bucket, each call priced at its own size
    (``widths``: bytes a parameter, by kind), so with NCCL's protocol and latency for that size.
    Megatron-Core buckets only under overlap (distributed_data_parallel.py: "Set bucket_size to
    infinity if overlap_grad_reduce is False", one call a buffer), and only the first of an interleaved
    stage's model chunks ("Turn off bucketing for model_chunk 2 onwards": one call each); a framework
    with a bucket size of its own (:attr:`Framework.dp_bucket_params`: DeepSpeed's reduce_bucket_size)
    buckets whatever the overlap. ``groups``: the dense weights' and the experts' (members, stride), their
    shard groups where not given. A group with no parameters (a dense model's experts) or of one rank makes
    no call."""
    if groups is None:
        zg = zero_groups(rows)
        groups = (zg["dps"], zg["edps"])
    bucketed = np.asarray(overlapped) | (fw.dp_bucket_params > 0)
    chunks = np.where(bucketed, rows.vpp if not fw.dp_bucket_params else 1.0, 1.0) * np.ones_like(dense_params)
    out = {}
    for kind, width in widths.items():
        total = np.zeros_like(dense_params)
        for params, (group, stride) in zip((dense_params, expert_params), groups, strict=True):
            size = params * width / chunks
            # the first chunk's buckets (one call unbucketed), then one call for each other chunk
            first = np.where(bucketed, np.maximum(np.ceil(params / chunks / per_bucket), 1.0), 1.0)
            t = calls_s(net, kind, size, first, group, stride)
            if np.any(chunks > 1.0):
                t = t + (chunks - 1.0) * calls_s(net, kind, size, 1.0, group, stride)
            total = total + np.where((params > 0) & (group > 1), t, 0.0)
        out[kind] = total
    return out


def zero2_calls(fw: Framework, rows: Rows) -> tuple[np.ndarray, np.ndarray]:
    """Gradient reduce-scatters and parameter all-gathers per step under ZeRO 0-2. ZeRO-2 keeps only its
    shard of the gradients, so each micro-batch's backward reduce-scatters what it made (DeepSpeed
    stage_1_and_2.py reduce_ready_partitions_and_remove_grads: "partition_gradients or
    is_gradient_accumulation_boundary"): ``rows.m``; ZeRO 0 / 1 keep whole gradients and reduce once, in
    the last backward. The updated parameters are gathered once a step, except where FSDP runs ZeRO-2
    (:attr:`Framework.zero2_regather`: PyTorch's SHARD_GRAD_OP "unshards before the forward ... and only
    reshards them after the backward"): once a micro-batch. A framework that keeps a pipeline stage
    gathered and its gradients unsharded under PP (:attr:`Framework.fsdp_pp_unsharded`) does each once."""
    per_mb = (rows.zero == 2) & ~(fw.fsdp_pp_unsharded & (rows.pp > 1))
    return np.where(per_mb, rows.m, 1.0), np.where(per_mb & fw.zero2_regather, rows.m, 1.0)


def dp_traffic_s(fw: Framework, rows: Rows, ag: np.ndarray, rs: np.ndarray, dp_all: np.ndarray) -> np.ndarray:
    """Seconds of all the step's data-parallel traffic on its links, one collective after another: the
    gathers and reduce-scatters of one step (ZeRO 0-2: ``dp_all``), or ZeRO-3 / FSDP's per micro-batch
    (a forward gather, again for a recomputed forward where the framework re-gathers, a backward gather
    where it reshards after the forward, one reduce-scatter; once a schedule where FSDP keeps a pipeline
    stage gathered). ``ag`` / ``rs`` are the whole stage's collectives at the network's rate, without
    the per-call latency the step adds: what no overlap can hide, so a measured step shorter than this
    carried less traffic than its row states."""
    regather = 1.0 + rows.frc * float(fw.zero3_regather_on_recompute) + float(fw.zero3_reshard_after_forward)
    z3 = rows.m * (ag * regather + rs)
    if fw.fsdp_pp_unsharded:
        z3 = np.where(rows.pp > 1, rows.ga * (ag + rs), z3)
    return np.where(rows.dp * rows.cp > 1, np.where(rows.zero >= 3, z3, dp_all), 0.0)


def _fsdp_s(fw: Framework, net: Network, rows: Rows, params: np.ndarray, ag: np.ndarray, rs: np.ndarray,
            rar: np.ndarray, pg: np.ndarray, win_f: np.ndarray, win_b: np.ndarray, Lh: np.ndarray, mem_bw: float,
            host_cpu: str) -> np.ndarray:
    """Exposed seconds of ZeRO-3 / FSDP's per-layer gathers and reduce-scatters per step, over the shard
    group, and under hybrid sharding the replicas' all-reduce of each reduce-scatter's shard (``rar``,
    whole-stage) (the host's part run by ``host_cpu``)."""
    zg = zero_groups(rows)
    (dpg, s_dpcp), (rep, s_rep), m, ga, pp = zg["dps"], zg["dpr"], rows.m, rows.ga, rows.pp
    # ZeRO-3 / FSDP: per micro-batch, gathers in forward and backward (and again for a
    # recomputed forward where the framework releases parameters), one reduce-scatter, split into
    # Lh x gathers_per_layer (reduces_per_layer) collectives.
    n_coll = Lh * fw.zero3_gathers_per_layer
    n_rs = Lh * (fw.zero3_reduces_per_layer or fw.zero3_gathers_per_layer)
    # The bytes are those of the whole-stage collectives above, made as n_coll equal calls, each priced
    # at its own size on the dense weights' group: what that costs beyond one call of it all.
    def split_s(kind: str, size: np.ndarray) -> np.ndarray:
        return calls_s(net, kind, size, n_coll, dpg, s_dpcp) - calls_s(net, kind, size, 1.0, dpg, s_dpcp)

    ag3 = ag + split_s("all_gather", params * pg)
    # ... and the copies the framework makes around each gather, at HBM speed
    ag3 = ag3 + fw.zero3_gather_copy_bytes * params * pg / mem_bw
    # (the gradients go as many calls as the gathers, plus, where the framework reduce-scatters more
    # tensors than it gathers, one call for each of its small ones, biases and norms: a latency each)
    small = np.maximum(n_rs - n_coll, 0.0) * calls_s(net, "reduce_scatter", 0.0, 1.0, dpg, s_dpcp)
    rs3 = rs + split_s("reduce_scatter", params * fw.grad_reduce_bytes) + small
    # (each layer's gradient shard then all-reduced over the replicas, as many calls again)
    shard = params / dpg * fw.grad_reduce_bytes
    rs3 = rs3 + np.where(rep > 1, rar + calls_s(net, "all_reduce", shard, n_rs, rep, s_rep)
                         - calls_s(net, "all_reduce", shard, 1.0, rep, s_rep), 0.0)
    # Through list-form collectives each call also launches one copy per rank on the host: a gather's
    # copies follow its NCCL kernel, launched while it runs (the gather takes the longer of the two); a
    # reduce-scatter's copies come before its kernel, and no compute hides them (the host launches that
    # compute; the device is synchronised around the gathers).
    launch = float(fw.zero3_list_collectives) * dpg * host_op_launch_s(host_cpu)
    # ... and where the framework builds the per-rank views in its own Python loop, that loop runs
    # first, on the host, before the call is made
    view_ag = fw.zero3_gather_views_per_rank * dpg * host_view_op_s(host_cpu)
    view_rs = fw.zero3_reduce_views_per_rank * dpg * host_view_op_s(host_cpu)
    ag3 = n_coll * view_ag + np.maximum(ag3, n_coll * launch)
    # (per micro-batch; once a schedule where FSDP keeps a pipeline stage gathered, below)
    host = np.where((pp > 1) & fw.fsdp_pp_unsharded, ga, m) * n_rs * (launch + view_rs)
    # (a framework that keeps the parameters gathered from the forward to the backward gathers once)
    ag3_b = ag3 * (1.0 + rows.frc * float(fw.zero3_regather_on_recompute)) * float(fw.zero3_reshard_after_forward)
    # Overlap windows: forward compute hides parameter gathers, backward compute hides the
    # backward gathers and the gradient reduce-scatters together (one window, shared).
    if fw.dp_overlap and fw.zero3_prefetch:
        dp_z3 = m * (np.maximum(ag3 - win_f, ag3 / n_coll) + np.maximum(ag3_b + rs3 - win_b, rs3 / n_rs))
    elif fw.dp_overlap and not fw.zero3_gather_syncs_device:
        # (each gather waits for the compute before it; the reduce-scatters hide, unless a device
        # synchronise before each gather waits for them too: then nothing hides)
        dp_z3 = m * (ag3 + ag3_b + np.maximum(rs3 - win_b, rs3 / n_rs))
    else:
        dp_z3 = m * (ag3 + ag3_b + rs3)
    if fw.fsdp_pp_unsharded:
        # under PP: one gather before the first micro-batch's forward, one reduce-scatter after the last
        # backward, each hidden behind one micro-batch's compute at most; per schedule (torch's pipeline
        # stage reshards and reduces at the last backward of each schedule step)
        dp_z3 = np.where(pp > 1, ga * (np.maximum(ag3 - win_f, ag3 / n_coll) + np.maximum(rs3 - win_b, rs3 / n_rs)),
                         dp_z3)
    return dp_z3 + host
