"""Fabric sizing and collective pricing from one GPU to a million (one core).

Times, warm (after one call that loads the catalogs): sizing and summarising the default fabric
for 1 .. 1,048,576 GB200s; the side-by-side options table for a million GPUs; a vectorised
all-reduce over 100,000 (bytes, group) pairs on the million-GPU fabric; and the explicit-graph
max-min fair flow check on a 1,024-GPU fabric. Prints its figures and, last, one JSON line with
``million_gpu_fabric_s`` (sizing + summary), ``options_s``, ``collectives_per_s`` and ``flow_check_s``.
Run: ``python benchmarks/bench_fabric.py [--gpu gb200]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from supercluster.hardware.specs import get_gpu, get_system  # noqa: E402
from supercluster.network.fabric import FabricNetwork, build_fabric, compare_options, fabric_summary  # noqa: E402
from supercluster.network.flows import flow_slowdown  # noqa: E402

MILLION = 1_048_576


def best_of(fn, repeat: int = 5) -> float:
    """Fastest of ``repeat`` timed calls, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", default="gb200")
    ap.add_argument("--pairs", type=int, default=100_000)
    args = ap.parse_args()
    gpu = get_gpu(args.gpu)
    system = get_system(gpu.system)
    fabric_summary(build_fabric(MILLION, gpu, system), gpu, system)  # load catalogs once

    print(f"{gpu.key} in {system.key}: default fabric, sized and summarised (warm, best of 5)")
    sizes = (1, 8, 72, 1024, 16_384, 131_072, MILLION)
    per_size = {}
    for n in sizes:
        dt = best_of(lambda n=n: fabric_summary(build_fabric(n, gpu, system), gpu, system))
        fab = build_fabric(n, gpu, system)
        per_size[n] = dt
        print(f"  {n:>9,} GPUs: {len(fab.tiers)} tiers, {fab.total_switches:>7,} switches  {dt * 1e3:7.2f} ms")

    options_s = best_of(lambda: compare_options(MILLION, gpu, system), repeat=3)
    n_opts = len(compare_options(MILLION, gpu, system))
    print(f"options table for {MILLION:,} GPUs ({n_opts} feasible switch / plane choices): {options_s * 1e3:.1f} ms")

    net = FabricNetwork.for_fabric(build_fabric(MILLION, gpu, system), gpu, system)
    rng = np.random.default_rng(0)
    nbytes = 10.0 ** rng.uniform(3, 12, args.pairs)
    group = 2 ** rng.integers(1, 21, args.pairs)
    stride = 2 ** rng.integers(0, 4, args.pairs)
    coll_s = best_of(lambda: net.collective_time_s("all_reduce", nbytes, group, stride))
    print(f"all-reduce priced for {args.pairs:,} (bytes, group, stride) on the million-GPU fabric: "
          f"{coll_s * 1e3:.1f} ms = {args.pairs / coll_s / 1e6:.2f} M per second")

    small = build_fabric(1024, gpu, system)
    flow_s = best_of(lambda: flow_slowdown(small, 1024, 1, "ring"), repeat=1)
    print(f"explicit-graph max-min fair flow check, 1,024 GPUs, ring over all: {flow_s:.2f} s")

    print(json.dumps({"gpu": gpu.key, "million_gpu_fabric_s": per_size[MILLION], "options_s": options_s,
                      "collectives_per_s": args.pairs / coll_s, "flow_check_s": flow_s}))


if __name__ == "__main__":
    main()
