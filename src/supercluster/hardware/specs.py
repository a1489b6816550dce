"""GPU and system specifications, loaded from ``data/gpus.toml`` and ``data/systems.toml``.

Every figure is SI inside the dataclasses; the TOML keys carry human units and sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cache

from .._toml import check_keys, load_package_toml
from ..errors import InputError, require
from ..units import GBIT, TERA, GiB

PRECISIONS = ("bf16", "fp16", "fp8", "fp4", "tf32")  # catalog columns; calibrated profiles may add fp32
#: the host CPUs a system's GPUs are launched from (systems.toml host_cpu): an Intel or AMD x86 server or a
#: Grace superchip; NCCL's tuner and PyTorch's host work both read it
HOST_CPUS = ("intel", "amd", "grace")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One accelerator. Rates are dense FLOP/s, bytes per second per direction."""

    key: str
    name: str
    arch: str
    year: int
    peak_flops_per_s: dict[str, float]  # precision -> dense peak; 0 = unsupported
    mamf_flops_per_s: dict[str, float]  # precision -> measured max achievable matmul FLOP/s
    gemm_frac: dict[str, float]  # precision -> achieved fraction of peak at transformer shapes
    clock_frac: float  # sustained tensor-core clock relative to the datasheet (power limits)
    hbm_bytes: float
    hbm_bytes_per_s: float
    scaleup_bytes_per_s: float
    scaleup_domain: int
    allreduce_busbw_bytes_per_s: float
    tdp_w: float
    price_usd: float
    system: str
    sources: str
    #: Fixed cost per kernel (launch / dispatch), from calibration; 0 in the catalog, where launches
    #: are asynchronous and hidden behind the previous kernel.
    op_overhead_s: float = 0.0
    #: Host seconds to launch one kernel where a calibration measured it and prices with it (the
    #: profile's ``launch_s``); None = data/kernels.toml [host] for a catalog GPU, 0 for a profile.
    host_launch_s: float | None = None
    #: Measured attention (fwd, bwd) fractions of peak from calibration; None = data/kernels.toml.
    attention_frac: tuple[float, float] | None = None
    #: Relative spread (one standard deviation) of the sustained speed of GPUs of this kind; None =
    #: the measured figure in data/kernels.toml [synchronization]. A calibrated single-host profile
    #: sets 0: its own verify runs measure any waiting directly.
    speed_sigma: float | None = None
    #: precision -> fraction of the dense peak the tensor cores sustain in a GEMM once its operand
    #: traffic is priced apart (:func:`tensor_frac` of ``gemm_frac``, at the catalog's HBM rate);
    #: empty for a calibrated profile, whose GEMM rate was measured in situ
    gemm_tensor_frac: dict[str, float] = field(default_factory=dict)
    #: the CPU that launches the GPU's kernels (:data:`HOST_CPUS`), its catalog system's
    #: (:attr:`SystemSpec.host_cpu`): a Grace superchip (GB200, GB300) runs PyTorch's host work slower
    #: than an x86 server (kernels.toml [host])
    host_cpu: str = "intel"
    #: exponentials per second the special-function units compute (MUFU.EX2, the softmax's exp); 0 =
    #: not catalogued, where the fused attention's exponentials are not priced apart (kernels.toml [flash])
    sfu_exp_per_s: float = 0.0
    #: streaming multiprocessors a GEMM's output tiles are spread over (kernels.toml [gemm] tiles:
    #: tile and wave quantisation); 0 = not catalogued, where no quantisation is priced
    sm_count: int = 0

    def peak(self, precision: str) -> float:
        """Dense peak FLOP/s of ``precision``; an :class:`InputError` if the GPU lacks it."""
        value = self.peak_flops_per_s.get(precision, 0.0)
        require(value > 0, "precision", f"{self.key} has no {precision} tensor cores; "
                f"supported: {[p for p, v in self.peak_flops_per_s.items() if v > 0]}")
        return value

    def gemm_flops_per_s(self, precision: str) -> float:
        """FLOP/s the GEMMs of a transformer layer achieve in ``precision`` (see gpus.toml)."""
        peak = self.peak(precision)
        # fp16/tf32 run on the bf16 path; fp4 without a measurement takes the fp8 fraction.
        if precision in self.gemm_frac:
            return self.gemm_frac[precision] * peak * self.clock_frac
        ref = "bf16" if precision in ("bf16", "fp16", "tf32") else "fp8"
        frac = self.gemm_frac.get(precision) or self.gemm_frac[ref] or self.gemm_frac["bf16"]
        return frac * peak * self.clock_frac

    def gemm_tensor_flops_per_s(self, precision: str) -> float:
        """FLOP/s of a GEMM's tensor-core work in ``precision``, its operand traffic priced apart
        (see data/kernels.toml [gemm]); 0 where the rate was measured in situ (a calibrated profile)."""
        frac = self.gemm_tensor_frac.get(precision, 0.0)
        return frac * self.peak(precision) * self.clock_frac if frac else 0.0


