from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supercluster.job import default_network, estimate
from supercluster.parallelism.layout import Layout
from supercluster.perf.step import LEDGER


def test_ledger_sums_to_step_time_and_names_every_loss(llama3_70b, h100):
    # DGXC Llama 3.1 70B recipe layout (TP4 PP4 CP2 VP5).
    lay = Layout(tp=4, pp=4, dp=2, cp=2, vpp=5, micro_batch=1, global_batch=128, seq_len=8192, precision="fp8")
    b = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=lay, framework="nemo-megatron")
    assert set(b.ledger) == set(LEDGER)
    assert sum(b.ledger.values()) == pytest.approx(b.step_time_s, rel=1e-12)
    assert all(v >= 0 for v in b.ledger.values())
    assert b.ledger["pipeline_bubble"] > 0 and b.ledger["exposed_tp_comm"] > 0
    assert 0.2 < b.mfu < 0.7 and b.fits


def test_bubble_is_the_1f1b_fraction(llama3_70b, h100):
    # With comm-free stages the bubble is (p - 1) / v slots of one micro-batch stage time.
    for vpp in (1, 2):
        lay = Layout(tp=8, pp=4, dp=1, vpp=vpp, micro_batch=1, global_batch=16, seq_len=4096)
        b = estimate(llama3_70b, gpu=h100, num_gpus=32, layout=lay)
        rest = b.step_time_s - b.ledger["stragglers"]
        stage_work = (rest - b.ledger["pipeline_bubble"] - b.ledger["exposed_pp_comm"] - b.ledger["optimizer"]
                      - b.ledger["exposed_dp_comm"])
        assert b.ledger["pipeline_bubble"] == pytest.approx(stage_work / 16 * 3 / vpp, rel=1e-9)


def test_recompute_costs_time_and_saves_memory(llama3_70b, h100):
    base = dict(tp=8, pp=4, dp=2, micro_batch=1, global_batch=32, seq_len=8192)
    none = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**base))
    full = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**base, recompute="full"))
    assert full.step_time_s > none.step_time_s and full.ledger["recompute"] > 0
    assert full.memory_per_gpu_bytes < none.memory_per_gpu_bytes
    assert full.hfu > full.mfu


def test_model_too_big_does_not_fit(h100):
    from supercluster.reports.tables import fit_reason

    b = estimate("llama3-405b", gpu=h100, num_gpus=8, layout=Layout(tp=8, global_batch=1, seq_len=8192))
    assert not b.fits and b.memory_per_gpu_bytes > h100.hbm_bytes
    assert "largest term optimizer" in fit_reason(b) and "GiB over" in fit_reason(b)


def test_the_advice_for_a_layout_that_does_not_fit_names_only_what_it_does_not_use(h100):
    from supercluster.parallelism.framework import get_framework
    from supercluster.reports.tables import fit_reason

    long = dict(tp=8, pp=1, dp=16, global_batch=32, seq_len=1048576)
    done = Layout(**long, recompute="full", micro_batch=1, sequence_parallel=True)
    b = estimate("llama3-8b", gpu=h100, num_gpus=128, layout=done)
    assert not b.fits and "largest term activations" in fit_reason(b)
    tips = fit_reason(b, done, get_framework("megatron")).split(": try ")[1]
    assert tips == "a larger --pp or --cp"  # recompute full, SP and micro-batch 1 are already in use
    bare = Layout(**long, recompute="none", micro_batch=2, sequence_parallel=None)
    b2 = estimate("llama3-8b", gpu=h100, num_gpus=128, layout=bare, framework="megatron")
    tips2 = fit_reason(b2, bare, get_framework("megatron"))
    assert "--sequence-parallel" in tips2 and "--recompute full" in tips2 and "--micro-batch 1" in tips2
    # with the framework's own default on, SP is not advised again
    assert "--sequence-parallel" not in fit_reason(b2, bare, get_framework("nemo-megatron"))


