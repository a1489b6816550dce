"""Export a layout to the launchers people use, and read their configs back.

Formats (flag and key names from each project's documentation):

* Megatron-LM command-line arguments (``megatron/training/arguments.py``):
  ``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``,
  ``--num-layers-per-virtual-pipeline-stage``, ``--context-parallel-size``,
  ``--expert-model-parallel-size``, ``--micro-batch-size``, ``--global-batch-size``, ``--seq-length``,
  ``--bf16`` / ``--fp8-format hybrid`` / ``--fp4-format e2m1``, ``--recompute-granularity``,
  ``--recompute-modules``, ``--sequence-parallel``, ``--use-distributed-optimizer``; with the model,
  its architecture, and with the framework, the flags of its behaviours (:mod:`supercluster.formats.megatron_args`).
* TorchTitan job TOML (``torchtitan/config/job_config.py``, its mid-2025 schema; FSDP2 has no ZeRO-1:
  stage 1 exports as 2, ``fsdp_reshard_after_forward = "never"``): ``[parallelism]`` degrees
  (``data_parallel_replicate_degree``, ``data_parallel_shard_degree``, ``tensor_parallel_degree``,
  ``pipeline_parallel_degree``, ``context_parallel_degree``, ``expert_parallel_degree``,
  ``expert_tensor_parallel_degree``, ``pipeline_parallel_schedule``, ``pipeline_parallel_microbatch_size``,
  ``pipeline_parallel_split_points``), ``[training]`` (``local_batch_size``, ``global_batch_size``,
  ``seq_len``, ``mixed_precision_param``, ``compile``), ``[activation_checkpoint] mode``,
  ``[model] converters = ["float8"]``; and the same as ``--section.key value`` overrides.
* DeepSpeed JSON (deepspeed.ai/docs/config-json): ``train_batch_size``,
  ``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``, ``zero_optimization.stage``,
  ``bf16.enabled``, ``activation_checkpointing``, ``tensor_parallel.autotp_size``,
  ``pipeline.stages``, plus the sequence length under a ``supercluster`` block (DeepSpeed has no key).

Import reads what the export writes and the common hand-written variants; anything missing takes
the :class:`~supercluster.parallelism.layout.Layout` default; anything unreadable is an :class:`InputError`.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from ..errors import InputError, is_whole, require, subtable
from ..files import parse_json, parse_toml, read_input
from ..models.spec import ModelSpec
from ..parallelism import pplayout
from ..parallelism.framework import DEFAULT_FRAMEWORK, MEGATRON_FP8_RECIPE, Framework, get_framework
from ..parallelism.layout import Layout
from . import megatron_args

FORMATS = ("megatron", "torchtitan", "deepspeed")
TT_SCHEDULE = {True: "Interleaved1F1B", False: "1F1B"}


# ---- export ---------------------------------------------------------------------------------
def to_megatron_args(layout: Layout, model: ModelSpec | None = None, framework: Framework | None = None) -> str:
    """Megatron-LM arguments for ``layout``; with ``model`` its architecture, with ``framework`` the
    flags that make Megatron-LM behave as that profile is priced (overlaps, gradient precision,
    dropout, the pipeline split: :func:`supercluster.formats.megatron_args.framework_args`)."""
    a: list[str] = [
        f"--tensor-model-parallel-size {layout.tp}", f"--pipeline-model-parallel-size {layout.pp}",
        f"--context-parallel-size {layout.cp}", f"--expert-model-parallel-size {layout.ep}",
        *([f"--expert-tensor-parallel-size {layout.etp}"] if layout.etp != layout.tp else []),
        f"--micro-batch-size {layout.micro_batch}", f"--global-batch-size {layout.global_batch}",
        f"--seq-length {layout.seq_len}",
    ]
    if layout.pp_layout is not None:  # the layout string carries the virtual stages too
        a.append(f"--pipeline-model-parallel-layout {shlex.quote(layout.pp_layout)}")
    elif layout.vpp > 1:
        layers = model.num_layers if model else None
        if layers and layers % (layout.pp * layout.vpp) == 0:
            a.append(f"--num-layers-per-virtual-pipeline-stage {layers // (layout.pp * layout.vpp)}")
        else:
            a.append(f"--num-virtual-stages-per-pipeline-rank {layout.vpp}")
    a.append("--bf16")
    if layout.precision == "fp8":
        # (Megatron-LM's --fp8-recipe names current scaling "tensorwise"; delayed is its default)
        recipe = framework.fp8_recipe if framework is not None else "delayed"
        a.append("--fp8-format hybrid" + (f" --fp8-recipe {MEGATRON_FP8_RECIPE[recipe]}" if recipe != "delayed"
                                          else ""))
    elif layout.precision == "fp4":  # NVFP4 (Megatron-Core --fp4-format e2m1 --fp4-recipe nvfp4)
        a.append("--fp4-format e2m1 --fp4-recipe nvfp4")
    elif layout.precision == "fp16":
        a[-1] = "--fp16"
    if layout.recompute == "selective":
        a.append("--recompute-granularity selective" + (
            f" --recompute-modules {' '.join(layout.recompute_modules)}" if layout.recompute_modules else ""))
    elif layout.recompute == "full" and layout.recompute_layers:
        a.append("--recompute-granularity full --recompute-method block "
                 f"--recompute-num-layers {layout.recompute_layers}")
    elif layout.recompute == "full":
        a.append("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
    # sequence parallelism: the layout's, else the framework's default (without one: off)
    sp = bool(framework.sequence_parallel) if layout.sequence_parallel is None and framework is not None \
        else bool(layout.sequence_parallel)
    if sp and layout.tp > 1:
        a.append("--sequence-parallel")
    if layout.zero_stage >= 1:
        a.append("--use-distributed-optimizer")
    if layout.zero_stage >= 2:
        strategy = "optim_grads" if layout.zero_stage == 2 else "optim_grads_params"
        a.append(f"--data-parallel-sharding-strategy {strategy} --use-megatron-fsdp")
    if framework is not None:
        a += megatron_args.framework_args(framework, layout, sp, moe=model is not None and model.is_moe)
    if model is not None:
        a += megatron_args.model_args(model, layout.seq_len)
    return " \\\n  ".join(a)


def _tt_sections(layout: Layout, model: ModelSpec | None = None,
                 framework: Framework | None = None) -> dict[str, dict[str, Any]]:
    """torchtitan's job config (torchtitan/config/job_config.py) for ``layout``. Under pipeline
    parallelism a step is ``grad_accum`` schedule passes (one by default): each data-parallel rank's
    batch, or that share of it, as its ``local_batch_size``, cut into
    ``pipeline_parallel_microbatch_size`` micro-batches, torchtitan accumulating the passes; without it,
    ``local_batch_size`` is the micro-batch and torchtitan accumulates gradients up to
    ``global_batch_size``. Interleaved chunks are placed by split points: the explicit layout's, or
    torchtitan's own split of the model's layers (generate_split_points, what the torchtitan
    profile prices); tensor parallelism shards the norms (sequence parallelism) in torchtitan's plan."""
    shard = layout.dp if layout.zero_stage >= 1 else 1
    par: dict[str, Any] = {
        "data_parallel_replicate_degree": layout.dp // shard, "data_parallel_shard_degree": shard,
        "fsdp_reshard_after_forward": "always" if layout.zero_stage >= 3 else "never",
        "tensor_parallel_degree": layout.tp, "pipeline_parallel_degree": layout.pp,
        "context_parallel_degree": layout.cp, "expert_parallel_degree": layout.ep,
    }
    if layout.ep > 1:  # (torchtitan's default is 1: experts not split over the TP ranks)
        par["expert_tensor_parallel_degree"] = layout.etp
    training: dict[str, Any] = {"local_batch_size": layout.micro_batch, "global_batch_size": layout.global_batch,
                                "seq_len": layout.seq_len,
                                "mixed_precision_param": "float16" if layout.precision == "fp16" else "bfloat16"}
    if layout.pp > 1:
        par["pipeline_parallel_schedule"] = TT_SCHEDULE[layout.vpp > 1]
        par["pipeline_parallel_microbatch_size"] = layout.micro_batch
        training["local_batch_size"] = layout.global_batch // (layout.dp * layout.grad_accum)
        if layout.pp_layout is not None:
            par["pipeline_parallel_split_points"] = _tt_split_points(layout.pp_layout)
        elif layout.vpp > 1:
            from ..parallelism.pplayout import chunk_layers

            require(model is not None, "vpp", f"{layout.vpp} interleaved chunks go to torchtitan as split points, "
                                              "which need the model's layers (pass the model)")
            assert model is not None
            per = chunk_layers(model.num_layers, layout.pp, layout.vpp, split="middle")
            stages = [per[s][c] for c in range(layout.vpp) for s in range(layout.pp)]
            par["pipeline_parallel_split_points"] = [f"layers.{sum(stages[:k])}" for k in range(1, len(stages))]
    if framework is not None and framework.family == "torchtitan" and framework.elementwise == "fused":
        training["compile"] = True
    sections: dict[str, dict[str, Any]] = {
        "parallelism": par, "training": training,
        # "op": per-op selective checkpointing, what the cost model prices for torchtitan's selective
        "activation_checkpoint": {"mode": layout.recompute, **(
            {"selective_ac_option": "op"} if layout.recompute == "selective" else {})},
    }
    if layout.precision == "fp8":  # torchao's Float8Linear swapped in by the model converter
        sections["model"] = {"converters": ["float8"]}
    return sections