#: GEMM operand bytes per element by precision (NVFP4's block scales, 1 byte per 16, not counted)
OPERAND_BYTES = {"bf16": 2.0, "fp16": 2.0, "tf32": 4.0, "fp32": 4.0, "fp8": 1.0, "fp4": 0.5}


def reference_bytes_per_flop(precision: str) -> float:
    """Forward operand bytes (inputs and weights in the GEMM precision, 16-bit output) per FLOP of
    the reference layer the catalog's GEMM fractions were measured on (data/kernels.toml [gemm])."""
    g = load_package_toml("kernels.toml")["gemm"]
    t, h, f = float(g["reference_tokens"]), float(g["reference_hidden"]), float(g["reference_ffn"])
    el = OPERAND_BYTES[precision]
    shapes = ((t, h, 3.0 * h), (t, h, h), (t, h, f), (t, f, h))  # (M, K, N): QKV, projection, FC1, FC2
    return sum(el * (m * k + k * n) + 2.0 * m * n for m, k, n in shapes) / sum(2.0 * m * k * n for m, k, n in shapes)


def tensor_frac(gemm_frac: float, peak_flops_per_s: float, clock_frac: float, hbm_bytes_per_s: float,
                precision: str) -> float:
    """The tensor-core fraction of peak that, with each GEMM's operands streamed through HBM after
    it, reproduces the reference layer's measured ``gemm_frac``: frac / (1 - rho rate / HBM)."""
    rate = gemm_frac * peak_flops_per_s * clock_frac
    hbm = hbm_bytes_per_s * float(load_package_toml("kernels.toml")["memory"]["hbm_frac"])
    x = reference_bytes_per_flop(precision) * rate / hbm
    require(x < 0.5, "gemm_frac", f"{gemm_frac} of {peak_flops_per_s / TERA:g} TFLOP/s ({precision}) leaves the "
            f"reference layer {100 * x:.0f} % memory time at {hbm_bytes_per_s / TERA:g} TB/s: not a compute-bound "
            "measurement")
    return gemm_frac / (1.0 - x)


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemSpec:
    """The node or rack a GPU ships in; the scale-out side of the two-level network."""

    key: str
    name: str
    gpu: str
    gpus_per_node: int
    scaleup_domain: int
    nic_bytes_per_s: float  # per GPU, per direction
    nic_busbw_frac: float
    host_power_w: float
    sources: str
    #: scale-out ports per GPU (its NIC bandwidth split over that many links, one per network plane)
    #: and the switch family they plug into; None = by the port speed (network.toml [fabric_defaults])
    nic_ports: int = 1
    switch: str | None = None
    #: the host CPU that launches the GPUs' kernels (:data:`HOST_CPUS`): NCCL's tuner takes an AMD x86
    #: host's network post overhead as twice the others' (network/nccl.py NET_OVERHEAD_S), and a Grace
    #: host runs PyTorch's host work slower (kernels.toml [host])
    host_cpu: str = "intel"


