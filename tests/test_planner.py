"""The planner: legal space, fit, ranking, the published 405B layout, launchers round trip."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

import supercluster as sc
from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.formats import launchers
from supercluster.formats.load import load_model
from supercluster.job import estimate
from supercluster.parallelism.layout import Layout
from supercluster.planner.search import candidate_columns, pareto_mask, plan

runner = CliRunner()


def test_candidates_obey_divisibility(llama3_70b, h100):
    c = candidate_columns(llama3_70b, h100, 256, global_batch=512, seq_len=8192)
    assert np.all(c["tp"] * c["pp"] * c["dp"] * c["cp"] == 256)
    assert np.all(llama3_70b.num_heads % c["tp"] == 0)
    assert np.all(512 % (c["dp"] * c["mb"]) == 0)
    assert np.all((c["vpp"] == 1) | (c["pp"] > 1))
    assert np.all(c["pp"] * c["vpp"] <= llama3_70b.num_layers)
    assert np.all((c["sp"] == 0) | (c["tp"] > 1))
    assert np.all(c["ep"] == 1)


def test_best_fits_and_matches_the_estimate(llama3_70b, h100, megatron):
    r = plan(llama3_70b, h100, 256, global_batch=512, seq_len=8192, framework=megatron, top=5)
    assert r.feasible <= r.evaluated and r.feasible > 0
    b = r.best
    again = estimate(llama3_70b, gpu=h100, num_gpus=256, layout=b.layout, framework=megatron)
    assert again.step_time_s == pytest.approx(b.step_time_s, rel=1e-12)
    assert again.fits
    times = [c.step_time_s for c in r.top]
    assert times == sorted(times)
    # headroom: a stricter memory budget never yields a faster winner
    strict = plan(llama3_70b, h100, 256, global_batch=512, seq_len=8192, framework=megatron, headroom=0.3)
    assert strict.best.step_time_s >= b.step_time_s
    assert strict.best.memory_per_gpu_bytes <= 0.7 * h100.hbm_bytes


def test_405b_best_beats_metas_published_layout(h100, megatron):
    from supercluster.formats.load import load_model

    m = load_model("llama3-405b")
    r = plan(m, h100, 16384, global_batch=2048, seq_len=8192, framework=megatron)
    ranks = []
    for rc in ("none", "selective", "full"):
        for z in (1, 2, 3):
            for v in (1, 2, 4, 8):
                lay = Layout(tp=8, pp=16, dp=128, vpp=v, global_batch=2048, seq_len=8192, recompute=rc, zero_stage=z,
                             sequence_parallel=True)
                rank = r.rank_of(lay)
                if rank is not None:
                    ranks.append(rank)
                    meta = estimate(m, gpu=h100, num_gpus=16384, layout=lay, framework=megatron)
                    assert r.best.step_time_s <= meta.step_time_s
    assert ranks, "some variant of TP8 PP16 DP128 must fit"


def test_pareto_mask_keeps_only_non_dominated():
    a = np.array([1.0, 2.0, 3.0, 2.0])
    b = np.array([3.0, 2.0, 1.0, 3.0])
    assert pareto_mask(a, b).tolist() == [True, True, True, False]
    # by definition, on random points with ties: a kept row is dominated by no row; a dropped row is
    # dominated by some row or repeats a kept one
    rng = np.random.default_rng(7)
    for _ in range(100):
        n = int(rng.integers(1, 40))
        a, b = rng.integers(0, 6, n).astype(float), rng.integers(0, 6, n).astype(float)
        keep = pareto_mask(a, b)
        for i in range(n):
            dominated = any(a[j] <= a[i] and b[j] <= b[i] and (a[j] < a[i] or b[j] < b[i]) for j in range(n))
            repeat = any(keep[j] and j != i and a[j] == a[i] and b[j] == b[i] for j in range(n))
            assert keep[i] == (not dominated and not repeat)


def test_cost_objective_may_use_fewer_gpus(llama3_70b, h100, megatron):
    r = plan(llama3_70b, h100, 1024, global_batch=512, seq_len=8192, framework=megatron, objective="cost")
    costs = [c.cost_usd_per_mtok for c in r.top]
    assert costs == sorted(costs)
    assert {c.num_gpus for c in r.pareto} <= {1024, 512, 256, 128}


def test_no_fit_is_a_clear_error(h100, megatron):
    from supercluster.formats.load import load_model

    with pytest.raises(InputError, match="fits on 8"):
        plan(load_model("llama3-405b"), h100, 8, global_batch=8, seq_len=8192, framework=megatron)


def test_deepspeed_has_no_interleaved_pipeline(llama3_70b, h100):
    # DeepSpeed's PipelineEngine runs 1F1B over contiguous stages: the planner keeps vpp = 1 for it,
    # estimate defaults to vpp 1 there (4 under Megatron) and refuses an explicit vpp > 1.
    from supercluster.parallelism.framework import get_framework

    ds, mg = get_framework("deepspeed"), get_framework("megatron")
    res = plan(llama3_70b, h100, 64, global_batch=128, seq_len=4096, framework=ds)
    assert res.evaluated > 0 and set(np.unique(res.columns["vpp"])) == {1}
    assert set(np.unique(plan(llama3_70b, h100, 64, global_batch=128, seq_len=4096, framework=mg).columns["vpp"])) > {1}
    assert (ds.default_vpp(8), mg.default_vpp(8), mg.default_vpp(1)) == (1, 4, 1)
    runner = CliRunner()
    base = ["estimate", "--model", "llama3-70b", "--gpus", "64", "--tp", "8", "--pp", "4", "--global-batch", "128",
            "--seq-len", "4096", "--framework", "deepspeed"]
    r = runner.invoke(app, base + ["--vpp", "2"])
    assert isinstance(r.exception, InputError)  # (the installed command turns it into one line, exit 2)
    assert str(r.exception) == "vpp: framework deepspeed has no interleaved pipeline schedule; vpp must be 1, got 2"
    r = runner.invoke(app, base + ["--json"])
    assert r.exit_code == 0 and json.loads(r.output)["layout"].endswith("dp2")


def test_plan_cli_json_contract_and_export():
    r = runner.invoke(app, ["plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256", "--top", "3",
                            "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "step_time_s", "mfu", "memory_per_gpu_bytes"):
        assert k in d["best"]
    assert len(d["top"]) == 3 and d["evaluated"] >= d["feasible"] > 0 and d["seconds"] > 0
    r = runner.invoke(app, ["plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256",
                            "--export", "torchtitan"])
    assert "-m torchtitan.train" in r.output and "--config llama3_8b" in r.output
    r = runner.invoke(app, ["plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256",
                            "--export", "torchtitan-toml"])
    assert "[parallelism]" in r.output and "tensor_parallel_degree" in r.output


def test_plan_token_budget_scales_with_tokens():
    r = runner.invoke(app, ["plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256",
                            "--tokens", "1e12", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    b, best = d["budget"], d["best"]
    steps = 1e12 / (256 * 8192)
    assert b["days_to_train"] == pytest.approx(steps * best["step_time_s"] / 86400)
    assert b["cost_usd"] == pytest.approx(best["cost_usd_per_mtok"] * 1e6)


def test_the_planner_tries_moe_recompute_modules_and_lists_each_layout_once(h100, megatron):
    """For an MoE model under Megatron the search adds selective recompute of (layernorm, moe_act), the
    pair the Megatron-Bridge MoE recipes use; expert-TP folding at tp = 1 is not a second copy."""
    from supercluster.formats.load import load_model

    res = plan(load_model("gpt-oss-120b"), h100, 64, global_batch=1280, seq_len=4096, framework=megatron, top=50)
    mods = {c.layout.recompute_modules for c in res.top} | {c.layout.recompute_modules for c in res.pareto}
    assert ("layernorm", "moe_act") in mods
    assert len({c.layout for c in res.top}) == len(res.top)
    c = res.columns
    assert ((c["rcm"] == 0) | (c["recompute"] == 1)).all()
    pick = next(x for x in res.pareto if x.layout.recompute_modules)
    assert res.rank_of(pick.layout) == pick.rank


def test_plan_labels_tell_apart_layouts_that_differ_only_off_the_parallel_degrees():
    a = Layout(tp=8, pp=4, dp=2, micro_batch=1, global_batch=64, seq_len=4096, zero_stage=1, sequence_parallel=True)
    b = Layout(tp=8, pp=4, dp=2, micro_batch=1, global_batch=64, seq_len=4096, zero_stage=2, sequence_parallel=True)
    assert a.short() == b.short() and a.label() != b.label()
    assert a.label() == "tp8-pp4-dp2-mb1-z1-none-sp"


def test_a_data_parallel_only_framework_gets_data_parallel_layouts(llama3_70b, h100):
    """Composer (MosaicML, FSDP / DDP) has no tensor, pipeline or context parallelism: the planner
    searches none and an estimate asking for them is refused with the field named."""
    from supercluster.parallelism.framework import get_framework

    composer = get_framework("composer")
    r = plan(llama3_70b, h100, 64, global_batch=256, seq_len=4096, framework=composer, top=5)
    assert r.feasible > 0 and all((c.layout.tp, c.layout.pp, c.layout.cp) == (1, 1, 1) for c in r.top)
    assert r.best.layout.zero_stage >= 2  # 70B does not fit replicated on 80 GB
    for field, layout in (("tp", Layout(tp=2, dp=32, global_batch=256, seq_len=4096)),
                          ("pp", Layout(pp=2, dp=32, global_batch=256, seq_len=4096))):
        with pytest.raises(InputError, match=f"^{field}: framework composer has no"):
            estimate(llama3_70b, gpu=h100, num_gpus=64, layout=layout, framework=composer)


def test_the_plan_priced_from_bounds_is_the_plan_priced_exactly(llama3_70b, h100):
    """The planner's first pass gives uneven interleavings a lower bound of their schedule and
    then walks only the rows that can win or sit on the Pareto front; the answer is the one an
    exact pricing of every row gives: the same best layouts, the same front, exact ranks."""
    from supercluster.job import default_network
    from supercluster.parallelism.framework import get_framework
    from supercluster.planner.search import PLAN_COLUMNS, _price_in_chunks

    tt = get_framework("torchtitan")
    res = plan(llama3_70b, h100, 256, global_batch=256, seq_len=8192, framework=tt, top=5)
    c = res.columns
    assert 0 < c["schedule_bound"].sum() < len(c["tp"])  # uneven rows left at their bound
    base = {k: c[k] for k in ("gpus", "tp", "pp", "cp", "dp", "ep", "etp", "vpp", "mb", "gbs", "seq", "zero",
                              "recompute", "sp", "lowp", "rep") if k in c}
    exact = _price_in_chunks(llama3_70b, h100, default_network(h100, num_gpus=256), tt, base, None)
    t = exact["step_time_s"]
    assert set(PLAN_COLUMNS) <= set(exact)
    assert np.all(c["score"] <= t * (1.0 + 1e-12))
    assert np.allclose(c["score"][~c["schedule_bound"]], t[~c["schedule_bound"]], rtol=1e-12)
    feas = c["feasible"]
    order = np.argsort(np.where(feas, t, np.inf), kind="stable")
    assert [cand.step_time_s for cand in res.top] == pytest.approx(t[order[:5]].tolist(), rel=1e-12)
    fi = np.flatnonzero(feas)
    front = fi[pareto_mask(t[fi], exact["memory_per_gpu_bytes"][fi])]
    assert sorted(round(x, 9) for x in t[front]) == sorted(round(p.step_time_s, 9) for p in res.pareto)
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(1, len(order) + 1)
    for p in res.pareto:
        if p.rank_exact:
            assert p.rank == rank[np.flatnonzero(np.isclose(t, p.step_time_s, rtol=0, atol=1e-12) & feas)].min()
    deep = [p for p in res.pareto if not p.rank_exact]
    assert deep, "the front reaches past the priced rows here"
    for p in deep[-2:]:
        assert res.rank_of(p.layout) == rank[np.flatnonzero(np.isclose(t, p.step_time_s, rtol=0, atol=1e-12)
                                                             & feas)].min() <= p.rank


def test_a_dualpipe_plan_keeps_to_what_dualpipe_can_run():
    from supercluster.formats.load import load_model
    from supercluster.hardware.specs import get_gpu
    from supercluster.parallelism.framework import get_framework
    from supercluster.planner.search import plan

    res = plan(load_model("llama3-70b"), get_gpu("h800"), 64, global_batch=64, seq_len=4096,
               framework=get_framework("hai-llm"), top=50)
    assert res.top
    for c in res.top:
        lay = c.layout
        assert lay.vpp == 1
        if lay.pp > 1:
            m = lay.num_microbatches
            assert lay.pp % 2 == 0 and m % 2 == 0 and m >= 2 * lay.pp


@pytest.mark.parametrize("fw,pp,m,runs", [
    ("nemo-megatron", 2, 1, False), ("nemo-megatron", 4, 6, False), ("nemo-megatron", 4, 8, True),
    ("torchtitan", 4, 6, True),   # one round of 6: torch's Interleaved1F1B runs it
    ("torchtitan", 2, 7, False),  # 3 rounds do not divide 7
    ("automodel", 8, 4, True),
])
def test_an_interleaved_schedule_takes_the_micro_batches_its_framework_can_run(fw, pp, m, runs):
    from supercluster.parallelism.framework import get_framework

    f = get_framework(fw)
    assert bool(f.schedule_ok(np.array([pp]), np.array([m]), np.array([2]))[0]) is runs
    assert bool(f.schedule_ok(np.array([pp]), np.array([m]), np.array([1]))[0])  # plain 1F1B runs any m
    if runs:
        f.check_schedule(pp, m, vpp=2)
    else:
        with pytest.raises(InputError, match="global_batch: .*interleaved schedule"):
            f.check_schedule(pp, m, vpp=2)


def test_megatron_plans_interleave_only_a_multiple_of_pp_micro_batches(h100, megatron):
    # 16,384 GPUs, 1,024 sequences: dp 1,024 leaves one micro-batch, which Megatron-Core cannot interleave
    res = plan(load_model("llama3-8b"), h100, 16384, global_batch=1024, seq_len=8192, framework=megatron, top=50)
    assert res.top
    for c in res.top:
        lay = c.layout
        if lay.vpp > 1:
            assert lay.schedule_microbatches % lay.pp == 0, lay.label()
    with pytest.raises(InputError, match="multiple of pp = 2; got 1"):
        estimate(load_model("llama3-8b"), gpu=h100, num_gpus=16384, framework=megatron,
                 layout=Layout(tp=8, pp=2, dp=1024, vpp=16, global_batch=1024, seq_len=8192))


def test_compare_plans_each_gpu_type_as_plan_does_and_says_why_one_cannot_run(megatron):
    from supercluster.hardware.specs import get_gpu
    from supercluster.planner.search import compare_gpus

    m = load_model("llama3-70b")
    kinds = [get_gpu(k) for k in ("a100-80gb", "h100-sxm", "b200")]
    rows = compare_gpus(m, kinds, 64, global_batch=128, seq_len=4096, framework=megatron, precisions=("fp8",),
                        tokens=1e11)
    assert [r["gpu"] for r in rows] == ["a100-80gb", "h100-sxm", "b200"]
    assert not rows[0]["fits"] and "fp8" in rows[0]["reason"]  # A100 has no fp8 tensor cores
    for r, g in zip(rows[1:], kinds[1:], strict=True):
        alone = plan(m, g, 64, global_batch=128, seq_len=4096, framework=megatron, precisions=("fp8",), top=1).best
        assert r["best"]["step_time_s"] == alone.step_time_s  # the same search, the same answer
        assert r["days_to_train"] == pytest.approx(1e11 / (128 * 4096) * alone.step_time_s / 86400)
    # a model no layout fits is a row with the planner's reason, not an error
    big = compare_gpus(load_model("llama3-405b"), [get_gpu("h100-sxm")], 8, global_batch=8, seq_len=8192,
                       framework=megatron)
    assert not big[0]["fits"] and "no layout" in big[0]["reason"]


def test_compare_command_prints_a_row_per_gpu_type():
    r = CliRunner().invoke(app, ["compare", "--model", "llama3-8b", "--gpu-types", "h100-sxm,b200", "--gpus", "16",
                                 "--global-batch", "64", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [x["gpu"] for x in rows] == ["h100-sxm", "b200"] and all(x["fits"] for x in rows)
    assert rows[1]["days_to_train"] < rows[0]["days_to_train"]  # B200 outruns H100 on the same job
    kept = json.loads(CliRunner().invoke(app, ["compare", "--model", "llama3-8b", "--gpu-types", "h100-sxm,b200",
                                               "--gpus", "16", "--global-batch", "64", "--zero", "1", "--recompute",
                                               "full", "--json"]).stdout)
    assert all((x["best"]["zero_stage"], x["best"]["recompute"]) == (1, "full") for x in kept)
    assert all(k["best"]["step_time_s"] >= r["best"]["step_time_s"] for k, r in zip(kept, rows, strict=True))
    bad = CliRunner().invoke(app, ["compare", "--gpu-types", "h100-sxm,nope"])
    assert isinstance(bad.exception, InputError) and bad.exception.field == "gpu"
    # a mistake in the question itself is one error naming the field, not a row per GPU type
    for option, value in (("--gpus", "0"), ("--global-batch", "0"), ("--seq-len", "-1"), ("--objective", "speed")):
        bad = CliRunner().invoke(app, ["compare", "--gpu-types", "h100-sxm", option, value])
        assert isinstance(bad.exception, InputError), (option, bad.output)
        assert bad.exception.field == option[2:].replace("-", "_"), option
    # the table reads a small job's time, cost and energy in units that keep their digits (hours, $, kWh)
    text = CliRunner().invoke(app, ["compare", "--model", "llama3-8b", "--gpu-types", "h100-sxm", "--gpus", "8",
                                    "--global-batch", "64", "--tokens", "1e9"], env={"COLUMNS": "200"}).output
    row = next(x for x in text.splitlines() if x.startswith("│ h100-sxm"))
    assert re.search(r"│ +[\d.]+ h │ +\$\d+ │ +[\d.]+ kWh │$", row), row


def test_a_plan_can_be_told_to_keep_settings(llama3_70b, h100, megatron):
    """``fixed``: the search keeps the micro-batch, ZeRO stage, recompute (and its modules) given; the
    winner is the best of the unconstrained search's rows that keep them."""
    free = plan(llama3_70b, h100, 64, global_batch=128, seq_len=8192, framework=megatron, top=1)
    kept = plan(llama3_70b, h100, 64, global_batch=128, seq_len=8192, framework=megatron, top=3,
                fixed={"mb": 2, "zero": 3, "recompute": 2})
    assert all((c.layout.micro_batch, c.layout.zero_stage, c.layout.recompute) == (2, 3, "full") for c in kept.top)
    assert kept.best.step_time_s >= free.best.step_time_s
    assert kept.best.rank == 1 and free.rank_of(kept.best.layout) is not None
    mods = plan(llama3_70b, h100, 64, global_batch=128, seq_len=8192, framework=megatron, top=2,
                fixed={"recompute": 1, "rcm": 8})  # a dense model: the modules given, searched on selective rows
    assert all(c.layout.recompute_modules == ("mlp",) for c in mods.top)
    with pytest.raises(InputError, match="fixed: unknown setting 'tp'"):
        plan(llama3_70b, h100, 64, global_batch=128, seq_len=8192, framework=megatron, fixed={"tp": 8})
    with pytest.raises(InputError, match="micro_batch: no legal layout .* keeps micro_batch 3"):
        plan(llama3_70b, h100, 64, global_batch=128, seq_len=8192, framework=megatron, fixed={"mb": 3})


