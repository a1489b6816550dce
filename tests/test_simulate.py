"""The step timeline: the pipeline schedule laid out event by event from the cost model's numbers."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.formats.load import load_model
from supercluster.job import default_network, estimate
from supercluster.parallelism.framework import get_framework
from supercluster.parallelism.layout import Layout
from supercluster.simulation.timeline import Engine, schedule, simulate

CASES = [
    ("llama3-8b", 8, Layout(dp=8, global_batch=64, seq_len=8192), "megatron"),  # no pipeline
    ("llama3-70b", 64, Layout(tp=4, pp=4, dp=2, cp=2, global_batch=128, seq_len=8192), "megatron"),  # 1F1B
    ("llama3-70b", 64, Layout(tp=4, pp=4, dp=2, cp=2, vpp=5, global_batch=128, seq_len=8192), "megatron"),
    ("llama3-70b", 64, Layout(tp=4, pp=4, dp=2, cp=2, vpp=5, global_batch=128, seq_len=8192, precision="fp8"),
     "nemo-megatron"),  # interleaved with overlapped sends
    ("llama3-405b", 16384, Layout(tp=8, pp=16, dp=128, vpp=4, global_batch=2048, seq_len=8192, recompute="full",
                                  sequence_parallel=True), "megatron"),  # micro-batches = pp: all forwards first
    ("mixtral-8x7b", 64, Layout(tp=2, pp=4, dp=8, ep=8, global_batch=256, seq_len=4096), "nemo-megatron"),
]


@pytest.mark.parametrize("model, n, lay, fw", CASES)
def test_without_jitter_the_timeline_is_the_ledgers_step(model, n, lay, fw, h100):
    m, f = load_model(model), get_framework(fw)
    tl = simulate(m, layout=lay, gpu=h100, net=default_network(h100, num_gpus=n), fw=f)
    b = estimate(m, gpu=h100, num_gpus=n, layout=lay, framework=fw)
    assert tl.step_time_s == pytest.approx(b.step_time_s, rel=1e-9)
    for st in tl.stages():
        assert st["idle_s"] >= -1e-9 * b.step_time_s
        assert st["compute_s"] == pytest.approx(b.microbatches * (b.step_time_s - sum(
            b.ledger[k] for k in ("exposed_pp_comm", "pipeline_bubble", "exposed_dp_comm", "optimizer",
                                  "stragglers"))) / b.microbatches, rel=1e-9)
    # later stages start later; the bubble is idle time, and more so on the last stages in 1F1B
    starts = [st["first_forward_s"] for st in tl.stages()]
    assert starts == sorted(starts)


def test_schedules_run_every_forward_before_its_backward():
    for pp, vpp, m in ((1, 1, 3), (4, 1, 6), (4, 1, 2), (4, 2, 8), (4, 3, 4)):
        for s in range(pp):
            order = schedule(s, pp, vpp, m)
            assert len(order) == 2 * m * vpp and len(set(order)) == len(order)
            seen = set()
            for kind, i, c in order:
                if kind == "B":
                    assert ("F", i, c) in seen
                seen.add((kind, i, c))
    # 1F1B: stage s warms up with pp - s - 1 forwards, then alternates one forward and one backward
    assert [next(k for k, op in enumerate(schedule(s, 4, 1, 8)) if op[0] == "B") for s in range(4)] == [4, 3, 2, 1]


def test_engine_runs_ties_by_priority_then_insertion():
    eng, seen = Engine(), []
    for tag, pr in (("a", 1), ("b", 0), ("c", 1), ("d", 0)):
        eng.at(2.0, lambda tag=tag: seen.append(tag), priority=pr)
    eng.at(1.0, lambda: seen.append("first"))
    assert eng.run() == 2.0 and seen == ["first", "b", "d", "a", "c"]
    with pytest.raises(InputError, match="past"):
        eng.at(1.0, lambda: None)


def test_jitter_stretches_the_step_and_is_reproducible(h100):
    m, f = load_model("llama3-70b"), get_framework("megatron")
    lay = Layout(tp=4, pp=4, dp=2, cp=2, global_batch=128, seq_len=8192)
    net = default_network(h100, num_gpus=64)
    base = simulate(m, layout=lay, gpu=h100, net=net, fw=f).step_time_s
    runs = [simulate(m, layout=lay, gpu=h100, net=net, fw=f, jitter=0.2, seed=s).step_time_s for s in range(4)]
    assert sum(runs) / len(runs) > base  # a synchronous pipeline waits for its slowest operations
    assert simulate(m, layout=lay, gpu=h100, net=net, fw=f, jitter=0.2, seed=1).step_time_s == runs[1]
    with pytest.raises(InputError, match="jitter"):
        simulate(m, layout=lay, gpu=h100, net=net, fw=f, jitter=-0.1)
    six = Layout(tp=4, pp=4, dp=4, vpp=5, global_batch=24, seq_len=8192)  # 6 micro-batches on 4 stages
    with pytest.raises(InputError, match="^global_batch: framework megatron's interleaved schedule"):
        simulate(m, layout=six, gpu=h100, net=net, fw=f)  # Megatron-Core refuses it
    with pytest.raises(InputError, match="^micro_batch: the interleaved schedule needs"):
        simulate(m, layout=six, gpu=h100, net=net, fw=get_framework("torchtitan"))  # torch runs it; the timeline not


def test_simulate_cli_json_and_trace(tmp_path):
    path = tmp_path / "step.json"
    r = CliRunner().invoke(app, ["simulate", "--layout", "tp4-pp4-dp4-vpp5", "--global-batch", "64",
                                 "--trace", str(path), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["step_time_s"] == pytest.approx(d["ledger_step_time_s"], rel=1e-9) and len(d["stages"]) == 4
    trace = json.loads(path.read_text())
    assert sum(e["ph"] == "X" for e in trace["traceEvents"]) == d["tasks"]
    r = CliRunner().invoke(app, ["simulate", "--layout", "tp4-pp4-dp4", "--jitter", "-1"])
    assert isinstance(r.exception, InputError) and r.exception.field == "jitter"


def test_exact_stages_give_each_stage_its_layers_and_never_exceed_the_ledger(h100):
    """Each chunk its own layers, the head on the last: the pipeline is at most as slow as the ledger's
    every-stage-the-heaviest pricing, equal without a pipeline; the last stage computes the most."""
    from supercluster.parallelism.pplayout import chunk_layers

    assert chunk_layers(126, 8, 8, True)[0][0] == 1 and chunk_layers(126, 8, 8, True)[-1][-1] == 1
    assert sum(map(sum, chunk_layers(126, 8, 8, True))) == 126 == sum(map(sum, chunk_layers(126, 9, 7, False)))
    assert chunk_layers(80, 3, 1, False) == [[27], [27], [26]]
    for model, n, lay, fw in CASES:
        m, f = load_model(model), get_framework(fw)
        net = default_network(h100, num_gpus=n)
        tl = simulate(m, layout=lay, gpu=h100, net=net, fw=f, exact_stages=True)
        assert sum(map(sum, tl.layers)) == m.num_layers
        assert tl.step_time_s <= tl.ledger_step_time_s * (1 + 1e-9)
        if lay.pp == 1:
            assert tl.step_time_s == pytest.approx(tl.ledger_step_time_s, rel=1e-9)
        comp = [s["compute_s"] for s in tl.stages()]
        if sum(tl.layers[-1]) == max(map(sum, tl.layers)):  # the head on top of a full stage
            assert comp[-1] == max(comp)


def test_the_schedule_keeps_as_many_micro_batches_in_flight_as_the_memory_model_assumes():
    """The activation memory prices the micro-batches the first stage holds (1F1B: min(m, pp);
    interleaved: pp + (pp - 1) / vpp, or m = pp when every forward runs first); the schedule the
    timeline runs holds exactly that many (counted in chunks, over vpp), on every stage (the last
    one's count prices its share with the logits). Found: the m = pp case was priced at
    pp + (pp - 1) / vpp."""
    from supercluster.perf.memory import in_flight_microbatches

    for pp, vpp, m in ((1, 1, 4), (4, 1, 8), (4, 1, 2), (8, 1, 32), (4, 2, 8), (4, 5, 16), (8, 4, 16), (8, 8, 8)):
        for stage in range(pp):
            live = peak = 0
            for kind, _, _ in schedule(stage, pp, vpp, m):
                live += 1 if kind == "F" else -1
                peak = max(peak, live)
            assert peak / vpp == pytest.approx(float(in_flight_microbatches(pp, vpp, m, stage))), (pp, vpp, m, stage)


def test_gantt_lines_show_the_fill_and_the_drain(h100):
    m, f = load_model("llama3-70b"), get_framework("megatron")
    lay = Layout(tp=4, pp=4, dp=4, global_batch=32, seq_len=8192)
    g = simulate(m, layout=lay, gpu=h100, net=default_network(h100, num_gpus=64), fw=f).gantt(width=80)
    assert len(g) == 4 and all(len(line) == 80 and set(line) <= set("FB-dow.") for line in g)
    assert g[0][0] == "F" and g[3][0] == "."  # the last stage waits for the fill
    assert g[0].rstrip("dow.").endswith("B")  # the first stage runs the last backward
    tail = slice(50, 72)  # the drain, before the DP / optimizer / straggler tail
    assert g[3][tail].count(".") > g[0][tail].count(".")  # where the last stage idles
    with pytest.raises(InputError, match="width"):
        simulate(m, layout=lay, gpu=h100, net=default_network(h100, num_gpus=64), fw=f).gantt(width=2)


def test_per_stage_memory_peaks_where_the_memory_model_says(h100):
    """Each stage's peak memory from its own layers and the micro-batches its schedule holds (the last
    with the logits): the highest equals the estimate's memory per GPU when the layers split evenly,
    and earlier stages hold more (1F1B keeps pp - stage micro-batches in flight)."""
    for model, n, lay, fw in CASES:
        m, f = load_model(model), get_framework(fw)
        tl = simulate(m, layout=lay, gpu=h100, net=default_network(h100, num_gpus=n), fw=f)
        b = estimate(m, gpu=h100, num_gpus=n, layout=lay, framework=fw)
        mem = tl.memory_bytes
        assert len(mem) == lay.pp and max(mem) <= b.memory_per_gpu_bytes * (1 + 1e-9)
        if m.num_layers % (lay.pp * lay.vpp) == 0:  # an even split: the memory model's stage is exact
            assert max(mem) == pytest.approx(b.memory_per_gpu_bytes, rel=1e-9), model
        if lay.pp > 1 and lay.vpp == 1:
            assert list(mem[:-1]) == sorted(mem[:-1], reverse=True)


def test_a_multi_token_prediction_block_is_a_layer_of_the_last_chunk(h100):
    """The timeline puts the MTP block on the last chunk, in a layer's slot under the embedding/loss-
    aware split, and still reproduces the ledger's step without jitter."""
    import dataclasses

    m = dataclasses.replace(load_model("deepseek-v3"), mtp_layers=1)
    lay = Layout(pp=4, vpp=4, dp=64, ep=64, global_batch=512, seq_len=4096, precision="fp8")
    for fw in ("nemo-megatron", "megatron"):
        f = get_framework(fw)
        net = default_network(h100, num_gpus=256)
        tl = simulate(m, layout=lay, gpu=h100, net=net, fw=f)
        assert tl.step_time_s == pytest.approx(estimate(m, gpu=h100, num_gpus=256, layout=lay,
                                                        framework=fw).step_time_s, rel=1e-9)
        ex = simulate(m, layout=lay, gpu=h100, net=net, fw=f, exact_stages=True)
        assert sum(map(sum, ex.layers)) == m.num_layers + 1 and ex.step_time_s <= tl.step_time_s * (1 + 1e-9)


