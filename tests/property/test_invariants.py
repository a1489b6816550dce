"""Hypothesis invariants of the cost model."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from supercluster.errors import InputError
from supercluster.formats.hf import from_hf_config
from supercluster.formats.load import load_model
from supercluster.hardware.kernels import quantize_bytes_per_element
from supercluster.hardware.specs import get_gpu
from supercluster.job import default_network
from supercluster.models.spec import ModelSpec, hybrid_counts
from supercluster.network.twolevel import TwoLevelNetwork
from supercluster.parallelism.framework import get_framework
from supercluster.perf.step import LEDGER, step_columns

MODEL = load_model("llama3-70b")
# the same with a multi-token-prediction module on its last stage (the pricing DeepSeek-V3 runs use), and a
# Mamba-2 hybrid (Nemotron-H 8B: Mamba, attention and MLP layers of one block each)
# and a Gated DeltaNet hybrid (Qwen3.5 9B's language model: three layers in four linear attention)
QWEN35_9B = from_hf_config({
    "model_type": "qwen3_5_text", "hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 12288,
    "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 248320,
    "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 8, "attn_output_gate": True,
    "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "tie_word_embeddings": False})
# and a small MLA model with DeepSeek Sparse Attention, sparse past 1,024 tokens (every drawn sequence)
DSA = ModelSpec(key="dsa-small", name="DSA small", num_layers=8, d_model=2048, ffn_dim=8192, num_heads=16,
                num_kv_heads=16, head_dim=192, vocab_size=32000, q_lora_rank=512, kv_lora_rank=512,
                qk_rope_head_dim=64, v_head_dim=128, index_topk=1024, index_heads=16, index_head_dim=64)
# and a small latent-MoE hybrid in Nemotron 3 Super's shape (Mamba, MoE and attention layers; experts and
# all-to-alls a quarter of d_model wide), its experts spread over up to four EP ranks
LATENT = ModelSpec(key="latent-small", name="latent MoE small", hybrid_pattern="MEM*EMEM*E",
                   **hybrid_counts("MEM*EMEM*E"), d_model=1024, ffn_dim=1024, num_heads=8, num_kv_heads=2,
                   head_dim=128, vocab_size=32000, mlp="relu2", num_experts=32, top_k=4, num_shared_experts=1,
                   moe_ffn_dim=512, moe_latent_dim=256, ssm_heads=32, ssm_head_dim=64, ssm_state=64, ssm_groups=4)
MODELS = st.sampled_from([MODEL, dataclasses.replace(MODEL, mtp_layers=1), load_model("nemotronh-8b"), QWEN35_9B,
                          DSA, LATENT])
GPU = get_gpu("h100-sxm")
# Every framework profile: flash / unfused attention, fused / eager elementwise, per-op SAC.
FRAMEWORKS = st.sampled_from(["megatron", "nemo-megatron", "deepspeed", "torchtitan", "megatron-legacy",
                              "deepspeed-legacy", "hai-llm", "nemo-megatron+deepep",
                              "automodel+round-robin-gate", "nemo-megatron+ep-overlap", "torchtitan+cuda-graphs",
                              "megatron+tp-overlap", "nemo-megatron+capacity-1.25",
                              "megatron+capacity-1+pad-to-capacity", "nemo-megatron+cp-a2a"]).map(get_framework)
NET = default_network(GPU)

layouts = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 2, 4, 8]), "pp": st.sampled_from([1, 2, 4, 8]), "dp": st.sampled_from([1, 2, 8, 32]),
    "cp": st.sampled_from([1, 2]), "vpp": st.sampled_from([1, 2]), "mb": st.sampled_from([1, 2]),
    "zero": st.integers(0, 3), "recompute": st.integers(0, 2), "sp": st.integers(0, 1), "lowp": st.integers(0, 2),
    "rcl": st.integers(0, 3),
    "accum": st.sampled_from([1, 4, 16]), "seq": st.sampled_from([2048, 8192]),
    # pipeline schedules a step (gradient accumulation run schedule by schedule); 1 where it does not divide
    "ga": st.sampled_from([1, 2, 4]),
})


def priced(fw, model) -> None:
    """Skip what is refused, not priced: a hybrid's Mamba layers, or sparse attention, under a
    pre-FlashAttention stack."""
    assume(not ((model.recurrent_layers or model.index_topk) and fw.attention == "unfused"))


def cols(d: dict[str, int], model=MODEL) -> dict[str, np.ndarray]:
    c = {k: np.array([v]) for k, v in d.items() if k not in ("accum", "ga")}
    if not model.context_parallel_ok:  # (CP of Mamba layers is refused, not priced)
        c["cp"] = np.array([1])
    c["vpp"] = np.array([d["vpp"] if d["pp"] > 1 else 1])
    c["ep"] = np.array([min(c["dp"][0] * c["cp"][0], 4) if model.is_moe else 1])
    c["gbs"] = np.array([d["dp"] * d["mb"] * d["accum"]])
    ga = d.get("ga", 1)
    c["ga"] = np.array([ga if d["accum"] % ga == 0 else 1])
    return c


@settings(max_examples=150, deadline=None)
@given(layouts, FRAMEWORKS, MODELS)
def test_ledger_sums_exactly_and_parts_are_non_negative(d, fw, model):
    priced(fw, model)
    out = step_columns(model, GPU, NET, fw, cols(d, model))
    total = sum(out[name] for name in LEDGER)
    assert np.allclose(total, out["step_time_s"], rtol=1e-12)
    assert all(np.all(out[name] >= 0) for name in LEDGER)
    assert np.all(out["memory_per_gpu_bytes"] > 0)


@settings(max_examples=100, deadline=None)
@given(layouts, st.floats(1.0, 10.0), st.floats(1.0, 10.0), FRAMEWORKS, MODELS)
# (found by the explored run: a host-bound MoE layer under full recompute once let the recompute's
# dispatch hide the backward's launches, so a faster network moved seconds into the recompute)
@example(dict(tp=2, pp=1, dp=1, cp=1, vpp=1, mb=1, zero=0, recompute=2, sp=0, lowp=0, rcl=0, accum=1, seq=2048,
              ga=1), 2.0, 1.0, get_framework("megatron"), LATENT)
def test_more_bandwidth_is_never_slower(d, up, out_factor, fw, model):
    priced(fw, model)
    faster = TwoLevelNetwork(domain_size=NET.domain_size, scaleup_busbw_bytes_per_s=NET.scaleup_busbw_bytes_per_s * up,
                             scaleout_bytes_per_s=NET.scaleout_bytes_per_s * out_factor)
    a = step_columns(model, GPU, NET, fw, cols(d, model))["step_time_s"]
    b = step_columns(model, GPU, faster, fw, cols(d, model))["step_time_s"]
    assert np.all(b <= a * (1 + 1e-12))


@settings(max_examples=100, deadline=None)
@given(layouts, st.floats(1.0, 4.0), st.floats(1.0, 4.0), FRAMEWORKS, MODELS)
def test_more_flops_or_memory_bandwidth_is_never_slower(d, flops, hbm, fw, model):
    priced(fw, model)
    gpu = dataclasses.replace(GPU, peak_flops_per_s={k: v * flops for k, v in GPU.peak_flops_per_s.items()},
                              hbm_bytes_per_s=GPU.hbm_bytes_per_s * hbm)
    a = step_columns(model, GPU, NET, fw, cols(d, model))["step_time_s"]
    b = step_columns(model, gpu, NET, fw, cols(d, model))["step_time_s"]
    assert np.all(b <= a * (1 + 1e-12))


# fp4 GEMMs need a part with fp4 tensor cores: the GPUs the batch and recompute properties run on
GPUS = st.sampled_from(["h100-sxm", "b200", "gb200", "mi355x"]).map(get_gpu)


def _has_fp8_kernels(gpu, fw) -> bool:
    """Whether the framework's fp8 recipe has kernels on the GPU's generation (what check_job asks)."""
    try:
        quantize_bytes_per_element(gpu.arch, "fp8", fw.fp8_recipe)
    except InputError:
        return False
    return True


def _step(d, fw, model, gpu, **change) -> float:
    """The step of layout ``d`` (with ``change``) on ``gpu``; fp4 drawn only where the GPU has it, fp8
    only where the framework's recipe has kernels on it (MI355X: delayed scaling alone)."""
    priced(fw, model)
    assume(d["lowp"] < 2 or gpu.peak_flops_per_s.get("fp4", 0.0) > 0)
    assume(d["lowp"] != 1 or _has_fp8_kernels(gpu, fw))
    return float(step_columns(model, gpu, default_network(gpu), fw, cols({**d, **change}, model))["step_time_s"][0])


