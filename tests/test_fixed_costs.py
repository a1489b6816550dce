"""The step's fixed and synchronisation costs (issue 32): the slowest GPU's pace, host kernel
launches, and the SMs hidden communication takes from compute."""

import json
from dataclasses import replace

import pytest

import supercluster as sc
from supercluster.hardware.kernels import comm_sm_frac, gpu_speed_sigma
from supercluster.parallelism.framework import get_framework
from supercluster.perf.step import expected_max_normal


def _step(num_gpus: int, layout: sc.Layout, framework: str = "nemo-megatron", model: str = "llama3-8b"):
    return sc.estimate(model, gpu="h100-sxm", num_gpus=num_gpus, layout=layout, framework=framework)


def test_expected_slowest_of_n_grows_with_n():
    z = [float(expected_max_normal(n)) for n in (1, 2, 8, 128, 16384)]
    assert z[0] == 0.0 and z == sorted(z)
    assert z[2] == pytest.approx(1.42, abs=0.02) and z[4] == pytest.approx(3.96, abs=0.05)


def test_the_slowest_gpu_paces_more_of_the_step_on_more_gpus():
    """The same per-GPU work on 8 and on 1,024 GPUs: the wait grows with the count (sigma x E[max of
    N]), and one GPU waits for nobody."""
    one = _step(1, sc.Layout(tp=1, dp=1, global_batch=4, micro_batch=1, seq_len=4096))
    assert one.ledger["stragglers"] == 0.0
    small = _step(8, sc.Layout(tp=1, dp=8, global_batch=32, micro_batch=1, seq_len=4096))
    big = _step(1024, sc.Layout(tp=1, dp=1024, global_batch=4096, micro_batch=1, seq_len=4096))
    share = [b.ledger["stragglers"] / b.step_time_s for b in (small, big)]
    assert 0 < share[0] < share[1] < 0.08
    paced = sum(small.ledger[k] for k in ("ideal_compute", "gemm_inefficiency", "attention_inefficiency",
                                          "recompute", "pipeline_bubble"))
    assert small.ledger["stragglers"] == pytest.approx(paced * gpu_speed_sigma() * float(expected_max_normal(8)))


def test_a_short_layer_waits_for_its_kernel_launches_unless_graphed(tmp_path):
    """A GPT-2-small-sized model at 128 tokens a micro-batch on one GPU: each layer's kernels take less
    than a launch, so the host sets the pace; CUDA graphs replay the kernels with one launch and the
    wait goes. (Over TP the NCCL calls, each at least its measured floor, keep the GPU busier.)"""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
                               "n_positions": 1024, "vocab_size": 50257}))
    layout = sc.Layout(tp=1, dp=1, global_batch=8, micro_batch=1, seq_len=128)
    eager = _step(1, layout, model=str(cfg))
    assert eager.ledger["kernel_launch"] > 0.05 * eager.step_time_s
    fw = replace(get_framework("nemo-megatron"), cuda_graphs=True)
    graphed = sc.estimate(str(cfg), gpu="h100-sxm", num_gpus=1, layout=layout, framework=fw)
    assert graphed.ledger["kernel_launch"] == 0.0 and graphed.step_time_s < eager.step_time_s
    # a long layer keeps the GPU busier than the host: no wait
    long = _step(1, sc.Layout(tp=1, dp=1, global_batch=8, micro_batch=1, seq_len=8192), model=str(cfg))
    assert long.ledger["kernel_launch"] == 0.0


def test_a_layers_kernel_count_follows_its_attention_and_positions(tmp_path):
    """Counted in the layer code: a fused layer with RoPE launches 12 kernels forward and 24 backward;
    a model without rotary embeddings 2 fewer each way; unfused attention (Megatron-LM before
    FlashAttention) five kernels for the one fused call forward and seven for one backward. A host-bound
    GPT-2-small layer under the legacy profile waits for those extra launches."""
    from supercluster.models.catalog import model_catalog
    from supercluster.perf.compute import layer_ops

    llama, gpt3 = model_catalog()["llama3-8b"], model_catalog()["gpt3-175b"]
    assert llama.position_embedding == "rope" and gpt3.position_embedding == "learned"
    assert layer_ops(llama, get_framework("nemo-megatron")) == (12.0, 24.0)
    assert layer_ops(gpt3, get_framework("nemo-megatron")) == (10.0, 22.0)
    assert layer_ops(gpt3, get_framework("megatron-legacy")) == (14.0, 28.0)
    assert layer_ops(llama, get_framework("torchtitan")) == (34.0, 68.0)  # (eager: counted op by op)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
                               "n_positions": 1024, "vocab_size": 50257}))
    layout = sc.Layout(tp=1, dp=1, global_batch=8, micro_batch=1, seq_len=128, precision="fp16")
    fused = sc.estimate(str(cfg), gpu="a100-80gb", num_gpus=1, layout=layout, framework="megatron")
    legacy = sc.estimate(str(cfg), gpu="a100-80gb", num_gpus=1, layout=layout, framework="megatron-legacy")
    assert legacy.ledger["kernel_launch"] > fused.ledger["kernel_launch"] > 0.0