def test_single_gpu_has_no_communication(h100):
    b = estimate("llama2-7b", gpu="a100-80gb", num_gpus=1, layout=Layout(global_batch=4, seq_len=4096))
    assert b.ledger["stragglers"] == 0 and b.ledger["exposed_dp_comm"] == 0 and b.ledger["exposed_tp_comm"] == 0


def test_scatter_gather_cuts_the_cross_node_pipeline_traffic_by_tp():
    import dataclasses

    from supercluster.parallelism.framework import get_framework

    legacy = get_framework("megatron-legacy")
    plain = dataclasses.replace(legacy, pp_scatter_gather=False)
    lay = Layout(tp=8, pp=8, dp=1, micro_batch=1, global_batch=64, seq_len=2048, recompute="full")
    sg = estimate("gpt3-175b", gpu="a100-80gb", num_gpus=64, layout=lay, framework=legacy)
    no = estimate("gpt3-175b", gpu="a100-80gb", num_gpus=64, layout=lay, framework=plain)
    assert 2.0 < no.ledger["exposed_pp_comm"] / sg.ledger["exposed_pp_comm"] < 8.0


def test_frameworks_without_context_parallelism_refuse_cp_and_the_planner_skips_it():
    from supercluster.errors import InputError
    from supercluster.formats.load import load_model
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import get_framework
    from supercluster.planner.search import plan

    with pytest.raises(InputError, match="cp"):
        estimate("llama3-8b", gpu="h100-sxm", num_gpus=16, framework="megatron-legacy",
                 layout=Layout(tp=8, cp=2, global_batch=16, seq_len=8192))
    res = plan(load_model("gpt3-175b"), get_gpu("a100-80gb"), 256, global_batch=512, seq_len=2048,
               framework=get_framework("megatron-legacy"), top=5)
    assert res.evaluated > 0 and all(r.layout.cp == 1 for r in res.top)


def test_moe_dispatch_all_gathers_the_routed_tokens_over_tp(h100):
    # Mixtral 8x7B (all 32 layers MoE, top 2), TP4 and EP1 on one HGX node: the dispatcher's only
    # traffic is the all-gather of T x top_k tokens over TP and its reduce-scatter, forward and backward.
    import numpy as np

    from supercluster.formats.load import load_model

    m = load_model("mixtral-8x7b")
    lay = Layout(tp=4, pp=1, dp=2, ep=1, micro_batch=1, global_batch=2, seq_len=4096)
    b = estimate(m, gpu=h100, num_gpus=8, layout=lay, framework="nemo-megatron")
    net = default_network(h100, num_gpus=8)
    ag = float(net.collective_time_s("all_gather", np.array(4096.0 * 2 * 4096 * 2), np.array(4.0), np.array(1.0)))
    assert b.ledger["exposed_ep_comm"] == pytest.approx(32 * 4 * ag, rel=1e-9)


def test_embedding_and_loss_counted_as_pipeline_layers():
    """Megatron-Core's account_for_{embedding,loss}_in_pipeline_split (nemo-megatron): Llama 3.1 405B's
    126 layers + 2 fill PP16 x VPP8 = 128 chunks; without it the layout is refused, and where both
    apply the split that moves the head into a layer's place is never slower."""
    import dataclasses

    from supercluster.errors import InputError
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import get_framework

    gb200 = get_gpu("gb200")
    nemo = get_framework("nemo-megatron")
    lay = dict(tp=4, pp=16, dp=4, vpp=8, micro_batch=1, global_batch=1536, seq_len=8192, precision="fp8")
    b = estimate("llama3.1-405b", gpu=gb200, num_gpus=256, layout=Layout(**lay), framework=nemo)
    assert b.step_time_s > 0
    with pytest.raises(InputError, match="126 layers"):
        estimate("llama3.1-405b", gpu=gb200, num_gpus=256, layout=Layout(**lay), framework="megatron")
    plain = dataclasses.replace(nemo, pp_split_counts_head=False)
    lay8 = dict(lay, pp=8, dp=8, vpp=4)
    with_split = estimate("llama3.1-405b", gpu=gb200, num_gpus=256, layout=Layout(**lay8), framework=nemo)
    without = estimate("llama3.1-405b", gpu=gb200, num_gpus=256, layout=Layout(**lay8), framework=plain)
    assert with_split.step_time_s < without.step_time_s
    # the first stage keeps one layer fewer (the embedding takes its slot): less activation memory
    assert with_split.memory["mem_activations_bytes"] < without.memory["mem_activations_bytes"]


