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