def test_a_grace_host_runs_zero3s_per_rank_python_slower():
    """DeepSpeed's 2021 ZeRO-3 builds a view and launches a copy per data-parallel rank for each
    collective, on the host: from a Grace host (kernels.toml [host] grace_op_factor) that loop, and the
    exposed gather time it sets, takes longer; the GPU's own work is the same."""
    from supercluster.hardware.specs import get_gpu

    grace = get_gpu("gb200")
    lay = sc.Layout(tp=1, dp=256, micro_batch=1, global_batch=256, seq_len=2048, zero_stage=3, recompute="full")
    on = {g.host_cpu: sc.estimate("gpt3-175b", gpu=g, num_gpus=256, layout=lay, framework="deepspeed-legacy")
          for g in (grace, replace(grace, host_cpu="intel"))}
    assert on["grace"].ledger["exposed_dp_comm"] > 2.0 * on["intel"].ledger["exposed_dp_comm"] > 0.0
    assert on["grace"].ledger["ideal_compute"] == on["intel"].ledger["ideal_compute"]


def test_hidden_tp_traffic_costs_the_sms_it_holds():
    """Under TP overlap (NeMo) the hidden TP traffic slows the compute beside it; without overlap
    (plain Megatron-LM) nothing is hidden and nothing is charged."""
    layout = sc.Layout(tp=8, dp=1, global_batch=8, micro_batch=1, seq_len=8192)
    nemo = _step(8, layout, "nemo-megatron")
    plain = _step(8, layout, "megatron")
    assert 0 < nemo.ledger["comm_contention"] < comm_sm_frac() * nemo.step_time_s
    assert plain.ledger["comm_contention"] == 0.0


def test_run_options_reach_the_step_from_a_name_and_from_a_runs_row():
    """What a published run did (CUDA graphs, TP / DP overlap) is said on the framework's name or in a
    runs-CSV column (yes / no; blank: the framework's default) and priced as that behaviour."""
    from supercluster.formats.runs import row_setup
    from supercluster.validation.validate import load_rows

    fw = get_framework("megatron+tp-overlap+cuda-graphs+no-dp-overlap")
    assert fw.tp_comm_overlap and fw.sequence_parallel and fw.cuda_graphs and not fw.dp_overlap
    layout = sc.Layout(tp=8, dp=8, global_batch=64, micro_batch=1, seq_len=8192)
    plain = _step(64, layout, "megatron", "llama3-70b")
    overlapped = _step(64, layout, "megatron+tp-overlap", "llama3-70b")
    assert overlapped.ledger["exposed_tp_comm"] < plain.ledger["exposed_tp_comm"]
    row = dict(next(r for r in load_rows() if r["id"] == "DGXC-L31-70B-bf16-64"))
    assert row_setup(row)[2].tp_comm_overlap  # NeMo's default
    _, _, fw_row, _ = row_setup(dict(row, tp_comm_overlap="no", cuda_graphs="yes"))
    assert not fw_row.tp_comm_overlap and fw_row.cuda_graphs
    with pytest.raises(sc.InputError, match="tp_comm_overlap"):
        row_setup(dict(row, tp_comm_overlap="maybe"))


