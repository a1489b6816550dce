"""Export a layout to the launchers people use, and read their configs back.

Formats (flag and key names from each project's documentation):

* Megatron-LM command-line arguments (``megatron/training/arguments.py``):
  ``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``,
  ``--num-layers-per-virtual-pipeline-stage``, ``--context-parallel-size``,
  ``--expert-model-parallel-size``, ``--micro-batch-size``, ``--global-batch-size``, ``--seq-length``,
  ``--bf16`` / ``--fp8-format hybrid`` / ``--fp4-format e2m1``, ``--recompute-granularity``,
  ``--recompute-modules``, ``--sequence-parallel``, ``--use-distributed-optimizer``; with the model,
  its architecture, and with the framework, the flags of its behaviours (:mod:`supercluster.formats.megatron_flags`).
* torchtitan 0.3's launch line (``--export torchtitan``; :mod:`supercluster.formats.torchtitan`).
* TorchTitan job TOML (``--export torchtitan-toml``; ``torchtitan/config/job_config.py``, its mid-2025 schema,
  which torchtitan 0.3 replaced by Python configs; FSDP2 has no ZeRO-1:
  stage 1 exports as 2, ``fsdp_reshard_after_forward = "never"``): ``[parallelism]`` degrees
  (``data_parallel_replicate_degree``, ``data_parallel_shard_degree``, ``tensor_parallel_degree``,
  ``pipeline_parallel_degree``, ``context_parallel_degree``, ``expert_parallel_degree``,
  ``expert_tensor_parallel_degree``, ``pipeline_parallel_schedule``, ``pipeline_parallel_microbatch_size``,
  ``pipeline_parallel_split_points``), ``[training]`` (``local_batch_size``, ``global_batch_size``,
  ``seq_len``, ``mixed_precision_param``, ``compile``), ``[activation_checkpoint] mode``,
  ``[model] converters = ["float8"]``; and the same as ``--section.key value`` overrides.
* DeepSpeed JSON (deepspeed.ai/docs/config-json): ``train_batch_size``,
  ``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``, ``zero_optimization.stage``,
  ``zero_optimization.overlap_comm`` (the DP overlap priced; absent: DeepSpeed's default), ``bf16.enabled``,
  ``activation_checkpointing``, ``tensor_parallel.autotp_size``,
  ``pipeline.stages``, plus the sequence length under a ``supercluster`` block (DeepSpeed has no key).
* MaxText's launch line (``--export maxtext``; :mod:`supercluster.formats.maxtext`): ``key=value``
  overrides of its base.yml, the ICI / DCN mesh axes, ``per_device_batch_size``, ``remat_policy``.

Import reads what the export writes and the common hand-written variants; anything missing takes
the :class:`~supercluster.parallelism.layout.Layout` default; anything unreadable is an :class:`InputError`.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ..errors import InputError, config_int, require, subtable
from ..files import parse_json, read_input, user_path
from ..models.spec import ModelSpec
from ..parallelism import pplayout
from ..parallelism.framework import DEFAULT_FRAMEWORK, MEGATRON_FP8_RECIPE, Framework, get_framework
from ..parallelism.layout import Layout
from ..parallelism.suffixes import DP_OVERLAP_SUFFIX, NO_DP_OVERLAP_SUFFIX
from . import maxtext, megatron_args, megatron_flags, torchtitan
from .torchtitan import (  # noqa: F401 (the TOML writers and readers, re-exported for the launchers' callers)
    from_torchtitan_toml,
    to_torchtitan_overrides,
    to_torchtitan_toml,
    toml_profile,
    torchtitan_compiles,
    torchtitan_layout,
)

#: "torchtitan": torchtitan 0.3's launch line (:mod:`supercluster.formats.torchtitan`); "torchtitan-toml": the job
#: TOML of torchtitan up to early 2026, still read
FORMATS = ("megatron", "megatron-launch", "torchtitan", "torchtitan-toml", "deepspeed", "maxtext")


# ---- export ---------------------------------------------------------------------------------
def split_args(layout: Layout, num_layers: int | None, counts_head: bool) -> list[str]:
    """How Megatron-Core is told a split that counts the embedding and the loss as a layer each
    (``counts_head``, as the step was priced: :attr:`StepBreakdown.split_counts_head`): the
    account_for_* flags where the L + 2 slots divide evenly over the pp x vpp chunks (its
    TransformerConfig refuses them otherwise: transformer_config.py), else the same split as an explicit
    ``--pipeline-model-parallel-layout``."""
    if not counts_head or layout.pp == 1 or layout.pp_layout is not None:
        return []
    require(num_layers is not None, "model", "a pipeline split that counts the embedding and the loss needs the "
                                             "model's layers")
    assert num_layers is not None
    if (num_layers + 2) % (layout.pp * layout.vpp) == 0:
        return ["--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"]
    per = pplayout.chunk_layers(num_layers, layout.pp, layout.vpp, counts_head=True)
    stages = [per[s][c] for c in range(layout.vpp) for s in range(layout.pp)]
    return [f"--pipeline-model-parallel-layout {shlex.quote(pplayout.from_stage_layers(stages))}"]


def to_megatron_args(layout: Layout, model: ModelSpec | None = None, framework: Framework | None = None,
                     counts_head: bool = False) -> str:
    """Megatron-LM arguments for ``layout``; with ``model`` its architecture, with ``framework`` the
    flags that make Megatron-LM behave as that profile is priced (overlaps, gradient precision,
    dropout: :func:`supercluster.formats.megatron_flags.framework_args`); ``counts_head``: the priced
    split counts the embedding and the loss as layers (:func:`supercluster.formats.megatron_args.split_args`)."""
    a: list[str] = [
        f"--tensor-model-parallel-size {layout.tp}", f"--pipeline-model-parallel-size {layout.pp}",
        f"--context-parallel-size {layout.cp}", f"--expert-model-parallel-size {layout.ep}",
        *([f"--expert-tensor-parallel-size {layout.etp}"] if layout.etp != layout.tp else []),
        f"--micro-batch-size {layout.micro_batch}", f"--global-batch-size {layout.global_batch}",
        f"--seq-length {layout.seq_len}",
    ]
    layers = model.num_layers if model else None
    split = split_args(layout, layers, counts_head)
    if layout.pp_layout is not None:  # the layout string carries the virtual stages too
        a.append(f"--pipeline-model-parallel-layout {shlex.quote(layout.pp_layout)}")
    elif split and split[0].startswith("--pipeline-model-parallel-layout"):
        pass  # (written below, with the virtual stages in it)
    elif layout.vpp > 1:
        if layers and layers % (layout.pp * layout.vpp) == 0 and not split:
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
    if layout.dp_replicate > 1:
        # (Megatron-Core: the distributed optimizer, or Megatron-FSDP, sharded within each of this many
        # data-parallel instances, whose gradients are all-reduced across them: hybrid sharding)
        a.append(f"--num-distributed-optimizer-instances {layout.dp_replicate}")
    if layout.zero_stage >= 2:
        strategy = "optim_grads" if layout.zero_stage == 2 else "optim_grads_params"
        # (Megatron-FSDP's required flags, its user guide docs/discussions/megatron-fsdp-user-guide: the
        # fsdp_dtensor checkpoint format, without which Megatron-LM refuses it, and no gradient-accumulation fusion)
        a.append(f"--data-parallel-sharding-strategy {strategy} --use-megatron-fsdp --ckpt-format fsdp_dtensor "
                 "--no-gradient-accumulation-fusion")
    a += split
    if framework is not None:
        a += megatron_flags.framework_args(framework, layout, sp, moe=model is not None and model.is_moe)
    if model is not None:
        a += megatron_args.model_args(model, layout.seq_len)
    return " \\\n  ".join(a)


def to_megatron_launch(layout: Layout, model: ModelSpec | None = None, framework: Framework | None = None,
                       counts_head: bool = False, gpus_per_node: int = 8) -> str:
    """A runnable Megatron-LM launch script for ``layout``: torchrun over the planned GPUs (``gpus_per_node``
    a node, NNODES of them) starting ``pretrain_gpt.py`` (``pretrain_mamba.py`` for a hybrid) with
    :func:`to_megatron_args`, and the data and training settings the plan does not choose as variables
    to edit (mock data, NullTokenizer, a short cosine schedule). Read back, it is the same job."""
    world = layout.tp * layout.pp * layout.dp * layout.cp
    per = min(world, gpus_per_node)
    require(world % per == 0, "gpus_per_node", f"{world} GPUs do not fill whole nodes of {gpus_per_node}")
    entry = "pretrain_mamba.py" if model is not None and model.recurrent_layers else "pretrain_gpt.py"
    name = model.name if model is not None else "the model given by its own flags"
    ep_overlap = framework is not None and bool(framework.ep_overlap) and layout.ep > 1
    # (Megatron-LM's validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 for TP or CP before Blackwell, so
    # that the TP / CP collectives are issued in order, unless Megatron-FSDP or the EP overlap wants more
    # connections: then it only warns; Blackwell has no such requirement and the setting is harmless there.
    # The EP overlap's compute and communication streams progress together only with more than one: "official
    # EP-overlap recipes commonly use 32", Megatron-LM docs/user-guide/features/moe_a2a_overlap.md)
    connections = ["export CUDA_DEVICE_MAX_CONNECTIONS=32"] if ep_overlap else \
        ["export CUDA_DEVICE_MAX_CONNECTIONS=1"] if (layout.tp > 1 or layout.cp > 1) and layout.zero_stage < 2 else []
    return "\n".join([
        "#!/bin/bash",
        f"# Megatron-LM: {name}, {layout.label()} on {world} GPUs ({world // per} x {per}); planned by supercluster.",
        "# Run from a Megatron-LM checkout on every node (NODE_RANK 0 .. NNODES-1, MASTER_ADDR the first node).",
        "# Set DATA_ARGS and TRAIN_ARGS for a real run; every other flag is the planned job.",
        "set -euo pipefail",
        *connections,
        f"NNODES=${{NNODES:-{world // per}}}",
        f"GPUS_PER_NODE={per}",
        "NODE_RANK=${NODE_RANK:-0}",
        "MASTER_ADDR=${MASTER_ADDR:-localhost}",
        "MASTER_PORT=${MASTER_PORT:-6000}",
        'DATA_ARGS="--mock-data --tokenizer-type NullTokenizer"',
        'TRAIN_ARGS="--train-iters 100 --lr 3.0e-4 --min-lr 3.0e-5 --lr-decay-style cosine --lr-warmup-iters 10"',
        "torchrun --nnodes $NNODES --nproc-per-node $GPUS_PER_NODE --node-rank $NODE_RANK \\",
        "  --master-addr $MASTER_ADDR --master-port $MASTER_PORT \\",
        f"  {entry} \\",
        "  " + to_megatron_args(layout, model, framework, counts_head) + " \\",
        "  $DATA_ARGS $TRAIN_ARGS",
        ""])


def to_deepspeed_json(layout: Layout, framework: Framework | None = None) -> str:
    """``layout`` as a DeepSpeed config; ``overlap_comm`` says whether the priced framework (DeepSpeed's
    profile by default) overlaps this ZeRO stage's gradient reduction."""
    fw = framework or get_framework("deepspeed")
    cfg: dict[str, Any] = {
        "train_batch_size": layout.global_batch,
        "train_micro_batch_size_per_gpu": layout.micro_batch,
        "gradient_accumulation_steps": layout.num_microbatches,
        "zero_optimization": {"stage": layout.zero_stage,
                              "overlap_comm": bool(fw.overlaps_dp(layout.zero_stage))},
        "bf16": {"enabled": layout.precision in ("bf16", "fp8")},
        "fp16": {"enabled": layout.precision == "fp16"},
        "activation_checkpointing": {"partition_activations": layout.recompute == "full",
                                     "contiguous_memory_optimization": False},
        "tensor_parallel": {"autotp_size": layout.tp},
        "pipeline": {"stages": layout.pp},
        # context parallelism as DeepSpeed runs it, Ulysses' all-to-all over a (data, sequence) mesh
        # (deepspeed.initialize builds it from these two keys: deepspeed/__init__.py)
        **({"sequence_parallel_size": layout.cp, "data_parallel_size": layout.dp} if layout.cp > 1 else {}),
        "supercluster": {"seq_len": layout.seq_len, "cp": layout.cp, "ep": layout.ep, "vpp": layout.vpp,
                         "recompute": layout.recompute, "precision": layout.precision,
                         "sequence_parallel": bool(layout.sequence_parallel),
                         # (the model code DeepSpeed trains, where it is not DeepSpeed's profile: Megatron-DeepSpeed)
                         **({"framework": _profile_base(fw)} if _profile_base(fw) != "deepspeed" else {})},
    }
    return json.dumps(cfg, indent=2) + "\n"


