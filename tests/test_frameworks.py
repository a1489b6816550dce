"""Exports checked by the frameworks themselves (the optional ``.[frameworks]`` extra; ``.ci/run``
installs it and sets SUPERCLUSTER_REQUIRE_FRAMEWORKS=1, so there a missing framework fails instead of
skipping).

- torchtitan 0.3: its own ``ConfigManager`` parses the launch line (tyro over its config dataclasses,
  then its validation), the config's model is built on the meta device and its parameters counted.
  What needs a GPU: torchtitan's Float8 converter checks for SM89+ at build time; it is told it has one.
- Megatron-Core: ``TransformerConfig`` / ``MLATransformerConfig`` (with ``ModelParallelConfig``) built
  from the exported arguments, as Megatron-LM's ``core_transformer_config_from_args`` maps them: every
  flag named like a config field, plus its documented renames. Megatron-LM's own argument parser
  (``megatron/training/arguments.py``) ships only in megatron-core 0.17 and later, which need Python
  3.12: where SUPERCLUSTER_MEGATRON_PYTHON names such an interpreter (``.ci/run`` builds one), each
  launch script is also run through Megatron-LM's ``parse_args`` and ``validate_args``
  (tests/fixtures/megatron_torchrun.py stands in for torchrun; the device is reported as an H100).
- DeepSpeed: ``DeepSpeedConfig`` on the JSON (its key validation and batch arithmetic), with the plan's
  data-parallel size given by an ``mpu`` and rank 0 (no process group without a launched job).

Each export read back by supercluster prices the step it was planned at.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import typing

import pytest

from supercluster.formats import launchers
from supercluster.formats import torchtitan as tt
from supercluster.formats.megatron_args import _pattern, parse_args
from supercluster.job import Job, check_job, estimate
from supercluster.models.spec import GATED

REQUIRED = os.environ.get("SUPERCLUSTER_REQUIRE_FRAMEWORKS") == "1"
# (the frameworks warn about their own deprecations on import; supercluster's warnings stay errors elsewhere)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning",
                                        "ignore::FutureWarning")


def _need(module: str):
    if REQUIRED:
        return __import__(module)
    return pytest.importorskip(module)


def _job(model: str, label: str, gpus: int, gbs: int, seq: int, framework: str, precision: str = "bf16") -> Job:
    return check_job(Job.from_label(label, model=model, gpu="h100-sxm", num_gpus=gpus, global_batch=gbs, seq_len=seq,
                                    framework=framework, precision=precision))


# ---- torchtitan 0.3 ------------------------------------------------------------------------------
TT_PLANS = [
    ("llama3-8b", "tp1-pp1-dp64-z3-none", 64, 256, 8192, "torchtitan", "bf16"),
    ("llama3-70b", "tp8-pp4-dp2-vpp2-z2-full", 64, 64, 8192, "torchtitan", "bf16"),
    ("llama3-405b", "tp8-pp8-dp4-z2-full", 256, 256, 8192, "torchtitan+compile", "fp8"),
    ("llama3-70b", "tp8-pp1-dp32-z3-full", 256, 512, 8192, "torchtitan+compile+tp-overlap", "bf16"),
    ("qwen3-30b-a3b", "tp1-pp1-dp16-ep8-z2-full", 16, 64, 4096, "torchtitan+compile", "bf16"),
    ("deepseek-v3", "tp1-pp8-dp32-ep32-z2-full", 256, 512, 4096, "torchtitan", "bf16"),
    ("gpt-oss-120b", "tp1-pp1-dp64-ep8-z3-full", 64, 256, 8192, "torchtitan", "bf16"),
    ("llama3-70b", "tp1-pp1-dp64-rep4-z3-full", 64, 128, 8192, "torchtitan", "bf16"),  # (HSDP)
]


#: torchtitan's activation-checkpoint config class for each recompute policy
AC_CONFIG = {"none": "NoneType", "full": "FullAC.Config", "selective": "SelectiveAC.Config"}


@pytest.fixture(scope="module")
def titan():
    _need("torchtitan")
    from unittest import mock

    from torchtitan.components.quantization import float8
    from torchtitan.config.manager import ConfigManager

    with mock.patch.object(float8, "has_cuda_capability", lambda *a: True):  # (the one check that needs a GPU)
        yield lambda args: ConfigManager().parse_args(args)


def _meta_params(cfg) -> int:
    import torch

    with torch.device("meta"):
        model = cfg.model_spec.model.build()
    return sum(p.numel() for p in model.parameters())


def test_every_torchtitan_config_named_builds_the_preset(titan):
    """Each (module, config) the export names builds, in torchtitan, the preset's parameters (0.1 %)."""
    from supercluster.formats.load import load_model

    counts = {}
    for key, (module, config) in tt.CONFIGS.items():
        if (module, config) not in counts:
            counts[module, config] = _meta_params(titan(["--module", module, "--config", config]))
        assert load_model(key).num_params == pytest.approx(counts[module, config], rel=1e-3), key


