"""How each framework's own code shapes the step: PyTorch's ring attention, torchtitan's FSDP, loss
and pipeline split, DeepSpeed 2021's ZeRO-3, Megatron-Core's MoE and DualPipe, the legacy profiles."""

from __future__ import annotations

import numpy as np
import pytest

from supercluster.job import default_network, estimate
from supercluster.parallelism.layout import Layout


def test_unfused_attention_of_the_legacy_profile_is_priced_by_hand():
    # GPT 1.7B of Narayanan 2021 Table 1 (h 2304, 24 heads of 96, s 2048) on one A100, micro-batch 16:
    # 16 x 24 x 2048^2 = 1.61e9 score elements per layer; forward elementwise traffic = softmax
    # (read + write, 2 B each) + dropout (read + write + 1-byte mask) = 9 B per element; backward
    # softmax reads output and gradient and writes one (6 B) + dropout 5 B = 11 B.
    from supercluster.hardware.specs import get_gpu
    from supercluster.perf.compute import unfused_attention

    gpu = get_gpu("a100-80gb")
    E = 16 * 24 * 2048.0**2
    bw = gpu.hbm_bytes_per_s * 0.85
    rate = gpu.gemm_flops_per_s("bf16")
    mm_f, mm_b, el_f, el_b = (float(x) for x in unfused_attention(E, 96.0, 96.0, 2.0, 1.0, rate, bw))
    assert el_f == pytest.approx(9 * E / bw) and el_b == pytest.approx(11 * E / bw)
    # 2 x 96 flops per 2-byte score element is under the A100's ridge point: the score matmuls run
    # at the speed of writing / reading the score matrix (2 in the forward, 4 in the backward).
    assert 2 * 96 / rate < 2 / bw
    assert mm_f == pytest.approx(2 * 2 * E / bw) and mm_b == pytest.approx(2 * mm_f)

    lay = Layout(tp=8, pp=1, dp=1, micro_batch=1, global_batch=1, seq_len=2048, recompute="selective")
    old = estimate("gpt3-175b", gpu="a100-80gb", num_gpus=8, layout=lay, framework="megatron-legacy")
    new = estimate("gpt3-175b", gpu="a100-80gb", num_gpus=8, layout=lay, framework="megatron")
    # Unfused attention does the full s^2 work and moves the score matrix through HBM: slower.
    assert old.ledger["attention_inefficiency"] > new.ledger["attention_inefficiency"]
    assert old.ledger["memory_bound_ops"] > new.ledger["memory_bound_ops"]
    assert sum(old.ledger.values()) == pytest.approx(old.step_time_s, rel=1e-12)


def test_legacy_attention_keeps_the_score_matrix_unless_recomputed():
    lay = dict(tp=8, pp=1, dp=1, micro_batch=1, global_batch=1, seq_len=2048)
    mem = {rc: estimate("gpt3-175b", gpu="a100-80gb", num_gpus=8, layout=Layout(**lay, recompute=rc),
                        framework="megatron-legacy").memory["mem_activations_bytes"] for rc in ("none", "selective")}
    modern = estimate("gpt3-175b", gpu="a100-80gb", num_gpus=8, layout=Layout(**lay),
                      framework="megatron").memory["mem_activations_bytes"]
    # Korthikanti et al. 2022: 5 a s / t bytes per token per layer (softmax out, dropout mask and out).
    scores = 96 * 5 * (96 / 8) * 2048 * 2048
    assert mem["none"] - mem["selective"] == pytest.approx(scores, rel=1e-9)
    assert mem["none"] > modern


def test_publication_year_selects_the_framework_of_its_era():
    from supercluster.formats.phrases import publication_year
    from supercluster.parallelism.published import resolve_framework

    assert publication_year("Narayanan et al. 2021 (SC21) Table 1, arXiv:2104.04473") == 2021
    assert publication_year("github.com/NVIDIA/dgxc-benchmarking README") is None
    assert resolve_framework("megatron", 2021)[0].key == "megatron-legacy"
    assert resolve_framework("megatron", 2022)[0].key == "megatron-legacy"
    assert resolve_framework("megatron", 2023)[0].key == "megatron"
    assert resolve_framework("megatron", None)[0].key == "megatron"
    assert resolve_framework("deepspeed", 2021)[0].key == "deepspeed-legacy"
    assert resolve_framework("torchtitan", 2021)[0].key == "torchtitan@2021"  # no era profile: unfused attention