#: The profile a plan to export is priced under when none is named: the framework that runs the
#: launcher's config (a Megatron-LM script: Megatron-Core as NVIDIA's recipes run it; read back, its
#: flags describe the same behaviour). A profile named for the plan must be of the format's family.
EXPORT_FRAMEWORK = {"megatron": DEFAULT_FRAMEWORK, "megatron-launch": DEFAULT_FRAMEWORK, "torchtitan": "torchtitan",
                    "torchtitan-toml": "torchtitan",
                    "deepspeed": "deepspeed", "maxtext": "maxtext"}
EXPORT_FAMILIES = {"megatron": ("megatron", "nemo-megatron"), "megatron-launch": ("megatron", "nemo-megatron"),
                   "torchtitan": ("torchtitan",),
                   "torchtitan-toml": ("torchtitan",), "deepspeed": ("deepspeed",), "maxtext": ("maxtext",)}


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


def export(layout: Layout, fmt: str, model: ModelSpec | None = None, framework: Framework | None = None,
           counts_head: bool = False, gpus_per_node: int = 8) -> str:
    """``layout`` as the ``fmt`` launcher's config; ``counts_head``: the step was priced with the embedding
    and the loss counted in the pipeline split (:attr:`~supercluster.perf.step.StepBreakdown.split_counts_head`);
    ``gpus_per_node``: the node size a launch line starts (megatron-launch)."""
    require(fmt in FORMATS, "format", f"unknown {fmt!r}; allowed: {', '.join(FORMATS)}")
    require(fmt.startswith("megatron") or fmt == "maxtext" or not layout.recompute_modules, "recompute_modules",
            f"{', '.join(layout.recompute_modules)} are Megatron-Core recompute modules; {fmt} has no such setting "
            "(export to megatron, or leave them out)")
    require(fmt != "torchtitan-toml" or layout.precision != "fp4", "precision",
            "torchtitan's job config (mid-2025 schema) has no NVFP4 training switch; export fp4 to megatron "
            "(--fp4-format e2m1), or plan torchtitan in fp8 / bf16")
    require(fmt != "deepspeed" or layout.pp_layout is None, "pp_layout",
            "DeepSpeed's config has no explicit pipeline layout (its PipelineModule partitions in code); "
            "export to megatron or torchtitan")
    require(fmt.startswith("torchtitan") or fmt == "maxtext" or layout.pp == 1 or layout.grad_accum == 1, "grad_accum",
            f"{fmt} runs every micro-batch of a step in one pipeline schedule; {layout.grad_accum} schedules a step "
            "is torchtitan's gradient accumulation under PP (export to torchtitan, or use grad_accum 1)")
    require(fmt != "deepspeed" or layout.dp_replicate == 1, "dp_replicate",
            f"{layout.dp_replicate} replicas of a shard group (hybrid sharding) have no setting in a DeepSpeed "
            "config (MiCS's mics_shard_size was removed in DeepSpeed 0.19); export to megatron "
            "(--num-distributed-optimizer-instances) or torchtitan "
            "(data_parallel_replicate_degree), or plan dp_replicate 1")
    require(fmt != "deepspeed" or layout.vpp == 1, "vpp",
            f"DeepSpeed's pipeline engine runs 1F1B over contiguous stages, with no interleaved schedule; "
            f"got vpp {layout.vpp} (use vpp 1, or export to megatron or torchtitan)")
    require(fmt.startswith("megatron") or framework is None or framework.moe_capacity_factor <= 0, "framework",
            f"token-drop routing (capacity factor {framework.moe_capacity_factor if framework else 0:g}) has no "
            f"setting in a {fmt} config (torchtitan's MoE routes dropless; DeepSpeed sets capacity in its MoE "
            "layer's code): export to megatron, or plan dropless")
    if fmt == "megatron":
        return to_megatron_args(layout, model, framework, counts_head) + "\n"
    if fmt == "megatron-launch":
        return to_megatron_launch(layout, model, framework, counts_head, gpus_per_node)
    if fmt == "torchtitan":
        return torchtitan.to_launch(layout, model, framework)
    if fmt == "torchtitan-toml":
        return to_torchtitan_toml(layout, model, framework)
    if fmt == "maxtext":
        return maxtext.to_launch(layout, model, gpus_per_node)
    return to_deepspeed_json(layout, framework)


