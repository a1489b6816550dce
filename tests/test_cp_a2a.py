"""All-to-all (Ulysses) context parallelism, Transformer Engine's cp_comm_type "a2a": its collectives
and copies, the sequence its attention runs over, the heads it needs, and the same answer from a
framework suffix, a Megatron-LM script and the export."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import supercluster as sc
from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.formats.launchers import from_megatron_args, to_megatron_args
from supercluster.formats.load import load_model
from supercluster.formats.megatron_args import parse_args
from supercluster.formats.megatron_flags import framework_from_args
from supercluster.hardware.specs import get_gpu
from supercluster.job import default_network
from supercluster.parallelism.framework import get_framework
from supercluster.parallelism.layout import Layout
from supercluster.perf.comm import all_to_all_attention

runner = CliRunner()
JOB = dict(tp=1, pp=1, cp=8, global_batch=64, seq_len=8192)


def layout(**change: int) -> Layout:
    d = {**JOB, **change}
    return Layout(dp=64 // (d["tp"] * d["pp"] * d["cp"]), **d)


def estimate(framework: str, **change: int) -> sc.StepBreakdown:
    """Llama 3 8B on 64 H100, sequences of 8,192 tokens over cp 8 unless changed."""
    return sc.estimate("llama3-8b", gpu="h100-sxm", num_gpus=64, layout=layout(**change), framework=framework)


def test_each_pass_is_four_all_to_alls_and_three_copies_of_each_tensor():
    net = default_network(get_gpu("h100-sxm"))
    cp, s, el, bw = np.array([8.0]), np.array([1.0]), np.array([2.0]), 3.0e12
    q, kv = np.array([1024.0 * 32]), np.array([1024.0 * 8])  # 1,024 tokens, 32 query and 8 KV heads
    calls, copies = all_to_all_attention(net, cp, s, q, kv, 128.0, 128.0, el, bw)
    sizes = [q * 128 * 2, kv * 128 * 2, kv * 128 * 2, q * 128 * 2]  # Q, K, V, O in bf16
    assert calls == pytest.approx(sum(net.collective_time_s("all_to_all", x, cp, s) for x in sizes))
    assert copies == pytest.approx(3 * 2 * sum(sizes) / bw)
    none = all_to_all_attention(net, np.array([1.0]), s, q, kv, 128.0, 128.0, el, bw)
    assert none[0] == 0 and none[1] == 0  # (no CP, no exchange)


def test_a2a_runs_the_attention_over_the_whole_sequence_and_hides_nothing():
    ring, a2a = estimate("megatron"), estimate("megatron+cp-a2a")
    # the ring's blocks are 1,024 tokens (FA3 at 69 % of its long-sequence rate), a2a's kernel 8,192
    assert a2a.ledger["attention_inefficiency"] < ring.ledger["attention_inefficiency"]
    assert a2a.ledger["exposed_cp_comm"] > ring.ledger["exposed_cp_comm"] >= 0
    assert a2a.ledger["comm_contention"] == 0 < ring.ledger["comm_contention"]  # (no CP traffic under compute)
    assert estimate("megatron+cp-a2a", cp=1).step_time_s == pytest.approx(estimate("megatron", cp=1).step_time_s,
                                                                          rel=1e-12)


def test_a2a_needs_whole_heads_on_every_cp_rank():
    with pytest.raises(InputError) as e:  # 8 KV heads over tp 8: one per TP rank, which 2 CP ranks cannot split
        estimate("megatron+cp-a2a", tp=8, cp=2)
    assert e.value.field == "cp" and "1 KV heads per TP rank" in str(e.value)
    r = runner.invoke(app, ["plan", "--model", "llama3-70b", "--gpus", "64", "--seq-len", "65536", "--global-batch",
                            "32", "--framework", "nemo-megatron+cp-a2a", "--top", "40", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["top"]
    assert rows and all(8 // x["tp"] % x["cp"] == 0 for x in rows)  # 8 KV heads
    with pytest.raises(InputError) as e:
        get_framework("torchtitan+cp-a2a")
    assert e.value.field == "framework" and "no all-to-all form" in str(e.value)


def test_a_script_export_and_suffix_give_one_answer(tmp_path):
    fw = get_framework("megatron+cp-a2a")
    model = load_model("llama3-8b")
    args = to_megatron_args(layout(), model, fw)
    assert "--cp-comm-type a2a" in args
    script = tmp_path / "train.sh"
    script.write_text(f"torchrun pretrain_gpt.py {args}\n")
    read = sc.Job.from_config(str(script), gpu="h100-sxm", num_gpus=64)
    assert read.framework.cp_rotate == "a2a"
    assert sc.estimate(read).step_time_s == pytest.approx(estimate("megatron+cp-a2a").step_time_s, rel=1e-12)
    parsed = parse_args(args)
    back = framework_from_args(parsed)
    assert back.cp_rotate == "a2a" and "all-to-all" in back.doc
    assert from_megatron_args(args, 64).cp == 8
    with pytest.raises(InputError) as e:
        framework_from_args(parse_args(args.replace("--cp-comm-type a2a", "--cp-comm-type a2a+p2p")))
    assert e.value.field == "cp-comm-type" and "allowed: p2p" in str(e.value)


def test_a_plan_that_rings_kv_says_what_all_to_all_cp_would_take():
    """The planner keeps the framework's CP type; where its best layout rings K/V it also prices that
    layout under +cp-a2a, as estimate does, and says so (None where a2a cannot split the heads)."""
    args = ["plan", "--model", "llama2-7b", "--gpus", "16", "--seq-len", "32768", "--global-batch", "16"]
    d = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    best = d["best"]
    job = sc.Job.from_label(best["layout"], model="llama2-7b", gpu="h100-sxm", num_gpus=16, global_batch=16,
                            seq_len=32768, framework="nemo-megatron+cp-a2a", micro_batch=best["micro_batch"],
                            zero_stage=best["zero_stage"], recompute=best["recompute"],
                            sequence_parallel=best["sequence_parallel"])
    assert job.layout.cp > 1
    assert d["cp_a2a_step_time_s"] == pytest.approx(sc.estimate(job).step_time_s, rel=1e-12)
    r = runner.invoke(app, args)
    assert "all-to-all CP (framework option +cp-a2a) on the same layout" in r.stdout
    # Llama 3 8B's 8 KV heads at tp 4 leave 2 a rank: cp 4 cannot split them, and nothing is claimed
    plain = json.loads(runner.invoke(app, ["plan", "--model", "llama3-8b", "--gpus", "64", "--seq-len", "262144",
                                           "--global-batch", "64", "--json"]).stdout)
    assert plain["best"]["layout"].startswith("tp4-") and "-cp4" in plain["best"]["layout"]
    assert "cp_a2a_step_time_s" not in plain


def test_the_p2p_ring_merges_each_steps_output_and_gradients_in_memory_bound_passes():
    """Transformer Engine's ring: the first step's output rescaled (a read and a write), every later
    step's added (two reads and a write) on 0.75 of the output on average; K/V concatenated for the
    send once; the backward accumulates dQ and the concatenated dK/dV per step the same way."""
    from supercluster.perf.comm import p2p_ring_merges

    el, bw = np.array([2.0]), 3.0e12
    q = o = np.array([4096.0 * 32 * 128])  # 4,096 tokens, 32 query heads of 128
    kv = np.array([4096.0 * 8 * 128 * 2])  # their K and V, 8 KV heads
    for cp in (2.0, 8.0):
        later = 0.75 * (cp - 1)
        f, b = p2p_ring_merges(np.array([cp]), q, o, kv, el, bw)
        assert f == pytest.approx(2 * (o * (2 + 3 * later) + 2 * kv) / bw)
        assert b == pytest.approx(2 * (q * (2 + 3 * later) + kv * (2 + 2 * (1 + later) + 3 * later)) / bw)
    f1, b1 = p2p_ring_merges(np.array([1.0]), q, o, kv, el, bw)
    assert f1 == 0 and b1 == 0  # (no ring, nothing to merge)
    # priced as memory-bound work of the layer: more CP ranks, more merging
    two, eight = estimate("megatron", cp=2), estimate("megatron", cp=8)
    assert eight.ledger["memory_bound_ops"] > two.ledger["memory_bound_ops"]


def test_the_p2p_ring_launches_kernels_per_step_and_a_short_block_waits_for_the_host(monkeypatch):
    """Each ring step launches its send/receive, attention and corrections from the host: with 1,024
    tokens per rank over cp 16 on a Grace host the layer waits for those launches; without them
    (CP_RING_OPS zeroed) it would wait less."""
    from supercluster.perf import host as compute

    fw = get_framework("megatron")
    rows = type("R", (), {"cp": np.array([1.0, 2.0, 16.0])})()
    f, b = compute.cp_ring_ops(fw, rows)
    assert list(f) == [0.0, 4 * 1 + 1, 4 * 15 + 1] and list(b) == [0.0, 6 * 1 + 3, 6 * 15 + 3]
    for other in ("megatron+cp-a2a", "torchtitan"):
        assert not compute.cp_ring_ops(get_framework(other), rows)[0].any()

    def launch_wait() -> float:
        lay = Layout(tp=1, pp=1, dp=4, cp=16, global_batch=4, seq_len=16384)
        return sc.estimate("llama3-8b", gpu="gb200", num_gpus=64, layout=lay, framework="megatron").ledger[
            "kernel_launch"]

    with_ring = launch_wait()
    monkeypatch.setattr(compute, "CP_RING_OPS", (0.0, 0.0, 0.0, 0.0))
    assert with_ring > launch_wait() >= 0


def test_each_ring_step_hides_its_transfer_only_under_its_own_block():
    """Transformer Engine's K/V ring pipelines one transfer beside each step's attention block: at CP 4,
    blocks of 1 ms (a quarter of 4 ms) and transfers of 1.5 ms expose 3 x 0.5 ms forward, although the
    layer's 4 ms of attention exceed the ring's 4.5 ms by sum; backward, blocks of 2 ms beside K/V
    (1.5 ms), K/V with their gradients (3 ms, twice) and the gradients (1.5 ms) expose 2 x 1 ms.
    Transfers shorter than the blocks hide whole; no ring, nothing."""
    from supercluster.perf.comm import p2p_ring_exposed_s

    f, b = p2p_ring_exposed_s(np.array([4.0]), np.array([1.5e-3]), np.array([4e-3]), np.array([8e-3]))
    assert float(f[0]) == pytest.approx(1.5e-3) and float(b[0]) == pytest.approx(2e-3)
    f, b = p2p_ring_exposed_s(np.array([4.0]), np.array([0.5e-3]), np.array([4e-3]), np.array([8e-3]))
    assert float(f[0]) == 0.0 and float(b[0]) == 0.0
    f, b = p2p_ring_exposed_s(np.array([1.0]), np.array([1e-3]), np.array([1e-4]), np.array([2e-4]))
    assert float(f[0]) == 0.0 and float(b[0]) == 0.0
