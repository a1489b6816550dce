"""Power and money: facility watts per GPU and the price of a GPU-hour.

GPU power is the board TDP (the ceiling a training job runs near; Epoch's training-power
estimates use it too, EPOCH-ML). Host power (CPUs, NICs, fans) comes from the system catalog;
network power from the fabric (:mod:`supercluster.network.fabric`). The facility multiplies by PUE.

Prices are parameters, not physics: the default GPU-hour is the catalog GPU price amortised
straight-line over :data:`AMORTIZATION_YEARS` plus its facility energy at
:data:`ELECTRICITY_USD_PER_KWH` — both labelled assumptions; pass ``gpu_hour_usd`` to use a
quoted cloud or contract price instead.
"""

from __future__ import annotations

from ..errors import require
from ..hardware.specs import GpuSpec, SystemSpec

#: Hyperscale facility PUE (META-LULEA "as low as 1.07"; fleets ~1.10-1.15; network.csv). Industry mean is 1.56.
DEFAULT_PUE = 1.1
#: Assumption: straight-line depreciation of the GPU over 5 years (hyperscalers book servers over 5-6 years).
AMORTIZATION_YEARS = 5.0
#: Assumption: industrial electricity price, USD per kWh.
ELECTRICITY_USD_PER_KWH = 0.08
HOURS_PER_YEAR = 8766.0


def it_power_w_per_gpu(gpu: GpuSpec, system: SystemSpec, network_w_per_gpu: float = 0.0) -> float:
    """IT power per GPU: board TDP, the host's share, the network's share (watts)."""
    require(network_w_per_gpu >= 0, "network_w_per_gpu", f"must be >= 0, got {network_w_per_gpu}")
    return gpu.tdp_w + system.host_power_w / system.gpus_per_node + network_w_per_gpu


def facility_power_w_per_gpu(gpu: GpuSpec, system: SystemSpec, *, pue: float = DEFAULT_PUE,
                             network_w_per_gpu: float | None = None, num_gpus: int = 16384) -> float:
    """Facility watts per GPU (IT power x PUE); the network share defaults to that of the system's
    1:1 fabric for ``num_gpus``."""
    require(pue >= 1.0, "pue", f"must be >= 1 (facility power over IT power), got {pue}")
    if network_w_per_gpu is None:
        from .fabric import network_power_w_per_gpu

        network_w_per_gpu = network_power_w_per_gpu(gpu, system, num_gpus)
    return it_power_w_per_gpu(gpu, system, network_w_per_gpu) * pue


def gpu_hour_usd(gpu: GpuSpec, system: SystemSpec, *, pue: float = DEFAULT_PUE) -> float:
    """Ownership cost of one GPU-hour: amortised purchase price plus facility energy (see module doc)."""
    capex = gpu.price_usd / (AMORTIZATION_YEARS * HOURS_PER_YEAR)
    energy = facility_power_w_per_gpu(gpu, system, pue=pue) / 1000.0 * ELECTRICITY_USD_PER_KWH
    return capex + energy
