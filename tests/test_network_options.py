"""A run's own network: its GPUs' scale-out rate and the GPUs of a node, stated by a runs row (its
columns or its network text) or by estimate's and plan's options, priced everywhere the same."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.formats.launchers import config_gpus_per_node
from supercluster.formats.megatron_args import node_gpus
from supercluster.formats.runs import load_rows, network_gbit_per_gpu, row_network
from supercluster.formats.torchtitan import parse_launch
from supercluster.hardware.specs import get_gpu, get_system, with_network
from supercluster.job import Job, check_job, default_network, estimate, stated_network
from supercluster.network.fabric import FabricNetwork
from supercluster.network.twolevel import TwoLevelNetwork


@pytest.mark.parametrize("text, per_gpu", [
    ("IB HDR 200Gb/s x8 per DGX A100 node (Selene)", 200.0),   # 8 NICs of a node over its 8 GPUs
    ("Omni-Path 4 x 100 Gb/s per node", 50.0),                  # BLOOM's Jean Zay: 4 NICs for 8 GPUs
    ("1600 Gbps node-node interconnect (RoCE)", 200.0),
    ("H100 (InfiniBand 8x50 GB/s)", 400.0),                      # GB/s: bytes
    ("RDMA 400Gb/s (CX-7) per GPU", 400.0),
    ("DGX-H100 (InfiniBand 400Gb/s per GPU)", 400.0),
    ("2 x 200 Gb/s per GPU", 400.0),
    ("3.2 Tbps per node", 400.0),
    ("8x400G InfiniBand NDR", 400.0),                            # a bare G is Gb/s
    ("4x NDR400 per node", 200.0),                               # an InfiniBand generation's port rate
    ("400 Gb/s InfiniBand (1 NIC per GPU)", 400.0),
    ("EFA 3200 Gbps per instance", 400.0),
    ("InfiniBand 400 Gb/s", None),                               # a link's speed, or a cluster's: not read
    ("DGX-H100 (InfiniBand 400 Gb/s)", None),
    ("NDR 400", None),
    ("H100 80GB, InfiniBand", None),
    ("DGX-H100 (DGX SuperPOD InfiniBand rails)", None),
    ("", None),
])
def test_the_network_text_of_a_run_is_read_only_where_it_says_per_gpu_or_per_node(text, per_gpu):
    assert network_gbit_per_gpu(text, 8) == per_gpu


def test_a_node_of_its_own_size_sets_the_scale_up_domain_only_where_the_domain_is_a_node():
    dgx, nvl = get_system("dgx-h100"), get_system("gb200-nvl72")
    assert (with_network(dgx, gpus_per_node=4).scaleup_domain, with_network(nvl, gpus_per_node=4).scaleup_domain) \
        == (4, 72)
    assert with_network(dgx, nic_gbit_per_gpu=100).nic_bytes_per_s == pytest.approx(100e9 / 8)
    for bad in ({"nic_gbit_per_gpu": 0}, {"nic_gbit_per_gpu": float("inf")}, {"gpus_per_node": 0},
                {"gpus_per_node": 2.5}, {"gpus_per_node": True}):
        with pytest.raises(InputError, match=f"^{next(iter(bad))}: must be"):
            with_network(dgx, **bad)


def test_a_stated_rate_without_a_fabric_is_the_two_level_network_and_slows_what_crosses_it():
    g = get_gpu("a100-80gb")
    assert isinstance(default_network(g, num_gpus=384), FabricNetwork)
    thin = default_network(g, num_gpus=384, nic_gbit_per_gpu=50.0)
    assert isinstance(thin, TwoLevelNetwork) and thin.scaleout_bytes_per_s < 0.26 * get_system(
        g.system).nic_bytes_per_s
    # a fabric described as well: the sized fabric, at that rate (a switch family that runs it)
    assert isinstance(default_network(g, num_gpus=384, nic_gbit_per_gpu=400.0, switch="quantum-2"), FabricNetwork)
    job = Job.from_label("tp1-pp1-dp64", model="llama3-8b", gpu="h100-sxm", global_batch=256, seq_len=8192)
    slow = Job.from_label("tp1-pp1-dp64", model="llama3-8b", gpu="h100-sxm", global_batch=256, seq_len=8192,
                          network=default_network(get_gpu("h100-sxm"), num_gpus=64, nic_gbit_per_gpu=25.0))
    a, b = estimate(job), estimate(slow)
    assert b.ledger["exposed_dp_comm"] > 10 * a.ledger["exposed_dp_comm"] and b.step_time_s > a.step_time_s


def test_a_runs_row_prices_the_network_it_states_and_says_so():
    bloom = next(r for r in load_rows("heldout") if r["id"] == "BLOOM-176B-384")
    assert row_network(bloom, 8) == {"nic_gbit_per_gpu": 50.0}
    job, note = Job.from_row(bloom)
    assert "network as the run states it: 50 Gb/s per GPU" in note and isinstance(job.network, TwoLevelNetwork)
    default = dict(bloom, network="")
    job0, note0 = Job.from_row(default)
    assert job0.network is None and "network" not in (note0 or "")
    assert estimate(check_job(job)).step_time_s > estimate(check_job(job0)).step_time_s
    # a row stating its system's own figures keeps the default network (and its sized fabric)
    assert Job.from_row(dict(bloom, network="HDR InfiniBand 200 Gb/s x8 per node"))[0].network is None
    # the columns win over the text; a node's GPUs come from its own column
    assert row_network(dict(bloom, nic_gbit_per_gpu="100", gpus_per_node="4"), 8) == {"gpus_per_node": 4,
                                                                                        "nic_gbit_per_gpu": 100.0}
    assert row_network(dict(bloom, gpus_per_node="4"), 8) == {"gpus_per_node": 4, "nic_gbit_per_gpu": 100.0}
    with pytest.raises(InputError, match="^nic_gbit_per_gpu: 'fast': a rate"):
        row_network(dict(bloom, nic_gbit_per_gpu="fast"), 8)


def test_estimate_and_plan_take_the_run_network_and_price_it_alike():
    r = CliRunner()
    base = ["--model", "llama3-8b", "--gpus", "64", "--global-batch", "256", "--no-evidence", "--json"]
    plan = json.loads(r.invoke(app, ["plan", *base, "--nic-gbit-per-gpu", "25", "--top", "1"]).stdout)
    b = plan["best"]
    label = f"{b['layout']}-mb{b['micro_batch']}-z{b['zero_stage']}-{b['recompute']}" + ("-sp" if b["sequence_parallel"]
                                                                                        else "")
    est = json.loads(r.invoke(app, ["estimate", *base, "--layout", label, "--nic-gbit-per-gpu", "25"]).stdout)
    assert est["step_time_s"] == pytest.approx(plan["best"]["step_time_s"], rel=1e-9)
    dflt = json.loads(r.invoke(app, ["estimate", *base, "--layout", label]).stdout)
    assert dflt["step_time_s"] < est["step_time_s"]
    out = r.invoke(app, ["plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256", "--gpus-per-node",
                         "4", "--export", "megatron-launch"])
    assert out.exit_code == 0 and "GPUS_PER_NODE=4" in out.stdout and "NNODES=${NNODES:-16}" in out.stdout
    # the catalog's own rate stated is the catalog's network, in estimate as in a runs row
    same = json.loads(r.invoke(app, ["estimate", *base, "--layout", label, "--nic-gbit-per-gpu", "400"]).stdout)
    assert same["step_time_s"] == dflt["step_time_s"]
    assert stated_network(get_gpu("h100-sxm"), 64, nic_gbit_per_gpu=400.0, gpus_per_node=8) == (None, None)
    with pytest.raises(InputError, match="^nic_gbit_per_gpu: must be"):
        stated_network(get_gpu("h100-sxm"), 64, nic_gbit_per_gpu=float("nan"))
    bad = r.invoke(app, ["estimate", *base, "--layout", label, "--nic-gbit-per-gpu", "-5"])
    assert isinstance(bad.exception, InputError) and str(bad.exception).startswith("nic_gbit_per_gpu: must be a rate")


def test_a_launch_script_read_back_keeps_the_node_its_torchrun_line_starts(tmp_path):
    r = CliRunner()
    base = ["--model", "llama3-70b", "--gpus", "64", "--global-batch", "256"]
    plan = json.loads(r.invoke(app, ["plan", *base, "--gpus-per-node", "4", "--top", "1", "--no-evidence",
                                     "--json"]).stdout)["best"]
    script = tmp_path / "launch.sh"
    script.write_text(r.invoke(app, ["plan", *base, "--gpus-per-node", "4", "--export", "megatron-launch"]).stdout)
    read = ["estimate", "--config", str(script), "--gpu", "h100-sxm", "--no-evidence", "--json"]
    back = json.loads(r.invoke(app, read).stdout)
    assert back["layout"] == plan["layout"] and back["step_time_s"] == pytest.approx(plan["step_time_s"], rel=1e-9)
    assert estimate(Job.from_config(str(script), gpu="h100-sxm")).step_time_s == pytest.approx(back["step_time_s"])
    eight = json.loads(r.invoke(app, [*read, "--gpus-per-node", "8"]).stdout)  # (the option still wins)
    assert eight["step_time_s"] < back["step_time_s"]
    # one node running some of its GPUs says nothing of the node; torchtitan's torchrun line is read alike
    assert node_gpus({"nnodes": "1", "nproc-per-node": "4"}) is None
    assert node_gpus({"nnodes": "2:4", "nproc-per-node": "4"}) is None
    tt = tmp_path / "tt.sh"
    tt.write_text("torchrun --nnodes 8 --nproc-per-node 4 -m torchtitan.train --module llama3 --config llama3_8b\n")
    assert config_gpus_per_node(tt) == 4 and parse_launch(tt.read_text())[1] == 32
    exported = r.invoke(app, ["plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256",
                              "--framework", "torchtitan", "--export", "torchtitan"]).stdout
    assert "-m torchtitan.train" in exported and parse_launch(exported)[1] == 64


def test_a_run_without_a_stated_micro_batch_or_pipeline_runs_the_largest_that_fits():
    """Issue 32: a blank micro-batch without pipelining was read as the whole local batch (terabytes a
    GPU); a run that ran fitted, as automatic micro-batching picks it: the largest divisor that fits."""
    row = next(r for r in load_rows(None) if r["id"] == "TT-A100-L2-70B-full")
    big = dict(row, micro_batch="", global_batch=str(64 * 256))
    job, note = Job.from_row(big)
    b = estimate(check_job(job))
    assert b.fits and 256 % job.layout.micro_batch == 0 and 1 < job.layout.micro_batch < 256
    assert f"micro-batch not stated: {job.layout.micro_batch} of the local batch of 256 (the largest that fits)" \
        in note
    larger = dataclasses.replace(job, layout=dataclasses.replace(job.layout, micro_batch=2 * job.layout.micro_batch))
    assert not estimate(check_job(larger)).fits
    # a local batch that fits whole is run whole, and a stated micro-batch is kept as stated
    assert Job.from_row(dict(row, micro_batch="", global_batch="64"))[0].layout.micro_batch == 1
    assert Job.from_row(dict(big, micro_batch="64"))[0].layout.micro_batch == 64


def test_train_goodput_and_simulate_price_the_run_network_as_estimate_does():
    """One job, one answer: a Job's own network is the network of its run (the API's train and goodput
    priced the default network), and the commands take the same options as estimate."""
    import supercluster as sc

    net = default_network(get_gpu("h100-sxm"), num_gpus=64, nic_gbit_per_gpu=25.0)
    job = Job.from_label("tp1-pp1-dp64", model="llama3-8b", gpu="h100-sxm", global_batch=256, seq_len=8192,
                         network=net)
    step = estimate(job).step_time_s
    run = sc.train(job, tokens=1e10, options=sc.RunOptions(trials=50))
    assert run.step.step_time_s == pytest.approx(step, rel=1e-12)
    r = CliRunner()
    base = ["--model", "llama3-8b", "--gpus", "64", "--global-batch", "256", "--seq-len", "8192",
            "--layout", "tp1-pp1-dp64", "--nic-gbit-per-gpu", "25", "--json"]
    est = json.loads(r.invoke(app, ["estimate", *base, "--no-evidence"]).stdout)["step_time_s"]
    assert est == pytest.approx(step, rel=1e-12)
    for cmd in (["train", "--tokens", "1e10"], ["goodput", "--days", "1"]):
        out = json.loads(r.invoke(app, [*cmd, *base, "--trials", "50"]).stdout)
        assert out["step_time_s"] == pytest.approx(step, rel=1e-12), cmd
    sim = json.loads(r.invoke(app, ["simulate", *base]).stdout)  # (no jitter: the ledger's step)
    assert sim["step_time_s"] == pytest.approx(step, rel=1e-9)