@pytest.mark.parametrize("pp, vpp, m", [(1, 1, 3), (4, 1, 6), (4, 2, 4), (3, 3, 6), (8, 4, 16)])
def test_schedule_makespan_is_the_event_simulations_makespan(pp, vpp, m):
    """The vectorized longest path over the schedule's waves finishes exactly when the event engine
    does, for random per-chunk durations (two rows at once)."""
    import numpy as np

    from supercluster.parallelism.schedule import dependency, makespan

    rng = np.random.default_rng(pp * 100 + vpp * 10 + m)
    d = rng.uniform(0.5, 2.0, size=(pp, vpp, 2, 2))
    for row in range(2):
        end: dict = {}
        free = [0.0] * pp
        orders = [schedule(s, pp, vpp, m) for s in range(pp)]
        pos = [0] * pp
        while any(pos[s] < len(orders[s]) for s in range(pp)):
            for s in range(pp):  # advance every stage as far as its inputs allow
                while pos[s] < len(orders[s]):
                    op = orders[s][pos[s]]
                    dep = dependency(s, op, pp, vpp)
                    if dep is not None and dep not in end:
                        break
                    start = max(free[s], end[dep] if dep else 0.0)
                    free[s] = end[(s, op)] = start + d[s, op[2], int(op[0] == "B"), row]
                    pos[s] += 1
        assert makespan(pp, vpp, m, d)[row] == pytest.approx(max(free), rel=1e-12)


