"""Device profiles: the fits of ``calibrate``'s measurements (least squares, nccl-tests' bus factors),
the :class:`Profile` they make, its TOML file (written and read back, every figure checked), and the
:class:`MeasuredNetwork` that prices collectives from it. No PyTorch here."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, is_whole, require, subtable
from ..files import parse_toml, read_input, user_path
from ..hardware.kernels import hbm_frac
from ..hardware.specs import GpuSpec
from ..network.twolevel import KINDS, Array, TokenDispatch

DTYPES = ("fp32", "bf16", "fp16")


# ---- fitting ----------------------------------------------------------------------------------
def fit_affine(x: Array, t: Array, relative: bool = True) -> tuple[float, float]:
    """Least squares ``t = a + b x`` with a >= 0 (refit through the origin if a would be negative).

    ``relative``: every point weighs alike (relative errors) - right for one kernel over sizes.
    Otherwise plain least squares, whose slope is the time-weighted (harmonic) mean over a mix of
    kernels - right when several kinds of kernel share one parameter.
    """
    xs, ts = np.asarray(x, dtype=float), np.asarray(t, dtype=float)
    require(xs.size >= 2 and xs.size == ts.size, "fit", "needs two or more (x, t) points of equal count")
    require(bool(np.ptp(xs) > 0), "fit", "needs at least two distinct sizes")
    # relative weights: every point counts alike whatever its size
    w = 1.0 / np.maximum(ts, 1e-12) if relative else np.ones_like(ts)
    A = np.stack([np.ones_like(xs), xs], axis=1) * w[:, None]
    (a, b), *_ = np.linalg.lstsq(A, ts * w, rcond=None)
    if a < 0:
        a, b = 0.0, float(np.sum(xs * ts * w * w) / np.sum(xs * xs * w * w))
    require(b > 0, "fit", "time does not grow with size: measurements too noisy")
    return float(a), float(b)


def bus_factor(kind: str, n: Array) -> Array:
    """nccl-tests bus-bandwidth factor: busbw = algbw x factor (collectives.md section 2)."""
    nn = np.asarray(n, dtype=float)
    if kind == "all_reduce":
        return 2.0 * (nn - 1.0) / nn
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (nn - 1.0) / nn
    if kind == "p2p":
        return np.ones_like(nn)
    raise InputError("collective", f"unknown kind {kind!r}; allowed: {', '.join(KINDS)}")


def fit_collective(kind: str, sizes_bytes: Array, nranks: int, seconds: Array) -> tuple[float, float]:
    """(alpha_s, busbw_bytes_per_s) of ``t = alpha + f S / busbw``."""
    a, b = fit_affine(np.asarray(sizes_bytes, dtype=float) * bus_factor(kind, nranks), seconds)
    return a, 1.0 / b


# ---- profile ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    device: str
    kind: str  # cpu | cuda
    threads: int
    memory_bytes: float
    gemm: dict[str, dict[str, float]]  # dtype -> {rate_flops_per_s, overhead_s}
    memory_bytes_per_s: float  # achieved by memory-bound training kernels
    op_overhead_s: float
    copy_bytes_per_s: float = 0.0  # raw large-copy bandwidth
    launch_s: float = 0.0  # host time to issue one kernel into a busy queue (0: not measured)
    attention: dict[str, float]  # dtype, fwd_flops_per_s, bwd_flops_per_s
    collectives: dict[str, dict[str, float]] = field(default_factory=dict)  # kind -> alpha_s, busbw, nranks
    backend: str = ""
    source: str = "supercluster calibrate"
    points: dict[str, list[list[float]]] = field(default_factory=dict)

    def gpu_spec(self, base: GpuSpec | None = None) -> GpuSpec:
        """A GpuSpec whose rates are the measured ones (catalog ``base`` keeps its datasheet peaks)."""
        peaks: dict[str, float] = dict(base.peak_flops_per_s) if base else {}
        fracs: dict[str, float] = dict(base.gemm_frac) if base else {}
        for dt, g in self.gemm.items():
            rate = g["rate_flops_per_s"]
            if base and base.peak_flops_per_s.get(dt, 0.0) > 0:
                fracs[dt] = rate / base.peak_flops_per_s[dt]
            else:
                peaks[dt], fracs[dt] = rate, 1.0
        att_dt = self.attention.get("dtype", "fp32")
        att_peak = peaks.get(str(att_dt), 0.0)
        attention = None
        if att_peak > 0 and self.attention.get("fwd_flops_per_s"):
            attention = (self.attention["fwd_flops_per_s"] / att_peak, self.attention["bwd_flops_per_s"] / att_peak)
        # (its GEMM rates were measured in situ: no tensor-core conversion, the roofline prices them)
        common = dict(peak_flops_per_s=peaks, gemm_frac=fracs, clock_frac=1.0,
                      hbm_bytes_per_s=self.memory_bytes_per_s / hbm_frac(), op_overhead_s=self.op_overhead_s,
                      attention_frac=attention, gemm_tensor_frac={})
        if base:
            return dataclasses.replace(base, **common, sources=f"{base.sources}; calibrated: {self.source}")
        return GpuSpec(key="calibrated", name=self.device, arch="calibrated", year=0, mamf_flops_per_s={},
                       hbm_bytes=self.memory_bytes, scaleup_bytes_per_s=0.0, scaleup_domain=1,
                       allreduce_busbw_bytes_per_s=0.0, tdp_w=0.0, price_usd=0.0, system="dgx-h100",
                       sources=self.source, speed_sigma=0.0, **common)  # type: ignore[arg-type]

    def network(self, fallback: Any = None) -> MeasuredNetwork:
        return MeasuredNetwork(params=self.collectives, fallback=fallback)

    def to_toml(self) -> str:
        lines = ["# supercluster device profile", f"source = {_q(self.source)}", "", "[device]",
                 f"name = {_q(self.device)}", f"kind = {_q(self.kind)}", f"threads = {self.threads}",
                 f"memory_bytes = {self.memory_bytes:.6g}", "", "[memory]",
                 f"bytes_per_s = {self.memory_bytes_per_s:.6g}", f"op_overhead_s = {self.op_overhead_s:.6g}",
                 f"copy_bytes_per_s = {self.copy_bytes_per_s:.6g}", f"launch_s = {self.launch_s:.6g}"]
        for dt, g in self.gemm.items():
            lines += ["", f"[gemm.{dt}]", f"rate_flops_per_s = {g['rate_flops_per_s']:.6g}",
                      f"overhead_s = {g['overhead_s']:.6g}"]
        if self.attention:
            lines += ["", "[attention]", f"dtype = {_q(str(self.attention['dtype']))}",
                      f"fwd_flops_per_s = {self.attention['fwd_flops_per_s']:.6g}",
                      f"bwd_flops_per_s = {self.attention['bwd_flops_per_s']:.6g}"]
        if self.collectives:
            lines += ["", "[collectives]", f"backend = {_q(self.backend)}"]
            for k, c in self.collectives.items():
                lines += [f"[collectives.{k}]", f"alpha_s = {c['alpha_s']:.6g}",
                          f"busbw_bytes_per_s = {c['busbw_bytes_per_s']:.6g}", f"nranks = {int(c['nranks'])}"]
        if self.points:
            lines += ["", "[points]  # raw measurements: [size or flops, seconds]"]
            for k, pts in self.points.items():
                lines.append(f"{k} = [{', '.join(f'[{a:.6g}, {b:.6g}]' for a, b in pts)}]")
        return "\n".join(lines) + "\n"


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


#: A per-operation or per-collective overhead above a second is no measurement of a kernel or a message
MAX_OVERHEAD_S = 1.0


def _figure(t: dict[str, Any], key: str, where: str, positive: bool = True, default: float | None = None,
            at_most: float = math.inf) -> float:
    """A profile number: finite, at least 1 (``positive``: a rate, a size, a count) or >= 0, and at
    most ``at_most``; ``default`` when absent. (A rate of 1e-308 is positive, and overflows a step to
    inf; so does an overhead of 1e307 s.)"""
    v = t.get(key, default)
    require(v is not None, f"profile {where}{key}", "missing")
    low = 1.0 if positive else 0.0
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and low <= v <= at_most
    require(ok, f"profile {where}{key}", f"must be a finite number from {low:g} to {at_most:g}, got {v!r}")
    return float(v)


def load_profile(path: str | Path) -> Profile:
    """A device profile written by ``calibrate`` (or by hand): every rate finite and positive, every
    overhead finite and non-negative; an error names the field."""
    p = user_path(path, "profile")
    require(p.is_file(), "profile", f"no such file: {p}")
    t = parse_toml(read_input(p, "profile"), "profile", f"{p}: ")
    for name in ("device", "memory"):
        require(name in t, f"profile {name}", f"{p}: missing the [{name}] table")
    dev, mem = subtable(t, "device", "profile device"), subtable(t, "memory", "profile memory")
    gemm = {}
    for dt, g in subtable(t, "gemm", "profile gemm").items():
        require(isinstance(g, dict), f"profile gemm.{dt}", f"must be a table, got {g!r}")
        gemm[dt] = {"rate_flops_per_s": _figure(g, "rate_flops_per_s", f"gemm.{dt}."),
                    "overhead_s": _figure(g, "overhead_s", f"gemm.{dt}.", positive=False, at_most=MAX_OVERHEAD_S)}
    require(bool(gemm), "profile gemm", f"{p}: needs at least one [gemm.<dtype>] table")
    coll_t = dict(subtable(t, "collectives", "profile collectives"))
    backend = str(coll_t.pop("backend", ""))
    coll = {}
    for k, c in coll_t.items():
        require(k in KINDS, "profile collectives", f"unknown kind {k!r}; allowed: {', '.join(KINDS)}")
        require(isinstance(c, dict), f"profile collectives.{k}", f"must be a table, got {c!r}")
        where = f"collectives.{k}."
        coll[k] = {"alpha_s": _figure(c, "alpha_s", where, positive=False, at_most=MAX_OVERHEAD_S),
                   "busbw_bytes_per_s": _figure(c, "busbw_bytes_per_s", where),
                   "nranks": _figure(c, "nranks", where)}
        require(coll[k]["nranks"] >= 2 and coll[k]["nranks"].is_integer(), f"profile {where}nranks",
                f"must be a whole number >= 2, got {c['nranks']!r}")
    att = dict(subtable(t, "attention", "profile attention"))
    if att:
        require(isinstance(att.get("dtype", "bf16"), str), "profile attention.dtype", "must be a dtype name")
        for key in ("fwd_flops_per_s", "bwd_flops_per_s"):
            att[key] = _figure(att, key, "attention.")
    threads = dev.get("threads", 0)
    require(is_whole(threads) and threads >= 0, "profile device.threads",
            f"must be a whole number >= 0, got {threads!r}")
    for key in ("name", "kind"):
        require(isinstance(dev.get(key), str), f"profile device.{key}", f"must be text, got {dev.get(key)!r}")
    return Profile(device=dev["name"], kind=dev["kind"], threads=int(threads),
                   memory_bytes=_figure(dev, "memory_bytes", "device."), gemm=gemm,
                   memory_bytes_per_s=_figure(mem, "bytes_per_s", "memory."),
                   op_overhead_s=_figure(mem, "op_overhead_s", "memory.", positive=False, at_most=MAX_OVERHEAD_S),
                   copy_bytes_per_s=_figure(mem, "copy_bytes_per_s", "memory.", positive=False, default=0.0),
                   launch_s=_figure(mem, "launch_s", "memory.", positive=False, default=0.0, at_most=MAX_OVERHEAD_S),
                   attention=att, collectives=coll, backend=backend, source=str(t.get("source", p.name)))


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredNetwork:
    """Collectives priced from measured alpha and bus bandwidth; unmeasured kinds reuse all_reduce's
    (then all_gather's, ...), groups larger than the measured one go to ``fallback`` when given."""

    params: dict[str, dict[str, float]]
    fallback: Any = None

    def _pick(self, kind: str) -> dict[str, float]:
        for k in (kind, "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p"):
            if k in self.params:
                return self.params[k]
        raise InputError("profile", "has no [collectives] measurements: calibrate with --nproc >= 2")

    def collective_time_s(self, kind: str, size_bytes: Array, group_size: Array, stride: Array,
                          dedup: TokenDispatch | None = None) -> Array:
        """(``dedup``: a measured collective has no domains to skip, so only the fallback applies it.)"""
        require(kind in KINDS, "collective", f"unknown kind {kind!r}; allowed: {', '.join(KINDS)}")
        g = np.asarray(group_size, dtype=float)
        if not self.params and self.fallback is None:
            return np.where(g > 1, np.inf, 0.0)
        if not self.params:
            return self.fallback.collective_time_s(kind, size_bytes, group_size, stride, dedup)
        c = self._pick(kind)
        t = c["alpha_s"] + bus_factor(kind, np.maximum(g, 2.0)) * np.asarray(size_bytes, dtype=float) / c[
            "busbw_bytes_per_s"]
        if self.fallback is not None:
            big = self.fallback.collective_time_s(kind, size_bytes, group_size, stride, dedup)
            t = np.where(g > c["nranks"], big, t)
        return np.where(g > 1, t, 0.0)

    def all_to_all_paths_s(self, size_bytes: Array, group_size: Array, stride: Array,
                           dedup: TokenDispatch | None = None) -> tuple[Array, Array]:
        """(A measured all-to-all does not tell its paths apart: NaN where :meth:`collective_time_s`
        prices the group from the measurement, the fallback's split where it hands the group on.)"""
        g = np.asarray(group_size, dtype=float)
        unknown = np.full(np.broadcast(np.asarray(size_bytes, dtype=float), g).shape, np.nan)
        if self.fallback is None:
            return unknown, unknown
        up, out = self.fallback.all_to_all_paths_s(size_bytes, group_size, stride, dedup)
        if not self.params:
            return up, out
        measured = g <= self._pick("all_to_all")["nranks"]
        return np.where(measured, np.nan, up), np.where(measured, np.nan, out)


def catalog_profile(gpu: GpuSpec) -> Profile:
    """A profile carrying a catalog GPU's compute figures, for clusters that bring only nccl-tests output."""
    from ..hardware.kernels import attention_efficiency

    att = attention_efficiency("flash", gpu.arch)
    peak = gpu.peak("bf16") * gpu.clock_frac
    return Profile(device=f"{gpu.name} (catalog)", kind="cuda", threads=0, memory_bytes=gpu.hbm_bytes,
                   gemm={"bf16": {"rate_flops_per_s": gpu.gemm_flops_per_s("bf16"), "overhead_s": 0.0}},
                   memory_bytes_per_s=gpu.hbm_bytes_per_s * hbm_frac(), op_overhead_s=0.0,
                   attention={"dtype": "bf16", "fwd_flops_per_s": peak * att.fwd_frac,
                              "bwd_flops_per_s": peak * att.bwd_frac},
                   source=f"catalog {gpu.key}: {gpu.sources}")


# ---- nccl-tests -------------------------------------------------------------------------------