def test_plan_command_keeps_the_settings_it_is_given():
    base = ["plan", "--model", "llama3-70b", "--gpus", "256", "--global-batch", "512", "--json"]
    free = json.loads(runner.invoke(app, base).output)
    r = runner.invoke(app, [*base, "--recompute", "full", "--zero", "1", "--micro-batch", "2", "--top", "5"])
    kept = json.loads(r.output)
    assert all((c["recompute"], c["zero_stage"], c["micro_batch"]) == ("full", 1, 2) for c in kept["top"])
    assert kept["best"]["step_time_s"] >= free["best"]["step_time_s"]
    assert kept["evaluated"] < free["evaluated"]
    bad = runner.invoke(app, [*base, "--recompute", "often"])
    assert bad.exit_code != 0 and "recompute: unknown 'often'" in str(bad.exception)


def test_the_plan_says_how_far_apart_its_first_two_layouts_are_and_when_that_is_a_tie():
    """#1 and #2 of a plan are often a hair apart; the why line gives the gap and, under validate's
    ranking tie (2 %), says the model cannot call which of the two is faster."""
    from supercluster.validation.validate import RANK_TIE

    base = ["plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "512"]
    out = " ".join(runner.invoke(app, base).output.split())  # (rich wraps the line to the terminal)
    line = out[out.index("why #1"):]
    t1, t2, gap = (float(v) for v in re.search(r"step ([\d.]+) s vs ([\d.]+) s \(([\d.]+) % apart", line).groups())
    assert gap == pytest.approx(100 * (t2 / t1 - 1), abs=0.05)
    assert ("too close to call" in line[:400]) == (t2 / t1 - 1 < RANK_TIE)

def test_a_plan_label_reads_back_as_its_layout_and_estimates_as_planned(h100, megatron):
    """Every label on a plan (MoE: expert TP and recompute modules; sequence parallelism on and off)
    reads back through Layout.from_string as the same layout, and estimate --layout prices it at
    the plan's step time."""
    m = load_model("mixtral-8x7b")
    res = plan(m, h100, 64, global_batch=256, seq_len=4096, framework=megatron, top=40)
    cands = res.top + res.pareto
    assert any(c.layout.recompute_modules for c in cands) and any(c.layout.tp > 1 for c in cands)
    for c in cands:
        back = Layout.from_string(c.layout.label(), global_batch=256, seq_len=4096)
        # (without TP sequence parallelism means nothing: the label leaves it out)
        want = c.layout if c.layout.tp > 1 else dataclasses.replace(c.layout, sequence_parallel=None)
        assert back == want, c.layout.label()
    nosp = dataclasses.replace(res.best.layout, tp=2, dp=res.best.layout.dp * res.best.layout.tp // 2,
                               sequence_parallel=False)
    assert nosp.label().endswith("-nosp") and Layout.from_string(nosp.label(), global_batch=256,
                                                                seq_len=4096) == nosp
    best = res.best
    r = runner.invoke(app, ["estimate", "--model", "mixtral-8x7b", "--gpus", "64", "--global-batch", "256",
                            "--seq-len", "4096", "--framework", "megatron", "--layout", best.layout.label(), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["step_time_s"] == pytest.approx(best.step_time_s, rel=1e-9)


@pytest.mark.parametrize("args, message", [
    (["--layout", "tp8-pp16", "--tp", "4", "--zero", "2"], "layout: give the layout either as --layout or as options, "
                                                            "not both: --layout and --tp, --zero"),
    (["--layout", "tp7-pp16"], "layout: gpus 16384 is not divisible by tp x pp x cp = 7 x 16 x 1"),
    (["--layout", "tp8-pp16-fast"], "layout: cannot read 'fast'"),
])
def test_estimate_layout_string_errors(args, message):
    r = runner.invoke(app, ["estimate", *args])
    assert r.exit_code != 0 and str(r.exception).startswith(message), r.exception


def test_estimate_layout_string_is_the_separate_options():
    a = runner.invoke(app, ["estimate", "--layout", "tp8-pp16-vpp4-mb1-z2-full", "--json"])
    b = runner.invoke(app, ["estimate", "--tp", "8", "--pp", "16", "--vpp", "4", "--micro-batch", "1", "--zero", "2",
                            "--recompute", "full", "--json"])
    assert json.loads(a.output)["step_time_s"] == json.loads(b.output)["step_time_s"]
    assert json.loads(a.output)["layout"] == "tp8-pp16-dp128-vpp4"  # dp: the GPUs over tp x pp x cp


def test_tp_holds_whole_kv_heads(h100, megatron):
    qwen = load_model("qwen3-30b-a3b")  # 4 KV heads
    from supercluster.parallelism import rules

    one = {k: np.array([1, 1]) for k in ("pp", "vpp", "cp", "ep")}
    assert rules.keeps(qwen, {**one, "tp": np.array([4, 8]), "seq": np.array([4096, 4096])}).tolist() == [True, False]
    with pytest.raises(InputError, match="tp: 8 must divide the 4 KV heads"):
        Layout(tp=8, pp=1, dp=8, ep=8, global_batch=64, seq_len=4096).check_model(qwen)
    res = plan(qwen, h100, 64, global_batch=64, seq_len=4096, framework=megatron, top=200)
    assert res.top and all(qwen.num_kv_heads % c.layout.tp == 0 for c in res.top)


def test_megatron_runs_an_moe_with_tp_under_sequence_parallelism(h100):
    from supercluster.parallelism.framework import get_framework

    mixtral, mg = load_model("mixtral-8x7b"), get_framework("megatron")  # Megatron-LM's default: SP off
    lay = Layout(tp=2, pp=1, dp=32, ep=8, global_batch=256, seq_len=4096)
    unsaid = estimate(mixtral, gpu=h100, num_gpus=64, layout=lay, framework=mg)
    on = estimate(mixtral, gpu=h100, num_gpus=64, layout=dataclasses.replace(lay, sequence_parallel=True), framework=mg)
    assert unsaid.step_time_s == on.step_time_s  # an MoE with tp > 1 gets it, as Megatron-LM insists
    with pytest.raises(InputError, match="^sequence_parallel: framework megatron needs sequence parallelism"):
        estimate(mixtral, gpu=h100, num_gpus=64, layout=dataclasses.replace(lay, sequence_parallel=False),
                 framework=mg)
    dense = estimate(load_model("llama3-8b"), gpu=h100, num_gpus=64, framework=mg,
                     layout=Layout(tp=2, pp=1, dp=32, global_batch=256, seq_len=4096, sequence_parallel=False))
    assert dense.step_time_s > 0  # a dense model may run TP without it
    res = plan(mixtral, h100, 64, global_batch=256, seq_len=4096, framework=mg, top=300)
    assert all(c.layout.sequence_parallel or c.layout.tp == 1 for c in res.top)


@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "nemotronh-8b", "deepseek-v3.2", "mixtral-8x7b", "llama3-70b"])
def test_the_planner_and_check_model_keep_one_table_of_rules(model):
    """The vectorised rules the planner keeps its candidates by are the ones Layout.check_model raises:
    on a grid of degrees, a row passes the table exactly when check_model accepts it."""
    from supercluster.parallelism import rules

    m = load_model(model)
    grid = np.array(np.meshgrid([1, 2, 3, 4, 8, 16], [1, 2, 4, 64], [1, 2, 4], [1, 2, 3], [1, 8, 9], [1, 2]),
                    dtype=np.int64).reshape(6, -1).T
    cols = {k: grid[:, i] for i, k in enumerate(("tp", "pp", "vpp", "cp", "ep", "ga"))}
    cols["seq"] = np.where(cols.pop("ga") == 1, 4096, 4098)
    mask = rules.keeps(m, cols, extra_pp_layers=2)
    seen = 0
    for i in range(len(grid)):
        row = {k: int(v[i]) for k, v in cols.items()}
        if row["vpp"] > 1 and row["pp"] == 1:
            continue  # (not a layout: Layout refuses it before any model rule)
        lay = Layout(tp=row["tp"], pp=row["pp"], vpp=row["vpp"], cp=row["cp"], ep=row["ep"], dp=row["ep"],
                     global_batch=row["ep"], seq_len=row["seq"])
        try:
            lay.check_model(m, extra_pp_layers=2)
            accepted = True
        except InputError:
            accepted = False
        assert accepted == bool(mask[i]), row
        seen += 1
    assert seen > 100 and mask.any() and not mask.all()


def test_the_planner_offers_only_the_zero_stages_each_framework_has():
    """torchtitan (FSDP2) has no optimizer-only sharding (ZeRO-1); DeepSpeed's pipeline engine asserts ZeRO
    below 2 (frameworks.toml zero_stages / zero_max_with_pp), which estimate refuses by the field too."""
    import supercluster as sc

    tt = sc.plan("llama3-8b", gpu="h100-sxm", num_gpus=64, global_batch=256, seq_len=8192, framework="torchtitan",
                 top=200)
    assert tt.top and all(r.layout.zero_stage != 1 for r in tt.top)
    ds = sc.plan("llama3-70b", gpu="h100-sxm", num_gpus=64, global_batch=256, seq_len=4096, framework="deepspeed",
                 top=200)
    assert any(r.layout.pp > 1 for r in ds.top) and all(r.layout.zero_stage <= 1 for r in ds.top if r.layout.pp > 1)
    with pytest.raises(InputError) as e:
        estimate("llama3-8b", gpu="h100-sxm", num_gpus=16, framework="deepspeed",
                 layout=Layout(pp=2, dp=8, global_batch=64, seq_len=4096, zero_stage=3))
    assert e.value.field == "zero_stage"


def test_recompute_modules_are_searched_and_accepted_only_where_the_framework_has_them():
    """Megatron-Core's --recompute-modules (layernorm, moe_act, ...) were searched for DeepSpeed MoE plans,
    whose export then refused them: now only frameworks with per-module recompute search or take them."""
    from supercluster.hardware.specs import get_gpu
    from supercluster.job import Job, check_job
    from supercluster.parallelism.framework import get_framework

    model, gpu = load_model("mixtral-8x7b"), get_gpu("h100-sxm")
    ds = plan(model, gpu, 64, global_batch=256, seq_len=4096, framework=get_framework("deepspeed"), top=50)
    assert all(not c.layout.recompute_modules for c in ds.top)
    assert launchers.export(ds.best.layout, "deepspeed", model, get_framework("deepspeed")).startswith("{")
    mc = plan(model, gpu, 64, global_batch=256, seq_len=4096, framework=get_framework("nemo-megatron"), top=200)
    assert any(c.layout.recompute_modules == ("layernorm", "moe_act") for c in mc.top)
    job = Job.from_label("tp1-pp1-dp64-ep8-selective", model="mixtral-8x7b", gpu="h100-sxm", global_batch=256,
                         seq_len=4096, framework="deepspeed", recompute_modules=("layernorm", "moe_act"))
    with pytest.raises(InputError, match="^recompute_modules: are Megatron-Core's .*deepspeed has no per-module"):
        check_job(job)


@pytest.mark.parametrize("layout, field", [
    (Layout(pp=2, vpp=1, dp=8, ep=8, global_batch=64, seq_len=4096), "vpp"),
    (Layout(pp=1, dp=16, ep=1, global_batch=64, seq_len=4096), "ep"),
    (Layout(pp=2, vpp=2, dp=8, ep=8, global_batch=64, seq_len=4096, zero_stage=3), "zero"),
])
def test_megatron_ep_overlap_runs_only_where_combined_1f1b_does(layout, field):
    """Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm) needs EP > 1 and, under pipeline
    parallelism, interleaving, and runs Megatron-FSDP only without pipeline parallelism (Megatron-LM
    docs/user-guide/features/moe_a2a_overlap.md): refused by name, and never planned."""
    with pytest.raises(InputError, match=f"^{field}: .*combined 1F1B"):
        sc.estimate("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=16, layout=layout, framework="megatron+ep-overlap")
    # the same layouts run without the overlap, and pp 1 with Megatron-FSDP runs with it
    plain = sc.estimate("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=16, layout=layout, framework="megatron")
    assert plain.step_time_s > 0
    fsdp = Layout(pp=1, dp=16, ep=8, global_batch=64, seq_len=4096, zero_stage=3)
    assert sc.estimate("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=16, layout=fsdp,
                    framework="megatron+ep-overlap").step_time_s > 0
    best = sc.plan("qwen3-30b-a3b", gpu="h100-sxm", num_gpus=16, global_batch=64, seq_len=4096,
                framework="megatron+ep-overlap", top=200)
    rows = [c.layout for c in best.top]
    assert rows and all(r.ep > 1 and (r.pp == 1 or (r.vpp > 1 and r.zero_stage <= 1)) for r in rows)


def test_megatron_ep_overlap_refuses_two_mtp_layers_a_recomputed_moe_and_a_delayed_fp8_replay():
    lay = Layout(tp=2, pp=8, vpp=4, dp=64, ep=64, global_batch=8192, seq_len=4096, precision="fp8")
    with pytest.raises(InputError, match="^model: .*at most one multi-token-prediction layer"):
        sc.estimate("deepseek-v3+mtp2", gpu="h100-sxm", num_gpus=1024, layout=lay, framework="megatron+ep-overlap")
    moe = dataclasses.replace(lay, recompute="selective", recompute_modules=("moe",))
    with pytest.raises(InputError, match="^recompute: .*'moe' cannot be a recomputed module"):
        sc.estimate("deepseek-v3", gpu="h100-sxm", num_gpus=1024, layout=moe, framework="megatron+ep-overlap")
    full = dataclasses.replace(lay, recompute="full")
    with pytest.raises(InputError, match="^recompute: .*delayed-scaling fp8"):
        sc.estimate("deepseek-v3", gpu="h100-sxm", num_gpus=1024, layout=full, framework="megatron+ep-overlap")
    # current scaling re-derives its scales on the replay; one MTP layer is scheduled
    assert sc.estimate("deepseek-v3+mtp", gpu="h100-sxm", num_gpus=1024, layout=full,
                       framework="megatron+ep-overlap+fp8-current").step_time_s > 0


def test_a_small_token_budget_reads_in_hours_dollars_and_kilowatt_hours():
    """plan --tokens on a small job: 1e9 tokens on 8 GPUs take hours and tens of dollars, which the
    line says (it printed '0.1 days, $0.00 M, 0 MWh')."""
    out = " ".join(runner.invoke(app, ["plan", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "64",
                                       "--tokens", "1e9"]).output.split())
    line = out[out.index("tokens with #1"):]
    assert " h (failure-free), $" in line and "kWh" in line.split("\n")[0] and "$0.00 M" not in line, line
