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
    assert "kernels more a layer and micro-batch" in " ".join(text.split())
    d = json.loads(run.invoke(app, [*args, "--json"], catch_exceptions=False).output)
    moe = d["moe"]
    assert moe["ep"] == 8 and moe["router"] == "random" and 1.0 < moe["load_factor"] < 1.1
    assert 0.0 < moe["remote_byte_share"] < 1.0 and moe["dispatch_call_s"] > 0 and moe["dispatch_calls"] == 4
    dense = json.loads(run.invoke(app, ["estimate", "--model", "llama3-8b", "--gpus", "8", "--tp", "8", "--pp", "1",
                                        "--global-batch", "64", "--json", "--no-evidence"],
                                  catch_exceptions=False).output)
    assert "moe" not in dense


def test_token_drop_caps_the_busiest_rank_and_padding_fixes_it_at_the_capacity():
    dropless = float(moe_load_factor(64, 64, "random"))
    assert dropless > 1.25  # few tokens a rank: a busy rank well above the mean
    assert float(moe_load_factor(64, 64, "random", 1.25)) == 1.25  # capped
    assert float(moe_load_factor(64, 64, "random", 2.0)) == pytest.approx(dropless)  # the cap never binds
    assert float(moe_load_factor(64, 64, "round-robin", 1.5, pad=True)) == 1.5  # padded: capacity, any router
    assert float(moe_load_factor(64, 1, "random", 1.5, pad=True)) == 1.5  # padded even without EP