@settings(max_examples=100, deadline=None)
@given(layouts, FRAMEWORKS, MODELS, GPUS)
def test_a_bigger_batch_on_the_same_layout_is_never_faster(d, fw, model, gpu):
    """Twice the micro-batches a step (the same layout, twice the global batch) never takes less time."""
    assert _step(d, fw, model, gpu, accum=d["accum"] * 2) >= _step(d, fw, model, gpu) * (1 - 1e-12)


@settings(max_examples=100, deadline=None)
@given(layouts, FRAMEWORKS, MODELS, GPUS)
def test_a_slower_host_is_never_faster(d, fw, model, gpu):
    """The same GPU launched from a Grace host (slower per kernel launch) never takes less time than
    from an x86 one."""
    x86, grace = (dataclasses.replace(gpu, host_cpu=h) for h in ("x86", "grace"))
    assert _step(d, fw, model, grace) >= _step(d, fw, model, x86) * (1 - 1e-12)


@settings(max_examples=100, deadline=None)
@given(layouts, FRAMEWORKS, MODELS, GPUS)
def test_recomputing_more_is_never_faster(d, fw, model, gpu):
    """None, selective, full: each recomputes at least what the one before it does, and costs at least as much."""
    t = [_step(d, fw, model, gpu, recompute=rc) for rc in (0, 1, 2)]
    assert t[0] <= t[1] * (1 + 1e-12) and t[0] <= t[2] * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(layouts, FRAMEWORKS, MODELS)
