"""NCCL's own cost model for a ring or tree collective over n GPUs per scale-up domain and k domains.

NCCL picks, per call, the algorithm (Ring, Tree, ...) and wire protocol (LL, LL128, Simple) its tuner
prices fastest: ``time = latency + bytes / algbw``. The constants and formulas here are its tuner's as
``src/tuning/ring.cc``, ``tree.cc`` and ``cost_model.cc`` write them ([NCCL-TUNE-230], [NCCL-RING],
[NCCL-TREE]); the bandwidth each protocol derates is this project's hierarchical bus time (the
scale-up bus or the NICs, whichever is slower, :func:`ring_collective_s`). What the tuner reads from
the communicator and the model does not know: its channel count (taken as NCCL's ``MAXCHANNELS``,
which puts the per-channel thresholds at their largest messages and leaves the per-channel caps
unbound) and the graph's extra network latency (0; a fabric's switch hops are added instead).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hardware.specs import GpuSpec, SystemSpec

Array = np.ndarray | float

# NCCL 2.30.7 tuner constants, Simple protocol (collectives.md 3.1, [NCCL-TUNE-230]):
RING_BASE_LATENCY_S = 8.4e-6   # per call
NVLINK_HOP_LATENCY_S = 3.4e-6  # per ring step over NVLink
#: per message over the network, for point-to-point sends and all-to-alls: NCCL's network step
#: latency plus its network post overhead (below); a ring collective's network steps take the
#: tuner's latency alone (:data:`PROTOCOLS`)
NET_HOP_LATENCY_S = 14e-6 + 2e-6


@dataclass(frozen=True, slots=True)
class WireProtocol:
    """One of NCCL's wire protocols as one algorithm's tuner prices it ([NCCL-TUNE-230]): the per-call
    base latency, the per-step latencies over NVLink and the network, and the share of the bus
    bandwidth it reaches (ring: LL half, at most the GPU generation's ``llMaxBws``, :data:`LL_MAX_BUSBW`;
    LL128 0.92. tree: 0.92 of the bus for an all-reduce, LL a 3.8th of that, LL128 120/128 of it
    across nodes, 7/9 inside one)."""

    name: str
    base_s: float
    nvlink_hop_s: float
    net_hop_s: float
    bw_share: float


#: NCCL's three protocols on a ring; a ring collective (all-reduce, all-gather, reduce-scatter) takes
#: whichever is fastest for its size, as NCCL's tuner does.
PROTOCOLS = (
    WireProtocol("LL", 6.6e-6, 0.6e-6, 2.7e-6, 0.5),
    WireProtocol("LL128", 14.0e-6, 1.9e-6, 4.0e-6, 0.92),
    WireProtocol("Simple", RING_BASE_LATENCY_S, NVLINK_HOP_LATENCY_S, 14.0e-6, 1.0),
)
#: The same protocols on NCCL's (double binary) tree, which runs all-reduces only: base latency
#: (tuning.cc baseLat), hwLat over NVLink and over the network (tree.cc takes no network post
#: overhead), and the bus share tree.cc gives (LL128's across nodes; 7/9 instead of 120/128 inside one)
TREE_PROTOCOLS = (
    WireProtocol("LL", 6.8e-6, 0.6e-6, 5.0e-6, 0.92 / 3.8),
    WireProtocol("LL128", 14.0e-6, 1.25e-6, 8.5e-6, 0.92 * 120.0 / 128.0),
    WireProtocol("Simple", 8.4e-6, 4.0e-6, 14.0e-6, 0.92),
)
#: LL128's tree share inside one node (tree.cc: 7/9 of the bus's 0.92, against 120/128 across nodes)
TREE_LL128_ONE_NODE_SHARE = 0.92 * 7.0 / 9.0
#: NCCL's PAT (parallel aggregated trees, src/tuning/pat.cc) for an all-gather or reduce-scatter with one
#: rank per node, Simple protocol only: base latency 8 us, network hwLat 14 us taken log2(nodes) times over
#: 3.5, 2.8 us more per rank ("still a linear part"), and 0.75 of the bus bandwidth
PAT = WireProtocol("Simple", 8.0e-6, 0.0, 14.0e-6, 0.75)
PAT_LOG_DIVISOR = 3.5
PAT_RANK_LATENCY_S = 2.8e-6
#: NCCL's measured correction of the tree's bandwidth at mid sizes (cost_model.cc treeCorrectionFactor),
#: per protocol, by log2(bytes / 64) from 0 (64 B); tree.cc applies the first 23
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)
#: NCCL's cap on LL's bus bandwidth (tuner constants llMaxBws, bytes/s; [NCCL-RING]) by GPU generation,
#: for one node, two, and more; a generation without an entry is not capped
LL_MAX_BUSBW = {"volta": (39.0e9, 39.0e9, 20.4e9), "ampere": (87.7e9, 22.5e9, 19.0e9),
                "hopper": (141.0e9, 45.0e9, 35.0e9), "blackwell": (282.0e9, 90.0e9, 70.0e9)}
#: NCCL's network post overhead (getNetOverhead, [NCCL-RING]) by host CPU (systems.toml host_cpu): 1 us
#: from an Intel x86 host and from any non-x86 one (Grace), 2 us from an AMD x86 one. A ring spanning
#: nodes pays at least it on every step inside a node too, three times it for the Simple protocol
#: (src/tuning/ring.cc: intraLat = max(intraLat, netOverhead)).
NET_OVERHEAD_S = {"intel": 1.0e-6, "amd": 2.0e-6, "grace": 1.0e-6}
#: ring.cc's "plateau" of a Ring / Simple all-reduce across nodes: its latency x1.4 (x1.9 below compute
#: capability 8.0, Volta) once a rank sends 64 bytes or more per channel ([NCCL-RING])
RING_PLATEAU = {"volta": 1.9}
RING_PLATEAU_DEFAULT = 1.4
PLATEAU_MIN_BYTES_PER_CHANNEL = 64.0
#: NCCL's most channels a communicator opens (src/include/device.h MAXCHANNELS): the channel count the
#: per-channel thresholds are read at
MAX_CHANNELS = 64.0
#: What a ring collective costs beyond NCCL's own latency model, per call: the kernel launch and the
#: ranks' arrival. NCCL's tuner prices the smallest measured all-reduce (32 KiB on 8 H200: 1.44 GB/s
#: busbw, 39.8 us [STAS-NET], collectives.md section 4) at 15.4 us (LL: 6.6 us + 14 steps of 0.6 us, and
#: 57 kB at Hopper's 141 GB/s cap); the rest, 24.4 us, is this. With it the model meets the same table's
#: 16 MiB, 128 MiB and 1 GiB points within 3 %.
COLLECTIVE_CALL_FLOOR_S = 24.4e-6


@dataclass(frozen=True, slots=True)
class NcclTuning:
    """What NCCL's tuner reads from the GPU and its host: LL's bus bandwidth cap for one node, two and
    more (:data:`LL_MAX_BUSBW`; None: uncapped), the host's network post overhead
    (:data:`NET_OVERHEAD_S`), the multi-node Ring / Simple all-reduce's latency plateau
    (:data:`RING_PLATEAU`), and whether the same plateau applies inside one NVLink domain (Blackwell:
    all-reduce, all-gather and reduce-scatter, scaled by the ring's steps and the bytes per channel)."""

    ll_max_busbw: tuple[float, float, float] | None = None
    net_overhead_s: float = NET_OVERHEAD_S["intel"]
    plateau: float = RING_PLATEAU_DEFAULT
    nvlink_plateau: bool = False


#: an Intel host's tuning with no LL cap (an uncatalogued GPU)
DEFAULT_TUNING = NcclTuning()


def nccl_tuning(gpu: GpuSpec, system: SystemSpec) -> NcclTuning:
    """The :class:`NcclTuning` NCCL's tuner takes for ``gpu`` in ``system`` (the GPU generation's LL cap
    and plateau, the system's ``host_cpu``)."""
    return NcclTuning(ll_max_busbw=LL_MAX_BUSBW.get(gpu.arch), net_overhead_s=NET_OVERHEAD_S[system.host_cpu],
                      plateau=RING_PLATEAU.get(gpu.arch, RING_PLATEAU_DEFAULT), nvlink_plateau=gpu.arch == "blackwell")


def ring_plateau(kind: str, s: np.ndarray, g: np.ndarray, k: Array, tuning: NcclTuning) -> np.ndarray:
    """ring.cc's factor on a Ring / Simple collective's latency: across nodes an all-reduce's
    ``tuning.plateau``; inside one Blackwell NVLink domain an all-reduce's, all-gather's or
    reduce-scatter's, reached over the ring's steps (each step keeps 0.1 / (plateau - 1) of the
    distance left) and 0.1 lower from 256 to 512 KiB per rank and channel; 1 below 64 bytes per rank
    and channel, or elsewhere."""
    per_channel = s / (MAX_CHANNELS * np.maximum(g, 1.0))
    on = per_channel >= PLATEAU_MIN_BYTES_PER_CHANNEL
    delta = tuning.plateau - 1.0
    multinode = np.asarray(k) > 1
    across = np.where(multinode & (kind == "all_reduce"), delta, 0.0)
    if tuning.nvlink_plateau and kind in ("all_reduce", "all_gather", "reduce_scatter"):
        steps = np.where(kind == "all_reduce", 2.0, 1.0) * (g - 1.0)
        scale = 1.0 - (0.1 / delta) ** np.maximum(steps - 1.0, 0.0)
        eff = delta - 0.1 * np.clip((per_channel - 256.0 * 1024) / (256.0 * 1024), 0.0, 1.0)
        across = np.where(multinode, across, scale * eff)
    return np.where(on, 1.0 + across, 1.0)


def tree_correction(s: np.ndarray, protocol: int) -> np.ndarray:
    """:data:`TREE_CORRECTION` of ``protocol`` (0 LL, 1 LL128, 2 Simple) at ``s`` bytes (1 below 64 B)."""
    idx = np.floor(np.log2(np.maximum(s, 1.0) / 64.0))
    table = np.asarray(TREE_CORRECTION[protocol])
    ok = (idx >= 0) & (idx < len(table))
    return np.where(ok, table[np.clip(idx, 0, len(table) - 1).astype(int)], 1.0)


def ring_collective_s(kind: str, s: np.ndarray, g: np.ndarray, n: Array, k: Array, bu: Array, bo: Array,
                      au: Array, ao: Array, base: float, in_network: Array = False,
                      tuning: NcclTuning = DEFAULT_TUNING) -> np.ndarray:
    """All-reduce, all-gather or reduce-scatter over g = n x k ranks (n per scale-up domain of bus
    bandwidth ``bu``, k domains joined by NICs of ``bo`` per GPU) at the fastest of NCCL's algorithms and
    protocols (:func:`ring_s`; an all-reduce also :func:`tree_all_reduce_s`, an all-gather or
    reduce-scatter with one rank per node also :func:`pat_s`), plus the per-call floor
    (:data:`COLLECTIVE_CALL_FLOOR_S`). ``au``, ``ao`` and ``base`` are the Simple ring's step and call
    latencies (a fabric's extra switch latency included); the other protocols differ from them by
    NCCL's own latency differences. ``in_network``: the scale-out all-reduce reduces in the switches
    (SHARP), which halves its traffic."""
    # Bandwidth: hierarchical - reduce-scatter in the domain, k-way across rails on a
    # 1/n shard, all-gather in the domain; half of that for reduce-scatter or all-gather.
    # NCCL pipelines chunks through the NVLink and network stages, which use different
    # links, so the slower stage sets the time: this reproduces the measured 4 x 8 B200
    # all-reduce (busbw 381.8 GB/s from 36.95 GB/s per NIC, collectives.md section 5).
    if kind == "all_reduce":
        inter = (k - 1) / k * s / (n * bo)
        bw = np.maximum(2 * (n - 1) / n * s / bu, np.where(in_network, 1.0, 2.0) * inter)
    else:
        bw = np.maximum((n - 1) / n * s / bu, (k - 1) / k * s / (n * bo))
    cap = None
    if tuning.ll_max_busbw is not None:
        cap = np.where(k <= 1, tuning.ll_max_busbw[0], np.where(k <= 2, tuning.ll_max_busbw[1], tuning.ll_max_busbw[2]))
    best = ring_s(kind, s, g, n, k, bw, au, ao, base, tuning, cap)
    if kind == "all_reduce":
        best = np.minimum(best, tree_all_reduce_s(s, g, n, k, bw, au, ao, base, cap))
    else:
        best = np.minimum(best, pat_s(g, n, k, bw, ao, base))
    return np.where(g > 1, best + COLLECTIVE_CALL_FLOOR_S, 0.0)


def ring_s(kind: str, s: np.ndarray, g: np.ndarray, n: Array, k: Array, bw: np.ndarray, au: Array, ao: Array,
           base: float, tuning: NcclTuning = DEFAULT_TUNING, cap: np.ndarray | None = None) -> np.ndarray:
    """A collective on NCCL's ring at its fastest protocol (ring.cc, :data:`PROTOCOLS`): ``bw`` the bus
    time at full rate, derated per protocol (LL at most ``cap``, the generation's llMaxBws); latency the
    ring's steps (2 (g - 1) for an all-reduce, g - 1 else, k - 1 of them across the network), each
    inside a node at least the host's network post overhead once the ring spans nodes, each across
    the network the tree's NET latency with one rank per node; the Simple protocol's latency times
    :func:`ring_plateau`."""
    passes = 2.0 if kind == "all_reduce" else 1.0  # the bus carries the data twice in an all-reduce
    multinode = np.asarray(k) > 1
    plateau = ring_plateau(kind, s, g, k, tuning)
    best = np.full(np.broadcast(s, g, n, k).shape, np.inf)
    for i, p in enumerate(PROTOCOLS):
        au_p = au + p.nvlink_hop_s - NVLINK_HOP_LATENCY_S
        ao_p = ao + np.where(np.asarray(n) <= 1, TREE_PROTOCOLS[i].net_hop_s, p.net_hop_s) - NET_HOP_LATENCY_S
        floor = tuning.net_overhead_s * (3.0 if p.name == "Simple" else 1.0)
        ring = (g - k) * np.where(multinode, np.maximum(au_p, floor), au_p) + (k - 1) * ao_p
        lat = passes * ring + base + p.base_s - RING_BASE_LATENCY_S
        if p.name == "Simple":
            lat = lat * plateau
        t_bw = bw / p.bw_share
        if p.name == "LL" and cap is not None:
            t_bw = np.maximum(t_bw, passes * (g - 1) / g * s / cap)
        best = np.minimum(best, t_bw + lat)
    return best


def pat_s(g: np.ndarray, n: Array, k: Array, bw: np.ndarray, ao: Array, base: float) -> np.ndarray:
    """An all-gather or reduce-scatter on NCCL's PAT (pat.cc, :data:`PAT`), which NCCL opens only with one
    rank per node (inf elsewhere): 0.75 of the bus bandwidth (``bw``, the ring's bus time, scaled from the
    ring's g / (g - 1)), and latency 8 us + floor(log2 k) network steps / 3.5 + 2.8 us a rank."""
    one_per_node = (np.asarray(n) <= 1) & (np.asarray(k) > 1)
    ao_p = ao + PAT.net_hop_s - NET_HOP_LATENCY_S
    lat = base + PAT.base_s - RING_BASE_LATENCY_S + _log2_nodes(k) * ao_p / PAT_LOG_DIVISOR + g * PAT_RANK_LATENCY_S
    t = _unringed(bw, g) / PAT.bw_share + lat
    return np.where(one_per_node, t, np.inf)


def tree_all_reduce_s(s: np.ndarray, g: np.ndarray, n: Array, k: Array, bw: np.ndarray, au: Array, ao: Array,
                      base: float, cap: np.ndarray | None) -> np.ndarray:
    """An all-reduce on NCCL's tree at its fastest protocol (tree.cc, :data:`TREE_PROTOCOLS`): half the
    tree's bus bandwidth (``bw``, the ring's hierarchical bus time, scaled from the ring's g / 2 (g - 1)
    to the tree's 1/2), derated per protocol and by :data:`TREE_CORRECTION` at mid sizes; latency
    2 ((n - 1) NVLink steps + floor(log2 k) network steps) plus the tree's base latency."""
    whole, depth = _unringed(bw, g), _log2_nodes(k)
    best = np.full(np.broadcast(s, g, n, k).shape, np.inf)
    for i, p in enumerate(TREE_PROTOCOLS):
        share = p.bw_share if p.name != "LL128" else np.where(np.asarray(k) > 1, p.bw_share, TREE_LL128_ONE_NODE_SHARE)
        t_bw = whole / (share * tree_correction(s, i))
        if p.name == "LL" and cap is not None:
            t_bw = np.maximum(t_bw, 2.0 * s / (cap * tree_correction(s, i)))
        au_p = au + p.nvlink_hop_s - NVLINK_HOP_LATENCY_S
        ao_p = ao + p.net_hop_s - NET_HOP_LATENCY_S
        lat = 2.0 * ((n - 1.0) * au_p + depth * ao_p) + base + p.base_s - RING_BASE_LATENCY_S
        best = np.minimum(best, t_bw + lat)
    return best


def _unringed(bw: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The ring's bus time ``bw`` (its g - 1 of g shares) as the whole buffer's: what NCCL's tree and PAT,
    whose algorithm bandwidth is a flat share of the bus, are derated from."""
    return bw * g / np.maximum(g - 1.0, 1.0)


def _log2_nodes(k: Array) -> np.ndarray:
    """NCCL's log2i(nNodes): the depth of a tree over ``k`` nodes."""
    return np.floor(np.log2(np.maximum(np.asarray(k, dtype=float), 1.0)))
