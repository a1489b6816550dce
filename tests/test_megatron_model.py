"""A model written as Megatron-LM arguments reads back as the same model; launch scripts read."""

import dataclasses
import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from supercluster import launchers
from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.layout import Layout
from supercluster.megatron_model import model_args, model_from_args, parse_args
from supercluster.models import load_model, model_catalog

#: fields that name or describe a model rather than shape it
_NOT_SHAPE = {"key", "name", "source", "seq_len", "shared_ffn_dim", "num_shared_experts"}


def _round_trip(m):
    back = model_from_args(parse_args(" ".join(model_args(m))), key="back")
    return back


def _same_model(m, back):
    shape = [f.name for f in dataclasses.fields(m) if f.name not in _NOT_SHAPE]
    assert {f: getattr(back, f) for f in shape} == {f: getattr(m, f) for f in shape}
    assert back.shared_width == m.shared_width
    assert back.num_params == m.num_params
    for seq in (4096, 131072):
        assert back.model_flops_per_token(seq, causal=True) == m.model_flops_per_token(seq, causal=True)


@pytest.mark.parametrize("key", sorted(model_catalog()))
def test_every_preset_round_trips_through_megatron_arguments(key):
    m = model_catalog()[key]
    _same_model(m, _round_trip(m))


def test_gated_deltanet_mtp_and_uneven_patterns_round_trip():
    qwen = load_model("qwen3-30b-a3b")
    gdn = dataclasses.replace(qwen, gdn_layers=36, gdn_k_heads=16, gdn_v_heads=32, gdn_k_dim=128, gdn_v_dim=128,
                              attn_output_gate=True, num_shared_experts=1, shared_ffn_dim=512)
    text = " ".join(model_args(gdn))
    assert "--linear-attention-freq 4" in text and "--attention-output-gate" in text  # 1 attention layer in 4
    _same_model(gdn, _round_trip(gdn))
    # 5 GDN layers of 48: no integer frequency gives that, so a list expression does
    odd = dataclasses.replace(gdn, gdn_layers=5)
    assert "'([1]*5+[0]*43)'" in " ".join(model_args(odd))
    _same_model(odd, _round_trip(odd))
    ds = load_model("deepseek-v3+mtp")
    _same_model(ds, _round_trip(ds))
    gemma_like = dataclasses.replace(load_model("llama3-8b"), sliding_window=1024, window_layers=20)
    _same_model(gemma_like, _round_trip(gemma_like))


@pytest.mark.parametrize("flag, value, layers, marked", [
    ("moe-layer-freq", "2", 8, 4),                    # Megatron: layer i is MoE when i % 2 == 0
    ("moe-layer-freq", "([0]*3+[1]*58)", 61, 58),
    ("moe-layer-freq", "([1]*3+[0]*1)*3", 12, 9),
    ("moe-layer-freq", "[1,1,0]*2+[0,1]", 8, 5),
])
def test_moe_layer_patterns_read_as_megatron_expands_them(flag, value, layers, marked):
    args = parse_args(f"--num-layers {layers} --hidden-size 256 --num-attention-heads 4 --vocab-size 1000 "
                      f"--num-experts 8 --moe-router-topk 2 --{flag} '{value}'")
    assert model_from_args(args, "m").num_moe_layers == marked


def test_linear_attention_and_window_frequencies_mark_all_but_every_nth_layer():
    base = "--num-layers 48 --hidden-size 2048 --num-attention-heads 16 --vocab-size 1000 "
    gdn = model_from_args(parse_args(base + "--experimental-attention-variant gated_delta_net "
                                     "--linear-attention-freq 4 --linear-key-head-dim 128 --linear-value-head-dim 128 "
                                     "--linear-num-key-heads 16 --linear-num-value-heads 32"), "q")
    assert (gdn.gdn_layers, gdn.attention_layers) == (36, 12)
    swa = model_from_args(parse_args(base + "--window-size '(128,0)' --window-attn-skip-freq 2"), "g")
    assert (swa.sliding_window, swa.window_layers) == (128, 24)


# A launch script in the style of Megatron-LM's examples: variables, bash arrays, quoted items,
# comments, both branches of a conditional (written for this test).
SCRIPT = """#!/bin/bash
TP_SIZE=2
NUM_LAYERS=32
SEQ_LENGTH=${SEQ_LENGTH:-8192}
DTYPE="fp8"
MODEL_ARGS=(
    --num-layers $NUM_LAYERS
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --seq-length $SEQ_LENGTH
    --max-position-embeddings ${SEQ_LENGTH}
    --position-embedding-type rope
    --swiglu
    --untie-embeddings-and-output-weights
    --disable-bias-linear
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 128   # sequences per step
    --bf16
)
if [[ "$DTYPE" == "fp8" ]]; then
    DTYPE_ARGS+=(
        "--fp8-format hybrid"
        "--fp8-amax-history-len 1024"
    )
fi
DATA_ARGS=( "--tokenizer-type NullTokenizer" "--vocab-size 128000" "--split '99,1,0'" )
torchrun ${DIST_ARGS[@]} pretrain_gpt.py ${MODEL_ARGS[@]} ${TRAINING_ARGS[@]} ${DTYPE_ARGS[@]} \\
    --tensor-model-parallel-size $TP_SIZE --sequence-parallel ${DATA_ARGS[@]}
"""


