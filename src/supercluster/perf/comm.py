"""Stage 3 of the step: the collectives of one layer per micro-batch, and what of them the
compute beside them hides. Collectives go through the :class:`~supercluster.network.twolevel.Network`
interface (the two-level model, a sized fabric, or a device profile's measurements).

* TP: attention and a dense MLP each all-gather / reduce-scatter (sequence parallelism) or
  all-reduce their activations; TP overlap pipelines them in tp chunks with the GEMMs: Transformer
  Engine's userbuffers in every pass, with SM kernels (the compute beside them pays for the SMs
  they hold); PyTorch's async TP (torchtitan) in the forward only, with the copy engines
  (:func:`tp_overlap_exposed_s`: PyTorch measured its forward ~20 % faster, the whole step ~8 %).
* CP: the ring passes K and V (Megatron-Core's p2p ring) or all-gathers them (PyTorch's ring
  attention, :func:`allgather_ring_attention`), hidden under the attention blocks where it can be;
  each ring step's partial output and gradients are merged by memory-bound kernels (Transformer
  Engine's rescale-and-add per step, :func:`p2p_ring_merges`; PyTorch's fp32 merges); all-to-all
  (Ulysses) CP exchanges heads for sequence around the attention (:func:`all_to_all_attention`).
* EP: Megatron-Core's all-to-all dispatcher (and DeepEP's node-deduplicated dispatch), exposed
  unless the framework overlaps it (Megatron-Core's batch-level overlap: each all-to-all beside one
  compute chunk of another micro-batch, in the steady phase of the schedule, :func:`paired_ep_exposed_s`;
  DualPipe: hidden). DeepEP sends a token once to each rank and node holding any of
  its experts; under a model's group-limited routing (DeepSeek-V3: each token's experts inside its
  best 4 of 8 groups) those are fewer, counted over the groups a token can choose. A call's transfer
  on each path (the scale-up links, the scale-out network) is reported beside its price
  (:func:`ep_call_paths_s`).
* The head: a vocabulary-parallel embedding and loss (Megatron).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..models.spec import ModelSpec
from ..network.twolevel import Network, TokenDispatch
from ..parallelism.framework import Framework
from .columns import Rows
from .compute import LayerWork


@dataclass(frozen=True, slots=True)
class CommTimes:
    """Seconds per layer and micro-batch: each parallel dimension's collectives forward (``_f``) and
    backward (``_b``), what stays exposed (``x``), and the layer's exposed total (``tp_x``, ``cp_x``,
    ``ep_x``); ``half`` is one TP all-gather of the activations, ``tp_head`` the head's TP traffic;
    ``ring_bytes`` what PyTorch's ring attention holds during a layer's backward; ``ep_hid`` the layer's
    token dispatch and combine seconds (forward, backward and recompute) under its compute, ``ep_share_f`` /
    ``ep_share_b`` the shares of its calls in the forward and in the backward (the rest: a full
    recompute's forward, ``ep_share_f`` again per recompute); ``ep_call`` one MoE layer's dispatch (or
    combine) and ``ep_calls`` how many a layer makes per micro-batch (the busiest rank's, 0 dense)."""

    half: np.ndarray
    tp_f: np.ndarray
    tp_b: np.ndarray
    tp_fx: np.ndarray
    tp_bx: np.ndarray
    tp_x: np.ndarray
    cp_f: np.ndarray
    cp_b: np.ndarray
    cp_fx: np.ndarray
    cp_bx: np.ndarray
    cp_x: np.ndarray
    cp_mem_f: np.ndarray
    cp_mem_b: np.ndarray
    ring_bytes: np.ndarray
    ep_x: np.ndarray
    tp_head: np.ndarray
    ep_hid: np.ndarray
    ep_share_f: np.ndarray
    ep_share_b: np.ndarray
    ep_call: np.ndarray
    ep_calls: np.ndarray
    #: whether the hidden TP collectives hold SMs while they run (1: SM kernels; 0: copy engines)
    tp_sm: float = 1.0

    @property
    def hidden_f(self) -> np.ndarray:
        """TP, CP and EP seconds per layer and micro-batch that run under the forward's compute (a full
        recompute runs them once more)."""
        return (self.tp_f - self.tp_fx) + (self.cp_f - self.cp_fx) + self.ep_share_f * self.ep_hid

    @property
    def hidden_b(self) -> np.ndarray:
        """TP, CP and EP seconds per layer and micro-batch that run under the backward's compute."""
        return (self.tp_b - self.tp_bx) + (self.cp_b - self.cp_bx) + self.ep_share_b * self.ep_hid

    @property
    def held_f(self) -> np.ndarray:
        """Of :attr:`hidden_f`, the seconds a collective holds SMs the compute beside it would use."""
        return self.hidden_f - (1.0 - self.tp_sm) * (self.tp_f - self.tp_fx)

    @property
    def held_b(self) -> np.ndarray:
        """Of :attr:`hidden_b`, the seconds a collective holds SMs the compute beside it would use."""
        return self.hidden_b - (1.0 - self.tp_sm) * (self.tp_b - self.tp_bx)


def layer_comm(model: ModelSpec, fw: Framework, net: Network, rows: Rows, work: LayerWork,
               mem_bw: float) -> tuple[CommTimes, LayerWork]:
    """The layer's collectives; and its work with the memory-bound ops around the CP exchange (the
    merges of the per-step outputs and gradients of a ring, the copies around all-to-all CP) added to
    its forward, backward and recompute."""
    tp, cp, sp, T, el, frc, has = rows.tp, rows.cp, rows.sp, rows.T, rows.el, rows.frc, rows.has
    s_tp, s_cp = rows.groups["tp"][1], rows.groups["cp"][1]
    L, h = model.num_layers, float(model.d_model)
    a, dq, dv = float(model.num_heads), float(model.qk_dim), float(model.v_dim)
    f_moe = model.num_moe_layers / L
    act_bytes = T * h * el
    half = net.collective_time_s("all_gather", act_bytes, tp, s_tp)
    ar = net.collective_time_s("all_reduce", act_bytes, tp, s_tp)
    # Attention and a dense MLP each all-gather / reduce-scatter (SP) or all-reduce their activations;
    # an MoE MLP does not: its dispatcher moves the tokens (below), so MoE layers keep half of these.
    # (a hybrid's single-block layers: one mixer or one MLP each, one set of collectives)
    dense_share = 1.0 - 0.5 * (f_moe + (model.mlp_only_layers + model.mixer_only_layers) / L)
    tp_f = np.where(sp, 4.0 * half, 2.0 * ar) * dense_share
    tp_b = np.where(sp, 6.0 * half, 2.0 * ar) * dense_share  # SP re-gathers the input for the weight gradient
    tp_fx, tp_bx, tp_rx = tp_overlap_exposed_s(fw, tp, tp_f, tp_b, work.t_gemm_f)
    # a recomputed dense MLP gathers its (SP) input and reduces its output again
    tp_x = tp_fx + tp_bx + frc * tp_rx + np.where(
        has["mlp"], tp_rx * (1.0 - f_moe - model.mixer_only_layers / L) / (2.0 * dense_share), 0.0)

    kv_el = T * (a / tp if fw.cp_kv_repeated else rows.kv_local) * (dq + dv)  # this rank's K and V
    if fw.cp_rotate == "allgather":
        cp_f, cp_fx, cp_b, cp_bx, cp_mem_f, cp_mem_b, ring_bytes = allgather_ring_attention(
            net, cp, s_cp, kv_el, T * (a / tp), dq, dv, el, work.t_attn_f, work.t_attn_b, mem_bw)
    elif fw.cp_rotate == "a2a":
        cp_f, cp_mem_f = all_to_all_attention(net, cp, s_cp, T * (a / tp), T * rows.kv_local, dq, dv, el, mem_bw)
        cp_b, cp_mem_b, ring_bytes = cp_f, cp_mem_f, np.zeros_like(tp)
        cp_fx, cp_bx = cp_f, cp_b  # (the attention needs all of them, nothing runs beside them)
    else:
        ring_step = net.collective_time_s("p2p", kv_el * el, cp, s_cp)
        cp_f = (cp - 1.0) * ring_step
        cp_b = 2.0 * cp_f  # K/V and their gradients travel in the backward ring
        cp_fx, cp_bx = p2p_ring_exposed_s(cp, ring_step, work.t_attn_f, work.t_attn_b)
        cp_mem_f, cp_mem_b = p2p_ring_merges(cp, T * (a / tp) * dq, T * (a / tp) * dv, kv_el, el, mem_bw)
        ring_bytes = np.zeros_like(tp)
    # the memory-bound work around the CP exchange runs in the layer's passes
    work = dataclasses.replace(work, t_fwd=work.t_fwd + cp_mem_f, t_bwd=work.t_bwd + cp_mem_b,
                               t_rc=work.t_rc + np.where(rows.rc == 2, frc * cp_mem_f, 0.0))
    # Vocabulary-parallel embedding and head (Megatron): the embedding output is all-reduced in the
    # forward, the head input gradient in the backward (SP: all-gather / reduce-scatter instead),
    # and the cross-entropy all-reduces three fp32 statistics per token (max, sum of exp, target).
    tp_head = np.where(sp, 2.0 * half, 2.0 * ar) + 3.0 * net.collective_time_s("all_reduce", T * 4.0, tp, s_tp)
    # compute already hiding TP or CP traffic is not free to hide the token dispatch too
    busy = (tp_f - tp_fx) + frc * (tp_f - tp_rx) + (cp_f - cp_fx) * (1.0 + frc) + (tp_b - tp_bx) + (cp_b - cp_bx)
    ep_hid, ep_x, calls, ep_call = _ep_s(model, fw, net, rows, work, busy)
    comm = CommTimes(half=half, tp_f=tp_f, tp_b=tp_b, tp_fx=tp_fx, tp_bx=tp_bx, tp_x=tp_x, cp_f=cp_f, cp_b=cp_b,
                     cp_fx=cp_fx, cp_bx=cp_bx, cp_x=cp_fx * (1.0 + frc) + cp_bx, cp_mem_f=cp_mem_f,
                     cp_mem_b=cp_mem_b, ring_bytes=ring_bytes, ep_x=ep_x, tp_head=tp_head, ep_hid=ep_hid,
                     ep_share_f=2.0 / calls, ep_share_b=(2.0 + 2.0 * has["moe"]) / calls, ep_call=ep_call,
                     ep_calls=np.where(model.is_moe, calls, 0.0), tp_sm=float(fw.tp_overlap != "async-tp"))
    return comm, work


def tp_overlap_exposed_s(fw: Framework, tp: np.ndarray, tp_f: np.ndarray, tp_b: np.ndarray, t_gemm_f: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A layer's TP seconds left exposed per micro-batch: (forward, backward, a recomputed forward).

    Without TP overlap all of them. Transformer Engine's userbuffers (:attr:`Framework.tp_overlap`
    "userbuffers") pipeline every pass's collectives with its GEMMs in tp chunks, one chunk of which
    cannot hide. PyTorch's micro-pipeline TP ("async-tp": torch._inductor fx_passes/micro_pipeline_tp.py
    fuses an all-gather into the matmuls that take it as their left operand and a matmul into the
    reduce-scatter of its output) hides the forward's the same way; the backward's, and those of a
    forward recomputed in the backward, are priced exposed: PyTorch's announcement measured the
    forward ~20 % faster but the whole step only ~8 % (Llama 3 70B; 8B: ~29 % and ~8 %), about what
    hiding the forward's collectives alone gives; the copy engines move the chunks, so the hidden
    collectives hold no SMs (:attr:`CommTimes.tp_sm`)."""
    if not fw.tp_comm_overlap:
        return tp_f, tp_b, tp_f
    tp_fx = np.maximum(tp_f - t_gemm_f, tp_f / tp)
    if fw.tp_overlap == "async-tp":
        return tp_fx, tp_b, tp_f
    return tp_fx, np.maximum(tp_b - 2.0 * t_gemm_f, tp_b / tp), tp_fx


def _ep_s(model: ModelSpec, fw: Framework, net: Network, rows: Rows, work: LayerWork, busy: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A layer's token dispatch and combine per micro-batch: its seconds hidden under the layer's
    compute, those left exposed, how many all-to-all calls it makes and one call's seconds (0 seconds
    for a dense model).
    ``busy``: the layer's compute seconds already hiding TP and CP traffic; no more than the rest can
    hide the dispatch."""
    frc, has = rows.frc, rows.has
    calls = (4.0 + 2.0 * frc + 2.0 * has["moe"]) * np.ones_like(rows.tp)
    if not model.is_moe:
        return np.zeros_like(rows.tp), np.zeros_like(rows.tp), calls, np.zeros_like(rows.tp)
    tp, etp, T, el = rows.tp, rows.etp, rows.T, rows.el
    f_moe = model.num_moe_layers / model.num_layers
    # Megatron-Core's all-to-all dispatcher: EP all-to-all of each rank's tokens x top_k, then (expert
    # TP > 1) an all-gather of the dispatched tokens over the expert-TP ranks for the TP-sharded
    # experts; the combine does the reverse (reduce-scatter, all-to-all); the backward mirrors both.
    # Not pipelined with GEMMs. With expert TP < TP (MoE parallel folding) the EP group runs over TP
    # ranks first (stride tp-stride x etp) instead of within dp x cp.
    s_tp = rows.groups["tp"][1]
    hx = float(model.expert_width)
    a2a = net.collective_time_s("all_to_all", *_dispatch(model, fw, rows, work))
    tp_tokens = np.where(etp > 1, net.collective_time_s("all_gather", T * (etp / tp) * model.top_k * hx * el, etp,
                                                        s_tp), 0.0)
    ep_all = f_moe * (a2a + tp_tokens) * calls
    if not fw.ep_overlap:
        return np.zeros_like(ep_all), ep_all, calls, a2a + tp_tokens
    if fw.ep_overlap_bounded:
        x = f_moe * paired_ep_exposed_s(rows, work, a2a + tp_tokens, calls, busy, f_moe)
        return ep_all - x, x, calls, a2a + tp_tokens
    hid = np.minimum(ep_all, np.maximum(work.t_fwd + work.t_bwd + work.t_rc - busy, 0.0))
    # DualPipe: the DeepSeek-V3 report states the all-to-all is fully hidden (what runs under compute
    # holds SMs from it: at most the compute there is)
    return hid, np.zeros_like(ep_all), calls, a2a + tp_tokens


def _dispatch(model: ModelSpec, fw: Framework, rows: Rows, work: LayerWork
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, TokenDispatch | None]:
    """One MoE dispatch all-to-all as the network prices it: (bytes per rank, EP group, its rank
    stride, DeepEP's one copy a rank and a domain or None)."""
    # (a latent MoE dispatches its tokens at the experts' latent width; the call ends when the busiest
    # rank has received its tokens: work.moe_load times the mean)
    size = rows.tok_sp * model.top_k * float(model.expert_width) * rows.el * work.moe_load
    # (DeepEP: each token goes once to every rank, and crosses once to every node, holding any of
    # its experts; where they are depends on how the router spreads them)
    dedup = TokenDispatch(float(model.num_experts), float(model.top_k), fw.moe_router, model.router_groups,
                          model.router_group_topk) if fw.ep_node_dedup else None
    return size, rows.ep, rows.groups["ep"][1], dedup


def ep_call_paths_s(model: ModelSpec, fw: Framework, net: Network, rows: Rows, work: LayerWork
                    ) -> tuple[np.ndarray, np.ndarray]:
    """One MoE dispatch's (or combine's) transfer seconds on each path, (scale-up links, scale-out
    network): :attr:`CommTimes.ep_call` less the calls' latency and the expert-TP gather (0 dense;
    NaN where a measured network does not tell its paths apart)."""
    if not model.is_moe:
        return np.zeros_like(rows.tp), np.zeros_like(rows.tp)
    up, out = net.all_to_all_paths_s(*_dispatch(model, fw, rows, work))
    return np.asarray(up, dtype=float) * np.ones_like(rows.tp), np.asarray(out, dtype=float) * np.ones_like(rows.tp)


def paired_ep_exposed_s(rows: Rows, work: LayerWork, call: np.ndarray, calls: np.ndarray, busy: np.ndarray,
                        f_moe: float) -> np.ndarray:
    """Exposed dispatch and combine seconds of one MoE layer per micro-batch under Megatron-Core's
    batch-level overlap (--overlap-moe-expert-parallel-comm: pipeline_parallel/combined_1f1b.py, and
    schedule_layer_1f1b, which runs one micro-batch's forward layer beside another's backward layer).
    Each of the four all-to-alls (``call`` seconds each) runs beside one compute chunk of the other
    micro-batch, and only what outlasts that chunk is exposed: the backward's combine beside the
    forward's attention, the forward's dispatch beside the backward's experts, the backward's dispatch
    beside the forward's experts, the forward's combine beside the backward's attention. The experts'
    chunk is their GEMMs (the backward twice the forward's), the attention chunk the rest of the layer;
    compute already hiding TP or CP traffic (``busy``) is not free for it. Only the steady phase of the
    pipeline schedule pairs a forward with a backward: the warm-up forwards and cool-down backwards run
    alone (Megatron-Core's interleaved schedule warms up 2 (pp - 1) + (vpp - 1) pp model chunks on its
    first stage, 1F1B pp - 1 micro-batches; without a pipeline the first forward and the last backward),
    their all-to-alls all exposed. A recompute's further calls hide in what compute is left."""
    total = work.t_fwd + work.t_bwd + work.t_rc
    free = np.clip(1.0 - busy / np.maximum(total, 1e-30), 0.0, 1.0)
    exp_f = f_moe * work.t_experts_f
    chunks = (work.t_fwd - exp_f, work.t_experts_f, work.t_bwd - 2.0 * exp_f, 2.0 * work.t_experts_f)
    paired = sum(np.maximum(call - free * np.maximum(c, 0.0), 0.0) for c in chunks)
    left = np.maximum(free * total - (4.0 * call - paired), 0.0)
    extra = np.maximum((calls - 4.0) * call - left, 0.0)
    pp, vpp, steps = rows.pp, rows.vpp, rows.ms * rows.vpp
    warmup = np.where(vpp > 1, 2.0 * (pp - 1.0) + (vpp - 1.0) * pp, pp - 1.0)
    alone = np.clip(np.maximum(warmup, 1.0) / np.maximum(steps, 1.0), 0.0, 1.0)
    return (1.0 - alone) * paired + alone * 4.0 * call + extra


def p2p_ring_exposed_s(cp: np.ndarray, ring_step: np.ndarray, t_attn_f: np.ndarray, t_attn_b: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Exposed seconds of Transformer Engine's K/V ring (AttnFuncWithCPAndKVP2P), forward and backward,
    per layer and micro-batch: each step's transfer runs beside that step's attention block and only
    what outlasts the block is exposed. With causal load balancing every one of the ``cp`` steps
    computes the same work, a ``cp``-th of the layer's attention. Forward: step i sends its K/V on while
    it computes, the next step waits for them (cp - 1 transfers of ``ring_step``). Backward: the first
    step sends K/V, the middle steps K/V with the gradients gathered so far, the last the gradients
    alone (2 (cp - 1) steps' worth of bytes)."""
    c_f, c_b = t_attn_f / np.maximum(cp, 1.0), t_attn_b / np.maximum(cp, 1.0)
    ring = cp > 1.0
    fwd = np.where(ring, (cp - 1.0) * np.maximum(ring_step - c_f, 0.0), 0.0)
    bwd = np.where(ring, 2.0 * np.maximum(ring_step - c_b, 0.0)
                   + np.maximum(cp - 2.0, 0.0) * np.maximum(2.0 * ring_step - c_b, 0.0), 0.0)
    return fwd, bwd


def p2p_ring_merges(cp: np.ndarray, q_el: np.ndarray, o_el: np.ndarray, kv_el: np.ndarray, el: np.ndarray,
                    mem_bw: float) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of the memory-bound work around Transformer Engine's K/V ring, per layer and micro-batch:
    (forward, backward). ``q_el`` / ``o_el`` / ``kv_el``: this rank's query, output and K+V elements.

    As AttnFuncWithCPAndKVP2P writes it (transformer_engine/pytorch/attention/dot_product_attention/
    context_parallel.py): each of the ``cp`` steps runs the attention kernel on one block and leaves its
    own output; after the ring, the first step's output is rescaled into the result (a read and a
    write, flash_attn_fwd_out_correction_init) and every later one is rescaled and added to it in the
    activations' precision (out.add_: two reads and a write, flash_attn_fwd_out_correction). Causal
    load balancing gives a later step either all of the rank's queries against the first half of the
    received keys or the second half of its queries against all of them: 0.75 of the output and of
    K/V on average. K and V are concatenated into the send buffer once (a read and a write). The
    backward accumulates per step the query gradient (dq.copy_, then dq.add_) and the K/V gradient
    (the step's dK and dV concatenated, torch.cat, then added to the buffer that travels on), all in
    the activations' precision. The softmax statistics' corrections (a few values per query row)
    are left out."""
    later = 0.75 * (cp - 1.0)
    fwd = el * (o_el * (2.0 + 3.0 * later) + 2.0 * kv_el)
    bwd = el * (q_el * (2.0 + 3.0 * later) + kv_el * (2.0 + 2.0 * (1.0 + later) + 3.0 * later))
    ring = cp > 1.0
    return np.where(ring, fwd / mem_bw, 0.0), np.where(ring, bwd / mem_bw, 0.0)


def allgather_ring_attention(net: Network, cp: np.ndarray, s_cp: np.ndarray, kv_el: np.ndarray, hq: np.ndarray,
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


def all_to_all_attention(net: Network, cp: np.ndarray, s_cp: np.ndarray, q_el: np.ndarray, kv_heads_el: np.ndarray,
                         dq: float, dv: float, el: np.ndarray, mem_bw: float) -> tuple[np.ndarray, np.ndarray]:
    """All-to-all (Ulysses) context parallelism per layer and micro-batch, as Transformer Engine runs it
    (AttnFuncWithCPAndQKVOA2A, flash_attn_a2a_communicate; Megatron-Core --cp-comm-type a2a): seconds
    of its all-to-alls and of the copies around them, in each pass (forward and backward alike).

    ``q_el``: this rank's query head-elements (tokens x query heads of its TP rank), ``kv_heads_el``
    its tokens x KV heads. Forward: Q, K and V each go through one all-to-all over the cp ranks
    (sequence-sharded to head-sharded), the attention runs over the whole sequence for 1/cp of the
    heads, and its output goes back through one more; the backward does the same for the output
    gradient and the Q, K, V gradients. Each all-to-all is its own call, issued ahead of the next
    tensor's reshuffle, and the attention waits for them all: none hides under compute. Around each
    call the tensor is copied three times (a contiguous movedim before it; after it a movedim and an
    index_select that restore the load-balanced chunk order; the output the other way round): each a
    read and a write of the tensor."""
    q, k, v, o = q_el * dq, kv_heads_el * dq, kv_heads_el * dv, q_el * dv
    calls = sum(net.collective_time_s("all_to_all", x * el, cp, s_cp) for x in (q, k, v, o))
    copies = 3.0 * 2.0 * el * (q + k + v + o) / mem_bw
    split = cp > 1.0
    return np.where(split, calls, 0.0), np.where(split, copies, 0.0)