_GPU_REQUIRED = {
    "name", "arch", "year", "tf32_tflops", "bf16_tflops", "fp16_tflops", "fp8_tflops", "fp4_tflops",
    "hbm_gib", "hbm_tb_per_s", "scaleup_gb_per_s", "scaleup_domain", "tdp_w", "mamf_bf16_tflops",
    "mamf_fp8_tflops", "gemm_bf16_frac", "gemm_fp8_frac", "sustained_clock_frac", "allreduce_busbw_gb_per_s",
    "price_usd", "system", "sources",
}
_SYSTEM_REQUIRED = {
    "name", "gpu", "gpus_per_node", "scaleup_domain", "nic_gbit_per_gpu", "nic_busbw_frac",
    "host_power_w", "sources",
}


def gpu_from_table(key: str, t: dict[str, object]) -> GpuSpec:
    """Build and validate a :class:`GpuSpec` from one TOML table (human units)."""
    check_keys(f"gpu {key}", t, _GPU_REQUIRED, {"gemm_fp4_frac", "sfu_tera_exp_per_s", "sm_count"})
    num = {k: float(v) for k, v in t.items() if isinstance(v, int | float) and k != "year"}
    for k, v in num.items():
        require(v >= 0, f"gpu {key}.{k}", f"must be >= 0, got {v}")
    for k in ("gemm_bf16_frac", "gemm_fp8_frac", "gemm_fp4_frac", "sustained_clock_frac"):
        if k not in num:
            continue
        require(num[k] <= 1, f"gpu {key}.{k}", f"must be a fraction in [0, 1], got {num[k]}")
    for k in ("bf16_tflops", "hbm_gib", "hbm_tb_per_s", "scaleup_gb_per_s", "mamf_bf16_tflops", "gemm_bf16_frac",
              "sustained_clock_frac"):
        require(num[k] > 0, f"gpu {key}.{k}", f"must be > 0, got {num[k]}")
    peaks = {p: num[f"{p}_tflops"] * TERA for p in PRECISIONS}
    return GpuSpec(
        key=key, name=str(t["name"]), arch=str(t["arch"]), year=int(t["year"]),  # type: ignore[call-overload]
        peak_flops_per_s=peaks,
        mamf_flops_per_s={"bf16": num["mamf_bf16_tflops"] * TERA, "fp8": num["mamf_fp8_tflops"] * TERA},
        gemm_frac={"bf16": num["gemm_bf16_frac"], "fp8": num["gemm_fp8_frac"],
                   **({"fp4": num["gemm_fp4_frac"]} if "gemm_fp4_frac" in num else {})},
        clock_frac=num["sustained_clock_frac"],
        hbm_bytes=num["hbm_gib"] * GiB, hbm_bytes_per_s=num["hbm_tb_per_s"] * TERA,
        scaleup_bytes_per_s=num["scaleup_gb_per_s"] * 1e9, scaleup_domain=int(num["scaleup_domain"]),
        allreduce_busbw_bytes_per_s=num["allreduce_busbw_gb_per_s"] * 1e9, tdp_w=num["tdp_w"],
        price_usd=num["price_usd"], system=str(t["system"]), sources=str(t["sources"]),
        gemm_tensor_frac=_tensor_fracs(key, num, peaks),
        sfu_exp_per_s=num.get("sfu_tera_exp_per_s", 0.0) * TERA, sm_count=_sm_count(key, t),
    )


def _sm_count(key: str, t: dict[str, object]) -> int:
    """The table's ``sm_count``: a whole number of SMs, 0 where it is absent."""
    n = t.get("sm_count", 0)
    require(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= 100_000, f"gpu {key}.sm_count",
            f"must be a whole number of streaming multiprocessors (1 to 100,000), got {n!r}")
    return int(n)  # type: ignore[arg-type]