def test_torchtitan_selective_is_per_op_checkpointing():
    # Llama 3 8B layer, matmuls in forward order q, k, v, o, w1, w3, w2 (h 4096, 8 KV heads of 128,
    # ffn 14336); every other output is saved, so k, o and w3 run again: 79.7 M of 218.1 M weights.
    from supercluster.formats.load import load_model
    from supercluster.perf.compute import op_sac_recompute_frac

    m = load_model("llama3-8b")
    assert op_sac_recompute_frac(m) == pytest.approx((4096 * 1024 + 4096 * 4096 + 4096 * 14336) / 218_103_808)
    lay = dict(tp=1, pp=1, dp=8, micro_batch=1, global_batch=8, seq_len=8192, zero_stage=3)
    tt = {rc: estimate(m, gpu="h100-sxm", num_gpus=8, layout=Layout(**lay, recompute=rc), framework="torchtitan")
          for rc in ("none", "selective", "full")}
    mg = estimate(m, gpu="h100-sxm", num_gpus=8, layout=Layout(**lay, recompute="selective"), framework="megatron")
    assert tt["selective"].ledger["recompute"] > mg.ledger["recompute"] > 0
    assert tt["none"].ledger["recompute"] == 0 < tt["selective"].ledger["recompute"] < tt["full"].ledger["recompute"]
    act = {rc: b.memory["mem_activations_bytes"] for rc, b in tt.items()}
    assert act["full"] < act["selective"] < act["none"]


def test_dualpipe_profile_hides_moe_dispatch_and_pipeline_sends():
    # DeepSeek-V3 report sec. 3.2.1: DualPipe hides the all-to-all and PP communication behind compute.
    lay = Layout(tp=1, pp=16, dp=8, ep=8, micro_batch=1, global_batch=256, seq_len=4096, precision="fp8",
                 recompute="selective")
    mg = estimate("deepseek-v3", gpu="h800", num_gpus=128, layout=lay, framework="megatron")
    ds = estimate("deepseek-v3", gpu="h800", num_gpus=128, layout=lay, framework="deepseek")
    assert mg.ledger["exposed_ep_comm"] > 0 and ds.ledger["exposed_ep_comm"] == 0
    assert ds.step_time_s < mg.step_time_s and ds.ledger["ideal_compute"] == mg.ledger["ideal_compute"]


def test_runs_before_flashattention_use_unfused_attention_in_every_framework():
    from supercluster.parallelism.published import resolve_framework

    fw, _ = resolve_framework("torchtitan", 2022)
    assert fw.attention == "unfused" and fw.key == "torchtitan@2022" and fw.elementwise == "eager"
    assert resolve_framework("torchtitan", 2023)[0].attention == "sdpa"


def test_pytorch_ring_attention_overlap_and_merge_traffic_by_hand():
    # PyTorch's all-gather ring attention (torchtitan's CP): the K/V all-gather hides only under the
    # first of the cp equal blocks, the fp32 K/V-gradient sends each under the next block's backward
    # and the last one not at all; merges are eager fp32 ops (bytes in the docstring).
    import numpy as np

    from supercluster.perf.comm import allgather_ring_attention

    class Stub:  # all-gather 5 s, point-to-point 1 s
        def collective_time_s(self, kind, size_bytes, group_size, stride):
            return np.where(np.asarray(group_size) > 1, 5.0 if kind == "all_gather" else 1.0, 0.0)

    one = np.array([1.0])
    comm_f, exp_f, comm_b, exp_b, mem_f, mem_b, held = allgather_ring_attention(
        Stub(), 2.0 * one, one, 20.0 * one, 10.0 * one, 1.0, 1.0, 2.0 * one, 8.0 * one, 20.0 * one, 1.0)
    assert held[0] == 20 * 2 * 2 + 4 * (10 + 20) + 2 * 4 * 20  # gathered K/V, fp32 accumulators, 2 sends
    assert (comm_f[0], exp_f[0]) == (5.0, 1.0)  # the first of 2 blocks is 4 s of forward attention
    assert (comm_b[0], exp_b[0]) == (7.0, 1.0)  # gather + 2 sends; only the last send shows
    # 10 output elements, 20 K/V elements, 2-byte activations:
    # forward (2+4) 10 2 + (0.75 (2+4+32) + 4) 10 + 2 2 20; backward 2 (11.5 (10+20) + 8 20) + 4 20 + 10 (10+20)
    assert (mem_f[0], mem_b[0]) == (525.0, 1390.0)
    nothing = allgather_ring_attention(Stub(), one, one, 20.0 * one, 10.0 * one, 1.0, 1.0, 2.0 * one,
                                        8.0 * one, 20.0 * one, 1.0)
    assert all(x[0] == 0.0 for x in nothing)  # cp = 1: no ring