def test_memory_never_grows_with_tp_pp_or_zero(d, fw, model):
    priced(fw, model)
    base = step_columns(model, GPU, NET, fw, cols(d, model))["memory_per_gpu_bytes"]
    for key, values in (("tp", [1, 2, 4, 8]), ("zero", [0, 1, 2, 3])):
        bigger = [v for v in values if v > d[key]]
        # (documented: FSDP under PP accumulates the stage's unsharded gradients in the reduce dtype, so a
        # framework that stores 16-bit gradients but reduces in fp32, NeMo AutoModel, holds more at ZeRO-2
        # than at ZeRO-1's 16-bit gradients; FSDP2 has no ZeRO-1 to compare with)
        widens = (key == "zero" and fw.fsdp_pp_unsharded and d["pp"] > 1 and fw.grad_reduce_bytes > fw.grad_bytes
                  and d["zero"] < 2 <= (bigger or [0])[0])
        if bigger and not widens:
            more = step_columns(model, GPU, NET, fw, cols({**d, key: bigger[0]}, model))["memory_per_gpu_bytes"]
            assert np.all(more <= base * (1 + 1e-12)), key
    # One documented exception: torchtitan keeps each stage's FSDP parameters gathered once PP is on
    # (reshard_after_forward off, gradients accumulated unsharded; its published 405B TP8 PP8 memory
    # confirms it), so turning PP on at ZeRO-2/3 may grow memory; more stages never do.
    turns_on_gathered_stages = fw.fsdp_pp_unsharded and d["pp"] == 1 and d["zero"] >= 2
    # And a second: DualPipe holds pp + 1 micro-batches of a stage (DeepSeek-V3 report Table 2), so
    # turning PP on (1 -> 2) holds 3/2 of the model's layers' activations; more stages never do.
    turns_on_dualpipe = fw.pipeline_schedule == "dualpipe" and d["pp"] == 1
    # (PP is compared where the stages split the layers evenly: the first stage holds ceil(L / pp) layers and
    # 1F1B keeps pp micro-batches of them in flight, so 52 layers on 8 stages hold 7 x 8 layer-activations
    # against 13 x 4 on 4 stages)
    even = model.num_layers % (2 * d["pp"]) == 0
    if d["pp"] < 8 and d["vpp"] == 1 and even and not turns_on_gathered_stages and not turns_on_dualpipe:
        more = step_columns(model, GPU, NET, fw, cols({**d, "pp": d["pp"] * 2}, model))["memory_per_gpu_bytes"]
        assert np.all(more <= base * (1 + 1e-12))


