"""Calibration: measure this machine, fit the cost model's parameters, write a device profile.

Measurements (PyTorch, CPU or CUDA; ``torch`` is the optional extra ``supercluster-planner[calibrate]``):

* GEMMs at training shapes per dtype - for tokens x (in, out) the forward, data-gradient and
  weight-gradient products, as TransformerEngine's GEMM profiling does - fit
  ``t = t0 + flops / R`` (R: sustained GEMM rate, t0: fixed cost per call);
* memory-bound kernels at activation sizes (copy, add, GELU, LayerNorm; bytes = inputs read +
  outputs written): fit ``t = t0 + bytes / B``; B is the bandwidth these kernels achieve (what
  the cost model's memory-bound line needs), t0 the per-kernel overhead. Plain large copies give
  the raw memory bandwidth, reported for comparison with the catalog's HBM figure;
* causal scaled-dot-product attention, forward and backward; rates in the cost model's FLOP
  convention (causal forward 2 b h s^2 d, backward 2.5x);
* with ``nproc`` > 1, collectives over a size grid on local processes (gloo on CPU, NCCL on
  CUDA): fit ``t = alpha + f(kind, n) S / busbw`` with nccl-tests' bus factors f.

Fits are linear least squares (:func:`fit_affine`). The profile is a TOML file that
``estimate --profile`` and ``verify`` turn into a :class:`~supercluster.hardware.specs.GpuSpec` and a
:class:`MeasuredNetwork` in place of the catalog figures. nccl-tests output parses into the same
``[collectives]`` table (:func:`parse_nccl_tests`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, is_whole, require, subtable
from ..files import parse_toml, read_input
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
    p = Path(path)
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
_NCCL_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
_NCCL_KIND = {"all_reduce": "all_reduce", "allreduce": "all_reduce", "all_gather": "all_gather",
              "allgather": "all_gather", "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
              "alltoall": "all_to_all", "all_to_all": "all_to_all", "sendrecv": "p2p"}


def parse_nccl_tests(text: str, kind: str | None = None, name: str = "") -> dict[str, Any]:
    """Rows (size, time, algbw, busbw) of one nccl-tests run and the fitted alpha / busbw.

    The collective comes from ``kind``, a "<name>_perf" token in the text or ``name`` (a file name);
    the rank count from the "#  Rank" lines. Times are the out-of-place columns (microseconds).
    """
    low = (text + " " + name).lower()
    if kind is None:
        m = re.search(r"(all_reduce|allreduce|all_gather|allgather|reduce_scatter|reducescatter|alltoall|"
                      r"all_to_all|sendrecv)(_perf)?", low)
        require(m is not None, "kind", "cannot tell the collective: pass --kind (all_reduce, all_gather, ...)")
        assert m is not None
        kind = _NCCL_KIND[m.group(1)]
    require(kind in KINDS, "kind", f"unknown {kind!r}; allowed: {', '.join(KINDS)}")
    ranks = len(re.findall(r"^#\s+Rank\s+\d+", text, flags=re.MULTILINE))
    rows = []
    for line in text.splitlines():
        m = _NCCL_ROW.match(line)
        if m:
            rows.append((float(m.group(1)), float(m.group(6)) * 1e-6, float(m.group(7)) * 1e9,
                         float(m.group(8)) * 1e9))
    require(len(rows) >= 2, "nccl-tests", "found fewer than two result rows (size count type redop root time ...)")
    require(ranks >= 2, "nccl-tests", "found no '#  Rank' lines: cannot tell how many GPUs took part")
    sizes = np.array([r[0] for r in rows])
    secs = np.array([r[1] for r in rows])
    big = sizes >= np.percentile(sizes, 50)  # fit the bandwidth on the upper half, alpha on all
    alpha, bw = fit_collective(kind, sizes, ranks, secs)
    _, bw_big = fit_collective(kind, sizes[big], ranks, secs[big]) if big.sum() >= 2 else (alpha, bw)
    return {"kind": kind, "nranks": ranks, "rows": rows, "alpha_s": alpha, "busbw_bytes_per_s": bw_big,
            "max_busbw_bytes_per_s": max(r[3] for r in rows)}


# ---- measurement (torch) ------------------------------------------------------------------------
def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise InputError("torch", "not installed: pip install 'supercluster-planner[calibrate]' "
                                  "(CPU wheel: pip install torch==2.13.0)") from None
    return torch


def torch_dtype(name: str) -> Any:
    torch = _torch()
    require(name in DTYPES, "dtype", f"unknown {name!r}; allowed: {', '.join(DTYPES)}")
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def timer(device: Any, fn: Callable[[], Any], min_time_s: float, warmup: int = 2, max_reps: int = 10_000,
          min_reps: int = 3) -> float:
    """Median seconds per call of ``fn`` (synchronized; repeated until ``min_time_s`` has passed and at
    least ``min_reps`` calls, at most ``max_reps``)."""
    torch = _torch()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    samples: list[float] = []
    start = time.perf_counter()
    while (time.perf_counter() - start < min_time_s or len(samples) < min_reps) and len(samples) < max_reps:
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def timer_queued(device: Any, fn: Callable[[], Any], calls: int, rounds: int = 5) -> float:
    """Median seconds per call of ``fn`` issued ``calls`` times back to back with one synchronize: on a
    GPU the longer of the host's issue time and the kernel's own, as in a training step's stream."""
    torch = _torch()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    fn()
    sync()
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / calls)
    return statistics.median(samples)


