"""TP overlap by kind: Transformer Engine's userbuffers hide every pass's TP collectives with SM kernels;
PyTorch's async TP (torchtitan) hides the forward's with the copy engines and leaves the backward's, and
a recomputed forward's, exposed (frameworks.toml's tp_overlap)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import supercluster as sc
from supercluster.errors import InputError
from supercluster.formats.runs import row_setup
from supercluster.parallelism.framework import framework_catalog, get_framework
from supercluster.perf.comm import tp_overlap_exposed_s
from supercluster.validation.validate import load_rows


def _step(framework: sc.Framework | str, recompute: str = "none") -> sc.StepBreakdown:
    layout = sc.Layout(tp=8, dp=2, global_batch=32, micro_batch=1, seq_len=8192, recompute=recompute)
    return sc.estimate("llama3-70b", gpu="h100-sxm", num_gpus=16, layout=layout, framework=framework)


def test_each_kind_leaves_its_own_passes_exposed_by_hand():
    tp = np.array([8.0])
    tp_f, tp_b, gemm = np.array([4.0]), np.array([6.0]), np.array([3.0])
    off = get_framework("torchtitan")
    async_tp = get_framework("torchtitan+compile+tp-overlap")
    userbuffers = dataclasses.replace(async_tp, tp_overlap="userbuffers")
    assert [x.item() for x in tp_overlap_exposed_s(off, tp, tp_f, tp_b, gemm)] == [4.0, 6.0, 4.0]
    # the forward hides under its GEMMs but one of tp chunks; the backward and a recompute do not
    assert [x.item() for x in tp_overlap_exposed_s(async_tp, tp, tp_f, tp_b, gemm)] == [1.0, 6.0, 4.0]
    # the backward hides under its two GEMMs (data and weight gradients) but one chunk: 6 / 8
    assert [x.item() for x in tp_overlap_exposed_s(userbuffers, tp, tp_f, tp_b, gemm)] == [1.0, 0.75, 1.0]


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_async_tp_gains_less_than_userbuffers_and_holds_no_sms(recompute):
    off = _step("torchtitan+compile", recompute)
    async_tp = _step("torchtitan+compile+tp-overlap", recompute)
    fw = get_framework("torchtitan+compile+tp-overlap")
    assert fw.tp_overlap == "async-tp"
    userbuffers = _step(dataclasses.replace(fw, tp_overlap="userbuffers"), recompute)
    tp = {k: s.ledger["exposed_tp_comm"] for k, s in (("off", off), ("async", async_tp), ("ub", userbuffers))}
    assert tp["off"] > tp["async"] > tp["ub"] > 0.0
    assert off.step_time_s > async_tp.step_time_s > userbuffers.step_time_s
    # the copy engines move async TP's chunks: the compute beside them runs at full speed
    assert async_tp.ledger["comm_contention"] == off.ledger["comm_contention"] == 0.0
    assert userbuffers.ledger["comm_contention"] > 0.0
    # the forward's collectives are what async TP hides: 4 of a layer's 10 (no recompute) or of 14
    # (full recompute) collectives of equal size; userbuffers hides nearly all
    hidden_async, hidden_ub = tp["off"] - tp["async"], tp["off"] - tp["ub"]
    share = 4.0 / (10.0 if recompute == "none" else 14.0)
    assert hidden_async < share * tp["off"] < hidden_ub


def test_a_runs_row_names_async_tp_in_its_precision_and_is_priced_with_it():
    row = dict(next(r for r in load_rows("heldout") if r["id"] == "TT-H100-L31-405B-4D-CP1-32K"))
    assert "AsyncTP" in row["precision"] and "compile" in row["precision"]
    fw = row_setup(row)[2]
    assert fw.tp_comm_overlap and fw.tp_overlap == "async-tp" and fw.elementwise == "fused"
    # without the words, neither
    bare = row_setup(dict(row, precision="fp8 linears (Float8)"))[2]
    assert not bare.tp_comm_overlap and bare.elementwise == "eager"
    # an option the named profile cannot take is left out: torchtitan's CP gathers K/V, it has no Ulysses
    _, _, ulysses, note = row_setup(dict(row, precision="fp8 linears (Float8) + compile + AsyncTP + Ulysses"))
    assert ulysses.cp_rotate == "allgather" and ulysses.tp_comm_overlap
    assert note is not None and "precision names cp-a2a, which torchtitan-2024+compile+tp-overlap" in note


def test_the_catalog_refuses_an_unknown_tp_overlap(monkeypatch):
    from supercluster.parallelism import framework as f

    real = f.load_package_toml

    def patched(name):
        t = real(name)
        return {**t, "torchtitan": {**t["torchtitan"], "tp_overlap": "magic"}} if name == "frameworks.toml" else t

    framework_catalog.cache_clear()
    monkeypatch.setattr(f, "load_package_toml", patched)
    try:
        with pytest.raises(InputError, match="tp_overlap.*userbuffers, async-tp"):
            framework_catalog()
    finally:
        monkeypatch.undo()
        framework_catalog.cache_clear()


def test_the_framework_catalog_shows_which_profiles_overlap_tp_asynchronously():
    from rich.console import Console

    from supercluster.reports.tables import frameworks_table

    console = Console(width=400, record=True)
    console.print(frameworks_table(framework_catalog()))
    rows = {line.split("│")[1].strip(): line for line in console.export_text().splitlines() if line.count("│") > 3}
    assert "n (async)" in rows["torchtitan"] and "(async)" not in rows["nemo-megatron"]
    # NeMo AutoModel's tensor parallelism is PyTorch's too
    assert "n (async)" in rows["automodel"] and "(async)" not in rows["megatron"]


def test_async_tp_without_torch_compile_is_refused_by_name():
    with pytest.raises(InputError, match="only under torch.compile.*torchtitan\\+compile\\+tp-overlap"):
        get_framework("torchtitan+tp-overlap")
    # Transformer Engine's overlap needs no compiler
    assert get_framework("megatron+tp-overlap").tp_overlap == "userbuffers"


@pytest.mark.parametrize("flags, profile", [
    ("", "torchtitan+compile+tp-overlap"),  # llama3_405b's config function compiles and runs async TP
    ("--compile.no-enable-async-tensor-parallel", "torchtitan+compile"),
    ("--compile.enable_async_tensor_parallel=false", "torchtitan+compile"),
    ("--compile.no-enable", "torchtitan"),  # (async TP needs the compiler)
])
def test_a_torchtitan_launch_line_reads_as_its_config_functions_defaults_unless_it_says_otherwise(flags, profile):
    from supercluster.formats import torchtitan as tt

    line = ("torchrun --nnodes 32 --nproc-per-node 8 -m torchtitan.train --module llama3 --config llama3_405b "
            f"--parallelism.tensor_parallel_degree 8 --parallelism.pipeline_parallel_degree 8 {flags}")
    preset, layout, read = tt.from_launch(line)
    assert (preset, layout.tp, layout.pp, read) == ("llama3-405b", 8, 8, profile)
    assert get_framework(read).key == profile


def test_a_rowwise_float8_row_is_priced_as_blockwise_and_says_so():
    """torchao's rowwise recipe (torchtitan's Float8 converter) is read from a row's precision text or its
    fp8_recipe column and priced as the blockwise recipe: slower than tensorwise, faster than nothing."""
    from supercluster.validation.validate import predict_row

    row = dict(next(r for r in load_rows("heldout") if r["id"] == "TT-H100-L31-405B-4D-CP1-32K"))
    tensorwise = predict_row(dict(row, precision="fp8 linears (Float8, tensorwise) + compile + AsyncTP"))
    rowwise = predict_row(dict(row, precision="fp8 linears (Float8, rowwise) + compile + AsyncTP"))
    column = predict_row(dict(row, fp8_recipe="rowwise"))
    assert rowwise.predicted_step_time_s == column.predicted_step_time_s > tensorwise.predicted_step_time_s
    assert "rowwise (torchao) priced as the blockwise recipe" in rowwise.reason
    assert "+fp8-blockwise" in row_setup(dict(row, fp8_recipe="rowwise"))[2].key
