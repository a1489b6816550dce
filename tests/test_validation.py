"""The validation command against the shipped public runs: a regression bound that fails past it.

Known misses are listed by id with the reason; every other scored row must stay within 25 %.
The issue's target (MAPE <= 10 % on all rows) is reported by `supercluster validate`.
"""

from __future__ import annotations

import csv
import json
import pathlib

import pytest
from typer.testing import CliRunner

from supercluster.cli import app
from supercluster.errors import InputError
from supercluster.validation.validate import validate

# torchtitan context parallel at 256K tokens: SDPA ring attention measured far below FA2's published
# efficiency. (DeepSpeed ZeRO-3 530B on 2,240 GPUs, Narayanan 2021 Table 2, was the other known miss,
# -32 %, until DeepSpeed 0.3's Python loop of per-rank views before each gather and reduce-scatter was
# priced at the published cost of one tensor op from Python: -22 %.)
# DeepSpeed ZeRO-3 530B on 2,240 GPUs went from -28.7 % to -33.9 % when ring collectives took NCCL's fastest
# protocol (LL's 0.6 / 4.7 us steps instead of Simple's 3.4 / 16 us: its per-layer calls over 2,240 ranks
# cost a third as much); what else DeepSpeed 0.3 spent at that scale is not known.
KNOWN_MISSES = {"TT-H100-L31-8B-CP8-256K", "NAR-T2-ZeRO3-530B-2240"}


# all rows, known misses included (the target is 0.10): 8.4 % until the NeMo profile kept its
# gradients in bf16 as NVIDIA's benchmark configurations do (grad_sync_dtype / grad_reduce_in_fp32 =
# False; frameworks.toml), 9.4 % then; 7.9 % once ZeRO-3's list-form collectives paid their per-rank
# copy launches (the 175B rows from 768 GPUs up and the 530B rows moved 4-37 points); 6.8 % once
# Hopper's FP8 GEMM fraction came from the SXM parts' own MAMF (gpus.toml header); 6.3 % once DeepSpeed
# 0.3's per-rank view loop was priced; 9.8 % once the flat 10.4 % straggler charge (a fleet's share of
# GPU-hours) gave way to the pace of the slowest GPU of each job (issue 32: every row 4-8 points faster);
# 8.3 % once hidden communication paid for the SMs it holds; 8.1 % with NCCL's protocols
MAPE_BOUND = 0.085


# rows outside KNOWN_MISSES (6.1 % until the ledger stopped charging the head on top of a full middle
# stage under Megatron-Core's embedding/loss-aware pipeline split: the GB200 405B rows went -7.5 / -8.9 %
# -> -11.0 / -12.3 %, 6.3 % since; 5.75 % once the ZeRO-3 misses left the rest; 6.8 % with bf16
# gradients under NeMo; 7.1 % with three ZeRO-3 rows back in the rest at -17 ... -22 %; 5.9 % with
# Hopper FP8 derived from MAMF, the ZeRO-3 530B row on 2,240 GPUs still outside; 5.9 % with it back in,
# at -22 %, once DeepSpeed 0.3's per-rank view loop was priced; 9.3 % without the flat straggler charge,
# the ZeRO-3 530B row on 2,240 GPUs the worst at -28.7 %; 7.8 % with hidden traffic's SMs priced; 7.2 % with
# NCCL's protocols, that row out)
MAPE_BOUND_REST = 0.075


def test_every_scored_row_is_supported_and_within_bounds():
    res = validate()
    rows = res["rows"]
    assert len(rows) >= 60 and res["supported_fraction"] == 1.0
    assert res["mape"] <= MAPE_BOUND
    rest = [r for r in rows if r.id not in KNOWN_MISSES]
    assert sum(abs(r.error) for r in rest) / len(rest) <= MAPE_BOUND_REST
    worst = max(rest, key=lambda r: abs(r.error))
    assert abs(worst.error) <= 0.29, (worst.id, worst.error)


def test_validate_json_contract_and_custom_csv(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["validate", "--json"])
    assert r.exit_code == 0
    d = json.loads(r.output)
    assert {"rows", "mape", "worst_abs_error", "supported_fraction"} <= set(d)
    assert {"id", "predicted_step_time_s", "measured_step_time_s", "error", "supported", "reason"} <= set(d["rows"][0])
    # A row with an unknown GPU and an unknown framework: unsupported with a reason, never a crash.
    src = validate.__globals__["load_rows"]()
    row = dict(next(x for x in src if x["id"] == "DGXC-L31-70B-bf16-64"))
    other = dict(row, id="X-UNKNOWN-GPU", gpu="tpu-v9")
    fw = dict(row, id="X-UNKNOWN-FW", framework="homegrown")
    p = tmp_path / "runs.csv"
    with p.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        for x in (row, other, fw):
            w.writerow(x)
    r = runner.invoke(app, ["validate", "--runs", str(p), "--json"])
    assert r.exit_code == 0, r.output
    by_id = {x["id"]: x for x in json.loads(r.output)["rows"]}
    assert by_id["X-UNKNOWN-GPU"]["supported"] is False and "tpu-v9" in by_id["X-UNKNOWN-GPU"]["reason"]
    assert by_id["X-UNKNOWN-FW"]["supported"] is True and "assumed" in by_id["X-UNKNOWN-FW"]["reason"]
    # --by: the groups partition the rows, an unsupported row counts as a 100 % miss in its group
    g = {x["group"]: x for x in json.loads(runner.invoke(app, ["validate", "--runs", str(p), "--by", "gpu",
                                                               "--json"]).output)["groups"]}
    assert g["tpu-v9"] == {"group": "tpu-v9", "rows": 1, "unsupported": 1, "mape": 1.0, "min_error": None,
                           "max_error": None}
    assert g[row["gpu"]]["rows"] == 2 and g[row["gpu"]]["min_error"] <= g[row["gpu"]]["max_error"]


