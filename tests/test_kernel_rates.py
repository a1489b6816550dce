"""The kernels a step runs, priced at their measured rates: GEMMs (tensor work, operand traffic,
tile waves, grouped experts), fp8 / fp4 quantisation, fused and unfused attention, elementwise traffic."""

from __future__ import annotations

import numpy as np
import pytest

from supercluster.job import estimate
from supercluster.parallelism.layout import Layout


def test_fp8_is_faster_than_bf16_on_hopper(llama3_70b, h100):
    lay = dict(tp=4, pp=4, dp=4, micro_batch=1, global_batch=64, seq_len=8192)
    bf16 = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**lay))
    fp8 = estimate(llama3_70b, gpu=h100, num_gpus=64, layout=Layout(**lay, precision="fp8"))
    assert 1.1 < bf16.step_time_s / fp8.step_time_s < 2.0


def test_fp4_gemms_run_at_the_fp4_rate_on_blackwell(llama3_70b):
    """fp4 was once priced as bf16 (only fp8 had a code): its GEMMs must take the fp4 tensor-core rate,
    its MFU is against the fp4 peak, and its weights keep a 0.5-byte copy instead of fp8's 1 byte."""
    from supercluster.hardware.specs import get_gpu

    b200 = get_gpu("b200")
    lay = dict(tp=2, pp=4, dp=8, vpp=5, micro_batch=1, global_batch=256, seq_len=8192)
    run = {p: estimate(llama3_70b, gpu=b200, num_gpus=64, layout=Layout(**lay, precision=p), framework="megatron")
           for p in ("bf16", "fp8", "fp4")}
    assert run["bf16"].step_time_s > run["fp8"].step_time_s > run["fp4"].step_time_s
    assert run["fp4"].peak_flops_per_s == pytest.approx(b200.peak("fp4"))
    # only the GEMMs speed up: attention and elementwise stay in 16 bits
    assert run["fp8"].step_time_s / run["fp4"].step_time_s < run["bf16"].step_time_s / run["fp8"].step_time_s * 1.2
    w = {p: r.memory["mem_weights_bytes"] for p, r in run.items()}
    assert w["bf16"] < w["fp4"] < w["fp8"]
    assert w["fp4"] - w["bf16"] == pytest.approx((w["fp8"] - w["bf16"]) / 2)


def test_gemm_time_is_tensor_work_plus_operand_traffic(llama3_70b, h100):
    # One Llama 3 70B layer on TP8: each GEMM's FLOPs at the tensor-core rate plus its operands through
    # HBM, one after the other; at 8,192 tokens the traffic adds 15 %, at 16 tokens it is nearly all.
    # A rate measured in situ (overlap) keeps the roofline: the slower of the two.
    import numpy as np

    from supercluster.perf.gemm import GemmCost, layer_gemm_s

    rate = np.array(h100.gemm_tensor_flops_per_s("bf16"))
    bw = h100.hbm_bytes_per_s * 0.85
    two, eight, one = np.array(2.0), np.array(8.0), np.array(1.0)
    cost, roofline = GemmCost(rate, two, two, bw), GemmCost(rate, two, two, bw, overlap=True)
    M, K, N = np.array(512.0), 8192.0, 3584.0
    compute, memory = 2 * 512 * K * N / float(rate), (2 * (512 * K + K * N) + 2 * 512 * N) / bw
    assert float(cost.seconds(M, K, N)) == pytest.approx(compute + memory, rel=1e-12)
    assert float(roofline.seconds(M, K, N)) == pytest.approx(max(compute, memory), rel=1e-12)
    w = (llama3_70b.attn_params + llama3_70b.dense_mlp_params) / 8
    big = float(layer_gemm_s(llama3_70b, np.array(8192.0), eight, one, cost))
    assert 1.0 < big / (2 * 8192 * w / float(rate)) < 1.2
    small = float(layer_gemm_s(llama3_70b, np.array(16.0), eight, one, cost))
    assert small == pytest.approx(2 * w / bw + 2 * 16 * w / float(rate), rel=0.02)
    roof = float(layer_gemm_s(llama3_70b, np.array(8192.0), eight, one, roofline))
    assert roof == pytest.approx(2 * 8192 * w / float(rate), rel=1e-9)


