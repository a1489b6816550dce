"""The network interface of the cost model, and the two-level (scale-up + scale-out) answer.

The cost model asks one question: how long does collective C take over a group of G ranks
whose members sit ``stride`` ranks apart in the global rank order, for a message of S bytes?
Any object with ``collective_time_s(kind, size_bytes, group_size, stride)`` answers it
(:class:`Network` protocol); the fabric model of a later issue plugs in the same way.

Conventions (nccl-tests, collectives.md section 2): ``size_bytes`` is the full buffer per rank
(all-reduce input, all-gather output, reduce-scatter input, all-to-all send buffer, p2p message).
Costs are alpha-beta [THAKUR05]; the hierarchical all-reduce is collectives.md section 5, its ring and
tree at NCCL's own tuner (:mod:`supercluster.network.nccl`).
All functions accept floats or equal-length numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from math import comb, gcd
from typing import Protocol

import numpy as np

from ..errors import require
from ..hardware.specs import GpuSpec, SystemSpec
from ..parallelism.framework import ROUTERS
from .nccl import (
    DEFAULT_TUNING,
    NET_HOP_LATENCY_S,
    NVLINK_HOP_LATENCY_S,
    RING_BASE_LATENCY_S,
    Array,
    NcclTuning,
    nccl_tuning,
    ring_collective_s,
)

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "p2p")


class Network(Protocol):
    """What the cost model needs from a network."""

    def collective_time_s(self, kind: str, size_bytes: Array, group_size: Array, stride: Array,
                          dedup: TokenDispatch | None = None) -> Array:
        """Seconds for collective ``kind`` of ``size_bytes`` over ``group_size`` ranks; ``dedup``: an
        MoE dispatch that sends each token once per rank and once per scale-up domain holding any of
        its experts (:class:`TokenDispatch`)."""
        ...

    def all_to_all_paths_s(self, size_bytes: Array, group_size: Array, stride: Array,
                           dedup: TokenDispatch | None = None) -> tuple[Array, Array]:
        """The transfer seconds of the same all-to-all on each path, (scale-up links, scale-out
        network): :meth:`collective_time_s` is their sum plus the calls' latency; NaN where the
        network does not tell them apart (a measured collective)."""
        ...


@dataclass(frozen=True, slots=True)
class TokenDispatch:
    """An MoE dispatch that sends each token once to every rank, and across the scale-up domains
    once to every domain, holding any of its ``top_k`` experts (DeepEP's kernels: intranode one copy
    per destination rank, internode one RDMA copy per destination node forwarded over NVLink;
    the DeepSeek-V3 report, sec. 3.2.2), instead of one copy per expert. The experts sit in equal
    contiguous blocks on the group's ranks (rank r of g holds experts r E/g ... (r + 1) E/g - 1).
    ``groups`` / ``group_topk``: the model's group-limited routing (:attr:`ModelSpec.router_groups`;
    0 = none), which keeps a balanced router's experts inside ``group_topk`` of ``groups`` contiguous
    groups and so on fewer ranks and domains."""

    experts: float
    top_k: float
    router: str = "random"
    groups: int = 0
    group_topk: int = 0

    def __post_init__(self) -> None:
        require(self.router in ROUTERS, "router", f"unknown {self.router!r}; allowed: {', '.join(ROUTERS)}")

    def factors(self, g: Array, n: Array, k: Array) -> tuple[np.ndarray, np.ndarray]:
        """(rank share, domain share): distinct ranks, and distinct domains, a token reaches, each as a
        share of its top_k expert copies; over g ranks, n per scale-up domain, k domains."""
        g, n, k = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (g, n, k)))
        grouped = self.router == "random" and 0 < self.group_topk < self.groups
        if self.router == "random" and not grouped:
            return (node_dedup_factor(self.experts, self.top_k, g),
                    node_dedup_factor(self.experts, self.top_k, k))
        # (one count per distinct group shape: a sweep's rows share a handful)
        pairs, inverse = np.unique(np.stack([np.maximum(g, 1.0).ravel(), np.maximum(n, 1.0).ravel()], axis=1),
                                   axis=0, return_inverse=True)
        if grouped:
            e, t, gr, gk = int(self.experts), int(self.top_k), self.groups, self.group_topk
            reach = np.array([(_grouped_reach(e, t, gr, gk, int(gi)),
                               _grouped_reach(e, t, gr, gk, int(-(-gi // ni)))) for gi, ni in pairs])
        else:
            reach = np.array([_round_robin_reach(int(self.experts), int(self.top_k), int(gi), int(ni))
                              for gi, ni in pairs])
        ranks, domains = (reach.reshape(-1, 2)[inverse.ravel(), i].reshape(g.shape) for i in (0, 1))
        return ranks / self.top_k, np.where(k > 1, domains / self.top_k, 1.0)


@cache
def _grouped_reach(experts: int, top_k: int, groups: int, group_topk: int, units: int) -> float:
    """Mean distinct units (``units`` equal contiguous blocks of the experts: ranks or scale-up domains)
    a token's experts fall in under group-limited routing with a balanced router: the token's
    ``group_topk`` groups are any of the C(groups, group_topk) sets alike, its ``top_k`` experts any
    ``top_k`` of the ones those groups hold. A unit overlapping the chosen groups in x experts is
    missed with probability C(pool - x, top_k) / C(pool, top_k); the chosen groups' overlaps with the
    unit are counted exactly (the sets of c overlapping groups summing to x, times the ways to pick
    the other groups among those that miss it). Without groups (1 of 1) this is the ungrouped
    :func:`node_dedup_factor` count."""
    size = experts // groups
    pool = group_topk * size
    total = comb(pool, top_k)
    hit = 0.0
    for u in range(units):
        lo, hi = u * experts // units, (u + 1) * experts // units
        overlaps = [min(hi, (j + 1) * size) - max(lo, j * size) for j in range(groups)]
        overlaps = [o for o in overlaps if o > 0]
        # ways[c][x]: sets of c of the overlapping groups whose overlaps sum to x
        ways = [[0] * (hi - lo + 1) for _ in range(len(overlaps) + 1)]
        ways[0][0] = 1
        for o in overlaps:
            for c in range(len(overlaps) - 1, -1, -1):
                for x in range(hi - lo - o, -1, -1):
                    if ways[c][x]:
                        ways[c + 1][x + o] += ways[c][x]
        others = groups - len(overlaps)
        miss = sum(ways[c][x] * comb(others, group_topk - c) * comb(pool - x, top_k)
                   for c in range(min(len(overlaps), group_topk) + 1) for x in range(hi - lo + 1) if ways[c][x])
        hit += 1.0 - miss / (comb(groups, group_topk) * total)
    return hit


@cache
def _round_robin_reach(experts: int, top_k: int, g: int, n: int) -> tuple[float, float]:
    """Mean distinct ranks and distinct scale-up domains that a round-robin router's tokens reach:
    token i's experts are (i top_k + j) mod E, j < top_k; the pattern repeats every E / gcd(E, top_k)
    tokens, so the mean over one period is the mean over a micro-batch of whole periods."""
    period = experts // gcd(experts, top_k)
    ranks = domains = 0
    for i in range(period):
        owners = {((i * top_k + j) % experts) * g // experts for j in range(top_k)}
        ranks += len(owners)
        domains += len({r // n for r in owners})
    return ranks / period, domains / period


def node_dedup_factor(experts: float, top_k: float, domains: Array) -> Array:
    """Share of an MoE all-to-all's cross-domain bytes left when each token crosses once to every
    domain holding any of its top-k experts and is forwarded inside it over the scale-up links
    (DeepEP's internode kernels; the DeepSeek-V3 report, sec. 3.2.2), instead of once per expert.

    With the experts spread evenly over k domains and a token's experts drawn uniformly (a balanced
    router), a domain holds at least one of them with probability 1 - C(E - E/k, t) / C(E, t); a token
    then crosses to (k - 1) of those, against t (k - 1) / k expert copies without the forwarding."""
    k = np.maximum(np.asarray(domains, dtype=float), 1.0)
    per = experts / k
    miss = np.ones_like(k)
    for i in range(int(top_k)):
        miss = miss * np.clip((experts - per - i) / (experts - i), 0.0, 1.0)
    return np.where(k > 1, np.minimum(1.0, k * (1.0 - miss) / top_k), 1.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class TwoLevelNetwork:
    """Scale-up domains of ``domain_size`` GPUs joined by one NIC per GPU (rail-optimized).

    ``scaleup_busbw_bytes_per_s`` is the achievable bus bandwidth inside a domain (measured
    nccl-tests figure); ``scaleout_bytes_per_s`` is the achievable per-GPU NIC rate.
    """

    domain_size: int
    scaleup_busbw_bytes_per_s: float
    scaleout_bytes_per_s: float
    scaleup_hop_latency_s: float = NVLINK_HOP_LATENCY_S
    scaleout_hop_latency_s: float = NET_HOP_LATENCY_S
    base_latency_s: float = RING_BASE_LATENCY_S
    #: what NCCL's tuner reads from the GPU and host (:func:`~supercluster.network.nccl.nccl_tuning`);
    #: no LL cap and an Intel host's by default
    nccl: NcclTuning = DEFAULT_TUNING

    def __post_init__(self) -> None:
        require(self.domain_size >= 1, "network.domain_size", f"must be >= 1, got {self.domain_size}")
        require(self.scaleup_busbw_bytes_per_s > 0, "network.scaleup_bandwidth",
                f"must be > 0, got {self.scaleup_busbw_bytes_per_s}")
        require(self.scaleout_bytes_per_s > 0, "network.scaleout_bandwidth",
                f"must be > 0, got {self.scaleout_bytes_per_s}")

    @classmethod
    def for_system(cls, gpu: GpuSpec, system: SystemSpec) -> TwoLevelNetwork:
        """The default two-level network of a catalog system."""
        return cls(
            domain_size=system.scaleup_domain,
            scaleup_busbw_bytes_per_s=gpu.allreduce_busbw_bytes_per_s,
            scaleout_bytes_per_s=system.nic_bytes_per_s * system.nic_busbw_frac,
            nccl=nccl_tuning(gpu, system),
        )

    def split(self, group_size: Array, stride: Array) -> tuple[Array, Array]:
        """(members per scale-up domain, domains spanned) of a group with this rank stride."""
        return domain_split(group_size, stride, self.domain_size)

    def all_to_all_paths_s(self, size_bytes: Array, group_size: Array, stride: Array,
                           dedup: TokenDispatch | None = None) -> tuple[Array, Array]:
        g = np.asarray(group_size, dtype=float)
        n, k = self.split(g, stride)
        return all_to_all_paths_s(size_bytes, g, n, k, self.scaleup_busbw_bytes_per_s, self.scaleout_bytes_per_s,
                                  dedup)

    def collective_time_s(self, kind: str, size_bytes: Array, group_size: Array, stride: Array,
                          dedup: TokenDispatch | None = None) -> Array:
        g = np.asarray(group_size, dtype=float)
        n, k = self.split(g, stride)
        return hierarchical_time_s(kind, size_bytes, g, n, k, self.scaleup_busbw_bytes_per_s,
                                   self.scaleout_bytes_per_s, self.scaleup_hop_latency_s,
                                   self.scaleout_hop_latency_s, self.base_latency_s, dedup=dedup,
                                   tuning=self.nccl)


def domain_split(group_size: Array, stride: Array, domain_size: float) -> tuple[np.ndarray, np.ndarray]:
    """(members per scale-up domain, domains spanned) of a group of ``group_size`` ranks ``stride``
    apart, consecutive ranks filling domains of ``domain_size`` GPUs."""
    g = np.asarray(group_size, dtype=float)
    per_domain = np.maximum(1.0, np.floor(float(domain_size) / np.maximum(np.asarray(stride, dtype=float), 1.0)))
    local = np.minimum(g, per_domain)
    return local, np.ceil(g / local)


def all_to_all_paths_s(size_bytes: Array, g: Array, n: Array, k: Array, bu: Array, bo: Array,
                       dedup: TokenDispatch | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Transfer seconds of an all-to-all of ``size_bytes`` per rank over g = n x k ranks on each path,
    (scale-up at bus bandwidth ``bu``, scale-out at ``bo`` per GPU): a fraction (n-1)/g of the buffer
    stays in the domain, (g-n)/g leaves it (collectives.md section 5); ``dedup``: each token sent once
    per rank and once per domain holding any of its experts (:class:`TokenDispatch`). 0 for one rank."""
    s, g = np.asarray(size_bytes, dtype=float), np.asarray(g, dtype=float)
    intra = s * (n - 1) / g / bu
    remote = s * (g - n) / g / bo
    if dedup is not None:
        per_rank, per_domain = dedup.factors(g, n, k)
        intra, remote = intra * per_rank, remote * per_domain
    return np.where(g > 1, intra, 0.0), np.where(g > 1, remote, 0.0)


