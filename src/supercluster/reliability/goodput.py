"""From step time to time-to-train: interruptions, checkpoints, Monte Carlo goodput, the run ledger.

Failure model. Interruptions are a Poisson process in wall-clock time whose rate is the sum of
component rates (``data/reliability.toml``: per GPU-hour or per node-hour, from Llama 3's Table 5
or Meta's RSC study) scaled to the job, plus planned interruptions per day. After an unplanned
one the job detects it, restarts and reloads the last checkpoint (recovery R); the work since
that checkpoint is lost. Interruptions also strike during recovery.

Checkpointing. State = bytes per parameter x parameters (one copy, written in parallel by the
data-parallel shards). Synchronous: training stalls for the write (state / storage bandwidth,
but never faster than the per-GPU shard over the host link). Asynchronous: it stalls only to copy
the shard to host memory; the write finishes in the background and until then the previous
checkpoint is the one a failure rolls back to.

Monte Carlo (vectorized over trials, seeded ``numpy.random.Generator``). A run needs J work
segments of tau seconds; each segment plus its checkpoint stall is one slot that survives with
probability s = exp(-lambda v) (v: the slot plus any asynchronous write lag). By memorylessness the
number of failed slots before J successes is negative-binomial NB(J, s); each failure starts a
recovery that itself fails NB(F, exp(-lambda R)) times. Time lost inside failed slots and
recoveries is a sum of exponentials truncated to the slot, drawn from a gamma with the sum's exact
mean and variance (central limit; exact as counts grow). Planned interruptions are Poisson over
the run's wall time. So one trial costs O(1) whatever the number of failures - a 100-day run on a
million GPUs (~50,000 interruptions) is as cheap as a small one.

Checkpoint interval: Young (1974) tau = sqrt(2 delta M); Daly (2006) higher-order form; and the
interval that maximises the simulated mean ETTR on a grid around Daly's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

from .._toml import load_package_toml
from ..errors import InputError, require
from ..files import parse_toml, read_input, user_path

DAY_S = 86400.0
HOUR_S = 3600.0


# ---- failure model --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Component:
    name: str
    per_gpu_hour: float
    per_node_hour: float
    hardware: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureModel:
    key: str
    name: str
    components: tuple[Component, ...]
    planned_per_day: float
    sources: str

    def rates_per_s(self, num_gpus: int, gpus_per_node: int) -> tuple[float, float]:
        """(all unplanned, hardware only) interruptions per second for a job of ``num_gpus``."""
        nodes = math.ceil(num_gpus / gpus_per_node)
        total = hw = 0.0
        for c in self.components:
            r = (c.per_gpu_hour * num_gpus + c.per_node_hour * nodes) / HOUR_S
            total += r
            hw += r if c.hardware else 0.0
        return total, hw

    def by_component(self, num_gpus: int, gpus_per_node: int, seconds: float) -> dict[str, float]:
        """Expected unplanned interruptions per component over ``seconds`` of wall time."""
        nodes = math.ceil(num_gpus / gpus_per_node)
        return {c.name: (c.per_gpu_hour * num_gpus + c.per_node_hour * nodes) * seconds / HOUR_S
                for c in self.components}


def _parse_failure_model(key: str, t: dict[str, object]) -> FailureModel:
    comps = []
    gpu_hours = t.get("gpu_hours")
    raw = t.get("components")
    require(isinstance(raw, dict) and raw, f"rates.{key}.components", "must be a non-empty table")
    assert isinstance(raw, dict)
    for name, c in raw.items():
        require(isinstance(c, dict), f"rates.{key}.{name}", "must be a table")
        per_gpu = float(c.get("per_gpu_hour", 0.0))
        if "count" in c:
            require(isinstance(gpu_hours, (int, float)) and gpu_hours > 0, f"rates.{key}.gpu_hours",
                    "needed (> 0) when components give counts")
            per_gpu = float(c["count"]) / float(gpu_hours)  # type: ignore[arg-type]
        per_node = float(c.get("per_node_hour", 0.0))
        require(per_gpu >= 0 and per_node >= 0, f"rates.{key}.{name}", "rates must be >= 0")
        comps.append(Component(name=name, per_gpu_hour=per_gpu, per_node_hour=per_node,
                               hardware=bool(c.get("hardware", True))))
    planned = float(t.get("planned_per_day", 0.0))  # type: ignore[arg-type]
    require(planned >= 0, f"rates.{key}.planned_per_day", f"must be >= 0, got {planned}")
    return FailureModel(key=key, name=str(t.get("name", key)), components=tuple(comps), planned_per_day=planned,
                        sources=str(t.get("sources", "user file")))


@cache
def _reliability() -> dict[str, object]:
    return load_package_toml("reliability.toml")


RATE_SETS = ("llama3", "rsc1", "rsc2")


def load_failure_model(ref: str = "llama3") -> FailureModel:
    """A built-in rate set (``llama3``, ``rsc1``, ``rsc2``) or a TOML file with one such table."""
    if ref in RATE_SETS:
        return _parse_failure_model(ref, _reliability()[ref])  # type: ignore[arg-type]
    p = user_path(ref, "rates")
    if not p.is_file():
        raise InputError("rates", f"unknown {ref!r}; use one of {', '.join(RATE_SETS)} or a TOML file")
    data = parse_toml(read_input(p, "rates"), "rates", f"{p}: ")
    tables = {k: v for k, v in data.items() if isinstance(v, dict) and "components" in v}
    require(len(tables) == 1, "rates", f"{p} must hold exactly one table with a [*.components] sub-table")
    key, t = next(iter(tables.items()))
    return _parse_failure_model(key, t)


@dataclass(frozen=True, slots=True, kw_only=True)
class Recovery:
    health_check_period_s: float
    restart_s: float
    warm_standby_speedup: float
    elastic_repair_s: float

    @classmethod
    def default(cls) -> Recovery:
        t = _reliability()["recovery"]
        return cls(**{k: float(v) for k, v in t.items()})  # type: ignore[union-attr]

    @property
    def detect_s(self) -> float:
        """Mean wait for the next periodic health check: half its period (uniform arrival)."""
        return self.health_check_period_s / 2.0


# ---- checkpoints ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    state_bytes: float
    write_s: float  # state to storage
    stall_s: float  # training paused per checkpoint
    lag_s: float  # asynchronous: write time after the stall during which the old checkpoint is current
    restore_s: float
    asynchronous: bool


def checkpoint_defaults() -> dict[str, float]:
    return {k: float(v) for k, v in _reliability()["checkpoint"].items()}  # type: ignore[union-attr]


def plan_checkpoint(num_params: float, num_gpus: int, *, storage_bytes_per_s: float | None = None,
                    host_copy_bytes_per_s: float | None = None, asynchronous: bool = False,
                    bytes_per_param: float | None = None) -> Checkpoint:
    d = checkpoint_defaults()
    bw = storage_bytes_per_s if storage_bytes_per_s is not None else d["storage_bytes_per_s"]
    host = host_copy_bytes_per_s if host_copy_bytes_per_s is not None else d["host_copy_bytes_per_s"]
    bpp = bytes_per_param if bytes_per_param is not None else d["state_bytes_per_param"]
    require(bw > 0, "storage_bw", f"must be > 0 bytes/s, got {bw}")
    require(host > 0, "host_copy_bw", f"must be > 0 bytes/s, got {host}")
    require(num_params > 0 and num_gpus >= 1, "model", "needs parameters and GPUs")
    state = bpp * num_params
    shard_s = state / num_gpus / host
    write = max(state / bw, shard_s)
    restore = max(state / bw, shard_s)
    if asynchronous:
        return Checkpoint(state_bytes=state, write_s=write, stall_s=shard_s, lag_s=write, restore_s=restore,
                          asynchronous=True)
    return Checkpoint(state_bytes=state, write_s=write, stall_s=write, lag_s=0.0, restore_s=restore,
                      asynchronous=False)


def young_interval_s(delta_s: float, mtbf_s: float) -> float:
    """Young (1974): sqrt(2 delta M)."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval_s(delta_s: float, mtbf_s: float) -> float:
    """Daly (2006) higher-order optimum; M itself when delta >= 2M."""
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    r = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1.0 + math.sqrt(r) / 3.0 + r / 9.0) - delta_s