# deepseek-ai/DeepGEMM README (Feb 2025), "Normal GEMMs for dense models", FP8 on H800 SXM5 (NVCC 12.8):
# M, N, K, TFLOP/s
DEEPGEMM_H800 = [(64, 2112, 7168, 206), (64, 24576, 1536, 289), (64, 32768, 512, 219), (64, 7168, 16384, 336),
                 (64, 4096, 7168, 287), (64, 7168, 2048, 295), (128, 2112, 7168, 352), (128, 24576, 1536, 535),
                 (128, 32768, 512, 358), (128, 7168, 16384, 645), (128, 4096, 7168, 533), (128, 7168, 2048, 510),
                 (4096, 2112, 7168, 1058), (4096, 24576, 1536, 990), (4096, 32768, 512, 590),
                 (4096, 7168, 16384, 1358), (4096, 4096, 7168, 1304), (4096, 7168, 2048, 1025)]


def test_gemm_pricing_follows_deepgemms_published_shapes():
    """kernels.toml [gemm]: DeepGEMM's 18 FP8 shapes on H800 (M 64 to 4096) priced with the catalog's
    H800 rate: the tensor work plus operand traffic is 12.5 % off on average (at most 35 %), the
    roofline's max 30.7 % (up to 2.1x too fast at M = 128)."""
    import numpy as np

    from supercluster.hardware.specs import get_gpu
    from supercluster.perf.gemm import GemmCost

    g = get_gpu("h800")
    bw, one, two = g.hbm_bytes_per_s * 0.85, np.array(1.0), np.array(2.0)
    M, N, K, meas = (np.array(c, dtype=float) for c in zip(*DEEPGEMM_H800, strict=True))

    def err(rate: float, overlap: bool) -> np.ndarray:
        t = GemmCost(np.array(rate), one, two, bw, overlap=overlap).seconds(M, K, N)
        return 2 * M * N * K / t / 1e12 / meas - 1

    summed = err(g.gemm_tensor_flops_per_s("fp8"), False)
    roof = err(g.gemm_flops_per_s("fp8"), True)
    assert np.mean(abs(summed)) == pytest.approx(0.125, abs=0.005) and max(abs(summed)) < 0.36
    assert np.mean(abs(roof)) == pytest.approx(0.307, abs=0.005) and max(roof) > 1.0


# the same README, "Grouped GEMMs for MoE models" (contiguous and masked layouts), FP8 on H800 SXM5:
# groups, M per group, N, K, TFLOP/s
DEEPGEMM_GROUPED_H800 = [(4, 8192, 4096, 7168, 1297), (4, 8192, 7168, 2048, 1099), (8, 4096, 4096, 7168, 1288),
                         (8, 4096, 7168, 2048, 1093), (1, 1024, 4096, 7168, 1233), (1, 1024, 7168, 2048, 925),
                         (2, 512, 4096, 7168, 1040), (2, 512, 7168, 2048, 916), (4, 256, 4096, 7168, 932),
                         (4, 256, 7168, 2048, 815)]


def test_grouped_expert_gemms_follow_deepgemms_grouped_tables():
    """An MoE layer's routed experts are priced as one GEMM per local expert, each reading its own
    weights (perf.compute.routed_expert_gemm_s): against DeepGEMM's ten grouped shapes (256 to 8,192
    tokens an expert) that is 11.5 % off on average, never faster than measured, at most 28 % slower
    (256 tokens an expert, where the measured kernel hides more of its weight loads)."""
    import numpy as np

    from supercluster.hardware.specs import get_gpu
    from supercluster.perf.gemm import GemmCost

    g = get_gpu("h800")
    bw, one, two = g.hbm_bytes_per_s * 0.85, np.array(1.0), np.array(2.0)
    G, M, N, K, meas = (np.array(c, dtype=float) for c in zip(*DEEPGEMM_GROUPED_H800, strict=True))
    t = G * GemmCost(np.array(g.gemm_tensor_flops_per_s("fp8")), one, two, bw).seconds(M, K, N)
    err = 2 * G * M * N * K / t / 1e12 / meas - 1
    assert np.mean(abs(err)) == pytest.approx(0.115, abs=0.005)
    assert max(err) < 0.01 and min(err) > -0.29


