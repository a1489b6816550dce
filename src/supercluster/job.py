"""A training job, checked once, and priced: :class:`Job`, :func:`check_job`, :func:`estimate`
(:func:`price_many` for many jobs at once).

A job is what runs (the model), on what (``num_gpus`` of a GPU, over a network), and how (the
framework that runs it and the layout: parallel degrees, batch, recompute, precision). Every view -
estimate, plan, simulate, validate, sweep, train - builds one of these and hands it to
:func:`check_job`, the one place a job is refused, before it is priced.

>>> job = Job.from_label("tp8-pp1-dp8", model="llama3-70b", gpu="h100-sxm", global_batch=64, seq_len=8192)
>>> job.num_gpus, job.framework.key
(64, 'nemo-megatron')
>>> round(estimate(job).step_time_s, 2)
7.29
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import Any

from .errors import InputError, require
from .formats.load import load_model
from .hardware.kernels import quantize_bytes_per_element
from .hardware.specs import GpuSpec, SystemSpec, get_gpu, get_system, with_network
from .models.spec import ModelSpec
from .network.twolevel import Network, TwoLevelNetwork
from .parallelism.framework import DEFAULT_FRAMEWORK, Framework, get_framework
from .parallelism.layout import Layout
from .perf.columns import DEFAULT_RANK_ORDER
from .perf.compute import check_kernels
from .perf.step import StepBreakdown, step_breakdown, step_breakdowns
from .units import GBIT

#: what a run may state of its own network (``fabric_options`` of :func:`default_network`; a runs row's
#: columns; estimate's and plan's options): its GPUs' scale-out rate and the GPUs of a node
NETWORK_RUN_OPTIONS = ("nic_gbit_per_gpu", "gpus_per_node")


def default_network(gpu: GpuSpec, system: SystemSpec | None = None, num_gpus: int | None = None,
                    **fabric_options: object) -> Network:
    """The network of ``gpu``'s default system (or the given one).

    With ``num_gpus``: the system's rail-optimized fabric sized for that many GPUs (1:1 unless
    ``fabric_options`` - switch, tiers, oversubscription, planes, sharp - say otherwise); without:
    the two-level scale-up / scale-out model. ``nic_gbit_per_gpu`` and ``gpus_per_node`` state the
    run's own network (:func:`~supercluster.hardware.specs.with_network`); a stated scale-out rate
    with no fabric described is priced on the two-level model (no switch family is assumed to carry
    it: a 50 Gb/s share of a node's NIC is no switch's port speed).
    """
    base = system or get_system(gpu.system)
    sys_ = _run_system(base, **{k: fabric_options.pop(k) for k in NETWORK_RUN_OPTIONS if k in fabric_options})
    described = any(v not in (None, False) for v in fabric_options.values())
    if num_gpus is None or (_new_rate(base, sys_) and not described):
        return TwoLevelNetwork.for_system(gpu, sys_)
    from .network.fabric import FabricNetwork, build_fabric

    sharp = bool(fabric_options.pop("sharp", False))
    fab = build_fabric(num_gpus, gpu, sys_, **fabric_options)  # type: ignore[arg-type]
    return FabricNetwork.for_fabric(fab, gpu, sys_, sharp=sharp)


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One training job. ``network`` None: the GPU's system with a fabric sized for ``num_gpus``
    (:func:`default_network`); ``rank_order``: innermost parallel dimension first (Megatron-Core's)."""

    model: ModelSpec
    gpu: GpuSpec
    num_gpus: int
    layout: Layout
    framework: Framework
    network: Network | None = None
    rank_order: str = DEFAULT_RANK_ORDER

    @classmethod
    def of(cls, model: ModelSpec | str, *, gpu: GpuSpec | str, layout: Layout, num_gpus: int | None = None,
           framework: Framework | str = DEFAULT_FRAMEWORK, network: Network | None = None,
           rank_order: str = DEFAULT_RANK_ORDER) -> Job:
        """A job from names or specs (``num_gpus``: the layout's, where not given)."""
        return cls(model=load_model(model) if isinstance(model, str) else model,
                   gpu=get_gpu(gpu) if isinstance(gpu, str) else gpu,
                   num_gpus=layout.num_gpus if num_gpus is None else num_gpus, layout=layout,
                   framework=get_framework(framework) if isinstance(framework, str) else framework,
                   network=network, rank_order=rank_order)

    @classmethod
    def from_label(cls, label: str, *, model: ModelSpec | str, gpu: GpuSpec | str, num_gpus: int | None = None,
                   global_batch: int, seq_len: int, framework: Framework | str = DEFAULT_FRAMEWORK,
                   network: Network | None = None, **layout_fields: Any) -> Job:
        """A job from a layout label as ``plan`` prints it (``tp8-pp16-dp128-vpp4-mb1-z1-full-sp``); a
        label without dp takes ``num_gpus`` / (tp pp cp). What the label leaves out is the layout's
        default (recompute none, ZeRO 1, the framework's sequence parallelism) in every command."""
        if num_gpus is not None and not re.search(r"(?:^|-)dp\d", label.lower()):
            layout_fields.setdefault("dp", derived_dp(label, num_gpus))
        layout = Layout.from_string(label, global_batch=global_batch, seq_len=seq_len, **layout_fields)
        return cls.of(model, gpu=gpu, layout=layout, num_gpus=num_gpus, framework=framework, network=network)

    @classmethod
    def from_config(cls, path: str, *, gpu: GpuSpec | str, num_gpus: int | None = None, model: str | None = None,
                    framework: Framework | str | None = None, network: Network | None = None) -> Job:
        """A job from a launcher config: a Megatron-LM launch script (its model and the behaviours its
        flags switch), a torchtitan job TOML or a DeepSpeed JSON
        (:func:`supercluster.formats.launchers.read_config`); without ``network``, the node size the
        script's torchrun line starts where it starts several nodes."""
        from .formats.launchers import config_gpus_per_node, read_config

        m, fw, layout = read_config(path, model=model, framework=framework if isinstance(framework, str) else None,
                                    num_gpus=num_gpus)
        if network is None:  # (the node the script's torchrun line starts, as estimate --config reads it)
            g = gpu if isinstance(gpu, GpuSpec) else get_gpu(gpu)
            network = stated_network(g, layout.num_gpus, gpus_per_node=config_gpus_per_node(path))[0]
        return cls.of(m, gpu=gpu, layout=layout, framework=framework if isinstance(framework, Framework) else fw,
                      network=network)

    @classmethod
    def from_row(cls, row: dict[str, str]) -> tuple[Job, str | None]:
        """A job from a row of a runs CSV (the shared validation format), checked (:func:`check_job`), and
        the note of what the row's columns left to defaults (:func:`supercluster.formats.runs.row_setup`)."""
        from .formats.runs import row_gpu, row_network, row_setup

        model, layout, fw, note = row_setup(row)
        key, read = row_gpu(row)
        gpu = get_gpu(key)
        note = "; ".join(x for x in (read, note) if x) or None
        net, said = stated_network(gpu, layout.num_gpus, **row_network(row, get_system(gpu.system).gpus_per_node))
        job = cls.of(model, gpu=gpu, layout=layout, framework=fw, network=net)
        if not (row.get("micro_batch") or "").strip() and layout.pp == 1:
            job, fitted = fitted_micro_batch(job)
            said = "; ".join(x for x in (said, fitted) if x)
        return check_job(job), "; ".join(x for x in (note, said) if x) or None

    @property
    def net(self) -> Network:
        """The network the job's collectives run on."""
        return self.network or default_network(self.gpu, num_gpus=self.num_gpus)


