"""The step as a timeline: the cost model's per-stage work laid out, event by event, on the pipeline
schedule the framework runs (1F1B, or Megatron's interleaved 1F1B with vpp model chunks per stage).

One representative rank per pipeline stage (TP, CP and DP ranks of a stage do the same work). Each
stage runs its operations in schedule order; an operation starts when its stage is free and its input
has arrived: a forward needs the previous stage's forward of the same micro-batch (and chunk), a
backward the next stage's backward, the last stage's first backward its own forward. Durations come
from :func:`~supercluster.perf.step.step_columns`, the function every other view prices through: each
stage is priced as the heaviest one (as the ledger is), split into forward and backward, and each
operation ends with its share of the exposed pipeline send/receive time. Where the ledger prices an
interleaved schedule with uneven chunks chunk by chunk (torchtitan's split, an explicit layout:
:func:`supercluster.parallelism.schedule.makespan`), each chunk carries its own layers here too. The exposed
data-parallel sync, the optimizer step and the straggler wait follow the pipeline drain on every stage.

With jitter off the timeline's makespan equals the ledger's step time (a test checks it), so the
timeline explains where each stage idles rather than re-deriving the step time. With
``exact_stages`` each chunk always carries its own layers (L, or L + 2 slots where the framework
counts the embedding and the loss as layers, spread evenly over the pp x vpp chunks in model order,
the head on the last): the makespan then shows how much the ledger's heaviest-stage pricing
overstates an unevenly split pipeline. With jitter on, every
compute operation is scaled by an independent log-normal factor of mean 1 and the makespan shows
what per-kernel variability costs a synchronous pipeline.

The event engine is a heap of ``(time_s, priority, seq, callback)``: ``seq`` comes from a per-engine
counter, so events at the same time run in priority, then insertion, order - deterministic.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import require
from ..hardware.specs import GpuSpec
from ..job import Job, check_job
from ..models.spec import ModelSpec
from ..network.twolevel import Network
from ..parallelism import pplayout
from ..parallelism.framework import Framework
from ..parallelism.layout import Layout
from ..parallelism.schedule import Op, chunk_durations, dependency, schedule
from ..perf.columns import layout_columns
from ..perf.memory import stage_activation_bytes
from ..perf.pipeline import CHUNK_PARTS, chunk_work
from ..perf.step import step_columns

__all__ = ["Engine", "Op", "Task", "Timeline", "schedule", "simulate"]


class Engine:
    """A minimal discrete-event engine: callbacks on a time-ordered heap."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self._heap: list[tuple[float, int, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def at(self, time_s: float, callback: Callable[[], None], priority: int = 0) -> None:
        require(time_s >= self.now_s, "time_s", f"cannot schedule in the past ({time_s} < {self.now_s})")
        heapq.heappush(self._heap, (time_s, priority, next(self._seq), callback))

    def run(self) -> float:
        while self._heap:
            self.now_s, _, _, callback = heapq.heappop(self._heap)
            callback()
        return self.now_s


