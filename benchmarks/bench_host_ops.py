"""Host cost of the Python-side tensor views a framework builds per data-parallel rank (one core).

DeepSpeed before v0.4 builds one ``narrow`` view per rank in a Python loop before each ZeRO-3 gather
(``_allgather_param``; ``grad.view(-1).narrow`` before each reduce-scatter, ``_reduce_scatter_gradient``).
This measures that loop on the machine at hand, a check on kernels.toml [host] view_op_s (2 us, the
published cost of one tensor op from Python in the PyTorch of 2020, pytorch/pytorch#41383). Also
prints a tiny CPU matmul for scale (the GPU launch cost itself is NVIDIA's published figure,
kernels.toml [host] op_launch_s). Needs torch.

Prints its figures and, last, one JSON line with ``view_op_s``.
Run: ``python benchmarks/bench_host_ops.py [--ranks 2240 --repeats 20 --rounds 21]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2240)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=21)
    args = ap.parse_args()
    torch.set_num_threads(1)
    flat = torch.zeros(1 << 20)
    size = flat.numel() // args.ranks
    rounds = []
    for _ in range(args.rounds):  # the loop as DeepSpeed 0.3 writes it; the median round is reported
        t0 = time.perf_counter()
        for _ in range(args.repeats):
            parts = []
            for i in range(args.ranks):
                parts.append(flat.narrow(0, size * i, size))
        rounds.append((time.perf_counter() - t0) / (args.repeats * args.ranks))
    best = statistics.median(rounds)
    a, b = torch.zeros(4, 4), torch.zeros(4, 4)
    t0 = time.perf_counter()
    for _ in range(20_000):
        a @ b
    mm = (time.perf_counter() - t0) / 20_000
    cpu = platform.processor() or platform.machine()
    print(f"host: {cpu}, Python {platform.python_version()}, torch {torch.__version__}")
    print(f"one narrow view per rank, built in a Python loop ({args.ranks} ranks): {best * 1e6:.2f} us per rank "
          f"(median of {args.rounds} rounds, range {min(rounds) * 1e6:.2f}-{max(rounds) * 1e6:.2f})")
    print(f"a 4x4 matmul on the CPU, for scale: {mm * 1e6:.2f} us")
    print(json.dumps({"view_op_s": best, "cpu_matmul_4x4_s": mm, "ranks": args.ranks}))


if __name__ == "__main__":
    main()
