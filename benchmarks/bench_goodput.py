"""Monte Carlo of a 100-day run on 1,048,576 GPUs with 10,000 trials (one core).

Prints its figures and, last, one JSON line with ``seconds``.
Run: ``python benchmarks/bench_goodput.py [--gpus 1048576 --days 100 --trials 10000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from supercluster.formats.load import load_model  # noqa: E402
from supercluster.reliability.goodput import (
    DAY_S,
    Recovery,
    RunSpec,
    load_failure_model,
    plan_checkpoint,
    simulate,
)  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=1_048_576)
    ap.add_argument("--days", type=float, default=100.0)
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--interval-min", type=float, default=5.0)
    args = ap.parse_args()
    rate, _ = load_failure_model("llama3").rates_per_s(args.gpus, 8)
    rec = Recovery.default()
    ck = plan_checkpoint(load_model("llama3-405b").num_params, args.gpus, asynchronous=True)
    recovery = rec.detect_s + rec.restart_s / rec.warm_standby_speedup + ck.restore_s
    spec = RunSpec(work_s=args.days * DAY_S, rate_per_s=rate, planned_per_s=0.87 / DAY_S,
                   interval_s=args.interval_min * 60, stall_s=ck.stall_s, lag_s=ck.lag_s, recovery_s=recovery,
                   planned_recovery_s=rec.restart_s / rec.warm_standby_speedup + ck.restore_s)
    t0 = time.perf_counter()
    res = simulate(spec, trials=args.trials, seed=0)
    dt = time.perf_counter() - t0
    print(f"{args.gpus:,} GPUs, {args.days:g} days of work, {args.trials:,} trials, hot spares, async checkpoints")
    print(f"job MTBF {1 / rate / 60:.2f} min; interruptions p50 {np.median(res.interruptions):,.0f}; "
          f"ETTR p10/p50/p90 {np.percentile(res.ettr, 10):.3f}/{np.median(res.ettr):.3f}/"
          f"{np.percentile(res.ettr, 90):.3f}")
    print(f"seconds {dt:.4f}")
    print(json.dumps({"seconds": dt, "trials": args.trials, "gpus": args.gpus, "days": args.days}))


if __name__ == "__main__":
    main()
