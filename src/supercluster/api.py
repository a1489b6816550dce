"""The Python API: each function takes names or specs and returns what the matching command prints.

>>> import supercluster as sc
>>> job = sc.Job.from_label("tp8-pp16-dp128-vpp4", model="llama3-405b", gpu="h100-sxm",
...                         global_batch=2048, seq_len=8192)
>>> step = sc.estimate(job)
>>> round(step.step_time_s, 2), round(step.mfu, 3), step.fits
(5.63, 0.483, True)
>>> best = sc.plan("llama3-8b", gpu="h100-sxm", num_gpus=64, global_batch=256, seq_len=8192).best
>>> best.layout.label()
'tp1-pp1-dp64-rep2-mb2-z3-none'
"""

from __future__ import annotations

from typing import Any

from .errors import InputError
from .formats.load import load_model
from .hardware.specs import GpuSpec, SystemSpec, get_gpu, get_system
from .job import Job, check_job
from .models.spec import ModelSpec
from .network.fabric import Fabric
from .network.fabric import build_fabric as _build_fabric
from .parallelism.framework import DEFAULT_FRAMEWORK, Framework, get_framework
from .planner.search import PlanResult
from .planner.search import plan as _plan
from .reliability.run import RunOptions, RunReport, analyse_run
from .simulation.timeline import Timeline
from .simulation.timeline import simulate as _simulate
from .validation.validate import validate as _validate


def plan(model: ModelSpec | str, *, gpu: GpuSpec | str, num_gpus: int, global_batch: int, seq_len: int,
         framework: Framework | str = DEFAULT_FRAMEWORK, **options: Any) -> PlanResult:
    """Search every layout the framework runs; the best by ``objective`` (time, cost, energy) that fits
    (``supercluster plan``). ``options``: objective, precisions, headroom, top, network, gpu_hour_usd,
    pue, progress, fixed (:func:`supercluster.planner.search.plan`)."""
    return _plan(load_model(model) if isinstance(model, str) else model, get_gpu(gpu) if isinstance(gpu, str) else gpu,
                 num_gpus, global_batch=global_batch, seq_len=seq_len,
                 framework=get_framework(framework) if isinstance(framework, str) else framework, **options)


def _run(job: Job, options: RunOptions | None, **horizon: float | None) -> RunReport:
    job = check_job(job)
    return analyse_run(job.model, job.gpu, job.num_gpus, framework=job.framework, layout=job.layout,
                       global_batch=job.layout.global_batch, seq_len=job.layout.seq_len,
                       options=options or RunOptions(), network=job.network, **horizon)


def goodput(job: Job, *, days: float, options: RunOptions | None = None) -> RunReport:
    """A run of ``days`` of wall time: interruptions, checkpoint interval, ETTR and the run ledger
    (``supercluster goodput``)."""
    return _run(job, options, days=days)


def train(job: Job, *, tokens: float | None = None, options: RunOptions | None = None) -> RunReport:
    """Time to train ``tokens`` (default: 20 per parameter): days, GPU-hours, energy, dollars and the
    run ledger (``supercluster train``)."""
    return _run(job, options, tokens=tokens)


def simulate(job: Job, *, jitter: float = 0.0, seed: int = 0, exact_stages: bool = False) -> Timeline:
    """One step laid out on the pipeline schedule (``supercluster simulate``); with no jitter it ends
    when :func:`estimate`'s step does."""
    job = check_job(job)
    return _simulate(job.model, layout=job.layout, gpu=job.gpu, net=job.net, fw=job.framework, jitter=jitter,
                     seed=seed, exact_stages=exact_stages)


def validate(runs: str | None = None) -> dict[str, object]:
    """Every scored published run of ``runs`` (a CSV path, or ``public`` / ``heldout``) predicted: per-row
    error, MAPE, worst row (``supercluster validate``)."""
    return _validate(runs)


def build_fabric(num_gpus: int, gpu: GpuSpec | str, system: SystemSpec | str | None = None, **options: Any) -> Fabric:
    """The scale-out fabric for ``num_gpus`` (``supercluster fabric``): ``options`` switch, tiers,
    oversubscription, planes. ``system``: the GPU's default system where not given."""
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    s = get_system(system or g.system) if isinstance(system, str) or system is None else system
    return _build_fabric(num_gpus, g, s, **options)


__all__ = ["InputError", "build_fabric", "goodput", "plan", "simulate", "train", "validate"]
