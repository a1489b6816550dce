"""Transformer architectures (``ModelSpec``), the preset catalog, and Hugging Face import.

Letter legend used in formulas: L layers, h width (d_model), F FFN width, a query heads,
k KV heads, d head dim, V vocab, E experts, s sequence, b micro-batch.
A model is a stack of identical attention blocks plus dense or MoE MLPs; its cost is the sum
over layers (``first_dense_layers`` of them are dense, the rest MoE when E > 0: the first ones in
DeepSeek, interleaved in Llama 4 Maverick; only the count enters the cost). A hybrid replaces the
attention of ``ssm_layers`` layers with a Mamba-2 mixer (Nemotron-H, Granite 4.0-H, Bamba) or of
``gdn_layers`` with a Gated DeltaNet mixer (Qwen3-Next, Qwen3.5), and its layers may hold one block
each (an MLP alone, or a mixer alone: Megatron-Core's hybrid pattern); the cost model prices a layer
as the average over the kinds, so again only the counts enter.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ._toml import check_keys, load_package_toml
from .errors import InputError, is_whole, require

GATED = {"swiglu": True, "geglu": True, "gelu": False, "relu2": False, "relu": False}
#: Sanity ceilings on a model's counts, far past any published model (the largest have a few hundred
#: layers, widths of tens of thousands, vocabularies of a few hundred thousand, 256 experts): a
#: value beyond them is a typo or a unit slip, refused rather than priced (or looped over layer by layer)
MAX_LAYERS = 100_000
MAX_WIDTH = 2**24
MAX_SEQ = 2**31


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer. Widths are element counts."""

    key: str
    name: str
    num_layers: int
    d_model: int
    ffn_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    mlp: str = "swiglu"
    tied_embeddings: bool = False
    num_experts: int = 0
    top_k: int = 0
    num_shared_experts: int = 0
    #: the shared experts' total width when it is not ``num_shared_experts`` expert widths (Snowflake
    #: Arctic's residual MLP, d_model wide beside 4,864-wide experts); 0 = num_shared_experts x moe_ffn_dim
    shared_ffn_dim: int = 0
    moe_ffn_dim: int = 0
    #: latent MoE (NVIDIA Nemotron 3 Super / Ultra: config.json ``moe_latent_size``; Megatron-Core
    #: ``--moe-latent-size``): each MoE layer projects its tokens from d_model down to this width before
    #: the dispatch (fc1_latent_proj) and back up after the combine (fc2_latent_proj), so the routed
    #: experts are this wide and the all-to-alls carry it; the router and the shared experts stay on
    #: d_model. 0 = experts on d_model
    moe_latent_dim: int = 0
    first_dense_layers: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    #: local attention on ``window_layers`` of the layers: a sliding window of ``sliding_window`` tokens
    #: (Mistral, Gemma, GPT-OSS), or ``attention_chunk``-token chunks (Llama 4: a query sees the keys
    #: of its own chunk only)
    sliding_window: int = 0
    window_layers: int = 0
    attention_chunk: int = 0
    #: multi-token prediction (DeepSeek-V3, arXiv:2412.19437 sec. 2.2): ``mtp_layers`` sequential
    #: modules after the last layer, each two RMSNorms, a 2h -> h projection, one transformer block
    #: like the model's last and the shared output head with its own loss, on the last pipeline
    #: stage (Megatron-Core ``--mtp-num-layers``; Hugging Face ``num_nextn_predict_layers``)
    mtp_layers: int = 0
    #: Mamba-2 mixers (state-space duality, Dao & Gu 2024, arXiv:2405.21060) in place of attention
    #: on ``ssm_layers`` of the layers: ``ssm_heads`` x ``ssm_head_dim`` = the inner width, B and C in
    #: ``ssm_groups`` groups of ``ssm_state``, a depthwise causal convolution of ``ssm_conv`` taps,
    #: the scan in chunks of ``ssm_chunk`` tokens (Megatron-Core MambaMixer's defaults: 4 and 128)
    ssm_layers: int = 0
    ssm_heads: int = 0
    ssm_head_dim: int = 0
    ssm_state: int = 0
    ssm_groups: int = 0
    ssm_conv: int = 4
    ssm_chunk: int = 128
    #: hybrid stacks whose layers are one block each (Megatron-Core's hybrid pattern, Nemotron-H):
    #: layers that are an MLP alone (``-`` / ``E``) and layers that are a mixer alone (``M`` / ``*``);
    #: a transformer layer (and a Jamba- or Granite-style hybrid's) has a mixer and an MLP
    mlp_only_layers: int = 0
    mixer_only_layers: int = 0
    #: Megatron-Core's hybrid_override_pattern (M Mamba, * attention, - MLP, E MoE), when known
    hybrid_pattern: str = ""
    #: Gated DeltaNet mixers (linear attention with the gated delta rule, Yang, Kautz & Hatamizadeh,
    #: ICLR 2025, arXiv:2412.06464; Qwen3-Next, Qwen3.5) in place of attention on ``gdn_layers`` of the
    #: layers: ``gdn_k_heads`` query / key heads of ``gdn_k_dim``, ``gdn_v_heads`` value heads of
    #: ``gdn_v_dim`` (the keys shared by value heads as GQA shares them), a causal convolution of
    #: ``gdn_conv`` taps over q, k and v, the recurrence in chunks of ``gdn_chunk`` tokens (FLA's 64)
    gdn_layers: int = 0
    gdn_k_heads: int = 0
    gdn_v_heads: int = 0
    gdn_k_dim: int = 0
    gdn_v_dim: int = 0
    gdn_conv: int = 4
    gdn_chunk: int = 64
    #: gated attention (Qwen3-Next, Qwen3.5: ``attn_output_gate``): the query projection also emits a
    #: per-channel sigmoid gate on the attention output, as wide as the query
    attn_output_gate: bool = False
    #: DeepSeek Sparse Attention (DeepSeek-V3.2-Exp technical report, deepseek-ai 2025, sec. 2; GLM-5)
    #: on every attention layer of an MLA model: a lightning indexer of ``index_heads`` heads of
    #: ``index_head_dim`` scores every preceding token, and each query attends to the ``index_topk``
    #: best (MLA in its MQA form: the 512-wide latent and the 64-wide RoPE key shared by all heads);
    #: 0 = dense attention
    index_topk: int = 0
    index_heads: int = 0
    index_head_dim: int = 0
    seq_len: int = 2048
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("num_layers", "d_model", "ffn_dim", "num_heads", "num_kv_heads", "head_dim",
                  "vocab_size", "seq_len"):
            v = getattr(self, f)
            require(isinstance(v, int) and v > 0, f"model.{f}", f"must be a positive integer, got {v!r}")
            cap = {"num_layers": MAX_LAYERS, "seq_len": MAX_SEQ}.get(f, MAX_WIDTH)
            require(v <= cap, f"model.{f}", f"{v} is past any real model (at most {cap:,})")
        for f in ("num_experts", "top_k", "num_shared_experts", "shared_ffn_dim", "moe_ffn_dim", "moe_latent_dim",
                  "first_dense_layers",
                  "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim", "sliding_window",
                  "window_layers", "attention_chunk", "mtp_layers", "ssm_layers", "ssm_heads", "ssm_head_dim",
                  "ssm_state", "ssm_groups", "ssm_conv", "ssm_chunk", "mlp_only_layers", "mixer_only_layers",
                  "gdn_layers", "gdn_k_heads", "gdn_v_heads", "gdn_k_dim", "gdn_v_dim", "gdn_conv", "gdn_chunk",
                  "index_topk", "index_heads", "index_head_dim"):
            v = getattr(self, f)
            require(isinstance(v, int) and v >= 0, f"model.{f}", f"must be an integer >= 0, got {v!r}")
            require(v <= MAX_WIDTH, f"model.{f}", f"{v} is past any real model (at most {MAX_WIDTH:,})")
        if self.hybrid_pattern:
            counts = hybrid_counts(self.hybrid_pattern, "model.hybrid_pattern")
            require(all(getattr(self, k) == v for k, v in counts.items()), "model.hybrid_pattern",
                    f"its layer counts {counts} differ from the model's")
        require(self.mlp in GATED, "model.mlp", f"unknown activation {self.mlp!r}; allowed: {sorted(GATED)}")
        require(self.num_heads % self.num_kv_heads == 0, "model.num_kv_heads",
                f"{self.num_kv_heads} must divide num_heads {self.num_heads}")
        require(self.mlp_only_layers + self.mixer_only_layers <= self.num_layers, "model.mlp_only_layers",
                f"{self.mlp_only_layers} MLP-only + {self.mixer_only_layers} mixer-only layers exceed "
                f"num_layers={self.num_layers}")
        require(self.ssm_layers + self.gdn_layers <= self.num_layers - self.mlp_only_layers, "model.ssm_layers",
                f"{self.ssm_layers} Mamba + {self.gdn_layers} Gated DeltaNet layers exceed the "
                f"{self.num_layers - self.mlp_only_layers} layers with a mixer")
        # a recurrent mixer's widths, and the heads one of them groups (Mamba's B / C groups, GDN's key heads)
        for layers, what, prefix, (part, whole) in (
                (self.ssm_layers, "Mamba", "ssm", ("ssm_groups", "ssm_heads")),
                (self.gdn_layers, "Gated DeltaNet", "gdn", ("gdn_k_heads", "gdn_v_heads"))):
            if layers:
                for f in (fld.name for fld in dataclasses.fields(self) if fld.name.startswith(prefix + "_")
                          and fld.name != prefix + "_layers"):
                    require(getattr(self, f) > 0, f"model.{f}",
                            f"must be > 0 for a model with {what} layers, got {getattr(self, f)}")
                require(getattr(self, whole) % getattr(self, part) == 0, f"model.{part}",
                        f"{getattr(self, part)} must divide {whole} {getattr(self, whole)}")
        if self.num_experts:
            require(0 < self.top_k <= self.num_experts, "model.top_k",
                    f"must be in 1..num_experts={self.num_experts}, got {self.top_k}")
            require(self.moe_ffn_dim > 0, "model.moe_ffn_dim", "must be > 0 for an MoE model")
            require(self.first_dense_layers < self.mlp_layers, "model.first_dense_layers",
                    f"must be < the {self.mlp_layers} layers with an MLP")
        require(not self.moe_latent_dim or self.num_experts, "model.moe_latent_dim",
                "a latent width goes with routed experts (num_experts > 0)")
        require(self.window_layers <= self.attention_layers, "model.window_layers",
                f"must be <= the {self.attention_layers} attention layers, got {self.window_layers}")
        require(not (self.sliding_window and self.attention_chunk), "model.attention_chunk",
                "local attention is a sliding window or chunks, not both")
        require((self.sliding_window + self.attention_chunk > 0) == (self.window_layers > 0), "model.window_layers",
                "window_layers goes with sliding_window or attention_chunk (all 0, or both > 0)")
        if self.index_topk or self.index_heads or self.index_head_dim:
            for f in ("index_topk", "index_heads", "index_head_dim"):
                require(getattr(self, f) > 0, f"model.{f}",
                        f"must be > 0 for sparse attention (index_topk, index_heads, index_head_dim go together), "
                        f"got {getattr(self, f)}")
            require(self.kv_lora_rank > 0, "model.index_topk",
                    "DeepSeek Sparse Attention is priced on MLA (kv_lora_rank > 0) only")
            require(not self.window_layers and not self.recurrent_layers, "model.index_topk",
                    "sparse attention with sliding-window, chunked or recurrent layers is not modelled")

    # ---- shape helpers -------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def kind(self) -> str:
        """mamba-hybrid (with Mamba-2 layers), gdn-hybrid (with Gated DeltaNet layers), moe or dense: how
        validation and the evidence line group models."""
        if self.ssm_layers:
            return "mamba-hybrid"
        if self.gdn_layers:
            return "gdn-hybrid"
        return "moe" if self.is_moe else "dense"

    @property
    def mlp_mats(self) -> int:
        """Weight matrices per MLP: 3 for gated (SwiGLU/GeGLU), 2 otherwise."""
        return 3 if GATED[self.mlp] else 2

    def splits_over_tp(self, tp: int) -> bool:
        """Whether tensor parallelism ``tp`` divides the model's heads (attention: the query heads and the
        KV heads, as Megatron-Core's TransformerConfig requires of its query groups and torchtitan's
        column-parallel K/V projections need; Mamba: its heads and groups). :meth:`Layout.check_model`
        says why not."""
        ok = self.num_heads % tp == 0 and self.num_kv_heads % tp == 0
        ok = ok and (not self.ssm_layers or (self.ssm_heads % tp == 0 and self.ssm_groups % tp == 0))
        return ok and (not self.gdn_layers or (self.gdn_k_heads % tp == 0 and self.gdn_v_heads % tp == 0))

    @property
    def context_parallel_ok(self) -> bool:
        """Context parallelism is priced for dense attention only (not for Mamba or Gated DeltaNet layers,
        nor for sparse attention, whose indexer and top-k selection span the whole sequence)."""
        return self.recurrent_layers == 0 and not self.index_topk

    @property
    def sparse_score_dims(self) -> tuple[int, int]:
        """Per-head widths sparse MLA multiplies, in its MQA form (DeepSeek-V3.2-Exp report sec. 2): the
        latent plus the RoPE key as query-key, the latent as the value (dense attention: qk_dim, v_dim)."""
        if self.index_topk:
            return self.kv_lora_rank + self.qk_rope_head_dim, self.kv_lora_rank
        return self.qk_dim, self.v_dim

    def sparse_active(self, seq_len: Any) -> Any:
        """Where sparse attention runs: sequences longer than index_topk (a shorter one attends to every
        preceding key, so the indexer and the top-k selection are skipped, as MaxText's DeepSeek-V3.2
        does, and dense MLA runs in its MHA form)."""
        return np.asarray(seq_len, dtype=float) > self.index_topk if self.index_topk else \
            np.zeros_like(np.asarray(seq_len, dtype=float), dtype=bool)

    def _full_layer_width_keys(self, seq_len: Any, causal: bool) -> Any:
        """(query-key + value width) x keys per query of one full attention layer (or an MTP block):
        sparse past the top-k, at its MQA widths and top-k keys; dense below it."""
        s = np.asarray(seq_len, dtype=float)
        dense = (self.qk_dim + self.v_dim) * (s / 2.0 if causal else s)
        if not self.index_topk:
            return dense
        return np.where(self.sparse_active(s), sum(self.sparse_score_dims) * self.sparse_keys(s, causal), dense)

    def attention_width_keys(self, seq_len: Any, causal: bool) -> Any:
        """Per layer on average: (query-key + value width) x keys per query, what attention's FLOPs per
        head and token are twice of (a sparse-attention model has no local layers: all full ones)."""
        if self.index_topk:
            return self._full_layer_width_keys(seq_len, causal) * self.attention_layers / self.num_layers
        return (self.qk_dim + self.v_dim) * self.mean_keys(seq_len, causal)

    @property
    def indexer_params(self) -> int:
        """One layer's lightning-indexer weights: its query projection (from the compressed query, as
        DeepSeek-V3.2 computes it), one shared key head with its LayerNorm, and the per-head weights."""
        if not self.index_topk:
            return 0
        hi, di, h = self.index_heads, self.index_head_dim, self.d_model
        return (self.q_lora_rank or h) * hi * di + h * di + 2 * di + h * hi

    def sparse_keys(self, seq_len: Any, causal: bool) -> Any:
        """Keys a sparse-attention query attends to: min(i, k) for the i-th token, as a sliding window
        of k keys sees (:func:`window_keys`)."""
        return window_keys(seq_len, float(self.index_topk), causal)

    def indexer_flops_per_token(self, seq_len: Any, causal: bool) -> tuple[Any, Any]:
        """Forward and backward FLOPs per token, all layers, of the lightning indexer's scores: forward,
        every head's dot product with every preceding key (2 H_I d_I per pair, the ReLU and head
        weighting aside); backward, its KL-loss gradient through the selected top-k keys only
        (DeepSeek-V3.2-Exp report sec. 2.1, sparse training stage: q and k gradients, 4 H_I d_I per pair)."""
        if not self.index_topk:
            return 0.0, 0.0
        s = np.asarray(seq_len, dtype=float)
        pair = 2.0 * self.index_heads * self.index_head_dim * self.sparse_active(s)
        layers = self.attention_layers + self.mtp_layers
        return layers * pair * (s / 2.0 if causal else s), layers * 2.0 * pair * self.sparse_keys(s, causal)

    @property
    def recurrent_layers(self) -> int:
        """Layers whose mixer is a recurrence run in chunks (Mamba-2, Gated DeltaNet) instead of attention."""
        return self.ssm_layers + self.gdn_layers

    @property
    def attention_layers(self) -> int:
        """Layers whose mixer is softmax attention (all of a transformer's)."""
        return self.num_layers - self.recurrent_layers - self.mlp_only_layers

    @property
    def mlp_layers(self) -> int:
        """Layers with an MLP (dense or MoE; all of a transformer's)."""
        return self.num_layers - self.mixer_only_layers

    @property
    def num_moe_layers(self) -> int:
        return self.mlp_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        """Layers with a dense MLP."""
        return self.mlp_layers - self.num_moe_layers

    @property
    def sublayers(self) -> int:
        """Mixer and MLP blocks over all layers, each with its own norm and residual add (2 L in a
        transformer)."""
        return 2 * self.num_layers - self.mlp_only_layers - self.mixer_only_layers

    @property
    def layer_shares(self) -> tuple[float, float]:
        """Per layer on average: the share of layers with attention, and the blocks (mixer, MLP) each
        holds: (1, 2) for a transformer."""
        L = self.num_layers
        return self.attention_layers / L, self.sublayers / L

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

    @property
    def mixer_params(self) -> int:
        """All layers' mixer weights (attention, Mamba and Gated DeltaNet)."""
        return (self.attention_layers * self.attn_params + self.ssm_layers * self.ssm_params
                + self.gdn_layers * self.gdn_params)

    def ssm_scan_flops_per_token(self) -> float:
        """Forward FLOPs per token of the Mamba layers' chunked scan (SSD, beyond its projections), over
        all layers: within a chunk of Q tokens C B^T (2 Q N per group) and its product with x (2 Q per
        inner channel); the chunk states B^T x and their read-out C h (2 N per inner channel each).
        The count of NVIDIA's Nemotron-H recipe (dgxc-benchmarking nemotron-h/README.md)."""
        q, n = float(self.ssm_chunk), float(self.ssm_state)
        per_layer = 2.0 * q * n * self.ssm_groups + 2.0 * q * self.ssm_inner + 4.0 * n * self.ssm_inner
        return self.ssm_layers * per_layer

    @property
    def qk_dim(self) -> int:
        """Per-head query/key width (MLA: nope + rope part)."""
        return self.head_dim

    @property
    def v_dim(self) -> int:
        return self.v_head_dim or self.head_dim

    # ---- parameters ----------------------------------------------------------------------
    @property
    def attn_params(self) -> int:
        """Attention weights of one layer (Q, K, V, O projections; MLA low-rank factors)."""
        h, a, k, d, dv = self.d_model, self.num_heads, self.num_kv_heads, self.qk_dim, self.v_dim
        if self.kv_lora_rank:
            nope = d - self.qk_rope_head_dim
            q = h * self.q_lora_rank + self.q_lora_rank * a * d if self.q_lora_rank else h * a * d
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * a * (nope + dv)
            return q + kv + a * dv * h + self.indexer_params
        # (gated attention: the query projection also emits the output gate, a query's width)
        return h * a * d * (2 if self.attn_output_gate else 1) + 2 * h * k * d + a * dv * h

    @property
    def dense_mlp_params(self) -> int:
        return self.mlp_mats * self.d_model * self.ffn_dim

    @property
    def expert_width(self) -> int:
        """The width the routed experts read and write (and the all-to-alls carry): the latent width of
        a latent MoE, else d_model."""
        return self.moe_latent_dim or self.d_model

    @property
    def expert_params(self) -> int:
        """One routed expert's weights."""
        return self.mlp_mats * self.expert_width * self.moe_ffn_dim

    @property
    def latent_proj_params(self) -> int:
        """A latent MoE layer's projections down to the experts' width and back (0 without)."""
        return 2 * self.d_model * self.moe_latent_dim

    @property
    def shared_width(self) -> int:
        """Total width of an MoE layer's shared expert(s), which every token passes through."""
        return self.shared_ffn_dim or self.num_shared_experts * self.moe_ffn_dim

    @property
    def shared_expert_params(self) -> int:
        """Weights of an MoE layer's shared expert(s) (on d_model, latent MoE too)."""
        return self.mlp_mats * self.d_model * self.shared_width

    @property
    def moe_mlp_params(self) -> int:
        """All weights of one MoE MLP: routed + shared experts + router (+ latent projections)."""
        return (self.num_experts * self.expert_params + self.shared_expert_params + self.d_model * self.num_experts
                + self.latent_proj_params)

    @property
    def moe_active_mlp_params(self) -> int:
        """Weights one token touches in an MoE MLP."""
        return (self.top_k * self.expert_params + self.shared_expert_params + self.d_model * self.num_experts
                + self.latent_proj_params)

    def _mtp_module_params(self, mlp: int) -> int:
        """One MTP module with an MLP of ``mlp`` weights: its block's attention, its 2h -> h projection
        and two norms (the embedding and the output head are the model's, shared)."""
        h = self.d_model
        return self.attn_params + 4 * h + mlp + 2 * h * h

    @property
    def mtp_block_params(self) -> int:
        """One MTP module's own weights: a block like the last layer (all its experts)."""
        return self._mtp_module_params(self.moe_mlp_params if self.is_moe else self.dense_mlp_params)

    @property
    def mtp_active_params(self) -> int:
        """One MTP module's weights a token touches (MoE: top-k plus shared experts)."""
        return self._mtp_module_params(self.moe_active_mlp_params if self.is_moe else self.dense_mlp_params)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.d_model * (1 if self.tied_embeddings else 2)

    @property
    def num_params(self) -> int:
        """All parameters (norm weights included, biases ignored)."""
        mlp = self.num_dense_layers * self.dense_mlp_params + self.num_moe_layers * self.moe_mlp_params
        return (self.mixer_params + self.sublayers * self.d_model + mlp + self.embedding_params + self.d_model
                + self.mtp_layers * self.mtp_block_params)

    @property
    def num_active_params(self) -> int:
        """Parameters used per token (MoE: top-k plus shared experts; MTP modules included)."""
        mlp = self.num_dense_layers * self.dense_mlp_params + self.num_moe_layers * self.moe_active_mlp_params
        return (self.mixer_params + self.sublayers * self.d_model + mlp + self.embedding_params + self.d_model
                + self.mtp_layers * self.mtp_active_params)

    # ---- FLOPs ---------------------------------------------------------------------------
    def matmul_params_per_token(self) -> int:
        """Weights in matmuls per token: all layers' active weights plus the logit layer; each MTP
        module adds its block, its projection and the shared logit layer once more."""
        mlp = self.num_dense_layers * self.dense_mlp_params + self.num_moe_layers * self.moe_active_mlp_params
        h = self.d_model
        mtp = self.mtp_layers * (self.mtp_active_params - 4 * h + self.vocab_size * h)
        return self.attention_layers * self.attn_params + self.recurrent_matmul_params + mlp + self.vocab_size * h + mtp

    def mean_keys(self, seq_len: Any, causal: bool) -> Any:
        """Keys a query attends to, averaged over tokens and layers (numpy arrays welcome).

        Full layers: s / 2 causal (s in the PaLM / Megatron non-causal convention). Sliding-window
        layers of window w: min(i, w) keys for the i-th token, on average w - w^2 / (2 s) for
        s >= w (s / 2 below), or w non-causal. Chunked layers of chunk c: the keys of the query's own
        chunk up to it, (n c^2 / 2 + r^2 / 2) / s for s = n c + r (its whole chunk non-causal).
        """
        s = np.asarray(seq_len, dtype=float)
        full = s / 2.0 if causal else s
        if not self.window_layers:
            # (a hybrid's Mamba and MLP-only layers attend to no keys)
            return full if self.attention_layers == self.num_layers else full * self.attention_layers / self.num_layers
        if self.attention_chunk:
            c = float(self.attention_chunk)
            n, r = np.floor(s / c), np.mod(s, c)
            local = (n * c * c + r * r) / s * (0.5 if causal else 1.0)
        else:
            local = window_keys(s, float(self.sliding_window), causal)
        return ((self.attention_layers - self.window_layers) * full + self.window_layers * local) / self.num_layers

    def attention_flops_per_token(self, seq_len: Any, causal: bool) -> Any:
        """Forward QK^T and A.V FLOPs per token over all layers (PaLM: 2 x 2 x L x a x d x s); an
        MTP block attends over the whole sequence."""
        # (an MTP block attends as a full layer of the model does)
        return 2.0 * self.num_heads * (self.num_layers * self.attention_width_keys(seq_len, causal)
                                       + self.mtp_layers * self._full_layer_width_keys(seq_len, causal))

    def model_flops_per_token(self, seq_len: int | float, causal: bool = False) -> float:
        """Training (fwd + bwd = 3 x fwd) model FLOPs per token, no recompute.

        ``causal=False`` is the PaLM / Megatron / NeMo convention (full s^2 attention):
        6 N_matmul + 12 L a d s for d = qk = v head dim.
        """
        idx_f, idx_b = self.indexer_flops_per_token(seq_len, causal)
        return 3.0 * (2.0 * self.matmul_params_per_token() + self.attention_flops_per_token(seq_len, causal)
                      + self.recurrent_flops_per_token()) + idx_f + idx_b


