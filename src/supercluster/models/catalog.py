"""The preset models (``data/models.toml``), each with its source."""

from __future__ import annotations

from functools import cache

from .._toml import check_keys, load_package_toml
from ..errors import require
from .spec import ModelSpec, hybrid_counts

_REQUIRED = {"name", "d_model", "ffn_dim", "num_heads", "num_kv_heads", "head_dim", "vocab_size", "source"}
_OPTIONAL = {"num_layers", "mlp", "tied_embeddings", "num_experts", "top_k", "num_shared_experts", "shared_ffn_dim",
             "router_groups", "router_group_topk", "moe_ffn_dim", "moe_latent_dim", "first_dense_layers",
             "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
             "v_head_dim", "seq_len", "sliding_window", "window_layers", "attention_chunk", "mtp_layers", "ssm_heads",
             "ssm_head_dim", "ssm_state", "ssm_groups", "ssm_conv", "ssm_chunk", "hybrid_pattern", "index_topk",
             "index_heads", "index_head_dim", "gdn_layers", "gdn_k_heads", "gdn_v_heads", "gdn_k_dim", "gdn_v_dim",
             "gdn_conv", "attn_output_gate", "norm", "position_embedding", "rope_base", "linear_bias", "qkv_bias",
             "qk_norm"}


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