def _tensor_fracs(key: str, num: dict[str, float], peaks: dict[str, float]) -> dict[str, float]:
    """:func:`tensor_frac` for every precision the GPU has tensor cores for (fp16 and tf32 on the
    bf16 fraction, as GpuSpec.gemm_flops_per_s reads them). fp4 without a fraction of its own takes
    the fp8 tensor-core fraction (an assumption where nothing is measured: on B300 the measured NVFP4
    kernel reaches 0.340 of its peak against FP8's 0.625, gpus.toml header); its operands' traffic,
    half of fp8's, is priced apart."""
    out: dict[str, float] = {}
    for p in PRECISIONS:
        if p == "fp4" and "gemm_fp4_frac" not in num and "fp8" in out and peaks[p] > 0:
            out[p] = out["fp8"]
            continue
        ref = "bf16" if p in ("bf16", "fp16", "tf32") else "fp8"
        frac = num.get(f"gemm_{p}_frac") or num.get(f"gemm_{ref}_frac") or num["gemm_bf16_frac"]
        if peaks[p] > 0 and frac > 0:
            try:
                out[p] = tensor_frac(frac, peaks[p], num["sustained_clock_frac"], num["hbm_tb_per_s"] * TERA, p)
            except InputError as err:
                raise InputError(f"gpu {key}.gemm_{p}_frac", str(err).removeprefix("gemm_frac: ")) from None
    return out


def system_from_table(key: str, t: dict[str, object]) -> SystemSpec:
    """Build and validate a :class:`SystemSpec` from one TOML table."""
    check_keys(f"system {key}", t, _SYSTEM_REQUIRED, {"nic_ports", "switch", "host_cpu"})
    host = t.get("host_cpu", "intel")
    require(host in HOST_CPUS, f"system {key}.host_cpu", f"{host!r}: allowed {', '.join(HOST_CPUS)}")
    nic = float(t["nic_gbit_per_gpu"])  # type: ignore[arg-type]
    frac = float(t["nic_busbw_frac"])  # type: ignore[arg-type]
    ports = t.get("nic_ports", 1)
    require(nic > 0, f"system {key}.nic_gbit_per_gpu", f"must be > 0, got {nic}")
    require(0 < frac <= 1, f"system {key}.nic_busbw_frac", f"must be in (0, 1], got {frac}")
    require(isinstance(ports, int) and ports >= 1, f"system {key}.nic_ports", f"must be a whole number >= 1, got "
            f"{ports!r}")
    return SystemSpec(
        key=key, name=str(t["name"]), gpu=str(t["gpu"]), gpus_per_node=int(t["gpus_per_node"]),  # type: ignore[call-overload]
        scaleup_domain=int(t["scaleup_domain"]), nic_bytes_per_s=nic * GBIT,  # type: ignore[call-overload]
        nic_busbw_frac=frac, host_power_w=float(t["host_power_w"]), sources=str(t["sources"]),  # type: ignore[arg-type]
        nic_ports=int(ports), switch=str(t["switch"]) if "switch" in t else None,  # type: ignore[call-overload]
        host_cpu=str(host),
    )


@cache
def gpu_catalog() -> dict[str, GpuSpec]:
    """All catalog GPUs by key, each launched from its catalog system's host CPU."""
    systems = system_catalog()
    gpus = (gpu_from_table(k, v) for k, v in load_package_toml("gpus.toml").items())
    return {g.key: replace(g, host_cpu=systems[g.system].host_cpu) if g.system in systems else g for g in gpus}


@cache
def system_catalog() -> dict[str, SystemSpec]:
    """All catalog systems by key."""
    return {k: system_from_table(k, v) for k, v in load_package_toml("systems.toml").items()}


