"""Kill -9 a real sweep at random points, resume it, and compare with a sweep never interrupted.

One grid is swept once without interruption (the reference). Then, for each of ``--trials`` runs, a
fresh database is swept while a random number of kills land at random committed counts (kill -9 of
the sweep process alone, as an out-of-memory killer or a lost node does; sometimes twice before a
rerun finishes), each followed by a rerun of the same command, until one completes. Every run is
checked: worker processes still alive 10 s after their parent was killed (orphans), rows stored
twice (duplicates), and cells whose stored result differs from the reference (mismatches).

Prints one line per trial and, last, one JSON line with ``cells``, ``trials``, ``kills``,
``orphan_workers``, ``duplicates``, ``mismatches`` and ``seconds``.
Run: ``python benchmarks/sweep_kill.py [--trials 6] [--seed 0]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

GRID = ["--models", "llama3-8b,llama3-70b", "--gpu-types", "h100-sxm,b200", "--sizes", "64,256,1024",
        "--tp", "1,2,4,8", "--pp", "1,2,4", "--cp", "1,2", "--micro-batch", "1,2", "--recompute", "none,full",
        "--zero", "1,3", "--seq-len", "8192"]  # 2*2*3*4*3*2*2*2*2 = 2,304 cells
COLUMNS = "scenario_id, ok, error, step_time_s, mfu, memory_per_gpu_bytes, tokens_per_s, fits"


def _command(db: Path) -> list[str]:
    return [sys.executable, "-m", "supercluster", "sweep", "--db", str(db), *GRID, "--chunk", "64",
            "--workers", "2", "--log"]


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _rows(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(f"SELECT {COLUMNS} FROM results ORDER BY scenario_id").fetchall()
    finally:
        con.close()


def _killed_run(db: Path, at: int) -> tuple[bool, int]:
    """Run the sweep, kill -9 it once ``at`` cells are committed (or let it finish first); returns
    (killed, orphan workers 10 s later)."""
    proc = subprocess.Popen(_command(db), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stderr is not None
    killed, orphans = False, 0
    try:
        for line in proc.stderr:
            if line.startswith("committed") and int(line.split()[1].split("/")[0]) >= at:
                workers = _children(proc.pid)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
                killed = True
                deadline = time.monotonic() + 10
                while any(_alive(w) for w in workers) and time.monotonic() < deadline:
                    time.sleep(0.2)
                orphans = sum(_alive(w) for w in workers)
                break
        proc.wait(timeout=600)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stderr.close()
    return killed, orphans


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        ref_db = Path(tmp) / "reference.duckdb"
        subprocess.run(_command(ref_db), check=True, capture_output=True, timeout=900)
        reference = _rows(ref_db)
        cells = len(reference)
        kills = orphans = duplicates = mismatches = 0
        for trial in range(args.trials):
            db = Path(tmp) / f"trial{trial}.duckdb"
            points = sorted(rng.randrange(0, cells) for _ in range(rng.choice((1, 1, 2, 3))))
            for at in points:  # each kill, then the next rerun is killed later, or finishes
                killed, o = _killed_run(db, at)
                kills += killed
                orphans += o
            subprocess.run(_command(db), check=True, capture_output=True, timeout=900)  # the rerun that finishes
            got = _rows(db)
            ids = [r[0] for r in got]
            duplicates += len(ids) - len(set(ids))
            mismatches += sum(a != b for a, b in zip(got, reference, strict=False)) + abs(len(got) - cells)
            print(f"trial {trial}: killed at {points} committed, {len(got):,} of {cells:,} cells, "
                  f"{len(ids) - len(set(ids))} duplicates", flush=True)
    print(json.dumps({"cells": cells, "trials": args.trials, "kills": kills, "orphan_workers": orphans,
                      "duplicates": duplicates, "mismatches": mismatches,
                      "seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
