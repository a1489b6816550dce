"""GEMM tiling over the SMs (hardware.kernels.GemmGrid, kernels.toml [gemm] tiles): tile and wave
quantisation, priced relative to the reference layer the catalogue's GEMM rates were measured on."""

import numpy as np
import pytest

from supercluster.errors import InputError


def test_tile_and_wave_quantisation_by_hand():
    from supercluster.hardware.kernels import GemmGrid

    one_tile = GemmGrid(sms=132, tiles=((128, 128),))
    # 1536 x 1536: 12 x 12 = 144 tiles, two waves of 132 slots -> 144 / 264 of them busy
    assert float(one_tile.efficiency(1536.0, 1536.0)) == pytest.approx(144 / 264, rel=1e-12)
    # 200 x 128: two tiles, the second 72 of its 128 rows padding -> 200 / 256 of 2 tiles, one wave of 132
    assert float(one_tile.efficiency(200.0, 128.0)) == pytest.approx(200 / 256 * 2 / 132, rel=1e-12)
    # eight such GEMMs scheduled as one grouped grid share the wave: 16 of 132 slots
    assert float(one_tile.efficiency(200.0, 128.0, 8.0)) == pytest.approx(200 / 256 * 16 / 132, rel=1e-12)
    # the kernel takes the tile that loses least: 64 x 64 tiles fill 144 x 144 = 3 x 3 with 9 tiles of 132
    # slots (2.0 % busy), where one 256 x 128 tile pads it to 256 x 256 and 2 slots (0.47 %)
    two = GemmGrid(sms=132, tiles=((256, 128), (64, 64)))
    assert float(two.efficiency(144.0, 144.0)) == pytest.approx(144 * 144 / (192 * 192) * 9 / 132, rel=1e-12)
    # a whole number of full waves of whole tiles loses nothing
    assert float(one_tile.efficiency(128.0 * 132, 128.0)) == pytest.approx(1.0, rel=1e-12)


def test_quantisation_is_priced_relative_to_the_reference_layer():
    """On the reference layer's own GEMMs (15,872 tokens, hidden 4096, FFN 16384) the FLOP-weighted
    slowdown is 1 on every SM count; a TP-8 slice of a small model's GEMM is slower, a wide one not."""
    from supercluster.hardware.kernels import gemm_grid

    t, h, f = 15872.0, 4096.0, 16384.0
    for sms in (108, 132, 148, 160):
        grid = gemm_grid(sms)
        flops = [2 * t * k * n for k, n in ((h, 3 * h), (h, h), (h, f), (f, h))]
        slow = [float(grid.slowdown(t, k, n)) for k, n in ((h, 3 * h), (h, h), (h, f), (f, h))]
        assert sum(w * s for w, s in zip(flops, slow, strict=True)) / sum(flops) == pytest.approx(1.0, rel=1e-12)
        assert 0.95 < grid.reference < 1.0
    h100 = gemm_grid(132)
    # a 1,024-wide model at TP 8, 2,048 tokens: the QKV GEMM's forward output is 2048 x 384, 96 tiles of
    # 128 x 64 on 132 SMs (or 192 of 64 x 64 in two waves): a quarter of the slots idle, as in its
    # weight gradient (1024 x 384); its data gradient (2048 x 1024) nearly fills four waves
    assert 1.2 < float(h100.slowdown(2048.0, 1024.0, 384.0)) < 1.3
    assert float(h100.slowdown(8192.0, 8192.0, 8192.0)) == pytest.approx(1.0, abs=0.03)
    assert gemm_grid(0) is None


def test_sm_count_is_checked_by_name():
    from supercluster.hardware.specs import get_gpu, gpu_from_table
    from supercluster.hardware.specs import gpu_catalog as catalog

    assert get_gpu("h100-sxm").sm_count == 132 and get_gpu("gb300").sm_count == 160
    assert get_gpu("mi300x").sm_count == 0  # (no cuBLAS tiling catalogued for AMD: none priced)
    table = _toml_table("h100-sxm")
    for bad in (-1, 1.5, "132", True):
        with pytest.raises(InputError, match="sm_count"):
            gpu_from_table("h100-sxm", {**table, "sm_count": bad})
    assert gpu_from_table("h100-sxm", table).sm_count == catalog()["h100-sxm"].sm_count


