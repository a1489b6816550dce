"""Fabric sizing, reference designs, the closed form against max-min fair flows, and the CLI."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.formats.load import load_model
from supercluster.hardware.specs import get_gpu, get_system
from supercluster.job import default_network
from supercluster.network.fabric import FabricNetwork, build_fabric, get_switch
from supercluster.network.flows import flow_slowdown
from supercluster.parallelism.layout import Layout

runner = CliRunner()


@pytest.fixture
def dgx_h100():
    g = get_gpu("h100-sxm")
    return g, get_system(g.system)


# NV-SUPERPOD-H100 (network.csv): scalable units of 32 nodes (256 ports incl. UFM) on QM9700.
@pytest.mark.parametrize("su,leaf,spine,core", [(1, 8, 4, 0), (2, 16, 8, 0), (4, 32, 16, 0), (8, 64, 32, 0),
                                                (16, 128, 128, 64), (32, 256, 256, 128), (64, 512, 512, 256)])
def test_superpod_switch_counts(dgx_h100, su, leaf, spine, core):
    g, s = dgx_h100
    f = build_fabric(256 * su, g, s, switch="quantum-2")
    counts = [t.switches for t in f.tiers] + [0] * (3 - len(f.tiers))
    assert counts == [leaf, spine, core]


def test_superpod_three_su_differs_as_explained(dgx_h100):
    # NVIDIA lists 16 spines for 3 SU (760 GPUs): it cables for 4 SU. The minimum is 12.
    g, s = dgx_h100
    assert [t.switches for t in build_fabric(768, g, s, switch="quantum-2").tiers] == [24, 12]


def test_infeasible_request_names_the_largest_reachable(dgx_h100):
    g, s = dgx_h100
    with pytest.raises(InputError, match="largest reachable is 2,048"):
        build_fabric(4096, g, s, switch="quantum-2", tiers=2)
    with pytest.raises(InputError, match="oversubscription"):
        build_fabric(64, g, s, oversubscription=(0.5,))


def test_oversubscription_and_planes_change_the_right_things(dgx_h100):
    g, s = dgx_h100
    full = build_fabric(16384, g, s)
    thin = build_fabric(16384, g, s, oversubscription=(1.0, 4.0))
    assert thin.bisection_bytes_per_s == pytest.approx(full.bisection_bytes_per_s / 4)  # the cut crosses tier 2
    thin1 = build_fabric(16384, g, s, oversubscription=(2.0,))
    assert thin1.bisection_bytes_per_s == pytest.approx(full.bisection_bytes_per_s / 2)
    assert thin1.total_switches < full.total_switches
    two = build_fabric(16384, g, s, switch="spectrum-4", planes=2)
    assert two.link_gbit == 200 and two.planes == 2


def test_a_ratio_on_the_top_tier_is_refused_and_more_tiers_carry_it(dgx_h100):
    g, s = dgx_h100
    three = build_fabric(16384, g, s)
    assert len(three.tiers) == 3
    with pytest.raises(InputError, match=r"tier 3 is the top .* give 1,2"):
        build_fabric(16384, g, s, tiers=3, oversubscription=(1.0, 1.0, 2.0))
    with pytest.raises(InputError, match="single tier takes no oversubscription"):
        build_fabric(32, g, s, tiers=1, oversubscription=(2.0,))
    four = build_fabric(16384, g, s, oversubscription=(1.0, 1.0, 2.0))  # no --tiers: enough tiers for the ratio
    assert [t.oversubscription for t in four.tiers] == [1.0, 1.0, 2.0, 1.0]
    assert build_fabric(16384, g, s, oversubscription=(1.0, 1.0, 1.0, 1.0)).tiers == three.tiers  # 1s change nothing
    r = runner.invoke(app, ["fabric", "--gpus", "16384", "--tiers", "3", "--oversubscription", "1,1,2"])
    assert isinstance(r.exception, InputError) and r.exception.field == "oversubscription"  # main() prints it, exit 2


def test_million_gpus_fabric_json():
    r = runner.invoke(app, ["fabric", "--gpus", "1048576", "--gpu", "gb200", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    for k in ("tiers", "total_switches", "bisection_bytes_per_s", "max_hops", "power_w", "capex_usd"):
        assert k in d
    assert all("switches" in t and "links" in t for t in d["tiers"])
    assert sum(t["switches"] for t in d["tiers"]) == d["total_switches"]
    assert d["power_w"] > 1.0e9  # over a gigawatt
    r = runner.invoke(app, ["fabric", "--gpus", "1048576", "--gpu", "gb300", "--compare", "--json"])
    assert r.exit_code == 0 and len(json.loads(r.output)) >= 4


def _small_fabric(n: int, over: float):
    g = get_gpu("h100-sxm")
    sys1 = dataclasses.replace(get_system(g.system), gpus_per_node=1, scaleup_domain=1)
    sw = dataclasses.replace(get_switch("quantum-2"), capacity_bytes_per_s=16 * 400e9 / 8)  # 16 ports
    return build_fabric(n, g, sys1, switch=sw, oversubscription=(over,))


@pytest.mark.parametrize("n,over,pattern,group,stride", [
    (96, 3.0, "ring", 8, 12), (96, 3.0, "ring", 24, 4), (96, 3.0, "uniform", 16, 1), (96, 3.0, "uniform", 96, 1),
    (192, 3.0, "uniform", 4, 16), (192, 3.0, "ring", 4, 16), (64, 1.0, "uniform", 64, 1), (128, 1.0, "ring", 16, 8),
])
def test_closed_form_contention_matches_max_min_fair_flows(n, over, pattern, group, stride):
    f = _small_fabric(n, over)
    explicit = flow_slowdown(f, group, stride, pattern).slowdown
    closed = float(f.contention(pattern, np.array([group]), np.array([stride]))[0])
    assert closed == pytest.approx(explicit, rel=0.10)


def _three_tier(n: int, over: tuple[float, float]):
    g = get_gpu("h100-sxm")
    sys1 = dataclasses.replace(get_system(g.system), gpus_per_node=1, scaleup_domain=1)
    sw = dataclasses.replace(get_switch("quantum-2"), capacity_bytes_per_s=16 * 400e9 / 8)  # 16 ports
    return build_fabric(n, g, sys1, switch=sw, oversubscription=over, tiers=3)


# (GPUs, leaf and spine down:up, pattern, group, stride): boundaries at the leaf, the pod or both
@pytest.mark.parametrize("n,over,pattern,group,stride,slowdown", [
    (256, (1.0, 1.0), "uniform", 16, 16, 1.0), (384, (1.0, 3.0), "ring", 8, 48, 1.5),
    (384, (1.0, 3.0), "uniform", 8, 48, 2.571), (384, (3.0, 1.0), "ring", 16, 24, 3.0),
    (288, (3.0, 3.0), "ring", 2, 144, 9.0), (288, (3.0, 3.0), "uniform", 6, 48, 5.4),
])
def test_closed_form_contention_matches_max_min_fair_flows_on_three_tiers(n, over, pattern, group, stride, slowdown):
    f = _three_tier(n, over)
    assert len(f.tiers) == 3
    explicit = flow_slowdown(f, group, stride, pattern).slowdown
    closed = float(f.contention(pattern, np.array([group]), np.array([stride]))[0])
    assert explicit == pytest.approx(slowdown, rel=1e-3) and closed == pytest.approx(explicit, rel=1e-9)


def test_the_explicit_graph_needs_whole_leaves():
    with pytest.raises(InputError, match="whole leaves"):
        flow_slowdown(_small_fabric(128, 3.0), 2, 8, "ring")  # 128 GPUs on leaves of 12


def test_fabric_network_slows_only_groups_that_cross_thin_tiers(dgx_h100):
    g, s = dgx_h100
    fat = FabricNetwork.for_fabric(build_fabric(16384, g, s), g, s)
    thin = FabricNetwork.for_fabric(build_fabric(16384, g, s, oversubscription=(4.0,)), g, s)
    size = 1e9
    inside = (8, 1)  # a TP group in one node
    across = (2048, 8)  # a DP group over every node
    assert thin.collective_time_s("all_reduce", size, *inside) == fat.collective_time_s("all_reduce", size, *inside)
    assert thin.collective_time_s("all_to_all", size, *across) > fat.collective_time_s("all_to_all", size, *across)
    # the all-to-all's paths (an EP group of 256 over 32 nodes): the thin tier slows its scale-out
    # share only, and the call is the two plus the same latency on either fabric
    ep = (256, 1)
    (up_f, out_f), (up_t, out_t) = (n.all_to_all_paths_s(size, *ep) for n in (fat, thin))
    assert float(up_t) == float(up_f) > 0 and float(out_t) > float(out_f) > 0
    lat = [float(n.collective_time_s("all_to_all", size, *ep)) - float(u + o)
           for n, u, o in ((fat, up_f, out_f), (thin, up_t, out_t))]
    assert lat[0] == pytest.approx(lat[1]) and 0 < lat[0] < 1e-3


def test_default_network_is_the_sized_fabric(dgx_h100):
    g, s = dgx_h100
    assert isinstance(default_network(g, num_gpus=1024), FabricNetwork)
    with pytest.raises(InputError, match="sharp"):
        default_network(get_gpu("b200"), num_gpus=64, switch="tomahawk-5", sharp=True)


# collectives.md section 4: (gpu, kind, GPUs per domain, nodes, algorithm, measured busbw GB/s)
MEASURED_BUSBW = [
    ("a100-80gb", "all_reduce", 8, 1, "ring", 234.89), ("h100-sxm", "all_reduce", 8, 1, "ring", 370.0),
    ("h200", "all_reduce", 8, 1, "ring", 367.6), ("h200", "all_gather", 8, 1, "ring", 361.4),
    ("h200", "reduce_scatter", 8, 1, "ring", 362.9), ("b200", "all_reduce", 8, 1, "ring", 678.0),
    ("gb200", "all_reduce", 72, 1, "ring", 680.0), ("mi300x", "all_reduce", 8, 1, "ring", 312.9),
    ("h100-sxm", "all_reduce", 8, 1, "nvls", 480.0), ("h200", "all_reduce", 8, 1, "nvls", 482.3),
    ("b200", "all_reduce", 8, 1, "nvls", 845.7), ("gb200", "all_reduce", 72, 1, "nvls", 850.0),
    ("b200", "all_reduce", 8, 4, "ring", 381.8),
    # the H200 NVLS ramp by GPU count (STAS-NET): 5, 6, 7 GPUs
    ("h200", "all_reduce", 5, 1, "nvls", 414.2), ("h200", "all_reduce", 6, 1, "nvls", 435.6),
    ("h200", "all_reduce", 7, 1, "nvls", 460.0),
    # an independent H100 ramp (github.com/NVIDIA/nccl issue #1455, 2-4 GiB): "about 420, 440, 460, 480"
    ("h100-sxm", "all_reduce", 5, 1, "nvls", 420.0), ("h100-sxm", "all_reduce", 6, 1, "nvls", 440.0),
    ("h100-sxm", "all_reduce", 7, 1, "nvls", 460.0),
    # 8 x H800 (NVLink 200 GB/s per direction): NVLS busbw 215 GB/s (github.com/NVIDIA/nccl issue #1374)
    ("h800", "all_reduce", 8, 1, "nvls", 215.0),
    # 8 GB200 of an NVL72 rack (2 compute trays, MNNVL): 811 GB/s busbw, above any ring on 900 GB/s links
    # (lixueduan.com, "GB200 MNNVL nccl-test", 2 nodes x 4 GPUs)
    ("gb200", "all_reduce", 8, 1, "nvls", 811.0),
]
# Predicted +22 %: measured NVLS busbw is the same on 72 GPUs (850; a full-rack nccl-tests run in
# github.com/coreweave/nccl-tests PR #43 gives 835-847 at 4-8 GiB) as on 8 B200 (846) and on 8 GPUs of an
# NVL72 rack (811, predicted within 3 %), where the in-network traffic count says it should grow by
# 2 (n-1)/(n+1): 1.56 -> 1.95.
KNOWN_BUSBW_MISSES = {("gb200", "nvls", 72)}


@pytest.mark.parametrize("gpu,kind,n,nodes,alg,measured", MEASURED_BUSBW)
def test_predicted_bus_bandwidth_against_nccl_tests(gpu, kind, n, nodes, alg, measured):
    from supercluster.network.fabric import predicted_busbw

    g = get_gpu(gpu)
    pred = predicted_busbw(g, get_system(g.system), kind, n, nodes, alg) / 1e9
    err = abs(pred / measured - 1)
    if (gpu, alg, n) in KNOWN_BUSBW_MISSES:
        assert 0.15 < err < 0.30
    else:
        assert err <= 0.15, (pred, measured)
    if alg == "nvls" and (gpu, alg, n) not in KNOWN_BUSBW_MISSES:
        assert err <= 0.03, (pred, measured)  # the traffic count reproduces the 5-8 GPU ramp


# collectives.md section 4: 8 x H200 all-reduce busbw by message size (STAS-NET). NCCL's protocols (LL for
# small messages, LL128 and Simple, network/nccl.py PROTOCOLS) and the per-call floor (set from the
# 32 KiB point) meet the table within 3 % from 16 MiB up; at 1 MiB the model is 12 % pessimistic (LL at
# half the bus bandwidth, capped at Hopper's 141 GB/s, NCCL's llMaxBws), a known limit kept visible here.
# (The 32 KiB point sets the floor, so it is met by construction.)
H200_BY_SIZE = [(32 * 2**10, 1.44, -0.01, 0.01), (2**20, 39.9, -0.15, -0.10), (16 * 2**20, 219.9, -0.03, 0.03),
                (128 * 2**20, 401.9, -0.03, 0.05), (2**30, 463.6, -0.03, 0.03), (16 * 2**30, 482.3, -0.03, 0.03)]


def test_h200_all_reduce_by_message_size_follows_nccls_protocols():
    g = get_gpu("h200")
    net = FabricNetwork.for_fabric(build_fabric(8, g, get_system(g.system)), g, get_system(g.system))
    for size, measured, lo, hi in H200_BY_SIZE:
        busbw = 2 * 7 / 8 * size / float(net.collective_time_s("all_reduce", size, 8, 1)) / 1e9
        assert lo <= busbw / measured - 1 <= hi, (size, busbw, measured)


def test_a_mid_size_all_reduce_takes_the_protocol_nccl_tuner_would():
    """LL (half the bus bandwidth, 0.6 us a step) for small messages, Simple for large ones:
    each time is the fastest protocol's, never above any one of them."""
    from supercluster.network.nccl import COLLECTIVE_CALL_FLOOR_S, PROTOCOLS, ring_collective_s

    g, n, bu = np.float64(8.0), 8.0, 360e9
    for size in (4e3, 1e6, 16e6, 1e9):
        t = float(ring_collective_s("all_reduce", np.float64(size), g, n, 1.0, bu, 37e9, 3.4e-6, 16e-6, 8.4e-6))
        each = [2 * 7 / 8 * size / (bu * p.bw_share) + p.base_s + 2 * 7 * p.nvlink_hop_s + COLLECTIVE_CALL_FLOOR_S
                for p in PROTOCOLS]
        assert t == pytest.approx(min(each), rel=1e-9)
    small = [2 * 7 / 8 * 4e3 / (bu * p.bw_share) + p.base_s + 14 * p.nvlink_hop_s for p in PROTOCOLS]
    large = [2 * 7 / 8 * 1e9 / (bu * p.bw_share) + p.base_s + 14 * p.nvlink_hop_s for p in PROTOCOLS]
    assert int(np.argmin(small)) == 0 and int(np.argmin(large)) == 2  # LL small, Simple large