def test_torchtitan_pp_memory_exception_is_exactly_the_gathered_stage():
    # The exception above, checked exhaustively on a grid: every increase is PP 1 -> 2 at ZeRO >= 2.
    import itertools

    fw = get_framework("torchtitan")
    for tp, pp, dp, zero, rc in itertools.product([1, 8], [1, 2, 4], [2, 32], [0, 1, 2, 3], [0, 2]):
        d = dict(tp=tp, pp=pp, dp=dp, cp=1, vpp=1, mb=1, zero=zero, recompute=rc, sp=1, lowp=0, rcl=0, accum=4,
                 seq=8192)
        a = step_columns(MODEL, GPU, NET, fw, cols(d))["memory_per_gpu_bytes"][0]
        b = step_columns(MODEL, GPU, NET, fw, cols({**d, "pp": pp * 2}))["memory_per_gpu_bytes"][0]
        if b > a:
            assert pp == 1 and zero >= 2, d


# ---- goodput ------------------------------------------------------------------------------------
from supercluster.reliability.goodput import RunSpec, expected_ettr, simulate  # noqa: E402


@st.composite
def run_specs(draw):
    return RunSpec(work_s=draw(st.floats(3600, 1e7)), rate_per_s=draw(st.floats(0, 1e-3)),
                   planned_per_s=draw(st.floats(0, 1e-4)), interval_s=draw(st.floats(60, 1e5)),
                   stall_s=draw(st.floats(0, 300)), lag_s=draw(st.floats(0, 300)),
                   recovery_s=draw(st.floats(0, 1800)), planned_recovery_s=draw(st.floats(0, 1800)),
                   slowdown=draw(st.floats(1, 1.5)))


@settings(max_examples=60, deadline=None)
@given(run_specs())
def test_ettr_in_unit_interval_and_ledger_exact(spec):
    try:
        r = simulate(spec, trials=200, seed=0)
    except InputError:  # a run that can never finish is refused, not simulated
        assume(False)
    assert np.all((r.ettr > 0) & (r.ettr <= 1))
    parts = r.productive_s + r.checkpoint_s + r.lost_work_s + r.recovery_s + r.degraded_s
    assert np.allclose(parts, r.wall_s, rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(run_specs(), st.floats(1.01, 10))
def test_more_failures_never_raise_ettr(spec, factor):
    worse = RunSpec(**{**{k: getattr(spec, k) for k in RunSpec.__dataclass_fields__},
                       "rate_per_s": spec.rate_per_s * factor})
    assert expected_ettr(worse) <= expected_ettr(spec) + 1e-12


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 3]), st.integers(1, 4),
       st.integers(0, 2), FRAMEWORKS, st.sampled_from([1, 2]))
