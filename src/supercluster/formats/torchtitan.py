"""torchtitan 0.3's launch line, written and read back.

torchtitan 0.3 (PyPI, 2026) configures a run by a Python config function and command-line
overrides, no longer by a job TOML: ``torchrun ... -m torchtitan.train --module llama3 --config
llama3_8b --parallelism.tensor_parallel_degree 8 ... activation-checkpoint:full``
(``torchtitan/config/manager.py`` ConfigManager: ``--module`` / ``--config`` name a
``config_registry`` function, tyro reads ``--section.key value`` into its dataclasses, the
activation-checkpoint policy is a subcommand). The model is the config function's: a plan exports
only for a model torchtitan has a config for (:data:`CONFIGS`), each checked against torchtitan's
own model, built on the meta device, by ``tests/test_frameworks.py``.

What a plan sets: the parallel degrees (``data_parallel_replicate_degree``,
``data_parallel_shard_degree``, ``fsdp_reshard_after_forward``: FSDP2 has no ZeRO-1, stage 1 runs as
2), ``tensor_parallel_degree``, ``context_parallel_degree``, ``expert_parallel_degree``, under
pipeline parallelism ``pipeline_parallel_degree``, its schedule, micro-batch size and
``module_fqns_per_model_part`` (the modules of every virtual stage, as the cost model splits them);
``training.local_batch_size`` / ``global_batch_size`` / ``seq_len``; ``compile.enable`` for a
compiled profile; ``compile.enable_async_tensor_parallel`` on where the profile prices async TP
(``torchtitan+compile+tp-overlap``) and off otherwise (torchtitan's llama3_405b config function turns
it on); ``training.disable_cuda_graphs`` unless the profile prices CUDA graphs (torchtitan
0.3 captures them by default, and refuses them with pipeline parallelism). Read back, the same keys
give the same layout. The line is read as written: no shell variable is expanded.

The job TOML of torchtitan up to early 2026 (``--export torchtitan-toml``;
``torchtitan/config/job_config.py``, its mid-2025 schema; FSDP2 has no ZeRO-1: stage 1 exports as 2,
``fsdp_reshard_after_forward = "never"``): ``[parallelism]`` degrees (``data_parallel_replicate_degree``,
``data_parallel_shard_degree``, ``tensor_parallel_degree``, ``pipeline_parallel_degree``,
``context_parallel_degree``, ``expert_parallel_degree``, ``expert_tensor_parallel_degree``,
``pipeline_parallel_schedule``, ``pipeline_parallel_microbatch_size``, ``pipeline_parallel_split_points``),
``[training]`` (``local_batch_size``, ``global_batch_size``, ``seq_len``, ``mixed_precision_param``,
``compile``), ``[activation_checkpoint] mode``, ``[model] converters = ["float8"]``; and the same as
``--section.key value`` overrides. Both forms read back through :func:`torchtitan_layout`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from typing import Any

from ..errors import InputError, config_int, require, subtable
from ..files import parse_toml, shell_words
from ..models.spec import ModelSpec
from ..parallelism import pplayout
from ..parallelism.framework import Framework
from ..parallelism.layout import Layout
from ..parallelism.suffixes import COMPILE_SUFFIX, TP_OVERLAP_SUFFIX
from .megatron_args import world_size

#: Preset -> torchtitan 0.3.0's (module, config function) for the same architecture
#: (torchtitan/models/<module>/config_registry.py); the parameter counts of both are compared in
#: tests/test_frameworks.py. Llama 3.1 has Llama 3's architecture (its RoPE scaling is not priced).
CONFIGS: dict[str, tuple[str, str]] = {
    "llama3-8b": ("llama3", "llama3_8b"), "llama3.1-8b": ("llama3", "llama3_8b"),
    "llama3-70b": ("llama3", "llama3_70b"), "llama3.1-70b": ("llama3", "llama3_70b"),
    "llama3-405b": ("llama3", "llama3_405b"), "llama3.1-405b": ("llama3", "llama3_405b"),
    "qwen3-32b": ("qwen3", "qwen3_32b"), "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b"),
    "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b"),
    "gpt-oss-20b": ("gpt_oss", "gpt_oss_20b"), "gpt-oss-120b": ("gpt_oss", "gpt_oss_120b"),
}
#: the GEMM precision a config function's model converters set (Float8LinearConverter in llama3_405b);
#: bf16 for the others: the command line cannot change it
CONFIG_PRECISION = {("llama3", "llama3_405b"): "fp8"}
#: what a config function turns on that the command line may leave unsaid, (torch.compile, async TP):
#: torchtitan 0.3 models/llama3/config_registry.py llama3_405b, CompileConfig(enable=True,
#: enable_async_tensor_parallel=True); every other config compiles nothing
CONFIG_COMPILE = {("llama3", "llama3_405b"): (True, True)}
#: the model a (module, config) names, read back (the first preset of each)
PRESET_OF: dict[tuple[str, str], str] = {}
for _key, _cfg in CONFIGS.items():
    PRESET_OF.setdefault(_cfg, _key)
AC_MODES = {"none": "none", "full": "full", "selective": "selective"}
GPUS_PER_NODE = 8


def _refusals(layout: Layout, model: ModelSpec | None) -> None:
    """What torchtitan 0.3's command line cannot say, each refused by name."""
    require(model is not None and model.key in CONFIGS, "model",
            f"torchtitan 0.3 runs the models of its config registry; "
            f"{'no model given' if model is None else model.key + ' has none'} (torchtitan configs for: "
            f"{', '.join(sorted(CONFIGS))}); export to megatron, or add a config function to torchtitan")
    assert model is not None
    config = CONFIGS[model.key]
    want = CONFIG_PRECISION.get(config, "bf16")
    require(layout.precision == want, "precision",
            f"torchtitan 0.3's {config[1]} config trains in {want} (its model converters, which the command line "
            f"cannot change); plan it in {want}, or export to megatron")
    require(layout.ep == 1 or layout.etp == 1, "expert_tp",
            f"torchtitan 0.3 has no expert tensor parallelism (experts whole on each TP rank); got {layout.etp}")
    require(model is None or model.mtp_layers == 0, "model",
            "torchtitan's command line has no multi-token-prediction modules to place")