def measure_launch(dev: Any, tdt: Any, calls: int = 400) -> tuple[float, list[list[float]]]:
    """Host issue cost per kernel: tiny kernels (an in-place add, a GELU, a LayerNorm, a 16 x 16 product)
    queued back to back with one synchronize, so the GPU's side is negligible and each call costs what
    PyTorch's eager dispatch and the CUDA launch take on this host. The median of the four kernels."""
    torch = _torch()
    x = torch.zeros(16, 16, device=dev, dtype=tdt)
    w = torch.zeros(16, 16, device=dev, dtype=tdt)
    ln = torch.nn.LayerNorm(16, bias=False, device=dev, dtype=tdt)
    pts = []
    with torch.no_grad():
        for k, fn in enumerate((lambda: x.add_(1.0), lambda: torch.nn.functional.gelu(x), lambda: ln(x),
                                lambda: x @ w)):
            pts.append([float(k), timer_queued(dev, fn, calls)])
    return statistics.median(p[1] for p in pts), pts


@dataclass(frozen=True, slots=True)
class Grid:
    tokens: tuple[int, ...]
    gemm: tuple[tuple[int, int], ...]  # (in, out) features
    copy_mb: tuple[float, ...]
    attn_seq: tuple[int, ...]
    coll_bytes: tuple[int, ...]
    min_time_s: float


def grid_for(kind: str, quick: bool) -> Grid:
    if kind == "cuda":
        return Grid(tokens=(4096, 8192) if quick else (2048, 4096, 8192, 16384),
                    gemm=((4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192)) if quick else
                    ((2048, 2048), (4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192), (8192, 28672)),
                    copy_mb=(64, 256, 1024), attn_seq=(1024, 2048, 4096), coll_bytes=tuple(2 ** k for k in
                                                                                           range(20, 31, 2)),
                    min_time_s=0.05 if quick else 0.2)
    return Grid(tokens=(512, 1024) if quick else (512, 1024, 2048),
                gemm=((512, 512), (512, 2048), (2048, 512)) if quick else
                ((256, 256), (512, 512), (512, 2048), (2048, 512), (1024, 4096)),
                copy_mb=(1, 4, 16, 64) if quick else (1, 4, 16, 64, 256), attn_seq=(128, 256, 512),
                coll_bytes=tuple(2 ** k for k in range(12, 25, 3)), min_time_s=0.05 if quick else 0.2)


