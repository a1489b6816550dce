"""Sweeps: grids of models x GPUs x cluster sizes x layouts, stored in DuckDB, resumable, local or on Ray.

A sweep is the cross product of its axes in a fixed order; a scenario's id is its index in that
order, so the same grid always numbers scenarios alike. Scenarios are priced in chunks (one
vectorized :func:`~supercluster.perf.step.step_columns` call per model and GPU within a chunk) by
worker processes or Ray tasks; only the parent writes, one transaction per chunk, so a kill
loses at most the chunks in flight and a resume skips every stored id: each scenario is stored
exactly once (``scenario_id`` is the primary key). A database remembers its grid and refuses to
resume a different one.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, require
from ..parallelism.framework import DEFAULT_FRAMEWORK
from ..parallelism.layout import MAX_COUNT

AXES = ("model", "gpu", "gpus", "tp", "pp", "cp", "micro_batch", "recompute", "zero", "seq_len", "global_batch",
        "precision")
RESULT_COLUMNS = ("step_time_s", "mfu", "memory_per_gpu_bytes", "tokens_per_s")


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepGrid:
    model: tuple[str, ...] = ("llama3-8b",)
    gpu: tuple[str, ...] = ("h100-sxm",)
    gpus: tuple[int, ...] = (64,)
    tp: tuple[int, ...] = (1, 2, 4, 8)
    pp: tuple[int, ...] = (1, 2, 4)
    cp: tuple[int, ...] = (1,)
    micro_batch: tuple[int, ...] = (1,)
    recompute: tuple[str, ...] = ("none", "full")
    zero: tuple[int, ...] = (1,)
    seq_len: tuple[int, ...] = (8192,)
    global_batch: tuple[int, ...] = (512,)
    precision: tuple[str, ...] = ("bf16",)
    framework: str = DEFAULT_FRAMEWORK

    def __post_init__(self) -> None:
        for name in AXES:
            require(len(getattr(self, name)) > 0, name, "a sweep axis needs at least one value")

    @property
    def size(self) -> int:
        return int(np.prod([len(getattr(self, a)) for a in AXES]))

    def digest(self) -> str:
        d = asdict(self)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    def scenario(self, i: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in reversed(AXES):
            values = getattr(self, name)
            i, k = divmod(i, len(values))
            out[name] = values[k]
        return {a: out[a] for a in AXES}


def evaluate_chunk(grid_json: str, ids: list[int]) -> list[tuple[Any, ...]]:
    """Price scenarios ``ids`` of a grid; one row per id (invalid ones with ``ok = False`` and the reason)."""
    from ..formats.load import load_model
    from ..hardware.specs import get_gpu
    from ..job import Job, check_job, default_network
    from ..parallelism.framework import get_framework
    from ..parallelism.layout import Layout
    from ..perf.columns import layouts_columns
    from ..perf.step import step_columns

    grid = SweepGrid(**{k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(grid_json).items()})
    fw = get_framework(grid.framework)
    groups: dict[tuple[str, str], list[tuple[int, dict[str, Any], Any]]] = {}
    rows: dict[int, tuple[Any, ...]] = {}
    for i in ids:
        s = grid.scenario(i)
        try:
            m, g = load_model(s["model"]), get_gpu(s["gpu"])
            mp = s["tp"] * s["pp"] * s["cp"]
            require(s["gpus"] % mp == 0, "gpus", f"{s['gpus']} not divisible by tp x pp x cp = {mp}")
            lay = Layout(tp=s["tp"], pp=s["pp"], cp=s["cp"], dp=s["gpus"] // mp, micro_batch=s["micro_batch"],
                         global_batch=s["global_batch"], seq_len=s["seq_len"], precision=s["precision"],
                         recompute=s["recompute"], zero_stage=s["zero"])
            # (the network is sized per cluster below)
            lay = check_job(Job(model=m, gpu=g, num_gpus=s["gpus"], layout=lay, framework=fw)).layout
            groups.setdefault((s["model"], s["gpu"]), []).append((i, s, lay))
        except InputError as exc:
            rows[i] = (i, *[s[a] for a in AXES], False, str(exc), None, None, None, None, None)
    for (mk, gk), items in groups.items():
        m, g = load_model(mk), get_gpu(gk)
        cols = layouts_columns([lay for _, _, lay in items], fw)
        gpus = cols["tp"] * cols["pp"] * cols["dp"] * cols["cp"]
        out: dict[str, np.ndarray] = {}
        unpriced: dict[int, str] = {}
        for n in np.unique(gpus):  # one fabric per cluster size
            sel = gpus == n
            try:
                net = default_network(g, num_gpus=int(n))
            except InputError as exc:  # e.g. more GPUs than the default fabric reaches
                unpriced.update({int(j): str(exc) for j in np.flatnonzero(sel)})
                continue
            part = step_columns(m, g, net, fw, {k: v[sel] for k, v in cols.items()})
            for key, v in part.items():
                out.setdefault(key, np.ones(len(gpus)))[sel] = v
        if not out:
            out = {k: np.ones(len(gpus)) for k in ("mfu", "step_time_s", "memory_per_gpu_bytes", "tokens_per_s")}
        mfu = out["mfu"]
        for j, (i, s, _) in enumerate(items):
            if j in unpriced:
                rows[i] = (i, *[s[a] for a in AXES], False, unpriced[j], None, None, None, None, None)
                continue
            mem = float(out["memory_per_gpu_bytes"][j])
            rows[i] = (i, *[s[a] for a in AXES], True, "", float(out["step_time_s"][j]), float(mfu[j]), mem,
                       float(out["tokens_per_s"][j]), mem <= g.hbm_bytes)
    return [rows[i] for i in ids]


_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
  scenario_id BIGINT PRIMARY KEY, model VARCHAR, gpu VARCHAR, gpus BIGINT, tp BIGINT, pp BIGINT, cp BIGINT,
  micro_batch BIGINT, recompute VARCHAR, zero INTEGER, seq_len BIGINT, global_batch BIGINT, precision VARCHAR,
  ok BOOLEAN, error VARCHAR, step_time_s DOUBLE, mfu DOUBLE, memory_per_gpu_bytes DOUBLE, tokens_per_s DOUBLE,
  fits BOOLEAN);
CREATE TABLE IF NOT EXISTS sweep_meta (key VARCHAR PRIMARY KEY, value VARCHAR);
"""