def window_keys(seq_len: Any, w: float, causal: bool) -> Any:
    """Keys a query sees in a window of the w latest (a sliding window, or a top-k selection): min(i, w)
    for the i-th token, on average w - w^2 / (2 s) for s >= w (s / 2 below), or min(s, w) non-causal."""
    s = np.asarray(seq_len, dtype=float)
    return np.where(s >= w, w - w * w / (2.0 * s), s / 2.0) if causal else np.minimum(s, w)


_REQUIRED = {"name", "d_model", "ffn_dim", "num_heads", "num_kv_heads", "head_dim", "vocab_size", "source"}
_OPTIONAL = {"num_layers", "mlp", "tied_embeddings", "num_experts", "top_k", "num_shared_experts", "shared_ffn_dim",
             "moe_ffn_dim", "moe_latent_dim", "first_dense_layers", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
             "v_head_dim", "seq_len", "sliding_window", "window_layers", "attention_chunk", "mtp_layers", "ssm_heads",
             "ssm_head_dim", "ssm_state", "ssm_groups", "ssm_conv", "ssm_chunk", "hybrid_pattern", "index_topk",
             "index_heads", "index_head_dim", "gdn_layers", "gdn_k_heads", "gdn_v_heads", "gdn_k_dim", "gdn_v_dim",
             "gdn_conv", "attn_output_gate"}

