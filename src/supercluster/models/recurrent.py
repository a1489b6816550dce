"""The recurrent mixers of a hybrid model (Mamba-2, Gated DeltaNet): their widths, weights,
FLOPs and bytes per token, as :class:`~supercluster.models.spec.ModelSpec` properties."""

from __future__ import annotations

from typing import Any


class RecurrentMixers:
    """Mamba-2 (``ssm_*``) and Gated DeltaNet (``gdn_*``) mixers: read from the fields of
    :class:`~supercluster.models.spec.ModelSpec`, which this class is a base of."""

    __slots__ = ()
    ssm_layers: int
    ssm_heads: int
    ssm_head_dim: int
    ssm_state: int
    ssm_groups: int
    ssm_conv: int
    ssm_chunk: int
    gdn_layers: int
    gdn_k_heads: int
    gdn_v_heads: int
    gdn_k_dim: int
    gdn_v_dim: int
    gdn_conv: int
    gdn_chunk: int
    d_model: int

    @property
    def ssm_inner(self) -> int:
        """A Mamba-2 mixer's inner width (heads x head dim)."""
        return self.ssm_heads * self.ssm_head_dim

    @property
    def ssm_in_proj_width(self) -> int:
        """Outputs of a Mamba-2 mixer's input projection: z and x (inner width each), B and C
        (groups x state each) and one dt per head."""
        return 2 * self.ssm_inner + 2 * self.ssm_groups * self.ssm_state + self.ssm_heads

    @property
    def ssm_matmul_params(self) -> int:
        """A Mamba-2 mixer's matmul weights: its input and output projections."""
        return self.d_model * self.ssm_in_proj_width + self.ssm_inner * self.d_model

    @property
    def ssm_params(self) -> int:
        """One Mamba-2 mixer's weights: projections, the depthwise convolution over x, B and C (with
        bias), A, D and the dt bias per head, and the gated RMSNorm's weight."""
        conv_ch = self.ssm_inner + 2 * self.ssm_groups * self.ssm_state
        return self.ssm_matmul_params + conv_ch * (self.ssm_conv + 1) + 3 * self.ssm_heads + self.ssm_inner

    @property
    def gdn_key_width(self) -> int:
        """A Gated DeltaNet mixer's query (and key) width: key heads x key head dim."""
        return self.gdn_k_heads * self.gdn_k_dim

    @property
    def gdn_value_width(self) -> int:
        """A Gated DeltaNet mixer's value (and output) width: value heads x value head dim."""
        return self.gdn_v_heads * self.gdn_v_dim

    @property
    def gdn_in_proj_width(self) -> int:
        """Outputs of a Gated DeltaNet mixer's input projections: q and k (key width each), v and the
        output gate z (value width each), and per value head the write strength beta and the decay."""
        return 2 * self.gdn_key_width + 2 * self.gdn_value_width + 2 * self.gdn_v_heads

    @property
    def gdn_matmul_params(self) -> int:
        """A Gated DeltaNet mixer's matmul weights: its input and output projections."""
        return self.d_model * self.gdn_in_proj_width + self.gdn_value_width * self.d_model

    @property
    def gdn_params(self) -> int:
        """One Gated DeltaNet mixer's weights: projections, the depthwise convolution over q, k and v
        (no bias), the decay's A and dt bias per value head, and the gated RMSNorm's weight (per head dim)."""
        conv_ch = 2 * self.gdn_key_width + self.gdn_value_width
        return self.gdn_matmul_params + conv_ch * self.gdn_conv + 2 * self.gdn_v_heads + self.gdn_v_dim

    def gdn_flops_per_token(self) -> float:
        """Forward FLOPs per token of the Gated DeltaNet layers' chunked recurrence (beyond its
        projections), over all layers. Per value head, with chunk C and head dims dk, dv, the chunkwise
        form (WY representation): K K^T (2 C dk), the triangular inverse (2 C^2 / 3), W = T K and
        U = T V (2 C dk, 2 C dv), the masked Q K^T and its product with the corrected values
        (2 C dk, 2 C dv), and three dk x dv products with the chunk state: W S, Q S and the update K^T V
        (6 dk dv)."""
        c, dk, dv = float(self.gdn_chunk), float(self.gdn_k_dim), float(self.gdn_v_dim)
        per_head = 6.0 * c * dk + 4.0 * c * dv + 6.0 * dk * dv + 2.0 * c * c / 3.0
        return self.gdn_layers * self.gdn_v_heads * per_head

    def recurrent_flops_per_token(self) -> float:
        """Forward FLOPs per token of all chunked recurrences beyond their projections (Mamba-2's scan
        and Gated DeltaNet's delta rule), over all layers; 0 in a transformer."""
        return self.ssm_scan_flops_per_token() + self.gdn_flops_per_token()

    @property
    def recurrent_projections(self) -> tuple[tuple[int, int, int], ...]:
        """The recurrent mixers' GEMMs, as (layers, input projection's outputs, output projection's
        inputs) per kind: Mamba-2, then Gated DeltaNet (kinds the model lacks left out)."""
        kinds = ((self.ssm_layers, self.ssm_in_proj_width, self.ssm_inner),
                 (self.gdn_layers, self.gdn_in_proj_width, self.gdn_value_width))
        return tuple(k for k in kinds if k[0])

    def recurrent_bytes_per_token(self, el: Any) -> Any:
        """Forward HBM bytes per token of the recurrent mixers' memory-bound work, averaged over the
        layers, before tensor parallelism splits it (``el`` bytes an activation element).

        Mamba-2 (Megatron-Core MambaMixer with mamba_ssm's kernels): the causal conv with SiLU reads and
        writes x, B and C; the chunked scan reads x, B, C and dt and writes y, and its fp32 chunk states
        (heads x head dim x state per chunk) are written, read and written by the state passing, and
        read by the output pass; the gated RMSNorm reads y and z and writes its output. Gated DeltaNet
        (FLA's chunked kernels): the conv with SiLU reads and writes q, k and v; q and k are
        L2-normalised (read, write); the chunk kernels read q, k, v and the gates and write the WY
        factors W and U, the fp32 chunk states (written once, read once) and the output; the gated
        RMSNorm reads the output and z and writes its result."""
        L = self.num_layers
        out = 0.0
        if self.ssm_layers:
            d, gn, heads = float(self.ssm_inner), float(self.ssm_groups * self.ssm_state), float(self.ssm_heads)
            xbc = d + 2.0 * gn
            states = 4.0 * 4.0 * d * self.ssm_state / self.ssm_chunk
            out = out + self.ssm_layers / L * (el * (2.0 * xbc + xbc + heads + d + 3.0 * d) + states)
        if self.gdn_layers:
            kd, vd = float(self.gdn_key_width), float(self.gdn_value_width)
            qkv = 2.0 * kd + vd
            states = 2.0 * 4.0 * vd * self.gdn_k_dim / self.gdn_chunk
            out = out + self.gdn_layers / L * (el * (2.0 * qkv + 2.0 * 2.0 * kd + qkv + kd + vd + vd + 3.0 * vd)
                                               + states)
        return out

    def recurrent_saved_per_token(self, low_el: Any) -> Any:
        """Activation bytes per token the recurrent mixers keep for the backward, averaged over the
        layers, before tensor parallelism splits them: Mamba-2 (mamba_ssm's fused conv + scan saves its
        input projection's output and the scan output y and recomputes the rest) and Gated DeltaNet
        (the projections' outputs, the conv output and the recurrence output, in 16 bits); the output
        projection keeps its input in the GEMM precision (``low_el`` bytes)."""
        L = self.num_layers
        out = 0.0
        if self.ssm_layers:
            out = out + self.ssm_layers / L * (2.0 * (self.ssm_in_proj_width + self.ssm_inner)
                                               + low_el * self.ssm_inner)
        if self.gdn_layers:
            qkv = 2 * self.gdn_key_width + self.gdn_value_width
            out = out + self.gdn_layers / L * (2.0 * (self.gdn_in_proj_width + qkv + self.gdn_value_width)
                                               + low_el * self.gdn_value_width)
        return out

    @property
    def recurrent_matmul_params(self) -> int:
        """All layers' recurrent mixers' matmul weights (Mamba-2 and Gated DeltaNet projections)."""
        return self.ssm_layers * self.ssm_matmul_params + self.gdn_layers * self.gdn_matmul_params


    def ssm_scan_flops_per_token(self) -> float:
        """Forward FLOPs per token of the Mamba layers' chunked scan (SSD, beyond its projections), over
        all layers: within a chunk of Q tokens C B^T (2 Q N per group) and its product with x (2 Q per
        inner channel); the chunk states B^T x and their read-out C h (2 N per inner channel each).
        The count of NVIDIA's Nemotron-H recipe (dgxc-benchmarking nemotron-h/README.md)."""
        q, n = float(self.ssm_chunk), float(self.ssm_state)
        per_layer = 2.0 * q * n * self.ssm_groups + 2.0 * q * self.ssm_inner + 4.0 * n * self.ssm_inner
        return self.ssm_layers * per_layer

