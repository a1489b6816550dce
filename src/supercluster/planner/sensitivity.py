"""Which upgrade buys the most: one step re-priced with each hardware rate scaled, the rest held.

The ledger says where a step's time goes; this says what a faster part would give back. Each
resource is scaled by a factor (1.1 and 2 by default) and the step priced again through the same
cost model (:func:`supercluster.job.estimate`), everything else unchanged, the fabric's
topology included (its switches, tiers and hops stay; only the rates change):

=====================  ==========================================================================
tensor FLOP/s          every dense peak (and the measured matmul rate beside it): GEMMs, attention
HBM bandwidth          the memory-bound kernels, the optimizer step
scale-up bandwidth     NVLink (or the scale-up fabric): TP, CP, EP and DP traffic inside a domain
scale-out bandwidth    the NIC per GPU: traffic between domains
all rates              the four together: what a uniformly faster machine gives, the rest being
                       latency and host costs no bandwidth removes
=====================  ==========================================================================

``elasticity`` is d ln(step) / d ln(rate), from the ratio at the factor: -1 for a step bound by that
one rate alone, 0 for a rate the step does not wait on. More of any rate is never slower (a
property test holds the cost model to it), so every elasticity is <= 0.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..errors import require
from ..hardware.specs import GpuSpec
from ..job import estimate
from ..models.spec import ModelSpec
from ..network.twolevel import Network
from ..parallelism.framework import Framework
from ..parallelism.layout import Layout
from ..perf.columns import DEFAULT_RANK_ORDER

#: resource key -> what the table calls it
RESOURCES: dict[str, str] = {
    "tensor_flops": "tensor FLOP/s",
    "hbm_bandwidth": "HBM bandwidth",
    "scaleup_bandwidth": "scale-up bandwidth (NVLink)",
    "scaleout_bandwidth": "scale-out bandwidth (NIC)",
    "all": "all rates",
}
DEFAULT_FACTORS = (1.1, 2.0)


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """The step with one resource scaled by ``factor``."""

    resource: str
    factor: float
    step_time_s: float
    base_step_time_s: float

    @property
    def label(self) -> str:
        return RESOURCES[self.resource]

    @property
    def speedup(self) -> float:
        """base step / this step (1 = no gain)."""
        return self.base_step_time_s / self.step_time_s

    @property
    def elasticity(self) -> float:
        """d ln(step) / d ln(rate) over [1, factor]: -1 fully bound by this rate, 0 not at all."""
        return math.log(self.step_time_s / self.base_step_time_s) / math.log(self.factor)

    def as_json(self) -> dict[str, float | str]:
        return {"resource": self.resource, "label": self.label, "factor": self.factor,
                "step_time_s": self.step_time_s, "speedup": self.speedup, "elasticity": self.elasticity}


def scaled_gpu(gpu: GpuSpec, resource: str, factor: float) -> GpuSpec:
    """``gpu`` with the rate ``resource`` names multiplied by ``factor`` (network rates: unchanged here)."""
    if resource in ("tensor_flops", "all"):
        gpu = dataclasses.replace(gpu, peak_flops_per_s={k: v * factor for k, v in gpu.peak_flops_per_s.items()},
                                  mamf_flops_per_s={k: v * factor for k, v in gpu.mamf_flops_per_s.items()})
    if resource in ("hbm_bandwidth", "all"):
        gpu = dataclasses.replace(gpu, hbm_bytes_per_s=gpu.hbm_bytes_per_s * factor)
    if resource in ("scaleup_bandwidth", "all"):
        gpu = dataclasses.replace(gpu, scaleup_bytes_per_s=gpu.scaleup_bytes_per_s * factor,
                                  allreduce_busbw_bytes_per_s=gpu.allreduce_busbw_bytes_per_s * factor)
    return gpu


def scaled_network(net: Network, gpu: GpuSpec, resource: str, factor: float) -> Network:
    """``net`` with its scale-up and / or scale-out rate multiplied by ``factor``; ``gpu`` is the
    already scaled GPU (the fabric reads NVLink SHARP's rate from it)."""
    up = factor if resource in ("scaleup_bandwidth", "all") else 1.0
    out = factor if resource in ("scaleout_bandwidth", "all") else 1.0
    fields = {f.name for f in dataclasses.fields(net)} if dataclasses.is_dataclass(net) else set()
    require({"scaleup_busbw_bytes_per_s", "scaleout_bytes_per_s"} <= fields, "sensitivity",
            f"the network here ({type(net).__name__}: a measured profile's collectives) has no link rates to "
            "scale; run --sensitivity without --profile")
    changes: dict[str, object] = {
        "scaleup_busbw_bytes_per_s": net.scaleup_busbw_bytes_per_s * up,  # type: ignore[attr-defined]
        "scaleout_bytes_per_s": net.scaleout_bytes_per_s * out}  # type: ignore[attr-defined]
    if "gpu" in fields and net.gpu is not None:  # type: ignore[attr-defined]
        changes["gpu"] = gpu
    return dataclasses.replace(net, **changes)  # type: ignore[type-var]


def sensitivity(model: ModelSpec, *, gpu: GpuSpec, num_gpus: int, layout: Layout, framework: Framework,
                network: Network, rank_order: str = DEFAULT_RANK_ORDER,
                factors: tuple[float, ...] = DEFAULT_FACTORS) -> list[Sensitivity]:
    """The step re-priced with each resource of :data:`RESOURCES` scaled by each of ``factors``;
    rows by resource, then factor."""
    for f in factors:
        require(math.isfinite(f) and f > 1.0, "factor", f"must be a finite number > 1, got {f}")
    base = estimate(model, gpu=gpu, num_gpus=num_gpus, layout=layout, framework=framework, network=network,
                    rank_order=rank_order).step_time_s
    rows = []
    for resource in RESOURCES:
        for f in factors:
            g = scaled_gpu(gpu, resource, f)
            t = estimate(model, gpu=g, num_gpus=num_gpus, layout=layout, framework=framework,
                         network=scaled_network(network, g, resource, f), rank_order=rank_order).step_time_s
            rows.append(Sensitivity(resource, f, t, base))
    return rows