def _run_system(system: SystemSpec, **stated: object) -> SystemSpec:
    """``system`` with what a run states of its network (:data:`NETWORK_RUN_OPTIONS`; None: not
    stated), each value checked (:func:`~supercluster.hardware.specs.with_network`)."""
    return with_network(system, **{k: v for k, v in stated.items() if v is not None})  # type: ignore[arg-type]


def _new_rate(system: SystemSpec, run: SystemSpec) -> bool:
    """Whether ``run`` states a scale-out rate of its own, not ``system``'s (within 0.5 %: a stated
    400 Gb/s is the catalog's 400 Gb/s)."""
    return abs(run.nic_bytes_per_s / system.nic_bytes_per_s - 1.0) > 0.005


def stated_network(gpu: GpuSpec, num_gpus: int, **stated: float | int | None) -> tuple[Network | None, str | None]:
    """The network a run states (:data:`NETWORK_RUN_OPTIONS`, None: not stated) where it differs from
    ``gpu``'s system (None otherwise: the job keeps its default), and the note that says so; the same
    object for the same statement, so that runs of one network are priced together."""
    sys_ = get_system(gpu.system)
    run = _run_system(sys_, **stated)
    new_nic, new_node = _new_rate(sys_, run), run.gpus_per_node != sys_.gpus_per_node
    if not (new_nic or new_node):
        return None, None
    opts = (run.nic_bytes_per_s / GBIT if new_nic else None, run.gpus_per_node if new_node else None)
    said = ", ".join(x for x in (f"{opts[0]:g} Gb/s per GPU" if new_nic else "",
                                 f"{opts[1]} GPUs per node" if new_node else "") if x)
    return _stated_network(gpu.key, num_gpus, *opts), f"network as the run states it: {said}"