def measure_device(device_name: str = "auto", dtypes: tuple[str, ...] | None = None, quick: bool = False,
                   progress: Callable[[str], None] | None = None) -> Profile:
    """GEMM, copy and attention measurements on one device, fitted into a :class:`Profile`."""
    torch = _torch()
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    require(device_name in ("cpu", "cuda"), "device", f"must be cpu, cuda or auto, got {device_name!r}")
    require(device_name == "cpu" or torch.cuda.is_available(), "device", "CUDA is not available here")
    dev = torch.device(device_name)
    threads = int(os.environ.get("SUPERCLUSTER_THREADS", "0")) or torch.get_num_threads()
    torch.set_num_threads(threads)
    grid = grid_for(dev.type, quick)
    if dtypes is None:
        dtypes = ("bf16", "fp32") if dev.type == "cuda" else ("fp32",)
    say = progress or (lambda _msg: None)
    gemm: dict[str, dict[str, float]] = {}
    points: dict[str, list[list[float]]] = {}
    for dt in dtypes:
        tdt = torch_dtype(dt)
        flops, secs = [], []
        for tok in grid.tokens:
            for fin, fout in grid.gemm:
                say(f"GEMM {dt} {tok}x{fin}x{fout} fprop/dgrad/wgrad")
                x = torch.randn(tok, fin, device=dev, dtype=tdt)
                w = torch.randn(fout, fin, device=dev, dtype=tdt)
                g = torch.randn(tok, fout, device=dev, dtype=tdt)
                secs.append(sum(timer(dev, f, grid.min_time_s / 3) for f in (
                    lambda x=x, w=w: x @ w.t(), lambda g=g, w=w: g @ w, lambda g=g, x=x: g.t() @ x)))
                flops.append(3 * 2.0 * tok * fin * fout)
        t0, inv = fit_affine(flops, secs)
        gemm[dt] = {"rate_flops_per_s": 1.0 / inv, "overhead_s": t0}
        points[f"gemm_{dt}"] = [[f, s] for f, s in zip(flops, secs, strict=True)]
    moved, secs = [], []
    for mb in grid.copy_mb:
        say(f"copy {mb:g} MB")
        n = int(mb * 1e6 / 4)
        x = torch.empty(n, device=dev, dtype=torch.float32).normal_()
        y = torch.empty_like(x)
        secs.append(timer(dev, lambda x=x, y=y: y.copy_(x), grid.min_time_s))
        moved.append(2.0 * n * 4)
    _, inv_copy = fit_affine(moved, secs)
    points["copy"] = [[b, s] for b, s in zip(moved, secs, strict=True)]
    att_dt = dtypes[0]
    tdt = torch_dtype(att_dt)
    el = torch.empty((), dtype=tdt).element_size()
    kmoved, ksecs, queued = [], [], []
    for tok in grid.tokens:
        for _, width in grid.gemm:
            say(f"memory-bound kernels {tok}x{width}")
            x = torch.randn(tok, width, device=dev, dtype=tdt)
            y = torch.randn(tok, width, device=dev, dtype=tdt)
            ln = torch.nn.LayerNorm(width, bias=False, device=dev, dtype=tdt)
            nbytes = tok * width * el
            for fn, traffic in ((lambda x=x: x.clone(), 2), (lambda x=x, y=y: x + y, 3),
                                (lambda x=x: torch.nn.functional.gelu(x), 2), (lambda x=x, ln=ln: ln(x), 2)):
                with torch.no_grad():
                    ksecs.append(timer(dev, fn, grid.min_time_s / 4))
                    queued.append(timer_queued(dev, fn, 20, rounds=3))
                kmoved.append(float(traffic * nbytes))
    t0_mem, inv_mem = fit_affine(kmoved, ksecs, relative=False)
    points["memory_kernels"] = [[b, s] for b, s in zip(kmoved, ksecs, strict=True)]
    # (the same kernels issued back to back: what each costs inside a stream, for comparison)
    points["memory_kernels_queued"] = [[b, s] for b, s in zip(kmoved, queued, strict=True)]
    say("kernel launch (tiny kernels queued back to back)")
    launch_s, points["launch"] = measure_launch(dev, tdt)
    fl, tf, tb = [], [], []
    heads, hd, batch = 8, 64, 2
    for s in grid.attn_seq:
        say(f"attention {att_dt} s={s}")
        q, k, v = (torch.randn(batch, heads, s, hd, device=dev, dtype=tdt, requires_grad=True) for _ in range(3))
        fwd = lambda q=q, k=k, v=v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
        out = fwd()
        grad = torch.randn_like(out)

        def both(q=q, k=k, v=v, grad=grad) -> None:
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.backward(grad)

        t_f = timer(dev, fwd, grid.min_time_s)
        t_fb = timer(dev, both, grid.min_time_s)
        fl.append(2.0 * batch * heads * s * s * hd)  # causal: (QK^T + AV) x half the keys
        tf.append(t_f)
        tb.append(max(t_fb - t_f, 1e-9))
    _, inv_f = fit_affine(fl, tf)
    _, inv_b = fit_affine(2.5 * np.asarray(fl), tb)
    mem = torch.cuda.get_device_properties(dev).total_memory if dev.type == "cuda" else _host_memory()
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({_cpu_name()}, {threads} threads)"
    return Profile(device=name, kind=dev.type, threads=threads, memory_bytes=float(mem), gemm=gemm,
                   memory_bytes_per_s=1.0 / inv_mem, op_overhead_s=t0_mem, copy_bytes_per_s=1.0 / inv_copy,
                   launch_s=launch_s,
                   attention={"dtype": att_dt, "fwd_flops_per_s": 1.0 / inv_f, "bwd_flops_per_s": 1.0 / inv_b},
                   points=points)


