"""Worker entry point: ``python -m supercluster.calibration._dist TASK ARGS_JSON OUT_DIR`` under torchrun-style env."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> None:
    task, args, out_dir = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3])
    import torch
    import torch.distributed as dist

    threads = int(os.environ.get("SUPERCLUSTER_THREADS", "0"))
    if threads:
        torch.set_num_threads(threads)
    cuda = args.get("device") == "cuda" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        if task == "collectives":
            from dataclasses import asdict

            from .measure import measure_collectives, measure_device

            dist.barrier()
            prof = measure_device(args["device"], tuple(args["dtypes"]) if args.get("dtypes") else None,
                                  bool(args.get("quick")))
            result = measure_collectives(tuple(args["sizes"]), float(args["min_time_s"]))
            result["device"] = asdict(prof)
        elif task == "sleep":  # for testing the launcher's timeout
            import time

            time.sleep(float(args["seconds"]))
            result = {}
        elif task == "fail":  # for testing the launcher's crash report
            raise RuntimeError(f"rank {dist.get_rank()} failed on purpose")
        elif task == "verify":
            from .verify import run_training

            result = run_training(args)
        else:
            raise SystemExit(f"unknown task {task!r}")
        if dist.get_rank() == 0:
            (out_dir / "result.json").write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # Done and in agreement with every rank: leave without the interpreter's teardown, where a
    # process-group thread still being destroyed can abort the process ("terminate called without an
    # active exception", SIGABRT) after its work was finished and reported.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
