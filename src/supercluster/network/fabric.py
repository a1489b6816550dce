"""Scale-out fabrics: a rail-optimized folded Clos sized for any GPU count, with power and cost.

Construction (ALFARES08 folded Clos; network.csv topology rows). Each GPU has one NIC of
``nic_gbit`` per direction, split over ``planes`` independent planes of ``nic_gbit / planes``
each; a switch of capacity C runs ``C / link`` ports at that link speed (multi-plane multiplies
radix, NV-SPX). In a tier with oversubscription o (down:up), a switch uses
``d = floor(k o / (1 + o))`` ports down and ``k - d`` up; the top tier uses all k down. Per plane:

* links into tier 1 = GPUs; switches of tier t = ceil(links into t / d_t);
* links out of tier t = ceil(links into t / o_t); top tier: ceil(links in / k) switches;
* the largest N that T tiers reach is ``k * prod(d_t, t < T)`` (k^2/2 and k^3/4 at 1:1).

Optics: one transceiver at the switch end of every GPU link and at both ends of every
switch-to-switch link (the NIC-side module is host power). Power and prices are in
``data/network.toml`` with their sources.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from functools import cache

import numpy as np

from .._toml import check_keys, load_package_toml
from ..errors import InputError, require
from ..hardware.specs import GpuSpec, SystemSpec
from .nccl import (
    COLLECTIVE_CALL_FLOOR_S,
    DEFAULT_TUNING,
    NET_HOP_LATENCY_S,
    NVLINK_HOP_LATENCY_S,
    RING_BASE_LATENCY_S,
    NcclTuning,
    nccl_tuning,
)
from .twolevel import Array, TokenDispatch, all_to_all_paths_s, domain_split, hierarchical_time_s

MAX_TIERS = 4
_SWITCH_KEYS = {"name", "capacity_tbit", "max_port_gbit", "min_port_gbit", "latency_ns", "power_w", "price_usd",
                "in_network_reduction", "sources"}


@dataclass(frozen=True, slots=True, kw_only=True)
class SwitchSpec:
    key: str
    name: str
    capacity_bytes_per_s: float
    max_port_gbit: float
    min_port_gbit: float
    latency_s: float
    power_w: float
    price_usd: float
    in_network_reduction: bool
    sources: str

    def radix(self, link_gbit: float) -> int:
        return int(self.capacity_bytes_per_s * 8 / 1e9 // link_gbit)


@dataclass(frozen=True, slots=True, kw_only=True)
class Tier:
    level: int
    switches: int
    radix: int
    down_ports: int
    up_ports: int
    oversubscription: float
    links_up: int  # links from this tier to the next (0 at the top), all planes
    gpus_below: int  # GPUs reachable without leaving one switch's subtree of this tier


@dataclass(frozen=True, slots=True, kw_only=True)
class Fabric:
    """A sized scale-out fabric (all planes) for ``num_gpus`` GPUs."""

    num_gpus: int
    gpu: str
    switch: SwitchSpec
    planes: int
    link_gbit: float
    nic_bytes_per_s: float  # per GPU, all planes, per direction
    tiers: tuple[Tier, ...]
    gpu_links: int
    transceivers: int
    optics_power_w: float
    optics_usd: float
    scaleup_domain: int
    gpus_per_node: int

    @property
    def total_switches(self) -> int:
        return sum(t.switches for t in self.tiers)

    @property
    def switch_power_w(self) -> float:
        return self.total_switches * self.switch.power_w

    @property
    def network_power_w(self) -> float:
        return self.switch_power_w + self.optics_power_w

    @property
    def network_capex_usd(self) -> float:
        return self.total_switches * self.switch.price_usd + self.optics_usd

    @property
    def bisection_bytes_per_s(self) -> float:
        """Bandwidth across the worst cut into halves: injection / cumulative oversubscription."""
        if self.num_gpus <= 1 or not self.tiers:
            return 0.0
        over = math.prod(t.oversubscription for t in self.tiers[:-1])
        return self.num_gpus / 2 * self.nic_bytes_per_s / over

    @property
    def max_hops(self) -> int:
        """Switches on the longest path between two GPUs."""
        return 2 * len(self.tiers) - 1 if self.tiers else 0

    def tier_of_span(self, span_gpus: int) -> int:
        """Highest tier crossed by traffic among ``span_gpus`` consecutive GPUs (0 = inside a domain)."""
        if span_gpus <= self.scaleup_domain:
            return 0
        for t in self.tiers:
            if span_gpus <= t.gpus_below:
                return t.level
        return len(self.tiers)

    def oversubscription_below(self, tier: int) -> float:
        """Cumulative down:up ratio of the tiers a flow climbs to reach ``tier``."""
        return math.prod(t.oversubscription for t in self.tiers[:max(tier - 1, 0)])

    def contention(self, pattern: str, group: np.ndarray, stride: np.ndarray) -> np.ndarray:
        """How many times slower than its NIC a GPU's flow runs when every group of this shape
        communicates at once (closed form; checked against max-min fair flows in fabric_flow).

        For each tier boundary a group crosses, the GPUs below one switch of the tier under it
        (B of them, consecutive ranks) share that subtree's uplinks, B / (cumulative down:up) NICs
        worth. ``ring`` (ring all-reduce / all-gather / reduce-scatter, pipeline send/recv): each
        group with members both inside and outside the subtree sends one flow out. ``uniform``
        (all-to-all): each member inside sends (g - m) / (g - 1) of its data out, m being its
        group's members inside. Counted exactly over one period of the rank layout; the worst
        subtree of the worst boundary sets the rate.
        """
        g = np.asarray(group, dtype=np.int64)
        st = np.maximum(np.asarray(stride, dtype=np.int64), 1)
        g, st = np.broadcast_arrays(g, st)
        worst = np.ones(g.shape)
        if len(self.tiers) < 2 or g.size == 0:
            return worst
        width = int(st.max()) + 1
        keys, inverse = np.unique((g * width + st).ravel(), return_inverse=True)
        for level in range(1, len(self.tiers)):
            below = int(self.tiers[level - 1].gpus_below)
            capacity = below / self.oversubscription_below(level + 1)  # NICs' worth of uplink
            demand = np.array([_subtree_demand(pattern, int(k // width), int(k % width), below) for k in keys])
            worst = np.maximum(worst, (demand[inverse.ravel()] / capacity).reshape(g.shape))
        return worst

    def base_latency_s(self, tier: int) -> float:
        """Switch and fibre latency one way between two GPUs whose path tops out at ``tier``."""
        if tier == 0:
            return 0.0
        d = _defaults()
        cable = sum(d["cable_m_per_tier"][: tier]) * 2 * d["link_latency_ns_per_m"] * 1e-9
        return (2 * tier - 1) * self.switch.latency_s + cable


@cache
def _subtree_demand(pattern: str, group: int, stride: int, below: int) -> float:
    """Largest demand (NICs' worth) leaving one subtree of ``below`` consecutive ranks when every
    group of ``group`` members ``stride`` apart communicates (see :meth:`Fabric.contention`)."""
    span = group * stride
    if group <= 1 or span <= 1 or below % span == 0:
        return 0.0  # whole groups inside every subtree
    if span % below == 0 and (below % stride == 0 or stride % below == 0):
        # Aligned: a subtree lies inside one block of groups and holds members of min(stride, below)
        # groups, each with m = below / stride of them (1 when stride >= below).
        present, m = min(stride, below), max(1, below // stride)
        return float(present if pattern == "ring" else present * m * (group - m) / (group - 1))
    period = math.lcm(span, below)
    if period > 1 << 22:  # too long to count: the aligned, uniform-spread estimate
        inside = min(below, span) / stride
        return float(min(stride, below) if pattern == "ring" else below * (1 - (inside - 1) / (group - 1)))
    r = np.arange(period, dtype=np.int64)
    gid = (r // span) * stride + r % stride
    sub = r // below
    key = sub * period + gid  # gid < period
    uniq, counts = np.unique(key, return_counts=True)
    subs = uniq // period
    if pattern == "ring":
        out = np.bincount(subs, weights=(counts < group).astype(float))
    else:
        out = np.bincount(subs, weights=counts * (group - counts) / (group - 1))
    return float(out.max())


@cache
def _net_toml() -> dict[str, object]:
    return load_package_toml("network.toml")


def _defaults() -> dict[str, object]:
    return _net_toml()["defaults"]  # type: ignore[return-value]


@cache
def switch_catalog() -> dict[str, SwitchSpec]:
    out = {}
    for key, t in _net_toml()["switches"].items():  # type: ignore[union-attr]
        check_keys(f"switch {key}", t, _SWITCH_KEYS, set())
        for k in ("capacity_tbit", "max_port_gbit", "min_port_gbit", "power_w", "price_usd"):
            require(t[k] > 0, f"switch {key}.{k}", f"must be > 0, got {t[k]}")
        out[key] = SwitchSpec(
            key=key, name=t["name"], capacity_bytes_per_s=t["capacity_tbit"] * 1e12 / 8,
            max_port_gbit=t["max_port_gbit"], min_port_gbit=t["min_port_gbit"], latency_s=t["latency_ns"] * 1e-9,
            power_w=t["power_w"], price_usd=t["price_usd"], in_network_reduction=t["in_network_reduction"],
            sources=t["sources"])
    return out


def get_switch(key: str) -> SwitchSpec:
    cat = switch_catalog()
    if key not in cat:
        raise InputError("switch", f"unknown {key!r}; known: {', '.join(sorted(cat))}")
    return cat[key]


def _optics(link_gbit: float) -> dict[str, float]:
    table = _net_toml()["optics"]  # type: ignore[index]
    speeds = sorted(int(s) for s in table)  # type: ignore[union-attr]
    pick = next((s for s in speeds if s >= link_gbit), speeds[-1])
    return table[str(pick)]  # type: ignore[index,no-any-return]


def default_switch(system: SystemSpec) -> SwitchSpec:
    """The system's own switch family where it names one, else by the speed of each NIC port."""
    if system.switch is not None:
        return get_switch(system.switch)
    port_gbit = system.nic_bytes_per_s * 8 / 1e9 / system.nic_ports
    d = _defaults()
    return get_switch(str(d["switch_for_800g"] if port_gbit > 400 else d["switch_for_400g"]))


def max_gpus(radix: int, tiers: int, oversubscription: tuple[float, ...]) -> int:
    """The largest GPU count ``tiers`` tiers of ``radix``-port switches reach (per plane)."""
    n = radix
    for t in range(tiers - 1):
        o = oversubscription[t]
        n *= int(radix * o // (1 + o))
    return n


@cache
def largest_fabric() -> tuple[int, str]:
    """The most GPUs any catalog switch reaches in :data:`MAX_TIERS` tiers of a non-blocking Clos (one
    plane, at the switch's slowest port speed, so its highest radix), and that switch's key."""
    return max((max_gpus(sw.radix(sw.min_port_gbit), MAX_TIERS, (1.0,) * MAX_TIERS), key)
               for key, sw in switch_catalog().items())


def check_gpu_count(num_gpus: object, field: str = "gpus") -> int:
    """``num_gpus`` as a GPU count that some fabric of the catalog can build, or an :class:`InputError`
    naming ``field`` and the range (every command's GPU count passes here before any work is sized by it)."""
    most, key = largest_fabric()
    ok = isinstance(num_gpus, numbers.Integral) and not isinstance(num_gpus, bool) and 1 <= num_gpus <= most
    require(ok, field, f"must be a whole number from 1 to {most:,} (the most GPUs any catalog fabric "
                       f"reaches: {MAX_TIERS} tiers of {key}), got {num_gpus!r}")
    return int(num_gpus)  # type: ignore[call-overload]


def build_fabric(num_gpus: int, gpu: GpuSpec, system: SystemSpec, *, switch: SwitchSpec | str | None = None,
                 tiers: int | None = None, oversubscription: tuple[float, ...] | None = None,
                 planes: int | None = None) -> Fabric:
    """Size a rail-optimized Clos for ``num_gpus``; the fewest tiers that reach it unless ``tiers`` is given;
    one plane per NIC port of the system unless ``planes`` is given."""
    require(isinstance(num_gpus, int) and num_gpus >= 1, "gpus", f"must be a positive integer, got {num_gpus!r}")
    planes = system.nic_ports if planes is None else planes
    require(isinstance(planes, int) and planes >= 1, "planes", f"must be a positive integer, got {planes!r}")
    sw = get_switch(switch) if isinstance(switch, str) else (switch or default_switch(system))
    nic_gbit = system.nic_bytes_per_s * 8 / 1e9
    link = nic_gbit / planes
    require(sw.min_port_gbit <= link <= sw.max_port_gbit, "planes",
            f"{planes} planes give {link:g} Gb/s links; {sw.key} ports run {sw.min_port_gbit:g}-"
            f"{sw.max_port_gbit:g} Gb/s (NIC {nic_gbit:g} Gb/s per GPU)")
    k = sw.radix(link)
    if tiers is not None:
        require(isinstance(tiers, int) and 1 <= tiers <= MAX_TIERS, "tiers", f"must be 1-{MAX_TIERS}, got {tiers!r}")
    over = tuple(oversubscription or ())
    for o in over:
        require(o >= 1.0, "oversubscription", f"each tier's down:up ratio must be >= 1, got {o}")
    need = num_gpus  # endpoints per plane
    if tiers is None:
        # The fewest tiers that reach the GPUs with every ratio given on a tier below the top.
        low = max((i + 2 for i, o in enumerate(over) if o != 1.0), default=1)
        tiers = next((t for t in range(low, MAX_TIERS + 1)
                      if max_gpus(k, t, _pad(over, t)) >= need), None)
        if tiers is None:
            raise InputError("gpus", f"{num_gpus:,} GPUs exceed {MAX_TIERS} tiers of {k}-port {sw.key} "
                             f"(largest: {max_gpus(k, MAX_TIERS, _pad(over, MAX_TIERS)):,}); add planes or "
                             f"oversubscription, or pick a larger switch")
    top_set = [f"{o:g}" for o in over[tiers - 1:] if o != 1.0]
    if top_set:
        given = ",".join(f"{o:g}" for o in over)
        taper = ",".join(["1"] * (tiers - 2) + [top_set[0]])
        per_tier = (f"give one value per tier below the top ({tiers - 1} here, leaf first); to oversubscribe the "
                    f"links into tier {tiers} give {taper} (tier {tiers - 1}'s down:up)" if tiers > 1
                    else "a single tier takes no oversubscription")
        raise InputError("oversubscription",
                         f"{given} sets a down:up of {top_set[0]} on tier {tiers} or above, but tier {tiers} is the "
                         f"top of this {tiers}-tier fabric and has no uplinks; {per_tier}, or allow more tiers")
    over = _pad(over, tiers)
    reach = max_gpus(k, tiers, over)
    if reach < need:
        raise InputError("gpus", f"{num_gpus:,} GPUs exceed {tiers} tier(s) of {k}-port {sw.key} switches at "
                         f"oversubscription {','.join(f'{o:g}' for o in over)}: the largest reachable is "
                         f"{reach:,}; allow more tiers or planes")
    out: list[Tier] = []
    links_in = need
    prod_down = 1
    for level in range(1, tiers + 1):
        top = level == tiers
        o = over[level - 1]
        down = k if top else int(k * o // (1 + o))
        switches = math.ceil(links_in / down)
        links_up = 0 if top else math.ceil(links_in / o)
        # Rail-optimized: a leaf serves one rail of `down` nodes; NVLink joins the rails.
        prod_down *= down
        below = num_gpus if top else (down * system.gpus_per_node if level == 1 else prod_down)
        out.append(Tier(level=level, switches=switches * planes, radix=k, down_ports=down, up_ports=k - down if not top
                        else 0, oversubscription=o if not top else 1.0, links_up=links_up * planes,
                        gpus_below=min(below, num_gpus)))
        links_in = links_up
    gpu_links = need * planes
    switch_links = sum(t.links_up for t in out)
    transceivers = gpu_links + 2 * switch_links
    optic = _optics(link)
    return Fabric(num_gpus=num_gpus, gpu=gpu.key, switch=sw, planes=planes, link_gbit=link,
                  nic_bytes_per_s=system.nic_bytes_per_s, tiers=tuple(out), gpu_links=gpu_links,
                  transceivers=transceivers, optics_power_w=transceivers * optic["power_w"],
                  optics_usd=transceivers * optic["price_usd"], scaleup_domain=system.scaleup_domain,
                  gpus_per_node=system.gpus_per_node)


def _pad(over: tuple[float, ...], tiers: int) -> tuple[float, ...]:
    return tuple(over[i] if i < len(over) else 1.0 for i in range(tiers))


def network_power_w_per_gpu(gpu: GpuSpec, system: SystemSpec, num_gpus: int = 16384) -> float:
    """Scale-out network watts per GPU of the system's default 1:1 fabric at ``num_gpus``."""
    return build_fabric(num_gpus, gpu, system).network_power_w / num_gpus


#: what traffic topping out at each level crosses (0: the scale-up domain; up to MAX_TIERS)
TIER_NAMES = ("scale-up domain", "leaf", "spine", "core", "tier 4")


@dataclass(frozen=True, slots=True, kw_only=True)
class FabricNetwork:
    """The cost model's :class:`~supercluster.network.twolevel.Network` on a sized fabric.

    Placement: ranks are laid out in the layout's order (TP innermost), consecutive ranks fill a
    scale-up domain, then a leaf's rail group, a pod, ... A group of ``g`` ranks ``stride`` apart
    spans ``g x stride`` consecutive GPUs; its traffic climbs to the lowest tier whose subtree
    holds that span. Every group of a parallel dimension communicates at once (DP groups all
    reduce together), so all GPUs inject and each tier a flow climbs through divides the per-GPU
    share by its oversubscription. Per-step latency adds the switch and fibre hops above the
    first tier to NCCL's network step latency (which already holds one leaf hop).
    """

    fabric: Fabric
    scaleup_busbw_bytes_per_s: float
    scaleout_bytes_per_s: float  # achievable per GPU at 1:1 (NIC x ring efficiency)
    sharp: bool = False  # in-network all-reduce on switches that support it
    gpu: GpuSpec | None = None  # for NVLink SHARP (NVLS) inside the scale-up domain
    #: what NCCL's tuner reads from the GPU and host (:func:`~supercluster.network.nccl.nccl_tuning`);
    #: no LL cap and an Intel host's by default
    nccl: NcclTuning = DEFAULT_TUNING

    @classmethod
    def for_fabric(cls, fabric: Fabric, gpu: GpuSpec, system: SystemSpec, sharp: bool = False) -> FabricNetwork:
        """NVLink at the catalog link rate times the ring efficiency (network.toml); the NIC at the
        system's achievable fraction (systems.toml)."""
        require(not sharp or fabric.switch.in_network_reduction, "sharp",
                f"{fabric.switch.key} does not reduce in the network")
        return cls(fabric=fabric, scaleup_busbw_bytes_per_s=ring_busbw_bytes_per_s(gpu.scaleup_bytes_per_s),
                   scaleout_bytes_per_s=system.nic_bytes_per_s * system.nic_busbw_frac, sharp=sharp, gpu=gpu,
                   nccl=nccl_tuning(gpu, system))

    def tier_of(self, span: np.ndarray) -> np.ndarray:
        """Highest tier traffic among ``span`` consecutive GPUs climbs to (0: inside a scale-up domain)."""
        f = self.fabric
        limits = np.array([f.scaleup_domain] + [t.gpus_below for t in f.tiers], dtype=float)
        return np.minimum(np.searchsorted(limits, span, side="left"), len(f.tiers))

    def extra_latency_s(self, span: np.ndarray) -> np.ndarray:
        """Switch and fibre latency above the leaf for traffic among ``span`` consecutive GPUs."""
        f = self.fabric
        lat = np.array([max(f.base_latency_s(t) - f.base_latency_s(1), 0.0) for t in range(len(f.tiers) + 1)])
        return lat[self.tier_of(span)]

    def placement(self, groups: dict[str, tuple[int, int]]) -> list[dict[str, object]]:
        """Where each parallel group's traffic goes, as :meth:`collective_time_s` prices it: the group's
        members and rank stride, how many share one scale-up domain and how many domains it spans, the
        highest tier it climbs to, how many such groups communicate at once, and how many times slower
        than its NIC each flow runs when they all do (the contention of its pattern on thin tiers)."""
        f = self.fabric
        out = []
        for name, (members, stride) in groups.items():
            g, st = int(members), max(int(stride), 1)
            per_domain, domains = (int(x) for x in domain_split(g, st, f.scaleup_domain))
            tier = int(self.tier_of(np.float64(g * st)))
            pattern = "all-to-all" if name == "ep" else "ring"
            slow = float(f.contention("uniform" if name == "ep" else "ring", np.array([g]), np.array([st]))[0])
            out.append({"group": name, "members": g, "stride": st, "per_domain": per_domain,
                        "domains": domains, "span_gpus": g * st, "tier": tier,
                        "tier_name": TIER_NAMES[tier],
                        "concurrent_groups": f.num_gpus // g, "pattern": pattern, "slowdown": slow})
        return out

    def all_to_all_paths_s(self, size_bytes: Array, group_size: Array, stride: Array,
                           dedup: TokenDispatch | None = None) -> tuple[Array, Array]:
        """(scale-up, scale-out) transfer seconds of an all-to-all, the NICs' share slowed by the
        fabric's contention as :meth:`collective_time_s` prices it."""
        g = np.asarray(group_size, dtype=float)
        st = np.maximum(np.asarray(stride, dtype=float), 1.0)
        n, k = domain_split(g, st, self.fabric.scaleup_domain)
        divisor = self.fabric.contention("uniform", g, st)
        return all_to_all_paths_s(size_bytes, g, n, k, self.scaleup_busbw_bytes_per_s,
                                  self.scaleout_bytes_per_s / divisor, dedup)

    def collective_time_s(self, kind: str, size_bytes: Array, group_size: Array, stride: Array,
                          dedup: TokenDispatch | None = None) -> Array:
        g = np.asarray(group_size, dtype=float)
        st = np.maximum(np.asarray(stride, dtype=float), 1.0)
        n, k = domain_split(g, st, self.fabric.scaleup_domain)
        extra = self.extra_latency_s(g * st)
        divisor = self.fabric.contention("uniform" if kind == "all_to_all" else "ring", g, st)
        t = hierarchical_time_s(kind, size_bytes, g, n, k, self.scaleup_busbw_bytes_per_s,
                                self.scaleout_bytes_per_s / divisor, NVLINK_HOP_LATENCY_S,
                                NET_HOP_LATENCY_S + extra, RING_BASE_LATENCY_S, in_network=self.sharp, dedup=dedup,
                                tuning=self.nccl)
        if kind == "all_reduce" and self.gpu is not None:
            # NCCL takes NVLink SHARP for an all-reduce inside one domain when it is faster.
            nvls = np.array([nvls_algbw_bytes_per_s(self.gpu, int(x)) for x in np.unique(n)])
            if nvls.any():
                alg = np.interp(n, np.unique(n), nvls)
                t_nvls = np.where(alg > 0, COLLECTIVE_CALL_FLOOR_S + float(_coll()["nvls_base_latency_s"])  # type: ignore[arg-type]
                                  + float(_coll()["nvls_latency_s"])  # type: ignore[arg-type]
                                  + np.asarray(size_bytes, dtype=float) / np.where(alg > 0, alg, 1.0), np.inf)
                t = np.where((k <= 1) & (g > 1), np.minimum(t, t_nvls), t)
        return t


def fabric_summary(fabric: Fabric, gpu: GpuSpec, system: SystemSpec, *, pue: float = 1.1,
                   sharp: bool = False, gradient_bytes: float = 1e12) -> dict[str, object]:
    """Everything ``supercluster fabric --json`` prints: tiers, totals, power, cost, a 1 TB all-reduce."""
    require(pue >= 1.0, "pue", f"must be >= 1 (facility power over IT power), got {pue}")
    n = fabric.num_gpus
    gpu_w = n * gpu.tdp_w
    host_w = math.ceil(n / system.gpus_per_node) * system.host_power_w
    it_w = gpu_w + host_w + fabric.network_power_w
    net = FabricNetwork.for_fabric(fabric, gpu, system, sharp=sharp)
    ar = float(net.collective_time_s("all_reduce", gradient_bytes, n, 1))
    tiers = [{"level": t.level, "switches": t.switches, "links": t.links_up, "radix": t.radix,
              "down_ports": t.down_ports, "up_ports": t.up_ports, "oversubscription": t.oversubscription,
              "gpus_below": t.gpus_below, "latency_s": fabric.base_latency_s(t.level)} for t in fabric.tiers]
    return {
        "gpus": n, "gpu": gpu.key, "switch": fabric.switch.key, "planes": fabric.planes, "link_gbit": fabric.link_gbit,
        "tiers": tiers, "total_switches": fabric.total_switches, "gpu_links": fabric.gpu_links,
        "transceivers": fabric.transceivers, "bisection_bytes_per_s": fabric.bisection_bytes_per_s,
        "max_hops": fabric.max_hops, "max_latency_s": fabric.base_latency_s(len(fabric.tiers)),
        "power_w": it_w * pue, "it_power_w": it_w, "gpu_power_w": gpu_w, "host_power_w": host_w,
        "network_power_w": fabric.network_power_w, "switch_power_w": fabric.switch_power_w,
        "optics_power_w": fabric.optics_power_w, "pue": pue,
        "capex_usd": n * gpu.price_usd + fabric.network_capex_usd, "gpu_capex_usd": n * gpu.price_usd,
        "network_capex_usd": fabric.network_capex_usd, "allreduce_bytes": gradient_bytes,
        "allreduce_time_s": ar, "sharp": sharp,
        "sources": {"switch": fabric.switch.sources, "gpu": gpu.sources, "system": system.sources},
    }


def compare_options(num_gpus: int, gpu: GpuSpec, system: SystemSpec, *, pue: float = 1.1,
                    oversubscription: tuple[float, ...] | None = None) -> list[dict[str, object]]:
    """The feasible (switch, planes) fabrics for ``num_gpus``, fewest tiers first for each switch."""
    require(pue >= 1.0, "pue", f"must be >= 1 (facility power over IT power), got {pue}")
    rows = []
    for key in sorted(switch_catalog()):
        for planes in sorted({1, 2, 4, 8, system.nic_ports}):
            try:
                fab = build_fabric(num_gpus, gpu, system, switch=key, planes=planes, oversubscription=oversubscription)
            except InputError:
                continue
            rows.append(fabric_summary(fab, gpu, system, pue=pue))
    return rows


# ---- collective bandwidths from link rates (the check against collectives.md) -----------------------
def _coll() -> dict[str, object]:
    return _net_toml()["collectives"]  # type: ignore[return-value]


def ring_busbw_bytes_per_s(link_bytes_per_s: float) -> float:
    """nccl-tests bus bandwidth of a ring collective over links of this unidirectional rate."""
    return link_bytes_per_s * float(_coll()["ring_link_efficiency"])  # type: ignore[arg-type]


def nvls_algbw_bytes_per_s(gpu: GpuSpec, n: int) -> float:
    """Algorithm bandwidth of an NVLink-SHARP all-reduce over n GPUs (0 where NVLS does not apply).

    In-network reduction: the switch reads every GPU's n slices to reduce them (S out of each GPU)
    and multicasts the n reduced slices back (S into each), plus each GPU's own reduced slice on
    the way in and out: S (n + 1) / n per GPU and direction, where a ring all-reduce moves
    2 (n - 1) / n S. nccl-tests' factor (n - 1) / (n + 1) for in-network all-reduce is this count
    (network.csv, NCCL-TESTS-PERF). The link runs at the ring efficiency times NCCL's nvlsEfficiency.
    """
    eff = float(_coll()["nvls_efficiency"].get(gpu.arch, 0.0))  # type: ignore[union-attr]
    if eff <= 0 or n < int(_coll()["nvls_min_gpus"]) or n > gpu.scaleup_domain:  # type: ignore[arg-type]
        return 0.0
    return ring_busbw_bytes_per_s(gpu.scaleup_bytes_per_s) * eff * n / (n + 1.0)


def predicted_busbw(gpu: GpuSpec, system: SystemSpec, kind: str, n: int, nodes: int = 1,
                    algorithm: str = "ring") -> float:
    """nccl-tests busbw this model predicts for a large message: ``algorithm`` ring or nvls; ``nodes`` > 1
    is the hierarchical multi-node collective over one NIC per GPU."""
    if algorithm == "nvls":
        alg = nvls_algbw_bytes_per_s(gpu, n)
        require(alg > 0, "algorithm", f"NVLS does not apply to {n} x {gpu.key}")
        return alg * 2.0 * (n - 1) / n
    # The cost model's own collective time (bandwidth part only: latencies zeroed), read back as busbw.
    p, size = n * nodes, 16.0 * 2**30
    t = hierarchical_time_s(kind, size, np.float64(p), n, nodes, ring_busbw_bytes_per_s(gpu.scaleup_bytes_per_s),
                            system.nic_bytes_per_s * system.nic_busbw_frac, 0.0, 0.0, 0.0)
    factor = 2.0 * (p - 1) / p if kind == "all_reduce" else (p - 1) / p
    return float(factor * size / t)