@functools.lru_cache(maxsize=256)
def _stated_network(gpu_key: str, num_gpus: int, nic: float | None, per_node: int | None) -> Network:
    return default_network(get_gpu(gpu_key), num_gpus=num_gpus, nic_gbit_per_gpu=nic, gpus_per_node=per_node)


#: the most micro-batch sizes :func:`fitted_micro_batch` prices (a local batch's divisors, largest first)
MAX_FITTED_CANDIDATES = 64


def fitted_micro_batch(job: Job) -> tuple[Job, str | None]:
    """A run that leaves its micro-batch unstated without pipelining: the largest micro-batch that
    divides its local batch (``job.layout.micro_batch``) and fits the GPU's memory, as automatic
    micro-batching (Composer's ``device_train_microbatch_size: auto``) picks it and as a run that ran
    must have fitted; the whole local batch as one micro-batch can need terabytes. The note says which
    (None where the whole local batch fits; 1 where nothing does)."""
    local = job.layout.micro_batch
    sizes = [d for d in range(local, 0, -1) if local % d == 0][:MAX_FITTED_CANDIDATES]
    jobs = []
    for mb in sizes:
        try:
            jobs.append(check_job(dataclasses.replace(job, layout=dataclasses.replace(job.layout, micro_batch=mb))))
        except InputError:
            continue
    if not jobs:
        return job, None
    fits = [j for j, b in zip(jobs, price_many(jobs), strict=True) if b.fits]
    best = fits[0] if fits else jobs[-1]
    if best.layout.micro_batch == local:
        return job, None
    why = "the largest that fits" if fits else "none fits"
    return (dataclasses.replace(job, layout=dataclasses.replace(job.layout, micro_batch=best.layout.micro_batch)),
            f"micro-batch not stated: {best.layout.micro_batch} of the local batch of {local} ({why})")


def derived_dp(label: str, num_gpus: int) -> int:
    """dp for a layout label that leaves it out: the GPUs over tp x pp x cp."""
    degrees = {m.group(1): int(m.group(2)) for m in re.finditer(r"(?:^|-)(tp|pp|cp)(\d+)", label.lower())}
    tp, pp, cp = degrees.get("tp", 1), degrees.get("pp", 1), degrees.get("cp", 1)
    if min(tp, pp, cp) < 1:
        return 1  # (the layout names the bad degree)
    require(num_gpus % (tp * pp * cp) == 0, "layout",
            f"gpus {num_gpus} is not divisible by tp x pp x cp = {tp} x {pp} x {cp} of {label!r}; give dp in it "
            "or another --gpus")
    return num_gpus // (tp * pp * cp)


def check_job(job: Job) -> Job:
    """The one place a job is refused: an :class:`~supercluster.errors.InputError` naming the field
    and every number involved, else the job as its framework runs it (an MoE model under Megatron
    with tp > 1 gets sequence parallelism, :meth:`Framework.runnable`).

    In order: the GPU count against the degrees; the layout against the model (heads, KV heads,
    recurrent heads, layers per pipeline slot, experts, CP and the sequence); recompute modules the
    model has; the framework's own rules (degrees it runs, its pipeline schedule's micro-batches,
    sequence parallelism); the GPU's precisions; kernels the framework has for the model's layers.
    """
    m, fw, lay = job.model, job.framework, job.layout
    require(isinstance(job.num_gpus, int) and job.num_gpus >= 1, "gpus",
            f"must be a positive integer, got {job.num_gpus!r}")
    lay.check_gpus(job.num_gpus)
    lay.check_model(m, extra_pp_layers=fw.extra_pp_layers)
    require("mla_up_proj" not in lay.recompute_modules or m.kv_lora_rank > 0, "recompute_modules",
            f"mla_up_proj recomputes MLA's up-projections; {m.name} has no MLA (kv_lora_rank 0)")
    moe_mods = [x for x in lay.recompute_modules if x in ("moe", "moe_act")]
    require(not moe_mods or m.is_moe, "recompute_modules",
            f"{', '.join(moe_mods)} recompute MoE layers; {m.name} is dense (use mlp, core_attn or layernorm)")
    require(not lay.recompute_modules or fw.recompute_modules, "recompute_modules",
            f"are Megatron-Core's (--recompute-modules); framework {fw.key} has no per-module recompute (its "
            f"selective recompute: {'per op' if fw.selective_recompute == 'op' else 'the core attention'}); "
            "leave them out")
    lay = fw.runnable(lay, m)
    job.gpu.peak(lay.precision)
    if lay.precision == "fp8":
        # the fp8 recipe has kernels on this GPU's generation (MXFP8 needs Blackwell's block scaling)
        quantize_bytes_per_element(job.gpu.arch, "fp8", fw.fp8_recipe)
    check_kernels(m, fw, job.gpu)
    return job if lay == job.layout else dataclasses.replace(job, layout=lay)


