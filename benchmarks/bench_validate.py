"""Validate's speed on a large runs file, measured (one core): rows per second, and memory.

The file is built from the shipped runs (public and held-out): every scored row, then copies of it
at other micro-batch sizes and recompute policies with their own ids, as a layout sweep of the same
job would be published, until it holds ``--rows`` rows. Each copy is priced from its own columns,
so the figure is what validate does on a file of that many runs: the file streamed, rows of one model,
GPU, GPU count and framework priced together.

Prints its figures and, last, one JSON line with ``rows``, ``scored``, ``seconds``, ``rows_per_s``
and ``peak_rss_mib``. Run: ``python benchmarks/bench_validate.py [--rows 100000]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from supercluster.formats.runs import load_rows  # noqa: E402
from supercluster.validation.validate import validate  # noqa: E402

#: the variants each shipped row is copied into (micro-batch, recompute)
VARIANTS = [(mb, rc) for mb in ("1", "2", "4") for rc in ("none", "full", "selective")]


def write_runs(path: Path, n_rows: int) -> int:
    """A runs CSV of ``n_rows`` rows built from the shipped ones; returns the number written."""
    base = [r for name in ("public", "heldout") for r in load_rows(name) if r.get("scored", "").lower() == "yes"]
    fields = list(dict.fromkeys(k for r in base for k in r))
    written = 0
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=fields)
        out.writeheader()
        copy = 0
        while written < n_rows:
            mb, rc = VARIANTS[copy % len(VARIANTS)]
            for r in base:
                if written == n_rows:
                    break
                row = dict(r, id=f"{r['id']}-v{copy}")
                if copy:
                    row.update(micro_batch=mb, recompute=rc)
                out.writerow(row)
                written += 1
            copy += 1
    return written


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    args = ap.parse_args()
    validate("public")  # catalogs loaded, imports done: the steady rate is what is measured
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.csv"
        n = write_runs(path, args.rows)
        size_mib = path.stat().st_size / 2**20
        t0 = time.perf_counter()
        res = validate(path)
        dt = time.perf_counter() - t0
    scored = len(res["rows"])  # type: ignore[arg-type]
    priced = sum(r.supported for r in res["rows"])  # type: ignore[attr-defined, union-attr]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{n:,} rows ({size_mib:.0f} MiB), {scored:,} scored, {priced:,} priced: {dt:.2f} s, "
          f"{n / dt:,.0f} rows/s; peak RSS {rss:.0f} MiB; MAPE {100 * res['mape']:.1f} %")  # type: ignore[operator]
    print(json.dumps({"rows": n, "scored": scored, "seconds": round(dt, 3), "rows_per_s": round(n / dt),
                      "peak_rss_mib": round(rss)}))


if __name__ == "__main__":
    main()