def test_uneven_interleaving_is_priced_by_its_schedule(h100):
    """torchtitan's split of Llama 3.1 405B's 126 layers over pp 16 x vpp 3 chunks leaves chunks of
    2 and 3 layers; the interleaved schedule then stalls beyond (pp - 1) / vpp stage-times, and the
    ledger prices that schedule: its step equals the timeline with each chunk's own layers, the
    bubble grows past the closed form, and an even split (144 layers, 3 per chunk) keeps the closed form."""
    import dataclasses

    m405 = load_model("llama3.1-405b")
    net = default_network(h100, num_gpus=256)
    f = get_framework("torchtitan")
    lay = Layout(tp=8, pp=16, dp=2, vpp=3, micro_batch=1, global_batch=32, seq_len=8192)
    b = estimate(m405, gpu=h100, num_gpus=256, layout=lay, framework="torchtitan")
    tl = simulate(m405, layout=lay, gpu=h100, net=net, fw=f)
    ex = simulate(m405, layout=lay, gpu=h100, net=net, fw=f, exact_stages=True)
    assert tl.step_time_s == pytest.approx(b.step_time_s, rel=1e-9) == ex.step_time_s
    assert sorted({n for s in tl.layers for n in s}) == [2, 3]

    def stage_s(br):  # one micro-batch on the heaviest stage: the ledger's compute over 16 micro-batches
        return (br.step_time_s - sum(br.ledger[k] for k in ("pipeline_bubble", "exposed_pp_comm", "exposed_dp_comm",
                                                             "optimizer", "stragglers"))) / 16

    assert b.ledger["pipeline_bubble"] > 1.2 * 15 / 3 * stage_s(b)
    even = dataclasses.replace(m405, num_layers=144)
    be = estimate(even, gpu=h100, num_gpus=256, layout=lay, framework="torchtitan")
    assert be.ledger["pipeline_bubble"] == pytest.approx(15 / 3 * stage_s(be), rel=1e-9)
    assert simulate(even, layout=lay, gpu=h100, net=net, fw=f).layers == ()