def _open(path: str | Path, read_only: bool = False) -> Any:
    """A DuckDB connection to a sweep's database; a database another process holds (a sweep still
    running), or a file that is not one, is one error naming it."""
    import duckdb

    # (DuckDB reads ":memory:" and names that start with it as a database that no file keeps)
    require(not str(path).startswith(":memory:"), "db", f"{path!r} is DuckDB's in-memory database, which keeps "
            "nothing to resume or read; give a file")
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        text = str(exc)
        held = re.search(r"Conflicting lock is held in .*?\(PID (\d+)\)", text)
        if held:
            raise InputError("db", f"{path} is in use by another process (PID {held.group(1)}), a sweep still "
                                   "running: wait for it, or use another --db") from None
        raise InputError("db", f"cannot open {path} as a sweep database: {text.splitlines()[0]}") from None


def _connect(path: str | Path, grid: SweepGrid) -> Any:
    con = _open(path)
    con.execute(_SCHEMA)
    row = con.execute("SELECT value FROM sweep_meta WHERE key = 'grid'").fetchone()
    if row is None:
        con.execute("INSERT INTO sweep_meta VALUES ('grid', ?), ('digest', ?)",
                    [json.dumps(asdict(grid), sort_keys=True), grid.digest()])
    elif json.loads(row[0]) != json.loads(json.dumps(asdict(grid), sort_keys=True)):
        con.close()
        raise InputError("db", f"{path} holds a different sweep; use another --db or the same grid")
    return con


def _die_with_parent(parent_pid: int) -> None:
    """A sweep worker ends when the sweep that started it does, however it ends (``kill -9`` included):
    Linux sends it SIGKILL as the parent dies (prctl PR_SET_PDEATHSIG); elsewhere, and for a parent gone
    before that was set, a thread sees the worker handed to another parent and exits."""
    import ctypes
    import signal
    import threading
    import time

    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def _chunks(ids: list[int], size: int) -> Iterator[list[int]]:
    for k in range(0, len(ids), size):
        yield ids[k:k + size]