def _tt_split_points(pp_layout: str) -> list[str]:
    """An explicit layout as torchtitan's pipeline_parallel_split_points: the first layer of every
    virtual stage after the first (torchtitan places the embedding first and the head last itself)."""
    stages = pplayout.parse(pp_layout)
    require("m" not in "".join(stages), "pp_layout", "torchtitan has no multi-token-prediction modules to place")
    require(all("t" in st for st in stages[1:]), "pp_layout",
            "torchtitan's split points cannot express a stage without a layer")
    points, seen = [], 0
    for st in stages[:-1]:
        seen += st.count("t")
        points.append(f"layers.{seen}")
    return points


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (str, list)):
        return json.dumps(v)
    return str(v)


def to_torchtitan_toml(layout: Layout, model: ModelSpec | None = None, framework: Framework | None = None) -> str:
    lines = ["# TorchTitan job config written by supercluster"]
    for section, kv in _tt_sections(layout, model, framework).items():
        lines.append(f"\n[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in kv.items()]
    return "\n".join(lines) + "\n"


def to_torchtitan_overrides(layout: Layout, model: ModelSpec | None = None, framework: Framework | None = None) -> str:
    # (a list goes on the command line comma-separated, as torchtitan's argument parser reads it)
    return " ".join(f"--{s}.{k} {','.join(v) if isinstance(v, list) else _toml_value(v).strip(chr(34))}"
                    for s, kv in _tt_sections(layout, model, framework).items() for k, v in kv.items())


def to_deepspeed_json(layout: Layout) -> str:
    cfg: dict[str, Any] = {
        "train_batch_size": layout.global_batch,
        "train_micro_batch_size_per_gpu": layout.micro_batch,
        "gradient_accumulation_steps": layout.num_microbatches,
        "zero_optimization": {"stage": layout.zero_stage},
        "bf16": {"enabled": layout.precision in ("bf16", "fp8")},
        "fp16": {"enabled": layout.precision == "fp16"},
        "activation_checkpointing": {"partition_activations": layout.recompute == "full",
                                     "contiguous_memory_optimization": False},
        "tensor_parallel": {"autotp_size": layout.tp},
        "pipeline": {"stages": layout.pp},
        "supercluster": {"seq_len": layout.seq_len, "cp": layout.cp, "ep": layout.ep, "vpp": layout.vpp,
                         "recompute": layout.recompute, "precision": layout.precision,
                         "sequence_parallel": bool(layout.sequence_parallel)},
    }
    return json.dumps(cfg, indent=2) + "\n"


#: The profile a plan to export is priced under when none is named: the framework that runs the
#: launcher's config (a Megatron-LM script: Megatron-Core as NVIDIA's recipes run it; read back, its
#: flags describe the same behaviour). A profile named for the plan must be of the format's family.
EXPORT_FRAMEWORK = {"megatron": DEFAULT_FRAMEWORK, "torchtitan": "torchtitan", "deepspeed": "deepspeed"}
EXPORT_FAMILIES = {"megatron": ("megatron", "nemo-megatron"), "torchtitan": ("torchtitan",),
                   "deepspeed": ("deepspeed",)}


def export_framework(fmt: str, framework: str | None) -> str:
    """The framework a plan exported as ``fmt`` is priced under: ``framework`` where it runs that
    launcher's config (an InputError otherwise), else :data:`EXPORT_FRAMEWORK`'s."""
    require(fmt in FORMATS, "export", f"unknown {fmt!r}; allowed: {', '.join(FORMATS)}")
    if framework is None:
        return EXPORT_FRAMEWORK[fmt]
    family = get_framework(framework).family
    require(family in EXPORT_FAMILIES[fmt], "framework",
            f"{framework} does not run a {fmt} config, so the exported plan would be priced for another framework; "
            f"give --framework {' or '.join(EXPORT_FAMILIES[fmt])}, or leave it out")
    return framework


def export(layout: Layout, fmt: str, model: ModelSpec | None = None, framework: Framework | None = None) -> str:
    require(fmt in FORMATS, "format", f"unknown {fmt!r}; allowed: {', '.join(FORMATS)}")
    require(fmt == "megatron" or not layout.recompute_modules, "recompute_modules",
            f"{', '.join(layout.recompute_modules)} are Megatron-Core recompute modules; {fmt} has no such setting "
            "(export to megatron, or leave them out)")
    require(fmt != "torchtitan" or layout.precision != "fp4", "precision",
            "torchtitan's job config (mid-2025 schema) has no NVFP4 training switch; export fp4 to megatron "
            "(--fp4-format e2m1), or plan torchtitan in fp8 / bf16")
    require(fmt != "deepspeed" or layout.pp_layout is None, "pp_layout",
            "DeepSpeed's config has no explicit pipeline layout (its PipelineModule partitions in code); "
            "export to megatron or torchtitan")
    require(fmt == "torchtitan" or layout.pp == 1 or layout.grad_accum == 1, "grad_accum",
            f"{fmt} runs every micro-batch of a step in one pipeline schedule; {layout.grad_accum} schedules a step "
            "is torchtitan's gradient accumulation under PP (export to torchtitan, or use grad_accum 1)")
    require(fmt != "deepspeed" or layout.vpp == 1, "vpp",
            f"DeepSpeed's pipeline engine runs 1F1B over contiguous stages, with no interleaved schedule; "
            f"got vpp {layout.vpp} (use vpp 1, or export to megatron or torchtitan)")
    if fmt == "megatron":
        return to_megatron_args(layout, model, framework) + "\n"
    if fmt == "torchtitan":
        return to_torchtitan_toml(layout, model, framework)
    return to_deepspeed_json(layout)


# ---- import ---------------------------------------------------------------------------------
def _as_int(field: str, v: Any) -> int:
    """A whole number from a config value (an int, a whole float, or the text of one)."""
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            pass
    elif is_whole(v):
        return int(v)
    raise InputError(field, f"must be an integer, got {v!r}")


def from_megatron_args(text: str, num_gpus: int | None = None) -> Layout:
    """A Megatron-LM launch script's layout; without ``num_gpus`` the GPUs its torchrun line starts
    (``--nnodes`` x ``--nproc-per-node``)."""
    args = megatron_args.parse_args(text)
    if num_gpus is None:
        num_gpus = megatron_args.world_size(args)
    require("global-batch-size" in args, "global-batch-size", "missing from the Megatron arguments")
    tp = _as_int("tensor-model-parallel-size", args.get("tensor-model-parallel-size", 1))
    pp = _as_int("pipeline-model-parallel-size", args.get("pipeline-model-parallel-size", 1))
    cp = _as_int("context-parallel-size", args.get("context-parallel-size", 1))
    for flag, v in (("tensor-model-parallel-size", tp), ("pipeline-model-parallel-size", pp),
                    ("context-parallel-size", cp)):
        require(v >= 1, flag, f"must be a positive integer, got {v}")
    vpp = 1
    pp_layout = args.get("pipeline-model-parallel-layout")
    uneven = ("decoder-first-pipeline-num-layers", "decoder-last-pipeline-num-layers")
    if pp_layout is None and any(k in args for k in uneven):
        pp_layout = _uneven_layout(args, pp)
    if pp_layout is not None:
        vpp = pplayout.chunks_per_rank(str(pp_layout), pp)
    elif "num-virtual-stages-per-pipeline-rank" in args:
        vpp = _as_int("num-virtual-stages-per-pipeline-rank", args["num-virtual-stages-per-pipeline-rank"])
    elif "num-layers-per-virtual-pipeline-stage" in args:
        layers = _as_int("num-layers", args.get("num-layers", 0))
        per = _as_int("num-layers-per-virtual-pipeline-stage", args["num-layers-per-virtual-pipeline-stage"])
        require(layers > 0, "num-layers", "needed with --num-layers-per-virtual-pipeline-stage")
        require(per > 0, "num-layers-per-virtual-pipeline-stage", f"must be a positive integer, got {per}")
        vpp = layers // (pp * per)
    dp = _dp(num_gpus, tp * pp * cp, args.get("data-parallel-size"))
    # (--recompute-activations: Megatron-LM's older spelling of selective recompute)
    rc = args.get("recompute-granularity", "selective" if args.get("recompute-activations") else "none")
    rc_layers = (_as_int("recompute-num-layers", args.get("recompute-num-layers", 0))
                 if rc == "full" and args.get("recompute-method") == "block" else 0)
    precision = ("fp4" if "fp4-format" in args else "fp8" if "fp8-format" in args
                 else "fp16" if args.get("fp16") else "bf16")
    zero = 1 if args.get("use-distributed-optimizer") else 0
    strategy = args.get("data-parallel-sharding-strategy")
    if strategy in ("optim_grads", "optim_grads_params"):
        zero = 2 if strategy == "optim_grads" else 3
    return Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=_as_int("expert-model-parallel-size",
                                                          args.get("expert-model-parallel-size", 1)),
                  vpp=vpp, micro_batch=_as_int("micro-batch-size", args.get("micro-batch-size", 1)),
                  global_batch=_as_int("global-batch-size", args["global-batch-size"]),
                  seq_len=_as_int("seq-length", args.get("seq-length", 2048)), precision=precision,
                  recompute=str(rc), zero_stage=zero, sequence_parallel=bool(args.get("sequence-parallel", False)),
                  recompute_layers=rc_layers,
                  recompute_modules=tuple(args.get("recompute-modules", ())) if rc == "selective" else (),
                  expert_tp=(_as_int("expert-tensor-parallel-size", args["expert-tensor-parallel-size"])
                             if "expert-tensor-parallel-size" in args else None),
                  pp_layout=None if pp_layout is None else str(pp_layout))