def test_timeline_without_jitter_is_the_ledgers_step(pp, vpp, accum, mb, rc, fw, ga):
    """The simulated pipeline schedule reproduces the ledger's step for any legal 1F1B or interleaved
    layout (micro-batches a multiple of pp when interleaved, as Megatron-Core requires)."""
    from supercluster.parallelism.layout import Layout
    from supercluster.simulation.timeline import simulate

    vpp = vpp if pp > 1 and fw.interleaved_pipeline else 1
    m = pp * accum if vpp > 1 else accum
    # (the timeline walks 1F1B schedules; DualPipe's bubble is the report's formula, and simulate says so)
    assume(fw.pipeline_schedule == "1f1b" or pp == 1)
    ga = ga if accum % ga == 0 else 1  # (each schedule interleaves whole rounds of pp micro-batches)
    lay = Layout(tp=2, pp=pp, dp=2, vpp=vpp, micro_batch=mb, global_batch=2 * mb * m, seq_len=2048,
                 recompute=("none", "selective", "full")[rc], grad_accum=ga)
    tl = simulate(MODEL, layout=lay, gpu=GPU, net=NET, fw=fw)
    assert np.isclose(tl.step_time_s, tl.ledger_step_time_s, rtol=1e-9)
    assert all(s["idle_s"] >= -1e-9 * tl.step_time_s for s in tl.stages())
    # each stage with its own layers is never slower than the ledger: every stage priced as the
    # heaviest, or (an uneven interleaving) the schedule's own longest path, which it then equals
    assert simulate(MODEL, layout=lay, gpu=GPU, net=NET, fw=fw, exact_stages=True).step_time_s \
        <= tl.step_time_s * (1 + 1e-9)


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(["llama3-8b", "mixtral-8x7b", "qwen3-30b-a3b"]), st.sampled_from([8, 32, 64]),
       st.sampled_from([16, 48, 64, 256]),
       st.sampled_from(["megatron", "nemo-megatron", "torchtitan", "deepspeed", "hai-llm", "automodel"]))
def test_the_planner_returns_only_layouts_its_framework_runs(model_key, gpus, gbs, fw_key):
    from supercluster.errors import InputError
    from supercluster.formats import launchers
    from supercluster.job import estimate
    from supercluster.planner.search import plan

    model, fw = load_model(model_key), get_framework(fw_key)
    try:
        res = plan(model, GPU, gpus, global_batch=gbs, seq_len=4096, framework=fw, top=20)
    except InputError:
        return  # nothing fits, or no layout the schedule can run: said, not priced
    for c in res.top:
        lay = fw.runnable(c.layout, model)  # never refused: schedule, heads, sequence parallelism
        lay.check_model(model, extra_pp_layers=fw.extra_pp_layers)
        assert model.num_kv_heads % lay.tp == 0
        assert estimate(model, gpu=GPU, num_gpus=lay.num_gpus, layout=lay, framework=fw).step_time_s == \
            c.step_time_s
        # ... and its launcher writes it (Megatron-Core's recompute modules were searched for DeepSpeed MoE
        # plans, whose export then refused them)
        fmt = {"deepspeed": "deepspeed", "megatron": "megatron", "nemo-megatron": "megatron"}.get(fw.family)
        if fmt:
            launchers.export(lay, fmt, model, fw)


def test_fp4_weight_casts_are_paid_once_a_step_so_more_micro_batches_never_shorten_it():
    # (fuzzing found GPT-3 175B on 32,768 MI355X in fp4 getting faster with twice the batch: the casts
    # had been amortised into every micro-batch and so shrank the pipeline's fill as micro-batches grew)
    from supercluster.job import estimate
    from supercluster.parallelism.layout import Layout

    model, gpu = load_model("gpt3-175b"), get_gpu("mi355x")
    steps = []
    for gbs in (1024, 2048, 4096):
        lay = Layout(tp=4, pp=8, dp=1024, vpp=1, micro_batch=1, global_batch=gbs, seq_len=2048, precision="fp4",
                     zero_stage=2)
        b = estimate(model, gpu=gpu, num_gpus=32768, layout=lay, framework=get_framework("nemo-megatron"))
        steps.append(b.step_time_s)
    assert steps[0] < steps[1] < steps[2]