#: Accelerators whose datasheet figures are known (../shared/research/gpus.csv) but whose GEMMs
#: cannot be priced from a source: no achieved-matmul (MAMF) measurement is published for them.
NOT_PRICED = {
    "tpu-v4": "Google TPU v4 (275 TFLOP/s bf16, 32 GiB HBM2 at 1.2 TB/s, GCP-TPU-V4)",
    "tpu-v5e": "Google TPU v5e (197 TFLOP/s bf16, GCP-TPU-V5E)",
    "tpu-v5p": "Google TPU v5p (459 TFLOP/s bf16, GCP-TPU-V5P)",
    "tpu-v6e": "Google TPU v6e (918 TFLOP/s bf16, GCP-TPU-V6E)",
}


def gpu_key(name: str) -> str:
    """A catalog key written in any case (H200, MI300X) as the key; any other name as given."""
    if isinstance(name, str) and name not in gpu_catalog() and name.strip().lower() in {**gpu_catalog(),
                                                                                      **NOT_PRICED}:
        return name.strip().lower()
    return name


def get_gpu(key: str) -> GpuSpec:
    """The catalog GPU ``key``, or an :class:`InputError` listing the known keys."""
    cat = gpu_catalog()
    key = gpu_key(key)
    if key in NOT_PRICED and key not in cat:
        raise InputError("gpu", f"{key!r} is not in the catalog: {NOT_PRICED[key]} has no published measurement "
                                f"of its achieved matmul rate, and the model does not guess one; known: "
                                f"{', '.join(sorted(cat))}")
    if key not in cat:
        raise InputError("gpu", f"unknown GPU {key!r}; known: {', '.join(sorted(cat))}")
    return cat[key]


#: the most a run may state of its own network (a runs row, estimate and plan options): a GPU's
#: scale-out rate (Gb/s per direction) and the GPUs of a node
MAX_NIC_GBIT_PER_GPU = 100_000.0
MAX_GPUS_PER_NODE = 4096


def with_network(system: SystemSpec, *, nic_gbit_per_gpu: float | None = None,
                 gpus_per_node: int | None = None) -> SystemSpec:
    """``system`` with a run's own network: the scale-out rate each GPU has (Gb/s per direction: a
    node's NIC bandwidth over its GPUs) and the GPUs a node holds. A node's GPUs share its scale-up
    links: where the system's scale-up domain is one node (HGX, DGX) it becomes the stated node; a
    domain of several nodes (an NVL72 rack) keeps its size. None keeps the system's figure."""
    out = system
    if nic_gbit_per_gpu is not None:
        ok = isinstance(nic_gbit_per_gpu, int | float) and not isinstance(nic_gbit_per_gpu, bool) \
            and math.isfinite(nic_gbit_per_gpu) and 0 < nic_gbit_per_gpu <= MAX_NIC_GBIT_PER_GPU
        require(ok, "nic_gbit_per_gpu", f"must be a rate in (0, {MAX_NIC_GBIT_PER_GPU:,.0f}] Gb/s per GPU, "
                                        f"got {nic_gbit_per_gpu!r}")
        out = replace(out, nic_bytes_per_s=float(nic_gbit_per_gpu) * GBIT)
    if gpus_per_node is not None:
        require(isinstance(gpus_per_node, int) and not isinstance(gpus_per_node, bool)
                and 1 <= gpus_per_node <= MAX_GPUS_PER_NODE, "gpus_per_node",
                f"must be a whole number in 1..{MAX_GPUS_PER_NODE:,}, got {gpus_per_node!r}")
        node_domain = system.scaleup_domain == system.gpus_per_node
        out = replace(out, gpus_per_node=gpus_per_node,
                      scaleup_domain=gpus_per_node if node_domain else system.scaleup_domain)
    return out


def get_system(key: str) -> SystemSpec:
    """The catalog system ``key``, or an :class:`InputError` listing the known keys."""
    cat = system_catalog()
    if key not in cat:
        raise InputError("system", f"unknown system {key!r}; known: {', '.join(sorted(cat))}")
    return cat[key]