@dataclass(frozen=True, slots=True)
class Task:
    """One interval on one stage's stream: ``kind`` F / B (compute), weight_cast, send, dp_sync, optimizer,
    stragglers."""

    stage: int
    stream: str
    kind: str
    micro_batch: int
    chunk: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Timeline:
    tasks: tuple[Task, ...]
    step_time_s: float
    ledger_step_time_s: float
    pp: int
    vpp: int
    micro_batches: int
    jitter: float
    exact_stages: bool = False
    layers: tuple[tuple[int, ...], ...] = ()  # per stage, per chunk (with exact_stages)
    memory_bytes: tuple[float, ...] = ()  # per stage: peak memory of its own layers and in-flight micro-batches
    schedules: int = 1  # gradient-accumulation steps, each its own pipeline schedule

    def stages(self) -> list[dict[str, float]]:
        """Per stage: compute, send, exposed DP/optimizer/straggler tail and idle (bubble) seconds."""
        out = []
        for s in range(self.pp):
            mine = [t for t in self.tasks if t.stage == s]
            comp = sum(t.end_s - t.start_s for t in mine if t.kind in ("F", "B", "weight_cast"))
            send = sum(t.end_s - t.start_s for t in mine if t.kind == "send")
            tail = sum(t.end_s - t.start_s for t in mine if t.kind in ("dp_sync", "optimizer", "stragglers"))
            first = min((t.start_s for t in mine if t.kind == "F"), default=0.0)
            out.append({"stage": s, "compute_s": comp, "send_s": send, "tail_s": tail,
                        "idle_s": self.step_time_s - comp - send - tail, "first_forward_s": first,
                        **({"memory_bytes": self.memory_bytes[s]} if self.memory_bytes else {})})
        return out

    def gantt(self, width: int = 96) -> list[str]:
        """One line per stage, ``width`` columns over the step: F forward, B backward, - sending,
        q fp8 / fp4 weight casts, d DP sync, o optimizer, w straggler wait, . idle (a column shows
        what covers most of it)."""
        require(width >= 8, "width", f"must be >= 8 columns, got {width}")
        dt = self.step_time_s / width
        mark = {"F": "F", "B": "B", "weight_cast": "q", "send": "-", "dp_sync": "d", "optimizer": "o",
                "stragglers": "w"}
        lines = []
        for st in range(self.pp):
            cover = np.zeros((width, len(mark)))
            keys = list(mark)
            for t in self.tasks:
                if t.stage != st:
                    continue
                a, b = t.start_s / dt, t.end_s / dt
                for col in range(int(a), min(int(np.ceil(b)), width)):
                    cover[col, keys.index(t.kind)] += min(b, col + 1) - max(a, col)
            lines.append("".join(mark[keys[int(np.argmax(c))]] if c.max() > 0.5 else "." for c in cover))
        return lines

    def summary(self) -> dict[str, Any]:
        return {"step_time_s": self.step_time_s, "ledger_step_time_s": self.ledger_step_time_s,
                "pp": self.pp, "vpp": self.vpp, "micro_batches": self.micro_batches, "schedules": self.schedules,
                "jitter": self.jitter,
                "exact_stages": self.exact_stages, "layers_per_chunk": [list(x) for x in self.layers],
                "tasks": len(self.tasks), "stages": self.stages()}

    def to_trace(self) -> dict[str, Any]:
        """Chrome / Perfetto trace-event JSON (open in ui.perfetto.dev): one process per stage."""
        tids = {"compute": 0, "p2p": 1, "dp": 2}
        ev: list[dict[str, Any]] = []
        for s in range(self.pp):
            ev.append({"ph": "M", "name": "process_name", "pid": s, "args": {"name": f"pipeline stage {s}"}})
            for name, tid in tids.items():
                ev.append({"ph": "M", "name": "thread_name", "pid": s, "tid": tid, "args": {"name": name}})
        for t in self.tasks:
            label = f"{t.kind} mb{t.micro_batch}" + (f" c{t.chunk}" if self.vpp > 1 else "") \
                if t.kind in ("F", "B", "send") else t.kind
            ev.append({"ph": "X", "name": label, "pid": t.stage, "tid": tids[t.stream],
                       "ts": t.start_s * 1e6, "dur": (t.end_s - t.start_s) * 1e6,
                       "args": {"micro_batch": t.micro_batch, "chunk": t.chunk}})
        return {"traceEvents": ev, "displayTimeUnit": "ms"}


#: the most forward / backward tasks one timeline lays out (about 5 s on one core)
MAX_TASKS = 500_000