def hierarchical_time_s(kind: str, size_bytes: Array, g: np.ndarray, n: Array, k: Array, bu: Array, bo: Array,
                        au: Array, ao: Array, base: float, in_network: Array = False,
                        dedup: TokenDispatch | None = None, tuning: NcclTuning = DEFAULT_TUNING) -> Array:
    """Alpha-beta time of a collective over g = n x k ranks: n per scale-up domain (bus bandwidth bu,
    per-step latency au), k domains joined by the scale-out network (per-GPU bandwidth bo, per-step
    latency ao). ``in_network``: the scale-out all-reduce reduces in the switches (SHARP), which
    halves its traffic (collectives.md sections 1 and 5). ``dedup``: an all-to-all whose tokens go once
    to each rank and cross once to each domain holding their experts (:class:`TokenDispatch`).
    ``tuning``: what NCCL's tuner reads from the GPU and host (:func:`~supercluster.network.nccl.ring_collective_s`)."""
    require(kind in KINDS, "collective", f"unknown kind {kind!r}; allowed: {', '.join(KINDS)}")
    s = np.asarray(size_bytes, dtype=float)
    if kind == "p2p":
        t = np.where(k > 1, s / bo + ao, s / bu + au) + base
        return np.where(g > 1, t, 0.0)
    if kind == "all_to_all":
        intra, remote = all_to_all_paths_s(s, g, n, k, bu, bo, dedup)
        bw = intra + remote
        lat = (n - 1) * au + (k - 1) * ao
    else:
        return ring_collective_s(kind, s, g, n, k, bu, bo, au, ao, base, in_network, tuning)
    return np.where(g > 1, bw + lat + base, 0.0)