def test_nvls_is_taken_inside_a_hopper_node_for_large_all_reduces(dgx_h100):
    g, s = dgx_h100
    net = FabricNetwork.for_fabric(build_fabric(8, g, s), g, s)
    t = float(net.collective_time_s("all_reduce", 16 * 2**30, 8, 1))
    assert 2 * 7 / 8 * 16 * 2**30 / t / 1e9 == pytest.approx(476.0, rel=0.02)  # busbw of the NVLS path
    a100 = get_gpu("a100-80gb")
    net_a = FabricNetwork.for_fabric(build_fabric(8, a100, get_system(a100.system)), a100, get_system(a100.system))
    t_a = float(net_a.collective_time_s("all_reduce", 16 * 2**30, 8, 1))
    assert 2 * 7 / 8 * 16 * 2**30 / t_a / 1e9 == pytest.approx(240.0, rel=0.02)  # Ampere: ring only


def test_rank_order_moves_traffic_between_tiers():
    from supercluster.job import estimate
    from supercluster.parallelism.layout import Layout

    lay = Layout(tp=8, pp=8, dp=16, global_batch=256, seq_len=4096, recompute="full", sequence_parallel=True)
    g = get_gpu("h100-sxm")
    net = default_network(g, num_gpus=1024, oversubscription=(4.0,))
    inner_dp = estimate("llama3-70b", gpu=g, num_gpus=1024, layout=lay, network=net, rank_order="tp-cp-dp-pp")
    outer_dp = estimate("llama3-70b", gpu=g, num_gpus=1024, layout=lay, network=net, rank_order="tp-pp-cp-dp")
    # PP neighbours sit in adjacent nodes (one leaf) in the second order; DP groups spread over every leaf
    assert outer_dp.ledger["exposed_pp_comm"] <= inner_dp.ledger["exposed_pp_comm"]
    assert outer_dp.step_time_s != inner_dp.step_time_s
    with pytest.raises(InputError, match="adjacent"):
        estimate("llama3-70b", gpu=g, num_gpus=1024, layout=lay, rank_order="tp-cp-pp-dp")
    with pytest.raises(InputError, match="rank_order"):
        estimate("llama3-70b", gpu=g, num_gpus=1024, layout=lay, rank_order="tp-dp")