@pytest.mark.parametrize("plan", TT_PLANS, ids=[f"{p[0]}-{p[1]}" for p in TT_PLANS])
def test_torchtitan_parses_each_export_and_it_reads_back_at_the_planned_step(titan, tmp_path, plan):
    model, label, gpus, gbs, seq, framework, precision = plan
    job = _job(model, label, gpus, gbs, seq, framework, precision)
    lay = job.layout
    text = launchers.export(lay, "torchtitan", job.model, job.framework)
    tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    cfg = titan(tokens[tokens.index("torchtitan.train") + 1:])
    par, tr = cfg.parallelism, cfg.training
    shard = lay.dp // lay.dp_replicate if lay.zero_stage else 1
    assert (par.tensor_parallel_degree, par.pipeline_parallel_degree, par.context_parallel_degree,
            par.expert_parallel_degree, par.data_parallel_shard_degree, par.data_parallel_replicate_degree) == \
        (lay.tp, lay.pp, lay.cp, lay.ep, shard, lay.dp // shard)
    assert (tr.global_batch_size, tr.seq_len) == (lay.global_batch, lay.seq_len)
    assert type(cfg.activation_checkpoint).__qualname__ == AC_CONFIG[lay.recompute]
    assert cfg.compile.enable == (job.framework.elementwise == "fused")
    assert cfg.compile.enable_async_tensor_parallel == job.framework.tp_comm_overlap
    if lay.pp > 1:
        assert len(par.module_fqns_per_model_part) == lay.pp * lay.vpp
    assert int(tokens[tokens.index("--nnodes") + 1]) * int(tokens[tokens.index("--nproc-per-node") + 1]) == gpus
    path = tmp_path / "launch.sh"
    path.write_text(text)
    back = Job.from_config(str(path), gpu="h100-sxm")
    assert back.model.key == model and back.num_gpus == gpus and back.framework.key == framework
    assert estimate(back).step_time_s == pytest.approx(estimate(job).step_time_s, rel=1e-3)


def test_a_model_torchtitan_has_no_config_for_is_refused_by_name():
    job = _job("mixtral-8x7b", "tp1-pp1-dp16-ep8", 16, 64, 4096, "torchtitan")
    with pytest.raises(ValueError, match="^model: torchtitan 0.3 runs the models of its config registry; "
                                         "mixtral-8x7b has none"):
        launchers.export(job.layout, "torchtitan", job.model, job.framework)


# ---- Megatron-Core -------------------------------------------------------------------------------
MEGATRON_PLANS = [
    ("llama3-8b", "tp2-pp1-dp4", 8, 64, 8192),
    ("llama3-70b", "tp8-pp4-dp2-vpp5-full", 64, 64, 8192),
    ("mixtral-8x7b", "tp2-pp4-dp8-ep8-vpp2", 64, 256, 4096),
    ("qwen3-30b-a3b", "tp1-pp2-dp8-ep8", 16, 256, 4096),
    ("deepseek-v3", "tp2-pp8-dp64-ep64", 1024, 1024, 4096),
]
#: Megatron-LM's flags whose config field is named otherwise (arguments.py, core_transformer_config_from_args)
RENAMED = {"num-experts": "num_moe_experts", "fp8-format": "fp8", "fp4-format": "fp4",
           "disable-bias-linear": ("add_bias_linear", False), "swiglu": ("gated_linear_unit", True),
           "recompute-activations": ("recompute_granularity", "selective"),
           "no-gradient-accumulation-fusion": ("gradient_accumulation_fusion", False)}


def _typed(field, raw, args, layers):
    """A flag's value as the config field's type (Megatron-LM's argparse types)."""
    name = field.name
    if name == "moe_layer_freq":
        return _pattern(args, "moe-layer-freq", layers, "first")
    if name == "recompute_modules":
        return list(raw) if isinstance(raw, (list, tuple)) else str(raw).split()
    if raw is True:
        return True
    origin = [t for t in typing.get_args(field.type) if t is not type(None)] or [field.type]
    kind = origin[0]
    if typing.get_origin(kind) is typing.Literal:
        assert raw in typing.get_args(kind), f"--{name}: {raw!r} not one of {typing.get_args(kind)}"
        return raw
    if kind is bool:
        return True
    if kind is int:
        return int(raw)
    if kind is float:
        return float(raw)
    return raw


def _transformer_config(text: str):
    _need("megatron.core")
    import torch
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    args = parse_args(text)
    cls = MLATransformerConfig if args.get("multi-latent-attention") else TransformerConfig
    fields = {f.name: f for f in dataclasses.fields(cls)}
    layers = int(args["num-layers"])
    kw = {}
    for flag, raw in args.items():
        target = RENAMED.get(flag, flag.replace("-", "_"))
        if isinstance(target, tuple):
            kw[target[0]] = target[1]
        elif target in fields:
            kw[target] = _typed(fields[target], raw, args, layers)
    if "num-virtual-stages-per-pipeline-rank" in args:
        kw["virtual_pipeline_model_parallel_size"] = int(args["num-virtual-stages-per-pipeline-rank"])
    if "num-layers-per-virtual-pipeline-stage" in args:
        kw["virtual_pipeline_model_parallel_size"] = layers // (
            int(args["pipeline-model-parallel-size"]) * int(args["num-layers-per-virtual-pipeline-stage"]))
    if args.get("swiglu"):
        kw["activation_func"] = torch.nn.functional.silu
    if args.get("bf16"):
        kw["params_dtype"] = kw["pipeline_dtype"] = torch.bfloat16
    return cls(**kw), args