def _toml_table(key: str) -> dict:
    from supercluster._toml import load_package_toml

    return dict(load_package_toml("gpus.toml")[key])


def test_small_gemms_pay_their_tiling_in_the_step(h100):
    """A 125M-parameter model (hidden 768) on one H100 fills the SMs worse than the reference layer:
    its layer GEMMs take longer with the GPU's grid than without, and the difference is gemm time."""
    from supercluster.hardware.kernels import gemm_grid
    from supercluster.models.spec import ModelSpec
    from supercluster.perf.gemm import GemmCost, layer_gemm_s

    m = ModelSpec(key="s", name="small", num_layers=12, d_model=768, ffn_dim=3072, num_heads=12,
                  num_kv_heads=12, head_dim=64, vocab_size=50304, mlp="gelu", seq_len=2048)
    one, two = np.array([1.0]), np.array([2.0])
    rate = np.array([h100.gemm_tensor_flops_per_s("bf16")])
    plain = GemmCost(rate, two, two, h100.hbm_bytes_per_s * 0.85)
    tiled = GemmCost(rate, two, two, h100.hbm_bytes_per_s * 0.85, grid=gemm_grid(132))
    T = np.array([2048.0])
    assert float(layer_gemm_s(m, T, one, one, tiled)[0]) > 1.05 * float(layer_gemm_s(m, T, one, one, plain)[0])
    # in situ (a calibrated profile's measured rate) no tiling is added
    measured = GemmCost(rate, two, two, h100.hbm_bytes_per_s * 0.85, overlap=True, grid=gemm_grid(132))
    assert float(measured.seconds(T, 768.0, 2304.0)[0]) == pytest.approx(
        float(GemmCost(rate, two, two, h100.hbm_bytes_per_s * 0.85, overlap=True).seconds(T, 768.0, 2304.0)[0]))


# OpenXLA's default matmul performance table (tensorflow/tensorflow third_party/xla/xla/service/gpu/model/
# matmul_interpolator_data.h, 2025: XLA-MATMUL), its sm_90 bf16 entries as (m, n, k, TFLOP/s) for batch
# 1, 2 and 4 (the 146 in the file's first 32,000 characters). An sm_90 part whose best, 809 TFLOP/s, is
# above the H100 PCIe's whole 756 TFLOP/s peak: an SXM part, 132 SMs.
XLA_SM90_B1 = [
    (1024, 2048, 256, 139.52), (256, 2048, 256, 41.84), (4096, 512, 512, 238.82), (512, 256, 512, 21.79),
    (256, 2048, 4096, 285.87), (4096, 1024, 512, 343.71), (2048, 2048, 2048, 631.98), (256, 512, 4096, 91.68),
    (256, 1024, 256, 22.67), (4096, 4096, 256, 392.16), (2048, 512, 2048, 347.71), (4096, 4096, 4096, 783.33),
    (512, 4096, 1024, 373.35), (512, 256, 4096, 91.06), (256, 1024, 4096, 172.29), (4096, 2048, 512, 447.02),
    (2048, 256, 1024, 135.85), (512, 256, 256, 11.46), (1024, 256, 1024, 68.34), (4096, 256, 2048, 304.69),
    (1024, 1024, 2048, 349.98), (256, 512, 256, 11.46), (256, 4096, 2048, 324.59), (1024, 512, 2048, 220.03),
    (512, 2048, 1024, 232.61), (4096, 512, 1024, 370.77), (1024, 2048, 2048, 524.29), (4096, 1024, 1024, 488.06),
    (1024, 2048, 1024, 373.35), (4096, 4096, 512, 543.12), (256, 512, 1024, 39.11), (512, 2048, 2048, 342.39),
    (256, 4096, 512, 138.08), (256, 1024, 1024, 72.47), (2048, 256, 512, 77.31), (1024, 256, 256, 21.96),
    (2048, 256, 4096, 307.49), (512, 1024, 2048, 216.48), (512, 256, 1024, 39.29), (256, 256, 2048, 31.13),
    (4096, 512, 256, 142.48), (2048, 4096, 1024, 594.21), (4096, 4096, 2048, 738.74), (512, 512, 2048, 114.72),
    (4096, 512, 4096, 649.96), (4096, 1024, 256, 216.48), (1024, 4096, 1024, 490.29), (256, 4096, 256, 78.03),
    (256, 4096, 4096, 412.03), (4096, 1024, 4096, 738.47), (1024, 256, 4096, 169.68), (256, 2048, 512, 78.22),
    (2048, 256, 256, 43.58), (4096, 2048, 256, 304.0), (2048, 1024, 2048, 523.27)]