def test_torchtitan_context_parallelism_moves_repeated_kv_heads(h100):
    # torchtitan's Llama repeats K/V to every query head before SDPA (torchtitan#1283), so its CP
    # traffic grows by a / kv heads; Transformer Engine's p2p ring moves the kv heads only.
    from dataclasses import replace

    from supercluster.formats.load import load_model
    from supercluster.parallelism.framework import get_framework

    model = load_model("llama3.1-405b")  # 128 query heads, 8 kv heads
    lay = Layout(tp=8, pp=1, dp=1, cp=8, vpp=1, micro_batch=1, global_batch=1, seq_len=262144, recompute="full",
                 zero_stage=3, precision="bf16")
    fw = get_framework("torchtitan+compile")
    rep = estimate(model, gpu=h100, num_gpus=64, layout=lay, framework=fw)
    kv = estimate(model, gpu=h100, num_gpus=64, layout=lay, framework=replace(fw, cp_kv_repeated=False))
    assert rep.ledger["exposed_cp_comm"] > kv.ledger["exposed_cp_comm"] >= 0.0
    assert rep.step_time_s > kv.step_time_s
    # the merges are memory-bound work the p2p ring does not have
    p2p = estimate(model, gpu=h100, num_gpus=64, layout=lay, framework=replace(fw, cp_rotate="p2p"))
    assert rep.ledger["memory_bound_ops"] > p2p.ledger["memory_bound_ops"]
    # and its backward holds the gathered K/V (bf16), fp32 Q/K/V-gradient accumulators and two fp32
    # K/V-gradient buffers: T = 32768 tokens per rank, 16 query heads per TP rank, K/V repeated to 16
    T, heads, d = 262144 / 8, 128 / 8, 128
    kv = T * heads * 2 * d
    ring = kv * 2 * 8 + 4 * (T * heads * d + kv) + 2 * 4 * kv
    assert rep.memory_per_gpu_bytes - p2p.memory_per_gpu_bytes == pytest.approx(ring, rel=1e-9)


def test_deepspeed_2021_zero3_gathers_pay_their_copies_at_hbm_speed():
    # DeepSpeed before v0.4 zero-filled each gathered parameter's buffer and all-gathered into a list
    # of per-rank views, which PyTorch 1.8 gathers into a flat buffer and copies back: 3 bytes of HBM
    # traffic per gathered byte, in the forward, the recomputed forward and the backward (no prefetch).
    from dataclasses import replace

    from supercluster.formats.load import load_model
    from supercluster.hardware.kernels import hbm_frac
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import get_framework

    model, gpu = load_model("gpt3-175b"), get_gpu("a100-80gb")
    lay = Layout(tp=1, pp=1, dp=64, micro_batch=1, global_batch=128, seq_len=2048, recompute="full", zero_stage=3)
    fw = get_framework("deepspeed-legacy")
    assert fw.zero3_gather_copy_bytes == 3
    net = default_network(gpu, num_gpus=64)
    with_copies = estimate(model, gpu=gpu, num_gpus=64, layout=lay, framework=fw, network=net)
    without = estimate(model, gpu=gpu, num_gpus=64, layout=lay, framework=replace(fw, zero3_gather_copy_bytes=0.0),
                       network=net)
    params = model.num_layers * (model.attn_params + model.dense_mlp_params + 2 * model.d_model) + \
        model.vocab_size * model.d_model
    per_pass = 3.0 * params * 2.0 / (gpu.hbm_bytes_per_s * hbm_frac())
    m = 128 / 64  # micro-batches per GPU
    extra = with_copies.ledger["exposed_dp_comm"] - without.ledger["exposed_dp_comm"]
    assert extra == pytest.approx(m * 3.0 * per_pass, rel=1e-6)  # forward, recomputed forward, backward


def test_nvidia_bf16_recipes_keep_a_precision_aware_optimizer_state():
    # NeMo 2.0's and Megatron-Bridge's benchmark scripts turn on the precision-aware optimizer for bf16
    # runs only: fp32 master weights as 16-bit remainders of the bf16 parameters, m and v in fp32 (10
    # bytes a parameter); an fp8 run keeps the fp32 master copy (12). Megatron-LM's own profile has none.
    from supercluster.parallelism.framework import get_framework

    lay = dict(tp=8, pp=1, dp=8, micro_batch=1, global_batch=64, seq_len=4096, zero_stage=1)
    per = {}
    for prec in ("bf16", "fp8"):
        for fw in ("nemo-megatron", "megatron"):
            b = estimate("llama3-70b", gpu="h100-sxm", num_gpus=64, layout=Layout(**lay, precision=prec),
                         framework=get_framework(fw))
            per[prec, fw] = b.memory["mem_optimizer_bytes"]
    shard = per["fp8", "nemo-megatron"] / 12.0
    assert per["bf16", "nemo-megatron"] == pytest.approx(10.0 * shard, rel=1e-9)
    # (it runs only as the distributed optimizer: without one, ZeRO-0, the fp32 master stays)
    ddp = estimate("llama3-70b", gpu="h100-sxm", num_gpus=64, layout=Layout(**{**lay, "zero_stage": 0}),
                   framework=get_framework("nemo-megatron"))
    assert ddp.memory["mem_optimizer_bytes"] == pytest.approx(12.0 * 8 * shard, rel=1e-9)  # (unsharded over dp 8)
    assert per["bf16", "megatron"] == pytest.approx(12.0 * shard, rel=1e-9)
    assert per["fp8", "megatron"] == pytest.approx(12.0 * shard, rel=1e-9)


