"""Check of the closed form: an explicit two- or three-tier fabric graph and max-min fair flow rates.

For fabrics up to a few thousand GPUs the closed-form contention of
:meth:`~supercluster.network.fabric.Fabric.contention` is checked against flows on the explicit graph
(rustworkx): GPUs, leaves and spines with their links as capacities (in NIC units), a
collective's traffic pattern as flows, equal-cost multipath as an even (fluid) split over the
shortest paths, and max-min fair rates by progressive filling (Bertsekas and Gallager, Data
Networks, section 6.5). Fluid ECMP is the ideal that per-flow hashing approaches with many flows
(Meta's NCCLX opens 16 per GPU pair for this, LLAMA3); hash collisions would only lower rates.

The check works at GPU granularity (one GPU per node, no NVLink), the abstraction the closed
form uses for the scale-out part.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import rustworkx as rx
from scipy import sparse

from ..errors import require
from .fabric import Fabric


@dataclass(frozen=True, slots=True)
class FlowResult:
    rates: np.ndarray  # per flow, in NIC units
    slowdown: float  # completion time of the pattern relative to every flow at NIC rate


def explicit_graph(fabric: Fabric) -> tuple[rx.PyDiGraph, list[int], dict[tuple[int, int], float]]:
    """GPU and switch nodes of a two- or three-tier (per plane) folded Clos; capacities per directed edge.

    Leaf i serves GPUs i d1 .. (i + 1) d1 - 1. A pod is d2 consecutive leaves (d the tier's down ports)
    and its spines, each leaf's uplinks spread evenly over them. In three tiers the cores form one
    group per spine position: spine j of every pod spreads its uplinks evenly over core group j (the
    k-ary fat tree's wiring, which the closed form's subtrees assume)."""
    require(len(fabric.tiers) in (2, 3) and fabric.planes == 1, "fabric",
            "the check builds 2- or 3-tier, 1-plane fabrics")
    n = fabric.num_gpus
    leaf, spine = fabric.tiers[0], fabric.tiers[1]
    # (a partly filled leaf cables fewer uplinks than a full one: the check keeps to fabrics whose leaves
    # are all alike, as the closed form's subtrees are)
    require(n % leaf.down_ports == 0 and leaf.links_up % leaf.switches == 0, "fabric",
            f"{n} GPUs do not fill {leaf.switches} leaves of {leaf.down_ports}: the check needs whole leaves")
    g = rx.PyDiGraph()
    cap: dict[tuple[int, int], float] = {}

    def link(a: int, b: int, count: float) -> None:
        for x, y in ((a, b), (b, a)):
            if (x, y) not in cap:
                g.add_edge(x, y, None)
                cap[(x, y)] = 0.0
            cap[(x, y)] += count

    gpus = [g.add_node(("gpu", i)) for i in range(n)]
    leaves = [g.add_node(("leaf", i)) for i in range(leaf.switches)]
    for i in range(n):
        link(gpus[i], leaves[i // leaf.down_ports], 1.0)
    up1 = leaf.links_up // leaf.switches  # uplinks of one leaf
    pods = -(-leaf.switches // spine.down_ports) if len(fabric.tiers) == 3 else 1
    require(spine.switches % pods == 0, "fabric", "spines must split evenly over the pods")
    per_pod = spine.switches // pods
    require(up1 % per_pod == 0, "fabric", "a leaf's uplinks must spread evenly over its pod's spines")
    spines = [g.add_node(("spine", j)) for j in range(spine.switches)]
    for i, lf in enumerate(leaves):
        pod = i // spine.down_ports if pods > 1 else 0
        for j in range(per_pod):
            link(lf, spines[pod * per_pod + j], float(up1 // per_pod))
    if len(fabric.tiers) == 3:
        core = fabric.tiers[2]
        # (fewer cores than spine positions, as a thin top tier has: the positions share the cores)
        require(core.switches % per_pod == 0 or per_pod % core.switches == 0, "fabric",
                "cores must split evenly over the spine positions")
        group = max(core.switches // per_pod, 1)
        up2 = spine.links_up // spine.switches
        require(up2 % group == 0, "fabric", "a spine's uplinks must spread evenly over its core group")
        cores = [g.add_node(("core", c)) for c in range(core.switches)]
        for sidx, sp in enumerate(spines):
            j = sidx % per_pod
            for c in range(group):
                link(sp, cores[(j * group + c) % core.switches], float(up2 // group))
    return g, gpus, cap


def max_min_rates(graph: rx.PyDiGraph, gpus: list[int], cap: dict[tuple[int, int], float],
                  pairs: list[tuple[int, int]]) -> np.ndarray:
    """Max-min fair rates of ``pairs`` (GPU index pairs) under fluid ECMP."""
    edges = {e: k for k, e in enumerate(cap)}
    rows, cols, vals = [], [], []
    cache: dict[tuple[int, int], list[tuple[int, float]]] = {}
    for f, (s, t) in enumerate(pairs):
        key = (s, t)
        if key not in cache:
            paths = list(rx.digraph_all_shortest_paths(graph, gpus[s], gpus[t]))
            load: dict[int, float] = {}
            for p in paths:
                for a, b in zip(p[:-1], p[1:], strict=True):
                    load[edges[(a, b)]] = load.get(edges[(a, b)], 0.0) + 1.0 / len(paths)
            cache[key] = list(load.items())
        for e, frac in cache[key]:
            rows.append(e)
            cols.append(f)
            vals.append(frac)
    A = sparse.csr_matrix((vals, (rows, cols)), shape=(len(edges), len(pairs)))
    c = np.array(list(cap.values()))
    rate = np.zeros(len(pairs))
    active = np.ones(len(pairs), dtype=bool)
    while active.any():
        used = A @ rate
        load = A @ active.astype(float)
        room = np.where(load > 0, (c - used) / np.where(load > 0, load, 1.0), np.inf)
        step = float(room.min())
        rate[active] += step
        full = (load > 0) & (room <= step * (1 + 1e-9) + 1e-12)
        frozen = np.asarray(A[full].sum(axis=0)).ravel() > 0
        active &= ~frozen
    return rate


def pattern_pairs(num_gpus: int, group: int, stride: int, pattern: str) -> tuple[list[tuple[int, int]], float]:
    """Flows of every group of ``group`` members ``stride`` apart, and each flow's share of a GPU's data."""
    require(num_gpus % (group * stride) == 0, "group", "groups must tile the GPUs")
    pairs = []
    for base in range(0, num_gpus, group * stride):
        for off in range(stride):
            members = [base + off + i * stride for i in range(group)]
            if pattern == "ring":
                pairs += [(members[i], members[(i + 1) % group]) for i in range(group)]
            else:
                pairs += [(a, b) for a in members for b in members if a != b]
    share = 1.0 if pattern == "ring" else 1.0 / (group - 1)
    return pairs, share


def flow_slowdown(fabric: Fabric, group: int, stride: int, pattern: str) -> FlowResult:
    """Completion time of a collective's flows, relative to the NIC rate, on the explicit fabric."""
    graph, gpus, cap = explicit_graph(fabric)
    pairs, share = pattern_pairs(fabric.num_gpus, group, stride, pattern)
    rates = max_min_rates(graph, gpus, cap, pairs)
    # A GPU sends all its flows at once; its data is done when its slowest flow is (share / rate,
    # in units of its data at the NIC rate). The pattern finishes with the slowest GPU.
    per_gpu = np.zeros(fabric.num_gpus)
    for (s, _), r in zip(pairs, rates, strict=True):
        per_gpu[s] = max(per_gpu[s], share / r)
    return FlowResult(rates=rates, slowdown=float(per_gpu.max()))