def simulate(model: ModelSpec, *, layout: Layout, gpu: GpuSpec, net: Network, fw: Framework,
             jitter: float = 0.0, seed: int = 0, exact_stages: bool = False) -> Timeline:
    """Lay one training step of ``layout`` out on its pipeline schedule (see the module docstring)."""
    layout = _checked_layout(model, layout=layout, gpu=gpu, net=net, fw=fw, jitter=jitter, seed=seed)
    p, v = layout.pp, layout.vpp
    m, ga = layout.num_microbatches, layout.grad_accum
    ms = layout.schedule_microbatches  # each of the ga schedules runs ms micro-batches
    stages = None if layout.pp_layout is None else pplayout.parse(layout.pp_layout)
    out = {k: float(np.asarray(x).reshape(-1)[0]) for k, x in step_columns(
        model, gpu, net, fw, layout_columns(layout, fw), stages=stages).items()}
    t_f, t_b = out["stage_forward_s"] / v, (out["stage_time_s"] - out["stage_forward_s"]) / v
    work = chunk_work(model, fw, p, v, stages, counts_head=out["split_counts_head"] > 0)
    split = work[:, :, 0].astype(int).tolist()
    memory = _stage_memory(out, split, p, v, ms)
    # Chunks carry their own work with exact_stages, or where the ledger itself prices an uneven
    # interleaving chunk by chunk; every stage is the heaviest one otherwise.
    by_chunks = exact_stages or out["pipeline_by_chunks"] > 0
    layers = split if by_chunks else []
    own = chunk_durations(work, *(out[k] for k in CHUNK_PARTS), 0.0)[..., 0]

    def durations(s: int, c: int) -> tuple[float, float]:
        """Forward and backward seconds of chunk c on stage s (without the send)."""
        return (float(own[s, c, 0]), float(own[s, c, 1])) if by_chunks else (t_f, t_b)

    # the exposed pipeline send/receive time, one equal share at the end of every operation on the
    # critical path (2 (m v + ga (p - 1)) of them)
    delta = out["pp_send_s"]
    rng = np.random.default_rng(seed)
    # the ga schedules one after another, their micro-batches numbered on
    orders = [[(k, i + r * ms, c) for r in range(ga) for k, i, c in schedule(s, p, v, ms)] for s in range(p)]
    scale = {(s, op): (float(rng.lognormal(-jitter * jitter / 2.0, jitter)) if jitter > 0 else 1.0)
             for s in range(p) for op in orders[s]}

    eng = Engine()
    done: dict[tuple[int, Op], float] = {}
    nxt = [0] * p
    busy = [False] * p
    tasks: list[Task] = []

    def try_start(s: int) -> None:
        if busy[s] or nxt[s] >= len(orders[s]):
            return
        op = orders[s][nxt[s]]
        dep = dependency(s, op, p, v)
        if dep is not None and dep not in done:
            return  # woken when the dependency completes
        busy[s] = True
        nxt[s] += 1
        start = eng.now_s
        compute = durations(s, op[2])[0 if op[0] == "F" else 1] * scale[(s, op)]
        tasks.append(Task(s, "compute", op[0], op[1], op[2], start, start + compute))
        if delta > 0:
            tasks.append(Task(s, "p2p", "send", op[1], op[2], start + compute, start + compute + delta))

        def finish() -> None:
            done[(s, op)] = eng.now_s
            busy[s] = False
            try_start(s)
            for other in (s - 1, s + 1, 0, p - 1):  # the stages that may wait on this one
                if 0 <= other < p and other != s:
                    try_start(other)

        eng.at(start + compute + delta, finish)

    # each stage casts its fp8 / fp4 weights once, before its first micro-batch (the ledger's cast)
    cast = out["weight_cast_s"]
    if cast > 0:
        tasks += [Task(s, "compute", "weight_cast", -1, -1, 0.0, cast) for s in range(p)]
    for s in range(p):
        eng.at(cast, lambda s=s: try_start(s), priority=s)
    drained = eng.run()
    require(all(n == len(o) for n, o in zip(nxt, orders, strict=True)), "schedule",
            "the pipeline schedule deadlocked (an internal error: please report the layout)")
    tail, t = _after_drain(out, drained, p, by_chunks)
    tasks += tail
    tasks.sort(key=lambda x: (x.stage, x.start_s, x.stream))
    return Timeline(tasks=tuple(tasks), step_time_s=t, ledger_step_time_s=out["step_time_s"], pp=p, vpp=v,
                    micro_batches=m, jitter=jitter, exact_stages=exact_stages,
                    layers=tuple(tuple(x) for x in layers), memory_bytes=memory, schedules=ga)