def test_deepspeed_2021_zero3_holds_one_weight_gathered_not_two_layers():
    # Without prefetch DeepSpeed 0.3 gathered a submodule's weight in its pre-forward hook and released it
    # after the submodule: at the peak (a backward) the largest weight (GPT-3's FC1 or FC2, 4 h^2) is
    # gathered, its full gradient waits for its reduce-scatter, and PyTorch's list-form reduce-scatter
    # copies it into a flat buffer: 3 x 4 h^2 elements beyond the shard, where a prefetching ZeRO-3 holds
    # two whole layers (2 x 12 h^2).
    from dataclasses import replace

    from supercluster.formats.load import load_model
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import get_framework

    model, gpu = load_model("gpt3-175b"), get_gpu("a100-80gb")
    h = model.d_model
    lay = Layout(tp=1, pp=1, dp=64, micro_batch=1, global_batch=128, seq_len=2048, recompute="full", zero_stage=3)
    legacy = get_framework("deepspeed-legacy")
    net = default_network(gpu, num_gpus=64)
    one = estimate(model, gpu=gpu, num_gpus=64, layout=lay, framework=legacy, network=net)
    two = estimate(model, gpu=gpu, num_gpus=64, layout=lay, framework=replace(legacy, zero3_prefetch=True),
                   network=net)
    saved = two.memory["mem_weights_bytes"] - one.memory["mem_weights_bytes"]
    assert saved == pytest.approx((2 * 12 - 3 * 4) * h * h * 2.0, rel=1e-9)


def test_deepspeed_2021_zero3_gathers_the_four_linear_weights_and_reduces_every_parameter():
    # DeepSpeed 0.3 keeps parameters under 1e5 elements gathered (stage3.py persistence_threshold), so a
    # GPT block's gathers are its 4 linear weights, while each of its 12 parameters' gradients is
    # reduce-scattered on its own: 8 more reduce-scatter calls a layer than gathers, each one NCCL
    # latency (a zero-byte call on the data-parallel group) and, through the list-form collective, one
    # host copy launch per rank, after DeepSpeed's own loop of two views per rank. Without overlap the
    # difference is exact.
    from dataclasses import replace

    from supercluster.formats.load import load_model
    from supercluster.hardware.kernels import host_op_launch_s, host_view_op_s
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import get_framework

    model, gpu = load_model("gpt3-175b"), get_gpu("a100-80gb")
    lay = Layout(tp=1, pp=1, dp=64, micro_batch=1, global_batch=128, seq_len=2048, recompute="full", zero_stage=3)
    fw = replace(get_framework("deepspeed-legacy"), dp_overlap=False)
    assert (fw.zero3_gathers_per_layer, fw.zero3_reduces_per_layer) == (4, 12)
    net = default_network(gpu, num_gpus=64)
    as_is = estimate(model, gpu=gpu, num_gpus=64, layout=lay, framework=fw, network=net)
    fewer = estimate(model, gpu=gpu, num_gpus=64, layout=lay, framework=replace(fw, zero3_reduces_per_layer=0),
                     network=net)
    lat = float(net.collective_time_s("reduce_scatter", 0.0, 64, 1))
    m = 128 / 64
    extra = as_is.ledger["exposed_dp_comm"] - fewer.ledger["exposed_dp_comm"]
    per_call = lat + 64 * (host_op_launch_s() + fw.zero3_reduce_views_per_rank * host_view_op_s())
    assert extra == pytest.approx(m * (12 - 4) * model.num_layers * per_call, rel=1e-9)


def test_torchtitan_fsdp_under_pipeline_keeps_the_stage_gathered(h100):
    # torchtitan turns reshard_after_forward off under PP and the pipeline schedule defers resharding
    # and gradient reduction to the last micro-batch: the stage's bf16 weights and its fp32
    # (reduce-dtype) gradients stay whole, and the parameters are gathered once per step.
    from dataclasses import replace

    from supercluster.formats.load import load_model
    from supercluster.parallelism.framework import get_framework

    model = load_model("llama3.1-405b")
    lay = Layout(tp=8, pp=8, dp=8, vpp=1, micro_batch=1, global_batch=64, seq_len=8192, recompute="full",
                 zero_stage=3, precision="bf16")
    fw = get_framework("torchtitan+compile")
    keep = estimate(model, gpu=h100, num_gpus=512, layout=lay, framework=fw)
    per_mb = estimate(model, gpu=h100, num_gpus=512, layout=lay, framework=replace(fw, fsdp_pp_unsharded=False))
    local = (model.num_layers * (model.attn_params + model.dense_mlp_params + 2 * model.d_model) / 8
             + model.vocab_size * model.d_model) / 8  # the stage's parameters on one TP rank
    gained = keep.memory_per_gpu_bytes - per_mb.memory_per_gpu_bytes
    assert keep.memory["mem_grads_bytes"] == pytest.approx(4.0 * local, rel=1e-9)  # whole, fp32, not the shard
    assert per_mb.memory["mem_grads_bytes"] == pytest.approx(4.0 * local / 8, rel=1e-9)
    assert keep.memory["mem_weights_bytes"] == pytest.approx(2.0 * local, rel=1e-9)
    assert 4.5 * local < gained < 5.5 * local  # whole weights replace the shard plus two gathered layers
    assert keep.ledger["exposed_dp_comm"] <= per_mb.ledger["exposed_dp_comm"]