XLA_SM90_B2 = [
    (256, 2048, 2048, 332.25), (2048, 256, 512, 139.23), (1024, 2048, 1024, 493.45), (512, 2048, 2048, 525.31),
    (256, 256, 1024, 36.95), (256, 1024, 2048, 216.13), (2048, 4096, 1024, 678.72), (4096, 512, 256, 211.03),
    (4096, 4096, 2048, 763.01), (1024, 256, 256, 43.69), (256, 512, 2048, 119.62), (2048, 256, 4096, 378.63),
    (512, 1024, 2048, 349.53), (512, 256, 1024, 66.58), (2048, 256, 256, 78.77), (4096, 1024, 256, 301.61),
    (4096, 512, 4096, 729.69), (1024, 4096, 1024, 596.52), (2048, 2048, 1024, 600.19), (4096, 4096, 4096, 807.67),
    (512, 256, 4096, 168.62), (4096, 2048, 512, 546.43), (512, 256, 512, 40.33), (2048, 1024, 2048, 629.39),
    (256, 4096, 1024, 358.39), (2048, 256, 1024, 217.18), (2048, 512, 2048, 518.72), (256, 256, 4096, 91.3),
    (512, 4096, 1024, 486.74), (4096, 4096, 256, 464.02), (1024, 512, 2048, 347.71), (4096, 256, 2048, 508.4),
    (1024, 1024, 2048, 519.22), (256, 2048, 1024, 226.34), (4096, 4096, 512, 607.67), (4096, 1024, 1024, 598.18),
    (1024, 256, 512, 76.43), (4096, 1024, 512, 445.54), (2048, 2048, 2048, 717.74), (4096, 2048, 256, 394.47),
    (256, 256, 512, 21.56), (4096, 512, 512, 340.65), (1024, 256, 1024, 136.4), (256, 256, 256, 11.55),
    (512, 256, 256, 21.73), (4096, 2048, 4096, 783.19)]
XLA_SM90_B4 = [
    (512, 256, 256, 42.37), (4096, 256, 2048, 588.67), (1024, 2048, 2048, 712.74), (256, 256, 256, 22.55),
    (512, 2048, 1024, 487.18), (1024, 512, 2048, 514.24), (4096, 512, 1024, 589.0), (512, 256, 512, 77.85),
    (4096, 512, 512, 441.51), (256, 2048, 1024, 358.87), (1024, 1024, 2048, 626.09), (4096, 1024, 1024, 673.84),
    (1024, 256, 1024, 218.24), (4096, 4096, 512, 619.86), (256, 256, 512, 41.22), (2048, 2048, 2048, 725.75),
    (4096, 1024, 512, 542.04), (4096, 4096, 256, 503.87), (2048, 512, 2048, 621.38), (512, 4096, 1024, 592.25),
    (256, 256, 4096, 171.63), (2048, 256, 1024, 368.22), (4096, 4096, 4096, 793.13), (2048, 1024, 2048, 710.62),
    (512, 256, 4096, 293.05), (256, 4096, 1024, 481.93), (4096, 2048, 512, 607.49), (4096, 512, 4096, 728.59),
    (2048, 256, 256, 136.12), (1024, 256, 512, 135.85), (4096, 2048, 256, 458.47), (1024, 256, 4096, 384.05),
    (4096, 2048, 4096, 808.7), (1024, 4096, 1024, 674.88), (2048, 2048, 1024, 674.04), (512, 2048, 2048, 629.39),
    (4096, 1024, 256, 393.31), (1024, 256, 256, 80.85), (2048, 256, 512, 235.47), (256, 512, 2048, 204.6),
    (512, 256, 1024, 132.36), (4096, 1024, 4096, 777.59), (512, 1024, 2048, 518.22), (2048, 256, 4096, 561.87),
    (256, 2048, 2048, 478.49)]