# ---- Monte Carlo ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class RunSpec:
    """A run to simulate. Times in seconds, rates per second."""

    work_s: float  # failure-free productive time the run needs
    rate_per_s: float  # unplanned interruptions
    planned_per_s: float
    interval_s: float  # productive time between checkpoints
    stall_s: float
    lag_s: float
    recovery_s: float  # detect + restart + restore after an unplanned interruption
    planned_recovery_s: float  # restart + restore after a planned one (no detection, no lost work)
    slowdown: float = 1.0  # >= 1: elastic runs are slower while replicas are out

    def __post_init__(self) -> None:
        for f in ("work_s", "interval_s"):
            require(getattr(self, f) > 0, f, f"must be > 0, got {getattr(self, f)}")
        for f in ("rate_per_s", "planned_per_s", "stall_s", "lag_s", "recovery_s", "planned_recovery_s"):
            require(getattr(self, f) >= 0, f, f"must be >= 0, got {getattr(self, f)}")
        require(self.slowdown >= 1.0, "slowdown", f"must be >= 1, got {self.slowdown}")


def _trunc_exp_moments(lam: float, a: float) -> tuple[float, float]:
    """Mean and variance of an exponential(lam) conditioned to be below ``a``."""
    x = lam * a
    if x < 1e-2:  # series: uniform on [0, a] plus the first correction
        return a * (0.5 - x / 12.0), a * a * (1.0 / 12.0 - x * x / 720.0)
    e = math.exp(-x)
    mean = (1.0 - x * e / (1.0 - e)) / lam
    second = (2.0 - e * (x * x + 2.0 * x + 2.0)) / (1.0 - e) / (lam * lam)
    return mean, max(second - mean * mean, 1e-300)


