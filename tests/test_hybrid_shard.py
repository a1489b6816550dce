"""Hybrid sharding (HSDP): the ZeRO / FSDP states sharded within groups of dp x cp / N ranks, N replicas
of each shard all-reducing their gradient shard. One layout field, ``dp_replicate``, read and written
wherever a layout is: the label, the command line, the runs file, Megatron-LM and torchtitan configs."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import supercluster as sc
from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.formats import launchers
from supercluster.formats.runs import row_replicas
from supercluster.parallelism.layout import Layout

N, GBS = 2048, 4096


def _fsdp(rep: int, framework: str = "torchtitan", zero: int = 3) -> sc.Job:
    lay = Layout(tp=1, pp=1, dp=N, micro_batch=2, global_batch=GBS, seq_len=4096, zero_stage=zero,
                 recompute="full", dp_replicate=rep)
    return sc.Job.of("llama3-70b", gpu="h100-sxm", num_gpus=N, layout=lay, framework=framework)


def test_the_label_carries_the_replicas_and_reads_back():
    lay = Layout.from_string("tp1-pp1-dp2048-rep16-mb2-z3-full", global_batch=GBS)
    assert (lay.dp_replicate, lay.shard_group) == (16, 128)
    assert lay.label() == "tp1-pp1-dp2048-rep16-mb2-z3-full"
    assert Layout.from_string(lay.label(), global_batch=GBS) == lay
    assert Layout(dp=64, global_batch=64).label().startswith("tp1-pp1-dp64-mb1")  # (1: nothing written)


@pytest.mark.parametrize("kwargs, says", [
    (dict(dp=64, dp_replicate=3), "3 replicas must divide dp = 64"),
    (dict(dp=64, dp_replicate=4, zero_stage=0), "need ZeRO 1-3"),
    (dict(dp=64, ep=32, dp_replicate=4), "divide the experts' data-parallel group"),
    (dict(dp=64, dp_replicate=0), "positive integer"),
])
def test_a_replication_the_ranks_cannot_hold_is_refused_by_name(kwargs, says):
    with pytest.raises(InputError, match="^dp_replicate: .*" + says):
        Layout(global_batch=64, **kwargs)


def test_each_replica_holds_a_whole_sharded_copy():
    full, hybrid = sc.estimate(_fsdp(1)), sc.estimate(_fsdp(16))
    for part in ("mem_weights_bytes", "mem_grads_bytes", "mem_optimizer_bytes"):
        # (ZeRO-3's shard, plus the layers being gathered for the weights: 16x the shard, the same gathered)
        assert hybrid.memory[part] > full.memory[part]
    assert hybrid.memory["mem_optimizer_bytes"] == pytest.approx(16 * full.memory["mem_optimizer_bytes"], rel=1e-9)


def test_replicas_keep_fsdp_traffic_inside_the_shard_group_and_add_the_gradient_all_reduce():
    """At 2,048 GPUs FSDP's per-layer gathers over every rank are slower than gathers over 128 ranks plus an
    all-reduce of each gradient shard over the 16 replicas; the replicas' all-reduce is real traffic."""
    full, hybrid = sc.estimate(_fsdp(1)), sc.estimate(_fsdp(16))
    assert hybrid.ledger["exposed_dp_comm"] < full.ledger["exposed_dp_comm"]
    assert hybrid.step_time_s < full.step_time_s
    # the traffic floor counts the replicas' all-reduce: more than the shard group's gathers alone
    shard_only = sc.estimate(sc.Job.of("llama3-70b", gpu="h100-sxm", num_gpus=128, framework="torchtitan",
                                       layout=Layout(dp=128, micro_batch=2, global_batch=256, seq_len=4096,
                                                     zero_stage=3, recompute="full")))
    assert hybrid.dp_traffic_s > shard_only.dp_traffic_s
    # ZeRO-1 (Megatron-Core's distributed optimizer instances) prices its replicas the same way
    z1 = sc.estimate(_fsdp(16, framework="megatron", zero=1))
    assert z1.memory["mem_optimizer_bytes"] == pytest.approx(
        16 * sc.estimate(_fsdp(1, framework="megatron", zero=1)).memory["mem_optimizer_bytes"], rel=1e-9)


def test_a_framework_without_hybrid_sharding_refuses_it():
    with pytest.raises(InputError, match="^dp_replicate: framework deepspeed shards over all of dp x cp"):
        sc.estimate(_fsdp(16, framework="deepspeed"))