# The same table's sm_100 bf16 entries (B200: a newer copy of the file, xla/backends/gpu/cost_model/
# matmul_interpolator_data.h), the 110 read: batch 1 to m 512 and m 4096, batch 2 and 4 at m 256 and 512.
XLA_SM100_B1 = [
    (256, 256, 256, 6.77), (256, 512, 256, 13.4), (256, 1024, 256, 18.55), (256, 2048, 256, 46.09),
    (256, 4096, 256, 89.24), (256, 256, 512, 12.59), (256, 512, 512, 21.02), (256, 1024, 512, 39.1),
    (256, 2048, 512, 88.74), (256, 4096, 512, 163.28), (256, 256, 1024, 20.21), (256, 512, 1024, 33.16),
    (256, 1024, 1024, 81.25), (256, 2048, 1024, 156.8), (256, 4096, 1024, 292.33), (256, 256, 2048, 34.58),
    (256, 512, 2048, 69.02), (256, 1024, 2048, 136.68), (256, 2048, 2048, 266.77), (256, 4096, 2048, 464.42),
    (256, 256, 4096, 53.08), (256, 512, 4096, 104.69), (256, 1024, 4096, 205.86), (256, 2048, 4096, 394.11),
    (256, 4096, 4096, 651.39), (512, 256, 256, 13.57), (512, 512, 256, 23.49), (512, 1024, 256, 47.13),
    (512, 2048, 256, 90.93), (512, 4096, 256, 165.24), (512, 256, 512, 17.92), (512, 512, 512, 48.48),
    (512, 1024, 512, 89.48), (512, 2048, 512, 162.47), (512, 4096, 512, 291.7), (512, 256, 1024, 44.14),
    (4096, 2048, 512, 652.33), (4096, 4096, 512, 805.32), (4096, 256, 1024, 283.68), (4096, 512, 1024, 490.57),
    (4096, 1024, 1024, 715.65), (4096, 2048, 1024, 913.82), (4096, 4096, 1024, 1075.62), (4096, 256, 2048, 458.77),
    (4096, 512, 2048, 762.4), (4096, 1024, 2048, 990.31), (4096, 2048, 2048, 1170.01), (4096, 4096, 2048, 1277.79),
    (4096, 256, 4096, 645.13), (4096, 512, 4096, 991.45), (4096, 1024, 4096, 1204.93), (4096, 2048, 4096, 1343.54),
    (4096, 4096, 4096, 1416.87)]
XLA_SM100_B2 = [
    (4096, 1024, 4096, 1335.47), (4096, 2048, 4096, 1418.4), (4096, 4096, 4096, 1466.62), (256, 256, 256, 13.53),
    (256, 512, 256, 24.81), (256, 1024, 256, 46.34), (256, 2048, 256, 88.05), (256, 4096, 256, 164.84),
    (256, 256, 512, 22.13), (256, 512, 512, 45.58), (256, 1024, 512, 88.3), (256, 2048, 512, 162.44),
    (256, 4096, 512, 293.69), (256, 256, 1024, 40.52), (256, 512, 1024, 81.25), (256, 1024, 1024, 157.14),
    (256, 2048, 1024, 292.33), (256, 4096, 1024, 488.84), (256, 256, 2048, 68.46), (256, 512, 2048, 135.28),
    (256, 1024, 2048, 261.6), (256, 2048, 2048, 460.44), (256, 4096, 2048, 732.24)]
XLA_SM100_B4 = [
    (256, 256, 256, 24.75), (256, 512, 256, 46.33), (256, 1024, 256, 88.3), (256, 2048, 256, 162.05),
    (256, 4096, 256, 270.57), (256, 256, 512, 38.75), (256, 512, 512, 74.21), (256, 1024, 512, 160.16),
    (256, 2048, 512, 289.22), (256, 4096, 512, 454.21), (256, 256, 1024, 78.19), (256, 512, 1024, 150.45),
    (256, 1024, 1024, 283.12), (256, 2048, 1024, 489.73), (256, 4096, 1024, 686.43), (256, 256, 2048, 135.3),
    (256, 512, 2048, 260.11), (256, 1024, 2048, 462.02), (256, 2048, 2048, 719.67), (256, 4096, 2048, 961.06),
    (256, 256, 4096, 202.4), (256, 512, 4096, 390.1), (256, 1024, 4096, 644.5), (256, 2048, 4096, 993.34),
    (256, 4096, 4096, 1190.4), (512, 256, 256, 46.33), (512, 512, 256, 89.0), (512, 1024, 256, 162.1),
    (512, 2048, 256, 272.21), (512, 4096, 256, 404.88), (512, 256, 512, 85.38), (512, 512, 512, 165.29),
    (512, 1024, 512, 289.18), (512, 2048, 512, 464.32)]