# ---- import ---------------------------------------------------------------------------------


def from_megatron_args(text: str, num_gpus: int | None = None) -> Layout:
    """A Megatron-LM launch script's layout; without ``num_gpus`` the GPUs its torchrun line starts
    (``--nnodes`` x ``--nproc-per-node``)."""
    args = megatron_args.parse_args(text)
    if num_gpus is None:
        num_gpus = megatron_args.world_size(args)
    require("global-batch-size" in args, "global-batch-size", "missing from the Megatron arguments")
    tp = config_int("tensor-model-parallel-size", args.get("tensor-model-parallel-size", 1))
    pp = config_int("pipeline-model-parallel-size", args.get("pipeline-model-parallel-size", 1))
    cp = config_int("context-parallel-size", args.get("context-parallel-size", 1))
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
        vpp = config_int("num-virtual-stages-per-pipeline-rank", args["num-virtual-stages-per-pipeline-rank"])
    elif "num-layers-per-virtual-pipeline-stage" in args:
        layers = config_int("num-layers", args.get("num-layers", 0))
        per = config_int("num-layers-per-virtual-pipeline-stage", args["num-layers-per-virtual-pipeline-stage"])
        require(layers > 0, "num-layers", "needed with --num-layers-per-virtual-pipeline-stage")
        require(per > 0, "num-layers-per-virtual-pipeline-stage", f"must be a positive integer, got {per}")
        vpp = layers // (pp * per)
    dp = _dp(num_gpus, tp * pp * cp, args.get("data-parallel-size"))
    # (--recompute-activations: Megatron-LM's older spelling of selective recompute)
    rc = args.get("recompute-granularity", "selective" if args.get("recompute-activations") else "none")
    rc_layers = (config_int("recompute-num-layers", args.get("recompute-num-layers", 0))
                 if rc == "full" and args.get("recompute-method") == "block" else 0)
    precision = ("fp4" if "fp4-format" in args else "fp8" if "fp8-format" in args
                 else "fp16" if args.get("fp16") else "bf16")
    zero = 1 if args.get("use-distributed-optimizer") else 0
    strategy = args.get("data-parallel-sharding-strategy")
    if strategy in ("optim_grads", "optim_grads_params"):
        zero = 2 if strategy == "optim_grads" else 3
    instances = config_int("num-distributed-optimizer-instances", args.get("num-distributed-optimizer-instances", 1))
    require(instances >= 1, "num-distributed-optimizer-instances", f"must be a positive integer, got {instances}")
    return Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=config_int("expert-model-parallel-size",
                                                          args.get("expert-model-parallel-size", 1)),
                  vpp=vpp, micro_batch=config_int("micro-batch-size", args.get("micro-batch-size", 1)),
                  global_batch=config_int("global-batch-size", args["global-batch-size"]),
                  seq_len=config_int("seq-length", args.get("seq-length", 2048)), precision=precision,
                  recompute=str(rc), zero_stage=zero, sequence_parallel=bool(args.get("sequence-parallel", False)),
                  recompute_layers=rc_layers,
                  recompute_modules=tuple(args.get("recompute-modules", ())) if rc == "selective" else (),
                  expert_tp=(config_int("expert-tensor-parallel-size", args["expert-tensor-parallel-size"])
                             if "expert-tensor-parallel-size" in args else None),
                  pp_layout=None if pp_layout is None else str(pp_layout),
                  dp_replicate=instances if zero >= 1 else 1)