def test_low_precision_weights_and_saved_inputs(llama3_70b, h100):
    """fp8_param_gather keeps weights only in fp8 (NeMo recipes); Transformer Engine saves fp8 linear
    inputs; a dropout of probability 0 saves no mask."""
    import dataclasses

    from supercluster.parallelism.framework import get_framework

    nemo = get_framework("nemo-megatron")
    lay = dict(tp=4, pp=4, dp=4, vpp=5, micro_batch=1, global_batch=64, seq_len=8192)
    bf16 = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**lay), framework=nemo)
    fp8 = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**lay, precision="fp8"), framework=nemo)
    keep = dataclasses.replace(nemo, fp8_param_gather=False)
    fp8_copy = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**lay, precision="fp8"), framework=keep)
    w16, w8, w8c = (x.memory["mem_weights_bytes"] for x in (bf16, fp8, fp8_copy))
    assert w8 == pytest.approx(w16 / 2) and w8c == pytest.approx(w16 * 1.5)
    assert fp8.memory["mem_activations_bytes"] < bf16.memory["mem_activations_bytes"]
    drop = dataclasses.replace(nemo, dropout=True)
    with_masks = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**lay), framework=drop)
    assert with_masks.memory["mem_activations_bytes"] > bf16.memory["mem_activations_bytes"]


def test_recomputing_fewer_layers_trades_memory_for_time(llama3_70b, h100):
    """Megatron's block method: full recompute of the first N layers of each pipeline chunk; N at or
    above the chunk's layer count is full recompute of every layer, N = 0 means every layer."""
    from supercluster.errors import InputError

    lay = dict(tp=4, pp=4, dp=4, vpp=5, micro_batch=1, global_batch=128, seq_len=8192)  # 4 layers per chunk
    none = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**lay))
    part = [estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**lay, recompute="full", recompute_layers=n))
            for n in (1, 2, 3, 4, 0)]
    times = [none.step_time_s] + [b.step_time_s for b in part[:4]]
    mems = [none.memory_per_gpu_bytes] + [b.memory_per_gpu_bytes for b in part[:4]]
    assert times == sorted(times) and mems == sorted(mems, reverse=True)
    assert part[3].step_time_s == pytest.approx(part[4].step_time_s)
    assert part[1].ledger["recompute"] == pytest.approx(part[3].ledger["recompute"] / 2)
    with pytest.raises(InputError, match="recompute full"):
        Layout(**lay, recompute="selective", recompute_layers=2)