def _xla_errors(rows: list[tuple], sms: int, rate_entry: tuple[int, int, int, int], hbm_Bps: float
                ) -> tuple[float, float, float, float]:
    """Mean |error| of four models of the table's times (see the tests below): the roofline without and
    with the SMs' tile waves, the catalogue's sum of tensor work and operand traffic without and with."""
    from supercluster.hardware.kernels import GemmGrid

    b, m, n, k, tflops = (np.array(c, dtype=float) for c in zip(*rows, strict=True))
    flops = 2 * b * m * n * k
    t = flops / (tflops * 1e12)
    memory = b * 2 * (m * k + k * n + m * n) / (hbm_Bps * 0.85)
    b0, m0, n0, k0 = rate_entry
    floor, big = float(t.min()), int(np.argmax((b == b0) & (m == m0) & (n == n0) & (k == k0)))
    grid = GemmGrid(sms, tuple((int(x), int(y)) for x, y in _toml_gemm()["tiles"]))
    tiling = grid.efficiency(m, n, b) / grid.efficiency(float(m0), float(n0), float(b0))

    def error(pred: np.ndarray) -> float:
        return float(np.mean(abs(t / pred - 1)))

    roof = flops[big] / (t[big] - floor)
    summed = flops[big] / (t[big] - memory[big] - floor)
    return (error(np.maximum(flops / roof, memory) + floor), error(np.maximum(flops / roof / tiling, memory) + floor),
            error(flops / summed + memory + floor), error(flops / summed / tiling + memory + floor))


def test_tile_waves_follow_xlas_measured_h100_gemm_table():
    """Shape trends of standalone cuBLAS GEMMs on H100: at the table's own rate (its 4096^3 x 4 entry)
    and its smallest GEMM's time as a floor, the roofline misses the 146 shapes by 7.8 % on average and
    by 6.1 % with the SMs' tile waves (a batch's matrices sharing them); the catalogue's sum of tensor
    work and operand traffic (set on TE's and DeepGEMM's kernels, tests above) is 17.6 % and 18.2 %
    off here, too slow: these standalone kernels hide most of their operand traffic."""
    rows = [(1, *r) for r in XLA_SM90_B1] + [(2, *r) for r in XLA_SM90_B2] + [(4, *r) for r in XLA_SM90_B4]
    roof, roof_tiled, summed, summed_tiled = _xla_errors(rows, 132, (4, 4096, 4096, 4096), 3.35e12)
    assert roof == pytest.approx(0.078, abs=0.002) and roof_tiled == pytest.approx(0.061, abs=0.002)
    assert summed == pytest.approx(0.176, abs=0.002) and summed_tiled == pytest.approx(0.182, abs=0.002)


def test_tile_waves_follow_xlas_measured_b200_gemm_table():
    """The same on B200's 148 SMs (110 shapes, rate at the 4096^3 x 2 entry): the roofline 16.8 %
    off on average, 13.0 % with the tile waves."""
    rows = [(1, *r) for r in XLA_SM100_B1] + [(2, *r) for r in XLA_SM100_B2] + [(4, *r) for r in XLA_SM100_B4]
    roof, roof_tiled, _, _ = _xla_errors(rows, 148, (2, 4096, 4096, 4096), 8e12)
    assert roof == pytest.approx(0.168, abs=0.002) and roof_tiled == pytest.approx(0.130, abs=0.002)


def _toml_gemm() -> dict:
    from supercluster._toml import load_package_toml

    return dict(load_package_toml("kernels.toml")["gemm"])