def _moe_step(framework: str, tp: int = 1) -> dict:
    args = ["estimate", "--model", "mixtral-8x7b", "--gpus", "64", "--tp", str(tp), "--pp", "1", "--ep", "8",
            "--global-batch", "64", "--seq-len", "2048", "--framework", framework, "--json", "--no-evidence"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_routing_is_an_input_that_moves_the_step_and_the_memory():
    """A tight capacity drops the busiest rank's excess (faster than dropless); padding to a capacity
    above it runs every rank at that capacity (slower, and the experts' activations grow with it)."""
    dropless = _moe_step("nemo-megatron")
    tight = _moe_step("nemo-megatron+capacity-1.0")
    padded = _moe_step("nemo-megatron+capacity-1.5+pad-to-capacity")
    more = _moe_step("nemo-megatron+capacity-2+pad-to-capacity")
    assert dropless["moe"]["dropless"] and dropless["moe"]["capacity_factor"] == 0
    assert tight["moe"]["load_factor"] == 1.0 and not tight["moe"]["dropless"]
    assert tight["step_time_s"] < dropless["step_time_s"] < padded["step_time_s"] < more["step_time_s"]
    assert padded["moe"]["padded"] and padded["moe"]["load_factor"] == 1.5
    assert (dropless["memory"]["mem_activations_bytes"] < padded["memory"]["mem_activations_bytes"]
            < more["memory"]["mem_activations_bytes"])


@pytest.mark.parametrize("framework, words", [
    ("nemo-megatron+pad-to-capacity", "needs a capacity factor"),
    ("nemo-megatron+capacity-0", "outside"),
    ("nemo-megatron+capacity-1.25+deepep+pad-to-capacity", "DeepEP"),
])
def test_impossible_routing_is_refused_by_name(framework, words):
    from supercluster.errors import InputError
    from supercluster.parallelism.framework import get_framework

    with pytest.raises(InputError, match=words) as err:
        get_framework(framework)
    assert err.value.field == "framework"


def test_a_runs_row_and_a_megatron_script_state_the_routing():
    from supercluster.errors import InputError
    from supercluster.formats.megatron_args import parse_args
    from supercluster.formats.megatron_flags import framework_args, framework_from_args
    from supercluster.formats.runs import routing_suffixes
    from supercluster.parallelism.framework import get_framework
    from supercluster.parallelism.layout import Layout

    assert routing_suffixes({"moe_capacity_factor": "1.25", "moe_pad_to_capacity": "yes"}) == \
        "+capacity-1.25+pad-to-capacity"
    assert routing_suffixes({"moe_capacity_factor": ""}) == ""
    for bad in ({"moe_capacity_factor": "lots"}, {"moe_capacity_factor": "-1"}, {"moe_pad_to_capacity": "yes"}):
        with pytest.raises(InputError):
            routing_suffixes(bad)
    fw = get_framework("megatron+capacity-1.25+pad-to-capacity")
    flags = " ".join(framework_args(fw, Layout(tp=1, pp=1, dp=8, ep=8, global_batch=64), False, moe=True))
    assert "--moe-expert-capacity-factor 1.25 --moe-pad-expert-input-to-capacity" in flags
    back = framework_from_args(parse_args(flags))
    assert (back.moe_capacity_factor, back.moe_pad_to_capacity) == (1.25, True)
    assert framework_from_args(parse_args("--moe-expert-capacity-factor -1")).moe_capacity_factor == 0.0


def test_token_drop_exports_to_megatron_and_is_refused_where_a_launcher_has_no_such_setting():
    from supercluster.errors import InputError
    from supercluster.formats.launchers import export
    from supercluster.models.catalog import model_catalog
    from supercluster.parallelism.framework import get_framework
    from supercluster.parallelism.layout import Layout

    layout, model = Layout(tp=1, pp=1, dp=8, ep=8, global_batch=64), model_catalog()["mixtral-8x7b"]
    flags = export(layout, "megatron", model, get_framework("megatron+capacity-1.5"))
    assert "--moe-expert-capacity-factor 1.5" in flags
    for fmt, fw in (("torchtitan", "torchtitan+capacity-1.5"), ("deepspeed", "deepspeed+capacity-1.5")):
        with pytest.raises(InputError, match="token-drop routing"):
            export(layout, fmt, model, get_framework(fw))


def test_an_moe_plan_shows_the_best_layout_at_each_expert_parallel_degree_and_why():
    """The planner's answer to "what does EP buy?": one best fitting layout per EP degree searched,
    the plan's #1 among them, and for each other degree the ledger lines that separate it."""
    args = ["plan", "--model", "mixtral-8x7b", "--gpus", "64", "--global-batch", "256", "--seq-len", "4096"]
    d = json.loads(CliRunner().invoke(app, [*args, "--json"], catch_exceptions=False).output)
    by_ep = d["by_ep"]
    eps = [_ep(c["layout"]) for c in by_ep]
    assert eps == sorted(set(eps)) and 1 in eps and len(eps) >= 3
    best = d["best"]
    same = next(c for c in by_ep if _ep(c["layout"]) == _ep(best["layout"]))
    assert same["step_time_s"] == pytest.approx(best["step_time_s"])
    assert all(c["step_time_s"] >= best["step_time_s"] * (1 - 1e-9) for c in by_ep)
    text = CliRunner().invoke(app, args, catch_exceptions=False).output
    assert "expert parallelism: the best layout at each EP degree" in text and "(the plan's #1 EP)" in text
    dense = json.loads(CliRunner().invoke(app, ["plan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "64",
                                                "--json"], catch_exceptions=False).output)
    assert "by_ep" not in dense


def _ep(label: str) -> int:
    import re

    m = re.search(r"-ep(\d+)", label)
    return int(m.group(1)) if m else 1


def test_a_dispatch_is_priced_on_each_path_and_the_estimate_says_how_long_on_each():
    """By hand on a two-level network (8 GPUs a domain, 400 GB/s bus, 50 GB/s NICs): an all-to-all of
    64 MB a rank over 16 ranks (2 domains) keeps 7/16 of it on NVLink and sends 8/16 over the NICs;
    the call is those two plus its latency. In an estimate the line names both, and a dispatch inside
    one domain puts nothing on the scale-out network."""
    from supercluster.calibration.profile import MeasuredNetwork
    from supercluster.network.twolevel import (
        NET_HOP_LATENCY_S,
        NVLINK_HOP_LATENCY_S,
        RING_BASE_LATENCY_S,
        TwoLevelNetwork,
    )

    net = TwoLevelNetwork(domain_size=8, scaleup_busbw_bytes_per_s=400e9, scaleout_bytes_per_s=50e9)
    up, out = (float(x) for x in net.all_to_all_paths_s(64e6, 16, 1))
    assert (up, out) == (pytest.approx(64e6 * 7 / 16 / 400e9), pytest.approx(64e6 * 8 / 16 / 50e9))
    latency = 7 * NVLINK_HOP_LATENCY_S + NET_HOP_LATENCY_S + RING_BASE_LATENCY_S
    assert float(net.collective_time_s("all_to_all", 64e6, 16, 1)) == pytest.approx(up + out + latency)
    assert [float(x) for x in net.all_to_all_paths_s(64e6, 1, 1)] == [0.0, 0.0]
    # a measured all-to-all has no paths to tell apart
    assert all(np.isnan(float(x)) for x in MeasuredNetwork(params={}).all_to_all_paths_s(64e6, 16, 1))
    # ... unless the group is larger than the one measured, which the fallback prices
    a2a = {"alpha_s": 2e-5, "busbw_bytes_per_s": 300e9, "nranks": 8}
    measured = MeasuredNetwork(params={"all_to_all": a2a}, fallback=net)
    assert all(np.isnan(float(x)) for x in measured.all_to_all_paths_s(64e6, 8, 1))
    assert [float(x) for x in measured.all_to_all_paths_s(64e6, 16, 1)] == [pytest.approx(up), pytest.approx(out)]

    run = CliRunner()
    for gpus, ep, remote in ((64, 16, True), (64, 8, False)):
        args = ["estimate", "--model", "qwen3-30b-a3b", "--gpus", str(gpus), "--tp", "1", "--pp", "1", "--ep", str(ep),
                "--global-batch", "256", "--seq-len", "4096", "--no-evidence"]
        moe = json.loads(run.invoke(app, [*args, "--json"], catch_exceptions=False).output)["moe"]
        up, out, call = moe["dispatch_scaleup_s"], moe["dispatch_scaleout_s"], moe["dispatch_call_s"]
        assert up > 0 and (out > 0) == remote and up + out < call
        line = " ".join(run.invoke(app, args, catch_exceptions=False).output.split())
        assert (f"a dispatch or combine {call * 1e3:.2f} ms: {up * 1e3:.2f} ms on the scale-up links, "
                f"{out * 1e3:.2f} ms on the scale-out network, the rest latency") in line


def test_a_measured_network_prices_the_dispatch_without_a_path_split():
    """A device profile's measured all-to-all has no paths: the step's MoE record says None for both
    and the line prints the call alone."""
    import dataclasses

    from supercluster.calibration.profile import MeasuredNetwork
    from supercluster.job import Job, price
    from supercluster.reports.tables import moe_line

    job = Job.from_label("tp1-pp1-dp16-ep16", model="qwen3-30b-a3b", gpu="h100-sxm", global_batch=64, seq_len=4096)
    a2a = {"alpha_s": 2e-5, "busbw_bytes_per_s": 300e9, "nranks": 64}
    measured = price(dataclasses.replace(job, network=MeasuredNetwork(params={"all_to_all": a2a})))
    assert measured.moe["dispatch_scaleup_s"] is None and measured.moe["dispatch_scaleout_s"] is None
    assert measured.moe["dispatch_call_s"] > 0
    line = moe_line(measured)
    assert f"a dispatch or combine {measured.moe['dispatch_call_s'] * 1e3:.2f} ms (4 a layer" in line
    assert "scale-up links" not in line and "scale-up links" in moe_line(price(job))