def test_placement_says_where_each_groups_traffic_goes_as_the_cost_model_prices_it(dgx_h100):
    from supercluster.job import placement

    g, s = dgx_h100
    lay = Layout(tp=8, pp=16, dp=128, vpp=4, global_batch=2048, seq_len=8192)
    m = load_model("llama3-405b")
    full = {r["group"]: r for r in placement(m, lay, default_network(g, num_gpus=16384))}
    assert list(full) == ["tp", "dp", "pp"]  # groups of one and the experts' groups (dense) left out
    assert [(full[k]["tier_name"], full[k]["span_gpus"]) for k in full] == \
        [("scale-up domain", 8), ("spine", 1024), ("core", 16384)]
    assert full["dp"]["per_domain"] == 1 and full["dp"]["domains"] == 128 and full["pp"]["concurrent_groups"] == 1024
    assert all(r["slowdown"] == 1.0 for r in full.values())
    thin_net = default_network(g, num_gpus=16384, oversubscription=(4.0,))
    thin = {r["group"]: r for r in placement(m, lay, thin_net)}
    assert thin["pp"]["slowdown"] == 4.0 and thin["dp"]["slowdown"] == 1.0  # one ring flow per group leaves a leaf
    # the slowdown is what the cost model charges: a large pipeline send takes 4x as long on the 4:1 leaves
    big = 2.0**33
    t = [float(n.collective_time_s("p2p", big, 16, 1024)) for n in (default_network(g, num_gpus=16384), thin_net)]
    assert t[1] / t[0] == pytest.approx(4.0, rel=0.01)
    moe = {r["group"]: r for r in placement(load_model("deepseek-v3"), Layout(
        tp=2, pp=8, dp=64, ep=32, global_batch=2048, seq_len=4096), default_network(g, num_gpus=1024))}
    assert moe["ep"]["pattern"] == "all-to-all" and moe["edp"]["members"] == 2 and moe["ep"]["tier_name"] == "leaf"