def _uneven_layout(args: dict[str, Any], pp: int) -> str:
    """Megatron-LM's --decoder-first/last-pipeline-num-layers as a layout string: the first and the
    last (virtual) stage hold the layers given, the stages between share the rest evenly."""
    layers = _as_int("num-layers", args.get("num-layers", 0))
    require(layers > 0, "num-layers", "needed with --decoder-first/last-pipeline-num-layers")
    if "num-virtual-stages-per-pipeline-rank" in args:
        stages = pp * _as_int("num-virtual-stages-per-pipeline-rank", args["num-virtual-stages-per-pipeline-rank"])
    elif "num-layers-per-virtual-pipeline-stage" in args:
        raise InputError("num-layers-per-virtual-pipeline-stage",
                         "does not combine with --decoder-first/last-pipeline-num-layers; use "
                         "--num-virtual-stages-per-pipeline-rank")
    else:
        stages = pp
    first = _as_int("decoder-first-pipeline-num-layers", args.get("decoder-first-pipeline-num-layers", -1))
    last = _as_int("decoder-last-pipeline-num-layers", args.get("decoder-last-pipeline-num-layers", -1))
    middle_stages = stages - (first >= 0) - (last >= 0)
    rest = layers - max(first, 0) - max(last, 0)
    require(middle_stages > 0 and rest % middle_stages == 0 and rest >= 0, "decoder-first-pipeline-num-layers",
            f"the {rest} layers left are not divisible by the {middle_stages} other pipeline stages")
    per = rest // max(middle_stages, 1)
    return pplayout.from_stage_layers([first if first >= 0 else per] + [per] * (stages - 2)
                                      + [last if last >= 0 else per])