def test_moe_parallel_folding_and_bounded_ep_overlap():
    """Expert TP 1 lets EP span TP x DP (Megatron-Core MoE parallel folding): same expert FLOPs, each
    GPU holds whole experts; '+ep-overlap' hides the all-to-all only under a layer's compute."""
    from supercluster.errors import InputError
    from supercluster.hardware.specs import get_gpu

    h100 = get_gpu("h100-sxm")
    lay = dict(tp=2, pp=8, dp=16, ep=32, vpp=4, micro_batch=1, global_batch=2048, seq_len=4096, precision="fp8",
               sequence_parallel=True)
    with pytest.raises(InputError, match="expert_tp"):
        Layout(**lay)
    folded = Layout(**lay, expert_tp=1)
    assert folded.short().endswith("-etp1") and Layout.from_string(folded.short(), global_batch=2048, seq_len=4096,
                                                                   precision="fp8", sequence_parallel=True) == folded
    plain = estimate("qwen3-235b-a22b", gpu=h100, num_gpus=256, layout=folded, framework="nemo-megatron")
    over = estimate("qwen3-235b-a22b", gpu=h100, num_gpus=256, layout=folded, framework="nemo-megatron+ep-overlap")
    assert 0 < over.ledger["exposed_ep_comm"] < plain.ledger["exposed_ep_comm"]
    assert over.model_flops == pytest.approx(plain.model_flops) and over.step_time_s < plain.step_time_s
    # the same experts TP-sharded (EP within dp x cp) hold half the expert weights per GPU
    lay16 = dict(lay, ep=16)
    sharded = estimate("qwen3-235b-a22b", gpu=h100, num_gpus=256, layout=Layout(**lay16), framework="nemo-megatron")
    whole = estimate("qwen3-235b-a22b", gpu=h100, num_gpus=256, layout=Layout(**lay16, expert_tp=1),
                     framework="nemo-megatron")
    assert whole.memory["mem_weights_bytes"] > sharded.memory["mem_weights_bytes"]
    assert whole.model_flops == pytest.approx(sharded.model_flops)
    assert whole.hardware_flops == pytest.approx(sharded.hardware_flops)
    ds = estimate("deepseek-v3", gpu="h800", num_gpus=2048, framework="hai-llm",
                  layout=Layout(pp=16, dp=128, ep=64, global_batch=15360, seq_len=4096, precision="fp8"))
    assert ds.ledger["exposed_ep_comm"] == 0.0  # DualPipe: fully hidden, as the DeepSeek-V3 report states


def test_fp8_saves_the_experts_input_in_fp8():
    """Transformer Engine saves a linear's input for its weight gradient in the GEMM precision; the
    grouped expert FC1 too. So fp8 cuts each MoE layer's activations by at least top_k x h bytes per
    token against bf16 (the experts' input alone); the combined expert outputs stay 16-bit."""
    from supercluster.formats.load import load_model
    from supercluster.hardware.specs import get_gpu

    m, gb200 = load_model("qwen3-30b-a3b"), get_gpu("gb200")
    lay = dict(dp=8, ep=8, micro_batch=1, global_batch=8, seq_len=4096)
    act = {p: estimate(m, gpu=gb200, num_gpus=8, layout=Layout(**lay, precision=p),
                       framework="nemo-megatron").memory["mem_activations_bytes"] for p in ("bf16", "fp8")}
    tokens = 4096
    assert act["bf16"] - act["fp8"] >= m.num_moe_layers * tokens * m.top_k * m.d_model * 1.0


def test_recompute_modules_drop_what_they_saved_and_run_again():
    """Megatron-Core --recompute-modules, hand-counted on Qwen3 30B-A3B (48 MoE layers, top-8 experts of
    width 768, bf16, one 4K-token micro-batch per GPU): moe_act drops each MoE layer's FC2 input
    (8 x 768 x 2 bytes per token); recomputing the whole MoE layer drops more, costs more time and
    repeats the dispatch and combine all-to-alls."""
    from supercluster.formats.load import load_model
    from supercluster.hardware.specs import get_gpu

    m, gb200 = load_model("qwen3-30b-a3b"), get_gpu("gb200")
    base = dict(dp=8, ep=8, micro_batch=1, global_batch=8, seq_len=4096)

    def run(rc: str = "none", mods: tuple[str, ...] = ()):
        return estimate(m, gpu=gb200, num_gpus=8, layout=Layout(**base, recompute=rc, recompute_modules=mods),
                        framework="nemo-megatron")

    none, act, ln_act, moe = run(), run("selective", ("moe_act",)), run("selective", ("layernorm", "moe_act")), \
        run("selective", ("moe",))
    saved = none.memory["mem_activations_bytes"] - act.memory["mem_activations_bytes"]
    assert saved == pytest.approx(48 * 4096 * 8 * 768 * 2.0, rel=1e-9)
    assert ln_act.memory_per_gpu_bytes < act.memory_per_gpu_bytes < none.memory_per_gpu_bytes
    assert moe.memory_per_gpu_bytes < ln_act.memory_per_gpu_bytes
    rc = [x.ledger["recompute"] for x in (none, act, ln_act, moe)]
    assert rc[0] == 0 < rc[1] < rc[2] < rc[3]
    assert moe.ledger["exposed_ep_comm"] > act.ledger["exposed_ep_comm"] and moe.hfu > moe.mfu > 0