def _uneven_layout(args: dict[str, Any], pp: int) -> str:
    """Megatron-LM's --decoder-first/last-pipeline-num-layers as a layout string: the first and the
    last (virtual) stage hold the layers given, the stages between share the rest evenly."""
    layers = config_int("num-layers", args.get("num-layers", 0))
    require(layers > 0, "num-layers", "needed with --decoder-first/last-pipeline-num-layers")
    if "num-virtual-stages-per-pipeline-rank" in args:
        stages = pp * config_int("num-virtual-stages-per-pipeline-rank", args["num-virtual-stages-per-pipeline-rank"])
    elif "num-layers-per-virtual-pipeline-stage" in args:
        raise InputError("num-layers-per-virtual-pipeline-stage",
                         "does not combine with --decoder-first/last-pipeline-num-layers; use "
                         "--num-virtual-stages-per-pipeline-rank")
    else:
        stages = pp
    first = config_int("decoder-first-pipeline-num-layers", args.get("decoder-first-pipeline-num-layers", -1))
    last = config_int("decoder-last-pipeline-num-layers", args.get("decoder-last-pipeline-num-layers", -1))
    middle_stages = stages - (first >= 0) - (last >= 0)
    rest = layers - max(first, 0) - max(last, 0)
    require(middle_stages > 0 and rest % middle_stages == 0 and rest >= 0, "decoder-first-pipeline-num-layers",
            f"the {rest} layers left are not divisible by the {middle_stages} other pipeline stages")
    per = rest // max(middle_stages, 1)
    return pplayout.from_stage_layers([first if first >= 0 else per] + [per] * (stages - 2)
                                      + [last if last >= 0 else per])