def test_eager_pytorch_elementwise_traffic_by_hand():
    # Llama 2 13B layer (h 5120, 40 heads of 128, MHA, SwiGLU 13824), one token, bf16, op by op:
    # 2 RMSNorms x 36 B x h + 2 adds x 6 B x h + RoPE 20 B x (40 + 40) x 128 + SwiGLU 10 B x 13824
    # + SDPA reads q, k, v and writes o (2 B x 4 x 40 x 128) = 814,080 B; fused: 267,264 B.
    import numpy as np

    from supercluster.formats.load import load_model
    from supercluster.perf.compute import eager_layer_bytes, fused_layer_bytes

    m = load_model("llama2-13b")
    one, two = np.array(1.0), np.array(2.0)
    assert float(eager_layer_bytes(m, one, one, one, np.array(40.0), two, 13824.0, 0.0)) == pytest.approx(
        814_080)
    assert float(fused_layer_bytes(m, one, one, one, np.array(40.0), two, 3.0, 13824.0, 0.0)) == pytest.approx(
        267_264)
    lay = Layout(tp=1, pp=1, dp=8, micro_batch=1, global_batch=8, seq_len=4096, zero_stage=3)
    eager = estimate(m, gpu="a100-80gb", num_gpus=8, layout=lay, framework="torchtitan")
    compiled = estimate(m, gpu="a100-80gb", num_gpus=8, layout=lay, framework="torchtitan+compile")
    # (both carry the same copy of each fresh gradient into FSDP2's reduce-scatter input: read in bf16,
    # written in fp32, less the weight-sized bf16 operand the GEMM backward counts: 4 B a layer parameter)
    from supercluster.hardware.specs import get_gpu

    layer_params = m.num_layers * (m.attn_params + m.dense_mlp_params + 2 * m.d_model)
    copy = layer_params * 4.0 / (get_gpu("a100-80gb").hbm_bytes_per_s * 0.85)
    assert compiled.ledger["memory_bound_ops"] - copy < (eager.ledger["memory_bound_ops"] - copy) / 2.5
    assert compiled.ledger["ideal_compute"] == eager.ledger["ideal_compute"]


def test_fp8_gemms_reproduce_the_te_guide_they_are_derived_from():
    """The TE GEMM guide's H200 NVL layer (hidden 4096, FFN 16384, 32 heads, 15,872 tokens): its
    pre-quantised FP8 kernel, 0.684 of 1,671 TFLOP/s, gives back 16.785 ms a layer; its autocast
    benchmark runs the layer's 12 GEMM shapes as 12 te.Linear forwards, each casting its input with
    both usages and its weight rowwise only (3/4 of the bytes under delayed scaling), and the catalog's
    cast figure gives back its 18.978 ms from those casts. That figure is the delayed-scaling format's
    own traffic (2 B read, two 1 B copies written). A training micro-batch casts each GEMM input and
    output gradient once (M K + M N), weights once a step, so it pays far fewer bytes than the guide's
    benchmark; on H100 (3.35 TB/s) the same casts take 4.8 / 3.35 as long."""
    from supercluster.hardware.kernels import quantize_bytes_per_element
    from supercluster.hardware.specs import tensor_frac
    from supercluster.models.spec import ModelSpec
    from supercluster.perf.gemm import GemmCost, layer_gemm_s

    m = ModelSpec(key="te", name="TE guide 5B", num_layers=24, d_model=4096, ffn_dim=16384, num_heads=32,
                  num_kv_heads=32, head_dim=128, vocab_size=32000, mlp="gelu", seq_len=512)
    one = np.array([1.0])
    q = quantize_bytes_per_element("hopper", "fp8")
    assert q == pytest.approx(2.0 + 2 * 1.0, rel=0.01)

    # the guide's 12 calls: fprop (M, K, N), dgrad (M, N, K), wgrad (K, M, N); input x = first x second
    tok, h, f = 15872, 4096, 16384
    fprop = [(tok, h, 3 * h), (tok, h, h), (tok, h, f), (tok, f, h)]
    calls = fprop + [(a, c, b) for a, b, c in fprop] + [(b, a, c) for a, b, c in fprop]
    inputs, weights = sum(a * b for a, b, _ in calls), sum(b * c for _, b, c in calls)
    guide_casts_ms = q * (inputs + 0.75 * weights) / (0.85 * 4.8e12) * 1e3

    # the tensor-core rate that gives back the measured layer once its operand traffic is priced apart
    rate = tensor_frac(0.684, 1671e12, 1.0, 4.8e12, "fp8") * 1671e12

    def layer_ms(bw: float, quant: float) -> float:
        cost = GemmCost(rate * one, one, 2.0 * one, 0.85 * bw, quant, 0.0)
        t = layer_gemm_s(m, np.array([15872.0]), one, one, cost)
        return float(3.0 * t[0] * 1e3)  # mean layer: forward + backward (2x)

    assert layer_ms(4.8e12, 0.0) == pytest.approx(3.0 * 1.917e13 / 3 / (0.684 * 1671e12) * 1e3, rel=1e-3)
    assert layer_ms(4.8e12, 0.0) == pytest.approx(16.785, rel=0.01)
    assert layer_ms(4.8e12, 0.0) + guide_casts_ms == pytest.approx(18.978, rel=0.01)
    # a training micro-batch: each input and output gradient once
    training = layer_ms(4.8e12, q) - layer_ms(4.8e12, 0.0)
    assert training == pytest.approx(q * sum(a * (b + c) for a, b, c in fprop) / (0.85 * 4.8e12) * 1e3, rel=1e-6)
    assert training < 0.5 * guide_casts_ms
    casts = layer_ms(3.35e12, q) - layer_ms(3.35e12, 0.0)
    assert casts == pytest.approx(training * 4.8 / 3.35, rel=1e-6)