def _host_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        return 0.0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def measure_collectives(sizes: tuple[int, ...], min_time_s: float) -> dict[str, Any]:
    """Run inside an initialised process group: time each collective over ``sizes`` (bytes)."""
    torch = _torch()
    import torch.distributed as dist

    n, rank = dist.get_world_size(), dist.get_rank()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if dist.get_backend() == "nccl" \
        else torch.device("cpu")
    out: dict[str, list[list[float]]] = {k: [] for k in KINDS}
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    for size in sizes:
        numel = max(n, size // 4 // n * n)
        x = torch.ones(numel, device=dev)
        full = torch.empty(numel * n, device=dev)
        part = torch.empty(numel // n, device=dev)
        y = torch.empty_like(x)
        ops: dict[str, Callable[[], Any]] = {
            "all_reduce": lambda x=x: dist.all_reduce(x),
            "all_gather": lambda x=x, full=full: gather(full, x),
            "reduce_scatter": lambda x=x, part=part: scatter(part, x),
            "all_to_all": lambda x=x, y=y: dist.all_to_all_single(y, x),
            "p2p": lambda x=x: _pingpong(dist, x, rank, n),
        }
        for kind, fn in ops.items():
            # Every rank must issue the same number of calls: agree on it first (max over ranks).
            dist.barrier()
            once = timer(dev, fn, 0.0, warmup=1, max_reps=1)
            probe = torch.tensor([once], device=dev)
            dist.all_reduce(probe, op=dist.ReduceOp.MAX)
            reps = int(min(200, max(3, min_time_s / max(float(probe.item()), 1e-9))))
            dist.barrier()
            t = timer(dev, fn, 0.0, warmup=0, max_reps=reps, min_reps=reps)
            tt = torch.tensor([t], device=dev)
            dist.all_reduce(tt, op=dist.ReduceOp.MAX)
            # nccl-tests sizes: all-gather counts the gathered output; p2p a round trip is two messages
            nbytes = numel * 4 * (n if kind == "all_gather" else 1)
            sec = float(tt.item()) / (2.0 if kind == "p2p" else 1.0)
            out[kind].append([float(nbytes), sec])
    return {"nranks": n, "backend": dist.get_backend(), "points": out}


def _pingpong(dist: Any, x: Any, rank: int, n: int) -> None:
    if rank == 0:
        dist.send(x, 1)
        dist.recv(x, 1)
    elif rank == 1:
        dist.recv(x, 0)
        dist.send(x, 0)


def fit_collective_points(res: dict[str, Any]) -> dict[str, dict[str, float]]:
    out = {}
    for kind, pts in res["points"].items():
        arr = np.asarray(pts, dtype=float)
        n = 2 if kind == "p2p" else res["nranks"]
        alpha, bw = fit_collective(kind, arr[:, 0], n, arr[:, 1])
        out[kind] = {"alpha_s": alpha, "busbw_bytes_per_s": bw, "nranks": float(n)}
    return out


def calibrate(nproc: int = 1, quick: bool = False, device: str = "auto", dtypes: tuple[str, ...] | None = None,
              timeout_s: float = 900.0, progress: Callable[[str], None] | None = None) -> Profile:
    """Measure and fit: one device here; with ``nproc`` > 1 also the collectives on local processes."""
    from .launch import run_workers

    require(isinstance(nproc, int) and nproc >= 1, "nproc", f"must be a positive integer, got {nproc!r}")
    threads = max(1, (os.cpu_count() or 1) // nproc) if device != "cuda" else None
    if threads:
        os.environ["SUPERCLUSTER_THREADS"] = str(threads)
    if nproc == 1:
        return measure_device(device, dtypes, quick, progress)
    # With several processes the device is measured inside them, all at once: they share cores,
    # caches and memory bandwidth during training, so the rates must be measured under that load.
    torch = _torch()
    kind = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    grid = grid_for(kind, quick)
    if progress:
        progress(f"device and collectives on {nproc} concurrent processes")
    res = run_workers("collectives", {"sizes": list(grid.coll_bytes), "min_time_s": grid.min_time_s,
                                      "device": kind, "quick": quick, "dtypes": list(dtypes) if dtypes else None},
                      nproc, timeout_s=timeout_s, threads_per_proc=threads)
    prof = Profile(**res["device"])
    coll = fit_collective_points(res)
    pts = dict(prof.points)
    for k, p in res["points"].items():
        pts[f"coll_{k}"] = p
    return dataclasses.replace(prof, collectives=coll, backend=res["backend"], points=pts)