def _dp(num_gpus: int | None, model_parallel: int, explicit: Any) -> int:
    if explicit is not None:
        return _as_int("data-parallel-size", explicit)
    require(num_gpus is not None, "gpus", "the config does not give the data-parallel size: pass --gpus")
    assert num_gpus is not None
    require(model_parallel > 0, "config", f"tp x pp x cp = {model_parallel}: each degree must be at least 1")
    require(num_gpus % model_parallel == 0, "gpus",
            f"{num_gpus} is not divisible by the config's tp x pp x cp = {model_parallel}")
    return num_gpus // model_parallel


def from_torchtitan_toml(text: str, num_gpus: int | None = None, num_layers: int | None = None) -> Layout:
    """A torchtitan job config as a layout; its pipeline_parallel_split_points, if any, become an
    explicit pipeline layout (which needs the model's ``num_layers`` for the last stage)."""
    cfg = parse_toml(text, "config")
    par, tr = subtable(cfg, "parallelism"), subtable(cfg, "training")
    tp = _as_int("tensor_parallel_degree", par.get("tensor_parallel_degree", 1))
    pp = _as_int("pipeline_parallel_degree", par.get("pipeline_parallel_degree", 1))
    cp = _as_int("context_parallel_degree", par.get("context_parallel_degree", 1))
    rep = _as_int("data_parallel_replicate_degree", par.get("data_parallel_replicate_degree", 1))
    shard = _as_int("data_parallel_shard_degree", par.get("data_parallel_shard_degree", -1))
    if shard == -1:  # TorchTitan: -1 = whatever is left
        require(num_gpus is not None, "gpus", "data_parallel_shard_degree = -1 needs --gpus")
        assert num_gpus is not None
        require(tp * pp * cp * rep > 0, "parallelism", "every degree must be at least 1")
        shard = num_gpus // (tp * pp * cp * rep)
    local = _as_int("local_batch_size", tr.get("local_batch_size", tr.get("batch_size", 1)))
    dp = rep * shard
    gbs = _as_int("global_batch_size", tr.get("global_batch_size", -1))
    if gbs <= 0:
        gbs = local * dp
    # under PP the schedule cuts the local batch into micro-batches of this size (torchtitan's default 1)
    micro = _as_int("pipeline_parallel_microbatch_size", par.get("pipeline_parallel_microbatch_size", 1)) \
        if pp > 1 else local
    # under PP each local batch is one schedule pass, and torchtitan accumulates up to the global batch
    require(pp == 1 or gbs % (local * dp) == 0, "global_batch_size",
            f"{gbs} must be a multiple of local_batch_size x data-parallel degree = {local} x {dp} under pipeline "
            "parallelism (each local batch is one schedule pass)")
    ga = gbs // (local * dp) if pp > 1 else 1
    resh = par.get("fsdp_reshard_after_forward", "default")
    zero = 0 if shard == 1 else (2 if resh == "never" else 3)  # FSDP2 has no ZeRO-1
    mode = subtable(cfg, "activation_checkpoint").get("mode", "selective")
    converters = subtable(cfg, "model").get("converters", [])
    require(isinstance(converters, (list, str)), "converters", f"must be a list of names, got {converters!r}")
    fp8 = (any(c in ("float8", "mx") for c in ([converters] if isinstance(converters, str) else converters))
           or bool(subtable(cfg, "float8").get("enable_float8_linear", False)))  # (torchtitan 2024's switch)
    # a looped schedule without split points: torchtitan's default of two stages per rank
    looped = "Interleaved" in str(par.get("pipeline_parallel_schedule", "")) and pp > 1
    ep = _as_int("expert_parallel_degree", par.get("expert_parallel_degree", 1))
    etp = _as_int("expert_tensor_parallel_degree", par.get("expert_tensor_parallel_degree", 1)) if ep > 1 else tp
    points = par.get("pipeline_parallel_split_points") or []
    pp_layout = _tt_layout(points, num_layers) if points else None
    vpp = pplayout.chunks_per_rank(pp_layout, pp) if pp_layout else (2 if looped else 1)
    return Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, micro_batch=micro, global_batch=gbs,
                  seq_len=_as_int("seq_len", tr.get("seq_len", 2048)), precision="fp8" if fp8 else "bf16",
                  recompute=str(mode), zero_stage=zero, sequence_parallel=tp > 1, pp_layout=pp_layout,
                  expert_tp=etp if etp != tp else None, grad_accum=ga)