def test_an_explicit_layout_with_the_mtp_module_apart_from_the_loss_prices_each_chunk_its_own_work(h100):
    """Megatron-Core's documented DeepSeek-V3 layout on pp 16 x vpp 2, "Et*3|(tt|)*29,m|L", puts the
    MTP module and the loss on different chunks: the ledger (the schedule's longest path) and the
    timeline agree, and no ledger part goes negative."""
    m = load_model("deepseek-v3+mtp")
    lay = Layout(tp=1, pp=16, dp=32, ep=32, vpp=2, micro_batch=1, global_batch=1024, seq_len=4096,
                 pp_layout="Et*3|(tt|)*29,m|L")
    net = default_network(h100, num_gpus=512)
    f = get_framework("megatron")
    b = estimate(m, gpu=h100, num_gpus=512, layout=lay, framework="megatron")
    tl = simulate(m, layout=lay, gpu=h100, net=net, fw=f)
    assert tl.step_time_s == pytest.approx(b.step_time_s, rel=1e-9)
    assert tl.layers[14][1] == 1 and tl.layers[15][1] == 0  # the MTP module; the loss alone
    assert min(b.ledger.values()) >= 0.0 and b.ledger["pipeline_bubble"] > 0.0


def test_a_long_schedule_extended_by_its_period_ends_where_the_full_walk_does():
    """makespan stops walking once three rounds repeat and adds whole periods; on uneven chunks
    (torchtitan's split of 77 and 126 layers), including rows that settle late or never within
    the first walk, it agrees with walking all 40 rounds."""
    import numpy as np

    from supercluster.parallelism.pplayout import chunk_layers
    from supercluster.parallelism.schedule import _run, chunk_durations, makespan

    rng = np.random.default_rng(7)
    for layers, pp, vpp in ((77, 4, 3), (61, 4, 2), (126, 8, 3), (126, 16, 4)):
        work = np.zeros((pp, vpp, 3))
        work[:, :, 0] = chunk_layers(layers, pp, vpp, split="middle")
        work[-1, -1, 2] = 1.0
        rows = 8
        frac, head = rng.uniform(0.2, 0.5, rows), rng.uniform(0.0, 3.0, rows)
        d = chunk_durations(work, 1.0, frac, head, head * frac, 0.0, 0.0, rng.uniform(0.0, 0.5, rows))
        m = 40 * pp
        full = _run(pp, vpp, m, d.reshape(pp * vpp * 2, -1))[0]
        assert np.allclose(makespan(pp, vpp, m, d), full, rtol=1e-12, atol=0.0)
        # and per row, with micro-batches that differ between rows
        ms = rng.choice([pp, 2 * pp, 8 * pp, 40 * pp], size=rows)
        got = makespan(pp, vpp, ms, d)
        for r in range(rows):
            assert got[r] == pytest.approx(_run(pp, vpp, int(ms[r]), d[..., r:r + 1].reshape(-1, 1))[0][0], rel=1e-12)


