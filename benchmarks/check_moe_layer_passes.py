"""Small MoE models on one node, measured against priced, one layer pass at a time: where the held-out
Megatron-Bridge rows of Qwen3 30B-A3B and GPT-OSS 120B lose their time.

A step of these rows is m micro-batches x L layers a GPU (its pipeline stage's share) of layer passes,
forward and backward. Dividing the measured and the priced step by that count gives seconds per layer
pass, and the measured figures of one model on one GPU at two micro-batch sizes or two routings show
what the published runs spend that the model does not price:

* Qwen3 30B-A3B, dropless routing on x86 hosts: a pass costs about twice the token-drop pass of the same
  layout and tokens (H100, two sequences a micro-batch: 32.4 ms against 16.3 ms; B200, one: 9.2 ms
  against 4.7 ms), and on H100 it scales with the tokens (one sequence: 16.7 ms). On GB200 (Grace
  host), four sequences a micro-batch, dropless and token-drop cost the same (14.4 ms each).
* What the model prices for a dropless pass beyond a token-drop one is one host wait for the router's
  counts (perf/host.py): a fraction of a millisecond, where the measured difference is milliseconds
  and grows with the tokens, so it is not a host wait. What it is, the published tables do not say.
* GPT-OSS 120B measures 1.2-2x its priced pass on every GPU; on B200 expert parallelism inside the
  node (EP 8) measures as slow a pass as EP 64 across nodes, where the model prices EP 8 faster.

Prints one line a row (measured and priced seconds a pass, the priced host-bound share) and, last, a
JSON line. Run: ``python benchmarks/check_moe_layer_passes.py``.
"""

from __future__ import annotations

import json
import math

from supercluster.formats.runs import load_rows
from supercluster.job import Job, price_many
from supercluster.perf.step import StepBreakdown

#: the published rows read (held-out file): one model on one node, several routings and micro-batches
PREFIXES = ("MB2509-QWEN3-30B", "MB2511-QWEN3-30B", "MB2602-QWEN3-30B", "MB2511-GPTOSS-120B", "MB2602-GPTOSS-120B")


def layer_passes(job: Job, b: StepBreakdown) -> float:
    """Layer passes (forward and backward) a GPU runs in a step: the step's micro-batches a pipeline
    times its stage's layers (the heaviest stage's share, layers / pp, rounded up)."""
    return b.microbatches * math.ceil(job.model.num_layers / job.layout.pp)


def main() -> None:
    rows = [r for r in load_rows("heldout") if r["id"].startswith(PREFIXES)]
    jobs = [Job.from_row(r)[0] for r in rows]
    out = []
    print(f"{'row':36s} {'layout':36s} {'measured ms':>11s} {'priced ms':>9s} {'host ms':>7s} {'error':>7s}")
    for row, job, b in zip(rows, jobs, price_many(jobs), strict=True):
        n = layer_passes(job, b)
        meas, pred = float(row["step_time_s"]) / n, b.step_time_s / n
        host = b.ledger["kernel_launch"] / n
        routing = "dropless" if b.moe and b.moe["dropless"] else "token-drop"  # (as priced)
        print(f"{row['id']:36s} {job.layout.label()[:36]:36s} {1e3 * meas:11.2f} {1e3 * pred:9.2f} "
              f"{1e3 * host:7.2f} {b.step_time_s / float(row['step_time_s']) - 1:+7.1%}  {routing}")
        out.append({"id": row["id"], "routing": routing, "micro_batch": job.layout.micro_batch,
                    "measured_ms_per_pass": round(1e3 * meas, 3), "priced_ms_per_pass": round(1e3 * pred, 3),
                    "priced_host_ms_per_pass": round(1e3 * host, 3)})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