def _dp(num_gpus: int | None, model_parallel: int, explicit: Any) -> int:
    if explicit is not None:
        return config_int("data-parallel-size", explicit)
    require(num_gpus is not None, "gpus", "the config does not give the data-parallel size: pass --gpus")
    assert num_gpus is not None
    require(model_parallel > 0, "config", f"tp x pp x cp = {model_parallel}: each degree must be at least 1")
    require(num_gpus % model_parallel == 0, "gpus",
            f"{num_gpus} is not divisible by the config's tp x pp x cp = {model_parallel}")
    return num_gpus // model_parallel


def from_deepspeed_json(text: str, num_gpus: int | None = None) -> Layout:
    cfg = parse_json(text, "config")
    require(isinstance(cfg, dict), "config", "a DeepSpeed config must be a JSON object")
    extra = subtable(cfg, "supercluster")
    tp = config_int("tensor_parallel.autotp_size", subtable(cfg, "tensor_parallel").get("autotp_size", 1))
    pp_raw = subtable(cfg, "pipeline").get("stages", 1)
    pp = 1 if pp_raw == "auto" else config_int("pipeline.stages", pp_raw)
    cp = config_int("sequence_parallel_size", cfg.get("sequence_parallel_size", extra.get("cp", 1)))
    mb = config_int("train_micro_batch_size_per_gpu", cfg.get("train_micro_batch_size_per_gpu", 1))
    require("train_batch_size" in cfg or "gradient_accumulation_steps" in cfg, "train_batch_size",
            "give train_batch_size, or micro batch and gradient_accumulation_steps")
    dp = _dp(num_gpus, tp * pp * cp, None)
    mics = subtable(cfg, "zero_optimization").get("mics_shard_size", -1)
    require(mics in (-1, 0, dp * cp), "zero_optimization.mics_shard_size",
            f"MiCS shard groups ({mics!r} of {dp * cp} ranks) are not priced for DeepSpeed (MiCS was removed in "
            "DeepSpeed 0.19); remove the key to price ZeRO-3 over all ranks, or estimate the replicated shard "
            "groups with --dp-replicate under a framework with hybrid sharding (megatron, torchtitan)")
    if "train_batch_size" in cfg:
        gbs = config_int("train_batch_size", cfg["train_batch_size"])
    else:
        gbs = mb * dp * config_int("gradient_accumulation_steps", cfg["gradient_accumulation_steps"])
    precision = str(extra.get("precision", "fp16" if subtable(cfg, "fp16").get("enabled") else "bf16"))
    ac = subtable(cfg, "activation_checkpointing")
    recompute = str(extra.get("recompute", "full" if ac.get("partition_activations") else "none"))
    return Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=config_int("supercluster.ep", extra.get("ep", 1)),
                  vpp=config_int("supercluster.vpp", extra.get("vpp", 1)), micro_batch=mb, global_batch=gbs,
                  seq_len=config_int("supercluster.seq_len", extra.get("seq_len", 2048)), precision=precision,
                  recompute=recompute, zero_stage=config_int("zero_optimization.stage",
                                                          subtable(cfg, "zero_optimization").get("stage", 0)),
                  sequence_parallel=bool(extra.get("sequence_parallel", False)))