def test_torchtitan_eager_cross_entropy_holds_twelve_bytes_per_logit(h100):
    # cross_entropy(pred.float()) run eagerly: log_softmax's saved fp32 output plus the fp32 gradient
    # coming in and the one going out of its backward; Megatron's fused loss holds 8 bytes.
    from dataclasses import replace

    from supercluster.formats.load import load_model
    from supercluster.parallelism.framework import get_framework

    model = load_model("llama3.1-8b")
    lay = Layout(tp=2, pp=1, dp=4, micro_batch=1, global_batch=8, seq_len=8192, recompute="full", zero_stage=3)
    fw = get_framework("torchtitan")
    assert fw.loss_bytes_per_logit == 12 and get_framework("megatron").loss_bytes_per_logit == 8
    eager = estimate(model, gpu=h100, num_gpus=8, layout=lay, framework=fw)
    fused = estimate(model, gpu=h100, num_gpus=8, layout=lay, framework=replace(fw, loss_bytes_per_logit=8.0))
    logits = 8192 * model.vocab_size / 2  # tokens x vocabulary shard
    assert eager.memory_per_gpu_bytes - fused.memory_per_gpu_bytes == pytest.approx(4.0 * logits, rel=1e-9)


def test_torch_compile_fuses_torchtitans_loss_from_2025_not_in_2024(h100):
    # torchtitan 2025 compiles the loss with the model (components/loss.py): 16-bit logits in, a 16-bit
    # gradient out, 4 bytes a logit; its December 2024 tables ran the loss eagerly under compile (12).
    from supercluster.formats.load import load_model
    from supercluster.parallelism.published import resolve_framework

    new, _ = resolve_framework("torchtitan+compile", 2025)
    old, _ = resolve_framework("torchtitan+compile", 2024)
    assert (new.loss_bytes_per_logit, new.elementwise) == (4.0, "fused")
    assert (old.key, old.loss_bytes_per_logit, old.elementwise) == ("torchtitan-2024+compile", 12.0, "fused")
    assert resolve_framework("torchtitan", 2025)[0].loss_bytes_per_logit == 12.0  # eager without compile
    assert resolve_framework("torchtitan", 2022)[0].attention == "unfused"  # no era profile before flash
    model = load_model("llama3.1-8b")
    lay = Layout(tp=1, pp=1, dp=8, micro_batch=2, global_batch=16, seq_len=8192, recompute="selective", zero_stage=3)
    a = estimate(model, gpu=h100, num_gpus=8, layout=lay, framework=old)
    b = estimate(model, gpu=h100, num_gpus=8, layout=lay, framework=new)
    assert a.memory_per_gpu_bytes - b.memory_per_gpu_bytes == pytest.approx(8.0 * 2 * 8192 * model.vocab_size, rel=1e-9)


def test_torchtitan_splits_the_pipeline_with_lighter_first_and_last_stages():
    """torchtitan's generate_split_points: first chunk floor(L / stages), middle chunks one more while
    the remainder lasts, the last chunk the rest. Llama 3 405B (126 layers) on 8 stages: 15, 16 x 6,
    15 + head, so the heaviest stage is a middle one of 16 layers, where the even split prices
    ceil(126 / 8) = 16 layers and the head together."""
    import dataclasses

    from supercluster.formats.load import load_model
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import get_framework
    from supercluster.parallelism.pplayout import chunk_layers
    from supercluster.parallelism.published import resolve_framework
    from supercluster.perf.step import step_breakdown

    assert [sum(x) for x in chunk_layers(126, 8, 1, split="middle")] == [15, 16, 16, 16, 16, 16, 16, 15]
    split = chunk_layers(126, 8, 2, split="middle")  # stage s holds chunks s and s + 8
    assert split[0] == [7, 8] and split[-1] == [8, 7]
    assert [sum(x) for x in chunk_layers(10, 4, 1, split="middle")] == [2, 3, 3, 2]
    assert [sum(x) for x in chunk_layers(11, 2, 1, split="middle")] == [5, 6]  # no middle: the last takes the rest
    tt = get_framework("torchtitan")
    assert tt.pp_split == "middle" and get_framework("megatron").pp_split == "even"
    # the embedding-split option replaces the split
    assert resolve_framework("torchtitan+embedding-split", 2025)[0].pp_split == "even"

    model, gpu = load_model("llama3-405b"), get_gpu("h100-sxm")
    lay = Layout(tp=8, pp=8, dp=2, micro_batch=1, global_batch=16, seq_len=8192, recompute="full", zero_stage=1)
    net = default_network(gpu, num_gpus=128)
    mid = step_breakdown(model, layout=lay, gpu=gpu, net=net, fw=tt)
    even = step_breakdown(model, layout=lay, gpu=gpu, net=net, fw=dataclasses.replace(tt, pp_split="even"))
    assert mid.step_time_s < even.step_time_s
    # the bubble is (pp - 1) slots of the heaviest stage: 16 layers under "middle", 16 and the head under "even"
    assert 0.9 < mid.ledger["pipeline_bubble"] / even.ledger["pipeline_bubble"] < 1.0
    assert sum(mid.ledger.values()) == pytest.approx(mid.step_time_s, rel=1e-12)
    # the timeline simulator lays out the same chunks
    from supercluster.simulation.timeline import simulate

    tl = simulate(model, layout=dataclasses.replace(lay, vpp=2), gpu=gpu, net=net, fw=tt, exact_stages=True)
    assert [list(x) for x in tl.layers] == chunk_layers(126, 8, 2, split="middle")