#: Megatron-Core's hybrid layer symbols (megatron/core/ssm/mamba_hybrid_layer_allocation.py)
HYBRID_SYMBOLS = {"M": "Mamba", "*": "attention", "-": "MLP", "E": "MoE"}


def hybrid_counts(pattern: str, field: str = "hybrid_pattern") -> dict[str, int]:
    """The layer counts of a Megatron-Core hybrid pattern such as ``M-M*-``: every symbol is one
    layer holding one block (M a Mamba mixer, * attention, - a dense MLP, E an MoE MLP)."""
    require(isinstance(pattern, str) and len(pattern) > 0, field, f"must be a non-empty string, got {pattern!r}")
    bad = sorted(set(pattern) - set(HYBRID_SYMBOLS))
    require(not bad, field, f"unknown layer symbols {bad}; allowed: "
                            + ", ".join(f"{k} ({v})" for k, v in HYBRID_SYMBOLS.items()))
    n = {c: pattern.count(c) for c in HYBRID_SYMBOLS}
    require(n["M"] + n["*"] > 0, field, "has no mixer (M or *)")
    return dict(num_layers=len(pattern), ssm_layers=n["M"], mixer_only_layers=n["M"] + n["*"],
                mlp_only_layers=n["-"] + n["E"], first_dense_layers=n["-"] if n["E"] else 0)


