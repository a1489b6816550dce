"""Hypothesis: whatever a user's file holds, reading it gives a sane result or one InputError naming a
field, never another exception, a hang or a NaN (config.json, launcher configs, device profiles)."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from supercluster.errors import InputError
from supercluster.formats import launchers
from supercluster.formats.hf import _HF_INT_FIELDS, from_hf_config
from supercluster.formats.load import load_model
from supercluster.formats.megatron_args import model_args, model_from_args, parse_args
from supercluster.formats.megatron_flags import framework_from_args
from supercluster.parallelism.framework import get_framework
from supercluster.parallelism.layout import Layout

HF_BASES = [
    {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
     "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "head_dim": 128},
    {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
     "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
     "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936, "decoder_sparse_step": 1,
     "mlp_only_layers": []},
    {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128,
     "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
     "num_experts_per_tok": 8, "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
     "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
     "num_nextn_predict_layers": 1},
    {"model_type": "mpt", "d_model": 4096, "n_layers": 32, "n_heads": 32, "expansion_ratio": 4, "vocab_size": 50432,
     "attn_config": {"kv_n_heads": 32}},
    {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64,
     "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 2880, "num_local_experts": 128,
     "num_experts_per_tok": 4, "vocab_size": 201088, "sliding_window": 128,
     "layer_types": ["sliding_attention", "full_attention"] * 18},
]
# what a broken or hostile file may hold where a number belongs
ODD = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**64), st.floats(allow_nan=True, allow_infinity=True),
                st.text(max_size=5), st.lists(st.integers(0, 3), max_size=3), st.just({}))


@st.composite
def mutated(draw: st.DrawFn, bases: list[dict], values: st.SearchStrategy = ODD, extra: tuple[str, ...] = ()) -> dict:
    """One of ``bases`` with up to three of its keys deleted or given one of ``values``, and up to two
    keys of ``extra`` (fields the reader knows that the base may lack) given one of ``values``."""
    cfg = dict(draw(st.sampled_from(bases)))
    for key in draw(st.lists(st.sampled_from(sorted(cfg)), min_size=1, max_size=3, unique=True)):
        if draw(st.booleans()):
            del cfg[key]
        else:
            cfg[key] = draw(values)
    if extra:
        for key in draw(st.lists(st.sampled_from(extra), max_size=2, unique=True)):
            cfg[key] = draw(values)
    return cfg


#: the count fields config.json reading knows (formats/hf.py), and the layer lists it reads
HF_FIELDS = (*_HF_INT_FIELDS, "mlp_only_layers", "moe_layers", "layer_types", "full_attention_interval")


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(HF_BASES, extra=HF_FIELDS))
# found by exploring: an MPT expansion ratio of 4e304 made an infinite MLP width (OverflowError)
@example(cfg={"model_type": "mpt", "d_model": 4096, "n_layers": 32, "n_heads": 32, "expansion_ratio": 4.4e304,
              "vocab_size": 50432, "attn_config": {"kv_n_heads": 32}})
# found by exploring: a negative first_k_dense_replace (-2**40) made the MoE layer count loop for hours
@example(cfg={**HF_BASES[2], "first_k_dense_replace": -2**40})
def test_any_config_json_imports_sanely_or_names_its_field(cfg):
    try:
        m = from_hf_config(json.loads(json.dumps(cfg)))
    except InputError as exc:
        assert exc.field
        return
    for v in (m.num_params, m.num_active_params, m.model_flops_per_token(4096)):
        assert math.isfinite(v) and v > 0


LAYOUT = Layout(tp=4, pp=4, dp=8, cp=2, vpp=2, global_batch=256, seq_len=8192, recompute="selective",
                sequence_parallel=True)
DS_BASE = json.loads(launchers.to_deepspeed_json(LAYOUT))


@st.composite
def deepspeed_configs(draw: st.DrawFn) -> dict:
    cfg = json.loads(json.dumps(DS_BASE))
    for key in draw(st.lists(st.sampled_from(sorted(cfg)), min_size=1, max_size=3, unique=True)):
        sub = cfg[key]
        if isinstance(sub, dict) and sub and draw(st.booleans()):
            sub[draw(st.sampled_from(sorted(sub)))] = draw(ODD)
        else:
            cfg[key] = draw(ODD)
    return cfg


def _checked(read) -> None:
    try:
        lay = read()
    except InputError as exc:
        assert exc.field
        return
    assert lay.num_gpus >= 1 and lay.global_batch >= 1


@settings(max_examples=200, deadline=2000)
@given(deepspeed_configs(), st.sampled_from([None, 256, 7]))
def test_any_deepspeed_config_reads_sanely_or_names_its_field(cfg, gpus):
    _checked(lambda: launchers.from_deepspeed_json(json.dumps(cfg, allow_nan=True), num_gpus=gpus))


def _toml(v: object) -> str | None:
    """A TOML value for ``v`` (None: leave the key out)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(str(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{}"
    return str(v)


TT_KEYS = [("parallelism", k) for k in ("tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree",
                                        "data_parallel_shard_degree", "data_parallel_replicate_degree",
                                        "pipeline_parallel_microbatch_size", "expert_parallel_degree",
                                        "expert_tensor_parallel_degree", "pipeline_parallel_schedule")] + \
    [("training", k) for k in ("local_batch_size", "global_batch_size", "seq_len", "compile")] + \
    [("activation_checkpoint", "mode"), ("model", "converters"), ("float8", "enable_float8_linear")]


@settings(max_examples=200, deadline=2000)
@given(st.dictionaries(st.sampled_from(TT_KEYS), ODD, max_size=5), st.sampled_from([None, 64, 7]),
       st.sampled_from([None, "parallelism", "training"]))
# found by exploring: 7 GPUs under pp 8 left a data-parallel degree of 0 (ZeroDivisionError)
@example(values={("parallelism", "pipeline_parallel_degree"): 8}, gpus=7, scalar_section=None)
@example(values={("parallelism", "pipeline_parallel_degree"): 0, ("parallelism", "data_parallel_shard_degree"): 0},
         gpus=None, scalar_section=None)
def test_any_torchtitan_config_reads_sanely_or_names_its_field(values, gpus, scalar_section):
    tables: dict[str, list[str]] = {}
    for (section, key), v in values.items():
        if (text := _toml(v)) is not None:
            tables.setdefault(section, []).append(f"{key} = {text}")
    top = f"{scalar_section} = 3\n" if scalar_section else ""
    body = "".join(f"[{s}]\n" + "\n".join(lines) + "\n" for s, lines in tables.items() if s != scalar_section)
    _checked(lambda: launchers.from_torchtitan_toml(top + body, num_gpus=gpus, num_layers=32))


TT_LAUNCH_VALUES = st.one_of(st.integers(-2**40, 2**64).map(str), st.text(max_size=6), st.just("1e400"),
                             st.just("tok_embeddings,layers.0 norm,output"))


@settings(max_examples=200, deadline=2000)
@given(st.dictionaries(st.sampled_from(TT_KEYS), TT_LAUNCH_VALUES, max_size=5), st.sampled_from([None, 64, 7]),
       st.sampled_from(["", "activation-checkpoint:full", "activation-checkpoint:memory-budget", "'unclosed"]),
       st.sampled_from(["--nnodes 8 --nproc-per-node 8", "--nnodes 0 --nproc-per-node 8", "--nnodes 1:4", ""]))
def test_any_torchtitan_launch_line_reads_sanely_or_names_its_field(values, gpus, tail, torchrun):
    """torchtitan 0.3's launch line, as a user may write it: any value where a number belongs, an unknown
    activation-checkpoint subcommand, an unclosed quote, an elastic or empty node count."""
    args = " ".join(f"--{s}.{k} {shlex.quote(v)}" for (s, k), v in values.items())
    text = f"torchrun {torchrun} -m torchtitan.train --module llama3 --config llama3_8b {args} {tail}"
    _checked(lambda: launchers.torchtitan.from_launch(text, gpus)[1])


PROFILE_FIGURES = [("memory", "bytes_per_s"), ("memory", "op_overhead_s"), ("gemm.bf16", "rate_flops_per_s"),
                   ("gemm.bf16", "overhead_s"), ("attention", "fwd_flops_per_s"), ("attention", "bwd_flops_per_s"),
                   ("device", "memory_bytes"), ("device", "threads")]


@pytest.fixture(scope="module")
def good_profile(tmp_path_factory) -> str:
    from supercluster.calibration.profile import Profile

    p = Profile(device="x", kind="cuda", threads=0, memory_bytes=80e9, gemm={"bf16": {"rate_flops_per_s": 7e14,
                "overhead_s": 0.0}}, memory_bytes_per_s=2.8e12, op_overhead_s=0.0,
                attention={"dtype": "bf16", "fwd_flops_per_s": 6e14, "bwd_flops_per_s": 5e14})
    return p.to_toml()


@settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(PROFILE_FIGURES), ODD)
def test_any_profile_figure_loads_sanely_or_names_its_field(good_profile, tmp_path, figure, value):
    from supercluster.calibration.profile import load_profile
    from supercluster.hardware.specs import get_gpu
    from supercluster.job import estimate

    section, key = figure
    lines, current, out = good_profile.splitlines(), "", []
    for line in lines:
        if line.startswith("["):
            current = line.strip("[]")
        if current == section and line.split(" = ")[0] == key:
            text = _toml(value)
            if text is None:
                continue
            line = f"{key} = {text}"
        out.append(line)
    path = Path(tmp_path) / "p.toml"
    path.write_text("\n".join(out) + "\n")
    try:
        prof = load_profile(path)
    except InputError as exc:
        assert exc.field.startswith("profile")
        return
    gpu = prof.gpu_spec(get_gpu("h100-sxm"))
    b = estimate("llama3-8b", gpu=gpu, num_gpus=8, layout=Layout(tp=8, global_batch=8, seq_len=4096))
    assert math.isfinite(b.step_time_s) and b.step_time_s > 0


# Megatron-LM launch scripts: the architecture flags of a few models (and a whole export: layout, framework
# flags and model), each value replaced by what a broken script may hold (a negative, zero or huge count,
# a fraction, text, an unset variable)
MEGATRON_BASES = [
    " ".join(model_args(load_model(k))) for k in ("llama3-8b", "deepseek-v3", "nemotron3-super-120b", "gpt-oss-120b")
] + [
    launchers.export(LAYOUT, "megatron", load_model("llama3-70b"), get_framework("nemo-megatron")),
    "--num-layers 48 --hidden-size 2048 --num-attention-heads 16 --vocab-size 1000 --num-experts 64 "
    "--moe-ffn-hidden-size 512 --moe-shared-expert-intermediate-size 512 --experimental-attention-variant "
    "gated_delta_net --linear-attention-freq 4 --linear-key-head-dim 128 --linear-value-head-dim 128 "
    "--linear-num-key-heads 16 --linear-num-value-heads 32 --attention-output-gate",
    " ".join(model_args(load_model("llama3-8b"))) + " --context-parallel-size 2 --cp-comm-type a2a",
]
ODD_TEXT = st.one_of(st.integers(-2**40, 2**64).map(str), st.sampled_from(["0", "-1", "1.5", "nan", "$UNSET", "(",
                                                                           "[1]*", "([0]*3+[1]*)", "x", "''"]))


@st.composite
def megatron_scripts(draw: st.DrawFn) -> str:
    args = draw(mutated([parse_args(text) for text in MEGATRON_BASES], ODD_TEXT))
    return " ".join(f"--{k}" if v is True else f"--{k} {shlex.quote(str(v))}" for k, v in args.items())


@settings(max_examples=300, deadline=2000)
@given(megatron_scripts(), st.sampled_from([None, 256, 7]))
def test_any_megatron_script_reads_as_a_sane_model_or_names_its_flag(text, gpus):
    args = parse_args(text)
    try:
        framework_from_args(args)
        m = model_from_args(args, "fuzzed")
    except InputError as exc:
        assert exc.field
    else:
        for v in (m.num_params, m.num_active_params, m.model_flops_per_token(4096)):
            assert math.isfinite(v) and v > 0
    if "global-batch-size" in args:
        _checked(lambda: launchers.from_megatron_args(text, num_gpus=gpus))


_RUNS_TEXT = Path(__file__).parents[2].joinpath("src/supercluster/data/heldout-runs.csv").read_text("utf-8")
RUN_ROWS = _RUNS_TEXT.splitlines()
#: what a hand-edited runs file may hold in any cell
CELLS = st.sampled_from(["", "0", "-1", "nan", "inf", "1e30", "99999999999999999999", "abc", "1.5", "fp8", "full",
                         "yes", "no", "tp8-pp2", "megatron+cp-a2a", "x" * 200])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(picks=st.lists(st.integers(1, len(RUN_ROWS) - 1), min_size=1, max_size=4),
       edits=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 60), CELLS), min_size=1, max_size=6),
       as_json=st.booleans())
def test_any_runs_file_validates_to_a_table_or_one_named_error(tmp_path, picks, edits, as_json):
    """Published rows with cells overwritten by odd values: validate prints its table or JSON (exit 0)
    or one InputError (exit 2), never another exception (the table once failed on a row without a
    measured time), and its JSON holds no NaN or infinity."""
    import csv
    import io

    from typer.testing import CliRunner

    from supercluster.cli import app

    header = next(csv.reader([RUN_ROWS[0]]))
    rows = [(next(csv.reader([RUN_ROWS[i]])) + [''] * len(header))[:len(header)] for i in picks]
    for which, col, value in edits:
        row = rows[which % len(rows)]
        row[col % len(header)] = value
    out = io.StringIO()
    csv.writer(out).writerows([header, *rows])
    path = tmp_path / "runs.csv"
    path.write_text(out.getvalue(), encoding="utf-8")
    r = CliRunner().invoke(app, ["validate", "--runs", str(path), *(["--json"] if as_json else [])])
    assert r.exception is None or isinstance(r.exception, (InputError, SystemExit)), repr(r.exception)
    if as_json and r.exit_code == 0:
        assert "NaN" not in r.output and "Infinity" not in r.output
        json.loads(r.output)