def test_dense_mlp_recompute_and_the_default_selective_policy(llama3_70b, h100):
    """No modules = Megatron's default (core_attn); 'mlp' recomputes the MLP too: less memory, more
    time and more hardware FLOPs. torchtitan has no modules: a clear error."""
    from supercluster.errors import InputError

    lay = dict(tp=8, pp=4, dp=2, micro_batch=1, global_batch=32, seq_len=8192, recompute="selective")
    dflt = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**lay))
    core = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**lay, recompute_modules=("core_attn",)))
    mlp = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**lay, recompute_modules=("core_attn", "mlp")))
    assert core.step_time_s == dflt.step_time_s and core.memory_per_gpu_bytes == dflt.memory_per_gpu_bytes
    assert mlp.memory_per_gpu_bytes < core.memory_per_gpu_bytes and mlp.step_time_s > core.step_time_s
    assert mlp.hardware_flops > core.hardware_flops
    with pytest.raises(InputError, match="recompute_modules"):
        estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**lay, recompute_modules=("mlp",)),
                 framework="torchtitan")
    for bad, match in ((dict(recompute_modules=("shared_experts",)), "not priced"),
                       (dict(recompute_modules=("attn",)), "allowed: core_attn"),
                       (dict(recompute="full", recompute_modules=("mlp",)), "needs --recompute selective")):
        with pytest.raises(InputError, match=match):
            Layout(**{**lay, **bad})


def test_the_embedding_and_loss_aware_split_charges_the_heaviest_stage_once():
    """Megatron-Core counting the embedding and the loss as pipeline layers (nemo-megatron): the step
    charges per micro-batch the heaviest stage's work - a middle stage's layers, or the last stage's
    one layer fewer plus the head - never a full stage plus the head (the timeline simulator found it)."""
    from supercluster.hardware.specs import get_gpu

    h100 = get_gpu("h100-sxm")
    # (bf16: fp8's weight casts are paid once a step, not per micro-batch)
    lay = Layout(tp=8, pp=8, dp=16, vpp=8, micro_batch=1, global_batch=1024, seq_len=8192, precision="bf16",
                 sequence_parallel=True)  # Llama 3.1 405B: 126 + 2 slots = 2 per chunk, 16 per stage
    b = estimate("llama3.1-405b", gpu=h100, num_gpus=1024, layout=lay, framework="nemo-megatron")
    per_mb = (b.step_time_s - sum(b.ledger[k] for k in ("exposed_pp_comm", "pipeline_bubble", "exposed_dp_comm",
                                                        "optimizer", "stragglers"))) / b.microbatches
    bubble_stage = b.ledger["pipeline_bubble"] / ((8 - 1) / 8)  # bubble = (pp - 1) / vpp stage times
    assert per_mb == pytest.approx(bubble_stage, rel=1e-9)