def test_flashattention_in_triton_runs_at_the_fa2_papers_ratios_below_fa2():
    """FA2 paper section 4.1: FA2 is 1.3-1.5x faster than FlashAttention in Triton forward, about 2x
    backward. MPT's Composer runs (attn_impl 'triton') price attention from those ratios."""
    from supercluster.hardware.kernels import attention_efficiency
    from supercluster.parallelism.framework import get_framework

    assert get_framework("composer").attention == "triton"
    for arch, fa2 in (("ampere", "sdpa"), ("hopper", "sdpa")):
        tri, ref = attention_efficiency("triton", arch), attention_efficiency(fa2, arch)
        assert tri.fwd_frac == pytest.approx(ref.fwd_frac / 1.4) and tri.bwd_frac == pytest.approx(ref.bwd_frac / 2)
    # By hand, Llama 3 8B at 32K tokens on A100 (one micro-batch per GPU): causal attention forward is
    # 2 T a (dq + dv) keys FLOPs per layer; forward at fwd_frac, backward (2.5x) at bwd_frac of the
    # clocked peak; the ledger's ideal counts 3x forward at peak, the rest is attention inefficiency.
    from supercluster.formats.load import load_model
    from supercluster.hardware.specs import get_gpu

    model, gpu = load_model("llama3-8b"), get_gpu("a100-80gb")
    lay = Layout(tp=1, pp=1, dp=8, micro_batch=1, global_batch=8, seq_len=32768, recompute="none", zero_stage=3)
    r = estimate(model, gpu=gpu, num_gpus=8, layout=lay, framework="composer")
    tri = attention_efficiency("triton", "ampere")
    peak = gpu.peak("bf16")
    attn_f = 2 * 32768 * 32 * 256 * model.mean_keys(32768, causal=True)
    t = attn_f / (peak * gpu.clock_frac) * (1 / tri.fwd_frac + 2.5 / tri.bwd_frac)
    assert r.ledger["attention_inefficiency"] == pytest.approx(32 * (t - 3 * attn_f / peak), rel=1e-9)
    with pytest.raises(Exception, match="no efficiency for kernel 'nope'"):
        attention_efficiency("nope", "ampere")


