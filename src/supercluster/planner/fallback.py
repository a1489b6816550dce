"""What ``estimate`` prices when it is given no layout: the default layout where it suits the job,
else the planner's fastest layout that fits, keeping the settings the user gave.

The default is the layout of the default job (Llama 3 405B on 16,384 GPUs: tp 8, pp 16, the
framework's interleaving); a job it does not divide (another model, another GPU count) is planned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..errors import InputError
from ..hardware.specs import GpuSpec
from ..job import Job, check_job, default_network
from ..models.spec import ModelSpec
from ..parallelism.framework import Framework
from ..parallelism.layout import Layout
from ..perf.columns import RECOMPUTE_CODE, module_bits
from .search import plan

#: the fields whose errors mean "this layout does not suit the job" (the planner is then asked)
LAYOUT_FIELDS = frozenset({"tp", "pp", "dp", "cp", "ep", "expert_tp", "vpp", "pp_layout", "gpus", "global_batch",
                           "micro_batch", "layout"})


def fixed_settings(seq_len: int, precision: str, micro_batch: int | None = None, zero: int | None = None,
                   recompute: str | None = None, recompute_modules: str | None = None,
                   sequence_parallel: bool | None = None) -> dict[str, int]:
    """The planner's ``fixed`` columns for the settings given (None: searched). They are checked alone
    first, on a one-GPU layout: an unknown recompute, module, ZeRO stage or precision is the user's to
    mend, whatever the layout."""
    mods = tuple(x.strip() for x in (recompute_modules or "").split(",") if x.strip())
    mb = 1 if micro_batch is None else micro_batch
    probe = Layout(tp=1, pp=1, dp=1, micro_batch=mb, global_batch=mb, seq_len=seq_len, precision=precision,
                   recompute=recompute or ("selective" if mods else "none"), zero_stage=zero or 0,
                   recompute_modules=mods)
    out = {"mb": micro_batch, "zero": zero, "sp": sequence_parallel,
           "recompute": RECOMPUTE_CODE[probe.recompute] if recompute is not None else None,
           "rcm": module_bits(probe.recompute_modules) if recompute_modules is not None else None}
    return {col: int(v) for col, v in out.items() if v is not None}


def planned_layout(model: ModelSpec, gpu: GpuSpec, gpus: int, framework: Framework, global_batch: int,
                   seq_len: int, precision: str, fixed: dict[str, int], extra: dict[str, int],
                   fabric_options: dict[str, Any], why: InputError,
                   progress: Callable[[int, int], None] | None = None) -> tuple[Layout, str]:
    """The planner's fastest layout that fits, keeping the ``fixed`` settings the user gave (micro-batch,
    ZeRO stage, recompute and its modules, sequence parallelism; ``extra``, which it does not search,
    are set on its winner), and the note that says so; ``why``: the default layout's error."""
    try:
        best = plan(model, gpu, gpus, global_batch=global_batch, seq_len=seq_len, framework=framework,
                    precisions=(precision,), top=1, fixed=fixed,
                    network=default_network(gpu, num_gpus=gpus, **fabric_options), progress=progress).best.layout
    except InputError as err:  # nothing fits, or nothing keeps the settings given: say that, after why
        raise InputError(err.field, f"{str(err).removeprefix(err.field + ': ')} (the default layout does not "
                         f"suit this job either: {str(why).split(' (defaults:')[0]})") from None
    best = dataclasses.replace(best, **extra)
    reason = str(why).split(" (defaults:")[0]
    note = (f"layout: none given, and the default (tp 8, pp 16: Llama 3 405B on 16,384 GPUs) does not suit this "
            f"job ({reason}); estimating the planner's fastest layout that fits: {best.label()} (supercluster plan "
            "lists the others)")
    return best, note


def default_or_planned(model: ModelSpec, gpu: GpuSpec, gpus: int, framework: Framework, layout: Layout,
                       kept: dict[str, Any], extra: dict[str, int], fabric_options: dict[str, Any],
                       progress: Callable[[int, int], None] | None = None) -> tuple[Layout, str | None]:
    """``layout`` (the default one) where the job runs it, else :func:`planned_layout` keeping the
    settings in ``kept`` (micro_batch, zero, recompute, recompute_modules, sequence_parallel) with
    ``extra`` set on the winner; and the note saying which (None: the default)."""
    try:
        check_job(Job(model=model, gpu=gpu, num_gpus=gpus, layout=layout, framework=framework))
        return layout, None
    except InputError as err:
        if err.field not in LAYOUT_FIELDS:
            raise
        fixed = fixed_settings(layout.seq_len, layout.precision, **kept)
        return planned_layout(model, gpu, gpus, framework, layout.global_batch, layout.seq_len, layout.precision,
                              fixed, extra, fabric_options, err, progress)