def test_the_schedule_bound_is_below_the_walk_and_exact_on_even_chunks():
    """makespan_bound (the planner's first pass) never exceeds the longest path; where every chunk
    of every stage does the same work it is the closed form, and so the walk, exactly."""
    import numpy as np

    from supercluster.parallelism.schedule import makespan, makespan_bound

    rng = np.random.default_rng(11)
    gaps = []
    for _ in range(60):
        pp, vpp = int(rng.integers(2, 9)), int(rng.integers(2, 5))
        m = pp * int(rng.integers(1, 10))
        d = rng.uniform(0.2, 2.0, size=(pp, vpp, 2, 4))
        walk, bound = makespan(pp, vpp, m, d), makespan_bound(m, d)
        assert np.all(bound <= walk * (1.0 + 1e-12))
        gaps.append(float(np.max(1.0 - bound / walk)))
        even = np.broadcast_to(d[:1, :1], d.shape)
        assert np.allclose(makespan_bound(m, even), makespan(pp, vpp, m, even), rtol=1e-12)
        per_op = even[0, 0].sum(axis=0)
        assert np.allclose(makespan_bound(m, even), (m + (pp - 1) / vpp) * vpp * per_op, rtol=1e-12)
    assert max(gaps) > 0.05  # (uneven chunks: the bound is strictly below, not a copy of the walk)


def test_simulate_without_a_layout_keeps_the_recompute_given():
    base = ["simulate", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "32", "--json"]
    free = json.loads(CliRunner().invoke(app, base).output)
    full = json.loads(CliRunner().invoke(app, [*base, "--recompute", "full"]).output)
    assert full["step_time_s"] > free["step_time_s"]  # the planner's pick has no recompute; full recompute costs