def test_the_step_reports_what_its_gemm_shapes_lose_to_the_tile_waves():
    """StepBreakdown.gemm_tiling_delta_s: the part of the gemm_inefficiency line the tile waves add, forward and
    backward over the step's layers: positive for a small model sliced over TP 8, a share of that line,
    exactly what the line loses against the same GPU without an SM count; estimate prints it."""
    import dataclasses

    from typer.testing import CliRunner

    import supercluster as sc
    from supercluster.cli.app import app
    from supercluster.hardware.specs import get_gpu

    layout = sc.Layout(tp=8, micro_batch=1, global_batch=64, seq_len=2048)
    step = sc.estimate("llama3-8b", gpu="h100-sxm", num_gpus=8, layout=layout)
    assert 0 < step.gemm_tiling_delta_s < step.ledger["gemm_inefficiency"]
    plain = sc.estimate("llama3-8b", gpu=dataclasses.replace(get_gpu("h100-sxm"), sm_count=0), num_gpus=8,
                        layout=layout)
    assert plain.gemm_tiling_delta_s == 0.0
    gemm = step.ledger["gemm_inefficiency"] - plain.ledger["gemm_inefficiency"]
    assert gemm == pytest.approx(step.gemm_tiling_delta_s, rel=1e-9)
    out = CliRunner().invoke(app, ["estimate", "--model", "llama3-8b", "--gpus", "8", "--tp", "8", "--pp", "1",
                                   "--micro-batch", "1", "--global-batch", "64", "--seq-len", "2048"])
    assert out.exit_code == 0 and "GEMM shapes:" in out.output


def test_transformer_engines_experts_share_the_waves_four_at_a_time(h100):
    """A GEMM an expert (Transformer Engine's multi-stream cuBLAS backend: 4 compute streams; DeepSpeed's
    expert loop: 1) shares the SMs' tile waves only with the experts running beside it, where a grouped
    kernel schedules every local expert's tiles as one grid: Qwen3-30B-A3B's 16 local experts at EP 8,
    512 tokens a GPU (256 rows an expert, a 256 x 1536 FC1 output: 24 tiles of 128 x 128 on 132 SMs)."""
    from dataclasses import replace

    from supercluster.hardware.kernels import gemm_grid
    from supercluster.models.catalog import model_catalog
    from supercluster.parallelism.framework import get_framework
    from supercluster.perf.gemm import GemmCost, routed_expert_gemm_s

    m = model_catalog()["qwen3-30b-a3b"]
    one, ep, T = np.array([1.0]), np.array([8.0]), np.array([512.0])
    two = np.array([2.0])
    grouped = GemmCost(np.array([h100.gemm_tensor_flops_per_s("bf16")]), two, two, h100.hbm_bytes_per_s * 0.85,
                       grid=gemm_grid(132))
    local, rows = 16.0, 512.0 * m.top_k * 8 / m.num_experts
    assert rows == 256.0
    t = {s: float(routed_expert_gemm_s(m, T, one, ep, replace(grouped, expert_streams=s))[0]) for s in (0, 1, 4)}
    for s, together in ((0, local), (4, 4.0), (1, 1.0)):
        by_hand = local * (grouped.seconds(rows, float(m.expert_width), 2 * m.moe_ffn_dim, together)
                           + grouped.seconds(rows, float(m.moe_ffn_dim), float(m.expert_width), together))
        assert t[s] == pytest.approx(float(by_hand[0]), rel=1e-12)
    assert t[1] > t[4] > t[0]
    assert get_framework("nemo-megatron").moe_expert_streams == 4 == get_framework("megatron").moe_expert_streams
    assert get_framework("deepspeed").moe_expert_streams == 1
    assert get_framework("torchtitan").moe_expert_streams == 0  # (torch._grouped_mm: one grid)


@pytest.mark.parametrize("bad", [-1, 2.5, "4", True])
def test_a_bad_expert_stream_count_is_refused_by_name(monkeypatch, bad):
    from supercluster.parallelism import framework as fwmod

    table = {k: dict(v) for k, v in fwmod.load_package_toml("frameworks.toml").items()}
    table["nemo-megatron"]["moe_expert_streams"] = bad
    monkeypatch.setattr(fwmod, "load_package_toml", lambda name: table)
    fwmod.framework_catalog.cache_clear()
    try:
        with pytest.raises(InputError, match="moe_expert_streams"):
            fwmod.framework_catalog()
    finally:
        monkeypatch.undo()
        fwmod.framework_catalog.cache_clear()
