"""Calibration: measure this machine, fit the cost model's parameters, write a device profile.

Measurements (PyTorch, CPU or CUDA; ``torch`` is the optional extra ``supercluster-planner[calibrate]``):

* GEMMs at training shapes per dtype - for tokens x (in, out) the forward, data-gradient and
  weight-gradient products, as TransformerEngine's GEMM profiling does - fit
  ``t = t0 + flops / R`` (R: sustained GEMM rate, t0: fixed cost per call);
* memory-bound kernels at activation sizes (copy, add, GELU, LayerNorm; bytes = inputs read +
  outputs written): fit ``t = t0 + bytes / B``; B is the bandwidth these kernels achieve (what
  the cost model's memory-bound line needs), t0 the per-kernel overhead. Plain large copies give
  the raw memory bandwidth, reported for comparison with the catalog's HBM figure;
* the host's cost to issue a kernel: tiny kernels queued back to back with one synchronize
  (``launch_s``; the memory-bound kernels are also timed that way, kept as raw points);
* causal scaled-dot-product attention, forward and backward; rates in the cost model's FLOP
  convention (causal forward 2 b h s^2 d, backward 2.5x);
* with ``nproc`` > 1, collectives over a size grid on local processes (gloo on CPU, NCCL on
  CUDA): fit ``t = alpha + f(kind, n) S / busbw`` with nccl-tests' bus factors f.

The measurements themselves (PyTorch) are in :mod:`.measure`; the fits, the profile and its file
in :mod:`.profile` (no PyTorch). Fits are linear least squares (:func:`~.profile.fit_affine`). The
profile is a TOML file that ``estimate --profile`` and ``verify`` turn into a
:class:`~supercluster.hardware.specs.GpuSpec` and a :class:`~.profile.MeasuredNetwork` in place of the
catalog figures. nccl-tests output parses into the same ``[collectives]`` table
(:func:`parse_nccl_tests`).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import require
from ..network.twolevel import KINDS
from .profile import Profile, fit_collective

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
    from .measure import grid_for, measure_device, require_torch

    require(isinstance(nproc, int) and nproc >= 1, "nproc", f"must be a positive integer, got {nproc!r}")
    threads = max(1, (os.cpu_count() or 1) // nproc) if device != "cuda" else None
    if threads:
        os.environ["SUPERCLUSTER_THREADS"] = str(threads)
    if nproc == 1:
        return measure_device(device, dtypes, quick, progress)
    # With several processes the device is measured inside them, all at once: they share cores,
    # caches and memory bandwidth during training, so the rates must be measured under that load.
    torch = require_torch()
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
