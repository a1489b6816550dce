"""How a published run's framework name reads: the profile of its era, the options it states in words,
and the default profile, with a note, for a name no profile answers to."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from ..errors import InputError
from .framework import DEFAULT_FRAMEWORK, Framework, framework_catalog, get_framework, with_suffixes
from .suffixes import (
    COMPILE_SUFFIX,
    CP_A2A_SUFFIX,
    CUDA_GRAPHS_SUFFIX,
    DEEPEP_SUFFIX,
    EMBED_SPLIT_SUFFIX,
    EP_OVERLAP_SUFFIX,
    FLASH_ATTN_SUFFIX,
    ROUND_ROBIN_SUFFIX,
    TP_OVERLAP_SUFFIX,
    split_suffixes,
)

#: First year in which training frameworks ran FlashAttention (Dao et al., May 2022; Megatron-LM
#: --use-flash-attn, NeMo, DeepSpeed and PyTorch 2.0 SDPA all in 2023).
FLASH_ATTENTION_YEAR = 2023


def framework_of_year(fw: Framework, year: int | None) -> Framework:
    """The profile of ``fw`` as it was in ``year``: a catalog entry with ``era_of`` = ``fw``'s key or
    family and ``until_year >= year`` (the earliest such) describes the framework's behaviour back then;
    a framework without one keeps its profile, but before :data:`FLASH_ATTENTION_YEAR` with the
    unfused core attention every framework then ran."""
    if year is None:
        return fw
    base, mods = split_suffixes(fw.key)
    # (an era profile with flash attention does not describe a run from before FlashAttention)
    eras = sorted((f for f in framework_catalog().values() if f.era_of in (base, fw.family) and year <= f.until_year
                   and (year >= FLASH_ATTENTION_YEAR or f.attention == "unfused")), key=lambda f: f.until_year)
    if eras:
        return with_suffixes(eras[0], mods)  # the options named on the framework still apply
    if year < FLASH_ATTENTION_YEAR and fw.attention != "unfused":
        return replace(fw, key=f"{fw.key}@{year}", attention="unfused")
    return fw


@lru_cache(maxsize=512)
def framework_named(name: str) -> bool:
    """Whether a published framework name names a profile: a key or alias (with any options), or a name
    :func:`resolve_framework` reads as one ("NeMo 2.0", "PyTorch FSDP"); False where it falls back to the
    default profile with nothing to go on (a run priced so is approximated)."""
    try:
        get_framework(name)
        return True
    except InputError:
        return _mentioned(split_suffixes(name)[0]) is not None


def _mentioned(low: str) -> str | None:
    """The profile a published framework name (lower case, options split off) mentions (:data:`_MENTIONS`)."""
    return next((k for words, k in _MENTIONS if any(w in low for w in words)), None)


@lru_cache(maxsize=512)
def resolve_framework(name: str, year: int | None = None) -> tuple[Framework, str | None]:
    """Like :func:`get_framework`, but an unknown name falls back to the default with a note; a
    publication ``year`` selects the profile of that era (see :func:`framework_of_year`). Profiles are
    frozen: a name read again gets the same one."""
    try:
        fw, note = get_framework(name), None
    except InputError:
        # A run's framework column as published ("NeMo 2.0", "PyTorch FSDP", ...): the first profile
        # whose name it mentions, else the default; the note says which was read.
        low, mods = split_suffixes(name)
        key = _mentioned(low)
        base = get_framework((key or DEFAULT_FRAMEWORK) + "".join(mods))
        fw = framework_of_year(_with_named_options(base, low, mods), year)
        shown = name.strip()[:len(low)]  # as published, without the options appended to it
        note = (f"framework {shown!r} read as {fw.key}" if key is not None
                else f"framework {shown!r} unknown: {fw.key} assumed")
        return fw, note
    return framework_of_year(fw, year), note


#: Words in a published framework name that name a run option, and the option's suffix (an option the
#: profile cannot take is left out): DeepEP's or HybridEP's node-deduplicated dispatch, the MoE
#: all-to-all overlapped across micro-batches, a round-robin benchmark gate, the embedding and loss
#: counted as pipeline layers, torch.compile, CUDA graphs, TP overlap (async TP), Ulysses CP, FlashAttention
#: in place of an unfused core attention.
_OPTION_WORDS = ((("deepep", "hybridep", "hybrid-ep"), DEEPEP_SUFFIX),
                 (("ep overlap", "ep-overlap", "a2a overlap", "a2a-overlap", "overlap-moe-expert-parallel-comm",
                   "1f1b overlap"), EP_OVERLAP_SUFFIX),
                 (("round-robin", "round robin", "fake balanced gate", "fake_balanced_gate"), ROUND_ROBIN_SUFFIX),
                 (("account-for-embedding", "account_for_embedding", "transformer|embedding"), EMBED_SPLIT_SUFFIX),
                 (("compile",), COMPILE_SUFFIX),
                 (("cuda graph", "cuda-graph", "cudagraph"), CUDA_GRAPHS_SUFFIX),
                 (("tp overlap", "tp-comm-overlap", "tp comm overlap", "async tp", "async-tp", "asynctp"),
                  TP_OVERLAP_SUFFIX),
                 (("ulysses", "cp-comm-type a2a"), CP_A2A_SUFFIX),
                 (("flash-attn", "flash_attn", "flash attn", "flashattention", "flash attention"), FLASH_ATTN_SUFFIX))


def named_option_suffixes(text: str) -> list[str]:
    """The run options a published phrase states in words (:data:`_OPTION_WORDS`), as framework-name
    suffixes: a row's precision column names some ("fp8 linears (Float8) + compile + AsyncTP")."""
    low = text.lower()
    return [suffix for words, suffix in _OPTION_WORDS if any(w in low for w in words)]