@pytest.mark.parametrize("plan", MEGATRON_PLANS, ids=[p[0] for p in MEGATRON_PLANS])
def test_megatron_core_builds_its_config_from_each_export(tmp_path, plan):
    model, label, gpus, gbs, seq = plan
    job = _job(model, label, gpus, gbs, seq, "nemo-megatron")
    lay, m = job.layout, job.model
    # (the launch script: its torchrun line starts the planned GPUs, its arguments build the config)
    text = launchers.export(lay, "megatron-launch", m, job.framework, counts_head=estimate(job).split_counts_head)
    cfg, _ = _transformer_config(text)
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_attention_heads) == (m.num_layers, m.d_model, m.num_heads)
    assert (cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size, cfg.context_parallel_size,
            cfg.expert_model_parallel_size) == (lay.tp, lay.pp, lay.cp, lay.ep)
    assert (cfg.virtual_pipeline_model_parallel_size or 1) == lay.vpp and cfg.sequence_parallel == (lay.tp > 1)
    assert cfg.normalization == "RMSNorm" and cfg.add_bias_linear is False and cfg.gated_linear_unit is True
    assert cfg.qk_layernorm == m.qk_norm
    if m.is_moe:
        assert (cfg.num_moe_experts, cfg.moe_router_topk, cfg.moe_ffn_hidden_size) == \
            (m.num_experts, m.top_k, m.moe_ffn_dim)
        freq = cfg.moe_layer_freq
        assert (sum(freq) if isinstance(freq, list) else m.num_layers // freq) == m.num_moe_layers
    if m.kv_lora_rank:
        assert (cfg.q_lora_rank, cfg.kv_lora_rank, cfg.qk_pos_emb_head_dim) == \
            (m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim)
    else:
        assert cfg.num_query_groups in (None, m.num_kv_heads) and cfg.ffn_hidden_size == m.ffn_dim
    path = tmp_path / "pretrain.sh"
    path.write_text(text)
    back = Job.from_config(str(path), gpu="h100-sxm")
    assert back.num_gpus == gpus and back.model.num_params == m.num_params
    assert estimate(back).step_time_s == pytest.approx(estimate(job).step_time_s, rel=1e-3)


def test_megatron_core_refuses_what_the_export_refuses_too():
    """The export refuses a TP size that does not divide the heads (check_job does), and Megatron-Core's
    config agrees: the same flags with TP 3 do not build."""
    job = _job("llama3-8b", "tp2-pp1-dp4", 8, 64, 8192, "nemo-megatron")
    text = launchers.export(job.layout, "megatron", job.model, job.framework).replace(
        "--tensor-model-parallel-size 2", "--tensor-model-parallel-size 3")
    with pytest.raises((AssertionError, ValueError)):
        _transformer_config(text)
    with pytest.raises(ValueError, match="^tp: 3 must divide the 32 attention heads"):
        _job("llama3-8b", "tp3-pp1-dp1", 3, 63, 8192, "nemo-megatron")


# ---- Megatron-LM's own argument parser ------------------------------------------------------------
#: a Python (>= 3.12) whose megatron-core (>= 0.17) ships megatron/training/arguments.py; .ci/run builds one
MEGATRON_PYTHON = os.environ.get("SUPERCLUSTER_MEGATRON_PYTHON")
#: more plans through the parser: fp8 current scaling, block recompute, Megatron-FSDP, all-to-all CP, a hybrid
ARGPARSE_PLANS = MEGATRON_PLANS + [
    ("llama3-70b", "tp4-pp4-dp4-cp2-vpp5-z2-full", 128, 128, 8192),
    ("llama3-8b", "tp1-pp1-dp8-z3-none", 8, 64, 8192),
    ("nemotronh-8b", "tp2-pp1-dp4", 8, 64, 8192),
    # hybrid sharding: Megatron-FSDP's replicas, and the distributed optimizer's instances
    ("llama3-8b", "tp1-pp1-dp16-rep2-z3-none", 16, 64, 8192),
    ("llama3-70b", "tp4-pp2-dp8-rep2-z1-full", 64, 64, 8192),
]
ARGPARSE_FRAMEWORKS = {"tp4-pp4-dp4-cp2-vpp5-z2-full": "nemo-megatron+fp8-current+cp-a2a"}


def _plan_id(plan: tuple) -> str:
    return f"{plan[0]}-{plan[1]}"


def _argparse_job(plan: tuple) -> Job:
    model, label, gpus, gbs, seq = plan
    return _job(model, label, gpus, gbs, seq, ARGPARSE_FRAMEWORKS.get(label, "nemo-megatron"),
                "fp8" if label in ARGPARSE_FRAMEWORKS else "bf16")


def _text(path) -> str:
    return path.read_text() if path.exists() else ""


@pytest.fixture(scope="module")
def megatron_lm_args(tmp_path_factory) -> dict[str, dict | str]:
    """What Megatron-LM's parse_args and validate_args make of each ARGPARSE_PLANS launch script, by plan
    id (a dict), or the reason it failed (a string). Each script is run by bash as written, with a
    ``torchrun`` that records the arguments and environment the script hands it; then one Megatron-LM
    process parses every recorded launch (tests/fixtures/megatron_torchrun.py --batch), so the script's own
    variables and environment are what Megatron-LM sees, at the cost of one import."""
    import subprocess
    import sys
    from pathlib import Path

    if not MEGATRON_PYTHON:
        pytest.skip("Megatron-LM's argument parser ships in megatron-core >= 0.17, which needs Python >= 3.12: "
                    "SUPERCLUSTER_MEGATRON_PYTHON names such an interpreter (.ci/run builds one)")
    root = tmp_path_factory.mktemp("megatron-lm")
    shim = root / "bin"
    shim.mkdir()
    record = "import json, os, sys; json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)}, " \
             "open(os.environ['SC_TORCHRUN_RECORD'], 'w'))"
    (shim / "torchrun").write_text(f'#!/bin/sh\nexec "{sys.executable}" -c "{record}" "$@"\n')
    (shim / "torchrun").chmod(0o755)
    launches, found = root / "launches", {}
    launches.mkdir()
    for n, plan in enumerate(ARGPARSE_PLANS):
        job = _argparse_job(plan)
        script = launchers.export(job.layout, "megatron-launch", job.model, job.framework,
                                  counts_head=estimate(job).split_counts_head)
        (root / f"{n:02d}.sh").write_text(script)
        env = {**os.environ, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}",
               "SC_TORCHRUN_RECORD": str(launches / f"{n:02d}.json")}
        env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)  # (only what the script sets)
        r = subprocess.run(["bash", str(root / f"{n:02d}.sh")], capture_output=True, text=True, env=env, timeout=60)
        found[_plan_id(plan)] = f"the script failed: {r.stderr[-3000:]}" if r.returncode else n
    fixture = Path(__file__).parent / "fixtures" / "megatron_torchrun.py"
    subprocess.run([MEGATRON_PYTHON, str(fixture), "--batch", str(launches)], capture_output=True, timeout=600)
    for key, n in found.items():
        if isinstance(n, int):
            base = launches / f"{n:02d}"
            rc, out = _text(base.with_suffix(".rc")).strip() or "none", _text(base.with_suffix(".out"))
            line = [x for x in out.splitlines() if x.startswith("megatron-args: ")]
            found[key] = json.loads(line[-1].removeprefix("megatron-args: ")) if rc == "0" and line else \
                f"exit {rc}: {_text(base.with_suffix('.err'))[-3000:] or out[-2000:]}"
    return found