def test_deepspeed_2021_list_collectives_cost_one_host_launch_per_rank_and_call():
    # DeepSpeed 0.3 gathers and reduce-scatters through PyTorch 1.8's list-form collectives, one view per
    # rank, which copy each rank's slice with its own launch (ProcessGroupNCCL). A reduce-scatter pays
    # its dp launches before its kernel, on top; a gather launches its copies while its kernel runs and
    # takes the longer of the two. So the cost grows with the data-parallel group, per call.
    from dataclasses import replace

    from supercluster.formats.load import load_model
    from supercluster.hardware.kernels import host_op_launch_s
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import get_framework

    model, gpu = load_model("gpt3-175b"), get_gpu("a100-80gb")
    fw = get_framework("deepspeed-legacy")
    assert fw.zero3_list_collectives and not get_framework("torchtitan").zero3_list_collectives
    t = host_op_launch_s()
    assert 1e-6 < t < 1e-4
    extras = {}
    for dp in (384, 1536):
        lay = Layout(tp=1, pp=1, dp=dp, micro_batch=1, global_batch=dp, seq_len=2048, recompute="full",
                     zero_stage=3)
        net = default_network(gpu, num_gpus=dp)
        on = estimate(model, gpu=gpu, num_gpus=dp, layout=lay, framework=fw, network=net)
        off = estimate(model, gpu=gpu, num_gpus=dp, layout=lay, framework=replace(fw, zero3_list_collectives=False),
                       network=net)
        extras[dp] = on.ledger["exposed_dp_comm"] - off.ledger["exposed_dp_comm"]
        reduce_launches = model.num_layers * 12 * dp * t  # one micro-batch
        assert extras[dp] >= reduce_launches * (1 - 1e-9)
        # the gathers add at most their launches (4 per layer, in the forward, recomputed forward, backward)
        assert extras[dp] <= reduce_launches + model.num_layers * 4 * 3 * dp * t
    assert extras[1536] > 4.0 * extras[384]  # per call the launches grow with dp, the gathers overtake NCCL


def test_deepspeed_2021_builds_its_per_rank_views_on_the_host_before_each_call():
    # DeepSpeed 0.3: _allgather_param appends flat_tensor.narrow(...) for each rank (1 view), and
    # _reduce_scatter_gradient param.grad.view(-1).narrow(...) (2), each a tensor op from Python
    from dataclasses import replace

    from supercluster.formats.load import load_model
    from supercluster.hardware.kernels import host_view_op_s
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import get_framework

    model, gpu = load_model("gpt3-175b"), get_gpu("a100-80gb")
    fw = get_framework("deepspeed-legacy")
    assert (fw.zero3_gather_views_per_rank, fw.zero3_reduce_views_per_rank) == (1, 2)
    assert host_view_op_s() == 2.0e-6  # kernels.toml [host] view_op_s, pytorch/pytorch#41383
    for dp in (384, 1536):
        lay = Layout(tp=1, pp=1, dp=dp, micro_batch=1, global_batch=dp, seq_len=2048, recompute="full",
                     zero_stage=3)
        net = default_network(gpu, num_gpus=dp)
        on = estimate(model, gpu=gpu, num_gpus=dp, layout=lay, framework=fw, network=net)
        off = estimate(model, gpu=gpu, num_gpus=dp, layout=lay, network=net,
                       framework=replace(fw, zero3_gather_views_per_rank=0, zero3_reduce_views_per_rank=0))
        # 4 gathers a layer in the forward, the recomputed forward and the backward; 12 reduce-scatters
        # a layer; one micro-batch; nothing hides the loop, so the ledger grows by exactly its time
        loop = model.num_layers * dp * host_view_op_s() * (4 * 3 * 1 + 12 * 2)
        assert on.ledger["exposed_dp_comm"] - off.ledger["exposed_dp_comm"] == pytest.approx(loop, rel=1e-9)
    assert get_framework("torchtitan").zero3_gather_views_per_rank == 0  # FSDP2: no per-rank Python loop


def _dualpipe_pair():
    """HAI-LLM's profile and the same profile on a 1F1B schedule."""
    import dataclasses

    from supercluster.parallelism.framework import get_framework

    dual = get_framework("hai-llm")
    return dual, dataclasses.replace(dual, pipeline_schedule="1f1b")


