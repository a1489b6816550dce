"""NCCL's tuner as network/nccl.py writes it: the tree beside the ring for all-reduces, the tree's mid-size
correction, the ring's plateau, and a one-rank-per-node ring's network steps (src/tuning/tree.cc, ring.cc,
cost_model.cc)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from supercluster.hardware.specs import get_gpu, get_system
from supercluster.network.nccl import (
    COLLECTIVE_CALL_FLOOR_S,
    PROTOCOLS,
    TREE_PROTOCOLS,
    NcclTuning,
    nccl_tuning,
    ring_collective_s,
    ring_plateau,
    tree_all_reduce_s,
    tree_correction,
)

BU, BO, AU, AO, BASE = 360e9, 37e9, 3.4e-6, 16e-6, 8.4e-6  # the Simple ring's bus, NIC and latencies


def _ar(size: float, g: float, n: float, k: float) -> float:
    return float(ring_collective_s("all_reduce", np.float64(size), np.float64(g), n, k, BU, BO, AU, AO, BASE))


def test_tree_correction_reads_nccls_table_by_log2_of_64_byte_units():
    assert [float(tree_correction(np.float64(64.0), p)) for p in (0, 1, 2)] == [1.0, 1.0, 0.9]
    # 256 KiB = 2^12 units of 64 B: the dip of every protocol
    assert [float(tree_correction(np.float64(2.0**18), p)) for p in (0, 1, 2)] == [0.4, 0.6, 0.5]
    assert float(tree_correction(np.float64(2.0**18 - 1), 0)) == 0.5  # just below: index 11
    assert float(tree_correction(np.float64(16.0), 2)) == 1.0  # below 64 B, no correction
    assert float(tree_correction(np.float64(2.0**40), 2)) == 1.0  # past the table


def test_a_small_all_reduce_over_many_nodes_takes_the_tree_at_its_own_latencies():
    """1 KiB over 128 nodes of 8: a ring would take 2 x 127 network steps, the tree 2 x 7; the time is
    tree.cc's LL latency, 6.8 us + 2 (7 x 0.6 us + 7 x 5.0 us), plus the bytes at LL's tree share and
    NCCL's correction at 1 KiB (0.9)."""
    g, n, k, size = 1024.0, 8.0, 128.0, 1024.0
    t = _ar(size, g, n, k)
    ll = TREE_PROTOCOLS[0]
    lat = ll.base_s + 2 * (7 * ll.nvlink_hop_s + 7 * ll.net_hop_s)
    bw = max(2 * 7 / 8 * size / BU, 2 * 127 / 128 * size / (8 * BO)) * g / (g - 1) / ll.bw_share / 0.9
    assert t == pytest.approx(lat + bw + COLLECTIVE_CALL_FLOOR_S, rel=1e-9)
    ring_ll = PROTOCOLS[0]
    ring_lat = ring_ll.base_s + 2 * ((g - k) * 1e-6 + (k - 1) * ring_ll.net_hop_s)  # (the Intel post floor)
    assert t < ring_lat  # the ring's latency alone is longer


def test_the_tree_never_beats_the_ring_where_the_bus_is_the_cost():
    """A 1 GiB all-reduce inside a node: the tree moves the data at 0.92 of the bus and half of it
    per rank (past the correction table), the ring at (g - 1)/g x 2 - so the ring sets the time."""
    s, g = np.float64(2.0**30), np.float64(8.0)
    bw = 2 * 7 / 8 * float(s) / BU
    tree = float(tree_all_reduce_s(s, g, 8.0, 1.0, np.float64(bw), AU, AO, BASE, None))
    assert tree == pytest.approx(bw * 8 / 7 / 0.92 + 8.4e-6 + 2 * 7 * 4.0e-6, rel=1e-9)
    assert _ar(float(s), 8.0, 8.0, 1.0) < tree


def test_the_ring_plateau_multiplies_a_multinode_simple_all_reduces_latency():
    """ring.cc: x1.4 across nodes once a rank sends 64 bytes a channel (64 channels), x1.9 on Volta;
    no plateau inside one node (before Blackwell) or below the threshold; all-gathers never."""
    g, k = np.float64(16.0), 2.0
    big = np.float64(64.0 * 64 * 16)
    assert float(ring_plateau("all_reduce", big, g, k, NcclTuning())) == pytest.approx(1.4)
    assert float(ring_plateau("all_reduce", big, g, k, NcclTuning(plateau=1.9))) == pytest.approx(1.9)
    assert float(ring_plateau("all_reduce", big - 1, g, k, NcclTuning())) == 1.0
    assert float(ring_plateau("all_reduce", big, g, 1.0, NcclTuning())) == 1.0
    assert float(ring_plateau("all_gather", big, g, k, NcclTuning())) == 1.0
    a100 = get_gpu("a100-80gb")
    assert nccl_tuning(a100, get_system("dgx-a100")).plateau == 1.4
    assert nccl_tuning(dataclasses.replace(a100, arch="volta"), get_system("dgx-a100")).plateau == 1.9


