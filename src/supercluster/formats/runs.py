"""Runs CSVs (the ``../shared/validation/public-runs.csv`` format) read into jobs.

Each row describes one published run: architecture, GPU, GPU count, layout, batch, precision,
recompute, ZeRO / FSDP and framework. :func:`row_setup` reads a row's own columns only; values it
does not know fall back to documented defaults (the framework's default recompute and ZeRO stage;
an unknown framework gets the default profile), and the fallback goes into the row's note. A file is
read as text (its size bounded by the caller) and nothing in it is evaluated.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import math
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import IO

from ..errors import InputError, require
from ..files import user_path
from ..hardware.specs import gpu_catalog, gpu_key
from ..models.catalog import model_catalog
from ..models.spec import ModelSpec
from ..parallelism.framework import FP8_RECIPE_NAMES, Framework, capacity_factor, get_framework
from ..parallelism.layout import UNPRICED_MODULES, Layout
from ..parallelism.published import named_option_suffixes, resolve_framework
from ..parallelism.suffixes import (
    CAPACITY_PREFIX,
    CUDA_GRAPHS_SUFFIX,
    DP_OVERLAP_SUFFIX,
    EMBED_SPLIT_SUFFIX,
    NO_DP_OVERLAP_SUFFIX,
    NO_TP_OVERLAP_SUFFIX,
    PAD_SUFFIX,
    TP_OVERLAP_SUFFIX,
)
from .phrases import (
    parse_layer_ac,
    parse_precision,
    parse_recompute,
    parse_recompute_layers,
    parse_recompute_modules,
    parse_zero,
    publication_year,
    recompute_word,
    remat_policy,
    replicas_phrase,
    zero_word,
)

REQUIRED_COLUMNS = ("id", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "seq_len", "gpu",
                    "num_gpus", "tp", "pp", "dp", "micro_batch", "global_batch", "precision", "framework",
                    "step_time_s", "scored")


def _int(row: dict[str, str], name: str, default: int | None = None) -> int:
    raw = (row.get(name) or "").strip()
    if raw.isascii() and raw.isdigit():
        return int(raw)
    if not raw:
        if default is None:
            raise InputError(name, "is blank")
        return default
    try:
        v = float(raw)
    except ValueError as exc:
        raise InputError(name, f"{raw!r} is not a number") from exc
    if not math.isfinite(v) or v != int(v) or v < 0:
        raise InputError(name, f"{raw!r} is not a non-negative integer")
    return int(v)


#: the columns a row's architecture is read from (:func:`row_model`)
MODEL_COLUMNS = ("model_name", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "seq_len",
                 "moe_experts", "moe_topk", "mtp_layers")


def row_model(row: dict[str, str]) -> ModelSpec:
    """The architecture of a row; activation, head dim and embedding tying come from the preset
    with the same (layers, hidden, heads) when there is one, else from ffn = 4h (GELU) or not (SwiGLU).
    Rows that agree on :data:`MODEL_COLUMNS` get the same model (its key: the model's name), so that
    a file's rows of one model are priced together."""
    return _row_model(tuple((row.get(c) or "").strip() for c in MODEL_COLUMNS))


@functools.lru_cache(maxsize=1024)
def _row_model(values: tuple[str, ...]) -> ModelSpec:
    row = dict(zip(MODEL_COLUMNS, values, strict=True))
    layers, hidden, heads = _int(row, "layers"), _int(row, "hidden"), _int(row, "heads")
    for name, v in (("layers", layers), ("hidden", hidden), ("heads", heads)):
        require(v > 0, name, f"must be a positive integer, got {v}")
    ffn = _int(row, "ffn_hidden", 4 * hidden)
    # the preset with the same shape; its MLP width (dense, or expert) must match too (Nemotron 8B and
    # Llama 2 7B share 32 x 4096 x 32 but not their MLPs), then MoE-ness and vocabulary break ties
    is_moe, vocab = _int(row, "moe_experts", 0) > 0, _int(row, "vocab", 0)
    # (mtp_layers: an optional column beyond the shared format, the multi-token-prediction modules a run trained)
    mtp = _int(row, "mtp_layers", 0)
    same = [m for m in model_catalog().values() if (m.num_layers, m.d_model, m.num_heads) == (layers, hidden, heads)
            and ffn in (m.ffn_dim, m.moe_ffn_dim)]
    preset = max(same, key=lambda m: (m.is_moe == is_moe, m.vocab_size == vocab), default=None)
    if preset is not None:
        mlp, head_dim, tied = preset.mlp, preset.head_dim, preset.tied_embeddings
    else:
        mlp = "gelu" if ffn == 4 * hidden else "swiglu"
        head_dim, tied = hidden // heads, mlp == "gelu"
    experts = _int(row, "moe_experts", 0)
    if preset is not None and preset.hybrid_pattern and experts == preset.num_experts:
        # nor for a hybrid's Mamba layers and layer pattern: a matching hybrid preset supplies them
        return dataclasses.replace(preset, key=row["model_name"] or preset.key, name=row["model_name"] or preset.name,
                                   seq_len=_int(row, "seq_len"), mtp_layers=mtp)
    if preset is not None and preset.is_moe and experts == preset.num_experts:
        # The CSV has no columns for shared experts, leading dense layers, expert width or MLA: a
        # matching MoE preset supplies them; the row's own columns must agree with it.
        require(_int(row, "moe_topk", preset.top_k) == preset.top_k, "moe_topk",
                f"{row.get('moe_topk')} differs from the {preset.name} preset's {preset.top_k}")
        return dataclasses.replace(preset, key=row["model_name"] or preset.key, name=row["model_name"] or preset.name,
                                   seq_len=_int(row, "seq_len"), mtp_layers=mtp)
    moe = {"num_experts": experts, "top_k": _int(row, "moe_topk", 2), "moe_ffn_dim": ffn} if experts else {}
    return ModelSpec(key=row["model_name"] or "row", name=row["model_name"] or "row", num_layers=layers,
                     d_model=hidden, ffn_dim=ffn, num_heads=heads, num_kv_heads=_int(row, "kv_heads", heads),
                     head_dim=head_dim, vocab_size=_int(row, "vocab", 51200), mlp=mlp, tied_embeddings=tied,
                     seq_len=_int(row, "seq_len"), mtp_layers=mtp, **moe)


#: how each free-text column is read, for the note of a value none of them reads
_READERS = {"recompute": recompute_word, "zero_stage_or_fsdp": zero_word}
_PRECISION_WORDS = ("fp8", "float8", "fp4", "bf16", "bfloat16", "fp16", "float16", "16-bit", "mixed")


#: the columns :func:`_unread_columns` reads
_UNREAD_INPUTS = ("precision", "recompute", "zero_stage_or_fsdp", "dp_replicate", "fp8_recipe")


def _unread_columns(row: dict[str, str], fw: Framework) -> list[str]:
    """Notes for column values none of the parsers recognise (they fall back to a default)."""
    values = tuple(row.get(c) or "" for c in _UNREAD_INPUTS)
    return list(_unread_notes(values, fw.default_recompute, fw.default_zero_stage))


@functools.lru_cache(maxsize=4096)
def _unread_notes(values: tuple[str, ...], default_recompute: str, default_zero: int) -> tuple[str, ...]:
    row = dict(zip(_UNREAD_INPUTS, values, strict=True))
    notes = []
    defaults = {"precision": "bf16", "recompute": default_recompute, "zero_stage_or_fsdp": f"zero {default_zero}"}
    precision = row["precision"].strip()
    if precision and not any(w in precision.lower() for w in _PRECISION_WORDS):
        notes.append(f"precision {precision!r} not known: bf16 assumed")
    for col, reader in _READERS.items():
        text = row[col].strip()
        if text and reader(text) is None:
            notes.append(f"{col} {text!r} not known: {defaults[col]} assumed")
    if "hsdp" in row["zero_stage_or_fsdp"].lower() and row_replicas(row, 0) == 1:
        notes.append("HSDP without its replica count priced as fully sharded over the whole data-parallel group")
    said = f"{row['fp8_recipe']} {precision}".lower()
    if any(w in said for w in ROWWISE):
        notes.append("fp8 rowwise (torchao) priced as the blockwise recipe")
    return tuple(notes)


def row_replicas(row: dict[str, str], dpcp: int = 0) -> int:
    """Replicas of the ZeRO / FSDP shard group a row states (hybrid sharding) over its ``dpcp`` data-parallel
    ranks: the optional ``dp_replicate`` column, else its ZeRO / FSDP text (:func:`replicas_phrase`:
    "HSDP, 16 replicas", "FSDP=128"); 1 where it says none."""
    if n := _int(row, "dp_replicate", 0):
        return n
    return replicas_phrase(row.get("zero_stage_or_fsdp") or "", dpcp) or 1


def _yes_no(row: dict[str, str], name: str) -> bool | None:
    """An optional yes / no column; None where it is blank or absent."""
    raw = (row.get(name) or "").strip().lower()
    require(raw in ("", "yes", "no"), name, f"{raw!r}: allowed yes, no or blank")
    return None if not raw else raw == "yes"


#: optional yes / no columns naming what the run did where its framework's default may differ, and the
#: framework option each one sets (blank: the framework's default); async_tp is torchtitan's TP overlap
RUN_OPTION_COLUMNS = {"cuda_graphs": (CUDA_GRAPHS_SUFFIX, ""),
                      "tp_comm_overlap": (TP_OVERLAP_SUFFIX, NO_TP_OVERLAP_SUFFIX),
                      "async_tp": (TP_OVERLAP_SUFFIX, NO_TP_OVERLAP_SUFFIX),
                      "dp_overlap": (DP_OVERLAP_SUFFIX, NO_DP_OVERLAP_SUFFIX)}


#: torchao's float8 "rowwise" recipe (torchtitan's Float8 converter, Float8LinearConfig.from_recipe_name) as
#: a run names it, priced as the blockwise recipe: both scale each row of an operand (blockwise in 1 x 128
#: pieces), so neither quantised tensor serves its transpose and every GEMM orientation is cast again, and
#: both run scaled-epilogue CUTLASS kernels on Hopper (an assumption). Checked against two published
#: torchtitan measurements, not fitted: Llama 3 8B on 8 H100 (torchao float8 README), rowwise 1.10x bf16
#: and 0.88x tensorwise, priced 0.99-1.05x and 0.89-0.91x (500 W / 700 W); Llama 3 70B, FSDP 32 x TP 8 on
#: 256 H100 (torchtitan PR #1299), rowwise 1.00x bf16, priced 0.99-1.04x
ROWWISE = {"rowwise": "blockwise", "row-wise": "blockwise"}


def fp8_recipe(row: dict[str, str]) -> str | None:
    """The fp8 recipe a row states: its fp8_recipe column, else what its precision text names (the
    Megatron-Bridge tables' "current scaling, FP8-CS" and "MXFP8 block scaling", DeepSeek's
    "fine-grained tile/block scaling", torchao's "rowwise" (:data:`ROWWISE`)); None where it says none
    (the framework's default)."""
    said = (row.get("fp8_recipe") or "").strip().lower()
    names = {**FP8_RECIPE_NAMES, **ROWWISE}
    if said:
        require(said in names, "fp8_recipe", f"{said!r}: allowed {', '.join(names)} or blank (the framework's default)")
        return names[said]
    t = (row.get("precision") or "").lower()
    if "fp8" not in t and "float8" not in t:
        return None
    for words, recipe in ((("mxfp8",), "mxfp8"), (("current scaling", "fp8-cs", "tensorwise"), "current"),
                          (tuple(ROWWISE), "blockwise"), (("block",), "blockwise"), (("delayed",), "delayed")):
        if any(w in t for w in words):
            return recipe
    return None


#: the columns :func:`run_option_suffixes` reads
RUN_OPTION_INPUTS = (*RUN_OPTION_COLUMNS, "fp8_recipe", "precision", "moe_capacity_factor", "moe_pad_to_capacity")


def run_option_suffixes(row: dict[str, str]) -> str:
    """The framework options the row's run-option columns (and its fp8 recipe) state, as framework-name
    suffixes."""
    return _run_option_suffixes(tuple(row.get(c) or "" for c in RUN_OPTION_INPUTS))


@functools.lru_cache(maxsize=1024)
def _run_option_suffixes(values: tuple[str, ...]) -> str:
    row = dict(zip(RUN_OPTION_INPUTS, values, strict=True))
    out = ""
    for col, (on, off) in RUN_OPTION_COLUMNS.items():
        said = _yes_no(row, col)
        if said is not None and (on if said else off) not in out:
            out += on if said else off
    recipe = fp8_recipe(row)
    return out + (f"+fp8-{recipe}" if recipe else "") + routing_suffixes(row)


def routing_suffixes(row: dict[str, str]) -> str:
    """Token-drop routing a row states: its moe_capacity_factor column (blank: dropless) and
    moe_pad_to_capacity (yes / no / blank), as framework-name suffixes."""
    raw = (row.get("moe_capacity_factor") or "").strip()
    pad = _yes_no(row, "moe_pad_to_capacity")
    if not raw:
        require(not pad, "moe_pad_to_capacity", "yes needs a moe_capacity_factor (padding is to a capacity)")
        return ""
    factor = capacity_factor(raw, "moe_capacity_factor")
    return f"{CAPACITY_PREFIX}{factor:g}" + (PAD_SUFFIX if pad else "")


#: GPUs as published names spell them (a row's ``gpu``, else its ``gpu_type``), first match wins: each a
#: pattern over the lower-cased name and the catalog key it reads as. Memory decides between the A100s
#: (a bare "A100" is the 80 GB part, with a note); an H100 PCIe or NVL, another part, is not read.
GPU_NAMES = (
    (r"gb300", "gb300"), (r"gb200", "gb200"), (r"b300", "b300"), (r"b200", "b200"),
    (r"h800", "h800"), (r"h200", "h200"),
    (r"h100\b.*\b96\s*gb.*500\s*w", "h100-96gb-500w"), (r"h100(?!.*(pcie|nvl))", "h100-sxm"),
    (r"a100(?!.*pcie).*\b40\s*gb", "a100-40gb"), (r"a100(?!.*pcie)", "a100-80gb"),
    (r"mi355x", "mi355x"), (r"mi325x", "mi325x"), (r"mi300x", "mi300x"), (r"gaudi\s*3|hl-?325", "gaudi3"),
)


def row_gpu(row: dict[str, str]) -> tuple[str, str | None]:
    """A row's catalog GPU key and, where it was read from a published name, the note saying so: the
    ``gpu`` column as a key (any case), else read by :data:`GPU_NAMES` (the ``gpu_type`` column where
    ``gpu`` is blank). A name it cannot read is left as written (the catalog refuses it by name)."""
    return _row_gpu((row.get("gpu") or "").strip(), (row.get("gpu_type") or "").strip())


@functools.lru_cache(maxsize=1024)
def _row_gpu(raw: str, gpu_type: str) -> tuple[str, str | None]:
    keys = gpu_catalog()
    if gpu_key(raw) in keys:
        return gpu_key(raw), None
    text = raw or gpu_type
    if text:
        low = text.lower()[:200]
        key = next((k for pat, k in GPU_NAMES if re.search(pat, low)), None)
        if key is not None and key in keys:
            bare = key == "a100-80gb" and not re.search(r"\b80\s*gb", low)
            return key, f"gpu {text[:60]!r} read as {key}" + (" (memory not stated: 80 GB assumed)" if bare else "")
    return raw, None


#: a rate in a runs row's network text: a number and its unit (GB/s, a capital B: bytes, is 8 Gb/s; a bare
#: G, as in "400G", is Gb/s), with a count of NICs before or after it
_RATE = re.compile(r"(?:(\d{1,4})\s*[x\u00d7]\s*)?(\d+(?:\.\d+)?)\s*(Gb/s|Gbit/s|Gbps|Gb|GB/s|GBps|Tb/s|Tbit/s|Tbps|"
                   r"G(?![A-Za-z]))(?:\s*[x\u00d7]\s*(\d{1,4}))?")
#: an InfiniBand port named by its generation (EDR, HDR, NDR, XDR: 100, 200, 400, 800 Gb/s), with a count
_IB_PORT = re.compile(r"(?:(\d{1,4})\s*[x\u00d7]\s*)?\b(EDR|HDR|NDR|XDR)(?:\s*\d{3})?\b(?:\s*[x\u00d7]\s*(\d{1,4}))?")
_IB_GBIT = {"EDR": 100.0, "HDR": 200.0, "NDR": 400.0, "XDR": 800.0}
#: words naming a node's NICs together (a rate over the node's GPUs)
_NODE_WORDS = re.compile(r"node|per\s+(?:server|host|instance)")


@functools.lru_cache(maxsize=1024)
def network_gbit_per_gpu(text: str, gpus_per_node: int) -> float | None:
    """The scale-out rate per GPU (Gb/s per direction) a runs row's network text states, or None where
    it states none it can be read as: "400 Gb/s per GPU" or "400G (1 NIC per GPU)" (a GPU's own NIC),
    "200Gb/s x8 per node", "4 x 100 Gb/s per node", "1600 Gbps node-node", "8x400G", "4x NDR400 per
    node", "3200 Gbps per instance" or "8x50 GB/s" (a node's NICs together, over its ``gpus_per_node``
    GPUs); an InfiniBand generation (EDR, HDR, NDR, XDR) where no rate is written. A rate with neither
    a count nor "per GPU" / a node is not read (it may be a link's speed or a whole cluster's)."""
    text = (text or "")[:1000]
    m = _RATE.search(text)
    if m is not None:
        count_given = m.group(1) or m.group(4)
        unit = m.group(3)
        rate = float(m.group(2)) * (8.0 if unit.startswith("GB") else 1000.0 if unit.startswith("T") else 1.0)
    elif (ib := _IB_PORT.search(text)) is not None:
        m, count_given, rate = ib, ib.group(1) or ib.group(3), _IB_GBIT[ib.group(2)]
    else:
        return None
    rate *= float(count_given or 1)
    low, tail = text.lower(), text[m.end():].lower()
    if re.match(r"\s*(?:\([^)]*\)\s*)?per\s+gpu", tail) or (not count_given and "per gpu" in low):
        return rate
    if count_given or _NODE_WORDS.search(low):
        return rate / gpus_per_node
    return None


def row_network(row: dict[str, str], gpus_per_node: int) -> dict[str, float | int]:
    """The network a row states, as run options (:data:`supercluster.job.NETWORK_RUN_OPTIONS`): its
    optional ``gpus_per_node`` and ``nic_gbit_per_gpu`` columns, else the scale-out rate its free-text
    ``network`` column states (:func:`network_gbit_per_gpu`, over the row's or the system's
    ``gpus_per_node``); empty where it states neither."""
    out: dict[str, float | int] = {}
    if per_node := _int(row, "gpus_per_node", 0):
        out["gpus_per_node"] = per_node
    raw = (row.get("nic_gbit_per_gpu") or "").strip()
    if raw:
        try:
            out["nic_gbit_per_gpu"] = float(raw)
        except ValueError:
            raise InputError("nic_gbit_per_gpu", f"{raw[:40]!r}: a rate in Gb/s per GPU expected") from None
    elif (rate := network_gbit_per_gpu(row.get("network") or "", per_node or gpus_per_node)) is not None:
        out["nic_gbit_per_gpu"] = rate
    return out


def _fold(row: dict[str, str], g: dict[str, int]) -> int | None:
    """Expert TP 1 (Megatron-Core MoE parallel folding) when the row's EP does not fit in dp x cp (its dp
    as written) but does in tp x dp x cp; the CSV format has no expert-TP column."""
    tp, cp, ep, dp = g["tp"], g["cp"], g["ep"], _int(row, "dp", 1) or 1
    return 1 if tp > 1 and (dp * cp) % ep and (tp * dp * cp) % ep == 0 else None


def _layout_ints(row: dict[str, str]) -> dict[str, int]:
    """A row's integer layout columns, each read once: a blank or 0 degree is 1 (tp, pp, cp, ep, vpp,
    grad_accum), a blank expert_tp 0; the GPU count, global batch and sequence must be given."""
    g = {c: _int(row, c, 1) or 1 for c in ("tp", "pp", "cp", "ep", "vpp", "grad_accum")}
    g.update({c: _int(row, c) for c in ("num_gpus", "global_batch", "seq_len")}, expert_tp=_int(row, "expert_tp", 0))
    return g


@functools.lru_cache(maxsize=4096)
def _precision_options(name: str, precision: str) -> tuple[str, tuple[str, ...]]:
    """The framework name with the run options its precision text states in words ("fp8 linears
    (Float8) + compile + AsyncTP": torch.compile and async TP) appended, and the options left out: one a
    catalog profile cannot take (a name no profile answers to keeps them all: its reading drops what it
    cannot take)."""
    dropped = []
    for suffix in named_option_suffixes(precision):
        if suffix in name:
            continue
        if _takes(name + suffix) or not _takes(name):
            name += suffix
        else:
            dropped.append(suffix)
    return name, tuple(dropped)


def _takes(name: str) -> bool:
    """Whether a framework name, options included, is a catalog profile."""
    try:
        get_framework(name)
        return True
    except InputError:
        return False


def row_setup(row: dict[str, str]) -> tuple[ModelSpec, Layout, Framework, str | None]:
    """Model, layout and framework a scored row describes (InputError if it cannot be read; the
    framework's own rules are :func:`supercluster.job.check_job`'s, which :meth:`Job.from_row` applies)."""
    name, dropped = _precision_options(row.get("framework") or "", row.get("precision") or "")
    name += run_option_suffixes(row)
    fw, note = resolve_framework(name, publication_year(row.get("source") or ""))
    model = row_model(row)
    g = _layout_ints(row)
    pp, vpp = g["pp"], g["vpp"]
    dp, dp_note = _row_dp(row, g)
    fw, split_note = _split_for_slots(fw, model, pp * vpp)
    # A blank micro-batch means the whole local batch without pipelining; under pipelining 1, or the
    # local batch split into the framework's default number of micro-batches (torchtitan: one per stage).
    local = max(1, g["global_batch"] // max(dp, 1))
    n_mb = fw.pp_microbatches_per_stage * pp * vpp
    mb_default = local if pp == 1 else (local // n_mb if n_mb and local % n_mb == 0 else 1)
    recompute, rc_layers, layer_note = parse_recompute(row.get("recompute", ""), fw), \
        parse_recompute_layers(row.get("recompute", "")), []
    modules = parse_recompute_modules(row.get("recompute", "")) if recompute == "selective" else ()
    if recompute == "selective" and (policy := remat_policy(row.get("recompute", ""))) and policy[1]:
        layer_note = [policy[1]]
    if unpriced := [x for x in modules if x in UNPRICED_MODULES]:
        modules = tuple(x for x in modules if x not in UNPRICED_MODULES)
        recompute = recompute if modules else "none"
        layer_note = [f"recompute module{'s' if len(unpriced) > 1 else ''} {', '.join(unpriced)} not priced "
                      f"(left out{'' if modules else ': no recompute priced'})"]
    if every := parse_layer_ac(row.get("recompute", "")):
        # the same count of fully recomputed blocks per pipeline chunk (which ones does not change the price)
        chunk = -(-model.num_layers // (pp * vpp))
        recompute, rc_layers = "full", (-(-chunk // every) if every > 1 else 0)
        layer_note = [f"selective layer AC read as full recompute of one block in {every}"]
    layout = Layout(
        tp=g["tp"], pp=pp, dp=dp, cp=g["cp"], ep=g["ep"], vpp=vpp, micro_batch=_int(row, "micro_batch", mb_default),
        global_batch=g["global_batch"], seq_len=g["seq_len"],
        precision=parse_precision(row.get("precision", "")),
        recompute=recompute,
        recompute_layers=rc_layers,
        recompute_modules=modules,
        zero_stage=parse_zero(row.get("zero_stage_or_fsdp", ""), fw),
        # (expert_tp: an optional column beyond the shared format, the run's expert tensor-parallel size;
        # blank: MoE parallel folding where the EP does not fit in dp x cp)
        expert_tp=g["expert_tp"] or _fold(row, g),
        # (sequence_parallel: an optional column, yes / no; blank: the framework's default)
        sequence_parallel=_yes_no(row, "sequence_parallel"),
        # (pp_layout: an optional column beyond the shared format, the run's explicit pipeline layout)
        pp_layout=(row.get("pp_layout") or "").strip() or None,
        # (grad_accum: an optional column, gradient-accumulation steps each run as its own pipeline
        # schedule, as torchtitan and NeMo AutoModel do; blank: one schedule a step)
        grad_accum=g["grad_accum"],
        # (dp_replicate: an optional column, the replicas of the ZeRO / FSDP shard group (HSDP); blank: the
        # ZeRO / FSDP text's, else one shard group over all of dp x cp)
        dp_replicate=row_replicas(row, dp * g["cp"]) if parse_zero(row.get("zero_stage_or_fsdp", ""), fw) else 1,
    )
    layout.check_gpus(g["num_gpus"])
    folded = (["EP spans TP x DP: expert TP 1 (MoE parallel folding) assumed"]
              if layout.expert_tp == 1 and not g["expert_tp"] else [])
    left = [f"precision names {', '.join(x.lstrip('+') for x in dropped)}, which {fw.key} cannot run: left out"]
    note = "; ".join(x for x in [note, dp_note, split_note, *_unread_columns(row, fw), *folded, *layer_note,
                                 *(left if dropped else [])] if x) or None
    return model, layout, fw, note


def _split_for_slots(fw: Framework, model: ModelSpec, slots: int) -> tuple[Framework, str | None]:
    """A run with more pipeline slots (pp x vpp) than layers ran the split that counts the embedding and
    the loss as a layer each (Megatron-Core's --account-for-embedding- and -loss-in-pipeline-split,
    the only way it fills them): where the profile can take that split and it fills the slots, the
    row is read so, with a note; otherwise unchanged (the layout check then refuses it by name)."""
    layers = model.num_layers + model.mtp_layers
    if fw.pp_split_counts_head or not layers < slots <= layers + 2:
        return fw, None
    try:
        split = get_framework(fw.key + EMBED_SPLIT_SUFFIX)
    except InputError:
        return fw, None
    return split, (f"pp x vpp = {slots} slots for {layers} layers: the embedding and the loss counted as "
                   f"layers ({split.key})")


def _row_dp(row: dict[str, str], g: dict[str, int]) -> tuple[int, str | None]:
    """A row's data-parallel degree as a layout counts it (model replicas over TP x PP x CP, EP carved out
    of them), read against its GPU count, and a note where it was not read as written: a blank dp is the
    GPUs over TP x PP x CP; a dp that counts the CP ranks too (TP x PP x dp = the GPUs) or leaves the EP
    ranks out (TP x PP x dp x CP x EP = the GPUs), as some tables write it, is read so. ``g``: the row's
    integer layout columns (:func:`_layout_ints`)."""
    n, tp, pp, cp, ep = g["num_gpus"], g["tp"], g["pp"], g["cp"], g["ep"]
    if not (row.get("dp") or "").strip():
        require(n % (tp * pp * cp) == 0, "dp", f"is blank, and the {n} GPUs are not a multiple of tp x pp x cp = "
                                               f"{tp} x {pp} x {cp}")
        return n // (tp * pp * cp), f"dp blank: {n // (tp * pp * cp)} from the GPU count"
    dp = _int(row, "dp")
    if tp * pp * dp * cp == n:
        return dp, None
    if cp > 1 and tp * pp * dp == n and dp % cp == 0:
        return dp // cp, f"dp {dp} read as counting the CP ranks: dp {dp // cp} x cp {cp}"
    if ep > 1 and tp * pp * dp * cp * ep == n:
        return dp * ep, f"dp {dp} read as leaving out the EP ranks: dp {dp * ep}, EP {ep} carved out of it"
    return dp, None


#: Runs shipped in the package: ``public`` (../shared/validation/public-runs.csv, the default) and
#: ``heldout`` (published runs outside the shared file, a source per row; a check only: no constant is
#: taken from them).
SHIPPED_RUNS = {"public": "public-runs.csv", "heldout": "heldout-runs.csv"}


#: A runs file is streamed; these bound what one can cost: its size, its rows, and (the csv module's
#: field_size_limit, 128 KiB) each field.
MAX_RUNS_FILE_BYTES = 2**30
MAX_RUNS_ROWS = 2_000_000


def load_rows(path: str | Path | None = None) -> list[dict[str, str]]:
    """Rows of a runs CSV: a path, or a shipped set by name (:data:`SHIPPED_RUNS`; ``public`` by default)."""
    return list(iter_rows(path))


def iter_rows(path: str | Path | None = None) -> Iterator[dict[str, str]]:
    """The rows of a runs CSV one at a time (:func:`load_rows`), read as they are needed: a file of any
    number of rows within the bounds above costs memory for one row."""
    if path is None or str(path) in SHIPPED_RUNS:
        name = SHIPPED_RUNS[str(path) if path is not None else "public"]
        handle: IO[str] = resources.files("supercluster").joinpath("data").joinpath(name).open("r", encoding="utf-8")
    else:
        p = user_path(path, "runs")
        if not p.is_file():
            raise InputError("runs", f"no such file {str(path)!r}; or a shipped set: {', '.join(SHIPPED_RUNS)}")
        require(p.stat().st_size <= MAX_RUNS_FILE_BYTES, "runs",
                f"{str(path)!r} is {p.stat().st_size / 2**30:.1f} GiB; at most {MAX_RUNS_FILE_BYTES // 2**30} GiB "
                "(split the file)")
        # (utf-8-sig: a spreadsheet's byte-order mark is not part of the first column's name)
        handle = p.open(encoding="utf-8-sig", errors="replace", newline="")
    with handle:
        reader = csv.DictReader(handle)
        try:
            missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise InputError("runs", f"missing columns {missing}; see ../shared/validation/README.md")
            for i, row in enumerate(reader):
                require(i < MAX_RUNS_ROWS, "runs", f"more than {MAX_RUNS_ROWS:,} rows (split the file)")
                yield row
        except csv.Error as exc:
            raise InputError("runs", f"malformed CSV (line {reader.line_num}): {exc}") from exc