def torchtitan_compiles(text: str) -> bool:
    """Whether a torchtitan job config turns torch.compile on (``[training] compile``, or a
    ``[compile]`` table's ``enable`` in later versions)."""
    try:
        cfg = parse_toml(text, "config")
    except InputError:
        return False
    return bool(subtable(cfg, "training").get("compile", False)) or bool(subtable(cfg, "compile").get("enable", False))


def _tt_layout(points: Any, num_layers: int | None) -> str:
    """torchtitan split points ("layers.N": where a stage begins) as a layout string."""
    require(isinstance(points, list) and all(isinstance(x, str) for x in points), "pipeline_parallel_split_points",
            f"must be a list of layer names like \"layers.8\", got {points!r}")
    starts = []
    for x in points:
        m = re.fullmatch(r"layers\.(\d+)", x.strip())
        require(m is not None, "pipeline_parallel_split_points", f"cannot read {x!r}; use names like \"layers.8\"")
        assert m is not None
        starts.append(int(m.group(1)))
    require(num_layers is not None, "pipeline_parallel_split_points",
            "needs the model (--model) to size the last stage")
    assert num_layers is not None
    bounds = [0, *starts, num_layers]
    sizes = [b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    require(min(sizes) > 0, "pipeline_parallel_split_points",
            f"{points} must increase within the model's {num_layers} layers")
    return pplayout.from_stage_layers(sizes)


def from_deepspeed_json(text: str, num_gpus: int | None = None) -> Layout:
    cfg = parse_json(text, "config")
    require(isinstance(cfg, dict), "config", "a DeepSpeed config must be a JSON object")
    extra = subtable(cfg, "supercluster")
    tp = _as_int("tensor_parallel.autotp_size", subtable(cfg, "tensor_parallel").get("autotp_size", 1))
    pp_raw = subtable(cfg, "pipeline").get("stages", 1)
    pp = 1 if pp_raw == "auto" else _as_int("pipeline.stages", pp_raw)
    cp = _as_int("supercluster.cp", extra.get("cp", 1))
    mb = _as_int("train_micro_batch_size_per_gpu", cfg.get("train_micro_batch_size_per_gpu", 1))
    require("train_batch_size" in cfg or "gradient_accumulation_steps" in cfg, "train_batch_size",
            "give train_batch_size, or micro batch and gradient_accumulation_steps")
    dp = _dp(num_gpus, tp * pp * cp, None)
    if "train_batch_size" in cfg:
        gbs = _as_int("train_batch_size", cfg["train_batch_size"])
    else:
        gbs = mb * dp * _as_int("gradient_accumulation_steps", cfg["gradient_accumulation_steps"])
    precision = str(extra.get("precision", "fp16" if subtable(cfg, "fp16").get("enabled") else "bf16"))
    ac = subtable(cfg, "activation_checkpointing")
    recompute = str(extra.get("recompute", "full" if ac.get("partition_activations") else "none"))
    return Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=_as_int("supercluster.ep", extra.get("ep", 1)),
                  vpp=_as_int("supercluster.vpp", extra.get("vpp", 1)), micro_batch=mb, global_batch=gbs,
                  seq_len=_as_int("supercluster.seq_len", extra.get("seq_len", 2048)), precision=precision,
                  recompute=recompute, zero_stage=_as_int("zero_optimization.stage",
                                                          subtable(cfg, "zero_optimization").get("stage", 0)),
                  sequence_parallel=bool(extra.get("sequence_parallel", False)))