def test_the_timeline_lays_the_weight_casts_out_before_the_first_micro_batch():
    from supercluster.parallelism.layout import Layout
    from supercluster.simulation.timeline import simulate

    lay = Layout(tp=4, pp=4, dp=4, vpp=2, micro_batch=1, global_batch=64, seq_len=4096, precision="fp8")
    tl = simulate(MODEL, layout=lay, gpu=GPU, net=NET, fw=get_framework("nemo-megatron"))
    casts = [t for t in tl.tasks if t.kind == "weight_cast"]
    assert len(casts) == 4 and all(t.start_s == 0.0 and t.end_s > 0 for t in casts)
    assert min(t.start_s for t in tl.tasks if t.kind == "F") >= casts[0].end_s
    assert np.isclose(tl.step_time_s, tl.ledger_step_time_s, rtol=1e-9)


def test_faster_tensor_cores_never_slow_an_overlapped_moe_step():
    # (fuzzing found DeepSeek-V3 with EP overlap on 16,384 H200 slower on 4x the FLOP/s: the compute that
    # hid the token dispatch was counted again as the window of the DP traffic)
    from supercluster.job import estimate
    from supercluster.parallelism.layout import Layout

    model, gpu = load_model("deepseek-v3+mtp"), get_gpu("h200")
    # (ZeRO-3 is Megatron-FSDP, which runs combined 1F1B only at pp 1: the same 16,384 GPUs as dp 1,024)
    lay = Layout(tp=8, pp=1, dp=1024, cp=2, ep=2, vpp=1, micro_batch=1, global_batch=2048, seq_len=2048,
                 zero_stage=3, recompute="none")
    fw = get_framework("nemo-megatron+ep-overlap")
    steps = [estimate(model, gpu=dataclasses.replace(gpu, peak_flops_per_s={k: v * f for k, v in
                                                                          gpu.peak_flops_per_s.items()},
                                                     hbm_bytes_per_s=gpu.hbm_bytes_per_s * hbm),
                      num_gpus=16384, layout=lay, framework=fw).step_time_s
             for f, hbm in ((1.0, 1.0), (1.0, 1.1), (4.0, 1.0), (4.0, 1.1))]
    assert steps[1] <= steps[0] and steps[2] <= steps[0] and steps[3] <= min(steps[1], steps[2])


def test_a_host_bound_layer_with_hidden_tp_traffic_is_not_slowed_by_faster_memory():
    """Found by exploring: a host-bound layer (TP 4, one micro-batch of 2,048 tokens) whose TP traffic
    hides under its GEMMs got slower on 2x HBM, because the host's wait was set against all the TP
    traffic rather than the part left exposed (faster GEMMs hid less, and the wait did not shrink)."""
    d = {"tp": 4, "pp": 1, "dp": 1, "cp": 1, "vpp": 1, "mb": 1, "zero": 0, "recompute": 0, "sp": 0, "lowp": 0,
         "rcl": 0, "accum": 4, "seq": 2048, "ga": 1}
    fw = get_framework("nemo-megatron")
    a = step_columns(LATENT, GPU, NET, fw, cols(d, LATENT))
    b = step_columns(LATENT, dataclasses.replace(GPU, hbm_bytes_per_s=2 * GPU.hbm_bytes_per_s), NET, fw,
                     cols(d, LATENT))
    assert a["kernel_launch"][0] > 0  # (the case: host-bound)
    assert b["step_time_s"][0] <= a["step_time_s"][0] * (1 + 1e-12)
