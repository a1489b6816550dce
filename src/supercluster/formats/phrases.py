"""How the free text of a published run reads: its precision, recompute (and the modules a JAX remat
policy amounts to), ZeRO / FSDP phrase and publication year. Each reader names what it reads or returns
None, so a caller can note the values none of them reads."""

from __future__ import annotations

import functools
import re

from ..parallelism.framework import Framework


@functools.lru_cache(maxsize=1024)
def parse_precision(text: str) -> str:
    t = text.lower()
    if "fp8" in t or "float8" in t:
        return "fp8"
    if "fp4" in t:
        return "fp4"
    return "bf16"  # bf16, fp16 and "16-bit mixed" run on the same tensor cores


#: MaxText's remat policies (its remat_policy) as the recompute modules they amount to: each recomputes the
#: layer from its input but the projections whose outputs it saves (MaxText decoders.py,
#: jax.checkpoint_policies.save_only_these_names; "minimal": checkpoint_dots_with_no_batch_dims, every
#: weight matmul's output saved, not the fused attention's), and the part left unpriced where one is not a
#: module. Paxml / Praxis's CHECKPOINT_POLICY names are not read: NVIDIA's published Paxml steps
#: (benchmarks/check_jax_stacks.py) are met by full remat, not by their stated policy, so how the policy
#: applies there is unknown and the profile's default (full) is priced, with a note.
REMAT_POLICIES = {
    "save_dot_except_mlp": (("core_attn", "layernorm", "mlp"), ""),
    "save_qkv_proj": (("core_attn", "layernorm", "mlp"), "remat_policy save_qkv_proj also recomputes the "
                      "attention output projection: not priced"),
    "save_dot_except_mlpwi": (("core_attn", "layernorm", "mlp"), "remat_policy save_dot_except_mlpwi saves "
                              "the MLP's output projection: priced as recomputed"),
    "minimal": (("core_attn", "layernorm"), ""),
}


def remat_policy(text: str) -> tuple[tuple[str, ...], str] | None:
    """The recompute modules (and the note) of the MaxText remat policy a published phrase names, or None."""
    t = text.lower().replace("-", "_")
    return next((v for k, v in REMAT_POLICIES.items() if re.search(rf"\b{k}\b", t)), None)


@functools.lru_cache(maxsize=1024)
def recompute_word(text: str) -> str | None:
    """The recompute a published phrase names, or None where it names none: "full" / "selective" (or
    "SAC") as such; a negation ("none", "no", "off", "false", "disabled", "without") none; activation
    checkpointing named without a kind ("activation checkpointing", "block", "uniform", "yes", "on")
    full, as Megatron-LM's --checkpoint-activations and torchtitan's full AC checkpoint whole blocks."""
    t = text.lower()
    if "full" in t:
        return "full"
    if "selective" in t or re.search(r"\bsac\b", t) or remat_policy(t) is not None:
        return "selective"
    if re.search(r"\b(none|no|off|false|disabled|without)\b", t) or t.strip() == "0":
        return "none"
    if re.search(r"checkpoint|\bblock\b|\buniform\b|\b(yes|true|on)\b", t) or t.strip() == "1":
        return "full"
    return None


def parse_recompute(text: str, fw: Framework) -> str:
    return recompute_word(text) or fw.default_recompute


@functools.lru_cache(maxsize=1024)
def parse_recompute_layers(text: str) -> int:
    """Partial full recompute, e.g. "full (5 layers)" or "recompute_num_layers=5": layers per chunk; else 0."""
    t = text.lower()
    m = re.search(r"recompute_num_layers\s*=\s*(\d+)", t) or re.search(r"\b(\d+)\s+layers?\b", t)
    return int(m.group(1)) if m and "full" in t else 0


@functools.lru_cache(maxsize=1024)
def parse_recompute_modules(text: str) -> tuple[str, ...]:
    """Megatron-Core selective modules, e.g. "selective (recompute_modules=layernorm,moe_act)", or those a
    MaxText remat policy amounts to (:data:`REMAT_POLICIES`); else ()."""
    m = re.search(r"recompute_modules\s*=\s*\[?([a-z_,\s'\"]+)", text.lower())
    if m is None and (policy := remat_policy(text)) is not None:
        return policy[0]
    return tuple(x.strip(" '\"") for x in m.group(1).split(",") if x.strip(" '\"")) if m else ()


