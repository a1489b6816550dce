"""Stage 2 of the step, its GEMMs: each priced as its FLOPs at the tensor-core rate plus its operands
through HBM, one after the other (DeepGEMM's published shapes: data/kernels.toml [gemm]), the
tensor-core rate slowed by how well the GEMM's shape fills the GPU's SMs with output tiles
(:class:`~supercluster.hardware.kernels.GemmGrid`); fp8 / fp4 casts are added as HBM traffic. A
calibrated profile's rate, measured in situ, keeps the roofline (the slower of the two)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..hardware.kernels import GemmGrid
from ..models.spec import ModelSpec


@dataclass(frozen=True, slots=True)
class GemmCost:
    """What a GEMM's seconds follow from, per row: the tensor-core ``rate``, the bytes of an operand
    element in (``el_in``, the GEMM precision) and out (``el_out``, 16 bit), the HBM rate, the HBM
    bytes per element its fp8 / fp4 casts move for activations (``q_el``, forward and backward) and
    for weights (``q_w``: once a step, priced apart by the caller), whether the rate was measured in
    situ (``overlap``: the roofline), the GPU's tiling (``grid``; None: no quantisation priced), and how
    many of an MoE layer's local experts' GEMMs share the SMs at once (``expert_streams``; 0: all)."""

    rate: np.ndarray
    el_in: np.ndarray | float
    el_out: np.ndarray | float
    mem_bw: float
    q_el: np.ndarray | float = 0.0
    q_w: np.ndarray | float = 0.0
    overlap: bool = False
    grid: GemmGrid | None = None
    expert_streams: int = 0

    def seconds(self, M: np.ndarray | float, K: np.ndarray | float, N: np.ndarray | float,
                groups: np.ndarray | float = 1.0) -> np.ndarray:
        """One GEMM (M x K) @ (K x N), forward: its FLOPs at the tensor-core rate (slowed by its
        tiling over the three training passes, :meth:`GemmGrid.slowdown`; ``groups`` such GEMMs run
        as one grouped kernel) plus its operands (inputs and weights in the GEMM precision, output in
        16 bit) through HBM (kernels.toml [gemm]: the sum, not the roofline's max, matches DeepGEMM's
        published small- and large-M shapes); in situ the roofline, whichever is slower. Training
        shapes are compute bound; few tokens per GPU or per expert are not. Its casts, ``q_el`` per
        quantised input and output-gradient element and ``q_w`` per weight element, add a third of
        their traffic here (the backward is priced as twice this)."""
        compute = 2.0 * M * K * N / self.rate
        if self.grid is not None and not self.overlap:
            compute = compute * self.grid.slowdown(M, K, N, groups)
        memory = (self.el_in * (M * K + K * N) + self.el_out * M * N) / self.mem_bw
        return (np.maximum(compute, memory) if self.overlap else compute + memory) + \
            (self.q_el * (M * K + M * N) + self.q_w * K * N) / (3.0 * self.mem_bw)


def layer_gemm_s(model: ModelSpec, T: np.ndarray, tp: np.ndarray, ep: np.ndarray, cost: GemmCost,
                 etp: np.ndarray | None = None, load: np.ndarray | float = 1.0) -> np.ndarray:
    """Forward GEMM seconds of one layer (mean over dense and MoE layers) for T tokens per GPU.

    Attention: the input projections (Q, K, V, or MLA's factors) as one GEMM and the output
    projection. MLP: the input (gate + up fused when gated) and output GEMMs. MoE: each of the
    E / ep local experts sees T (etp / tp) top_k ep / E tokens on average (``load`` times that on the
    busiest rank, which the others wait for), its width split over the
    expert-TP ranks (etp = tp: like the dense MLP); shared experts see every token; the router is a
    T x h x E GEMM. Latent MoE: the experts read and write the latent width, and its two projections
    (h -> latent, latent -> h) run on every token, priced like TP-split linears (the same FLOPs as
    full weights on the sequence-parallel shard of the tokens).
    """
    h = float(model.d_model)
    out_w = float(model.num_heads * model.v_dim)
    gemm = cost.seconds
    attn = gemm(T, h, (model.attn_params / h - out_w) / tp) + gemm(T, out_w / tp, h)
    up = model.mlp_mats - 1.0

    def mlp(tokens: np.ndarray, width: float) -> np.ndarray:
        return gemm(tokens, h, up * width / tp) + gemm(tokens, width / tp, h)

    total = model.attention_layers * attn
    # the recurrent mixers' input projection (Mamba-2: z, x, B, C, dt; Gated DeltaNet: q, k, v, z, beta,
    # decay) and output projection
    for layers, in_width, out_width in model.recurrent_projections:
        total = total + layers * (gemm(T, h, in_width / tp) + gemm(T, out_width / tp, h))
    if model.num_dense_layers:
        total = total + model.num_dense_layers * mlp(T, float(model.ffn_dim))
    if model.num_moe_layers:
        E = float(model.num_experts)
        router = replace(cost, q_el=0.0, q_w=0.0)  # (its GEMM stays unquantised)
        moe = routed_expert_gemm_s(model, T, tp, ep, cost, etp, load) + router.seconds(T, h, E)
        if model.moe_latent_dim:  # latent MoE: down to the experts' width before the dispatch, up after
            lat = float(model.moe_latent_dim)
            moe = moe + gemm(T, h, lat / tp) + gemm(T, lat / tp, h)
        if model.shared_width:
            moe = moe + mlp(T, float(model.shared_width))
        total = total + model.num_moe_layers * moe
    return total / model.num_layers


def routed_expert_gemm_s(model: ModelSpec, T: np.ndarray, tp: np.ndarray, ep: np.ndarray, cost: GemmCost,
                         etp: np.ndarray | None = None, load: np.ndarray | float = 1.0) -> np.ndarray:
    """Forward GEMM seconds of one MoE layer's routed experts on the busiest expert-parallel rank: each
    of its E / ep experts sees T (etp / tp) top_k ep / E tokens on average, ``load`` times that on the
    busiest rank, its width split over the expert-TP ranks (see :func:`layer_gemm_s`); the local
    experts' GEMMs run as one grouped kernel, their tiles sharing the SMs' waves, or, where each is its
    own GEMM, ``cost.expert_streams`` of them at a time (:attr:`Framework.moe_expert_streams`)."""
    E, up, width, h_in = float(model.num_experts), model.mlp_mats - 1.0, float(model.moe_ffn_dim), float(
        model.expert_width)
    e_tp = tp if etp is None else etp
    local = E / ep
    together = np.minimum(local, cost.expert_streams) if cost.expert_streams else local
    per_expert = T * (e_tp / tp) * model.top_k * ep / E * load
    return local * (cost.seconds(per_expert, h_in, up * width / e_tp, together)
                    + cost.seconds(per_expert, width / e_tp, h_in, together))
