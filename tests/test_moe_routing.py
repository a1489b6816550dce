"""Issue 33: routing as priced. The busiest expert-parallel rank (a binomial count's expected maximum)
against a simulation of the router, and the MoE line every MoE estimate carries."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from supercluster.cli import app
from supercluster.perf.spread import moe_load_factor


@pytest.mark.parametrize("assignments, ep", [(32768, 8), (4096, 64), (512, 32), (64, 16)])
def test_the_busiest_rank_is_the_expected_maximum_of_a_balanced_routers_counts(assignments, ep):
    """Each of ep x a token-expert assignments lands on one of ep ranks at random: the mean over many
    micro-batches of the largest rank count over the mean is the priced factor, within a tenth of its excess."""
    rng = np.random.default_rng(7)
    counts = rng.multinomial(assignments * ep, np.full(ep, 1.0 / ep), size=4000)
    simulated = counts.max(axis=1).mean() / assignments
    priced = float(moe_load_factor(assignments, ep, "random"))
    assert priced - 1.0 == pytest.approx(simulated - 1.0, rel=0.1)


def test_no_expert_parallelism_or_a_fixed_gate_has_no_busiest_rank():
    assert float(moe_load_factor(1000, 1, "random")) == 1.0
    assert float(moe_load_factor(1000, 64, "round-robin")) == 1.0
    more = [float(moe_load_factor(a, 64, "random")) for a in (100, 1000, 10000)]
    assert more == sorted(more, reverse=True) and more[-1] > 1.0  # more tokens a rank: closer to even


def test_every_moe_estimate_says_how_its_experts_were_priced():
    run = CliRunner()
    args = ["estimate", "--model", "mixtral-8x7b", "--gpus", "64", "--tp", "2", "--pp", "1", "--ep", "8",
            "--global-batch", "256", "--seq-len", "4096", "--no-evidence"]
    text = run.invoke(app, args, catch_exceptions=False).output
    line = next(x for x in text.splitlines() if x.startswith("MoE: "))
    assert "8 experts, top-2, EP 8 (1 a GPU), a balanced router" in line and "busiest EP rank +" in line
    d = json.loads(run.invoke(app, [*args, "--json"], catch_exceptions=False).output)
    moe = d["moe"]
    assert moe["ep"] == 8 and moe["router"] == "random" and 1.0 < moe["load_factor"] < 1.1
    assert 0.0 < moe["remote_byte_share"] < 1.0 and moe["dispatch_call_s"] > 0 and moe["dispatch_calls"] == 4
    dense = json.loads(run.invoke(app, ["estimate", "--model", "llama3-8b", "--gpus", "8", "--tp", "8", "--pp", "1",
                                        "--global-batch", "64", "--json", "--no-evidence"],
                                  catch_exceptions=False).output)
    assert "moe" not in dense
