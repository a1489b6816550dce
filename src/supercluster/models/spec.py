"""Transformer architectures: :class:`ModelSpec`, the schema of every model.

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
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import require
from .recurrent import RecurrentMixers

GATED = {"swiglu": True, "geglu": True, "gelu": False, "relu2": False, "relu": False}
NORMS = ("rmsnorm", "layernorm")
POSITIONS = ("rope", "learned", "alibi", "none")
#: Sanity ceilings on a model's counts, far past any published model (the largest have a few hundred
#: layers, widths of tens of thousands, vocabularies of a few hundred thousand, 256 experts): a
#: value beyond them is a typo or a unit slip, refused rather than priced (or looped over layer by layer)
MAX_LAYERS = 100_000
MAX_WIDTH = 2**24
MAX_SEQ = 2**31


def check_router_groups(experts: int, top_k: int, groups: int, kept: int, groups_field: str,
                        kept_field: str) -> None:
    """Group-limited routing a model can run: ``groups`` that cut its ``experts`` evenly, of which a token
    keeps ``kept`` (1 .. groups) holding at least its ``top_k`` experts; refused by the field that states
    the number (a model's, a config.json's, a Megatron-LM flag's)."""
    require(experts > 0, groups_field, "group-limited routing goes with routed experts")
    require(groups > 0 and 0 < kept <= groups, kept_field, f"must be in 1..{groups} groups (groups > 0), got {kept}")
    require(experts % groups == 0, groups_field, f"{groups} groups must cut the {experts} experts evenly")
    require(kept * (experts // groups) >= top_k, kept_field,
            f"{kept} groups of {experts // groups} experts hold fewer than top_k={top_k}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec(RecurrentMixers):
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
    #: how the model is built beyond its widths (what a launcher must be told; not priced: norms and
    #: biases are memory-bound elementwise work counted by width, positions a lookup or a rotation):
    #: ``norm`` rmsnorm | layernorm; ``position_embedding`` rope | learned (absolute, GPT-2/3) | alibi
    #: (BLOOM) | none (Mamba hybrids); ``rope_base`` the rotary base (theta); ``linear_bias`` biases on
    #: every linear layer (GPT-3, BLOOM, GPT-OSS); ``qkv_bias`` on the query / key / value projection
    #: alone (Qwen2.5); ``qk_norm`` an RMSNorm on each query and key head (Qwen3)
    norm: str = "rmsnorm"
    position_embedding: str = "rope"
    rope_base: float = 10000.0
    linear_bias: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
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
    #: group-limited routing (DeepSeek-V3 config.json ``n_group`` / ``topk_group``; Megatron-Core
    #: --moe-router-num-groups / --moe-router-group-topk): the experts form ``router_groups`` equal
    #: contiguous groups, each token keeps its ``router_group_topk`` best groups and takes its top_k
    #: experts inside them (DeepSeek-V3 report, arXiv:2412.19437, sec. 2.1.2: with groups on nodes a
    #: token reaches at most that many nodes). 0 = no groups
    router_groups: int = 0
    router_group_topk: int = 0
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
                  "first_dense_layers", "router_groups", "router_group_topk",
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
        require(self.norm in NORMS, "model.norm", f"unknown {self.norm!r}; allowed: {', '.join(NORMS)}")
        require(self.position_embedding in POSITIONS, "model.position_embedding",
                f"unknown {self.position_embedding!r}; allowed: {', '.join(POSITIONS)}")
        require(isinstance(self.rope_base, (int, float)) and not isinstance(self.rope_base, bool)
                and 1.0 <= self.rope_base <= 1e12, "model.rope_base",
                f"must be a number in 1 .. 1e12, got {self.rope_base!r}")
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
        self._check_router_groups()
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

    def _check_router_groups(self) -> None:
        """Group-limited routing: both fields 0, or :func:`check_router_groups`."""
        if self.router_groups or self.router_group_topk:
            check_router_groups(self.num_experts, self.top_k, self.router_groups, self.router_group_topk,
                                "model.router_groups", "model.router_group_topk")

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

    def attention_score_keys(self, seq_len: Any, causal: bool) -> Any:
        """Per layer on average: keys per query, the score elements (and the softmax's exponentials) per
        head and token of :meth:`attention_width_keys` (sparse attention: its top-k keys where active)."""
        if self.index_topk:
            s = np.asarray(seq_len, dtype=float)
            full = np.where(self.sparse_active(s), self.sparse_keys(s, causal), s / 2.0 if causal else s)
            return full * self.attention_layers / self.num_layers
        return self.mean_keys(seq_len, causal)

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
    def mixer_params(self) -> int:
        """All layers' mixer weights (attention, Mamba and Gated DeltaNet)."""
        return (self.attention_layers * self.attn_params + self.ssm_layers * self.ssm_params
                + self.gdn_layers * self.gdn_params)

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