def detect_format(path: Path) -> str:
    suffix = path.suffix.lower()
    return {".json": "deepspeed", ".toml": "torchtitan"}.get(suffix, "megatron")


def load_layout(path: str | Path, num_gpus: int | None = None, fmt: str | None = None,
                num_layers: int | None = None) -> Layout:
    """Read a launcher config file into a :class:`Layout` (format from ``fmt`` or the extension);
    ``num_layers`` (the model's) places a torchtitan config's split points."""
    p = Path(path)
    require(p.is_file(), "config", f"no such file: {p}")
    kind = fmt or detect_format(p)
    require(kind in FORMATS, "format", f"unknown {kind!r}; allowed: {', '.join(FORMATS)}")
    text = read_input(p, "config")
    if kind == "torchtitan":
        return from_torchtitan_toml(text, num_gpus, num_layers)
    return {"megatron": from_megatron_args, "deepspeed": from_deepspeed_json}[kind](text, num_gpus)


def _megatron_script(path: Path) -> dict[str, Any] | None:
    """The flags of ``path`` when it is a Megatron-LM arguments file (None otherwise, or when it
    cannot be read: load_layout then names the problem)."""
    if not path.is_file() or detect_format(path) != "megatron":
        return None
    try:
        return megatron_args.parse_args(read_input(path, "config"))
    except InputError:
        return None


