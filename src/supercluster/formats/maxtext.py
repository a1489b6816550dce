"""MaxText launch lines: ``python3 -m MaxText.train MaxText/configs/base.yml key=value ...`` (or
``MaxText/train.py``), read into a layout and written from one.

A line's ``key=value`` overrides sit on MaxText's base.yml defaults (:data:`BASE`: ``ici_fsdp`` and
``dcn_data`` ``-1``, the axes that take the devices left, 12 sequences a device, 2,048 tokens, full
remat). The mesh axes read as a layout: ``tensor`` (and ``tensor_sequence``) TP, ``pipeline`` PP,
``sequence`` / ``context`` CP, ``fsdp`` x ``fsdp_transpose`` the ZeRO-3 shard group, ``data`` its
replicas (hybrid sharding) or, with no FSDP, plain data parallelism, ``expert`` EP (its ranks shard
the batch too); the ICI axes span a node's GPUs and the DCN axes the nodes, each product the GPUs of
a node and the nodes of the job. ``per_device_batch_size`` is sequences per GPU, so a data-parallel
rank takes it times the TP, CP and PP ranks beside it, cut into ``num_pipeline_microbatches``
(default: one a stage). ``remat_policy`` reads as its recompute modules
(:data:`~supercluster.formats.phrases.REMAT_POLICIES`), ``quantization=fp8`` as FP8, and
``model_name`` as the preset of that name. Nothing on the line is evaluated."""

from __future__ import annotations

from typing import Any

from ..errors import InputError, config_int, require
from ..files import shell_words
from ..models.spec import ModelSpec
from ..parallelism.layout import Layout
from .phrases import REMAT_POLICIES

#: MaxText base.yml's defaults for what a layout reads (AI-Hypercomputer/maxtext MaxText/configs/base.yml)
BASE: dict[str, Any] = {
    "per_device_batch_size": 12.0, "max_target_length": 2048, "remat_policy": "full", "quantization": "",
    "gradient_accumulation_steps": 1, "num_pipeline_microbatches": -1, "model_name": "default",
    "ici_fsdp_parallelism": -1, "dcn_data_parallelism": -1}
#: mesh axes as a layout reads them; each has an ici_ and a dcn_ degree (default 1)
AXES = ("data", "fsdp", "fsdp_transpose", "sequence", "context", "tensor", "tensor_sequence", "pipeline",
        "expert", "autoregressive")
#: MaxText model_name -> preset (where the keys differ)
MODELS = {"deepseek3-671b": "deepseek-v3", "gpt3-175b": "gpt3-175b", "llama3.1-8b": "llama3.1-8b",
          "llama3.1-70b": "llama3.1-70b", "llama3.1-405b": "llama3.1-405b"}
GPUS_PER_NODE = 8


def is_launch(text: str) -> bool:
    """Whether a script launches MaxText's trainer."""
    return "MaxText.train" in text or "MaxText/train.py" in text


def parse_launch(text: str) -> dict[str, str]:
    """A MaxText line's ``key=value`` overrides (the trainer's and its config's words: the rest)."""
    words = shell_words(text.replace("\\\n", " "), "config", "the MaxText launch line")
    start = next((i for i, w in enumerate(words) if w in ("MaxText.train", "MaxText/train.py")
                  or w.endswith("/MaxText/train.py")), None)
    require(start is not None, "config", "no MaxText trainer (MaxText.train or MaxText/train.py) on the line")
    out = {}
    for word in words[start + 1:]:
        key, eq, value = word.partition("=")
        if eq and key.replace("_", "").isalnum():
            out[key] = value
    return out


