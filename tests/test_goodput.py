"""Failures, checkpoints, the Monte Carlo and the run ledger."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.reliability.goodput import (
    RunSpec,
    daly_interval_s,
    expected_ettr,
    load_failure_model,
    plan_checkpoint,
    simulate,
    young_interval_s,
)

runner = CliRunner()


def reference_run(spec: RunSpec, rng: np.random.Generator) -> float:
    """Event-by-event simulation of the same process (slow; for checking the aggregated sampler)."""
    jobs = max(1, math.ceil(spec.work_s / spec.interval_s))
    slot = spec.work_s / jobs + spec.stall_s
    wall, done = 0.0, 0
    while done < jobs:
        x = rng.exponential(1 / spec.rate_per_s)
        if x >= slot:
            wall += slot
            done += 1
            continue
        wall += x
        while True:  # recovery, itself interruptible
            y = rng.exponential(1 / spec.rate_per_s)
            if y >= spec.recovery_s:
                wall += spec.recovery_s
                break
            wall += y
    return spec.work_s / wall


def test_aggregated_monte_carlo_matches_event_simulation():
    spec = RunSpec(work_s=5 * 86400, rate_per_s=1 / 3600, planned_per_s=0.0, interval_s=1800, stall_s=30, lag_s=0,
                   recovery_s=600, planned_recovery_s=0)
    rng = np.random.default_rng(1)
    ref = np.array([reference_run(spec, rng) for _ in range(400)])
    mc = simulate(spec, trials=20000, seed=2).ettr
    assert np.mean(mc) == pytest.approx(np.mean(ref), rel=0.01)
    assert np.std(mc) == pytest.approx(np.std(ref), rel=0.25)
    assert np.mean(mc) == pytest.approx(expected_ettr(spec), rel=0.005)


def test_llama3_rates_reproduce_419_unexpected_interruptions():
    fm = load_failure_model("llama3")
    rate, hw = fm.rates_per_s(16384, 8)
    assert rate * 54 * 86400 == pytest.approx(419, rel=1e-6)
    assert hw / rate == pytest.approx((419 - 54 - 7 - 2) / 419)


def test_rsc_projection_of_job_mttf():
    # KOKOLIS24 projects 1.8 h at 16,384 GPUs and 0.23 h at 131,072 from 6.50 failures per 1000 node-days
    fm = load_failure_model("rsc1")
    assert 1 / fm.rates_per_s(16384, 8)[0] / 3600 == pytest.approx(1.8, rel=0.03)
    assert 1 / fm.rates_per_s(131072, 8)[0] / 3600 == pytest.approx(0.23, rel=0.03)


def test_daly_reproduces_the_papers_examples():
    # DALY06: M = 24 h, delta = 5 min -> 117 min; M = 6 h -> 57 min (reliability.csv)
    assert daly_interval_s(300, 24 * 3600) / 60 == pytest.approx(117, abs=1)
    assert daly_interval_s(300, 6 * 3600) / 60 == pytest.approx(57, abs=1)
    assert young_interval_s(300, 24 * 3600) == pytest.approx(math.sqrt(2 * 300 * 86400))
    assert daly_interval_s(500, 200) == 200


def test_async_checkpoint_stalls_less():
    sync = plan_checkpoint(405e9, 16384)
    asy = plan_checkpoint(405e9, 16384, asynchronous=True)
    assert sync.state_bytes == pytest.approx(14 * 405e9)
    assert asy.stall_s < sync.stall_s and asy.lag_s == pytest.approx(sync.write_s)
    with pytest.raises(InputError, match="storage_bw"):
        plan_checkpoint(1e9, 8, storage_bytes_per_s=-1)


def test_bad_rates_file(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text("[x]\nname='x'\n[x.components]\ngpu = { per_gpu_hour = -1.0 }\n")
    with pytest.raises(InputError, match="rates"):
        load_failure_model(str(p))
    with pytest.raises(InputError, match="unknown"):
        load_failure_model("nope")


def test_goodput_cli_llama3_record():
    r = runner.invoke(app, ["goodput", "--gpu", "h100-sxm", "--gpus", "16384", "--days", "54", "--trials", "2000",
                            "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    for k in ("interruptions_p50", "ettr_p50", "ettr_p10", "ettr_p90", "checkpoint_interval_s"):
        assert k in d
    assert 466 * 0.93 < d["interruptions_p50"] < 466 * 1.07  # 419 unexpected + 47 planned
    assert d["ettr_p10"] <= d["ettr_p50"] <= d["ettr_p90"]
    assert d["ettr_p50"] > 0.90
    assert d["wall_days_p50"] == pytest.approx(54, rel=0.01)
    assert sum(d["ledger_s"].values()) == pytest.approx(d["wall_days_p50"] * 86400, rel=0.01)


def test_train_cli_reports_days_energy_cost_and_exact_ledger():
    r = runner.invoke(app, ["train", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "256",
                            "--global-batch", "512", "--tokens", "1e11", "--trials", "500", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["tokens"] == 1e11
    assert d["gpu_hours"] > 0 and d["energy_mwh"] > 0 and d["cost_usd"] > 0
    fl = d["ledger_flops"]
    assert sum(fl.values()) == pytest.approx(d["peak_flops_total"], rel=1e-9)
    assert d["useful_flops"] == fl["ideal_compute"]


def test_a_small_runs_energy_power_and_cost_read_in_units_that_keep_their_digits():
    """train on 8 GPUs for 1e9 tokens: tens of kWh at about 12 kW and tens of dollars, not 4e-05 MWh
    at 0.0121 MW; the figures are the JSON's, in other units."""
    job = ["train", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "8", "--tokens", "1e9", "--trials", "50"]
    d = json.loads(runner.invoke(app, [*job, "--json"]).output)
    line = next(x for x in runner.invoke(app, job, env={"COLUMNS": "300"}).output.splitlines() if "GPU-hours" in x)
    energy, power = re.search(r"\| ([\d.]+) kWh at ([\d.]+) kW \|", line).groups()
    assert float(energy) == pytest.approx(d["energy_mwh"] * 1e3, abs=0.05)
    assert float(power) == pytest.approx(d["facility_power_mw"] * 1e3, abs=0.05)
    assert f"| ${d['cost_usd']:,.0f} at" in line