def _profile_base(fw: Framework) -> str:
    """A DeepSpeed-family profile's name without the data-parallel overlap options (a config states
    those in ``zero_optimization.overlap_comm``)."""
    return fw.key.replace(DP_OVERLAP_SUFFIX, "").replace(NO_DP_OVERLAP_SUFFIX, "")


def deepspeed_framework(text: str) -> str:
    """The DeepSpeed profile a config runs: DeepSpeed's own, or the one its ``supercluster.framework``
    names (a DeepSpeed-family profile: Megatron-DeepSpeed's), with "+dp-overlap" / "+no-dp-overlap"
    where its ``zero_optimization.overlap_comm`` states other than that profile's default for its stage
    (DeepSpeed: on at stage 3 only)."""
    cfg = parse_json(text, "config")
    zero = subtable(cfg, "zero_optimization") if isinstance(cfg, dict) else {}
    overlap = zero.get("overlap_comm")
    require(overlap is None or isinstance(overlap, bool), "zero_optimization.overlap_comm",
            f"must be true or false; got {overlap!r}")
    name = subtable(cfg, "supercluster").get("framework", "deepspeed") if isinstance(cfg, dict) else "deepspeed"
    require(isinstance(name, str), "supercluster.framework", f"must be a framework name; got {name!r}")
    fw = get_framework(name)
    require(fw.family == "deepspeed" and _profile_base(fw) == fw.key, "supercluster.framework",
            f"{name!r} is not a DeepSpeed-family profile without options (deepspeed, megatron-deepspeed, ...)")
    default = bool(fw.overlaps_dp(config_int("zero_optimization.stage", zero.get("stage", 0))))
    if overlap is None or overlap == default:
        return fw.key
    return fw.key + (DP_OVERLAP_SUFFIX if overlap else NO_DP_OVERLAP_SUFFIX)