def test_mla_up_projection_recompute_drops_q_k_v_and_runs_the_up_projections_again():
    """DeepSeek-V3 (MLA, 128 heads, q/k head dim 192, v 128; q compressed): recomputing the up-
    projections drops the q, k and v the attention saved, 2 x (128 x 192 + 128 x (192 + 128)) bytes per
    token per layer in bf16, for the up-projection GEMMs run again; a model without MLA refuses it."""
    from supercluster.errors import InputError
    from supercluster.formats.load import load_model
    from supercluster.hardware.specs import get_gpu

    m, h100 = load_model("deepseek-v3"), get_gpu("h100-sxm")
    base = dict(tp=2, pp=16, dp=32, ep=64, expert_tp=1, micro_batch=1, global_batch=8192, seq_len=4096,
                sequence_parallel=True)
    none = estimate(m, gpu=h100, num_gpus=1024, layout=Layout(**base), framework="nemo-megatron")
    up = estimate(m, gpu=h100, num_gpus=1024, layout=Layout(**base, recompute="selective",
                                                           recompute_modules=("mla_up_proj",)),
                  framework="nemo-megatron")
    per_tok_layer = 2.0 * (64 * 192 + 64 * (192 + 128))  # 128 heads over tp 2
    layers = -(-61 // 16) - 1  # the first stage: one slot to the embedding
    in_flight = 16  # 1F1B keeps pp micro-batches on the first stage
    saved = none.memory["mem_activations_bytes"] - up.memory["mem_activations_bytes"]
    assert saved == pytest.approx(per_tok_layer * 4096 * layers * in_flight, rel=1e-9)
    assert up.ledger["recompute"] > 0 and up.hardware_flops > none.hardware_flops
    with pytest.raises(InputError, match="no MLA"):
        estimate("llama3-70b", gpu=h100, num_gpus=64, layout=Layout(tp=8, pp=1, dp=8, global_batch=64,
                 recompute="selective", recompute_modules=("mla_up_proj",)))


def test_multi_token_prediction_is_priced_on_the_last_pipeline_stage():
    """DeepSeek-V3's MTP module: a block, its projection and the head once more on the last stage. With
    Megatron-Core's embedding/loss-aware split (nemo-megatron) the block takes a layer's slot, as
    Megatron-Bridge's layouts place it; without one it sits on top of the stage's layers. Either way
    the ledger still sums to the step, the model FLOPs grow by the module's, and the last stage holds
    a second set of logits."""
    import dataclasses

    from supercluster.formats.load import load_model

    ds = load_model("deepseek-v3")
    mtp = dataclasses.replace(ds, mtp_layers=1)
    lay = Layout(pp=16, dp=16, ep=8, global_batch=1024, seq_len=4096, precision="fp8")
    for fw in ("nemo-megatron", "megatron"):
        a = estimate(ds, gpu="b200", num_gpus=256, layout=lay, framework=fw)
        b = estimate(mtp, gpu="b200", num_gpus=256, layout=lay, framework=fw)
        assert sum(b.ledger.values()) == pytest.approx(b.step_time_s, rel=1e-12)
        assert b.model_flops / a.model_flops == pytest.approx(
            mtp.model_flops_per_token(4096) / ds.model_flops_per_token(4096), rel=1e-12)
        assert b.step_time_s > a.step_time_s and b.memory_per_gpu_bytes > a.memory_per_gpu_bytes
    # 61 layers + embedding + loss + MTP fill 16 stages x 4 slots: the last stage holds 2 layers and the
    # block; on top of ceil(61 / 16) = 4 layers (megatron) it costs a whole layer and head more
    slot = estimate(mtp, gpu="b200", num_gpus=256, layout=lay, framework="nemo-megatron")
    top = estimate(mtp, gpu="b200", num_gpus=256, layout=lay, framework="megatron")
    base = estimate(ds, gpu="b200", num_gpus=256, layout=lay, framework="megatron")
    assert slot.step_time_s < top.step_time_s
    assert top.step_time_s / base.step_time_s > slot.step_time_s / estimate(
        ds, gpu="b200", num_gpus=256, layout=lay, framework="nemo-megatron").step_time_s
    with pytest.raises(Exception, match="mtp_layers"):
        dataclasses.replace(ds, mtp_layers=-1)


def test_unique_rows_is_numpys_unique_by_rows():
    # the planner's deduplication (one lexsort of the columns) must give np.unique(axis=0)'s answer
    from supercluster.perf.pipeline import unique_rows

    rng = np.random.default_rng(3)
    for _ in range(50):
        a = rng.integers(0, 3, size=(int(rng.integers(1, 40)), int(rng.integers(1, 6)))).astype(float)
        got, inverse = unique_rows(a)
        want, want_inverse = np.unique(a, axis=0, return_inverse=True)
        assert np.array_equal(got, want) and np.array_equal(inverse, want_inverse.ravel())
        assert np.array_equal(got[inverse], a)
    empty, inv = unique_rows(np.zeros((0, 3)))
    assert empty.shape == (0, 3) and inv.size == 0


@pytest.mark.parametrize("model, gpus, labels", [
    ("llama3-405b", 1024, ["tp8-pp16-dp8", "tp8-pp8-dp16-vpp4", "tp4-pp4-dp32-cp2", "tp8-pp1-dp128-z3"]),
    ("deepseek-v3+mtp", 256, ["tp1-pp8-dp32-ep32", "tp2-pp4-dp32-ep32-vpp2", "tp1-pp1-dp256-ep64-z3"]),
])
def test_ideal_compute_is_the_jobs_and_the_heaviest_stage_pays_its_imbalance(model, gpus, labels):
    """Every layout of one job computes the same FLOPs per GPU: ideal compute is that share at the peak,
    whatever the pipeline split; what the heaviest stage does beyond a 1 / pp share is its own line
    (0 without a pipeline), and the lines still sum to the step time."""
    import supercluster as sc

    out = {}
    for label in labels:
        b = sc.estimate(model, gpu="b200", num_gpus=gpus, layout=Layout.from_string(label, global_batch=1024,
                                                                                    seq_len=4096))
        assert sum(b.ledger.values()) == pytest.approx(b.step_time_s, rel=1e-12)
        assert b.ledger["stage_imbalance"] >= 0.0
        out[label] = b.ledger
    ideal = {round(v["ideal_compute"], 9) for v in out.values()}
    assert len(ideal) == 1
    assert out[labels[-1]]["stage_imbalance"] == 0.0 < out[labels[0]]["stage_imbalance"]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from([("llama3-70b", "nemo-megatron"), ("deepseek-v3+mtp", "nemo-megatron"),
                        ("nemotronh-56b", "megatron"), ("llama3-8b", "torchtitan"), ("mixtral-8x7b", "deepspeed")]),
       st.sampled_from([1, 2, 8]), st.sampled_from([2, 4, 8, 16]), st.sampled_from([1, 2, 3]))
def test_no_pipeline_split_has_a_stage_lighter_than_the_mean(case, tp, pp, vpp):
    """Whatever the split (the framework's, with or without the embedding and loss counted as layers,
    interleaved or not), the heaviest stage does at least a 1 / pp share, and ideal compute is that of
    the same job without a pipeline."""
    import supercluster as sc
    from supercluster.parallelism.framework import get_framework

    model, fw = case
    fw = get_framework(fw)
    vpp = vpp if fw.interleaved_pipeline else 1
    ep = 8 if model in ("deepseek-v3+mtp", "mixtral-8x7b") else 1
    try:
        a, b = (sc.estimate(model, gpu="h100-sxm", num_gpus=512, framework=fw,
                            layout=Layout(tp=tp, pp=p, dp=512 // (tp * p), vpp=v, ep=ep, global_batch=1024,
                                          seq_len=4096))
                for p, v in ((1, 1), (pp, vpp)))
    except sc.InputError:
        return  # (a layout the framework or the model refuses: nothing to compare)
    assert a.ledger["stage_imbalance"] == 0.0 <= b.ledger["stage_imbalance"]
    assert b.ledger["ideal_compute"] == pytest.approx(a.ledger["ideal_compute"], rel=1e-9)