def _degrees(args: dict[str, Any], gpus: int, per_node: int) -> dict[str, int]:
    """Each mesh axis's degree, ICI x DCN, with the -1 axes taking the GPUs of a node and the nodes left."""
    require(gpus % per_node == 0 or gpus < per_node, "gpus", f"{gpus} GPUs are not whole nodes of {per_node}")
    ici_total, dcn_total = min(gpus, per_node), max(gpus // per_node, 1)
    out = {}
    for level, total in (("ici", ici_total), ("dcn", dcn_total)):
        vals = {a: config_int(f"{level}_{a}_parallelism", args.get(f"{level}_{a}_parallelism", BASE.get(
            f"{level}_{a}_parallelism", 1))) for a in AXES}
        auto = [a for a, v in vals.items() if v == -1]
        require(len(auto) <= 1, f"{level}_parallelism", f"one {level} axis may be -1, got {', '.join(auto)}")
        fixed = 1
        for a, v in vals.items():
            require(v == -1 or v >= 1, f"{level}_{a}_parallelism", f"must be a positive integer or -1, got {v}")
            fixed *= v if v > 0 else 1
        require(total % fixed == 0, f"{level}_parallelism", f"the {level} axes' product {fixed} does not divide "
                f"the {total} {'GPUs of a node' if level == 'ici' else 'nodes'}")
        for a in auto:
            vals[a] = total // fixed
        require(all(v > 0 for v in vals.values()) and _prod(vals.values()) == total, f"{level}_parallelism",
                f"the {level} axes multiply to {_prod(vals.values())}, not the {total} "
                f"{'GPUs of a node' if level == 'ici' else 'nodes'} (set one to -1)")
        for a, v in vals.items():
            out[a] = out.get(a, 1) * v
    return out


def _prod(values: Any) -> int:
    p = 1
    for v in values:
        p *= int(v)
    return p


def from_launch(text: str, num_gpus: int | None, gpus_per_node: int | None = None) -> tuple[str | None, Layout]:
    """The preset (None where ``model_name`` names none) and the layout of a MaxText launch line on
    ``num_gpus`` GPUs (a line does not say how many)."""
    require(num_gpus is not None, "gpus", "a MaxText launch line does not say how many GPUs it runs on: give --gpus")
    assert num_gpus is not None
    args = {**BASE, **parse_launch(text)}
    d = _degrees(args, num_gpus, gpus_per_node or GPUS_PER_NODE)
    for axis in ("autoregressive",):
        require(d[axis] == 1, f"ici_{axis}_parallelism", f"the {axis} axis (decoding) has no training layout")
    tp, pp, cp, ep = d["tensor"] * d["tensor_sequence"], d["pipeline"], d["sequence"] * d["context"], d["expert"]
    fsdp, data = d["fsdp"] * d["fsdp_transpose"], d["data"]
    dp = fsdp * data * ep
    try:
        per_device = float(args["per_device_batch_size"])
    except ValueError:
        raise InputError("per_device_batch_size", f"{args['per_device_batch_size']!r} is not a number") from None
    ga = config_int("gradient_accumulation_steps", args["gradient_accumulation_steps"])
    per_rank = per_device * tp * cp * pp  # sequences a data-parallel rank takes a step, before accumulation
    n_mb = config_int("num_pipeline_microbatches", args["num_pipeline_microbatches"])
    n_mb = pp if n_mb == -1 else n_mb
    require(ga >= 1 and n_mb >= 1, "num_pipeline_microbatches", "gradient accumulation and pipeline micro-batches "
                                                                  "must be positive")
    micro = per_rank / (n_mb if pp > 1 else 1)
    require(micro >= 1 and micro == int(micro), "per_device_batch_size",
            f"{per_device:g} sequences a GPU x TP x CP x PP ({tp} x {cp} x {pp}) / {n_mb if pp > 1 else 1} "
            f"micro-batches is {micro:g} sequences a micro-batch: a whole number is needed")
    policy = str(args["remat_policy"]).strip("'\"")
    recompute, modules = _remat(policy)
    quant = str(args["quantization"]).strip("'\"").lower()
    layout = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, micro_batch=int(micro),
                    global_batch=round(per_device * num_gpus * ga), seq_len=config_int("max_target_length",
                                                                                     args["max_target_length"]),
                    precision="fp8" if "fp8" in quant else "bf16", recompute=recompute, recompute_modules=modules,
                    zero_stage=3 if fsdp > 1 else 0, dp_replicate=data if fsdp > 1 else 1,
                    grad_accum=ga if pp > 1 else 1)
    name = str(args["model_name"]).strip("'\"")
    return MODELS.get(name, name if name != "default" else None), layout


def _remat(policy: str) -> tuple[str, tuple[str, ...]]:
    """(recompute, modules) of a MaxText remat_policy."""
    if policy in ("full", "nothing_saveable"):
        return "full", ()
    if policy == "save_all":
        return "none", ()
    if policy in REMAT_POLICIES:
        return "selective", REMAT_POLICIES[policy][0]
    raise InputError("remat_policy", f"{policy!r} is not priced (offloading to host memory and custom policies "
                     f"are not modelled); allowed: full, save_all, {', '.join(REMAT_POLICIES)}")