def test_the_fp8_recipe_a_run_names_prices_its_own_quantisation():
    """Transformer Engine's recipes, measured in its GEMM guide (kernels.toml [quantize]): on Hopper
    delayed < current (an extra amax pass) < block scaling; on Blackwell MXFP8's slower kernel costs
    more than current scaling's extra read once a micro-batch casts each tensor once (the guide's
    per-call benchmark, casting twice as much, orders them the other way; NVIDIA's 405B tables
    measure FP8-CS ahead of MXFP8 on GB200 and GB300); MXFP8 runs on Blackwell only; a runs row
    names its recipe in its precision text or an fp8_recipe column; Megatron-LM's --fp8-recipe reads
    and writes the same recipe."""
    from supercluster.errors import InputError
    from supercluster.formats import launchers
    from supercluster.formats.megatron_args import parse_args
    from supercluster.formats.megatron_flags import framework_from_args
    from supercluster.formats.runs import fp8_recipe
    from supercluster.job import estimate
    from supercluster.parallelism.layout import Layout

    lay = Layout(tp=4, pp=1, dp=2, micro_batch=1, global_batch=16, seq_len=8192, precision="fp8")
    step = {r: estimate("llama3-70b", gpu="h100-sxm", num_gpus=8, layout=lay,
                        framework=f"nemo-megatron+fp8-{r}").step_time_s for r in ("delayed", "current", "blockwise")}
    assert step["delayed"] < step["current"] < step["blockwise"]
    assert estimate("llama3-70b", gpu="h100-sxm", num_gpus=8, layout=lay,
                    framework="nemo-megatron").step_time_s == step["delayed"]  # (the default)
    with pytest.raises(InputError, match="MXFP8 runs on block-scaled tensor cores"):
        estimate("llama3-70b", gpu="h100-sxm", num_gpus=8, layout=lay, framework="nemo-megatron+fp8-mxfp8")
    # (a bf16 job under an fp8 recipe is priced as bf16, recipe or not)
    bf16 = Layout(tp=4, pp=1, dp=2, micro_batch=1, global_batch=16, seq_len=8192)
    assert estimate("llama3-70b", gpu="h100-sxm", num_gpus=8, layout=bf16,
                    framework="nemo-megatron+fp8-mxfp8").step_time_s > step["delayed"]
    b200 = {r: estimate("llama3-70b", gpu="b200", num_gpus=8, layout=lay, framework=f"nemo-megatron+fp8-{r}")
            .step_time_s for r in ("delayed", "current", "mxfp8")}
    assert b200["delayed"] < b200["current"] < b200["mxfp8"]
    # runs rows: the precision text's recipe, or the column
    assert fp8_recipe({"precision": "fp8 (Transformer Engine current scaling, FP8-CS)"}) == "current"
    assert fp8_recipe({"precision": "fp8 (MXFP8 block scaling)"}) == "mxfp8"
    assert fp8_recipe({"precision": "fp8"}) is None and fp8_recipe({"precision": "bf16"}) is None
    assert fp8_recipe({"precision": "fp8", "fp8_recipe": "tensorwise"}) == "current"
    with pytest.raises(InputError, match="fp8_recipe"):
        fp8_recipe({"precision": "fp8", "fp8_recipe": "columnwise"})
    # torchao's rowwise recipe, as a run names it, is priced as blockwise (runs.ROWWISE)
    assert fp8_recipe({"precision": "fp8", "fp8_recipe": "rowwise"}) == "blockwise"
    assert fp8_recipe({"precision": "float8 rowwise + torch.compile"}) == "blockwise"
    # Megatron-LM: --fp8-recipe tensorwise is current scaling, written back the same way
    fw = framework_from_args(parse_args("--fp8-format hybrid --fp8-recipe tensorwise"), name="m")
    assert fw.fp8_recipe == "current"
    assert "--fp8-recipe tensorwise" in launchers.to_megatron_args(lay, framework=fw)
    with pytest.raises(InputError, match="fp8-recipe"):
        framework_from_args(parse_args("--fp8-recipe rowwise"), name="m")


def test_the_low_precision_casts_are_shown_as_the_part_of_the_gemm_line_they_are():
    """``gemm_cast_s`` is the share of ``gemm_inefficiency`` the fp8 casts take: the line less the
    same job's with casts of next to no bytes; twice the bytes an element, twice the seconds; none in
    bf16; the estimate prints it."""
    from dataclasses import replace as dc_replace

    from supercluster.hardware.kernels import quantize_bytes_per_element
    from supercluster.job import estimate
    from supercluster.parallelism.layout import Layout

    lay = Layout(tp=4, pp=2, dp=1, micro_batch=1, global_batch=8, seq_len=8192, precision="fp8")
    fw = get_framework("nemo-megatron+fp8-current")
    q = quantize_bytes_per_element("hopper", "fp8", "current")

    def step(bytes_per_element: float, layout: Layout = lay) -> sc.StepBreakdown:
        return estimate("llama3-70b", gpu="h100-sxm", num_gpus=8, layout=layout,
                        framework=dc_replace(fw, fp8_quantize_bytes_per_element=bytes_per_element))

    full, none, double = step(q), step(1e-9), step(2.0 * q)
    assert full.gemm_cast_s > 0.02 * full.step_time_s
    assert full.gemm_cast_s == pytest.approx(full.ledger["gemm_inefficiency"] - none.ledger["gemm_inefficiency"],
                                             rel=1e-6)
    assert double.gemm_cast_s == pytest.approx(2.0 * full.gemm_cast_s, rel=1e-6)
    assert step(q, dc_replace(lay, precision="bf16")).gemm_cast_s == 0.0
    from supercluster.reports.tables import cast_line
    assert f"{full.gemm_cast_s:.3f} s of gemm_inefficiency" in cast_line(full)