@pytest.mark.parametrize("plan", ARGPARSE_PLANS, ids=[_plan_id(p) for p in ARGPARSE_PLANS])
def test_megatron_lm_parses_and_validates_each_launch_script(megatron_lm_args, plan):
    """Each exported launch script passes Megatron-LM's own parse_args and validate_args (its flag
    spelling, its cross-checks, the world torchrun starts), and the arguments it builds are the plan's:
    layout, batch arithmetic (the data-parallel size it derives), precision, architecture."""
    job = _argparse_job(plan)
    gbs, seq = plan[3], plan[4]
    lay, m = job.layout, job.model
    a = megatron_lm_args[_plan_id(plan)]
    assert isinstance(a, dict), a
    assert a["entry"] == ("pretrain_mamba.py" if m.recurrent_layers else "pretrain_gpt.py")
    assert (a["tensor_model_parallel_size"], a["pipeline_model_parallel_size"], a["context_parallel_size"],
            a["expert_model_parallel_size"], a["data_parallel_size"]) == (lay.tp, lay.pp, lay.cp, lay.ep, lay.dp)
    assert (a["virtual_pipeline_model_parallel_size"] or 1) == lay.vpp
    assert (a["micro_batch_size"], a["global_batch_size"], a["seq_length"]) == (lay.micro_batch, gbs, seq)
    assert (a["num_layers"], a["hidden_size"], a["num_attention_heads"]) == (m.num_layers, m.d_model, m.num_heads)
    assert a["normalization"] == "RMSNorm" and a["add_bias_linear"] is False and a["swiglu"] is GATED[m.mlp]
    assert a["untie_embeddings_and_output_weights"] is not m.tied_embeddings
    assert a["sequence_parallel"] == (lay.tp > 1) and a["bf16"] is True
    assert (a["fp8"] is not None) == (lay.precision == "fp8")
    assert (a["recompute_granularity"] or "none") == {"none": "none", "full": "full"}.get(lay.recompute,
                                                                                           "selective")
    assert a["use_megatron_fsdp"] == (lay.zero_stage >= 2) and a["use_distributed_optimizer"] == (lay.zero_stage >= 1)
    assert (a["num_distributed_optimizer_instances"] or 1) == lay.dp_replicate
    if m.is_moe:
        assert (a["num_experts"], a["moe_router_topk"], a["moe_ffn_hidden_size"]) == \
            (m.num_experts, m.top_k, m.moe_ffn_dim)
    if m.kv_lora_rank:
        assert a["multi_latent_attention"] and (a["q_lora_rank"], a["kv_lora_rank"]) == (m.q_lora_rank,
                                                                                         m.kv_lora_rank)
    elif not m.recurrent_layers:
        assert a["position_embedding_type"] == "rope" and a["ffn_hidden_size"] == m.ffn_dim
        assert (a["num_query_groups"] or m.num_heads) == m.num_kv_heads