def test_an_attention_kernel_computes_at_its_own_head_dim():
    """Triton's FlashAttention pads a head to the next power of two (112 -> 128), FlashAttention-2 (SDPA)
    to a step of 32 (80 -> 96); cuDNN's fused attention ("flash") and unfused GEMMs take it as it is.
    A 112-wide head under Composer costs what a 128-wide one does: 128 / 112 of its FLOPs' time."""
    import dataclasses

    from supercluster.formats.load import load_model
    from supercluster.hardware.kernels import attention_head_padding
    from supercluster.hardware.specs import get_gpu

    assert attention_head_padding("triton", 112, 112) == pytest.approx(128 / 112)
    assert attention_head_padding("triton", 80, 80) == pytest.approx(128 / 80)
    assert attention_head_padding("sdpa", 80, 80) == pytest.approx(96 / 80)
    assert attention_head_padding("sdpa", 192, 128) == 1.0 == attention_head_padding("triton", 128, 128)
    assert attention_head_padding("flash", 112, 112) == 1.0 == attention_head_padding("unfused", 80, 80)
    base = load_model("llama3-8b")  # 32 heads of 128; the same width as 36 heads of 112 would be 4032
    narrow = dataclasses.replace(base, key="h112", d_model=4032, num_heads=36, num_kv_heads=36, head_dim=112)
    gpu = get_gpu("h100-sxm")
    lay = Layout(tp=1, pp=1, dp=8, micro_batch=1, global_batch=8, seq_len=8192, recompute="none", zero_stage=3)

    def attention_s(model, framework):
        led = estimate(model, gpu=gpu, num_gpus=8, layout=lay, framework=framework).ledger
        return led["attention_inefficiency"]

    # per attention FLOP, the padded head is slower under Triton's kernel, not under cuDNN's
    ratio_tri = attention_s(narrow, "composer") / attention_s(base, "composer")
    ratio_flash = attention_s(narrow, "nemo-megatron") / attention_s(base, "nemo-megatron")
    assert ratio_tri > ratio_flash


def test_fused_attention_runs_slower_on_short_sequences_as_measured():
    # kernels.toml [attention_length]: each kernel's causal forward at 512 ... 16K tokens in the FA3
    # paper's figure (head dim 128, H100), relative to 16K; held at both ends, log-linear between
    from supercluster.errors import InputError
    from supercluster.hardware.kernels import attention_length_factor

    f = attention_length_factor(np.array([256.0, 512, 1024, 724.08, 16384, 65536]), "flash")
    assert f[0] == f[1] == pytest.approx(315 / 539)  # cuDNN, Transformer Engine's fused attention
    assert f[2] == pytest.approx(410 / 539)
    assert f[3] == pytest.approx((315 + 410) / 2 / 539, rel=1e-4)  # half-way in log2
    assert f[4] == f[5] == 1.0
    assert attention_length_factor(512, "sdpa") == pytest.approx(191 / 335)  # FlashAttention-2
    for family in ("flash", "sdpa", "triton"):
        assert np.all(np.diff(attention_length_factor(np.geomspace(64, 1 << 20, 50), family)) >= 0)
    with pytest.raises(InputError, match="^attention: no sequence-length curve for kernel 'xformers'"):
        attention_length_factor(4096, "xformers")


def test_fused_attention_runs_slower_below_head_dim_128_as_measured():
    # kernels.toml [attention_head_rate]: the FA3 paper's head dim 64 and 128 figures at 16K tokens;
    # a kernel with no such figure (the Triton kernel) is not scaled, and nothing above 128
    from supercluster.hardware.kernels import attention_head_rate

    assert attention_head_rate("flash", 64) == pytest.approx((388 / 539, 433 / 516))
    assert attention_head_rate("sdpa", 64) == pytest.approx((299 / 335, 291 / 322))
    assert attention_head_rate("flash", 128) == attention_head_rate("flash", 192) == (1.0, 1.0)
    assert attention_head_rate("flash", 32) == attention_head_rate("flash", 64)
    assert attention_head_rate("triton", 64) == (1.0, 1.0)
    mid = attention_head_rate("flash", 90.51)  # half-way in log2
    assert mid[0] == pytest.approx((388 / 539 + 1) / 2, rel=1e-4)


