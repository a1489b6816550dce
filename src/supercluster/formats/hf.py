"""Hugging Face ``config.json`` into a :class:`~supercluster.models.spec.ModelSpec`."""

from __future__ import annotations

from typing import Any

from ..errors import InputError, is_whole, require
from ..models.spec import MAX_LAYERS, MAX_WIDTH, ModelSpec, check_router_groups, hybrid_counts


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
    cfg = _flatten_hf_config(cfg)

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
    h, layers, heads, vocab, ffn = _hf_widths(get, hybrid)
    # (Falcon-7B, StarCoder: multi_query = one K/V head shared by all query heads)
    # (ChatGLM: multi_query_attention with multi_query_group_num K/V heads)
    kv = get("num_key_value_heads", "num_kv_heads", "kv_n_heads", "n_head_kv",
             default=1 if get("multi_query", default=False) is True else
             get("multi_query_group_num") if get("multi_query_attention", default=False) is True else heads)
    archs = get("architectures", default=[])
    arch = (" ".join(map(str, archs)) if isinstance(archs, list) else str(archs)).lower() + " " + str(
        get("model_type", default="")).lower()
    head_dim, fields = _hf_attention(cfg, get, arch, h, heads, layers)
    moe_fields, ffn = _hf_moe(get, arch, h, ffn, layers, hybrid)
    fields.update(moe_fields)
    fields.update({k: v for k, v in hybrid.items()
                   if k not in ("moe_layers", "first_dense_layers", "num_layers", "ffn")})
    tied = bool(get("tie_word_embeddings", default=_hf_family(cfg) in _TIED_FAMILIES))
    fields.update(_hf_build(cfg, get, arch, hybrid=bool(hybrid)))
    try:
        return ModelSpec(
            key=key, name=str(get("_name_or_path", default=key)), num_layers=layers, d_model=h,
            ffn_dim=int(ffn), num_heads=heads, num_kv_heads=int(kv), head_dim=int(head_dim),
            vocab_size=vocab, mlp=_hf_mlp(cfg, get), tied_embeddings=tied,
            seq_len=int(get("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", default=4096)),
            source="config.json", **fields,
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError("config.json", f"malformed field: {exc}") from exc


def _flatten_hf_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's fields at the top level: a multimodal wrapper's ``text_config`` (Llama 4,
    Gemma 3, LLaVA) and MPT / DBRX's nested ``attn_config`` / ``ffn_config`` lifted up."""
    text = cfg.get("text_config")
    if isinstance(text, dict) and not any(k in cfg for k in ("hidden_size", "n_embd", "d_model")):
        cfg = {**{k: v for k, v in cfg.items() if k != "text_config"}, **text}
    for nested in ("attn_config", "ffn_config"):
        if isinstance(sub := cfg.get(nested), dict):
            cfg = {**sub, **{k: v for k, v in cfg.items() if k != nested}}
    return cfg


def _hf_widths(get: Any, hybrid: dict[str, Any]) -> tuple[int, int, int, int, Any]:
    """(hidden, layers, heads, vocabulary, MLP width), each checked to be a positive whole number
    below any real model's (the MLP's: ``intermediate_size`` or its other names, else MPT's
    ``expansion_ratio`` x hidden, a dense Granite 4.0-H's shared MLP)."""
    h = get("hidden_size", "n_embd", "d_model")
    layers = get("num_hidden_layers", "n_layer", "num_layers", "n_layers")
    heads = get("num_attention_heads", "n_head", "n_heads")
    vocab = get("vocab_size", "padded_vocab_size")  # ChatGLM: padded_vocab_size
    for field, val in (("hidden_size", h), ("num_hidden_layers", layers), ("num_attention_heads", heads),
                       ("vocab_size", vocab)):
        require(isinstance(val, int) and val > 0, f"config.json {field}", f"must be a positive integer, got {val!r}")
        cap = MAX_LAYERS if field == "num_hidden_layers" else MAX_WIDTH
        require(val <= cap, f"config.json {field}", f"{val} is past any real model (at most {cap:,})")
    ratio = get("expansion_ratio", default=4)  # MPT: the MLP is expansion_ratio x d_model wide
    require(isinstance(ratio, (int, float)) and not isinstance(ratio, bool) and 0 < ratio <= MAX_WIDTH,
            "config.json expansion_ratio", f"must be a positive number up to {MAX_WIDTH:,}, got {ratio!r}")
    ffn = get("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size", default=int(ratio * h))
    if hybrid.get("ffn") is not None:  # a dense Granite 4.0-H: its MLP is the shared one
        ffn = hybrid["ffn"]
    return int(h), int(layers), int(heads), int(vocab), ffn


def _hf_mlp(cfg: dict[str, Any], get: Any) -> str:
    """The MLP's kind: squared ReLU by its activation's name, gated (SwiGLU / GeGLU) unless the
    family's MLP is ungated (then GeLU)."""
    act = str(get("mlp_hidden_act", "hidden_act", "activation_function", default="silu")).lower()
    if "relu2" in act or "squared" in act:
        return "relu2"
    if _hf_family(cfg) not in _UNGATED_FAMILIES:
        return "geglu" if "gelu" in act else "swiglu"
    return "gelu"


def _hf_attention(cfg: dict[str, Any], get: Any, arch: str, h: int, heads: int,
                  layers: int) -> tuple[int, dict[str, Any]]:
    """(head width, attention fields): MLA's ranks and head widths, sparse attention's indexer,
    local / chunked attention layers; the head width is ``head_dim`` (ChatGLM: ``kv_channels``), MLA's
    no-RoPE + RoPE parts, else hidden / heads."""
    head_dim = get("head_dim", "kv_channels", default=None)
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
    fields.update(_hf_local_attention(get, arch, layers))
    return int(head_dim), fields


def _hf_moe(get: Any, arch: str, h: int, ffn: Any, layers: int,
            hybrid: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """(MoE and MTP fields, the dense layers' MLP width): routed and shared experts, their widths,
    the dense first layers, group-limited routing, and the multi-token-prediction modules."""
    fields: dict[str, Any] = {}
    experts = int(get("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts", default=0) or 0)
    n_moe = hybrid["moe_layers"] if "moe_layers" in hybrid else _hf_moe_layers(get, layers)
    mlp_layers = layers - hybrid.get("mixer_only_layers", 0)
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
            shared_width = h
        if shared_width:  # Qwen-MoE: one shared expert this wide (a whole number of expert widths there)
            shared = max(1, round(shared_width / moe_ffn))
            fields["shared_ffn_dim"] = shared_width
        if "llama4" in arch:  # Llama4TextMoe always adds one shared expert of the expert width
            shared = max(shared, 1)
        fields.update(num_experts=experts, top_k=int(top_k), num_shared_experts=shared, moe_ffn_dim=moe_ffn,
                      first_dense_layers=mlp_layers - n_moe)
        # group-limited routing (DeepSeek-V3: n_group 8, topk_group 4); all groups kept is no limit
        groups, kept = int(get("n_group", default=0) or 0), int(get("topk_group", default=0) or 0)
        if groups > 1 and 0 < kept < groups:
            check_router_groups(experts, int(top_k), groups, kept, "config.json n_group", "config.json n_group")
            fields.update(router_groups=groups, router_group_topk=kept)
        # Llama 4's dense layers are intermediate_size_mlp wide (intermediate_size is the experts')
        ffn = get("intermediate_size_mlp", default=ffn)
    fields["mtp_layers"] = int(get("num_nextn_predict_layers", "mtp_num_layers", default=0) or 0)
    mtp_pattern = get("mtp_hybrid_override_pattern")  # Nemotron 3: the MTP block's layers ("*E")
    require(mtp_pattern is None or not fields["mtp_layers"] or mtp_pattern == ("*E" if "num_experts" in fields
                                                                                  else "*-"),
            "config.json mtp_hybrid_override_pattern",
            f"{mtp_pattern!r}: an MTP block other than attention and the model's MLP is not modelled")
    return fields, ffn


def _hf_build(cfg: dict[str, Any], get: Any, arch: str, hybrid: bool) -> dict[str, Any]:
    """How the model is built beyond its widths: RMSNorm where the config has ``rms_norm_eps``
    (LayerNorm for ``layer_norm_eps`` / ``layer_norm_epsilon`` alone); RoPE with ``rope_theta`` (its
    base), ALiBi for ``alibi`` configs (BLOOM, MPT), learned positions for GPT-2's ``n_positions``
    without rotary fields, none for a Mamba hybrid without rotary fields; ``attention_bias`` (the
    attention projections; all linear layers where ``mlp_bias`` too, or GPT-2 / BLOOM / MPT-style
    ``no_bias`` false); ``qk_norm`` / ``use_qk_norm`` or a Qwen3 architecture (its per-head q / k RMSNorm)."""
    rope = get("rope_theta", "rotary_emb_base", "rope_embedding_base")
    if get("alibi", default=False) is True or _hf_family(cfg) == "bloom":
        position = "alibi"
    elif rope is not None or get("rotary_dim", "rotary_pct", "partial_rotary_factor") is not None:
        position = "rope"
    elif hybrid:
        position = "none"
    elif "n_positions" in cfg:
        position = "learned"
    else:
        position = "rope"
    norm = "layernorm" if get("rms_norm_eps") is None and get("layer_norm_eps", "layer_norm_epsilon") is not None \
        else "rmsnorm"
    if rope is not None:
        require(isinstance(rope, (int, float)) and not isinstance(rope, bool) and 1 <= rope <= 1e12,
                "config.json rope_theta", f"must be a number in 1 .. 1e12, got {rope!r}")
    no_bias = get("no_bias")
    linear_bias = (no_bias is False) or bool(get("mlp_bias", default=False)) or (
        position in ("learned", "alibi") and no_bias is None)  # GPT-2 and BLOOM carry biases everywhere
    return dict(norm=norm, position_embedding=position, rope_base=float(rope or 10000.0), linear_bias=linear_bias,
                qkv_bias=bool(get("attention_bias", "qkv_bias", default=False)) and not linear_bias,
                qk_norm=bool(get("qk_norm", "use_qk_norm", default=False)) or "qwen3" in arch)


def _hf_local_attention(get: Any, arch: str, layers: int) -> dict[str, int]:
    """Sliding-window or chunked attention and on how many of the ``layers`` (none: {})."""
    fields: dict[str, int] = {}
    window = int(get("sliding_window", default=0) or 0)
    if window:
        # which layers are local: an explicit layer_types list (GPT-OSS, Gemma 3), Qwen2-style
        # use_sliding_window from max_window_layers on, Gemma's pattern, else every layer (Mistral)
        types = get("layer_types", default=None)
        if isinstance(types, list) and types:
            n_local = sum(1 for t in types if "sliding" in str(t))
            if len(types) < layers:  # a repeating pattern
                n_local = n_local * layers // len(types)
        elif get("use_sliding_window", default=None) is False:
            n_local = 0
        elif get("use_sliding_window", default=None) is True:
            n_local = max(0, layers - int(get("max_window_layers", default=0) or 0))
        elif get("sliding_window_pattern", default=None):
            pat = int(get("sliding_window_pattern"))
            n_local = layers - layers // pat  # one global layer in every `pat`
        elif "gemma2" in arch:
            n_local = layers // 2
        else:
            n_local = layers
        if n_local:
            fields.update(sliding_window=window, window_layers=min(n_local, layers))
    chunk = int(get("attention_chunk_size", default=0) or 0)
    if chunk and not window:
        # Llama 4: the RoPE layers (no_rope_layers[i] = 1) attend within chunks, every
        # no_rope_layer_interval-th layer (NoPE) globally
        nope = get("no_rope_layers", default=None)
        if isinstance(nope, list) and len(nope) == layers:
            n_chunked = sum(1 for x in nope if x)
        else:
            n_chunked = layers - layers // int(get("no_rope_layer_interval", default=4) or 4)
        if n_chunked:
            fields.update(attention_chunk=chunk, window_layers=n_chunked)
    return fields


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
    "n_group", "topk_group",
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
        # the layers on the step, less the listed dense ones among them (counted, not looped over)
        dense = {int(i) for i in only if is_whole(i) and 0 <= i < L and (int(i) + 1) % step == 0}
        return L // step - len(dense)
    if get("moe_layer_frequency") is not None:  # Snowflake Arctic: layer i is MoE when (i + 1) % freq == 0
        freq = int(get("moe_layer_frequency"))
        require(freq >= 1, "config.json moe_layer_frequency", f"must be >= 1, got {freq}")
        return L // freq
    first = get("first_k_dense_replace", "moe_layer_start_index", default=0) or 0
    require(is_whole(first) and 0 <= first <= MAX_LAYERS, "config.json first_k_dense_replace",
            f"(or moe_layer_start_index) must be a whole number of dense first layers in 0..{MAX_LAYERS:,}, "
            f"got {first!r}")
    freq = int(get("moe_layer_freq", default=1) or 1)  # DeepSeek: layer i >= first_k_dense_replace, i % freq == 0
    require(freq >= 1, "config.json moe_layer_freq", f"must be >= 1, got {freq}")
    # the multiples of freq in first .. L - 1
    return max(0, (L - 1) // freq - (int(first) - 1) // freq)