def test_a_launch_script_reads_as_its_model_and_its_layout(tmp_path):
    path = tmp_path / "train_llama3_8b.sh"
    path.write_text(SCRIPT)
    m, llama = load_model(str(path)), load_model("llama3-8b")
    _same_model(llama, m)
    assert m.seq_len == 8192
    lay = launchers.load_layout(path, num_gpus=16)
    assert (lay.tp, lay.dp, lay.precision, lay.global_batch, lay.seq_len, lay.sequence_parallel) == \
        (2, 8, "fp8", 128, 8192, True)


def test_estimate_takes_the_model_from_the_config_script(tmp_path):
    path = tmp_path / "train.sh"
    path.write_text(SCRIPT)
    run = CliRunner().invoke
    common = ["estimate", "--config", str(path), "--gpus", "16", "--gpu", "h100-sxm", "--json"]
    own = run(app, common)
    named = run(app, common + ["--model", "llama3-8b"])
    other = run(app, common + ["--model", "llama3-70b"])
    assert own.exit_code == named.exit_code == other.exit_code == 0, own.output
    step = [json.loads(r.output)["step_time_s"] for r in (own, named, other)]
    assert step[0] == step[1] < step[2]  # the script's 8B model, not the 405B default; --model still wins
    alone = run(app, ["estimate", "--model", str(path), "--gpus", "16", "--tp", "1", "--pp", "1", "--json",
                      "--global-batch", "128", "--seq-len", "8192"])
    assert alone.exit_code == 0 and json.loads(alone.output)["fits"] is True


def test_the_planner_export_writes_the_whole_architecture():
    lay = Layout(tp=1, pp=16, dp=64, ep=64, global_batch=8192, seq_len=4096, zero_stage=1)
    text = launchers.export(lay, "megatron", load_model("deepseek-v3"))
    for flag in ("--multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 "
                 "--qk-pos-emb-head-dim 64 --v-head-dim 128", "--moe-ffn-hidden-size 2048",
                 "--moe-shared-expert-intermediate-size 2048", "--moe-layer-freq '([0]*3+[1]*58)'",
                 "--vocab-size 129280", "--untie-embeddings-and-output-weights", "--swiglu"):
        assert flag in text
    _same_model(load_model("deepseek-v3"), model_from_args(parse_args(text), "back"))


@pytest.mark.parametrize("text, field, says", [
    ("--num-layers 4 --hidden-size 64 --num-attention-heads 4", "vocab-size", "tokenizer"),
    ("--num-layers $NL --hidden-size 64 --num-attention-heads 4 --vocab-size 10", "num-layers", "$NL"),
    ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 10 --moe-latent-size 32 "
     "--num-experts 8", "moe-latent-size", "latent MoE"),
    ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 10 "
     "--experimental-attention-variant kda", "experimental-attention-variant", "gated_delta_net"),
    ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 10 --num-experts 4 "
     "--moe-layer-freq '([0]*3+[1]*2)'", "moe-layer-freq", "4 layers"),
    ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 10 --num-experts 4 "
     "--moe-layer-freq '__import__(1)'", "moe-layer-freq", "or an integer"),
    ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 10 --window-size '(-1,-1)'",
     "window-size", "(w,0)"),
    ("--tensor-model-parallel-size 2 --global-batch-size 8", "config", "no model"),
])
def test_unreadable_or_unmodelled_arguments_name_the_flag(text, field, says):
    with pytest.raises(InputError) as e:
        model_from_args(parse_args(text), "m")
    assert e.value.field == field and says in str(e.value)


def test_what_megatron_cannot_express_is_refused_on_export():
    llama4_like = dataclasses.replace(load_model("llama3-8b"), attention_chunk=8192, window_layers=24)
    with pytest.raises(InputError, match="chunked attention"):
        model_args(llama4_like)
    with pytest.raises(InputError, match="plain-ReLU"):
        model_args(dataclasses.replace(load_model("llama3-8b"), mlp="relu"))


def test_a_bad_script_is_one_clear_cli_error(tmp_path):
    path = tmp_path / "broken.sh"
    path.write_text("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --global-batch-size 8\n")
    r = subprocess.run([sys.executable, "-m", "supercluster", "estimate", "--config", str(path), "--gpus", "8"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error: vocab-size:") and "Traceback" not in r.stderr