def test_a_head_dim_64_model_pays_for_its_slower_attention(h100):
    # the same model with 64 heads of 64 or 32 heads of 128 (the same attention FLOPs): only the
    # attention line moves, by the kernel's measured rate
    from dataclasses import replace

    from supercluster.formats.load import load_model

    base = load_model("llama3-8b")
    narrow = replace(base, num_heads=64, num_kv_heads=16, head_dim=64)
    lay = Layout(tp=1, dp=8, global_batch=64, seq_len=8192)

    def led(m):
        return estimate(m, gpu=h100, num_gpus=8, layout=lay, framework="nemo-megatron").ledger

    wide, thin = led(base), led(narrow)
    assert thin["ideal_compute"] == pytest.approx(wide["ideal_compute"], rel=1e-3)
    assert thin["attention_inefficiency"] > wide["attention_inefficiency"] + 0.2 * (
        wide["attention_inefficiency"])


def test_context_parallelism_shortens_what_each_rank_attends_over(h100, llama3_70b):
    # the same 8K sequence attended over by 1 or 8 ranks: each rank's query blocks walk 1K keys, where
    # the kernel runs at 0.83 of its long-sequence rate; the GEMM and attention FLOPs per GPU are the
    # same, but each GEMM now has 1K tokens to spread its weights' traffic over, not 8K
    from supercluster.hardware.kernels import attention_length_factor
    from supercluster.parallelism.framework import get_framework

    def ledger(cp: int) -> dict[str, float]:
        lay = Layout(tp=1, pp=4, dp=256 // cp, cp=cp, vpp=10, global_batch=1024, seq_len=8192, zero_stage=2)
        return estimate(llama3_70b, gpu=h100, num_gpus=1024, layout=lay,
                        framework=get_framework("nemo-megatron")).ledger

    one, eight = ledger(1), ledger(8)
    assert eight["ideal_compute"] == pytest.approx(one["ideal_compute"])
    assert eight["gemm_inefficiency"] > one["gemm_inefficiency"]
    assert eight["attention_inefficiency"] > 1.2 * one["attention_inefficiency"]
    assert attention_length_factor(8192 / 8) < attention_length_factor(8192) < 1.0


def test_tensor_core_fractions_reproduce_each_gpus_reference_layer():
    """hardware.tensor_frac: on every catalog GPU and precision, the reference layer (TE-GEMM's 15,872
    tokens, hidden 4096, FFN 16384) priced as tensor work plus operand traffic takes exactly the time
    its whole-layer fraction says (B300's NVFP4 layer the guide's 3.764 ms); fp4 without a fraction of
    its own takes fp8's tensor-core fraction."""
    import numpy as np

    from supercluster.hardware.kernels import gemm_grid
    from supercluster.hardware.specs import get_gpu, gpu_catalog
    from supercluster.models.spec import ModelSpec
    from supercluster.perf.gemm import GemmCost, layer_gemm_s

    m = ModelSpec(key="te", name="TE guide layer", num_layers=1, d_model=4096, ffn_dim=16384, num_heads=32,
                  num_kv_heads=32, head_dim=128, vocab_size=32000, mlp="gelu", seq_len=512)
    one = np.array([1.0])
    for g in gpu_catalog().values():
        bw = g.hbm_bytes_per_s * 0.85
        for p, el in (("bf16", 2.0), ("fp8", 1.0), ("fp4", 0.5)):
            if not g.gemm_tensor_frac.get(p) or p not in g.gemm_frac:
                continue  # (fp4 on a GPU without a fraction of its own: fp8's tensor-core fraction)
            # (the SMs' tile waves are priced relative to this layer: on it they change nothing)
            cost = GemmCost(g.gemm_tensor_flops_per_s(p) * one, el * one, 2.0 * one, bw, grid=gemm_grid(g.sm_count))
            t = float(layer_gemm_s(m, np.array([15872.0]), one, one, cost)[0])
            assert t == pytest.approx(1.917e13 / 3 / g.gemm_flops_per_s(p), rel=2e-3), (g.key, p)
    b300, mi355x = get_gpu("b300"), get_gpu("mi355x")
    assert b300.gemm_flops_per_s("fp4") * 3.764e-3 == pytest.approx(1.917e13, rel=2e-3)
    assert b300.gemm_tensor_frac["fp4"] < b300.gemm_tensor_frac["fp8"] < 0.75
    assert mi355x.gemm_tensor_frac["fp4"] == mi355x.gemm_tensor_frac["fp8"]


def test_blackwell_attention_forward_is_bound_by_its_exponentials():
    """On Blackwell the fused attention forward waits on the softmax's exponentials (one per score
    element on the special-function units): B200's measured forward rate is that bound (exp_frac is
    derived from it), GB200 has the same exponential rate under a higher matmul peak, and Blackwell
    Ultra (GB300, B300) doubles it, so there the kernel runs at its matmul-bound fraction. A GPU with
    no catalogued exponential rate keeps its measured fraction of peak."""
    import numpy as np

    from supercluster.hardware.kernels import attention_efficiency
    from supercluster.hardware.specs import get_gpu
    from supercluster.perf.compute import attention_forward_s

    att = attention_efficiency("flash", "blackwell")
    flops = np.array([512.0e12])  # 1e12 score elements at head dim 128 (4 x 128 FLOPs each)
    scores = np.array([1.0e12])

    def fwd(key: str) -> float:
        g = get_gpu(key)
        return float(attention_forward_s(att, g, flops, scores, np.array([g.peak("bf16")]), 1.0)[0])

    b200, gb200, gb300, b300 = (get_gpu(k) for k in ("b200", "gb200", "gb300", "b300"))
    assert fwd("b200") == pytest.approx(512.0e12 / (b200.peak("bf16") * att.fwd_frac), rel=2e-3)
    assert fwd("gb200") == pytest.approx(1.0e12 / (gb200.sfu_exp_per_s * att.exp_frac))
    assert fwd("gb300") == pytest.approx(512.0e12 / (gb300.peak("bf16") * att.mma_frac))
    assert fwd("gb300") < fwd("gb200") and fwd("b300") < fwd("b200")
    # at head dim 64 the matmuls per score halve and the exponentials bind harder
    assert float(attention_forward_s(att, b300, flops / 2, scores, np.array([b300.peak("bf16")]), 1.0)[0]) \
        > fwd("b300") / 2
    hopper = attention_efficiency("flash", "hopper")
    h100 = get_gpu("h100-sxm")
    assert h100.sfu_exp_per_s == 0.0
    assert float(attention_forward_s(hopper, h100, flops, scores, np.array([h100.peak("bf16")]), 1.0)[0]) \
        == pytest.approx(512.0e12 / (h100.peak("bf16") * h100.clock_frac * hopper.fwd_frac))


def test_a_framework_with_its_own_fp8_kernels_pays_its_own_quantisation():
    """DeepSeek's HAI-LLM quantises in passes of its own (the DeepSeek-V3 report, sec. 3.5.2: read 16-bit,
    write fp8; the weight gradient's transposed copy read and written again): 5 bytes per element, not
    Transformer Engine's blockwise autocast on Hopper (kernels.toml). The same fp8 layout under HAI-LLM
    and under a copy of it with Transformer Engine's figure differs in the GEMMs' casts alone."""
    import dataclasses

    from supercluster.formats.load import load_model
    from supercluster.hardware.kernels import quantize_bytes_per_element
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import framework_catalog, get_framework
    from supercluster.perf.columns import layout_columns, read_rows
    from supercluster.perf.compute import rates

    hai = get_framework("hai-llm")
    assert (hai.fp8_recipe, hai.fp8_quantize_bytes_per_element) == ("blockwise", 5.0)
    assert all(f.fp8_quantize_bytes_per_element == 0.0 for k, f in framework_catalog().items() if k != "hai-llm")
    te = dataclasses.replace(hai, fp8_quantize_bytes_per_element=0.0)
    h800, m = get_gpu("h800"), load_model("deepseek-v3")
    lay = Layout(pp=16, dp=128, ep=64, global_batch=15360, seq_len=4096, precision="fp8")
    rows = read_rows(m, layout_columns(lay, hai))
    assert float(np.max(rates(h800, hai, rows).q_el)) == 5.0
    assert float(np.max(rates(h800, te, rows).q_el)) == quantize_bytes_per_element("hopper", "fp8", "blockwise") > 5
    own, autocast = (estimate(m, gpu=h800, num_gpus=2048, layout=lay, framework=f) for f in (hai, te))
    assert own.ledger["gemm_inefficiency"] < autocast.ledger["gemm_inefficiency"]
    assert own.ledger["ideal_compute"] == autocast.ledger["ideal_compute"]