def _stage_layers(layout: Layout, model: ModelSpec) -> list[int]:
    """Transformer layers on each virtual stage, in model order: the explicit layout's, else the
    torchtitan profile's split (generate_split_points, "middle")."""
    if layout.pp_layout is not None:
        stages = pplayout.parse(layout.pp_layout)
        require("m" not in "".join(stages), "pp_layout", "torchtitan has no multi-token-prediction modules to place")
        return [st.count("t") for st in stages]
    per = pplayout.chunk_layers(model.num_layers, layout.pp, layout.vpp, split="middle")
    return [per[s][c] for c in range(layout.vpp) for s in range(layout.pp)]


def _model_parts(layers: list[int]) -> list[str]:
    """``module_fqns_per_model_part`` on the command line: one comma-joined part per virtual stage,
    the embedding on the first and the final norm and the output head on the last."""
    parts, first = [], 0
    for k, n in enumerate(layers):
        names = [f"layers.{i}" for i in range(first, first + n)]
        first += n
        if k == 0:
            names.insert(0, "tok_embeddings")
        if k == len(layers) - 1:
            names += ["norm", "output"]
        require(bool(names), "pp_layout", "torchtitan cannot run a pipeline stage without a module")
        parts.append(",".join(names))
    return parts


def overrides(layout: Layout, model: ModelSpec, framework: Framework | None = None) -> list[str]:
    """The command-line arguments after ``-m torchtitan.train`` for ``layout`` of ``model``."""
    _refusals(layout, model)
    module, config = CONFIGS[model.key]
    shard = layout.dp // layout.dp_replicate if layout.zero_stage >= 1 else 1
    args: list[str] = ["--module", module, "--config", config]

    def put(key: str, value: object) -> None:
        args.extend([f"--{key}", str(value)])

    put("parallelism.data_parallel_replicate_degree", layout.dp // shard)
    put("parallelism.data_parallel_shard_degree", shard)
    put("parallelism.fsdp_reshard_after_forward", "always" if layout.zero_stage >= 3 else "never")
    put("parallelism.tensor_parallel_degree", layout.tp)
    put("parallelism.context_parallel_degree", layout.cp)
    put("parallelism.expert_parallel_degree", layout.ep)
    local = layout.micro_batch
    if layout.pp > 1:
        put("parallelism.pipeline_parallel_degree", layout.pp)
        put("parallelism.pipeline_parallel_schedule", TT_SCHEDULE[layout.vpp > 1])
        put("parallelism.pipeline_parallel_microbatch_size", layout.micro_batch)
        args += ["--parallelism.module_fqns_per_model_part", *_model_parts(_stage_layers(layout, model))]
        local = layout.global_batch // (layout.dp * layout.grad_accum)
    put("training.local_batch_size", local)
    put("training.global_batch_size", layout.global_batch)
    put("training.seq_len", layout.seq_len)
    if framework is not None and framework.elementwise == "fused":  # (a config may compile the loss alone)
        args += ["--compile.enable", "--compile.components", "model,loss"]
    else:
        args.append("--compile.no-enable")
    # (stated either way: some config functions turn async TP on, llama3_405b's among them)
    args.append("--compile.enable_async_tensor_parallel" if _async_tp(layout, framework)
                else "--compile.no-enable-async-tensor-parallel")
    if framework is None or not framework.cuda_graphs or layout.pp > 1:
        args.append("--training.disable_cuda_graphs")
    args.append(f"activation-checkpoint:{AC_MODES[layout.recompute]}")
    return args


def to_launch(layout: Layout, model: ModelSpec | None, framework: Framework | None = None) -> str:
    """A torchrun line that launches ``layout`` in torchtitan 0.3 (one node per eight GPUs)."""
    _refusals(layout, model)
    assert model is not None
    gpus = layout.num_gpus
    per = GPUS_PER_NODE if gpus % GPUS_PER_NODE == 0 else gpus
    head = ["torchrun", "--nnodes", str(gpus // per), "--nproc-per-node", str(per), "-m", "torchtitan.train"]
    body = overrides(layout, model, framework)
    lines, cur = [], head
    for tok in body:
        if tok.startswith("--") or ":" in tok:
            lines.append(" ".join(shlex.quote(t) for t in cur))
            cur = [tok]
        else:
            cur.append(tok)
    lines.append(" ".join(shlex.quote(t) for t in cur))
    return (f"#!/bin/bash\n# torchtitan 0.3 launch written by supercluster: {model.name}, {layout.short()} on "
            f"{gpus} GPUs\n" + " \\\n  ".join(lines) + "\n")


def parse_launch(text: str) -> tuple[dict[str, Any], int | None]:
    """A torchtitan launch line's overrides (``{"parallelism.tensor_parallel_degree": "8", ...}``, a
    flag alone True, several values a list; the subcommand under ``activation_checkpoint``) and the
    GPUs its torchrun starts (None where it does not say)."""
    tokens = shell_words(text.replace("\\\n", " "), "config", "the torchtitan launch line")
    out: dict[str, Any] = {}
    key: str | None = None
    for tok in tokens:
        if tok.startswith("--"):
            name, eq, value = tok[2:].partition("=")
            key = name.replace("-", "_")
            out[key] = value if eq else True
        elif tok.startswith("-") and not tok.lstrip("-").replace(".", "", 1).isdigit():
            key = None  # (torchrun's short flags, ``-m torchtitan.train``: not an override's value)
        elif tok.startswith("activation-checkpoint:") or tok.startswith("activation_checkpoint:"):
            out["activation_checkpoint"], key = tok.split(":", 1)[1].replace("-", "_"), None
        elif key is not None:
            prev = out[key]
            out[key] = tok if prev is True else ([*prev, tok] if isinstance(prev, list) else [prev, tok])
    # (the same torchrun reading as a Megatron-LM launch script's)
    return out, world_size({"nnodes": out.get("nnodes"), "nproc-per-node": out.get("nproc_per_node")})


def is_launch(text: str) -> bool:
    """Whether a script launches torchtitan 0.3 (``torchtitan.train`` with ``--module``)."""
    return "torchtitan.train" in text and "--module" in text


def from_launch(text: str, num_gpus: int | None = None) -> tuple[str | None, Layout, str]:
    """The preset, layout and torchtitan profile (compiled, async TP: as the line says, else as its
    config function sets them, :data:`CONFIG_COMPILE`) of a torchtitan 0.3 launch line (the GPUs from
    its torchrun line unless ``num_gpus``)."""
    args, gpus = parse_launch(text)
    preset = PRESET_OF.get((str(args.get("module", "")), str(args.get("config", ""))))
    sections: dict[str, dict[str, Any]] = {}
    for key, value in args.items():
        section, dot, name = key.partition(".")
        if dot:
            sections.setdefault(section, {})[name] = value
    parts = sections.get("parallelism", {}).pop("module_fqns_per_model_part", None)
    mode = args.get("activation_checkpoint", "selective")  # (torchtitan's llama3 configs: selective)
    cfg = {"parallelism": sections.get("parallelism", {}), "training": sections.get("training", {}),
           "activation_checkpoint": {"mode": mode}}
    layout = torchtitan_layout(cfg, num_gpus if num_gpus is not None else gpus, None,
                               pp_layout=_parts_layout(parts))
    config = (str(args.get("module", "")), str(args.get("config", "")))
    compiles, async_tp = CONFIG_COMPILE.get(config, (False, False))
    compiles = _said(args, "compile.enable", compiles)
    async_tp = compiles and _said(args, "compile.enable_async_tensor_parallel", async_tp)
    precision = CONFIG_PRECISION.get(config, "bf16")
    return preset, dataclasses.replace(layout, precision=precision), _profile(compiles, async_tp)


def _said(args: dict[str, Any], flag: str, default: bool) -> bool:
    """A boolean flag as the line sets it (``--a.b``, ``--a.b=false``, ``--a.no-b``), else ``default``."""
    section, _, name = flag.rpartition(".")
    if f"{section}.no_{name}" in args:
        return False
    if flag not in args:
        return default
    value = args[flag]
    return value is True or str(value).lower() in ("true", "1", "yes")


def _profile(compiles: bool, async_tp: bool) -> str:
    """The torchtitan profile a config runs: compiled or not, async TP or not."""
    return "torchtitan" + (COMPILE_SUFFIX if compiles else "") + (TP_OVERLAP_SUFFIX if async_tp else "")


def _async_tp(layout: Layout, framework: Framework | None) -> bool:
    """Whether the priced run overlaps its TP collectives by PyTorch's async TP (a TP layout of a
    profile that prices it)."""
    return framework is not None and framework.tp_comm_overlap and framework.tp_overlap == "async-tp" \
        and layout.tp > 1


def _parts_layout(parts: Any) -> str | None:
    """``module_fqns_per_model_part`` as an explicit pipeline layout (None where not given)."""
    if parts is None:
        return None
    parts = [parts] if isinstance(parts, str) else parts
    require(isinstance(parts, list) and all(isinstance(p, str) for p in parts), "module_fqns_per_model_part",
            f"must be parts of comma-separated module names, got {parts!r}")
    sizes = [sum(name.strip().startswith("layers.") for name in p.split(",")) for p in parts]
    require(min(sizes, default=0) > 0, "module_fqns_per_model_part", f"a part holds no layer: {parts!r}")
    return pplayout.from_stage_layers(sizes)


# ---- the job TOML (torchtitan up to early 2026) -------------------------------------------------
TT_SCHEDULE = {True: "Interleaved1F1B", False: "1F1B"}


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
    shard = layout.dp // layout.dp_replicate if layout.zero_stage >= 1 else 1
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
        if _async_tp(layout, framework):
            par["enable_async_tensor_parallel"] = True
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


def from_torchtitan_toml(text: str, num_gpus: int | None = None, num_layers: int | None = None) -> Layout:
    """A torchtitan job config as a layout; its pipeline_parallel_split_points, if any, become an
    explicit pipeline layout (which needs the model's ``num_layers`` for the last stage)."""
    return torchtitan_layout(parse_toml(text, "config"), num_gpus, num_layers)


def torchtitan_layout(cfg: dict[str, Any], num_gpus: int | None, num_layers: int | None,
                      pp_layout: str | None = None) -> Layout:
    """The layout of torchtitan's settings by section (a job TOML's tables, or a 0.3 launch line's
    overrides): ``pp_layout`` where the caller read the stages already (0.3's module parts)."""
    par, tr = subtable(cfg, "parallelism"), subtable(cfg, "training")
    tp = config_int("tensor_parallel_degree", par.get("tensor_parallel_degree", 1))
    pp = config_int("pipeline_parallel_degree", par.get("pipeline_parallel_degree", 1))
    cp = config_int("context_parallel_degree", par.get("context_parallel_degree", 1))
    rep = config_int("data_parallel_replicate_degree", par.get("data_parallel_replicate_degree", 1))
    shard = config_int("data_parallel_shard_degree", par.get("data_parallel_shard_degree", -1))
    for name, v in (("tensor_parallel_degree", tp), ("pipeline_parallel_degree", pp),
                    ("context_parallel_degree", cp), ("data_parallel_replicate_degree", rep)):
        require(v >= 1, name, f"must be at least 1, got {v}")
    require(shard >= 1 or shard == -1, "data_parallel_shard_degree", f"must be at least 1, or -1 (what is left), "
                                                                    f"got {shard}")
    if shard == -1:  # TorchTitan: -1 = whatever is left
        require(num_gpus is not None, "gpus", "data_parallel_shard_degree = -1 needs --gpus")
        assert num_gpus is not None
        per = tp * pp * cp * rep
        require(num_gpus % per == 0, "gpus", f"{num_gpus} GPUs are not a multiple of tp x pp x cp x data-parallel "
                                             f"replicas = {tp} x {pp} x {cp} x {rep} = {per}")
        shard = num_gpus // per
    local = config_int("local_batch_size", tr.get("local_batch_size", tr.get("batch_size", 1)))
    require(local >= 1, "local_batch_size", f"must be at least 1, got {local}")
    dp = rep * shard
    gbs = config_int("global_batch_size", tr.get("global_batch_size", -1))
    if gbs <= 0:
        gbs = local * dp
    # under PP the schedule cuts the local batch into micro-batches of this size (torchtitan's default 1)
    micro = config_int("pipeline_parallel_microbatch_size", par.get("pipeline_parallel_microbatch_size", 1)) \
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
    ep = config_int("expert_parallel_degree", par.get("expert_parallel_degree", 1))
    etp = config_int("expert_tensor_parallel_degree", par.get("expert_tensor_parallel_degree", 1)) if ep > 1 else tp
    points = par.get("pipeline_parallel_split_points") or []
    if pp_layout is None and points:
        pp_layout = _tt_layout(points, num_layers)
    vpp = pplayout.chunks_per_rank(pp_layout, pp) if pp_layout else (2 if looped else 1)
    return Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, micro_batch=micro, global_batch=gbs,
                  seq_len=config_int("seq_len", tr.get("seq_len", 2048)), precision="fp8" if fp8 else "bf16",
                  recompute=str(mode), zero_stage=zero, sequence_parallel=tp > 1, pp_layout=pp_layout,
                  expert_tp=etp if etp != tp else None, grad_accum=ga,
                  # (replicas of an FSDP shard group: HSDP; with no sharding, plain DDP replicas)
                  dp_replicate=rep if zero >= 1 else 1)


def torchtitan_compiles(text: str) -> bool:
    """Whether a torchtitan job config turns torch.compile on (``[training] compile``, or a
    ``[compile]`` table's ``enable`` in later versions)."""
    return toml_profile(text).startswith("torchtitan" + COMPILE_SUFFIX)


def toml_profile(text: str) -> str:
    """The torchtitan profile a job config runs: compiled where it says so (``[training] compile``, or a
    ``[compile]`` table's ``enable``), with async TP where its ``[parallelism]`` (or later ``[compile]``)
    table turns ``enable_async_tensor_parallel`` on."""
    try:
        cfg = parse_toml(text, "config")
    except InputError:
        return _profile(False, False)
    compile_table = subtable(cfg, "compile")
    compiles = bool(subtable(cfg, "training").get("compile", False) or compile_table.get("enable", False))
    said = subtable(cfg, "parallelism").get("enable_async_tensor_parallel", False) \
        or compile_table.get("enable_async_tensor_parallel", False)
    return _profile(compiles, compiles and bool(said))


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
