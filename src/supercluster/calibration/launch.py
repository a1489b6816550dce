"""Start N local worker processes the way torchrun does, with a timeout; nothing is left running.

Each worker runs ``python -m supercluster.calibration._dist TASK ARGS_JSON OUT_DIR`` with the torchrun
environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``), so the same task code also runs multi-node under torchrun. Rank 0 writes its
result to ``OUT_DIR/result.json``. A worker that crashes or a group that outlives the timeout
is killed (its whole process group) and reported as an :class:`InputError` naming the rank,
exit code and the end of its error output.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import InputError, require


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_workers(task: str, args: dict[str, Any], nproc: int, timeout_s: float = 600.0,
                threads_per_proc: int | None = None) -> dict[str, Any]:
    """Run ``task`` on ``nproc`` local ranks; rank 0's JSON result."""
    require(isinstance(nproc, int) and nproc >= 1, "nproc", f"must be a positive integer, got {nproc!r}")
    require(timeout_s > 0, "timeout", f"must be > 0 seconds, got {timeout_s}")
    threads = threads_per_proc or max(1, (os.cpu_count() or 1) // nproc)
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="supercluster-") as tmp:
        procs: list[subprocess.Popen[bytes]] = []
        logs = []
        for rank in range(nproc):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc),
                       LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       OMP_NUM_THREADS=str(threads), SUPERCLUSTER_THREADS=str(threads))
            log = open(Path(tmp) / f"rank{rank}.log", "wb")  # noqa: SIM115 - closed below
            logs.append(log)
            argv = [sys.executable, "-m", "supercluster.calibration._dist", task, json.dumps(args), tmp]
            procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + timeout_s
        failed: tuple[int, int] | None = None
        try:
            while True:
                codes = [p.poll() for p in procs]
                bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
                if bad:
                    failed = bad[0]
                    break
                if all(c == 0 for c in codes):
                    break
                if time.monotonic() > deadline:
                    raise InputError("timeout", f"{task} on {nproc} processes did not finish in {timeout_s:.0f} s; "
                                                "all workers were killed")
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            for log in logs:
                log.close()
        if failed is not None:
            rank, code = failed
            tail = (Path(tmp) / f"rank{rank}.log").read_text(errors="replace")[-1500:]
            raise InputError("worker", f"{task}: rank {rank} exited with code {code}; its last output:\n{tail}")
        out = Path(tmp) / "result.json"
        require(out.is_file(), "worker", f"{task}: rank 0 wrote no result")
        return json.loads(out.read_text())  # type: ignore[no-any-return]
