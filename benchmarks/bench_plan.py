"""The planner's two speed promises, measured (one core): a plan for 16,384 GPUs in seconds, and a
study from one GPU to a million (best layout, failures, checkpoints, days at every size) in under
a minute.

The same plan under torchtitan is timed as well: its split leaves uneven chunks under most
interleavings, whose pipeline the cost model prices by walking the schedule
(:func:`supercluster.parallelism.schedule.makespan`) instead of the closed form.

Prints its figures and, last, one JSON line with ``plan_16k_s``, ``plan_layouts_per_s``,
``plan_16k_torchtitan_s`` and ``million_study_s``.
Run: ``python benchmarks/bench_plan.py [--model llama3-405b --gpu h100-sxm]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from supercluster.formats.load import load_model  # noqa: E402
from supercluster.hardware.specs import get_gpu  # noqa: E402
from supercluster.parallelism.framework import get_framework  # noqa: E402
from supercluster.planner.search import plan  # noqa: E402
from supercluster.reliability.run import RunOptions, scale_table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama3-405b")
    ap.add_argument("--gpu", default="h100-sxm")
    ap.add_argument("--study-gpu", default="gb200")
    args = ap.parse_args()
    model, gpu, fw = load_model(args.model), get_gpu(args.gpu), get_framework("nemo-megatron")  # the CLI default

    t0 = time.perf_counter()
    res = plan(model, gpu, 16_384, global_batch=2048, seq_len=8192, framework=fw)
    plan_s = time.perf_counter() - t0
    print(f"plan {model.name} on 16,384 {gpu.key}: {res.evaluated:,} layouts ({res.feasible:,} fit) in {plan_s:.2f} s"
          f" = {res.evaluated / plan_s / 1e3:.0f} k layouts/s; best {res.best.layout.label()}, "
          f"{res.best.step_time_s:.3f} s per step")

    t0 = time.perf_counter()
    tt = plan(model, gpu, 16_384, global_batch=2048, seq_len=8192, framework=get_framework("torchtitan"))
    tt_s = time.perf_counter() - t0
    print(f"plan {model.name} on 16,384 {gpu.key} under torchtitan: {tt.evaluated:,} layouts in {tt_s:.2f} s; "
          f"best {tt.best.layout.label()}, {tt.best.step_time_s:.3f} s per step")

    sizes = [4 ** k for k in range(11)]  # 1 .. 1,048,576, as `supercluster scale`
    study_gpu = get_gpu(args.study_gpu)
    t0 = time.perf_counter()
    rows = scale_table(model, study_gpu, sizes, framework=fw, options=RunOptions(trials=2000))
    study_s = time.perf_counter() - t0
    last = rows[-1]
    print(f"study 1 .. {sizes[-1]:,} {study_gpu.key} ({len(rows)} sizes, 2,000 Monte Carlo trials each): "
          f"{study_s:.2f} s; at {sizes[-1]:,}: {last['layout']}, ETTR p50 {last['ettr_p50']:.3f}")

    print(json.dumps({"plan_16k_s": plan_s, "plan_layouts_per_s": res.evaluated / plan_s,
                      "plan_16k_torchtitan_s": tt_s, "million_study_s": study_s}))


if __name__ == "__main__":
    main()