def test_dualpipe_bubble_parameters_and_activations_follow_the_deepseek_v3_table():
    """DeepSeek-V3 report Table 2 (and deepseek-ai/DualPipe's README): bubble (PP/2 - 1)(F&B + B - 3W)
    against 1F1B's (PP - 1)(F + B); 2x parameters; PP + 1 micro-batches of activations."""
    from supercluster.formats.load import load_model
    from supercluster.hardware.specs import get_gpu
    from supercluster.perf.columns import layout_columns
    from supercluster.perf.step import step_columns

    dual, plain = _dualpipe_pair()
    gpu = get_gpu("h800")
    lay = Layout(pp=8, dp=4, global_batch=64, seq_len=4096)  # 16 micro-batches = 2 pp
    model = load_model("llama3-70b")
    net = default_network(gpu, num_gpus=lay.num_gpus)
    d, p = (step_columns(model, gpu, net, fw, layout_columns(lay, fw)) for fw in (dual, plain))
    t_stage = float(d["stage_time_s"][0])
    f, b = float(d["stage_forward_s"][0]), t_stage - float(d["stage_forward_s"][0])
    assert float(p["pipeline_bubble"][0]) == pytest.approx(7 * t_stage)  # (PP - 1)(F + B)
    bubble = float(d["pipeline_bubble"][0])
    # (PP/2 - 1)(F&B + B - 3W) with F&B = F + B, and the weight gradients W under half the backward
    # (the input gradients' GEMMs match them, and the attention backward is neither): 3 (F + B/2) to 3 (F + 2B)
    assert 3 * (f + 0.5 * b) <= bubble < 3 * (f + 2 * b) and bubble < float(p["pipeline_bubble"][0]) / 2
    assert float(d["step_time_s"][0]) < float(p["step_time_s"][0])
    assert float(d["mem_weights_bytes"][0]) == pytest.approx(2 * float(p["mem_weights_bytes"][0]))
    assert float(d["mem_optimizer_bytes"][0]) == pytest.approx(2 * float(p["mem_optimizer_bytes"][0]))
    # 1F1B's first stage holds pp micro-batches, DualPipe pp + 1 (the layer bytes are the same): one
    # more micro-batch of the stage's 10 layers, and the logits of the other direction's last stage
    per_layer = float(d["mem_layer_activation_bytes"][0])
    assert float(d["mem_activations_bytes"][0]) - float(p["mem_activations_bytes"][0]) >= 10 * per_layer


def test_dualpipe_needs_an_even_pipeline_and_enough_micro_batches():
    from supercluster.errors import InputError

    with pytest.raises(InputError, match="^pp: framework hai-llm runs DualPipe"):
        estimate("llama3-70b", gpu="h800", num_gpus=40, framework="hai-llm",
                 layout=Layout(pp=5, dp=8, global_batch=80, seq_len=4096))
    with pytest.raises(InputError, match="^global_batch: .*at least 2 x pp = 16"):
        estimate("llama3-70b", gpu="h800", num_gpus=32, framework="hai-llm",
                 layout=Layout(pp=8, dp=4, global_batch=32, seq_len=4096))
    with pytest.raises(InputError, match="^vpp: framework hai-llm has no interleaved"):
        estimate("llama3-70b", gpu="h800", num_gpus=32, framework="hai-llm",
                 layout=Layout(pp=8, dp=4, vpp=2, global_batch=64, seq_len=4096))
    # the timeline walks 1F1B schedules only, and says so
    from supercluster.formats.load import load_model
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import get_framework
    from supercluster.simulation.timeline import simulate

    lay = Layout(pp=8, dp=4, global_batch=64, seq_len=4096)
    with pytest.raises(InputError, match="^framework: hai-llm runs dualpipe"):
        simulate(load_model("llama3-70b"), layout=lay, gpu=get_gpu("h800"),
                 net=default_network(get_gpu("h800"), num_gpus=32), fw=get_framework("hai-llm"))


def test_batch_level_ep_overlap_pairs_each_all_to_all_with_one_chunk_and_leaves_the_warmup_exposed():
    """Megatron-Core's --overlap-moe-expert-parallel-comm (schedule_layer_1f1b): each all-to-all runs
    beside one compute chunk of another micro-batch, and only the steady 1F1B phase has a partner. By
    hand on one layer: calls of 1 ms beside chunks of 3, 0.5, 6 and 1 ms expose 0.5 + 0 + 0 + 0 ms when
    paired; a tenth of the steps alone expose their 4 ms. Through the step: one micro-batch hides nothing,
    more micro-batches (a smaller warm-up share) hide more, and never more than the plain overlap bound."""
    from types import SimpleNamespace

    from supercluster.hardware.specs import get_gpu
    from supercluster.perf.comm import paired_ep_exposed_s

    one = np.array([1.0])
    work = SimpleNamespace(t_fwd=3.5e-3 * one, t_bwd=7e-3 * one, t_rc=0.0 * one, t_experts_f=0.5e-3 * one)
    rows = SimpleNamespace(pp=2.0 * one, vpp=1.0 * one, ms=10.0 * one)  # 1F1B: pp - 1 = 1 of 10 alone
    x = paired_ep_exposed_s(rows, work, 1e-3 * one, 4.0 * one, 0.0 * one, 1.0)
    assert float(x[0]) == pytest.approx(0.9 * 0.5e-3 + 0.1 * 4e-3)
    assert float(paired_ep_exposed_s(rows, work, 1e-3 * one, 4.0 * one, 10.5e-3 * one, 1.0)[0]) == \
        pytest.approx(4e-3)  # compute already hiding other traffic hides no dispatch

    h100 = get_gpu("h100-sxm")

    def exposed(gbs, fw, pp=8, vpp=4):
        lay = Layout(tp=2, pp=pp, vpp=vpp, dp=256 // (2 * pp), ep=32, expert_tp=1, micro_batch=1, global_batch=gbs,
                     seq_len=4096, sequence_parallel=True)
        b = estimate("qwen3-235b-a22b", gpu=h100, num_gpus=256, layout=lay, framework=fw)
        return b.ledger["exposed_ep_comm"] / (gbs / lay.dp)  # per micro-batch

    plain, few, many = (exposed(g, f) for g, f in ((2048, "nemo-megatron"), (256, "nemo-megatron+ep-overlap"),
                                                   (2048, "nemo-megatron+ep-overlap")))
    assert many < few < plain
    single = exposed(128, "nemo-megatron+ep-overlap", pp=1, vpp=1), exposed(128, "nemo-megatron", pp=1, vpp=1)
    assert single[0] == pytest.approx(single[1])  # one micro-batch a rank: no forward to pair with a backward