@functools.lru_cache(maxsize=1024)
def parse_layer_ac(text: str) -> int | None:
    """torchtitan's selective *layer* AC ("selective (layer)"): every N-th transformer block fully
    recomputed, N = selective_ac_option, 2 by default (torchtitan config: "2 = checkpoint every other
    layer"); None for any other policy."""
    t = text.lower()
    if "selective" not in t or "layer" not in t or "recompute_modules" in t:
        return None
    m = re.search(r"every\s+(\d+)", t) or re.search(r"selective_ac_option\s*=\s*(\d+)", t)
    return max(1, int(m.group(1))) if m else 2


@functools.lru_cache(maxsize=1024)
def zero_word(text: str) -> int | None:
    """The ZeRO stage a published phrase names, or None where it names none: a stage by number ("ZeRO-2",
    "zero stage 3", "ZeRO 1", a bare 0-3); fully sharded data parallelism (FSDP, FULL_SHARD, HSDP, hybrid
    shard, Megatron-FSDP's optim_grads_params) 3; PyTorch FSDP's SHARD_GRAD_OP 2; a distributed optimizer
    1; NO_SHARD, DDP or none 0. A stated number wins over the words around it ("FSDP ... (ZeRO-2)")."""
    t = text.lower()
    if m := re.search(r"zero[\s_-]*(?:stage[\s_-]*)?([0-3])\b", t) or re.fullmatch(r"\s*(?:stage\s*)?([0-3])\s*", t):
        return int(m.group(1))
    if "shard_grad_op" in t or "shard grad op" in t:
        return 2
    if "no_shard" in t:
        return 0
    if re.search(r"fsdp|fully sharded|full_shard|hsdp|hybrid shard|optim_grads_params", t):
        return 3
    if "distributed optimizer" in t or "distributed_optimizer" in t:
        return 1
    if re.search(r"\b(none|ddp|no)\b", t):
        return 0
    return None


def parse_zero(text: str, fw: Framework) -> int:
    z = zero_word(text)
    return fw.default_zero_stage if z is None else z


@functools.lru_cache(maxsize=1024)
def publication_year(source: str) -> int | None:
    """The first year (1990-2099) a row's source names, e.g. "Narayanan et al. 2021 (SC21)"; it picks
    the framework profile of that era (:func:`~supercluster.parallelism.published.framework_of_year`)."""
    m = re.search(r"\b(19[9]\d|20\d\d)\b", source)
    return int(m.group(1)) if m else None


@functools.lru_cache(maxsize=1024)
def replicas_phrase(text: str, dpcp: int) -> int | None:
    """The replicas of the ZeRO / FSDP shard group (hybrid sharding) a published phrase states for a
    data-parallel group of ``dpcp`` ranks, or None where it states none: a count ("HSDP, 16 replicas",
    "replicate 16", "data_parallel_replicate_degree=16", "dcn_data_parallelism=16",
    "num_distributed_optimizer_instances=16"), or the shard group's size ("FSDP=128", "FSDP 128 x DP 16",
    "data_parallel_shard_degree=128") that divides the group into that many replicas. A bare name with a
    version ("FSDP2") states no size."""
    t = text.lower()
    if m := (re.search(r"(\d+)\s+replicas\b", t) or re.search(r"replicat\w*[\s_-]*(?:degree)?\s*[=:]?\s*(\d+)", t)
             or re.search(r"optimizer[\s_-]*instances\s*[=:]?\s*(\d+)", t)
             or re.search(r"dcn[\s_-]*data[\s_-]*parallelism\s*[=:]?\s*(\d+)", t)):
        return max(1, int(m.group(1)))
    if m := (re.search(r"\bfsdp\s*(?:[=:]\s*|\s)(\d+)\b", t) or re.search(r"shard[\s_-]*degree\s*[=:]?\s*(\d+)", t)):
        shard = int(m.group(1))
        return dpcp // shard if 0 < shard < dpcp and dpcp % shard == 0 else None
    return None