def to_launch(layout: Layout, model: ModelSpec | None, gpus_per_node: int = GPUS_PER_NODE) -> str:
    """A MaxText launch line for ``layout``: TP and CP inside a node, FSDP over the rest of the node and
    across the shard group's nodes, the replicas as DCN data parallelism, PP across nodes."""
    require(model is not None, "model", "a MaxText launch line needs the model")
    assert model is not None
    require(layout.zero_stage in (0, 3), "zero_stage", f"MaxText shards with FSDP (ZeRO-3) or not at all (0), "
                                                       f"got {layout.zero_stage}")
    require(layout.vpp == 1 and layout.pp_layout is None, "vpp", "MaxText's circular pipeline is not an "
                                                                 "interleaved Megatron schedule: export vpp 1")
    node = min(gpus_per_node, layout.num_gpus)
    inner = layout.tp * layout.cp
    require(node % inner == 0, "tp", f"tp x cp = {inner} must divide the {node} GPUs of a node (MaxText's ICI axes)")
    shard = layout.dp // layout.dp_replicate if layout.zero_stage == 3 else 1
    data = layout.dp // shard
    ici_fsdp = _fit(shard, node // inner)
    ici_data = _fit(data, node // (inner * ici_fsdp)) if ici_fsdp * inner < node else 1
    require(inner * ici_fsdp * ici_data == node, "dp", f"the {node} GPUs of a node cannot hold tp x cp x a share "
            f"of FSDP {shard} and data {data}")
    policy = {"full": "full", "none": "save_all"}.get(layout.recompute) or next(
        (k for k, (mods, note) in REMAT_POLICIES.items() if mods == layout.recompute_modules and not note), None)
    require(policy is not None, "recompute", f"{layout.recompute_label} has no MaxText remat_policy (full, save_all, "
            "save_dot_except_mlp = selective(core_attn,layernorm,mlp), minimal = selective(core_attn,layernorm))")
    mbs = layout.micro_batch * max(layout.num_microbatches // layout.grad_accum, 1) if layout.pp > 1 \
        else layout.micro_batch
    per_device = mbs / (layout.tp * layout.cp * layout.pp)
    words = ["python3", "-m", "MaxText.train", "MaxText/configs/base.yml", "run_name=supercluster",
             f"model_name={_maxtext_name(model)}", f"per_device_batch_size={per_device:g}",
             f"max_target_length={layout.seq_len}", f"remat_policy={policy}",
             *(["quantization=fp8"] if layout.precision == "fp8" else []),
             "attention=cudnn_flash_te", "hardware=gpu_multiprocess",
             f"ici_tensor_parallelism={layout.tp}", f"ici_sequence_parallelism={layout.cp}",
             f"ici_fsdp_parallelism={ici_fsdp}", f"ici_data_parallelism={ici_data}",
             f"dcn_fsdp_parallelism={shard // ici_fsdp}", f"dcn_data_parallelism={data // ici_data}",
             f"dcn_pipeline_parallelism={layout.pp}", f"ici_expert_parallelism={layout.ep}"]
    if layout.pp > 1:
        words.append(f"num_pipeline_microbatches={layout.num_microbatches // layout.grad_accum}")
    if layout.grad_accum > 1 or (layout.pp == 1 and layout.num_microbatches > 1):
        words.append(f"gradient_accumulation_steps={layout.num_microbatches if layout.pp == 1 else layout.grad_accum}")
    return (f"#!/bin/bash\n# MaxText launch written by supercluster: {model.name}, {layout.short()} on "
            f"{layout.num_gpus} GPUs ({layout.num_gpus // node} nodes of {node})\n"
            + " \\\n  ".join([" ".join(words[:4]), *words[4:]]) + "\n")


def _fit(total: int, room: int) -> int:
    """The largest divisor of ``total`` that fits in ``room``."""
    return max(d for d in range(1, max(room, 1) + 1) if total % d == 0)


def _maxtext_name(model: ModelSpec) -> str:
    back = {v: k for k, v in MODELS.items()}
    return back.get(model.key, model.key)