def test_megatron_core_keeps_no_expert_outputs_for_the_gate_gradient():
    """Megatron-Core weights the experts' activation by the router's probabilities (TEGroupedMLP's
    weighted SwiGLU; unpermute takes no probabilities), so no combined expert output is kept for the
    gate's gradient: 2 bytes x top_k x d_model a token and MoE layer less than a combine that weights the
    outputs (DeepSpeed's, torchtitan's). Memory only; the step's time is the same."""
    import dataclasses

    from supercluster.formats.load import load_model
    from supercluster.parallelism.framework import get_framework

    fw = get_framework("megatron")
    assert fw.moe_probs_in_experts and get_framework("nemo-megatron").moe_probs_in_experts
    assert not get_framework("deepspeed").moe_probs_in_experts and not get_framework("torchtitan").moe_probs_in_experts
    lay = Layout(tp=1, pp=1, dp=8, ep=8, micro_batch=1, global_batch=64, seq_len=4096, recompute="none")
    kept, weighted = (estimate("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=8, layout=lay, framework=f)
                      for f in (dataclasses.replace(fw, moe_probs_in_experts=False), fw))
    m = load_model("qwen3-30b-a3b")
    extra = m.num_moe_layers * 4096 * m.top_k * m.expert_width * 2.0
    assert kept.memory["mem_activations_bytes"] - weighted.memory["mem_activations_bytes"] == pytest.approx(extra)
    assert kept.step_time_s == weighted.step_time_s


def test_deepseek_low_precision_storage_keeps_less_and_recomputes_the_swiglu():
    """DeepSeek-V3 report sec. 3.3.4 as HAI-LLM's profile holds it, by hand per token and layer of
    DeepSeek-V3 (58 of 61 layers MoE, top-8 experts of 2,048 plus a shared one, 128 heads with values
    of 128) in FP8 at TP 1: each MoE FC1 output element in 1 byte each for gate and up and no FC2 input
    (1 + 1 instead of 2 + 2 + 1: 3 bytes less), the attention output once in E5M6 (1.5 bytes instead of
    2 + 1); BF16 moments beside the FP32 master: 8 bytes of optimizer state a parameter, not 12."""
    import dataclasses

    from supercluster.formats.load import load_model
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import get_framework
    from supercluster.perf.columns import layout_columns, read_rows
    from supercluster.perf.memory import layer_bytes_per_token

    hai = get_framework("hai-llm")
    kept = dataclasses.replace(hai, low_precision_activations=False)
    assert hai.low_precision_activations and hai.optimizer_bytes_per_param == 8.0
    m, h800 = load_model("deepseek-v3"), get_gpu("h800")
    moe_width = 58 / 61 * (8 * 2048 + 2048)
    for precision, less in (("fp8", 3.0 * moe_width + 1.5 * 128 * 128), ("bf16", 0.0)):
        lay = Layout(pp=16, dp=128, ep=64, global_batch=15360, seq_len=4096, precision=precision,
                     recompute="selective")
        rows = read_rows(m, layout_columns(lay, hai))
        zero = np.zeros(1)
        assert float(layer_bytes_per_token(m, kept, rows, zero)[0] - layer_bytes_per_token(m, hai, rows, zero)[0]) \
            == pytest.approx(less)
        own, plain = (estimate(m, gpu=h800, num_gpus=2048, layout=lay, framework=f) for f in (hai, kept))
        # the SwiGLU output runs again in the backward: recompute grows in FP8 only
        assert (own.ledger["recompute"] > plain.ledger["recompute"]) == (precision == "fp8")
        assert (own.memory_per_gpu_bytes < plain.memory_per_gpu_bytes) == (precision == "fp8")