def price(job: Job) -> StepBreakdown:
    """The step of a job :func:`check_job` passed."""
    return step_breakdown(job.model, layout=job.layout, gpu=job.gpu, net=job.net, fw=job.framework,
                          rank_order=job.rank_order)


def price_many(jobs: list[Job]) -> list[StepBreakdown]:
    """The steps of jobs :func:`check_job` passed, in order: the same numbers as :func:`price` one by one,
    priced in one vectorised pass per group of jobs that share a model, GPU, GPU count, network, framework,
    rank order and explicit pipeline layout (a layout sweep, a runs file: validate's thousands of rows)."""
    # (jobs are first grouped by the identity of their specs, then those groups by the specs' values:
    # hashing a model or framework spec for every job of a large file would cost more than pricing it)
    same: dict[tuple[object, ...], list[int]] = {}
    for i, job in enumerate(jobs):
        key = (id(job.model), id(job.gpu), job.num_gpus, id(job.network), id(job.framework), job.rank_order,
               job.layout.pp_layout)
        same.setdefault(key, []).append(i)
    groups: dict[tuple[object, ...], list[int]] = {}
    for idx in same.values():
        job = jobs[idx[0]]
        key = (job.model, id(job.gpu), job.num_gpus, id(job.network), job.framework, job.rank_order,
               job.layout.pp_layout)
        groups.setdefault(key, []).extend(idx)
    out: list[StepBreakdown | None] = [None] * len(jobs)
    for idx in groups.values():
        first = jobs[idx[0]]
        priced = step_breakdowns(first.model, layouts=[jobs[i].layout for i in idx], gpu=first.gpu, net=first.net,
                                 fw=first.framework, rank_order=first.rank_order)
        for i, b in zip(idx, priced, strict=True):
            out[i] = b
    return out  # type: ignore[return-value]


def estimate(model: Job | ModelSpec | str, *, gpu: GpuSpec | str | None = None, num_gpus: int | None = None,
             layout: Layout | None = None, framework: Framework | str = DEFAULT_FRAMEWORK,
             network: Network | None = None, rank_order: str = DEFAULT_RANK_ORDER) -> StepBreakdown:
    """Predict one training step: of a :class:`Job`, or of ``model`` on ``num_gpus`` GPUs with ``layout``.

    >>> b = estimate("llama3-8b", gpu="h100-sxm", num_gpus=8,
    ...              layout=Layout(dp=8, global_batch=64, seq_len=8192))
    >>> 0.2 < b.mfu < 0.8
    True
    """
    if isinstance(model, Job):
        return price(check_job(model))
    require(gpu is not None and layout is not None, "estimate", "give a Job, or a model with gpu= and layout=")
    assert gpu is not None and layout is not None
    return price(check_job(Job.of(model, gpu=gpu, layout=layout, num_gpus=num_gpus, framework=framework,
                                  network=network, rank_order=rank_order)))


def placement(model: ModelSpec, layout: Layout, network: Network,
              rank_order: str = DEFAULT_RANK_ORDER) -> list[dict[str, object]]:
    """Where each parallel group of ``layout`` sends its traffic on ``network`` (see
    :meth:`supercluster.network.fabric.FabricNetwork.placement`): groups of one member left out, the experts'
    data-parallel group for MoE only. Empty where the network is not a sized fabric (a device profile's
    measured collectives, the two-level model)."""
    import numpy as np

    from .network.fabric import FabricNetwork
    from .perf.columns import group_shapes

    if not isinstance(network, FabricNetwork):
        return []
    one = {k: np.array([v]) for k, v in dict(tp=layout.tp, cp=layout.cp, dp=layout.dp, pp=layout.pp,
                                             ep=layout.ep, etp=layout.etp).items()}
    shapes = group_shapes(rank_order, one["tp"], one["cp"], one["dp"], one["pp"], one["ep"], one["etp"])
    groups = {k: (int(g[0]), int(s[0])) for k, (g, s) in shapes.items()
              if int(g[0]) > 1 and (k not in ("ep", "edp") or model.is_moe)}
    return network.placement(groups)