@cache
def model_catalog() -> dict[str, ModelSpec]:
    """All preset models by key (a hybrid preset gives its pattern, which sets its layer counts)."""
    out = {}
    for key, t in load_package_toml("models.toml").items():
        check_keys(f"model {key}", t, _REQUIRED, _OPTIONAL)
        counts = hybrid_counts(t["hybrid_pattern"], f"model {key}.hybrid_pattern") if "hybrid_pattern" in t else {}
        require("num_layers" in t or counts, f"model {key}.num_layers", "missing (or give a hybrid_pattern)")
        out[key] = ModelSpec(key=key, **{**t, **counts})
    return out


def from_hf_config(cfg: dict[str, Any], key: str = "hf-config") -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json`` dict (see :func:`_from_hf_config`);
    a field of the wrong type or value is an :class:`InputError` naming config.json."""
    try:
        return _from_hf_config(cfg, key)
    except InputError:
        raise
    except (TypeError, ValueError, ZeroDivisionError, AttributeError) as exc:
        raise InputError("config.json", f"malformed field: {exc}") from exc


def _from_hf_config(cfg: dict[str, Any], key: str) -> ModelSpec:
    """A :class:`ModelSpec` from a Hugging Face ``config.json`` dict.

    Handles Llama/Mistral/Qwen-style dense and GQA models, explicit ``head_dim``, Mixtral
    (``num_local_experts``), DeepSeek-V2/V3 (MLA, routed + shared experts, dense first layers),
    Qwen-MoE (shared expert width, sparse step), GPT-OSS, Llama 4 (the language model's fields in
    ``text_config``, MoE every ``interleave_moe_layer_step``-th layer with one shared expert, dense
    layers ``intermediate_size_mlp`` wide, chunked attention on the RoPE layers), GPT-2/NeoX names, and
    MPT / DBRX (``n_layers``, ``n_heads``, ``expansion_ratio``, nested ``attn_config`` / ``ffn_config``
    with DBRX's experts).
    """
    text = cfg.get("text_config")
    if isinstance(text, dict) and not any(k in cfg for k in ("hidden_size", "n_embd", "d_model")):
        # multimodal wrappers (Llama 4, Gemma 3, LLaVA): the language model's fields are in text_config
        cfg = {**{k: v for k, v in cfg.items() if k != "text_config"}, **text}

    for nested in ("attn_config", "ffn_config"):  # MPT and DBRX keep these fields one level down
        if isinstance(sub := cfg.get(nested), dict):
            cfg = {**sub, **{k: v for k, v in cfg.items() if k != nested}}

    def get(*names: str, default: Any = None) -> Any:
        for n in names:
            if n in cfg and cfg[n] is not None:
                return cfg[n]
        return default

    # hybrid fields (Mamba-2: Nemotron-H, Granite 4.0-H, Bamba; Gated DeltaNet: Qwen3-Next, Qwen3.5);
    # other non-attention layers are refused below
    hybrid = _hf_mamba2_hybrid(cfg) or _hf_gdn_hybrid(cfg)
    _refuse_unmodelled_layers(cfg, hybrid=bool(hybrid))
    for field in _HF_INT_FIELDS:
        v = cfg.get(field)
        require(v is None or is_whole(v), f"config.json {field}", f"must be a whole number, got {v!r}")
    cfg = {k: int(v) if k in _HF_INT_FIELDS and isinstance(v, float) else v for k, v in cfg.items()}
    h = get("hidden_size", "n_embd", "d_model")
    layers = get("num_hidden_layers", "n_layer", "num_layers", "n_layers")
    heads = get("num_attention_heads", "n_head", "n_heads")
    vocab = get("vocab_size", "padded_vocab_size")  # ChatGLM: padded_vocab_size
    for field, val in (("hidden_size", h), ("num_hidden_layers", layers), ("num_attention_heads", heads),
                       ("vocab_size", vocab)):
        require(isinstance(val, int) and val > 0, f"config.json {field}", f"must be a positive integer, got {val!r}")
        cap = MAX_LAYERS if field == "num_hidden_layers" else MAX_WIDTH
        require(val <= cap, f"config.json {field}", f"{val} is past any real model (at most {cap:,})")
    ffn = get("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size",
              default=int(get("expansion_ratio", default=4) * h))  # MPT: expansion_ratio x d_model
    if hybrid.get("ffn") is not None:  # a dense Granite 4.0-H: its MLP is the shared one
        ffn = hybrid["ffn"]
    # (Falcon-7B, StarCoder: multi_query = one K/V head shared by all query heads)
    # (ChatGLM: multi_query_attention with multi_query_group_num K/V heads)
    kv = get("num_key_value_heads", "num_kv_heads", "kv_n_heads", "n_head_kv",
             default=1 if get("multi_query", default=False) is True else
             get("multi_query_group_num") if get("multi_query_attention", default=False) is True else heads)
    act = str(get("mlp_hidden_act", "hidden_act", "activation_function", default="silu")).lower()
    archs = get("architectures", default=[])
    arch = (" ".join(map(str, archs)) if isinstance(archs, list) else str(archs)).lower() + " " + str(
        get("model_type", default="")).lower()
    gated = _hf_family(cfg) not in _UNGATED_FAMILIES
    if "relu2" in act or "squared" in act:
        mlp = "relu2"
    elif gated:
        mlp = "geglu" if "gelu" in act else "swiglu"
    else:
        mlp = "gelu"
    head_dim = get("head_dim", "kv_channels", default=None)  # ChatGLM: kv_channels
    kv_lora = int(get("kv_lora_rank", default=0) or 0)
    fields: dict[str, Any] = {}
    if kv_lora:
        nope, rope = int(get("qk_nope_head_dim", default=128)), int(get("qk_rope_head_dim", default=64))
        head_dim = nope + rope
        fields.update(kv_lora_rank=kv_lora, q_lora_rank=int(get("q_lora_rank", default=0) or 0),
                      qk_rope_head_dim=rope, v_head_dim=int(get("v_head_dim", default=nope)))
    if get("index_topk") is not None:
        fields.update(_hf_sparse_attention(cfg, kv_lora))
    if head_dim is None:
        require(h % heads == 0, "config.json hidden_size", f"{h} is not divisible by num_attention_heads {heads}")
        head_dim = h // heads
    window = int(get("sliding_window", default=0) or 0)
    if window:
        # which layers are local: an explicit layer_types list (GPT-OSS, Gemma 3), Qwen2-style
        # use_sliding_window from max_window_layers on, Gemma's pattern, else every layer (Mistral)
        types = get("layer_types", default=None)
        if isinstance(types, list) and types:
            n_local = sum(1 for t in types if "sliding" in str(t))
            if len(types) < int(layers):  # a repeating pattern
                n_local = n_local * int(layers) // len(types)
        elif get("use_sliding_window", default=None) is False:
            n_local = 0
        elif get("use_sliding_window", default=None) is True:
            n_local = max(0, int(layers) - int(get("max_window_layers", default=0) or 0))
        elif get("sliding_window_pattern", default=None):
            pat = int(get("sliding_window_pattern"))
            n_local = int(layers) - int(layers) // pat  # one global layer in every `pat`
        elif "gemma2" in arch:
            n_local = int(layers) // 2
        else:
            n_local = int(layers)
        if n_local:
            fields.update(sliding_window=window, window_layers=min(n_local, int(layers)))
    chunk = int(get("attention_chunk_size", default=0) or 0)
    if chunk and not window:
        # Llama 4: the RoPE layers (no_rope_layers[i] = 1) attend within chunks, every
        # no_rope_layer_interval-th layer (NoPE) globally
        nope = get("no_rope_layers", default=None)
        if isinstance(nope, list) and len(nope) == int(layers):
            n_chunked = sum(1 for x in nope if x)
        else:
            n_chunked = int(layers) - int(layers) // int(get("no_rope_layer_interval", default=4) or 4)
        if n_chunked:
            fields.update(attention_chunk=chunk, window_layers=n_chunked)
    experts = int(get("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts", default=0) or 0)
    n_moe = hybrid["moe_layers"] if "moe_layers" in hybrid else _hf_moe_layers(get, int(layers))
    mlp_layers = int(layers) - hybrid.get("mixer_only_layers", 0)
    if experts and n_moe > 0:
        moe_ffn = int(get("moe_intermediate_size", default=ffn))
        top_k = get("num_experts_per_tok", "experts_per_token", "moe_topk", "moe_top_k", "moe_k")
        require(top_k is not None, "config.json num_experts_per_tok",
                f"missing for an MoE config ({experts} experts): the routed experts per token are needed "
                "(also read as experts_per_token, moe_topk, moe_top_k, moe_k)")
        shared = int(get("n_shared_experts", "moe_num_shared_experts", default=0) or 0)
        shared_width = int(get("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size",
                               "shared_intermediate_size", default=0) or 0)
        if get("parallel_attn_mlp_res", default=False) is True:
            # Snowflake Arctic: each MoE layer also runs a d_model-wide SwiGLU "residual MLP" on every token
            # (modeling_arctic.py ArcticMLP(is_residual_mlp=True): ffn_dim = hidden_size), priced as a shared expert
            shared_width = int(h)
        if shared_width:  # Qwen-MoE: one shared expert this wide (a whole number of expert widths there)
            shared = max(1, round(shared_width / moe_ffn))
            fields["shared_ffn_dim"] = shared_width
        if "llama4" in arch:  # Llama4TextMoe always adds one shared expert of the expert width
            shared = max(shared, 1)
        fields.update(
            num_experts=experts,
            top_k=int(top_k),
            num_shared_experts=shared, moe_ffn_dim=moe_ffn, first_dense_layers=mlp_layers - n_moe,
        )
        # Llama 4's dense layers are intermediate_size_mlp wide (intermediate_size is the experts')
        ffn = get("intermediate_size_mlp", default=ffn)
    fields["mtp_layers"] = int(get("num_nextn_predict_layers", "mtp_num_layers", default=0) or 0)
    mtp_pattern = get("mtp_hybrid_override_pattern")  # Nemotron 3: the MTP block's layers ("*E")
    require(mtp_pattern is None or not fields["mtp_layers"] or mtp_pattern == ("*E" if "num_experts" in fields
                                                                                  else "*-"),
            "config.json mtp_hybrid_override_pattern",
            f"{mtp_pattern!r}: an MTP block other than attention and the model's MLP is not modelled")
    fields.update({k: v for k, v in hybrid.items()
                   if k not in ("moe_layers", "first_dense_layers", "num_layers", "ffn")})
    tied = bool(get("tie_word_embeddings", default=_hf_family(cfg) in _TIED_FAMILIES))
    try:
        return ModelSpec(
            key=key, name=str(get("_name_or_path", default=key)), num_layers=int(layers), d_model=int(h),
            ffn_dim=int(ffn), num_heads=int(heads), num_kv_heads=int(kv), head_dim=int(head_dim),
            vocab_size=int(vocab), mlp=mlp, tied_embeddings=tied,
            seq_len=int(get("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", default=4096)),
            source="config.json", **fields,
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError("config.json", f"malformed field: {exc}") from exc


#: config.json fields read as counts: a fraction, a boolean or a string there is a malformed config
_HF_INT_FIELDS = (
    "hidden_size", "n_embd", "d_model", "num_hidden_layers", "n_layer", "num_layers", "n_layers",
    "num_attention_heads", "n_head", "n_heads", "vocab_size", "intermediate_size", "n_inner", "ffn_dim",
    "ffn_hidden_size", "num_key_value_heads", "num_kv_heads", "kv_n_heads", "n_head_kv", "head_dim",
    "padded_vocab_size", "multi_query_group_num", "kv_channels", "seq_length",
    "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "sliding_window",
    "max_window_layers", "sliding_window_pattern", "attention_chunk_size", "no_rope_layer_interval",
    "num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts", "moe_intermediate_size",
    "num_experts_per_tok", "experts_per_token", "moe_topk", "moe_top_k", "moe_k", "n_shared_experts",
    "moe_num_shared_experts", "shared_expert_intermediate_size", "intermediate_size_mlp", "moe_latent_size",
    "num_nextn_predict_layers", "mtp_num_layers", "max_position_embeddings", "n_positions", "max_seq_len",
    "interleave_moe_layer_step", "decoder_sparse_step", "first_k_dense_replace", "moe_layer_start_index",
    "moe_layer_frequency", "moe_layer_freq", "moe_shared_expert_intermediate_size", "shared_intermediate_size",
)

#: Hugging Face model families whose MLP is one up-projection and one down-projection (GELU, not gated),
#: as ``model_type`` or architecture class without its head suffix, underscores dropped. Phi-1/1.5/2
#: ("phi") are; Phi-3, Phi-4 ("phi3") and Phi-3.5-MoE ("phimoe") use a gated (SwiGLU) MLP.
_UNGATED_FAMILIES = {"gpt2", "gptneox", "gptj", "gptneo", "bloom", "opt", "falcon", "refinedweb", "refinedwebmodel",
                     "phi", "mpt", "gptbigcode", "starcoder2", "codegen"}
#: families whose output layer shares the input embedding when config.json does not say
#: (``tie_word_embeddings`` absent): their model code or config class ties them (GPT-2, OPT, BLOOM,
#: Falcon, StarCoder, Gemma; MPT always ties and has no such field)
_TIED_FAMILIES = {"gpt2", "opt", "bloom", "falcon", "refinedweb", "refinedwebmodel", "mpt", "gptbigcode", "gemma",
                  "gemma2", "gemma3", "gemma3text"}
_HEAD_SUFFIXES = ("forcausallm", "lmheadmodel", "forconditionalgeneration", "model")


def _hf_family(cfg: dict[str, Any]) -> str:
    """A config's model family: its ``model_type``, else its first architecture class without the
    head suffix (``GPTNeoXForCausalLM`` -> ``gptneox``), lower case, underscores dropped."""
    kind = str(cfg.get("model_type") or "").lower().replace("_", "")
    if kind:
        return kind
    archs = cfg.get("architectures") or []
    name = str(archs[0]).lower() if isinstance(archs, list) and archs else ""
    for suffix in _HEAD_SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


#: config.json fields that announce layers the cost model does not price: state-space (Mamba) and
#: linear-attention layers (Gated DeltaNet, lightning attention) do O(1) work per token in the sequence
#: length where softmax attention does O(s), and DeepSeek-V4's compressed attention and
#: hyper-connections are other layers again; counting any of them as softmax attention would print a
#: wrong number without saying so (DeepSeek Sparse Attention, index_topk, is priced: _hf_sparse_attention)
_UNMODELLED_FIELDS = {
    "hybrid_override_pattern": "Mamba / hybrid layers outside a Nemotron-H config (model_type nemotron_h)",
    "mamba_d_state": "Mamba layers other than Nemotron-H's, Granite 4.0-H's and Bamba's Mamba-2 (Jamba's Mamba-1, "
                     "Falcon-H1's attention and Mamba side by side)",
    "attn_layer_period": "Mamba layers between attention layers (Jamba)",
    "ssm_cfg": "state-space (Mamba) layers",
    "linear_num_key_heads": "Gated DeltaNet layers outside a Qwen3-Next or Qwen3.5 config (model_type qwen3_next, "
                            "qwen3_5...)",
    "full_attention_interval": "linear-attention layers outside a Qwen3-Next or Qwen3.5 config (model_type "
                               "qwen3_next, qwen3_5...)",
    "linear_attn_config": "linear-attention layers (Kimi Linear)",
    "attn_type_list": "lightning (linear) attention layers (MiniMax)",
    "compress_ratios": "compressed and sparse attention layers (DeepSeek-V4)",
    "compress_rates": "compressed and sparse attention layers (DeepSeek-V4-style)",
    "hc_mult": "hyper-connections (several residual streams, DeepSeek-V4)",
    "o_lora_rank": "low-rank grouped output projections (DeepSeek-V4)",
}


def _hf_sparse_attention(cfg: dict[str, Any], kv_lora: int) -> dict[str, int]:
    """DeepSeek Sparse Attention's fields (DeepSeek-V3.2 ``deepseek_v32``, GLM-5 ``glm_moe_dsa``): the
    indexer's heads and head width and the top-k, on every layer of an MLA model."""
    require(kv_lora > 0, "config.json index_topk",
            "sparse attention is priced on MLA models (with kv_lora_rank) only")
    out = {}
    for field, key in (("index_topk", "index_topk"), ("index_n_heads", "index_heads"),
                       ("index_head_dim", "index_head_dim")):
        v = cfg.get(field)
        require(is_whole(v) and 0 < v <= MAX_WIDTH, f"config.json {field}",
                f"must be a whole number in 1..{MAX_WIDTH:,} for sparse attention, got {v!r}")
        out[key] = int(v)
    freq, pattern = cfg.get("index_topk_freq", 1), cfg.get("index_topk_pattern", "")
    require(freq in (1, None) and not pattern, "config.json index_topk_freq",
            f"sparse attention on only some layers (index_topk_freq={freq!r}, index_topk_pattern={pattern!r}) "
            "is not modelled; supported: every layer (freq 1, no pattern)")
    return out
def _hf_layer_count(cfg: dict[str, Any]) -> int:
    """A hybrid config's ``num_hidden_layers``, checked (its layer lists are read against it)."""
    layers = cfg.get("num_hidden_layers")
    require(is_whole(layers) and 0 < layers <= MAX_LAYERS, "config.json num_hidden_layers",
            f"must be a whole number in 1..{MAX_LAYERS:,}, got {layers!r}")
    return int(layers)


def _hf_layer_types(kinds: Any, layers: int, allowed: tuple[str, ...]) -> list[str]:
    """A hybrid config's ``layer_types``: one of ``allowed`` per layer."""
    require(isinstance(kinds, list) and len(kinds) == layers, "config.json layer_types",
            f"must list the {layers} layers' kinds ({' or '.join(allowed)}), got {kinds!r}"[:200])
    bad = sorted({str(k) for k in kinds} - set(allowed))
    require(not bad, "config.json layer_types", f"unknown layer kinds {bad}; allowed: {sorted(allowed)}")
    return kinds


#: each Mamba-2 hybrid family's config.json names for (heads, head dim, state, groups, conv taps, chunk,
#: expand) and the defaults of its Hugging Face config class where a field is absent (a Nemotron-H config
#: must give its state and its heads or head dim; heads x head dim = expand x hidden_size, so a missing or
#: "auto" one, Granite's and Bamba's default head dim, follows from the other)
_MAMBA2_GRANITE = ("mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups", "mamba_d_conv",
                   "mamba_chunk_size", "mamba_expand")
_MAMBA2_NAMES = {
    "nemotronh": (("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel", "chunk_size",
                   "expand"), (None, None, None, 1, 4, 128)),
    "granitemoehybrid": (_MAMBA2_GRANITE, (128, "auto", 256, 1, 4, 256)),
    "bamba": (_MAMBA2_GRANITE, (128, "auto", 256, 1, 4, 256)),
}


def _hf_mamba2_hybrid(cfg: dict[str, Any]) -> dict[str, Any]:
    """A Mamba-2 hybrid config.json's fields, {} for any other config: the layer counts and the
    Mamba-2 widths (:data:`_MAMBA2_NAMES`), plus ``moe_layers`` (how many layers' MLP is MoE) and, for
    a dense Granite, ``ffn`` (its MLP is the ``shared_intermediate_size``-wide shared MLP).

    Nemotron-H (``nemotron_h``): a ``hybrid_override_pattern`` (or ``layers_block_type`` list) of
    Mamba-2, attention, MLP and MoE layers, one block each; latent MoE (``moe_latent_size``, Nemotron 3
    Super and Ultra: the experts work in a narrower space). Granite 4.0-H (``granitemoehybrid``): a
    ``layer_types`` list of mamba / attention mixers, each layer with an MLP, MoE where
    ``num_local_experts`` > 0 (experts ``intermediate_size`` wide beside a shared MLP). Bamba: Mamba-2
    mixers except on ``attn_layer_indices``, each layer with a dense MLP."""
    family = _hf_family(cfg)
    if family not in _MAMBA2_NAMES:
        return {}
    layers = cfg.get("num_hidden_layers")
    out: dict[str, Any]
    if family == "nemotronh":
        pattern = cfg.get("hybrid_override_pattern")
        blocks = cfg.get("layers_block_type")  # the same as a list (newer configs): mamba, attention, mlp, moe
        if pattern is None and isinstance(blocks, list) and blocks:
            symbol = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}
            bad = sorted({str(b) for b in blocks} - set(symbol))
            require(not bad, "config.json layers_block_type", f"unknown layer kinds {bad}; allowed: {sorted(symbol)}")
            pattern = "".join(symbol[b] for b in blocks)
        require(pattern is not None, "config.json hybrid_override_pattern",
                "missing: a Nemotron-H config lists its layers there (or in layers_block_type)")
        counts = hybrid_counts(pattern, "config.json hybrid_override_pattern")
        require(layers is None or layers == counts["num_layers"], "config.json hybrid_override_pattern",
                f"has {counts['num_layers']} layers; num_hidden_layers is {layers!r}")
        out = {**counts, "hybrid_pattern": pattern, "moe_layers": pattern.count("E")}
        latent = cfg.get("moe_latent_size")
        if latent is not None:  # latent MoE (Nemotron 3 Super, Ultra)
            require(is_whole(latent) and latent > 0, "config.json moe_latent_size",
                    f"must be a whole number > 0, got {latent!r}")
            out["moe_latent_dim"] = int(latent)
    else:
        layers = _hf_layer_count(cfg)
        if family == "granitemoehybrid":
            n_ssm = _hf_layer_types(cfg.get("layer_types"), layers, ("mamba", "attention")).count("mamba")
        else:
            attn = cfg.get("attn_layer_indices")
            require(isinstance(attn, list) and all(is_whole(i) and 0 <= i < layers for i in attn),
                    "config.json attn_layer_indices",
                    f"must list attention layers' indices in 0..{layers - 1}, got {attn!r}"[:200])
            n_ssm = layers - len(set(attn))
        experts = cfg.get("num_local_experts") or 0
        out = {"ssm_layers": n_ssm, "moe_layers": layers if family == "granitemoehybrid" and experts else 0}
        if family == "granitemoehybrid" and not experts:
            out["ffn"] = cfg.get("shared_intermediate_size")
    names, defaults = _MAMBA2_NAMES[family]
    for key, name, default in zip(("ssm_state", "ssm_groups", "ssm_conv", "ssm_chunk"), names[2:6], defaults[2:6],
                                  strict=True):
        v = cfg[name] if cfg.get(name) is not None else default
        require(is_whole(v) and v > 0, f"config.json {name}", f"must be a whole number > 0, got {v!r}")
        out[key] = int(v)
    # heads x head dim = expand x hidden_size; either may be left to the other ("auto": Granite, Bamba)
    h, expand = cfg.get("hidden_size"), cfg.get(names[6], 2)
    heads = cfg.get(names[0], defaults[0])
    dim = cfg.get(names[1], defaults[1])
    if dim in (None, "auto") or heads is None:
        known, other = (names[0], heads) if dim in (None, "auto") else (names[1], dim)
        require(is_whole(other) and other > 0 and is_whole(expand) and is_whole(h) and expand * h % other == 0,
                f"config.json {known}", f"must be a whole number > 0 dividing {names[6]} x hidden_size "
                                        f"({expand!r} x {h!r}), got {other!r}")
        heads, dim = (other, expand * h // other) if known == names[0] else (expand * h // other, other)
    for name, v in ((names[0], heads), (names[1], dim)):
        require(is_whole(v) and v > 0, f"config.json {name}", f"must be a whole number > 0, got {v!r}")
    out["ssm_heads"], out["ssm_head_dim"] = int(heads), int(dim)
    return out


#: Gated DeltaNet hybrids' config.json widths: (field, config name, Hugging Face default)
_GDN_NAMES = (("gdn_k_heads", "linear_num_key_heads", 16), ("gdn_v_heads", "linear_num_value_heads", 32),
              ("gdn_k_dim", "linear_key_head_dim", 128), ("gdn_v_dim", "linear_value_head_dim", 128),
              ("gdn_conv", "linear_conv_kernel_dim", 4))


def _hf_gdn_hybrid(cfg: dict[str, Any]) -> dict[str, Any]:
    """A Gated DeltaNet hybrid config.json's fields (Qwen3-Next ``qwen3_next``, Qwen3.5 ``qwen3_5`` /
    ``qwen3_5_moe``), {} for any other config: which layers are linear attention (a ``layer_types``
    list of linear_attention / full_attention, else every ``full_attention_interval``-th layer full
    attention), the Gated DeltaNet widths (``linear_*``, Hugging Face's defaults where absent) and
    gated attention (``attn_output_gate``, on unless the config says otherwise). Each layer has an MLP
    (dense or MoE, read as for Qwen-MoE)."""
    family = _hf_family(cfg)
    if not (family.startswith("qwen3next") or family.startswith("qwen35")):
        return {}
    layers = _hf_layer_count(cfg)
    kinds = cfg.get("layer_types")
    if kinds is not None:
        n_gdn = _hf_layer_types(kinds, layers, ("linear_attention", "full_attention")).count("linear_attention")
    else:
        every = cfg.get("full_attention_interval", 4)
        require(is_whole(every) and every >= 1, "config.json full_attention_interval",
                f"must be a whole number >= 1, got {every!r}")
        n_gdn = sum(1 for i in range(int(layers)) if (i + 1) % int(every))
    out: dict[str, Any] = {"gdn_layers": n_gdn}
    for key, name, default in _GDN_NAMES:
        v = cfg[name] if cfg.get(name) is not None else default
        require(is_whole(v) and v > 0, f"config.json {name}", f"must be a whole number > 0, got {v!r}")
        out[key] = int(v)
    gate = cfg.get("attn_output_gate", True)
    require(isinstance(gate, bool), "config.json attn_output_gate", f"must be true or false, got {gate!r}")
    out["attn_output_gate"] = gate
    return out


_MODELLED_LAYER_TYPES = ("full_attention", "sliding_attention", "attention", "global", "local", "sliding",
                         "chunked_attention")
#: families (as :func:`_hf_family` spells them) whose layers are state-space, linear or sparse attention
#: (nemotronh, granitemoehybrid and bamba pass where :func:`_hf_mamba2_hybrid` reads their Mamba-2 layers,
#: qwen3next and qwen3_5 where :func:`_hf_gdn_hybrid` reads their Gated DeltaNet layers)
_SSM_FAMILIES = ("mamba", "rwkv", "jamba", "nemotronh", "falconh1", "granitemoehybrid", "qwen3next", "zamba", "bamba",
                 "kimilinear", "lfm2", "recurrentgemma", "xlstm")


def _refuse_unmodelled_layers(cfg: dict[str, Any], hybrid: bool = False) -> None:
    """An :class:`InputError` naming the config.json field when the model has layers other than
    softmax attention + MLP / MoE (only full, sliding-window and chunked attention are priced) or,
    with ``hybrid`` (a config read by :func:`_hf_mamba2_hybrid`), its Mamba-2 mixers."""
    for field, what in _UNMODELLED_FIELDS.items():
        if hybrid and field in ("hybrid_override_pattern", "mamba_d_state", "linear_num_key_heads",
                                "full_attention_interval"):
            continue
        if cfg.get(field) is not None:
            raise InputError(f"config.json {field}",
                             f"{what} are not modelled; supported: decoder layers of full, sliding-window "
                             "or chunked softmax attention with a dense or MoE MLP")
    types = cfg.get("layer_types")
    if isinstance(types, list) and not hybrid:
        other = sorted({str(t) for t in types} - set(_MODELLED_LAYER_TYPES))
        if other:
            raise InputError("config.json layer_types",
                             f"layer kinds {other} are not modelled; allowed: {list(_MODELLED_LAYER_TYPES)}")
    kind = _hf_family(cfg)
    if not hybrid and any(kind.startswith(t) for t in _SSM_FAMILIES):
        raise InputError("config.json model_type",
                         f"{kind!r} has state-space, linear or sparse attention layers, which are not "
                         "modelled; supported: decoder layers of full, sliding-window or chunked softmax attention")


def _hf_moe_layers(get: Any, L: int) -> int:
    """How many of a Hugging Face config's L layers are MoE (only the count enters the cost): an
    explicit moe_layers list, Llama 4's every interleave_moe_layer_step-th layer, Qwen-MoE's layers
    that are not in mlp_only_layers and fall on its decoder_sparse_step, or all but DeepSeek's
    first_k_dense_replace (ERNIE 4.5: moe_layer_start_index)."""
    if isinstance(get("moe_layers"), list):
        return len(get("moe_layers"))
    if get("interleave_moe_layer_step") is not None:
        step = int(get("interleave_moe_layer_step"))
        require(step >= 1, "config.json interleave_moe_layer_step", f"must be >= 1, got {step}")
        return L // step
    if get("decoder_sparse_step") is not None or get("mlp_only_layers"):
        step, only = int(get("decoder_sparse_step", default=1)), set(get("mlp_only_layers", default=[]) or [])
        require(step >= 1, "config.json decoder_sparse_step", f"must be >= 1, got {step}")
        return sum(1 for i in range(L) if i not in only and (i + 1) % step == 0)
    if get("moe_layer_frequency") is not None:  # Snowflake Arctic: layer i is MoE when (i + 1) % freq == 0
        freq = int(get("moe_layer_frequency"))
        require(freq >= 1, "config.json moe_layer_frequency", f"must be >= 1, got {freq}")
        return L // freq
    first = int(get("first_k_dense_replace", "moe_layer_start_index", default=0) or 0)
    freq = int(get("moe_layer_freq", default=1) or 1)  # DeepSeek: layer i >= first_k_dense_replace, i % freq == 0
    require(freq >= 1, "config.json moe_layer_freq", f"must be >= 1, got {freq}")
    return sum(1 for i in range(first, L) if i % freq == 0)


#: a model reference ending in ``+mtp`` or ``+mtpN`` trains N (1) multi-token-prediction modules
MTP_SUFFIX = re.compile(r"\+mtp(\d*)$")


def load_model(ref: str) -> ModelSpec:
    """A preset key, a path to a Hugging Face ``config.json`` or to a Megatron-LM launch script (its
    architecture arguments, :mod:`supercluster.megatron_args`); a ``+mtp`` / ``+mtpN`` suffix sets
    its multi-token-prediction modules (``deepseek-v3+mtp``: the way DeepSeek-V3 trains)."""
    if m := MTP_SUFFIX.search(ref):
        base, n = load_model(ref[:m.start()]), int(m.group(1) or 1)
        return dataclasses.replace(base, key=ref, name=f"{base.name} + {n} MTP" if n else base.name, mtp_layers=n)
    cat = model_catalog()
    if ref in cat:
        return cat[ref]
    path = Path(ref)
    if ref.endswith(".json") or path.exists():
        require(path.is_file(), "model", f"no such file {ref!r}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError("model", f"cannot read {ref} ({exc})") from exc
        if not ref.endswith(".json") and not text.lstrip().startswith("{"):  # a Megatron-LM launch script
            from . import megatron_args

            return megatron_args.model_from_args(megatron_args.parse_args(text), key=path.stem)
        try:
            cfg = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError("model", f"{ref} is not valid JSON ({exc})") from exc
        require(isinstance(cfg, dict), "model", f"{ref} must hold a JSON object")
        return from_hf_config(cfg, key=path.stem)
    raise InputError("model", f"unknown model {ref!r}; presets: {', '.join(sorted(cat))}; or a config.json or "
                              "Megatron-LM arguments path "
                              "(any may end in +mtp or +mtpN: N multi-token-prediction modules)")
