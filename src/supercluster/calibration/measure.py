"""Measurement with PyTorch on this machine (CPU or CUDA): the timers, the grids and the kernels that
:func:`~supercluster.calibration.calibrate.calibrate` fits into a device profile, and the collectives its
worker processes time (see that module's docstring for what is measured and how it is fitted)."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, require
from ..network.twolevel import KINDS
from .profile import DTYPES, Profile, fit_affine


def require_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise InputError("torch", "not installed: pip install 'supercluster-planner[calibrate]' "
                                  "(CPU wheel: pip install torch==2.13.0)") from None
    return torch


def torch_dtype(name: str) -> Any:
    torch = require_torch()
    require(name in DTYPES, "dtype", f"unknown {name!r}; allowed: {', '.join(DTYPES)}")
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _synchronizer(device: Any) -> Callable[[], Any]:
    """What waits for ``device``'s queued work: CUDA's synchronize, nothing on a CPU."""
    torch = require_torch()
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def timer(device: Any, fn: Callable[[], Any], min_time_s: float, warmup: int = 2, max_reps: int = 10_000,
          min_reps: int = 3) -> float:
    """Median seconds per call of ``fn`` (synchronized; repeated until ``min_time_s`` has passed and at
    least ``min_reps`` calls, at most ``max_reps``)."""
    sync = _synchronizer(device)
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
    sync = _synchronizer(device)
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
    torch = require_torch()
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
    """GEMM, copy, memory-bound kernel, launch and attention measurements on one device, fitted into a
    :class:`Profile`."""
    torch = require_torch()
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
    points: dict[str, list[list[float]]] = {}
    gemm = {dt: _gemms(dev, dt, grid, say, points) for dt in dtypes}
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
    tdt = torch_dtype(dtypes[0])
    t0_mem, inv_mem = _memory_kernels(dev, tdt, grid, say, points)
    say("kernel launch (tiny kernels queued back to back)")
    launch_s, points["launch"] = measure_launch(dev, tdt)
    attention = _attention(dev, dtypes[0], grid, say)
    mem = torch.cuda.get_device_properties(dev).total_memory if dev.type == "cuda" else _host_memory()
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"cpu ({_cpu_name()}, {threads} threads)"
    return Profile(device=name, kind=dev.type, threads=threads, memory_bytes=float(mem), gemm=gemm,
                   memory_bytes_per_s=1.0 / inv_mem, op_overhead_s=t0_mem, copy_bytes_per_s=1.0 / inv_copy,
                   launch_s=launch_s, attention=attention, points=points)


def _gemms(dev: Any, dt: str, grid: Grid, say: Callable[[str], None],
           points: dict[str, list[list[float]]]) -> dict[str, float]:
    """The GEMM fit of one dtype: for each tokens x (in, out) of the grid, the forward, data-gradient
    and weight-gradient products timed and summed."""
    torch = require_torch()
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
    points[f"gemm_{dt}"] = [[f, s] for f, s in zip(flops, secs, strict=True)]
    return {"rate_flops_per_s": 1.0 / inv, "overhead_s": t0}


def _memory_kernels(dev: Any, tdt: Any, grid: Grid, say: Callable[[str], None],
                    points: dict[str, list[list[float]]]) -> tuple[float, float]:
    """(intercept s, seconds per byte) of the memory-bound kernels a layer runs (clone, add, GELU,
    LayerNorm) at activation sizes, each call synchronized; the same kernels issued back to back go
    to ``points`` for comparison."""
    torch = require_torch()
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
    points["memory_kernels"] = [[b, s] for b, s in zip(kmoved, ksecs, strict=True)]
    points["memory_kernels_queued"] = [[b, s] for b, s in zip(kmoved, queued, strict=True)]
    return fit_affine(kmoved, ksecs, relative=False)


def _attention(dev: Any, att_dt: str, grid: Grid, say: Callable[[str], None]) -> dict[str, Any]:
    """Causal SDPA forward and backward rates in the cost model's FLOP convention (forward 2 b h s^2 d,
    backward 2.5x)."""
    torch = require_torch()
    tdt = torch_dtype(att_dt)
    fl, tf, tb = [], [], []
    heads, hd, batch = 8, 64, 2
    for s in grid.attn_seq:
        say(f"attention {att_dt} s={s}")
        q, k, v = (torch.randn(batch, heads, s, hd, device=dev, dtype=tdt, requires_grad=True) for _ in range(3))
        fwd = lambda q=q, k=k, v=v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
        grad = torch.randn_like(fwd())

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
    return {"dtype": att_dt, "fwd_flops_per_s": 1.0 / inv_f, "bwd_flops_per_s": 1.0 / inv_b}


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
    torch = require_torch()
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