# ---- DeepSpeed -----------------------------------------------------------------------------------
class _DataParallel:
    """What DeepSpeedConfig asks an ``mpu`` for: the data-parallel world (the plan's dp)."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp

    def get_model_parallel_world_size(self) -> int:
        return 1

    def get_tensor_model_parallel_world_size(self) -> int:
        return 1

    def get_pipeline_model_parallel_world_size(self) -> int:
        return 1


@pytest.mark.parametrize("label, gbs", [("tp1-pp1-dp64-mb2-z3-full", 256), ("tp1-pp4-dp16-z1-none", 512),
                                        ("tp1-pp1-dp16-cp4-z3-full", 32)])
def test_deepspeed_reads_each_export(label, gbs, tmp_path):
    _need("deepspeed")
    from unittest import mock

    from deepspeed.runtime import config as ds_config

    job = _job("llama3-70b", label, 64, gbs, 4096, "deepspeed")
    lay = job.layout
    text = launchers.export(lay, "deepspeed", job.model, job.framework)
    # (no process group without a launched job: rank 0 is given, the data-parallel world by the mpu)
    with mock.patch.object(ds_config.dist, "get_rank", lambda *a, **k: 0):
        cfg = ds_config.DeepSpeedConfig(json.loads(text), mpu=_DataParallel(lay.dp))
    assert (cfg.train_batch_size, cfg.train_micro_batch_size_per_gpu, cfg.gradient_accumulation_steps) == \
        (lay.global_batch, lay.micro_batch, lay.num_microbatches)
    assert cfg.zero_optimization_stage == lay.zero_stage and cfg.bfloat16_config.enabled
    # context parallelism as DeepSpeed's Ulysses mesh: its (data, sequence) sizes fill the GPUs
    said = json.loads(text)
    assert (said.get("sequence_parallel_size", 1), said.get("data_parallel_size", lay.dp)) == (lay.cp, lay.dp)
    path = tmp_path / "ds.json"
    path.write_text(text)
    back = Job.from_config(str(path), model="llama3-70b", gpu="h100-sxm", num_gpus=64)
    assert estimate(back).step_time_s == pytest.approx(estimate(job).step_time_s, rel=1e-3)
