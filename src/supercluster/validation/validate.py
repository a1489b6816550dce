"""Predict the published runs of a CSV (``../shared/validation/public-runs.csv`` format).

Each scored row is predicted from its own columns only: architecture, GPU key, framework,
layout, batch, precision, recompute and ZeRO/FSDP. Values the model does not know fall back to
documented defaults (the framework's default recompute and ZeRO stage; an unknown framework is
priced as Megatron), and the fallback is written into the row's ``reason``.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from ..errors import InputError, require
from ..hardware.specs import get_gpu
from ..job import Job, estimate
from ..models.catalog import model_catalog
from ..models.spec import ModelSpec
from ..parallelism.framework import EMBED_SPLIT_SUFFIX, Framework, resolve_framework
from ..parallelism.layout import UNPRICED_MODULES, Layout

REQUIRED_COLUMNS = ("id", "layers", "hidden", "ffn_hidden", "heads", "kv_heads", "vocab", "seq_len", "gpu",
                    "num_gpus", "tp", "pp", "dp", "micro_batch", "global_batch", "precision", "framework",
                    "step_time_s", "scored")

#: a published framework column naming the option that counts the embedding and the head as pipeline
#: layers (Megatron-DeepSpeed --pp-partition-method 'type:transformer|embedding', Megatron-Core
#: --account-for-embedding/loss-in-pipeline-split) selects the profile with that split
EMBED_SPLIT_WORDS = ("transformer|embedding", "account-for-embedding", "account_for_embedding")


@dataclass(frozen=True, slots=True)
class RowResult:
    id: str
    predicted_step_time_s: float | None
    measured_step_time_s: float | None
    error: float | None
    supported: bool
    reason: str
    group: str = ""
    layout: str = ""
    gpu: str = ""
    framework: str = ""
    kind: str = ""  # dense | moe


#: What ``by_group`` can summarise the rows by.
GROUP_KEYS = ("gpu", "framework", "kind")


def _int(row: dict[str, str], name: str, default: int | None = None) -> int:
    raw = (row.get(name) or "").strip()
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


def row_model(row: dict[str, str]) -> ModelSpec:
    """The architecture of a row; activation, head dim and embedding tying come from the preset
    with the same (layers, hidden, heads) when there is one, else from ffn = 4h (GELU) or not (SwiGLU)."""
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
        return dataclasses.replace(preset, key=row.get("id", "row"), name=row.get("model_name", preset.name),
                                   seq_len=_int(row, "seq_len"), mtp_layers=mtp)
    if preset is not None and preset.is_moe and experts == preset.num_experts:
        # The CSV has no columns for shared experts, leading dense layers, expert width or MLA: a
        # matching MoE preset supplies them; the row's own columns must agree with it.
        require(_int(row, "moe_topk", preset.top_k) == preset.top_k, "moe_topk",
                f"{row.get('moe_topk')} differs from the {preset.name} preset's {preset.top_k}")
        return dataclasses.replace(preset, key=row.get("id", "row"), name=row.get("model_name", preset.name),
                                   seq_len=_int(row, "seq_len"), mtp_layers=mtp)
    moe = {"num_experts": experts, "top_k": _int(row, "moe_topk", 2), "moe_ffn_dim": ffn} if experts else {}
    return ModelSpec(key=row.get("id", "row"), name=row.get("model_name", "row"), num_layers=layers,
                     d_model=hidden, ffn_dim=ffn, num_heads=heads, num_kv_heads=_int(row, "kv_heads", heads),
                     head_dim=head_dim, vocab_size=_int(row, "vocab", 51200), mlp=mlp, tied_embeddings=tied,
                     seq_len=_int(row, "seq_len"), mtp_layers=mtp, **moe)


def parse_precision(text: str) -> str:
    t = text.lower()
    if "fp8" in t or "float8" in t:
        return "fp8"
    if "fp4" in t:
        return "fp4"
    return "bf16"  # bf16, fp16 and "16-bit mixed" run on the same tensor cores


def parse_recompute(text: str, fw: Framework) -> str:
    t = text.lower()
    if "full" in t:
        return "full"
    if "selective" in t:
        return "selective"
    if "none" in t or t.strip() in ("no", "0"):
        return "none"
    return fw.default_recompute


def parse_recompute_layers(text: str) -> int:
    """Partial full recompute, e.g. "full (5 layers)" or "recompute_num_layers=5": layers per chunk; else 0."""
    t = text.lower()
    m = re.search(r"recompute_num_layers\s*=\s*(\d+)", t) or re.search(r"\b(\d+)\s+layers?\b", t)
    return int(m.group(1)) if m and "full" in t else 0


def parse_recompute_modules(text: str) -> tuple[str, ...]:
    """Megatron-Core selective modules, e.g. "selective (recompute_modules=layernorm,moe_act)"; else ()."""
    m = re.search(r"recompute_modules\s*=\s*\[?([a-z_,\s'\"]+)", text.lower())
    return tuple(x.strip(" '\"") for x in m.group(1).split(",") if x.strip(" '\"")) if m else ()


def parse_layer_ac(text: str) -> int | None:
    """torchtitan's selective *layer* AC ("selective (layer)"): every N-th transformer block fully
    recomputed, N = selective_ac_option, 2 by default (torchtitan config: "2 = checkpoint every other
    layer"); None for any other policy."""
    t = text.lower()
    if "selective" not in t or "layer" not in t or "recompute_modules" in t:
        return None
    m = re.search(r"every\s+(\d+)", t) or re.search(r"selective_ac_option\s*=\s*(\d+)", t)
    return max(1, int(m.group(1))) if m else 2


def parse_zero(text: str, fw: Framework) -> int:
    t = text.lower()
    if "zero-3" in t or "zero3" in t or "fsdp" in t or "fully sharded" in t or "hsdp" in t or "hybrid shard" in t:
        return 3
    if "zero-2" in t or "zero2" in t:
        return 2
    if "zero-1" in t or "zero1" in t or "distributed optimizer" in t:
        return 1
    if "none" in t or "ddp" in t:
        return 0
    return fw.default_zero_stage


def publication_year(source: str) -> int | None:
    """The first year (1990-2099) a row's source names, e.g. "Narayanan et al. 2021 (SC21)"; it picks
    the framework profile of that era (:func:`~supercluster.parallelism.framework.framework_of_year`)."""
    m = re.search(r"\b(19[9]\d|20\d\d)\b", source)
    return int(m.group(1)) if m else None


_KNOWN_WORDS = {
    "precision": ("fp8", "float8", "fp4", "bf16", "bfloat16", "fp16", "float16", "16-bit", "mixed"),
    "recompute": ("full", "selective", "none", "no", "0"),
    "zero_stage_or_fsdp": ("zero", "fsdp", "fully sharded", "hsdp", "hybrid shard", "distributed optimizer", "none",
                           "ddp"),
}


def _unread_columns(row: dict[str, str], fw: Framework) -> list[str]:
    """Notes for column values none of the parsers recognise (they fall back to a default)."""
    notes = []
    defaults = {"precision": "bf16", "recompute": fw.default_recompute,
                "zero_stage_or_fsdp": f"zero {fw.default_zero_stage}"}
    for col, words in _KNOWN_WORDS.items():
        text = (row.get(col) or "").strip()
        if text and not any(w in text.lower() for w in words):
            notes.append(f"{col} {text!r} not known: {defaults[col]} assumed")
    if "hsdp" in (row.get("zero_stage_or_fsdp") or "").lower():
        notes.append("HSDP priced as fully sharded over the whole data-parallel group")
    return notes


def _yes_no(row: dict[str, str], name: str) -> bool | None:
    """An optional yes / no column; None where it is blank or absent."""
    raw = (row.get(name) or "").strip().lower()
    require(raw in ("", "yes", "no"), name, f"{raw!r}: allowed yes, no or blank")
    return None if not raw else raw == "yes"


def _fold(row: dict[str, str]) -> int | None:
    """Expert TP 1 (Megatron-Core MoE parallel folding) when the row's EP does not fit in dp x cp but
    does in tp x dp x cp; the CSV format has no expert-TP column."""
    tp, dp, cp, ep = (_int(row, c, 1) or 1 for c in ("tp", "dp", "cp", "ep"))
    return 1 if tp > 1 and (dp * cp) % ep and (tp * dp * cp) % ep == 0 else None


def row_setup(row: dict[str, str]) -> tuple[ModelSpec, Layout, Framework, str | None]:
    """Model, layout and framework a scored row describes (InputError if it cannot be read)."""
    name = row.get("framework") or ""
    if "compile" in (row.get("precision") or "").lower():  # e.g. "fp8 linears (Float8) + torch.compile"
        name += "+compile"
    if any(w in name.lower() for w in EMBED_SPLIT_WORDS):
        name += EMBED_SPLIT_SUFFIX
    fw, note = resolve_framework(name, publication_year(row.get("source") or ""))
    model = row_model(row)
    pp, dp, vpp = _int(row, "pp", 1) or 1, _int(row, "dp"), _int(row, "vpp", 1) or 1
    # A blank micro-batch means the whole local batch without pipelining; under pipelining 1, or the
    # local batch split into the framework's default number of micro-batches (torchtitan: one per stage).
    local = max(1, _int(row, "global_batch") // max(dp, 1))
    n_mb = fw.pp_microbatches_per_stage * pp * vpp
    mb_default = local if pp == 1 else (local // n_mb if n_mb and local % n_mb == 0 else 1)
    recompute, rc_layers, layer_note = parse_recompute(row.get("recompute", ""), fw), \
        parse_recompute_layers(row.get("recompute", "")), []
    modules = parse_recompute_modules(row.get("recompute", "")) if recompute == "selective" else ()
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
        tp=_int(row, "tp", 1) or 1, pp=pp, dp=dp, cp=_int(row, "cp", 1) or 1,
        ep=_int(row, "ep", 1) or 1, vpp=vpp, micro_batch=_int(row, "micro_batch", mb_default),
        global_batch=_int(row, "global_batch"), seq_len=_int(row, "seq_len"),
        precision=parse_precision(row.get("precision", "")),
        recompute=recompute,
        recompute_layers=rc_layers,
        recompute_modules=modules,
        zero_stage=parse_zero(row.get("zero_stage_or_fsdp", ""), fw),
        # (expert_tp: an optional column beyond the shared format, the run's expert tensor-parallel size;
        # blank: MoE parallel folding where the EP does not fit in dp x cp)
        expert_tp=_int(row, "expert_tp", 0) or _fold(row),
        # (sequence_parallel: an optional column, yes / no; blank: the framework's default)
        sequence_parallel=_yes_no(row, "sequence_parallel"),
        # (pp_layout: an optional column beyond the shared format, the run's explicit pipeline layout)
        pp_layout=(row.get("pp_layout") or "").strip() or None,
        # (grad_accum: an optional column, gradient-accumulation steps each run as its own pipeline
        # schedule, as torchtitan and NeMo AutoModel do; blank: one schedule a step)
        grad_accum=_int(row, "grad_accum", 1) or 1,
    )
    layout.check_gpus(_int(row, "num_gpus"))
    layout = fw.runnable(layout, model.is_moe)
    folded = (["EP spans TP x DP: expert TP 1 (MoE parallel folding) assumed"]
              if layout.expert_tp == 1 and not _int(row, "expert_tp", 0) else [])
    note = "; ".join(x for x in [note, *_unread_columns(row, fw), *folded, *layer_note] if x) or None
    return model, layout, fw, note


def published_ranks(path: str | Path | None = None) -> dict[str, object]:
    """For every scored row, the rank of its published layout among the planner's feasible layouts."""
    from ..planner.search import plan

    out = []
    for row in (r for r in load_rows(path) if (r.get("scored") or "").strip().lower() == "yes"):
        try:
            model, layout, fw, _ = row_setup(row)
            gpu = get_gpu((row.get("gpu") or "").strip())
            res = plan(model, gpu, layout.num_gpus, global_batch=layout.global_batch, seq_len=layout.seq_len,
                       framework=fw, precisions=(layout.precision,), top=1)
        except InputError as exc:
            out.append({"id": row.get("id"), "rank": None, "feasible": 0, "reason": str(exc)})
            continue
        rank = res.rank_of(layout)
        out.append({"id": row.get("id"), "rank": rank, "feasible": res.feasible, "best": res.best.layout.short(),
                    "best_step_time_s": res.best.step_time_s,
                    "reason": "" if rank else "published layout outside the search space or predicted not to fit"})
    ranked = [r for r in out if r["rank"]]
    pct = sorted(100.0 * r["rank"] / r["feasible"] for r in ranked)  # type: ignore[operator]
    summary = {
        "rows": len(out), "ranked": len(ranked),
        "top1": sum(r["rank"] == 1 for r in ranked), "top10": sum(r["rank"] <= 10 for r in ranked),  # type: ignore[operator]
        "top100": sum(r["rank"] <= 100 for r in ranked),  # type: ignore[operator]
        "median_percentile": float(np.median(pct)) if pct else None,
        "p90_percentile": float(np.percentile(pct, 90)) if pct else None,
    }
    return {"rows": out, "summary": summary}


def predict_row(row: dict[str, str]) -> RowResult:
    rid = row.get("id", "?")
    raw = (row.get("step_time_s") or "").strip()
    try:
        measured: float | None = float(raw) if raw else None
    except ValueError:
        measured = math.nan
    if measured is not None and not (math.isfinite(measured) and measured > 0):
        return RowResult(rid, None, None, None, False, f"step_time_s: {raw!r} is not a positive number of seconds",
                         "", gpu=(row.get("gpu") or "").strip(), framework=(row.get("framework") or "").strip())
    group = f"{row.get('model_name', '')}|{row.get('gpu', '')}|{row.get('num_gpus', '')}|{row.get('precision', '')}"
    gpu_key = (row.get("gpu") or "").strip()
    try:
        model, layout, fw, note = row_setup(row)
        b = estimate(Job(model=model, gpu=get_gpu(gpu_key), num_gpus=layout.num_gpus, layout=layout, framework=fw))
    except InputError as exc:
        return RowResult(rid, None, measured, None, False, str(exc), group, gpu=gpu_key,
                         framework=(row.get("framework") or "").strip())
    err = b.step_time_s / measured - 1.0 if measured else None
    reason = "; ".join(x for x in (note, f"{fw.key}, {layout.recompute_label} recompute, zero {layout.zero_stage}")
                       if x)
    return RowResult(rid, b.step_time_s, measured, err, True, reason, group, layout.short(), gpu=gpu_key,
                     framework=fw.key, kind=model.kind)


#: Runs shipped in the package: ``public`` (../shared/validation/public-runs.csv, the default) and
#: ``heldout`` (published runs outside the shared file, a source per row; a check only: no constant is
#: taken from them).
SHIPPED_RUNS = {"public": "public-runs.csv", "heldout": "heldout-runs.csv"}


def load_rows(path: str | Path | None = None) -> list[dict[str, str]]:
    """Rows of a runs CSV: a path, or a shipped set by name (:data:`SHIPPED_RUNS`; ``public`` by default)."""
    if path is None or str(path) in SHIPPED_RUNS:
        name = SHIPPED_RUNS[str(path) if path is not None else "public"]
        text = resources.files("supercluster").joinpath("data").joinpath(name).read_text("utf-8")
    else:
        p = Path(path)
        if not p.is_file():
            raise InputError("runs", f"no such file {str(path)!r}; or a shipped set: {', '.join(SHIPPED_RUNS)}")
        text = p.read_text(encoding="utf-8", errors="replace")
    try:
        reader = csv.DictReader(io.StringIO(text))
        rows = list(reader)
    except csv.Error as exc:
        raise InputError("runs", f"malformed CSV: {exc}") from exc
    missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError("runs", f"missing columns {missing}; see ../shared/validation/README.md")
    return rows


def validate(path: str | Path | None = None) -> dict[str, object]:
    """Predict every scored row; per-row error, MAPE, worst row, ranking agreement."""
    rows = [r for r in load_rows(path) if (r.get("scored") or "").strip().lower() == "yes"]
    results = [predict_row(r) for r in rows]
    errs = [abs(r.error) for r in results if r.supported and r.error is not None]
    n = len(results)
    # Unsupported rows count as misses of 100 %.
    miss = [1.0 for r in results if not r.supported]
    mape = (sum(errs) + sum(miss)) / n if n else 0.0
    worst = max(errs + miss, default=0.0)
    worst_row = max((r for r in results if r.error is not None), key=lambda r: abs(r.error or 0), default=None)
    return {
        "rows": results, "mape": mape, "worst_abs_error": worst,
        "worst_row": worst_row.id if worst_row else None,
        "supported_fraction": (n - len(miss)) / n if n else 1.0, "ranking": ranking(results),
    }


def check_group_key(key: str) -> None:
    require(key in GROUP_KEYS, "by", f"unknown {key!r}; allowed: {', '.join(GROUP_KEYS)}")


def by_group(results: list[RowResult], key: str) -> list[dict[str, object]]:
    """Rows summarised by ``key`` (gpu, framework or kind): count, MAPE and the error range of each
    group, unsupported rows counted as misses of 100 % as in the overall MAPE; largest group first."""
    check_group_key(key)
    groups: dict[str, list[RowResult]] = {}
    for r in results:
        groups.setdefault(getattr(r, key) or "?", []).append(r)
    out = []
    for name, rs in groups.items():
        errs = [r.error for r in rs if r.supported and r.error is not None]
        misses = sum(not r.supported for r in rs)
        out.append({"group": name, "rows": len(rs), "unsupported": misses,
                    "mape": (sum(abs(e) for e in errs) + misses) / len(rs),
                    "min_error": min(errs, default=None), "max_error": max(errs, default=None)})
    return sorted(out, key=lambda g: (-int(g["rows"]), str(g["group"])))  # type: ignore[call-overload]


def ranking(results: list[RowResult]) -> list[dict[str, object]]:
    """Where a model/GPU/count/precision group has several layouts: does predicted order match?"""
    groups: dict[str, list[RowResult]] = {}
    for r in results:
        if r.supported and r.predicted_step_time_s is not None:
            groups.setdefault(r.group, []).append(r)
    out = []
    for g, rs in groups.items():
        if len({r.layout for r in rs}) < 2:
            continue
        measured = [r.id for r in sorted(rs, key=lambda r: r.measured_step_time_s or 0)]
        predicted = [r.id for r in sorted(rs, key=lambda r: r.predicted_step_time_s or 0)]
        out.append({"group": g, "measured_order": measured, "predicted_order": predicted,
                    "match": measured == predicted})
    return out