def _checked_layout(model: ModelSpec, *, layout: Layout, gpu: GpuSpec, net: Network, fw: Framework,
                    jitter: float, seed: int) -> Layout:
    """``layout`` checked as a job (its defaults filled in), and the timeline's own limits: the jitter
    and seed, a 1F1B schedule, at most :data:`MAX_TASKS` tasks, whole interleaved rounds."""
    # (a larger sigma makes the mean-1 factor a handful of rare huge values among many tiny ones)
    require(0.0 <= jitter <= 1.0, "jitter", f"must be a log-normal sigma in [0, 1], got {jitter}")
    require(isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0, "seed",
            f"must be a non-negative integer, got {seed!r}")
    layout = check_job(Job(model=model, gpu=gpu, num_gpus=layout.num_gpus, layout=layout, framework=fw,
                           network=net)).layout
    require(fw.pipeline_schedule == "1f1b" or layout.pp == 1, "framework",
            f"{fw.key} runs {fw.pipeline_schedule}, which the timeline does not lay out (it walks 1F1B and "
            "interleaved 1F1B); estimate prices its bubble by the DeepSeek-V3 report's formula")
    p, v, m, ms = layout.pp, layout.vpp, layout.num_microbatches, layout.schedule_microbatches
    tasks = 2 * p * v * m  # (a forward and a backward of each chunk and micro-batch, on each stage)
    require(tasks <= MAX_TASKS, "global_batch",
            f"the step has {m:,} micro-batches on {p} x {v} pipeline chunks: {tasks:,} tasks to lay out, past "
            f"{MAX_TASKS:,}; simulate a smaller global batch (the step's shape repeats) or use estimate")
    require(v == 1 or ms % p == 0, "micro_batch",
            f"the interleaved schedule needs the micro-batches per schedule ({ms}) to be a multiple of pp = {p}")
    return layout


def _stage_memory(out: dict[str, float], split: list[list[int]], p: int, v: int, ms: int) -> tuple[float, ...]:
    """Each stage's peak memory: the memory model's stage activations (its own layers, the micro-batches
    this schedule holds, the last stage's logits) over the heaviest stage's weights, gradients and
    optimizer state."""
    static = sum(out[k] for k in ("mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes", "mem_other_bytes"))
    return tuple(static + float(stage_activation_bytes(sum(split[st]), out["mem_layer_activation_bytes"],
                                                       out["mem_extra_activation_bytes"], out["mem_logits_bytes"],
                                                       p, v, ms, st)) for st in range(p))


def _after_drain(out: dict[str, float], drained: float, p: int, by_chunks: bool) -> tuple[list[Task], float]:
    """What runs on every stage once the pipeline drains at ``drained``: the exposed DP sync, the
    optimizer, the stragglers' wait (the ledger's share of the step where chunks carry their own work);
    the tasks and the step's end."""
    tasks, t = [], drained
    waste = out["stragglers"] / out["step_time_s"] if out["step_time_s"] > 0 else 0.0
    for kind, stream in (("dp_sync", "dp"), ("optimizer", "compute"), ("stragglers", "compute")):
        dur = out["exposed_dp_comm" if kind == "dp_sync" else kind]
        if kind == "stragglers" and by_chunks:  # the same share of the (shorter) step
            dur = t * waste / (1.0 - waste)
        if dur > 0:
            tasks += [Task(s, stream, kind, -1, -1, t, t + dur) for s in range(p)]
            t += dur
    return tasks, t