def _sum_trunc_exp(rng: np.random.Generator, n: np.ndarray, lam: float, a: float) -> np.ndarray:
    if lam <= 0 or a <= 0:
        return np.zeros(n.shape)
    if a < 1e-6:  # a negligible window: its mean is exact enough
        return n * a / 2.0
    m, v = _trunc_exp_moments(lam, a)
    k = np.maximum(n, 1) * m * m / v
    draw = rng.gamma(k, v / m)
    return np.where(n > 0, draw, 0.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class SimResult:
    wall_s: np.ndarray
    unplanned: np.ndarray
    planned: np.ndarray
    productive_s: np.ndarray
    checkpoint_s: np.ndarray
    lost_work_s: np.ndarray
    recovery_s: np.ndarray
    degraded_s: np.ndarray

    @property
    def ettr(self) -> np.ndarray:
        return self.productive_s / self.wall_s

    @property
    def interruptions(self) -> np.ndarray:
        return self.unplanned + self.planned


#: the most Monte Carlo trials one run draws (a few seconds, a few hundred MB)
MAX_TRIALS = 1_000_000


def simulate(spec: RunSpec, trials: int = 10_000, seed: int = 0) -> SimResult:
    """Monte Carlo of whole runs (see module doc); arrays of one entry per trial."""
    require(isinstance(trials, int) and 1 <= trials <= MAX_TRIALS, "trials",
            f"must be an integer from 1 to {MAX_TRIALS:,}, got {trials!r}")
    require(isinstance(seed, int) and seed >= 0, "seed", f"must be a non-negative integer, got {seed!r}")
    rng = np.random.default_rng(seed)
    lam = spec.rate_per_s
    jobs = max(1, math.ceil(spec.work_s / spec.interval_s))
    tau = spec.work_s / jobs * spec.slowdown
    slot = tau + spec.stall_s
    vuln = slot + spec.lag_s
    ok = math.exp(-lam * vuln)
    ok_rec = math.exp(-lam * spec.recovery_s)
    if ok < 1e-6 or ok_rec < 1e-6:
        raise InputError("interval", f"a {vuln:.0f} s checkpoint slot or a {spec.recovery_s:.0f} s recovery "
                                     f"survives the {1 / lam:.0f} s job MTBF with probability "
                                     f"{min(ok, ok_rec):.1e}: the run never completes; shorten the interval "
                                     "or the recovery")
    f = rng.negative_binomial(jobs, ok, size=trials).astype(float) if lam > 0 else np.zeros(trials)
    g = np.where(f > 0, rng.negative_binomial(np.maximum(f, 1), ok_rec).astype(float), 0.0) if lam > 0 \
        else np.zeros(trials)
    lost_slots = _sum_trunc_exp(rng, f, lam, vuln)
    lost_recovery = _sum_trunc_exp(rng, g, lam, spec.recovery_s)
    # jobs x slot, written so that the productive part is exactly work x slowdown (ETTR never above 1)
    wall = spec.work_s * spec.slowdown + jobs * spec.stall_s + f * spec.recovery_s + lost_slots + lost_recovery
    planned = rng.poisson(spec.planned_per_s * wall).astype(float)
    wall = wall + planned * spec.planned_recovery_s
    work = spec.work_s * np.ones(trials)
    degraded = (spec.slowdown - 1.0) * spec.work_s * np.ones(trials)
    return SimResult(wall_s=wall, unplanned=f + g, planned=planned, productive_s=work,
                     checkpoint_s=jobs * spec.stall_s * np.ones(trials), lost_work_s=lost_slots,
                     recovery_s=f * spec.recovery_s + lost_recovery + planned * spec.planned_recovery_s,
                     degraded_s=degraded)


def expected_ettr(spec: RunSpec) -> float:
    """Closed-form mean of the same process (renewal-reward), for checks and horizons."""
    lam = spec.rate_per_s
    jobs = max(1, math.ceil(spec.work_s / spec.interval_s))
    slot = spec.work_s / jobs * spec.slowdown + spec.stall_s
    vuln = slot + spec.lag_s
    if lam * max(vuln, spec.recovery_s) > 700.0:  # a slot or a recovery essentially never survives
        return 0.0
    ef = jobs * math.expm1(lam * vuln)  # failed slots before `jobs` successes: jobs (1 - s) / s
    eg = ef * math.expm1(lam * spec.recovery_s)  # failed recoveries
    m_slot = _trunc_exp_moments(lam, vuln)[0] if lam > 0 and vuln > 0 else 0.0
    m_rec = _trunc_exp_moments(lam, spec.recovery_s)[0] if lam > 0 and spec.recovery_s > 0 else 0.0
    wall = spec.work_s * spec.slowdown + jobs * spec.stall_s + ef * (spec.recovery_s + m_slot) + eg * m_rec
    wall += spec.planned_per_s * wall * spec.planned_recovery_s
    return spec.work_s / wall


def best_interval_s(spec: RunSpec, around_s: float, trials: int = 2000, seed: int = 0,
                    points: int = 25) -> float:
    """The interval with the highest simulated mean ETTR on a log grid 0.2x-5x ``around_s``."""
    grid = around_s * np.geomspace(0.2, 5.0, points)
    scores = []
    for tau in grid:
        s = RunSpec(**{**_fields(spec), "interval_s": float(tau)})
        scores.append(float(np.mean(simulate(s, trials=trials, seed=seed).ettr)))
    return float(grid[int(np.argmax(scores))])


def _fields(spec: RunSpec) -> dict[str, float]:
    return {k: getattr(spec, k) for k in RunSpec.__dataclass_fields__}


def quantiles(x: np.ndarray) -> dict[str, float]:
    p10, p50, p90 = np.percentile(x, [10, 50, 90])
    return {"p10": float(p10), "p50": float(p50), "p90": float(p90), "mean": float(np.mean(x))}
