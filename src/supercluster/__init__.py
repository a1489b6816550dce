"""supercluster: treat a GPU cluster as one machine.

How long will a training step take, which layout is fastest and fits, what does the run cost once
failures and checkpoints are counted, what network does the cluster need? One cost model answers,
and every function here (and every ``supercluster`` command) reads its answer.

>>> import supercluster as sc
>>> step = sc.estimate("llama3-70b", gpu="h100-sxm", num_gpus=64,
...                    layout=sc.Layout(tp=8, dp=8, global_batch=64, seq_len=8192))
>>> round(step.step_time_s, 3), step.fits
(7.292, True)
"""

from ._version import __version__
from .api import build_fabric, goodput, plan, simulate, train, validate
from .errors import InputError
from .formats.load import load_model
from .hardware.specs import GpuSpec, get_gpu
from .job import Job, check_job, estimate
from .models.spec import ModelSpec
from .network.fabric import Fabric
from .parallelism.framework import DEFAULT_FRAMEWORK, Framework, get_framework
from .parallelism.layout import Layout
from .perf.step import StepBreakdown
from .planner.search import PlanResult
from .reliability.run import RunOptions, RunReport
from .simulation.timeline import Timeline

__all__ = [
    "DEFAULT_FRAMEWORK",
    "Fabric",
    "Framework",
    "GpuSpec",
    "InputError",
    "Job",
    "Layout",
    "ModelSpec",
    "PlanResult",
    "RunOptions",
    "RunReport",
    "StepBreakdown",
    "Timeline",
    "__version__",
    "build_fabric",
    "check_job",
    "estimate",
    "get_framework",
    "get_gpu",
    "goodput",
    "load_model",
    "plan",
    "simulate",
    "train",
    "validate",
]