def test_blackwells_plateau_inside_one_nvlink_domain_grows_with_the_rings_steps():
    """ring.cc on compute capability 10 over NVLink: 1 + (1 - (0.1/0.4)^(steps - 1)) x 0.4 for an
    all-reduce, all-gather or reduce-scatter inside one domain, 0.1 less from 256 to 512 KiB per rank
    and channel."""
    bw = nccl_tuning(get_gpu("b200"), get_system("dgx-b200"))
    assert bw.nvlink_plateau and not nccl_tuning(get_gpu("h100-sxm"), get_system("dgx-h100")).nvlink_plateau
    s = np.float64(64.0 * 64 * 8)
    steps_ar, steps_ag = 14.0, 7.0
    assert float(ring_plateau("all_reduce", s, np.float64(8.0), 1.0, bw)) == pytest.approx(
        1 + (1 - 0.25 ** (steps_ar - 1)) * 0.4)
    assert float(ring_plateau("all_gather", s, np.float64(8.0), 1.0, bw)) == pytest.approx(
        1 + (1 - 0.25 ** (steps_ag - 1)) * 0.4)
    large = np.float64(512.0 * 1024 * 64 * 8)  # 512 KiB per rank and channel: 0.1 less
    assert float(ring_plateau("all_reduce", large, np.float64(8.0), 1.0, bw)) == pytest.approx(
        1 + (1 - 0.25 ** 13) * 0.3)
    assert float(ring_plateau("all_gather", s, np.float64(2.0), 1.0, bw)) == 1.0  # one step: no scale


def test_a_ring_with_one_rank_per_node_takes_the_trees_network_latency():
    """ring.cc: with one rank per node a ring's network steps take the tree's NET hwLat (LL 5.0 us
    instead of 2.7 us): a zero-byte all-gather's ring over 16 nodes, 15 such steps."""
    from supercluster.network.nccl import ring_s

    def t(n: float, k: float) -> float:
        return float(ring_s("all_gather", np.float64(0.0), np.float64(n * k), n, k, np.float64(0.0), AU, AO, BASE))

    ll = PROTOCOLS[0]
    assert t(1.0, 16.0) == pytest.approx(ll.base_s + 15 * TREE_PROTOCOLS[0].net_hop_s, rel=1e-9)
    assert t(2.0, 8.0) == pytest.approx(ll.base_s + 8 * 1e-6 + 7 * ll.net_hop_s, rel=1e-9)  # 2 a node: the ring's


def test_an_all_gather_with_one_rank_per_node_takes_pat_where_it_is_faster():
    """pat.cc: with one rank per node NCCL may run an all-gather or reduce-scatter on PAT (Simple only):
    8 us + floor(log2 k) x 14 us / 3.5 + 2.8 us a rank, at 0.75 of the bus. 1 MB over 128 nodes: PAT's
    0.39 ms of latency beats the ring's 127 network steps; with 8 ranks a node there is no PAT, and an
    all-reduce never takes it."""
    from supercluster.network.nccl import PAT, pat_s

    g, size = np.float64(128.0), 1e6
    one_per_node = float(ring_collective_s("reduce_scatter", np.float64(size), g, 1.0, 128.0, BU, BO, AU, AO, BASE))
    bw = 127 / 128 * size / BO * 128 / 127 / PAT.bw_share
    lat = PAT.base_s + 7 * PAT.net_hop_s / 3.5 + 128 * 2.8e-6
    assert one_per_node == pytest.approx(bw + lat + COLLECTIVE_CALL_FLOOR_S, rel=1e-9)
    assert np.isinf(pat_s(np.float64(128.0), 8.0, 16.0, np.float64(1e-3), AO, BASE))  # 8 ranks a node
    ll = PROTOCOLS[0]
    assert one_per_node < ll.base_s + 127 * TREE_PROTOCOLS[0].net_hop_s  # the LL ring's latency alone
