"""Layouts priced per second through the vectorized cost model (one core).

Prints its figures and, last, one JSON line with ``layouts_per_s``.
Run: ``python benchmarks/bench_layouts.py [--rows 200000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from supercluster.formats.load import load_model  # noqa: E402
from supercluster.hardware.specs import get_gpu  # noqa: E402
from supercluster.job import default_network  # noqa: E402
from supercluster.parallelism.framework import get_framework  # noqa: E402
from supercluster.perf.step import step_columns  # noqa: E402


def columns(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    pick = lambda values: rng.choice(np.array(values), size=n)  # noqa: E731
    tp, pp, cp = pick([1, 2, 4, 8]), pick([1, 2, 4, 8, 16]), pick([1, 2])
    dp = 16384 // (tp * pp * cp)
    return {"tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": np.ones(n), "vpp": np.where(pp > 1, pick([1, 2, 4]), 1),
            "mb": pick([1, 2]), "gbs": np.full(n, 4096), "seq": np.full(n, 8192), "zero": pick([0, 1, 2, 3]),
            "recompute": pick([0, 1, 2]), "sp": np.ones(n), "lowp": pick([0, 1])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    model, gpu, fw = load_model("llama3-405b"), get_gpu("h100-sxm"), get_framework("megatron")
    net = default_network(gpu, num_gpus=16384)  # the sized fabric, as the planner uses
    cols = columns(args.rows, np.random.default_rng(0))
    step_columns(model, gpu, net, fw, cols)  # warm-up
    best = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        out = step_columns(model, gpu, net, fw, cols)
        best = min(best, time.perf_counter() - t0)
    rate = args.rows / best
    from supercluster.planner.search import plan

    t0 = time.perf_counter()
    res = plan(model, gpu, 16384, global_batch=2048, seq_len=8192, framework=fw)
    plan_s = time.perf_counter() - t0
    print(f"full planner search, Llama 3 405B on 16,384 H100: {res.evaluated:,} layouts, {res.feasible:,} fit, "
          f"{plan_s:.2f} s; best {res.best.layout.short()} {res.best.step_time_s:.3f} s")
    print(f"model llama3-405b on 16,384 h100-sxm; {args.rows:,} layouts per call; best of {args.repeats}")
    print(f"seconds per call {best:.4f}; layouts per second {rate:,.0f}")
    print(f"median predicted step time {np.median(out['step_time_s']):.3f} s")
    print(json.dumps({"layouts_per_s": rate, "rows": args.rows, "seconds": best, "plan_seconds": plan_s}))


if __name__ == "__main__":
    main()