def test_validation_groups_partition_the_rows_and_their_errors():
    from supercluster.validation.validate import by_group

    res = validate()
    for key in ("gpu", "framework", "kind"):
        groups = by_group(res["rows"], key)
        assert sum(x["rows"] for x in groups) == len(res["rows"])
        # the row-weighted group MAPEs give back the overall MAPE
        assert sum(x["mape"] * x["rows"] for x in groups) / len(res["rows"]) == pytest.approx(res["mape"])
    kinds = {x["group"]: x for x in by_group(res["rows"], "kind")}
    assert kinds["moe"]["rows"] == sum(r.id.startswith("DGXC-GROK1") for r in res["rows"])  # the public MoE rows


# Published layouts that ran must be predicted to fit. DeepSpeed 2021 ZeRO-3 530B on 640 GPUs does since
# its one-weight-at-a-time gathers are priced (76 GiB), Nemotron-4 340B in BF16 on 128 H100 (TP8 PP8 DP2)
# since NVIDIA's bf16 recipes are priced with their precision-aware optimizer state (10 bytes a parameter:
# 77 of 80 GiB; its own DGX Cloud YAML keeps less still, distributed_fused_adam dtype bf16).
KNOWN_MEMORY_MISSES: set[str] = set()


# Held-out MoE recipes predicted not to fit (a ceiling: a change that makes more MoE runs "not fit"
# shows up). GPT-OSS 120B on 64 H100 in NeMo 25.11 (PP 4, micro-batch 4): its recipe recomputes or
# offloads (Megatron-Core recompute_modules, paged stash) and the published table does not say which
# (the later GPT-OSS configs read name layernorm + moe_act; with full recompute it fits at 45 GiB).
# DeepSeek-V3's own run (2,048 H800, PP16 EP64, micro-batch not published) is priced at about 136 GiB
# with DualPipe's two parameter copies and pp + 1 micro-batches in flight: its report lists savings the
# model does not price (SwiGLU inputs cached in FP8 with the output recomputed, the attention output
# cached once in E5M6, BF16 Adam moments), and even with those the census of the expert outputs kept
# for the gate gradient would not fit 80 GiB: how HAI-LLM keeps them is not published. (Megatron-Core
# keeps none: the gate weights the experts' activation, frameworks.toml moe_probs_in_experts; with it
# DeepSeek-V3 on 256 GB300 in NeMo 26.02 fits, 278 of 279 GiB.)
# (Qwen3 30B-A3B on 16 H100 in NeMo 25.09 and 25.11 and GPT-OSS 120B on 64 B200 fit since the loss is
# priced as the benchmark scripts' Transformer Engine cross-entropy: 2 bytes a logit, not 8.)
KNOWN_MOE_MEMORY_MISSES = {"DSV3-REPORT-H800-2048", "MB2511-GPTOSS-120B-H100-SXM-bf16-64"}


def test_published_layouts_are_predicted_to_fit():
    from supercluster.hardware.specs import get_gpu
    from supercluster.job import default_network
    from supercluster.perf.step import step_breakdown
    from supercluster.validation.validate import load_rows, row_setup

    over, moe_over, moe_rows = [], [], 0
    for runs in ("public", "heldout"):
        for row in load_rows(runs):
            if row["scored"] != "yes":
                continue
            model, layout, fw, _ = row_setup(row)
            gpu = get_gpu(row["gpu"])
            b = step_breakdown(model, layout=layout, gpu=gpu, net=default_network(gpu, num_gpus=layout.num_gpus), fw=fw)
            held_moe = runs == "heldout" and bool(row["moe_experts"])
            moe_rows += held_moe
            if not b.fits:
                (moe_over if held_moe else over).append(row["id"])
    assert set(over) == KNOWN_MEMORY_MISSES
    assert set(moe_over) <= KNOWN_MOE_MEMORY_MISSES and moe_rows >= 60