def read_config(config: str | Path, *, model: str | None = None, framework: str | None = None,
                num_gpus: int | None = None) -> tuple[str, str | Framework, Layout]:
    """The model, framework and layout a launcher config describes: a Megatron-LM script its model
    (unless ``model``) and the behaviours its flags switch; a torchtitan job TOML torchtitan (compiled
    where it says so); a DeepSpeed JSON DeepSpeed. ``model`` defaults to Llama 3 405B where the
    config names none; ``framework`` overrides what the config describes."""
    path = Path(config)
    script = _megatron_script(path)
    if model is None:
        model = str(config) if script is not None and megatron_args.has_model(script) else "llama3-405b"
    fw: str | Framework
    if framework is not None:
        fw = framework
    elif script is not None:
        fw = megatron_args.framework_from_args(script, name=f"megatron-lm ({path.name})")
    else:
        kind = detect_format(path) if path.is_file() else "megatron"
        if kind == "torchtitan":
            fw = "torchtitan+compile" if torchtitan_compiles(read_input(path, "config")) else "torchtitan"
        else:
            fw = "deepspeed" if kind == "deepspeed" else DEFAULT_FRAMEWORK
    from .load import load_model

    return model, fw, load_layout(path, num_gpus=num_gpus, num_layers=load_model(model).num_layers)
