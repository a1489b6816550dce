from __future__ import annotations

import numpy as np
import pytest

from supercluster.errors import InputError
from supercluster.formats.load import load_model
from supercluster.hardware.specs import get_gpu, get_system, gpu_catalog
from supercluster.network.nccl import COLLECTIVE_CALL_FLOOR_S
from supercluster.network.twolevel import TwoLevelNetwork
from supercluster.parallelism.layout import Layout


def test_layout_from_string_and_gpu_count():
    lay = Layout.from_string("tp8-pp16-dp128", global_batch=2048, seq_len=8192)
    assert (lay.tp, lay.pp, lay.dp, lay.num_gpus, lay.num_microbatches) == (8, 16, 128, 16384, 16)
    with pytest.raises(InputError, match="gpus"):
        lay.check_gpus(8192)


@pytest.mark.parametrize("kwargs, field", [
    (dict(tp=0), "tp"), (dict(dp=-1), "dp"), (dict(dp=3, global_batch=8), "global_batch"),
    (dict(precision="int3"), "precision"), (dict(recompute="some"), "recompute"), (dict(zero_stage=4), "zero"),
    (dict(dp=2, ep=4, global_batch=4), "ep"), (dict(vpp=2), "vpp"),
])
def test_bad_layouts_name_the_field(kwargs, field):
    with pytest.raises(InputError) as e:
        Layout(**kwargs)
    assert e.value.field == field


def test_tp_must_divide_heads():
    with pytest.raises(InputError, match="64 attention heads"):
        Layout(tp=3).check_model(load_model("llama3-70b"))
    Layout(ep=1, dp=2, global_batch=2).check_model(load_model("llama3-8b"))
    with pytest.raises(InputError, match="dense"):
        Layout(ep=2, dp=2, global_batch=2).check_model(load_model("llama3-8b"))


def test_catalog_is_complete_and_sourced():
    required = {"a100-40gb", "a100-80gb", "h100-sxm", "h100-96gb-500w", "h800", "h200", "b200", "gb200", "gb300",
                "mi300x", "mi325x", "mi355x", "gaudi3"}
    cat = gpu_catalog()
    assert required <= set(cat)
    for g in cat.values():
        assert g.sources and g.peak("bf16") > 0 and 0 < g.gemm_frac["bf16"] <= 1
        get_system(g.system)
    assert get_gpu("h100-sxm").peak("fp8") == pytest.approx(1979e12)
    with pytest.raises(InputError, match="no fp8"):
        get_gpu("a100-80gb").peak("fp8")
    # the host CPU is its system's (systems.toml): a GPU table that names one is refused, naming the field
    from supercluster._toml import load_package_toml
    from supercluster.hardware.specs import gpu_from_table

    table = dict(load_package_toml("gpus.toml")["gb200"])
    assert gpu_from_table("gb200", table).host_cpu == "intel" and get_gpu("gb200").host_cpu == "grace"
    with pytest.raises(InputError, match=r"host_cpu"):
        gpu_from_table("gb200", {**table, "host_cpu": "grace"})


def test_single_domain_all_reduce_is_the_nccl_bus_bandwidth_formula():
    net = TwoLevelNetwork(domain_size=8, scaleup_busbw_bytes_per_s=370e9, scaleout_bytes_per_s=37e9)
    s = 1e9
    t = net.collective_time_s("all_reduce", s, 8, 1)
    bw_part = 2 * 7 / 8 * s / 370e9
    assert bw_part < t < bw_part + 1e-4
    # Ring bandwidth: all-reduce = reduce-scatter + all-gather (up to one call's latency and floor).
    rs = net.collective_time_s("reduce_scatter", s, 8, 1)
    ag = net.collective_time_s("all_gather", s, 8, 1)
    assert abs(float(rs + ag - t)) < 3e-5 + COLLECTIVE_CALL_FLOOR_S


def test_crossing_domains_uses_the_nic_and_matches_the_b200_check():
    # collectives.md section 5: 4 nodes x 8 B200, per-GPU NIC ~36.95 GB/s reproduces busbw 381.8 GB/s.
    net = TwoLevelNetwork(domain_size=8, scaleup_busbw_bytes_per_s=845.7e9, scaleout_bytes_per_s=36.95e9)
    s = 16 * 2**30
    t = float(net.collective_time_s("all_reduce", s, 32, 1))
    busbw = s / t * 2 * 31 / 32
    assert busbw == pytest.approx(381.8e9, rel=0.15)
    assert net.collective_time_s("all_reduce", s, 1, 1) == 0.0


def test_network_is_vectorized():
    net = TwoLevelNetwork(domain_size=8, scaleup_busbw_bytes_per_s=370e9, scaleout_bytes_per_s=37e9)
    sizes = np.logspace(3, 10, 50)
    t = net.collective_time_s("all_gather", sizes, 64, 1)
    assert t.shape == (50,) and np.all(np.diff(t) > 0)


def test_gaudi3_scales_out_on_three_ethernet_planes_of_its_200g_ports():
    # each Gaudi 3 card faces the scale-out network with 3 of its 24 on-die 200GbE ports: by default
    # its fabric is three planes of 200 Gb/s links on the system's Ethernet switch, the NIC's 600 Gb/s
    from supercluster.network.fabric import build_fabric

    g = get_gpu("gaudi3")
    sys_ = get_system(g.system)
    fab = build_fabric(4096, g, sys_)
    assert (fab.planes, fab.link_gbit, fab.switch.key) == (3, 200.0, "tomahawk-5")
    assert fab.nic_bytes_per_s == pytest.approx(600e9 / 8)
    # a system that names no ports keeps one plane at its NIC speed, its switch by that speed
    h = get_gpu("h100-sxm")
    assert build_fabric(4096, h, get_system(h.system)).planes == 1
    # and MI325X is MI300X's compute with its own memory: the same peak, more HBM, its own measured GEMM
    a, b = get_gpu("mi300x"), get_gpu("mi325x")
    assert a.peak("bf16") == b.peak("bf16") and b.hbm_bytes > a.hbm_bytes
    assert b.gemm_frac["bf16"] > a.gemm_frac["bf16"]