def test_heldout_runs_are_all_supported_and_within_a_regression_bound():
    """Other published runs (Megatron-Bridge tables, torchtitan A100): a check, not a target
    (regression bounds on today's figures; every bound moved 1-7 points when the flat straggler charge
    went, issue 32). Dense: worst NeMo 25.09's Llama 3.1 405B in MXFP8 on 128
    GB200 (-30 %: measured slower than the same layout on 128 B200, 578 against 622 tokens/s a GPU)
    and the torchtitan CP 4 row at 128K (-27 %);
    GB300 runs +4..+13 % (GB300 GEMM fractions are B300's: no GB300 measurement). MoE: the large
    ones (DeepSeek-V3, Qwen3 235B) on NVL72 racks within 12 %; on 8-GPU nodes with the all-to-all
    dispatcher (a host sync per layer, no CUDA graphs) and for the small ones (Qwen3 30B-A3B,
    GPT-OSS 120B: 3-5 B active) the runs are up to 70 % slower than priced:
    host-side and per-layer fixed overheads are not modelled. MosaicML's MPT tables: bounded on their own.
    Nemotron-H 56B (Mamba-2 hybrid, DGX Cloud recipe): the same 128-H100 layout took 15.5 s a step in NeMo
    25.04.01 and 11.9 s in a later release; priced 12.3 s (-23 .. +3 %), and 128 GB200 -14 %."""
    from supercluster.validation.validate import load_rows

    res = validate("heldout")
    rows = res["rows"]
    assert len(rows) >= 140 and res["supported_fraction"] == 1.0
    # the Megatron-Core MoE team's ModelZoo tables, bounded on their own (below)
    mzoo = [r for r in rows if r.id.startswith("MZOO-")]
    # NeMo AutoModel's table, bounded on its own (below)
    am = [r for r in rows if r.id.startswith(("AM2510-", "AM2602-"))]
    moe = [r for r in rows if any(k in r.id for k in ("QWEN3", "DSV3", "GPTOSS", "LLAMA4")) and r not in mzoo + am]
    mpt = [r for r in rows if r.id.startswith("MPT-")]
    hybrid = [r for r in rows if r.kind == "mamba-hybrid" and r not in am]
    dense = [r for r in rows if r not in moe and r not in mpt and r not in hybrid and r not in mzoo and r not in am]
    mape = {name: sum(abs(r.error) for r in rs) / len(rs) for name, rs in (("dense", dense), ("moe", moe),
                                                                            ("mpt", mpt), ("hybrid", hybrid))}
    assert mape["dense"] <= 0.115 and max(abs(r.error) for r in dense) <= 0.36
    assert len(hybrid) == 9 and mape["hybrid"] <= 0.225 and max(abs(r.error) for r in hybrid) <= 0.27
    assert mape["moe"] <= 0.285
    # Megatron-MoE-ModelZoo, H100 (code branches of mid-2025; DeepEP's dispatcher on five of six, priced
    # with each token crossing once per node): Qwen3 235B in five layouts -46 .. +83 % (EP 32 across four
    # nodes +5 %, but -33 % with the EP overlap, whose measured gain is a quarter of the priced one;
    # Megatron FSDP +83 %; TP 4 / EP 8 -46 %) and the first published Gated DeltaNet step, Qwen3-Next
    # 80B-A3B on 128 H100 (EP 32 across four nodes, "not well tuned"): -36 %
    assert len(mzoo) == 6 and max(abs(r.error) for r in mzoo) <= 0.90
    by_id = {r.id: r.error for r in mzoo}
    assert abs(by_id["MZOO-QWEN3-235B-H100-EP32-256"]) <= 0.10
    gdn = [r for r in rows if r.kind == "gdn-hybrid"]
    assert [r.id for r in gdn] == ["MZOO-QWEN3NEXT-80B-H100-EP32-128"] and abs(gdn[0].error) <= 0.40
    # NeMo AutoModel (PyTorch FSDP2 + EP with DeepEP and its round-robin "fake balanced gate", H100 BF16):
    # DeepSeek-V3 on 256 GPUs -3 %, Qwen3 30B-A3B on 8 +1 %, Nemotron 3 Super on 64 +12 % (its latent
    # experts' small GEMMs, priced with their weights streamed apart: +4 % under the roofline), Kimi K2
    # -4 % (two gradient-accumulation schedules a step), DeepSeek-V3 on 1,024 -16 % (four); GPT-OSS 20B /
    # 120B -34 / -28 % (FlexAttention and the clamped SwiGLU priced as fused kernels)
    assert len(am) == 7 and max(abs(r.error) for r in am) <= 0.40
    by_id = {r.id: r.error for r in am}
    assert max(abs(by_id[k]) for k in ("AM2510-DSV3-H100-bf16-256", "AM2510-QWEN3-30B-H100-bf16-8",
                                       "AM2510-KIMIK2-H100-bf16-256")) <= 0.12
    assert abs(by_id["AM2602-NEMOTRON3-SUPER-H100-bf16-64"]) <= 0.15
    # MosaicML's MPT tables (2023, Composer + FSDP, 125M-70B on 8-128 A100 / H100, BF16 and the H100 FP8
    # table): today 8.2 %, 57 rows, -27 .. +15 %. Their attention is FlashAttention in Triton (the
    # benchmark script's --attn_impl default), priced from the FA2 paper's FA2-vs-Triton ratios; priced as
    # FA2 instead, the 16K-64K rows were 13-43 % too fast, growing with the share of attention.
    assert len(mpt) == 57 and mape["mpt"] <= 0.10 and max(abs(r.error) for r in mpt) <= 0.32
    seq = {r["id"]: int(r["seq_len"]) for r in load_rows("heldout")}
    a100 = [r for r in mpt if r.gpu.startswith("a100") and seq[r.id] <= 8192]
    assert len(a100) == 24 and sum(abs(r.error) for r in a100) / len(a100) <= 0.08
    long = [r for r in mpt if seq[r.id] > 8192]
    assert len(long) == 11 and max(abs(r.error) for r in long) <= 0.16
    # Megatron-Bridge's tables (the DGX Cloud README's 128-GB200 DeepSeek-V3 example is an early run at a
    # quarter of their per-GPU rate: -68 %, reported, not bounded here)
    large_nvl72 = [r for r in moe if r.id.startswith("MB") and ("GB200" in r.id or "GB300" in r.id)
                   and ("DSV3" in r.id or "235B" in r.id)]
    assert len(large_nvl72) >= 13 and max(abs(r.error) for r in large_nvl72) <= 0.25
    # (NeMo 25.09's token-drop runs on 64-256 GB200 read -19 .. -15 %; 25.11 and 26.02's within 12 %)
    assert max(abs(r.error) for r in large_nvl72 if not r.id.startswith("MB2509")) <= 0.16
    r = CliRunner().invoke(app, ["validate", "--runs", "heldout", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["mape"] == res["mape"]


def test_deepseek_v3_report_run_is_priced_from_its_published_layout():
    """DeepSeek-V3's report: 180K H800 GPU-hours per trillion tokens on its 2,048-GPU cluster, i.e.
    1,543 tokens/s per GPU averaged over the whole pre-training (batch ramp and interruptions
    included, so the steady 15,360 x 4K step takes at most 19.9 s). Priced from the report's layout
    with the hai-llm profile (DualPipe: all-to-all and pipeline sends hidden, its bubble by the
    report's own formula, two copies of the parameters; the multi-token-prediction module not
    priced): the steady step must not be slower than the average (it read +0.5 % while DualPipe's
    bubble was priced as 1F1B's, an upper bound; -6.3 % with the formula, -10.1 % before hidden
    all-to-alls paid for their SMs; +14.8 % while its fine-grained fp8 was priced as Transformer
    Engine's Hopper block recipe, whose whole excess over the tensorwise kernel counted as casts,
    where HAI-LLM quantises in its own passes, the report's sec. 3.5.2: 5 bytes an element; -0.5 %
    before the gradients' accumulation in FP32, which the report keeps "for batch size accumulation",
    was priced: +2.8 %; +3.1 % since the SwiGLU output the report recomputes in the backward, sec.
    3.3.4, is priced). "180K" is rounded: the average may be up to 185K GPU-hours, +2.8 % on the step,
    so the model's steady step is now 0.3 % slower than any average the report's figure admits (and
    its multi-token-prediction module, about 4 % of the FLOPs, is not priced): the model's own error.
    The bound holds the row within half a point of that edge, so a change that moves it is seen."""
    from supercluster.validation.validate import load_rows, predict_row

    row = {r["id"]: r for r in load_rows("heldout")}["DSV3-REPORT-H800-2048"]
    res = predict_row(row)
    assert res.supported and "read as hai-llm" in res.reason
    assert float(row["step_time_s"]) == pytest.approx(15360 * 4096 / (1e12 / (180e3 * 3600) * 2048), rel=1e-4)
    assert -0.10 <= res.error <= 0.035, res.error


def test_bloom_run_is_priced_with_its_documented_pipeline_split():
    """BigScience's BLOOM 176B (tr11 README and slurm script): TP 4 PP 12 DP 8 on 384 A100, MBS 2,
    GBS 2048, full recompute, 105 s per iteration. Its --pp-partition-method type:transformer|embedding
    puts [embed | 5 blocks] on the first stage and [5 blocks | embed] on the last, 6 elsewhere: the
    framework column names that option, which selects the embedding-aware split. Today -10.8 %
    (the Jean Zay Omni-Path network, a quarter of the DGX rails it is priced on, and the script's
    CUDA_LAUNCH_BLOCKING=1 are not priced); without the split the same row prices 108.5 s."""
    import dataclasses

    from supercluster.hardware.specs import get_gpu
    from supercluster.job import default_network
    from supercluster.perf.columns import layout_columns
    from supercluster.perf.step import step_breakdown, step_columns
    from supercluster.validation.validate import load_rows, predict_row, row_setup

    row = {r["id"]: r for r in load_rows("heldout")}["BLOOM-176B-384"]
    model, layout, fw, note = row_setup(row)
    assert fw.key == "deepspeed-legacy+embedding-split" and fw.pp_split_counts_head
    assert (layout.tp, layout.pp, layout.dp, layout.micro_batch, layout.recompute) == (4, 12, 8, 2, "full")
    gpu = get_gpu(row["gpu"])
    net = default_network(gpu, num_gpus=384)
    cols = step_columns(model, gpu, net, fw, layout_columns(layout, fw))
    assert float(cols["split_counts_head"][0]) == 1.0  # 70 layers + embedding + head = 12 stages x 6
    res = predict_row(row)
    assert res.supported and -0.18 <= res.error <= -0.05, res.error
    plain = step_breakdown(model, layout=layout, gpu=gpu, net=net,
                           fw=dataclasses.replace(fw, pp_split_counts_head=False))
    assert plain.step_time_s > res.predicted_step_time_s  # ceil(70 / 12) = 6 blocks and the head on the last stage


def test_nemotron4_340b_report_stages_are_priced_from_the_reports_layout():
    """Nemotron-4 340B's report, Table 2: TP 8, PP 12 with interleaving, DP 16 / 32 / 64 on 1,536 /
    3,072 / 6,144 H100, batch 768 / 1,536 / 2,304 x 4K, 10.3 / 10.3 / 8.0 s per iteration at 42.4 /
    42.3 / 41.0 % MFU. The published MFU is our model FLOPs (NeMo convention, full s^2 attention)
    over the 989 TFLOP/s bf16 peak within 1 %, which checks the rows were read right. Interleaving
    degree unpublished: 2 (the smallest). Today -5.2 / -4.9 / -3.2 %."""
    from supercluster.validation.validate import load_rows, predict_row, row_setup

    rows = {r["id"]: r for r in load_rows("heldout")}
    preds = {}
    for gpus, mfu in ((1536, 0.424), (3072, 0.423), (6144, 0.410)):
        row = rows[f"N4-340B-REPORT-{gpus}"]
        model, layout, fw, _ = row_setup(row)
        assert (layout.tp, layout.pp, layout.vpp, layout.dp) == (8, 12, 2, gpus // 96) and fw.key == "nemo-megatron"
        tokens_per_s_per_gpu = layout.global_batch * 4096 / float(row["step_time_s"]) / gpus
        assert tokens_per_s_per_gpu * model.model_flops_per_token(4096) / 989e12 == pytest.approx(mfu, rel=0.01)
        res = predict_row(row)
        assert res.supported and -0.13 <= res.error <= 0.0, (gpus, res.error)
        preds[gpus] = res.predicted_step_time_s
    assert preds[6144] < min(preds[1536], preds[3072])  # 36 micro-batches per replica instead of 48, as measured


def test_megatron_bridge_model_flops_are_causal_and_count_the_deepseek_mtp_module():
    """Megatron-Bridge's tables publish tokens/s and model TFLOP/s per GPU: their ratio, the model
    FLOPs per token, is the causal count for Llama and Qwen3 (within 1 %), and for DeepSeek-V3 the
    causal count with its one multi-token-prediction module where a row carries mtp_layers = 1
    (without it 3.7 % short: the evidence those rows rest on) and without it where it does not
    (the 25.11 GB200 / GB300 rows)."""
    import dataclasses
    import re

    from supercluster.validation.validate import load_rows, row_model

    seen = set()
    for row in load_rows("heldout"):
        m = re.search(r"Model TFLOP/sec/GPU ([0-9.]+)", row["notes"])
        if not m or not row["id"].startswith("MB") or "GPT-OSS" in row["model_name"]:
            continue  # (GPT-OSS: the tables count its sliding-window layers their own way)
        model, seq = row_model(row), int(row["seq_len"])
        published = float(m.group(1)) * 1e12 / float(row["measured_value"])  # (TFLOP/s published to 3-4 digits)
        assert published / model.model_flops_per_token(seq, causal=True) == pytest.approx(1.0, abs=0.01), row["id"]
        if model.mtp_layers:  # without the module the count falls short
            plain = dataclasses.replace(model, mtp_layers=0).model_flops_per_token(seq, causal=True)
            assert published / plain > 1.03, row["id"]
        seen.add(row["model_name"])
    assert {"DeepSeek-V3 671B", "Qwen3 235B-A22B", "Llama 3.1 405B"} <= seen


def test_the_loss_implementation_decides_whether_a_published_mpt_batch_fits():
    """MPT 760M at 512 tokens x 96 sequences per GPU (no recomputation) ran on 80 GB H100s. llm-foundry's
    default loss (flash-attn's fused cross-entropy on the 16-bit logits: 4 bytes a logit with its
    gradient) fits it; torchtitan's eager fp32 cross-entropy (12 bytes a logit) would need more than 80 GB."""
    import dataclasses

    from supercluster.hardware.specs import get_gpu
    from supercluster.job import default_network
    from supercluster.perf.step import step_breakdown
    from supercluster.validation.validate import load_rows, row_setup

    row = {r["id"]: r for r in load_rows("heldout")}["MPT-H100-760m-512-8"]
    model, layout, fw, _ = row_setup(row)
    assert fw.key == "composer" and fw.loss_bytes_per_logit == 4 and layout.micro_batch == 96
    gpu = get_gpu("h100-sxm")
    net = default_network(gpu, num_gpus=8)
    fused = step_breakdown(model, layout=layout, gpu=gpu, net=net, fw=fw)
    eager = step_breakdown(model, layout=layout, gpu=gpu, net=net, fw=dataclasses.replace(fw, loss_bytes_per_logit=12))
    assert fused.fits and not eager.fits
    logits = 512 * 96 * 50368  # one micro-batch's logits
    assert eager.memory_per_gpu_bytes - fused.memory_per_gpu_bytes == pytest.approx(8 * logits, rel=1e-6)


def test_predicted_memory_against_the_torchtitan_tables():
    """torchtitan's H100 tables (Dec 2024) and the Trainy H200 runs (June 2025) publish peak memory per
    GPU (the maximum over ranks): every row within 11 % (today -11 .. +4 %, mean 3.7 %; the 405B CP 8
    row's first stage holds 15 of the 126 layers under torchtitan's pipeline split, not 16; the H200
    runs' compiled loss holds 4 bytes a logit, not 12), from behaviours read in its code: FSDP keeps the stage
    gathered and its fp32 gradients unsharded under PP, PyTorch's ring attention holds the gathered
    K/V and fp32 gradient buffers, and the eager fp32 cross-entropy holds 12 bytes per logit (on the
    last pipeline stage, whose fewer in-flight micro-batches the model counts)."""
    import re

    from supercluster.hardware.specs import get_gpu
    from supercluster.job import default_network
    from supercluster.perf.step import step_breakdown
    from supercluster.validation.validate import load_rows, row_setup

    seen = 0
    for runs in ("public", "heldout"):
        for row in load_rows(runs):
            m = re.search(r"[Mm]emory:? ([0-9.]+) GiB", row["notes"])
            if not m or not row["seq_len"] or not row["id"].startswith(("TT-H100", "TT-H200")):
                continue
            model, layout, fw, _ = row_setup(row)
            gpu = get_gpu(row["gpu"])
            b = step_breakdown(model, layout=layout, gpu=gpu, net=default_network(gpu, num_gpus=layout.num_gpus), fw=fw)
            err = b.memory_per_gpu_bytes / 2**30 / float(m.group(1)) - 1.0
            assert abs(err) <= 0.11, (row["id"], err)
            seen += 1
    assert seen == 10


def _row(rid, group, label, measured, predicted):
    from supercluster.validation.validate import RowResult

    return RowResult(rid, predicted, measured, predicted / measured - 1, True, "", group, layout_label=label)


def test_ranking_counts_picks_and_pairs_and_leaves_out_ties_and_repeats():
    from supercluster.validation.validate import ranking

    rows = [_row("a", "g", "L1", 10.0, 5.0), _row("b", "g", "L2", 12.0, 6.0), _row("c", "g", "L3", 10.1, 7.0),
            # the same layout measured again (another release): no pair with its twin
            _row("d", "g", "L1", 14.0, 5.0),
            # one layout alone: not a ranking group
            _row("e", "h", "L1", 1.0, 1.0), _row("f", "h", "L1", 2.0, 1.0)]
    r = ranking(rows)
    assert r["groups"] == 1 and r["picks"] == 1  # L1 predicted fastest and ran fastest (a: 10.0)
    # pairs with a measured order and different layouts: a-b, b-c, b-d, c-d (a-c: a 1 % tie; a-d: one layout)
    # a-b in order (measured 10 < 12, predicted 5 < 6); b-c, b-d and c-d not (c measured faster than b
    # but predicted slower; d, L1's slow run, measured slower than b and c but priced faster)
    assert r["pairs"] == 4 and r["pairs_in_order"] == 1 and r["pairwise"] == 0.25
    wrong = ranking([_row("a", "g", "L1", 10.0, 6.0), _row("b", "g", "L2", 12.0, 5.0)])
    assert wrong["picks"] == 0 and wrong["pairs_in_order"] == 0


def test_validate_reports_memory_misses_and_the_ranking_in_json():
    res = validate("heldout")
    assert res["memory_misses"] == sum(r.fits is False for r in res["rows"])
    rk = res["ranking"]
    assert rk["groups"] == len(rk["by_group"]) > 0 and 0 <= rk["picks"] <= rk["groups"]
    assert rk["pairs_in_order"] <= rk["pairs"] and rk["tie"] == 0.02


def _runs_file(tmp_path, rows, copies=1):
    import csv

    path = tmp_path / "runs.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=list(rows[0]))
        out.writeheader()
        for k in range(copies):
            for r in rows:
                out.writerow(dict(r, id=f"{r['id']}-{k}"))
    return path


def test_validate_streams_a_file_in_chunks_with_the_same_answer(tmp_path, monkeypatch):
    """A runs file is read row by row and priced a chunk at a time: chunks of 7 rows give every row the
    prediction it gets in one chunk, and progress reports the rows read."""
    from supercluster.validation import validate as v

    rows = [r for r in v.load_rows("public") if r["scored"] == "yes"][:20]
    path = _runs_file(tmp_path, rows, copies=3)
    whole = v.validate(path)
    monkeypatch.setattr(v, "CHUNK_ROWS", 7)
    seen = []
    chunked = v.validate(path, progress=seen.append)
    assert [r.predicted_step_time_s for r in chunked["rows"]] == [r.predicted_step_time_s for r in whole["rows"]]
    assert chunked["mape"] == whole["mape"] and len(whole["rows"]) == 60
    assert seen == [7, 14, 21, 28, 35, 42, 49, 56]


def test_a_runs_file_beyond_its_bounds_is_refused_by_name(tmp_path, monkeypatch):
    from supercluster.errors import InputError
    from supercluster.formats import runs

    rows = runs.load_rows("public")[:3]
    path = _runs_file(tmp_path, rows)
    monkeypatch.setattr(runs, "MAX_RUNS_ROWS", 2)
    with pytest.raises(InputError, match=r"runs: more than 2 rows"):
        runs.load_rows(path)
    monkeypatch.setattr(runs, "MAX_RUNS_FILE_BYTES", 100)
    with pytest.raises(InputError, match=r"runs: .* GiB; at most"):
        runs.load_rows(path)
    monkeypatch.undo()
    big = tmp_path / "big.csv"
    big.write_text(path.read_text().replace(rows[1]["notes"], "x" * 200_000), encoding="utf-8")
    with pytest.raises(InputError, match=r"runs: malformed CSV \(line \d+\)"):
        runs.load_rows(big)


def test_a_row_that_cannot_be_priced_leaves_the_rest_of_its_file_scored(tmp_path, monkeypatch):
    """An fp8 recipe the GPU has no kernels for (MXFP8 on an H100) is refused by check_job, so its row is
    unsupported with the reason and the other rows are scored; and where pricing a group of jobs that
    passed their checks still fails, the rows are priced one by one and only the failing one is unsupported."""
    from supercluster.job import Job, check_job
    from supercluster.validation import validate as v

    rows = [r for r in v.load_rows("public") if r["scored"] == "yes" and r["gpu"] == "h100-sxm"][:3]
    bad = dict(rows[0], id="mxfp8-on-h100", precision="fp8 (MXFP8 block scaling)")
    res = v.validate(_runs_file(tmp_path, [*rows, bad]))
    by_id = {r.id.rsplit("-", 1)[0]: r for r in res["rows"]}
    assert not by_id["mxfp8-on-h100"].supported
    assert by_id["mxfp8-on-h100"].reason.startswith("fp8_recipe: MXFP8 runs on block-scaled tensor cores")
    assert all(by_id[r["id"]].supported for r in rows)
    with pytest.raises(InputError, match="fp8_recipe"):
        check_job(Job.from_row(bad)[0])

    real = v.price_many

    def refuse_first(jobs):
        if any(j.layout == jobs_seen[0] for j in jobs):
            raise InputError("layout", "cannot be priced")
        return real(jobs)

    jobs_seen = [Job.from_row(rows[0])[0].layout]
    monkeypatch.setattr(v, "price_many", refuse_first)
    out = v.predict_rows(rows)
    assert [r.supported for r in out] == [False, True, True]
    assert out[0].reason == "layout: cannot be priced"
    assert [r.predicted_step_time_s for r in out[1:]] == [r.predicted_step_time_s for r in v.predict_rows(rows[1:])]


def test_every_heldout_run_cut_to_the_shared_format_is_still_priced(tmp_path):
    """Other runs files carry only the shared format's columns, and a framework as published: every
    held-out row, cut to those columns and to the bare framework name before its options, is still
    supported (a reading this project's own columns carry must not be the only way in), and the file's
    MAPE stays within 3 points of the full rows' (14.0 % -> 15.2 % when measured)."""
    import re

    from supercluster.validation.validate import load_rows

    shared = (pathlib.Path(__file__).resolve().parents[1] / "src/supercluster/data/public-runs.csv")
    columns = shared.read_text(encoding="utf-8").splitlines()[0].split(",")
    rows = [{**{c: r.get(c, "") for c in columns}, "framework": re.split(r"\+", r["framework"])[0]}
            for r in load_rows("heldout")]
    cut = validate(_runs_file(tmp_path, rows))
    assert cut["supported_fraction"] == 1.0
    assert cut["mape"] <= validate("heldout")["mape"] + 0.03


def _fsdp_job(micro_batch: int, zero: int, dp: int = 8):
    from supercluster.job import Job, check_job
    from supercluster.parallelism.layout import Layout

    lay = Layout(tp=1, pp=1, dp=dp, micro_batch=micro_batch, global_batch=8 * dp, seq_len=4096, zero_stage=zero)
    return check_job(Job.of("llama3-8b", gpu="h100-sxm", layout=lay, framework="torchtitan"))


def test_dp_traffic_is_every_collective_of_the_step_and_the_step_carries_it():
    """ZeRO-3 gathers (forward; backward, as torchtitan reshards after the forward) and reduce-scatters
    once per micro-batch: 8 micro-batches move 8 times one's traffic. ZeRO-1 syncs once a step, whatever
    the micro-batches. One data-parallel rank moves nothing. The model's own step is never shorter."""
    from supercluster.job import price_many

    z3_one, z3_eight, z1_one, z1_eight, solo = price_many([
        _fsdp_job(8, 3), _fsdp_job(1, 3), _fsdp_job(8, 1), _fsdp_job(1, 1), _fsdp_job(8, 3, dp=1)])
    assert z3_one.microbatches == 1 and z3_eight.microbatches == 8
    assert z3_eight.dp_traffic_s == pytest.approx(8 * z3_one.dp_traffic_s, rel=1e-9)
    assert z1_eight.dp_traffic_s == pytest.approx(z1_one.dp_traffic_s, rel=1e-9) and z1_one.dp_traffic_s > 0
    assert z3_one.dp_traffic_s > z1_one.dp_traffic_s  # (two gathers and a reduce-scatter vs one of each)
    assert solo.dp_traffic_s == 0.0
    for b in (z3_one, z3_eight, z1_one, z1_eight):
        assert b.step_time_s >= b.dp_traffic_s


def test_validate_counts_rows_measured_faster_than_their_own_data_parallel_traffic():
    """The Megatron-FSDP Qwen3 235B row states per-micro-batch gathers and fp32 reduce-scatters over 32
    nodes that need more network time than its measured step: the row's one traffic miss, and its
    worst error. Every priced step carries its own traffic."""
    res = validate("heldout")
    misses = [r.id for r in res["rows"] if r.traffic_miss]
    assert res["traffic_misses"] == len(misses) and misses == ["MZOO-QWEN3-235B-H100-FSDP-EP8-256"]
    assert res["worst_row"] == misses[0]
    for r in res["rows"]:
        assert not r.supported or r.predicted_step_time_s >= r.dp_traffic_s
    out = CliRunner().invoke(app, ["validate", "--runs", "heldout", "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout)["traffic_misses"] == 1


def test_a_row_of_a_framework_with_no_profile_is_priced_and_marked_approximated(tmp_path):
    """A framework the catalog has no profile for, and that names none ("ColossalAI"), is priced with
    the default profile and counted as approximated, apart from the rows of known frameworks (a
    published spelling such as "NeMo 2.0" or "PyTorch FSDP" reads as a profile and is not)."""
    from supercluster.validation.validate import load_rows

    base = next(r for r in load_rows("public") if r["id"] == "DGXC-L31-70B-bf16-64")
    rows = [dict(base, id="named", framework="NeMo 2.0"), dict(base, id="pytorch", framework="PyTorch FSDP"),
            dict(base, id="other", framework="ColossalAI")]
    res = validate(_runs_file(tmp_path, rows))
    by_id = {r.id: r for r in res["rows"]}
    assert [by_id[k].approximated for k in ("named-0", "pytorch-0", "other-0")] == [False, False, True]
    assert res["approximated"] == 1 and all(r.supported for r in res["rows"])
    assert "unknown: nemo-megatron assumed" in by_id["other-0"].reason
    out = CliRunner().invoke(app, ["validate", "--runs", str(tmp_path / "runs.csv")])
    assert out.exit_code == 0 and "(1 approximated: no profile for their framework)" in out.stdout


def test_one_job_at_one_layout_measured_in_two_publications_differs_more_than_the_release_pairs():
    """docs/validation.md, Reading the misses: NeMo 24.12's Llama 3 8B FP8 run (CP 2) and dgxc-benchmarking's
    24.09 run of the same job at the same layout differ by more than 8 %, more than the model's 3.6 % between
    that layout and Megatron-Bridge's, whose runs at their own layout measured faster than both."""
    from supercluster.job import Job
    from supercluster.validation.validate import load_rows, predict_row

    rows = {r["id"]: r for r in load_rows("heldout")}
    a, b = (rows[k] for k in ("NEMO2412-LLAMA3-8B", "DGXC-L31-8B-fp8-8"))
    ja, jb = Job.from_row(a)[0], Job.from_row(b)[0]
    assert ja.layout.label() == jb.layout.label() and ja.gpu.key == jb.gpu.key and ja.layout.precision == "fp8"
    slow, fast = float(a["step_time_s"]), float(b["step_time_s"])
    assert slow / fast > 1.08
    for k in ("MB2509-L3-8B-H100-SXM-fp8cs-8", "MB2511-L3-8B-H100-SXM-fp8cs-8"):
        assert Job.from_row(rows[k])[0].layout.label() != ja.layout.label()
        assert 9.0 < float(rows[k]["step_time_s"]) < fast
    pa, pm = (float(predict_row(rows[k]).predicted_step_time_s) for k in ("NEMO2412-LLAMA3-8B",
                                                                         "MB2511-L3-8B-H100-SXM-fp8cs-8"))
    assert 0.0 < 1.0 - pa / pm < slow / fast - 1.0
