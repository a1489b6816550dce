"""The closed-form contention against max-min fair flows on explicit fabric graphs, over a sweep.

Two- and three-tier fabrics of 16-port switches (one GPU per node, no NVLink: the scale-out part
the closed form prices), 64 to 768 GPUs whose leaves are all full, leaf and spine down:up 1:1 or
3:1; ring and all-to-all groups of 2 to 64 members at every rank stride that tiles the GPUs. Prints
how many cases agree exactly and within 10 %, and any that differ (about a minute on one core).
The tests keep 14 of these cases; this is the sweep behind the README's count.
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np

from supercluster.errors import InputError
from supercluster.hardware.specs import get_gpu, get_system
from supercluster.network.fabric import build_fabric, get_switch
from supercluster.network.flows import flow_slowdown

GROUPS = (2, 4, 6, 8, 12, 16, 24, 32, 48, 64)
STRIDES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 144, 192, 256)
SWEEP = ((2, (64, 96, 128, 192), ((1.0,), (3.0,))),
         (3, (192, 256, 288, 384, 512, 576), ((1.0, 1.0), (1.0, 3.0), (3.0, 1.0), (3.0, 3.0))))


def main() -> None:
    gpu = get_gpu("h100-sxm")
    system = dataclasses.replace(get_system(gpu.system), gpus_per_node=1, scaleup_domain=1)
    switch = dataclasses.replace(get_switch("quantum-2"), capacity_bytes_per_s=16 * 400e9 / 8)  # 16 ports
    t0 = time.perf_counter()
    summary = {}
    for tiers, sizes, overs in SWEEP:
        cases = []
        for n in sizes:
            for over in overs:
                try:
                    fab = build_fabric(n, gpu, system, switch=switch, oversubscription=over, tiers=tiers)
                except InputError:
                    continue
                for pattern in ("ring", "uniform"):
                    for group in GROUPS:
                        for stride in STRIDES:
                            if n % (group * stride) or (pattern == "uniform" and group * n > 8192):
                                continue
                            try:
                                explicit = flow_slowdown(fab, group, stride, pattern).slowdown
                            except InputError:  # leaves not all full: outside the check
                                continue
                            closed = float(fab.contention(pattern, np.array([group]), np.array([stride]))[0])
                            cases.append((n, over, pattern, group, stride, explicit, closed))
        err = [abs(c / e - 1) for *_, e, c in cases]
        for case, e in zip(cases, err, strict=True):
            if e > 1e-9:
                print("differs:", case)
        summary[f"{tiers}_tiers"] = {"cases": len(cases), "identical": sum(e < 1e-9 for e in err),
                                     "within_10pct": sum(e <= 0.10 for e in err), "max_rel_err": max(err)}
        print(f"{tiers} tiers: {len(cases)} cases, {summary[f'{tiers}_tiers']['identical']} identical, "
              f"max relative error {max(err):.2e}")
    summary["seconds"] = time.perf_counter() - t0
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