def run_sweep(grid: SweepGrid, db: str | Path, *, executor: str = "local", workers: int = 2, chunk: int = 500,
              address: str | None = None, progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
    """Price every scenario not yet in ``db``; returns counts (total, stored before, stored now)."""
    require(executor in ("local", "ray"), "executor", f"unknown {executor!r}; allowed: local, ray")
    require(chunk >= 1, "chunk", f"must be a positive integer, got {chunk}")
    # (pricing is CPU-bound: more processes than cores only share them; Ray's cluster may be larger)
    most = max(os.cpu_count() or 1, 2) if executor == "local" else 4096
    require(1 <= workers <= most, "workers",
            f"must be 1-{most} processes ({'the cores here' if executor == 'local' else 'Ray'}), got {workers}")
    con = _connect(db, grid)
    done = {r[0] for r in con.execute("SELECT scenario_id FROM results").fetchall()}
    todo = [i for i in range(grid.size) if i not in done]
    grid_json = json.dumps(asdict(grid))
    stored = len(done)

    names = [d[0] for d in con.execute("SELECT * FROM results LIMIT 0").description]

    def commit(rows: list[tuple[Any, ...]]) -> None:
        nonlocal stored
        import pyarrow as pa

        chunk_table = pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows])  # noqa: F841
        con.execute("BEGIN TRANSACTION")
        con.execute("INSERT INTO results SELECT * FROM chunk_table")
        con.execute("COMMIT")
        stored += len(rows)
        if progress:
            progress(stored, grid.size)

    if progress:
        progress(stored, grid.size)
    chunks = list(_chunks(todo, chunk))
    if executor == "ray":
        _run_ray(grid_json, chunks, commit, address, workers)
    elif workers == 1:
        for c in chunks:
            commit(evaluate_chunk(grid_json, c))
    else:
        with ProcessPoolExecutor(max_workers=workers, initializer=_die_with_parent, initargs=(os.getpid(),)) as pool:
            pending: set[Future[list[tuple[Any, ...]]]] = set()
            it = iter(chunks)
            for c in itertools.islice(it, 2 * workers):
                pending.add(pool.submit(evaluate_chunk, grid_json, c))
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    commit(f.result())
                    nxt = next(it, None)
                    if nxt is not None:
                        pending.add(pool.submit(evaluate_chunk, grid_json, nxt))
    total = con.execute("SELECT count(*) FROM results").fetchone()[0]
    con.close()
    return {"total": grid.size, "stored_before": len(done), "stored": int(total)}


#: What makes a cell of a sweep: the question asked (which model, on which GPU type and how many,
#: for which batch, sequence and precision); the layout axes are the answers searched within it.
CELL = ("model", "gpu", "gpus", "seq_len", "global_batch", "precision")


def best_per_cell(db: str | Path) -> list[dict[str, Any]]:
    """For each cell of a stored sweep, its fastest layout that fits (most tokens per second) and how
    many of the cell's scenarios were legal and fit; a cell where none fits has ``best`` None."""
    require(Path(db).exists(), "db", f"{db} does not exist")
    con = _open(db, read_only=True)
    try:
        keys = ", ".join(CELL)
        counts = con.execute(f"SELECT {keys}, count(*), count(*) FILTER (ok), count(*) FILTER (ok AND fits) "
                             f"FROM results GROUP BY {keys} ORDER BY {keys}").fetchall()
        best = con.execute(
            f"SELECT {keys}, tp, pp, cp, micro_batch, recompute, zero, step_time_s, mfu, memory_per_gpu_bytes, "
            f"tokens_per_s FROM results WHERE ok AND fits "
            f"QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY tokens_per_s DESC, scenario_id) = 1").fetchall()
    finally:
        con.close()
    found = {tuple(r[:len(CELL)]): r[len(CELL):] for r in best}
    out = []
    for r in counts:
        cell = dict(zip(CELL, r[:len(CELL)], strict=True))
        b = found.get(tuple(r[:len(CELL)]))
        layout = None if b is None else dict(zip(
            ("tp", "pp", "cp", "micro_batch", "recompute", "zero", "step_time_s", "mfu", "memory_per_gpu_bytes",
             "tokens_per_s"), b, strict=True))
        if layout is not None:
            layout["tokens_per_s_per_gpu"] = layout["tokens_per_s"] / cell["gpus"]
        out.append(cell | {"scenarios": r[len(CELL)], "legal": r[len(CELL) + 1], "fit": r[len(CELL) + 2],
                           "best": layout})
    return out


def _run_ray(grid_json: str, chunks: list[list[int]], commit: Callable[[list[tuple[Any, ...]]], None],
             address: str | None, workers: int) -> None:
    try:
        import ray
    except ImportError:
        raise InputError("executor", "ray is not installed: pip install 'supercluster-planner[ray]'") from None
    started = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        started = True
    try:
        task = ray.remote(evaluate_chunk)
        pending = [task.remote(grid_json, c) for c in chunks]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                commit(ray.get(ref))
    finally:
        if started:
            ray.shutdown()


def parse_axis(text: str, kind: type, name: str = "sweep", minimum: int = 1,
               maximum: int = MAX_COUNT) -> tuple[Any, ...]:
    """``"1,2,4"`` -> (1, 2, 4): at least one value; integers whole, from ``minimum`` to ``maximum``
    (a layout's largest degree, 2^31, unless given: every value fits the database's 64-bit columns);
    errors name the axis (``name``, the option)."""
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if kind is int:
            try:
                value = float(part)
            except ValueError:
                raise InputError(name, f"cannot read {part!r} as a whole number") from None
            require(value.is_integer() and minimum <= value <= maximum, name,
                    f"{part!r} must be a whole number from {minimum} to {maximum:,}")
            out.append(int(value))
        else:
            out.append(kind(part))
    require(bool(out), name, f"needs at least one value, got {text!r}")
    return tuple(out)


def print_progress_line(stored: int, total: int) -> None:
    print(f"committed {stored}/{total}", file=sys.stderr, flush=True)