def detect_format(path: Path) -> str:
    """A config's format: by its suffix (.json DeepSpeed, .toml a torchtitan job TOML), else a launch
    script: torchtitan 0.3's where it runs ``torchtitan.train --module``, Megatron-LM's otherwise."""
    suffix = path.suffix.lower()
    if suffix in (".json", ".toml"):
        return {".json": "deepspeed", ".toml": "torchtitan-toml"}[suffix]
    try:
        text = read_input(path, "config") if path.is_file() else ""
    except InputError:
        return "megatron"  # (load_layout names what is wrong with the file)
    return "torchtitan" if torchtitan.is_launch(text) else "maxtext" if maxtext.is_launch(text) else "megatron"


def load_layout(path: str | Path, num_gpus: int | None = None, fmt: str | None = None,
                num_layers: int | None = None) -> Layout:
    """Read a launcher config file into a :class:`Layout` (format from ``fmt`` or the extension);
    ``num_layers`` (the model's) places a torchtitan config's split points."""
    p = user_path(path, "config")
    require(p.is_file(), "config", f"no such file: {p}")
    kind = fmt or detect_format(p)
    require(kind in FORMATS, "format", f"unknown {kind!r}; allowed: {', '.join(FORMATS)}")
    text = read_input(p, "config")
    if kind == "torchtitan":
        return torchtitan.from_launch(text, num_gpus)[1]
    if kind == "torchtitan-toml":
        return from_torchtitan_toml(text, num_gpus, num_layers)
    if kind == "maxtext":
        return maxtext.from_launch(text, num_gpus)[1]
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
    path = user_path(config, "config")
    script = _megatron_script(path)
    kind = detect_format(path) if path.is_file() else "megatron"
    if kind == "torchtitan":
        preset, _, titan = torchtitan.from_launch(read_input(path, "config"), num_gpus)
        model = model or preset or "llama3-405b"
    if kind == "maxtext":
        named = maxtext.from_launch(read_input(path, "config"), num_gpus)[0]
        require(model is not None or named is not None, "model", "the MaxText line names no model_name: give --model")
        model = model or named
    if model is None:
        model = str(config) if script is not None and megatron_args.has_model(script) else "llama3-405b"
    fw: str | Framework
    if framework is not None:
        fw = framework
    elif script is not None:
        fw = megatron_flags.framework_from_args(script, name=f"megatron-lm ({path.name})")
    else:
        if kind == "torchtitan":
            fw = titan
        elif kind == "maxtext":
            fw = "maxtext"
        elif kind == "torchtitan-toml":
            fw = toml_profile(read_input(path, "config"))
        else:
            fw = deepspeed_framework(read_input(path, "config")) if kind == "deepspeed" else DEFAULT_FRAMEWORK
    from .load import load_model

    return model, fw, load_layout(path, num_gpus=num_gpus, num_layers=load_model(model).num_layers)


def config_gpus_per_node(config: str | Path) -> int | None:
    """The GPUs per node a launch script's torchrun line starts across several nodes (a Megatron-LM
    or torchtitan 0.3 script: :func:`~supercluster.formats.megatron_args.node_gpus`); None for a
    JSON or TOML config, one node, or a script that does not say."""
    path = user_path(config, "config")
    kind = detect_format(path) if path.is_file() else None
    if kind == "megatron":
        args = _megatron_script(path)
        return megatron_args.node_gpus(args) if args is not None else None
    if kind == "torchtitan":
        out, _ = torchtitan.parse_launch(read_input(path, "config"))
        return megatron_args.node_gpus({"nnodes": out.get("nnodes"), "nproc-per-node": out.get("nproc_per_node")})
    return None
