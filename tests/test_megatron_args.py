"""A model written as Megatron-LM arguments reads back as the same model; launch scripts read."""

import dataclasses
import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.formats import launchers
from supercluster.formats.load import load_model
from supercluster.formats.megatron_args import model_args, model_from_args, parse_args
from supercluster.formats.megatron_flags import framework_from_args
from supercluster.models.catalog import model_catalog
from supercluster.parallelism.layout import Layout

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


# Llama 4's chunked attention and BLOOM's ALiBi have no Megatron-LM argument: their export is refused
# by name (below)
UNEXPORTABLE = {"llama4-maverick", "llama4-scout", "bloom-176b"}


@pytest.mark.parametrize("key", sorted(set(model_catalog()) - UNEXPORTABLE))
def test_every_preset_round_trips_through_megatron_arguments(key):
    m = model_catalog()[key]
    _same_model(m, _round_trip(m))


def test_a_preset_without_megatron_arguments_is_refused_by_name():
    for key in UNEXPORTABLE:
        with pytest.raises(InputError, match="chunked attention|alibi position embeddings have no Megatron-LM"):
            model_args(model_catalog()[key])


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


@pytest.mark.parametrize("value, says", [
    ("(" * 5000 + "[1]" + ")" * 5000, "brackets nested too deeply"),
    ("([0]*900000+[1]*900000)" + "+[1]" * 20, "far longer than any model"),
    ("[1]*" + "9" * 5000, "far longer than any model"),
])
def test_a_layer_pattern_that_cannot_be_a_model_is_refused_by_name(value, says):
    """Deep brackets were a RecursionError; a sum's list grew a copy at a time past any model before
    its length was checked; a count is read to 9 digits (Python refuses to convert 4,300): each is one
    named error, the pattern shown cut short."""
    args = parse_args("--num-layers 8 --hidden-size 256 --num-attention-heads 4 --vocab-size 1000 "
                      f"--num-experts 8 --moe-router-topk 2 --moe-layer-freq '{value}'")
    with pytest.raises(InputError, match=f"^moe-layer-freq: '.{{80}}\\.\\.\\.': {says}"):
        model_from_args(args, "m")


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
HALF_FFN=7168
MODEL_ARGS=(
    --num-layers $NUM_LAYERS
    --hidden-size 4096
    --ffn-hidden-size $(( ${HALF_FFN} * 2 ))
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --seq-length $SEQ_LENGTH
    --max-position-embeddings ${SEQ_LENGTH}
    --position-embedding-type rope
    --rotary-base 500000
    --normalization RMSNorm
    --swiglu
    --untie-embeddings-and-output-weights
    --disable-bias-linear
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 128   # sequences per step
    --recompute-activations
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
    assert (lay.tp, lay.dp, lay.precision, lay.global_batch, lay.seq_len, lay.sequence_parallel, lay.recompute) == \
        (2, 8, "fp8", 128, 8192, True, "selective")


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
    ("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --vocab-size 10 "
     "--heterogeneous-layers-config-path cfg.json", "heterogeneous-layers-config-path", "heterogeneous layers"),
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


def test_framework_flags_switch_megatron_behaviours_at_megatron_lm_defaults():
    bare = framework_from_args(parse_args("--bf16"))
    assert (bare.family, bare.dp_overlap, bare.tp_comm_overlap, bare.pp_overlap, bare.ep_overlap) == \
        ("megatron", False, False, True, False)
    assert (bare.grad_bytes, bare.grad_reduce_bytes, bare.dropout, bare.pp_split_counts_head) == (4, 4, True, False)
    tuned = framework_from_args(parse_args(
        "--bf16 --overlap-grad-reduce --overlap-param-gather --tp-comm-overlap --grad-reduce-in-bf16 "
        "--attention-dropout 0.0 --hidden-dropout 0 --overlap-moe-expert-parallel-comm "
        "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split --fp8-param-gather "
        "--no-overlap-p2p-communication"))
    assert (tuned.dp_overlap, tuned.tp_comm_overlap, tuned.pp_overlap, tuned.ep_overlap, tuned.ep_overlap_bounded) == \
        (True, True, False, True, True)
    assert (tuned.grad_bytes, tuned.dropout, tuned.pp_split_counts_head, tuned.fp8_param_gather) == \
        (2, False, True, True)
    assert framework_from_args(parse_args("--fp16")).grad_bytes == 2  # fp16 keeps fp16 gradients by default
    with pytest.raises(InputError, match="attention-dropout"):
        framework_from_args(parse_args("--attention-dropout x"))


def test_optimizer_state_and_loss_kernel_flags_read_as_their_bytes_and_export_back():
    """--use-precision-aware-optimizer is TE's FusedAdam: bf16 parameters keep their fp32 master as 16-bit
    remainders (2 bytes) beside m and v in the dtypes the flags name; --cross-entropy-fusion-impl te (a
    script of a Megatron-LM that still takes it) keeps 2 bytes a logit. The nemo-megatron profile (NVIDIA's
    scripts: precision-aware for bf16) exports the optimizer flags, which read back as it."""
    from supercluster.formats.megatron_flags import framework_args
    from supercluster.parallelism.framework import get_framework
    from supercluster.parallelism.layout import Layout

    bare = framework_from_args(parse_args("--bf16"))
    assert (bare.optimizer_bytes_per_param, bare.bf16_optimizer_bytes_per_param, bare.loss_bytes_per_logit) == \
        (12.0, 0.0, 8.0)
    aware = framework_from_args(parse_args("--bf16 --use-precision-aware-optimizer --cross-entropy-loss-fusion "
                                           "--cross-entropy-fusion-impl te"))
    assert (aware.optimizer_bytes_per_param, aware.bf16_optimizer_bytes_per_param, aware.loss_bytes_per_logit) == \
        (12.0, 10.0, 2.0)
    low = framework_from_args(parse_args("--bf16 --use-precision-aware-optimizer --exp-avg-dtype bf16 "
                                         "--exp-avg-sq-dtype bf16"))
    assert (low.optimizer_bytes_per_param, low.bf16_optimizer_bytes_per_param) == (8.0, 6.0)
    with pytest.raises(InputError, match="exp-avg-dtype"):
        framework_from_args(parse_args("--use-precision-aware-optimizer --exp-avg-dtype fp64"))
    nemo = get_framework("nemo-megatron")
    bf16 = framework_args(nemo, Layout(tp=1, global_batch=8, seq_len=4096), sequence_parallel=False)
    back = framework_from_args(parse_args("--bf16 " + " ".join(bf16)))
    # (Megatron-LM refuses the TE loss today: the export leaves it out and the script runs the native one)
    assert (back.bf16_optimizer_bytes_per_param, back.loss_bytes_per_logit) == (10.0, 8.0)
    assert not any("cross-entropy-fusion-impl" in a for a in bf16)
    fp8 = framework_args(nemo, Layout(tp=1, global_batch=8, seq_len=4096, precision="fp8"), sequence_parallel=False)
    assert not any("precision-aware" in a for a in fp8)  # (fp8 runs keep the fp32 master: 12 bytes)


def test_estimate_prices_the_scripts_own_overlap_flags(tmp_path):
    lean, tuned = tmp_path / "lean.sh", tmp_path / "tuned.sh"
    lean.write_text(SCRIPT)
    tuned.write_text(SCRIPT + "--overlap-grad-reduce --overlap-param-gather --use-distributed-optimizer "
                              "--attention-dropout 0 --hidden-dropout 0\n")
    run = CliRunner().invoke
    out = {}
    for name, path, extra in (("lean", lean, []), ("tuned", tuned, []),
                              ("nemo", lean, ["--framework", "nemo-megatron"])):
        r = run(app, ["estimate", "--config", str(path), "--gpus", "64", "--gpu", "h100-sxm", "--json", *extra])
        assert r.exit_code == 0, r.output
        out[name] = json.loads(r.output)
    assert out["lean"]["framework"] == "megatron-lm (lean.sh)" and out["nemo"]["framework"] == "nemo-megatron"
    # without --overlap-grad-reduce the whole gradient all-reduce is exposed; dropout kernels run
    assert out["lean"]["ledger"]["exposed_dp_comm"] > out["tuned"]["ledger"]["exposed_dp_comm"]
    assert out["lean"]["step_time_s"] > out["tuned"]["step_time_s"]
    assert out["nemo"]["step_time_s"] != out["lean"]["step_time_s"]
    # the table view says which switches the script left off
    shown = {p.name: " ".join(run(app, ["estimate", "--config", str(p), "--gpus", "64"]).output.split())
             for p in (lean, tuned)}
    assert "gradient-sync overlap off (--overlap-grad-reduce)" in shown["lean.sh"] and "dropout on" in shown["lean.sh"]
    assert "gradient-sync overlap on" in shown["tuned.sh"] and "dropout off" in shown["tuned.sh"]


@pytest.mark.parametrize("model, gpus, gbs, framework", [
    ("llama3-70b", 64, 128, "nemo-megatron"),
    ("mixtral-8x7b", 32, 256, "nemo-megatron+ep-overlap"),
    ("mixtral-8x7b", 64, 256, "megatron+deepep"),
    ("llama3-8b", 16, 64, "megatron"),
])
def test_a_plan_exported_to_megatron_reads_back_at_the_planned_step_time(tmp_path, model, gpus, gbs, framework):
    """The export carries the layout, the architecture and the behaviour flags of the profile the plan
    was priced with, so the launch script prices as the plan did."""
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import get_framework
    from supercluster.planner.search import plan

    m, fw = load_model(model), get_framework(framework)
    best = plan(m, get_gpu("h100-sxm"), gpus, global_batch=gbs, seq_len=8192, framework=fw, top=1).best
    path = tmp_path / "run.sh"
    path.write_text(launchers.export(best.layout, "megatron", m, fw))
    r = CliRunner().invoke(app, ["estimate", "--config", str(path), "--gpus", str(gpus), "--gpu", "h100-sxm", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["step_time_s"] == pytest.approx(best.step_time_s, rel=1e-12)


# A script in the style of the DeepSeek-V3 example launchers: flags gathered in quoted option strings,
# shell arithmetic for the shared-expert width, a quoted pattern variable (written for this test)
DSV3_SCRIPT = """#!/bin/bash
EP=${EP:-64}
HIDDEN_SIZE=7168
NUM_LAYERS=${NUM_LAYERS:-61}
MOE_INTERMEDIATE_SIZE=2048
NUM_SHARED_EXPERTS=1
MOE_LAYER_FREQ='([0]*3+[1]*58)'
moe_options=" \\
    --normalization RMSNorm --position-embedding-type rope --disable-bias-linear \\
    --multi-latent-attention \\
    --q-lora-rank 1536 \\
    --kv-lora-rank 512 \\
    --qk-head-dim 128 \\
    --qk-pos-emb-head-dim 64 \\
    --v-head-dim 128 \\
    --moe-ffn-hidden-size ${MOE_INTERMEDIATE_SIZE} \\
    --moe-layer-freq '${MOE_LAYER_FREQ}' \\
    --moe-shared-expert-intermediate-size $((${NUM_SHARED_EXPERTS} * ${MOE_INTERMEDIATE_SIZE})) \\
    --num-experts 256 --moe-router-topk 8 \\
    --moe-router-num-groups 8 --moe-router-group-topk 4 \\
    --expert-model-parallel-size ${EP}"
if [ "$PR" = fp8 ]; then
    pr_options="--bf16 --fp8-format hybrid"
else
    pr_options="--bf16"
fi
megatron_options="--micro-batch-size 1 --global-batch-size 8192 --num-layers ${NUM_LAYERS} \\
    --hidden-size ${HIDDEN_SIZE} --num-attention-heads 128 --ffn-hidden-size 18432 --seq-length 4096 \\
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 16 --swiglu \\
    --untie-embeddings-and-output-weights --vocab-size 129280"
run_cmd="torchrun pretrain_gpt.py ${megatron_options} ${pr_options} ${moe_options}"
eval ${run_cmd}
"""


def test_flags_in_quoted_option_strings_read_as_the_model(tmp_path):
    path = tmp_path / "train_deepseekv3.sh"
    path.write_text(DSV3_SCRIPT)
    _same_model(load_model("deepseek-v3"), load_model(str(path)))
    lay = launchers.load_layout(path, num_gpus=1024)
    # conditionals are not followed: every flag written counts, so the fp8 branch's --fp8-format does
    # (documented; a script that switches precision by a condition is read as its fp8 run)
    assert (lay.pp, lay.ep, lay.dp, lay.global_batch, lay.precision) == (16, 64, 64, 8192, "fp8")


def test_nvfp4_travels_as_megatron_fp4_flags_and_is_refused_where_a_launcher_has_none():
    lay = Layout(tp=1, pp=1, dp=64, global_batch=256, seq_len=8192, precision="fp4", zero_stage=1)
    text = launchers.export(lay, "megatron", load_model("llama3-8b"))
    assert "--fp4-format e2m1 --fp4-recipe nvfp4" in text
    assert launchers.from_megatron_args(text, num_gpus=64).precision == "fp4"
    with pytest.raises(InputError, match="^precision: torchtitan's job config"):
        launchers.export(lay, "torchtitan-toml")
    with pytest.raises(InputError, match="^precision: torchtitan 0.3's llama3_8b config trains in bf16"):
        launchers.export(lay, "torchtitan", load_model("llama3-8b"))


def test_deepep_dispatch_sends_each_token_once_per_node():
    """DeepEP's dispatch (Megatron --moe-enable-deepep): a token crosses once to every node, and goes
    once to every rank, holding any of its experts; hand-worked for Qwen3 235B's 128 experts, top-8,
    over four nodes and over the eight ranks of one."""
    from math import comb

    from supercluster.hardware.specs import get_gpu
    from supercluster.job import default_network, estimate
    from supercluster.network.twolevel import node_dedup_factor
    from supercluster.parallelism.framework import get_framework

    hit = 1 - comb(96, 8) / comb(128, 8)  # a node holds one of a token's 8 experts
    assert node_dedup_factor(128, 8, 4) == pytest.approx(4 * hit / 8, rel=1e-12)  # 3 x 0.907 of 6 copies
    assert node_dedup_factor(128, 8, 1) == 1.0 and node_dedup_factor(8, 8, 2) == pytest.approx(2 / 8)
    m, gpu = load_model("qwen3-235b-a22b"), get_gpu("h100-sxm")
    net = default_network(gpu, num_gpus=256)

    def ep_comm(layout, fw):
        return estimate(m, gpu=gpu, num_gpus=256, layout=layout, framework=fw, network=net).ledger["exposed_ep_comm"]

    across = Layout(tp=2, pp=8, vpp=4, dp=16, ep=32, expert_tp=1, global_batch=2048, seq_len=4096, zero_stage=1)
    within = Layout(tp=1, pp=8, vpp=4, dp=32, ep=8, global_batch=2048, seq_len=4096, zero_stage=1)
    plain, deep = get_framework("megatron"), get_framework("megatron+deepep")
    assert ep_comm(across, deep) < 0.6 * ep_comm(across, plain)  # EP 32 spans four nodes
    # one node: nothing crosses, but each rank gets a token once however many of its experts it holds
    # (16 of 128 a rank: 8 x (1 - C(112, 8) / C(128, 8)) = 5.3 ranks of 8 copies); latency stays
    share, t_plain, t_deep = node_dedup_factor(128, 8, 8), ep_comm(within, plain), ep_comm(within, deep)
    assert share == pytest.approx(1 - comb(112, 8) / comb(128, 8), rel=1e-12)
    assert share * t_plain < t_deep < t_plain and t_deep == pytest.approx(share * t_plain, rel=0.05)
    # the launch flags carry it both ways
    text = launchers.export(across, "megatron", m, deep)
    assert "--moe-token-dispatcher-type flex --moe-enable-deepep" in text
    assert framework_from_args(parse_args(text)).ep_node_dedup
    assert "--moe-token-dispatcher-type alltoall" in launchers.export(across, "megatron", m, plain)


def test_variables_that_expand_each_other_are_refused_at_a_small_multiple_of_the_script():
    """A 'billion laughs' script (each variable twice the one before) would fill gigabytes; it is
    refused once the filled-in text passes 16x the script, and an ordinary script is read as before."""
    from supercluster.formats.megatron_args import EXPANSION_FACTOR, EXPANSION_SLACK, parse_args

    laughs = "A=xxxxxxxxxx\n" + "".join(f"{chr(66 + i)}=${chr(65 + i)}${chr(65 + i)}\n" for i in range(40))
    laughs += "python pretrain_gpt.py --num-layers 4 --hidden-size $Z\n"
    with pytest.raises(InputError, match="^config: its shell variables expand past"):
        parse_args(laughs)
    assert EXPANSION_FACTOR * len(laughs) + EXPANSION_SLACK < 2**20
    ok = "L=32\nH=4096\npython pretrain_gpt.py --num-layers $L --hidden-size ${H} --seq-length $((2 * 4096))\n"
    assert parse_args(ok) == {"num-layers": "32", "hidden-size": "4096", "seq-length": "8192"}


def test_shell_arithmetic_is_bash_64_bit_and_the_words_read_are_bounded():
    """Bash works $((...)) in 64-bit integers: past that the text stays (and the flag refuses it), so
    a product of thousands-digit numbers costs no big-integer work. Python's shlex builds a word a
    character at a time (work growing with the square of its length): the text read as shell words
    is bounded, a larger script refused by name before it is split, its expansions capped there too."""
    from supercluster.files import MAX_SHELL_TEXT_CHARS, shell_words

    big = "9" * 4000
    args = parse_args(f"L=$(({big}*{big}))\npython pretrain_gpt.py --num-layers $L --seq-length $((2**3))"
                      " --hidden-size $((3037000500*3037000500)) --ffn-hidden-size $((3037000499*3037000499))\n")
    assert args["num-layers"].startswith("$((9999") and args["seq-length"] == "$((2**3))"
    assert args["hidden-size"].startswith("$((") and args["ffn-hidden-size"] == str(3037000499 ** 2)
    with pytest.raises(InputError, match="^num-layers: must be an integer, got .*characters more\\)$"):
        model_from_args(args, key="x")
    with pytest.raises(InputError, match=f"^config: a launch script of {MAX_SHELL_TEXT_CHARS + 1:,} characters; "
                                         f"at most {MAX_SHELL_TEXT_CHARS:,} are read"):
        parse_args("x" * (MAX_SHELL_TEXT_CHARS + 1))
    with pytest.raises(InputError, match=f"^config: its shell variables expand past {MAX_SHELL_TEXT_CHARS:,}"):
        parse_args("A=" + "y" * 60000 + "\npython pretrain_gpt.py --x $A$A$A$A$A\n")
    with pytest.raises(InputError, match="^field: the text of 262,145 characters; at most 262,144"):
        shell_words("z" * (MAX_SHELL_TEXT_CHARS + 1), "field", "the text")
    assert shell_words("--a 'b c' # d", "field", "x") == ["--a", "b c"]


def test_an_error_echoes_at_most_a_thousand_characters_of_a_value():
    err = InputError("model", "got " + "x" * 5000)
    assert str(err).startswith("model: got xxx") and str(err).endswith("... (4,004 characters more)")
    assert len(str(err)) < 1100


def test_a_model_file_is_read_once_while_unchanged_and_again_when_changed(tmp_path):
    path = tmp_path / "run.sh"
    path.write_text("python pretrain_gpt.py --num-layers 4 --hidden-size 256 --num-attention-heads 4 "
                    "--seq-length 128 --vocab-size 1000\n")
    first = load_model(str(path))
    assert load_model(str(path)) is first and first.num_layers == 4
    path.write_text(path.read_text().replace("--num-layers 4", "--num-layers 12"))
    assert load_model(str(path)).num_layers == 12


def test_a_launch_script_starts_its_own_gpu_count_when_none_is_given(tmp_path):
    runner = CliRunner()
    """Megatron-LM's example scripts: GPUS_PER_NODE x NUM_NODES through torchrun's --nproc_per_node and
    --nnodes, flags in bash arrays (one per line, or on one line); --gpus, when given, wins."""
    from pathlib import Path

    script = Path(__file__).parent / "fixtures" / "pretrain_llama3_8b.sh"
    args = parse_args(script.read_text())
    assert (args["nproc-per-node"], args["nnodes"], args["tensor-model-parallel-size"],
            args["pipeline-model-parallel-size"]) == ("8", "4", "2", "2")
    lay = launchers.from_megatron_args(script.read_text())
    assert (lay.num_gpus, lay.tp, lay.pp, lay.dp) == (32, 2, 2, 8)
    r = runner.invoke(app, ["estimate", "--config", str(script), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["gpus"] == 32
    r = runner.invoke(app, ["estimate", "--config", str(script), "--gpus", "64", "--json"])
    assert json.loads(r.stdout)["gpus"] == 64
    # --flag=value reads as --flag value; a script that starts no torchrun asks for --gpus by name
    assert parse_args("torchrun --nproc_per_node=4 --nnodes=2 x.py --num-layers=12")["num-layers"] == "12"
    no_launch = tmp_path / "run.sh"
    no_launch.write_text("python pretrain_gpt.py --global-batch-size 64 --tensor-model-parallel-size 2\n")
    r = runner.invoke(app, ["estimate", "--model", "llama3-8b", "--config", str(no_launch)])
    assert isinstance(r.exception, InputError) and r.exception.field == "gpus" and "--gpus" in str(r.exception)


def test_a_launch_script_given_as_the_model_says_that_config_would_take_its_run_too():
    """``--model script.sh`` reads the architecture only (the layout is planned for the GPU count given);
    the note says so and names ``--config``, which takes the script's layout and GPU count as well."""
    from pathlib import Path

    from supercluster.formats.load import is_launch_script

    script = Path(__file__).parent / "fixtures" / "pretrain_llama3_8b.sh"
    assert is_launch_script(str(script)) and not is_launch_script("llama3-8b")
    assert not is_launch_script(str(script.parent / "absent.sh"))
    r = CliRunner().invoke(app, ["estimate", "--model", str(script), "--gpus", "64", "--global-batch", "128",
                                 "--seq-len", "8192"])
    assert r.exit_code == 0, r.output
    assert f"--config {script} also takes its layout and GPU count" in " ".join(r.output.split())
    plain = CliRunner().invoke(app, ["estimate", "--model", "llama3-8b", "--gpus", "64"])
    assert "--config" not in plain.output