def test_megatron_and_torchtitan_configs_carry_the_replicas():
    lay = _fsdp(16).layout
    megatron = launchers.export(lay, "megatron")
    assert "--num-distributed-optimizer-instances 16" in megatron
    assert launchers.from_megatron_args(megatron, num_gpus=N).dp_replicate == 16
    toml = launchers.export(lay, "torchtitan-toml")
    assert "data_parallel_replicate_degree = 16" in toml and "data_parallel_shard_degree = 128" in toml
    with pytest.raises(InputError, match="^dp_replicate: 16 replicas of a shard group"):
        launchers.export(lay, "deepspeed")


@pytest.mark.parametrize("mics, refused", [(-1, False), (0, False), (64, False), (8, True)])
def test_a_deepspeed_config_with_mics_shard_groups_is_refused_by_name_not_priced_as_full_zero3(mics, refused):
    """MiCS (DeepSpeed before 0.19) sharded ZeRO-3 within groups of mics_shard_size ranks; the DeepSpeed
    profile prices ZeRO-3 over all ranks, so a config asking for smaller groups is refused, naming the key."""
    cfg = json.dumps({"train_batch_size": 64, "zero_optimization": {"stage": 3, "mics_shard_size": mics}})
    if refused:
        with pytest.raises(InputError, match=r"^zero_optimization.mics_shard_size: MiCS shard groups \(8 of 64"):
            launchers.from_deepspeed_json(cfg, num_gpus=64)
    else:
        assert launchers.from_deepspeed_json(cfg, num_gpus=64).dp == 64


def test_torchtitan_reads_its_replicate_degree_as_hybrid_sharding(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(launchers.export(_fsdp(16).layout, "torchtitan-toml", model=sc.load_model("llama3-70b")))
    assert launchers.load_layout(path, num_gpus=N).dp_replicate == 16


def test_a_runs_row_states_its_replicas_in_a_column_or_in_words():
    assert row_replicas({"dp_replicate": "16"}) == 16
    assert row_replicas({"zero_stage_or_fsdp": "HSDP, 16 replicas of a 128-GPU shard group"}) == 16
    assert row_replicas({"zero_stage_or_fsdp": "FSDP (replicate degree 4)"}) == 4
    assert row_replicas({"zero_stage_or_fsdp": "num_distributed_optimizer_instances=8"}) == 8
    assert row_replicas({"zero_stage_or_fsdp": "FSDP2 (fully sharded)"}) == 1
    # a shard group's size divides the data-parallel ranks into replicas; a version number is no size
    assert row_replicas({"zero_stage_or_fsdp": "FSDP=128 + data parallel"}, 2048) == 16
    assert row_replicas({"zero_stage_or_fsdp": "FSDP 128 x DP 16"}, 2048) == 16
    assert row_replicas({"zero_stage_or_fsdp": "dcn_data_parallelism=4"}, 2048) == 4
    assert row_replicas({"zero_stage_or_fsdp": "FSDP2, FSDP1 before"}, 2048) == 1
    assert row_replicas({"zero_stage_or_fsdp": "FSDP=128"}, 128) == 1  # (the whole group: no replicas)


def test_the_command_line_takes_the_replicas_as_an_option_or_in_the_label():
    runner = CliRunner()
    base = ["estimate", "--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", str(N), "--global-batch", str(GBS),
            "--seq-len", "4096", "--framework", "torchtitan", "--json"]
    a = runner.invoke(app, [*base, "--tp", "1", "--pp", "1", "--micro-batch", "2", "--zero", "3", "--recompute",
                            "full", "--dp-replicate", "16"])
    b = runner.invoke(app, [*base, "--layout", "tp1-pp1-dp2048-rep16-mb2-z3-full"])
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    da, db = json.loads(a.output), json.loads(b.output)
    assert da["step_time_s"] == db["step_time_s"] == pytest.approx(sc.estimate(_fsdp(16)).step_time_s, rel=1e-12)


def test_the_planner_searches_replicas_only_where_the_framework_has_them():
    kw = dict(gpu="h100-sxm", num_gpus=N, global_batch=GBS, seq_len=4096, fixed={"zero": 3, "recompute": 2})
    tt = sc.plan("llama3-70b", framework="torchtitan", **kw)
    assert tt.best.layout.dp_replicate > 1  # FSDP over 2,048 ranks loses to replicated shard groups
    ds = sc.plan("llama3-70b", framework="deepspeed", top=50, **kw)
    assert all(c.layout.dp_replicate == 1 for c in ds.top)
