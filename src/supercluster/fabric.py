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
from dataclasses import dataclass
from functools import cache

from ._toml import load_package_toml
from .errors import InputError, require
from .hardware import GpuSpec, SystemSpec

MAX_TIERS = 4


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

    def base_latency_s(self, tier: int) -> float:
        """Switch and fibre latency one way between two GPUs whose path tops out at ``tier``."""
        if tier == 0:
            return 0.0
        d = _defaults()
        cable = sum(d["cable_m_per_tier"][: tier]) * 2 * d["link_latency_ns_per_m"] * 1e-9
        return (2 * tier - 1) * self.switch.latency_s + cable


@cache
def _net_toml() -> dict[str, object]:
    return load_package_toml("network.toml")


def _defaults() -> dict[str, object]:
    return _net_toml()["defaults"]  # type: ignore[return-value]


@cache
def switch_catalog() -> dict[str, SwitchSpec]:
    out = {}
    for key, t in _net_toml()["switches"].items():  # type: ignore[union-attr]
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
    nic_gbit = system.nic_bytes_per_s * 8 / 1e9
    d = _defaults()
    return get_switch(str(d["switch_for_800g"] if nic_gbit > 400 else d["switch_for_400g"]))


def max_gpus(radix: int, tiers: int, oversubscription: tuple[float, ...]) -> int:
    """The largest GPU count ``tiers`` tiers of ``radix``-port switches reach (per plane)."""
    n = radix
    for t in range(tiers - 1):
        o = oversubscription[t]
        n *= int(radix * o // (1 + o))
    return n


def build_fabric(num_gpus: int, gpu: GpuSpec, system: SystemSpec, *, switch: SwitchSpec | str | None = None,
                 tiers: int | None = None, oversubscription: tuple[float, ...] | None = None,
                 planes: int = 1) -> Fabric:
    """Size a rail-optimized Clos for ``num_gpus``; the fewest tiers that reach it unless ``tiers`` is given."""
    require(isinstance(num_gpus, int) and num_gpus >= 1, "gpus", f"must be a positive integer, got {num_gpus!r}")
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
        tiers = next((t for t in range(1, MAX_TIERS + 1)
                      if max_gpus(k, t, _pad(over, t)) >= need), None)
        if tiers is None:
            raise InputError("gpus", f"{num_gpus:,} GPUs exceed {MAX_TIERS} tiers of {k}-port {sw.key} "
                             f"(largest: {max_gpus(k, MAX_TIERS, _pad(over, MAX_TIERS)):,}); add planes or "
                             f"oversubscription, or pick a larger switch")
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