def _with_named_options(fw: Framework, low: str, given: list[str]) -> Framework:
    """``fw`` with the run options a published name states in words (:data:`_OPTION_WORDS`) and does
    not already carry as suffixes; one the profile cannot take is left out."""
    for words, suffix in _OPTION_WORDS:
        if suffix in given or suffix in fw.key or not any(w in low for w in words):
            continue
        try:
            fw = get_framework(fw.key + suffix)
        except InputError:
            continue
    return fw


#: Words in a published framework name and the profile they select, most specific first.
#: Megatron-DeepSpeed (Microsoft's and BigScience's) runs Megatron-LM's model code on DeepSpeed's engine and
#: has its own profile; GPT-NeoX also runs Megatron's model code on DeepSpeed (its README), with the same
#: unfused core attention unless a run asks for flash (neox_arguments.py: attention_config defaults to
#: [[["global"], n_layers]]; "flash" is opt-in), so it reads as Megatron-DeepSpeed; MosaicML
#: llm-foundry / Composer have their own profile (PyTorch FSDP1 as its docs set it up); other PyTorch FSDP
#: runs read as torchtitan.
#: The JAX stacks (MaxText, Pax / Paxml on Praxis, T5X, Levanter, NVIDIA's JAX-Toolbox builds of them)
#: run one XLA-compiled program, so their kernels are XLA's: they read as the MaxText profile.
_MENTIONS = ((("automodel",), "automodel"), (("megatron-fsdp", "megatron fsdp"), "megatron"),
             (("nemo", "bridge"), "nemo-megatron"),
             (("megatron-deepspeed", "megatron deepspeed", "megatron_deepspeed", "deepspeed-megatron",
               "deepspeed megatron", "neox"), "megatron-deepspeed"),
             (("deepspeed", "zero-3", "zero3"), "deepspeed"),
             (("foundry", "composer", "mosaic"), "composer"), (("titan", "fsdp"), "torchtitan"),
             (("hai-llm", "dualpipe"), "hai-llm"), (("maxtext", "pax", "praxis", "jax", "t5x", "levanter"), "maxtext"),
             (("megatron",), "megatron"))
