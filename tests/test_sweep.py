"""Sweeps: exactly-once storage across a kill and a resume; the Ray executor on a local instance."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from supercluster.errors import InputError
from supercluster.planner.sweep import SweepGrid, run_sweep

BIG = ["--models", "llama3-8b,llama3-70b", "--gpu-types", "h100-sxm,b200", "--sizes", "64,128,256,512,1024",
       "--tp", "1,2,4,8", "--pp", "1,2,4,8", "--cp", "1,2", "--micro-batch", "1,2", "--recompute",
       "none,selective,full", "--zero", "1,3", "--seq-len", "4096,8192"]  # 2*2*5*4*4*2*2*3*2*2 = 15,360


def _count(db):
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT count(*), count(DISTINCT scenario_id), min(scenario_id), max(scenario_id) "
                           "FROM results").fetchone()
    finally:
        con.close()


def _children(pid):
    """The processes whose parent is ``pid`` (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads worker processes from /proc")
def test_sweep_killed_midway_leaves_no_worker_and_resumes_with_every_scenario_once(tmp_path):
    """kill -9 of the sweep alone (not its process group): its workers end with it, the database holds
    every committed chunk once, and a rerun stores exactly the rest."""
    db = tmp_path / "s.duckdb"
    cmd = [sys.executable, "-m", "supercluster", "sweep", "--db", str(db), *BIG, "--chunk", "200", "--workers", "2",
           "--log"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, start_new_session=True)
    committed = 0
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if line.startswith("committed"):
                committed = int(line.split()[1].split("/")[0])
                if committed >= 2000:
                    break
        workers = _children(proc.pid)
        assert len(workers) == 2
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [w for w in workers if _alive(w)], "sweep workers outlived their killed parent"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stderr.close()
    n, distinct, _, _ = _count(db)
    assert 0 < n < 15360 and n == distinct
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["total"] == 15360 and res["stored_before"] == n
    assert _count(db) == (15360, 15360, 0, 15359)


def test_a_database_another_sweep_holds_is_one_clear_error(tmp_path):
    db = tmp_path / "held.duckdb"
    holder = duckdb.connect(str(db))
    try:
        out = subprocess.run([sys.executable, "-m", "supercluster", "sweep", "--db", str(db), "--models", "llama3-8b",
                              "--gpu-types", "h100-sxm", "--sizes", "64"], capture_output=True, text=True, timeout=120)
    finally:
        holder.close()
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"error: db: {db} is in use by another process (PID {os.getpid()})" in out.stderr


def test_resume_refuses_a_different_grid(tmp_path):
    db = tmp_path / "s.duckdb"
    run_sweep(SweepGrid(tp=(1, 2)), db, workers=1)
    with pytest.raises(InputError, match="different sweep"):
        run_sweep(SweepGrid(tp=(1, 4)), db, workers=1)


def test_invalid_scenarios_are_stored_with_the_reason(tmp_path):
    db = tmp_path / "s.duckdb"
    res = run_sweep(SweepGrid(gpus=(12,), tp=(8,), pp=(1,)), db, workers=1)
    assert res["stored"] == 2
    con = duckdb.connect(str(db), read_only=True)
    ok, err = con.execute("SELECT ok, error FROM results LIMIT 1").fetchone()
    con.close()
    assert not ok and "divisible" in err


def test_an_axis_at_its_largest_value_is_stored_and_resumes(tmp_path):
    """A degree of 2^31, the largest an axis takes, is stored (as an invalid scenario, with its reason)
    and the rerun finds every scenario stored; the results columns once held 32-bit integers, so such a
    chunk failed on every rerun and the sweep never completed."""
    db = tmp_path / "big.duckdb"
    grid = SweepGrid(model=("llama3-8b",), gpu=("h100-sxm",), gpus=(64,), tp=(1, 2**31), pp=(1,), cp=(1,),
                     micro_batch=(1,), recompute=("none",), zero=(1,))
    assert run_sweep(grid, db, workers=1)["stored"] == 2
    assert run_sweep(grid, db, workers=1) == {"total": 2, "stored_before": 2, "stored": 2}
    con = duckdb.connect(str(db), read_only=True)
    rows = dict(con.execute("SELECT tp, ok FROM results").fetchall())
    con.close()
    assert rows == {1: True, 2**31: False}


def test_a_sweep_stores_parallelism_its_framework_lacks_as_invalid(tmp_path):
    db = tmp_path / "c.duckdb"
    grid = SweepGrid(model=("llama3-8b",), gpu=("h100-sxm",), gpus=(8,), tp=(1, 2), pp=(1,), recompute=("full",),
                     global_batch=(64,), framework="composer")
    res = run_sweep(grid, db, workers=1)
    assert res["stored"] == 2
    con = duckdb.connect(str(db), read_only=True)
    rows = dict(con.execute("SELECT tp, ok FROM results").fetchall())
    err = con.execute("SELECT error FROM results WHERE tp = 2").fetchone()[0]
    con.close()
    assert rows == {1: True, 2: False} and err.startswith("tp: framework composer has no tensor parallelism")


def test_ray_executor_on_a_local_instance(tmp_path):
    pytest.importorskip("ray")
    db_ray, db_local = tmp_path / "r.duckdb", tmp_path / "l.duckdb"
    grid = SweepGrid(model=("llama3-8b",), gpu=("h100-sxm", "b200"), gpus=(64, 256), pp=(1, 2))
    r = run_sweep(grid, db_ray, executor="ray", workers=2, chunk=8)
    assert r["stored"] == grid.size
    run_sweep(grid, db_local, workers=1)
    rows = []
    for db in (db_ray, db_local):
        con = duckdb.connect(str(db), read_only=True)
        rows.append(con.execute("SELECT scenario_id, step_time_s FROM results ORDER BY 1").fetchall())
        con.close()
    assert rows[0] == rows[1]


@pytest.mark.parametrize("option,value,message", [
    ("--cp", "0", "cp: '0' must be a whole number from 1 to 2,147,483,648"),
    ("--tp", "1.5", "tp: '1.5' must be a whole number from 1 to 2,147,483,648"),
    ("--sizes", "99999999999999999999", "sizes: '99999999999999999999' must be a whole number from 1 to "
                                        "137,438,953,472"),
    ("--sizes", "x", "sizes: cannot read 'x'"),
    ("--models", ",", "models: needs at least one value"),
    ("--zero", "5", "zero: must be 0, 1, 2 or 3"),
    ("--precision", "fp3", "precision: unknown 'fp3'"),
])
def test_a_sweep_axis_no_scenario_could_use_is_one_error_naming_it(tmp_path, option, value, message):
    from typer.testing import CliRunner

    from supercluster.cli import app

    args = {"--models": "llama3-8b", "--gpu-types": "h100-sxm", "--sizes": "8", option: value}
    db = tmp_path / "s.duckdb"
    res = CliRunner().invoke(app, ["sweep", "--db", str(db), "--log", *[x for kv in args.items() for x in kv]])
    assert isinstance(res.exception, InputError) and str(res.exception).startswith(message)
    assert not db.exists()  # nothing was priced


def test_each_cell_reports_its_fastest_fitting_layout(tmp_path):
    from supercluster.planner.sweep import best_per_cell

    db = tmp_path / "s.duckdb"
    grid = SweepGrid(model=("llama3-8b", "llama3-70b"), gpu=("h100-sxm",), gpus=(8, 64), tp=(1, 2, 4, 8),
                     pp=(1, 2, 4), recompute=("none", "full"), zero=(1, 3))
    run_sweep(grid, db, workers=1)
    cells = best_per_cell(db)
    assert len(cells) == 4 and sum(c["scenarios"] for c in cells) == grid.size
    con = duckdb.connect(str(db), read_only=True)
    try:
        for c in cells:
            rows = con.execute("SELECT tp, pp, recompute, zero, tokens_per_s, ok, fits FROM results WHERE model = ? "
                               "AND gpus = ?", [c["model"], c["gpus"]]).fetchall()
            fitting = [r for r in rows if r[5] and r[6]]
            assert (c["legal"], c["fit"]) == (sum(r[5] for r in rows), len(fitting))
            if not fitting:
                assert c["best"] is None
                continue
            top = max(fitting, key=lambda r: r[4])
            b = c["best"]
            assert (b["tp"], b["pp"], b["recompute"], b["zero"], b["tokens_per_s"]) == top[:5]
            assert b["tokens_per_s_per_gpu"] == pytest.approx(top[4] / c["gpus"])
    finally:
        con.close()
    # 70B on one 8-GPU H100 node: no layout of this grid fits, and the cell says so
    none = next(c for c in cells if (c["model"], c["gpus"]) == ("llama3-70b", 8))
    assert none["best"] is None and none["fit"] == 0 and none["legal"] > 0


def test_the_sweep_command_prints_the_answer_on_stderr_and_one_json_line_on_stdout(tmp_path):
    db = tmp_path / "s.duckdb"
    out = subprocess.run([sys.executable, "-m", "supercluster", "sweep", "--db", str(db), "--models", "llama3-8b",
                          "--gpu-types", "h100-sxm", "--sizes", "8,16", "--tp", "1,2", "--pp", "1", "--cp", "1",
                          "--zero", "1", "--log"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == {"total": 24, "stored_before": 0, "stored": 24}
    assert "fastest layout that fits" in out.stderr and "llama3-8b" in out.stderr