def test_estimate_placement_option_and_json():
    r = runner.invoke(app, ["estimate", "--placement"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "Where the traffic goes" in r.output and "core" in r.output
    d = json.loads(runner.invoke(app, ["estimate", "--json"]).output)
    assert [p["group"] for p in d["placement"]] == ["tp", "dp", "pp"]
    one = runner.invoke(app, ["estimate", "--model", "llama3-8b", "--gpus", "1", "--tp", "1", "--pp", "1", "--vpp", "1",
                              "--global-batch", "2", "--placement", "--no-evidence"])
    assert one.exit_code == 0 and "every parallel group has one member" in one.output


def test_a_ring_across_nodes_pays_the_hosts_network_post_overhead_on_every_step():
    """NCCL's ring tuner (src/tuning/ring.cc): once a ring spans nodes, each of its steps inside a node
    costs at least the host's network post overhead (1 us from an Intel host, 2 us from an AMD one;
    three times it for Simple). A zero-byte all-gather takes LL, whose NVLink step is 0.6 us: over
    2 nodes of 8 the AMD host's 14 intra-node steps take 1 us more each; inside one node, no floor."""
    from supercluster.network.nccl import NET_OVERHEAD_S, NcclTuning, ring_collective_s

    def t(g: float, n: float, k: float, vendor: str) -> float:
        return float(ring_collective_s("all_gather", np.float64(0.0), np.float64(g), n, k, 360e9, 37e9, 3.4e-6,
                                       16e-6, 8.4e-6, tuning=NcclTuning(net_overhead_s=NET_OVERHEAD_S[vendor])))

    assert t(16, 8, 2, "amd") - t(16, 8, 2, "intel") == pytest.approx(14 * 1e-6, rel=1e-9)
    assert t(8, 8, 1, "amd") == t(8, 8, 1, "intel")


def test_ll_bandwidth_is_capped_by_the_gpu_generation():
    """LL reaches half the ring's bus bandwidth, at most NCCL's llMaxBws for the GPU generation and node
    count: a 1 MiB all-reduce on 8 H200 is priced at Hopper's 141 GB/s where half the bus would be more."""
    from supercluster.network.nccl import COLLECTIVE_CALL_FLOOR_S, LL_MAX_BUSBW, NcclTuning, ring_collective_s

    args = ("all_reduce", np.float64(2**20), np.float64(8.0), 8.0, 1.0, 360e9, 37e9, 3.4e-6, 16e-6, 8.4e-6)
    capped = float(ring_collective_s(*args, tuning=NcclTuning(ll_max_busbw=LL_MAX_BUSBW["hopper"])))
    latency = 6.6e-6 + 14 * 0.6e-6 + COLLECTIVE_CALL_FLOOR_S
    assert capped == pytest.approx(2 * 7 / 8 * 2**20 / 141e9 + latency, rel=1e-9)
    assert float(ring_collective_s(*args)) == pytest.approx(2 * 7 / 8 * 2**20 / (0.5 * 360e9) + latency, rel=1e-9)


def test_systems_name_their_host_cpu_its_gpus_take_it_and_a_bad_one_is_refused():
    from supercluster.errors import InputError
    from supercluster.hardware.specs import system_from_table

    assert get_system("dgx-a100").host_cpu == get_gpu("a100-80gb").host_cpu == "amd"
    assert get_system("dgx-h100").host_cpu == get_gpu("h100-sxm").host_cpu == "intel"
    assert get_system("gb200-nvl72").host_cpu == get_gpu("gb200").host_cpu == "grace"
    table = {"name": "x", "gpu": "h100-sxm", "gpus_per_node": 8, "scaleup_domain": 8, "nic_gbit_per_gpu": 400.0,
             "nic_busbw_frac": 0.74, "host_power_w": 4000.0, "sources": "x", "host_cpu": "via"}
    with pytest.raises(InputError, match="host_cpu.*allowed intel, amd, grace"):
        system_from_table("x", table)
    shown = CliRunner().invoke(app, ["catalog", "systems", "--json"])
    assert json.loads(shown.stdout)["dgx-a100"]["host_cpu"] == "amd"


def test_the_cli_reads_oversubscription_as_numbers_or_as_ratios():
    """--oversubscription takes each tier's down:up as a number ("2") or as network engineers write it
    ("2:1", "3:2"); a ratio with no uplinks or not a number is one error naming the option."""
    from supercluster.cli.app import _over

    assert _over("2:1,1:1") == (2.0, 1.0) == _over("2,1")
    assert _over("3:2") == (1.5,) and _over(None) is None
    for bad in ("1:0", "a:b", "2:1:1", "1e308:1e-308"):
        with pytest.raises(InputError, match="oversubscription"):
            _over(bad)


def test_power_and_capex_read_in_units_that_keep_their_digits():
    """A 64-GPU fabric's power reads in kW and its cost in $M, not as 0.1 MW and $0.00 B; a million
    GPUs' in GW and $B."""
    from typer.testing import CliRunner

    from supercluster.cli import app
    from supercluster.units import fmt_count, fmt_usd, fmt_watt_hours, fmt_watts

    assert (fmt_watts(975.0e3), fmt_watts(2.4e7), fmt_watts(1.554e9), fmt_watts(811.0)) == (
        "975.0 kW", "24.0 MW", "1.55 GW", "811 W")
    assert fmt_watt_hours(3.76e4) == "37.6 kWh"
    assert (fmt_count(2.123e7), fmt_count(4010.4), fmt_count(0.0243)) == ("21.23 M", "4,010", "0.0243")
    assert (fmt_usd(4.959e10), fmt_usd(2.3e6), fmt_usd(6.6e5), fmt_usd(12.0)) == (
        "$49.59 B", "$2.3 M", "$660.0 k", "$12")
    line = next(x for x in CliRunner().invoke(app, ["fabric", "--gpus", "64"]).output.splitlines() if "at PUE" in x)
    assert " kW at PUE" in line and " M (network $" in line and "0.0 MW" not in line, line
    table = CliRunner().invoke(app, ["fabric", "--gpus", "100000", "--compare"], env={"COLUMNS": "200"}).output
    assert " MW │" in table and " B │" in table and " PB/s │" in table and "2500.0" not in table
