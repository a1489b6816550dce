"""A whole training run: step time (cost model) x failures (goodput) -> days, GPU-hours, MWh, dollars,
and the entropy ledger from peak FLOPs down to useful model FLOPs.

Every line of the run ledger is wall-clock seconds of the whole machine (multiply by GPUs x peak
FLOP/s for FLOPs): the step ledger's lines scaled to the productive time, then checkpoint stalls,
work lost to interruptions, restarts (detection, restart, reload, planned maintenance) and, for
elastic runs, time lost to missing replicas. They sum exactly to the wall time (per trial, hence
in the mean).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError, require
from ..hardware.specs import GpuSpec, SystemSpec, get_system
from ..job import estimate
from ..models.spec import ModelSpec
from ..network import costs
from ..network.twolevel import Network
from ..parallelism.framework import Framework
from ..parallelism.layout import Layout
from ..perf.step import StepBreakdown
from ..planner.search import plan
from .goodput import (
    DAY_S,
    Recovery,
    RunSpec,
    SimResult,
    best_interval_s,
    daly_interval_s,
    expected_ettr,
    load_failure_model,
    plan_checkpoint,
    quantiles,
    simulate,
    young_interval_s,
)

#: The longest run priced, in days: far past any training run (the scale study prices a frontier
#: token budget on one GPU, thousands of days), and short of where the failure simulation, which draws
#: each trial's interruptions at once, breaks down (numpy's negative-binomial limits)
MAX_RUN_DAYS = 1_000_000
#: Compute-optimal tokens per parameter (Chinchilla Approach 1/2 and the Epoch refit; scaling_laws.md 2.3-2.5).
TOKENS_PER_PARAM = 20.0
RUN_LOSSES = ("checkpoint_stalls", "failed_work", "restarts", "degraded_replicas")


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    rates: str = "llama3"
    trials: int = 10_000
    seed: int = 0
    asynchronous: bool = False
    hot_spares: bool = False
    elastic: bool = False
    storage_bytes_per_s: float | None = None
    interval_s: float | None = None  # None: the best interval in simulation
    pue: float = costs.DEFAULT_PUE
    gpu_hour_usd: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunReport:
    model: str
    gpu: str
    num_gpus: int
    layout: Layout
    step: StepBreakdown
    work_s: float
    mtbf_s: float
    checkpoint: dict[str, float]
    interval: dict[str, float]
    sim: SimResult = field(repr=False)
    expected_ettr: float
    by_component: dict[str, float]
    facility_power_w: float
    gpu_hour_usd: float
    tokens: float
    #: (interval s, closed-form mean ETTR) on a log grid around the interval used: what the choice of
    #: checkpoint interval is worth
    ettr_by_interval: tuple[tuple[float, float], ...] = ()

    @property
    def ettr(self) -> dict[str, float]:
        return quantiles(self.sim.ettr)

    @property
    def wall_days(self) -> dict[str, float]:
        return quantiles(self.sim.wall_s / DAY_S)

    @property
    def interruptions(self) -> dict[str, float]:
        return quantiles(self.sim.interruptions)

    def ledger_s(self) -> dict[str, float]:
        """Mean wall seconds per loss line; sums to the mean wall time."""
        scale = self.work_s / self.step.step_time_s
        out = {k: v * scale for k, v in self.step.ledger.items()}
        out["checkpoint_stalls"] = float(np.mean(self.sim.checkpoint_s))
        out["failed_work"] = float(np.mean(self.sim.lost_work_s))
        out["restarts"] = float(np.mean(self.sim.recovery_s))
        out["degraded_replicas"] = float(np.mean(self.sim.degraded_s))
        return out

    def summary(self) -> dict[str, object]:
        wall = float(np.mean(self.sim.wall_s))
        gpu_hours = wall * self.num_gpus / 3600.0
        energy_j = wall * self.num_gpus * self.facility_power_w
        peak = self.step.peak_flops_per_s * self.num_gpus
        ledger = self.ledger_s()
        return {
            "model": self.model, "gpu": self.gpu, "gpus": self.num_gpus, "layout": self.layout.short(),
            "tokens": self.tokens, "step_time_s": self.step.step_time_s, "mfu": self.step.mfu,
            "model_flops_per_s": self.step.model_flops / self.step.step_time_s,
            "failure_free_days": self.work_s / DAY_S, "job_mtbf_h": self.mtbf_s / 3600.0,
            "interruptions_p10": self.interruptions["p10"], "interruptions_p50": self.interruptions["p50"],
            "interruptions_p90": self.interruptions["p90"], "interruptions_mean": self.interruptions["mean"],
            "ettr_p10": self.ettr["p10"], "ettr_p50": self.ettr["p50"], "ettr_p90": self.ettr["p90"],
            "ettr_mean": self.ettr["mean"], "ettr_expected": self.expected_ettr,
            "wall_days_p10": self.wall_days["p10"], "wall_days_p50": self.wall_days["p50"],
            "wall_days_p90": self.wall_days["p90"], "checkpoint_interval_s": self.interval["used_s"],
            "checkpoint_interval_young_s": self.interval["young_s"], "checkpoint_interval_daly_s":
                self.interval["daly_s"], "checkpoint": self.checkpoint,
            "gpu_hours": gpu_hours, "energy_mwh": energy_j / 3.6e9, "facility_power_mw":
                self.num_gpus * self.facility_power_w / 1e6, "cost_usd": gpu_hours * self.gpu_hour_usd,
            "gpu_hour_usd": self.gpu_hour_usd, "expected_by_component": self.by_component,
            "ledger_s": ledger, "ledger_flops": {k: v * peak for k, v in ledger.items()},
            "peak_flops_total": wall * peak, "useful_flops": ledger["ideal_compute"] * peak,
            "ettr_by_interval": [list(p) for p in self.ettr_by_interval],
        }


def analyse_run(model: ModelSpec, gpu: GpuSpec, num_gpus: int, *, framework: Framework,
                layout: Layout | None = None, tokens: float | None = None, days: float | None = None,
                global_batch: int = 2048, seq_len: int = 8192, options: RunOptions = RunOptions(),
                network: Network | None = None, system: SystemSpec | None = None) -> RunReport:
    """Price a run of ``tokens`` (default: compute-optimal 20 per parameter) or of ``days`` of wall time;
    ``network`` / ``system``: the run's own (the step's collectives; the nodes failures strike), else
    the GPU's catalog system's."""
    require(tokens is None or tokens > 0, "tokens", f"must be > 0, got {tokens}")
    require(days is None or 0 < days <= MAX_RUN_DAYS, "days", f"must be in (0, {MAX_RUN_DAYS:,}] days, got {days}")
    if layout is None:
        layout = plan(model, gpu, num_gpus, global_batch=global_batch, seq_len=seq_len,
                      framework=framework, top=1, network=network).best.layout
    step = estimate(model, gpu=gpu, num_gpus=num_gpus, layout=layout, framework=framework, network=network)
    system = system or get_system(gpu.system)
    fm = load_failure_model(options.rates)
    rate, hw_rate = fm.rates_per_s(num_gpus, system.gpus_per_node)
    rec = Recovery.default()
    ck = plan_checkpoint(model.num_params, num_gpus, storage_bytes_per_s=options.storage_bytes_per_s,
                         asynchronous=options.asynchronous)
    restart = rec.restart_s / (rec.warm_standby_speedup if (options.hot_spares or options.elastic) else 1.0)
    recovery = rec.detect_s + restart + ck.restore_s
    slowdown = 1.0
    if options.elastic:
        missing = hw_rate * rec.elastic_repair_s  # replicas out at any time (Little's law)
        require(missing < layout.dp, "elastic", f"{missing:.1f} replicas out on average of dp={layout.dp}: "
                                                "elastic continuation cannot keep up")
        slowdown = layout.dp / (layout.dp - missing)
    mtbf = 1.0 / rate if rate > 0 else math.inf
    young = young_interval_s(ck.stall_s + ck.lag_s, mtbf) if rate > 0 else math.inf
    daly = daly_interval_s(ck.stall_s + ck.lag_s, mtbf) if rate > 0 else math.inf
    tok = tokens if tokens is not None else TOKENS_PER_PARAM * model.num_params
    work = tok / step.tokens_per_step * step.step_time_s
    require(days is not None or work <= MAX_RUN_DAYS * DAY_S, "tokens",
            f"{tok:.3g} tokens take {work / DAY_S:,.0f} days failure-free on this job, past the {MAX_RUN_DAYS:,} "
            "a run is priced for; give fewer tokens or more GPUs")

    def spec_for(work_s: float, interval: float) -> RunSpec:
        return RunSpec(work_s=work_s, rate_per_s=rate, planned_per_s=fm.planned_per_day / DAY_S,
                       interval_s=min(interval, work_s), stall_s=ck.stall_s, lag_s=ck.lag_s, recovery_s=recovery,
                       planned_recovery_s=restart + ck.restore_s, slowdown=slowdown)

    first_guess = max(min(daly, 0.5 * DAY_S), 60.0) if math.isfinite(daly) else 0.5 * DAY_S
    if days is not None:  # a wall-clock horizon: find the work whose mean wall time is `days`
        work = days * DAY_S
        for _ in range(4):
            work = days * DAY_S * expected_ettr(spec_for(work, first_guess)) / slowdown
    if options.interval_s is not None:
        require(options.interval_s > 0, "interval", f"must be > 0 seconds, got {options.interval_s}")
        used = options.interval_s
    elif rate > 0:
        used = best_interval_s(spec_for(work, first_guess), first_guess, seed=options.seed)
    else:
        used = work
    spec = spec_for(work, used)
    sim = simulate(spec, trials=options.trials, seed=options.seed)
    if days is not None:
        tok = work / step.step_time_s * step.tokens_per_step
    price = options.gpu_hour_usd if options.gpu_hour_usd is not None else costs.gpu_hour_usd(gpu, system,
                                                                                              pue=options.pue)
    require(price >= 0, "gpu_hour_usd", f"must be >= 0, got {price}")
    return RunReport(
        model=model.key, gpu=gpu.key, num_gpus=num_gpus, layout=layout, step=step, work_s=work, mtbf_s=mtbf,
        checkpoint={"state_bytes": ck.state_bytes, "write_s": ck.write_s, "stall_s": ck.stall_s,
                    "restore_s": ck.restore_s, "asynchronous": float(ck.asynchronous), "recovery_s": recovery},
        interval={"young_s": young, "daly_s": daly, "used_s": spec.interval_s},
        sim=sim, expected_ettr=expected_ettr(spec),
        by_component=fm.by_component(num_gpus, system.gpus_per_node, float(np.mean(sim.wall_s))),
        facility_power_w=costs.facility_power_w_per_gpu(gpu, system, pue=options.pue, num_gpus=num_gpus),
        gpu_hour_usd=price,
        tokens=tok,
        ettr_by_interval=tuple((float(t), expected_ettr(spec_for(work, float(t))))
                               for t in spec.interval_s * np.geomspace(0.05, 20.0, 41) if t <= work),
    )


def compute_optimal_for_deadline(model_flops_per_s: float, days: float, ettr: float) -> dict[str, float]:
    """Chinchilla-optimal model for a cluster and a deadline: C = model FLOP/s achieved x ETTR x time
    (the step's model FLOPs over its time, in the precision it runs), C = 6 N D with D = 20 N."""
    require(days > 0, "deadline_days", f"must be > 0, got {days}")
    compute = model_flops_per_s * ettr * days * DAY_S
    params = math.sqrt(compute / (6.0 * TOKENS_PER_PARAM))
    return {"compute_flops": compute, "params": params, "tokens": TOKENS_PER_PARAM * params}


def scale_table(model: ModelSpec, gpu: GpuSpec, sizes: list[int], *, framework: Framework, tokens: float | None = None,
                base_batch: int = 1024, gpus_per_sequence: int = 16, seq_len: int = 8192,
                options: RunOptions = RunOptions(trials=2000)) -> list[dict[str, object]]:
    """One row per cluster size: the planner's best layout, then its run (see :func:`analyse_run`).

    The global batch is ``max(base_batch, gpus // gpus_per_sequence)`` sequences, so data
    parallelism can grow with the cluster (a real run caps it at the critical batch size).
    """
    rows: list[dict[str, object]] = []
    for n in sizes:
        gbs = max(base_batch, n // gpus_per_sequence)
        try:
            r = analyse_run(model, gpu, n, framework=framework, tokens=tokens, global_batch=gbs, seq_len=seq_len,
                            options=options)
        except InputError as exc:
            if exc.field not in ("gpus", "global_batch"):
                raise
            # too few GPUs to hold the model, or no legal layout of this batch on this many (a
            # data-parallel-only framework with more GPUs than sequences): a row that says so, and the next size
            rows.append({"gpus": n, "global_batch": gbs, "layout": None, "fits": False, "reason": str(exc)})
            continue
        s = r.summary()
        rows.append({"gpus": n, "global_batch": gbs, "layout": s["layout"], "step_time_s": s["step_time_s"],
                     "mfu": s["mfu"], "job_mtbf_h": s["job_mtbf_h"],
                     "checkpoint_interval_s": s["checkpoint_interval_s"], "ettr_p50": s["ettr_p50"],
                     "interruptions_p50": s["interruptions_p50"], "days_p50": s["wall_days_p50"],
                     "energy_mwh": s["energy_mwh"], "cost_usd": s["cost_usd"], "fits": True})
    return rows
