"""Reading a runs CSV: published names, phrases and optional columns become a job's model, layout,
framework and GPU, and what a row leaves unsaid or cannot say is a note or a named error."""

from __future__ import annotations

import csv

import pytest

from supercluster.errors import InputError
from supercluster.validation.validate import validate


def test_published_framework_names_select_a_profile():
    from supercluster.parallelism.published import resolve_framework

    assert resolve_framework("Megatron-Bridge")[0].key == "nemo-megatron"
    fw, note = resolve_framework("NeMo 2.0", 2025)
    assert fw.key == "nemo-megatron" and "read as nemo-megatron" in note
    assert resolve_framework("PyTorch FSDP+compile", 2025)[0].key == "torchtitan+compile"
    fw, note = resolve_framework("Colossal-AI", 2025)  # the one default framework, said in the note
    assert fw.key == "nemo-megatron" and "unknown: nemo-megatron assumed" in note
    assert resolve_framework("MaxText", 2025)[0].key == "maxtext"  # (a JAX stack has its own profile)
    assert resolve_framework("MosaicML llm-foundry")[0].key == "composer"
    assert resolve_framework("PyTorch FSDP")[0].key == "torchtitan"
    # options named as suffixes survive the era profile a publication year selects
    fw, note = resolve_framework("Megatron-DeepSpeed+embedding-split", 2022)
    assert fw.key == "deepspeed-legacy+embedding-split" and fw.pp_split_counts_head and note is None
    fw, note = resolve_framework("Megatron-DeepSpeed (BigScience fork)+embedding-split", 2022)
    assert fw.key == "deepspeed-legacy+embedding-split"
    assert note == "framework 'Megatron-DeepSpeed (BigScience fork)' read as deepspeed-legacy+embedding-split"
    from supercluster.parallelism.framework import get_framework

    assert get_framework("nemo-megatron+embedding-split") == get_framework("nemo-megatron")  # already so


@pytest.mark.parametrize("name,key", [
    ("Megatron-LM + DeepEP", "megatron+deepep"),
    ("Megatron-Core (DeepEP dispatcher, 1F1B A2A overlap)", "megatron+ep-overlap+deepep"),
    ("Megatron-Core, HybridEP", "megatron+deepep"),
    ("NeMo AutoModel (round-robin gate)", "automodel+round-robin-gate"),
    ("Megatron-LM (--account-for-embedding-in-pipeline-split)", "megatron+embedding-split"),
    ("torchtitan (async TP, torch.compile)", "torchtitan+compile+tp-overlap"),
    ("NeMo 2.0, CUDA graphs", "nemo-megatron+cuda-graphs"),
    ("Megatron-FSDP", "megatron"),
    ("torchtitan (Ulysses CP)", "torchtitan"),  # (an option the profile cannot take is left out)
])
def test_run_options_named_in_a_published_framework_name_are_read(name, key):
    from supercluster.parallelism.published import resolve_framework

    fw, note = resolve_framework(name, 2025)
    assert fw.key == key and note == f"framework {name!r} read as {key}"


def test_more_pipeline_slots_than_layers_reads_as_the_embedding_and_loss_split():
    """Qwen3 235B's 94 layers at pp 32 x vpp 3 = 96 slots ran only with Megatron-Core counting the
    embedding and the loss as layers: a row that does not say so is read so, with a note; two slots
    more than that are still refused."""
    from supercluster.validation.validate import load_rows, predict_row

    row = {r["id"]: r for r in load_rows("heldout")}["MZOO-QWEN3-235B-H100-PP32-A2A-256"]
    plain = predict_row(dict(row, framework="Megatron-LM"))
    assert plain.supported and "96 slots for 94 layers" in plain.reason
    assert plain.framework == "megatron+embedding-split"
    stated = predict_row(dict(row, framework="megatron+embedding-split"))
    assert plain.predicted_step_time_s == stated.predicted_step_time_s
    over = predict_row(dict(row, framework="Megatron-LM", pp="16", vpp="7", dp="8"))
    assert not over.supported and over.reason.startswith("pp: pp x vpp = 16 x 7 exceeds")


def test_unknown_column_values_fall_back_with_a_note():
    from supercluster.validation.validate import load_rows, predict_row

    base = next(r for r in load_rows() if r["id"] == "DGXC-L31-70B-bf16-64")
    res = predict_row(dict(base, precision="fp6"))
    assert res.supported and "precision 'fp6' not known: bf16 assumed" in res.reason
    res = predict_row(dict(base, recompute="partial"))
    assert res.supported and "recompute 'partial' not known" in res.reason
    res = predict_row(dict(base, zero_stage_or_fsdp="HSDP"))
    assert res.supported and "HSDP" in res.reason and "zero 3" in res.reason


@pytest.mark.parametrize("gpu,gpu_type,key,note", [
    ("h100-sxm", "", "h100-sxm", None),
    ("H200", "", "h200", None),  # a key in any case
    ("H100-SXM5-80GB", "", "h100-sxm", "gpu 'H100-SXM5-80GB' read as h100-sxm"),
    ("A100-SXM4-40GB", "", "a100-40gb", "read as a100-40gb"),
    ("a100", "", "a100-80gb", "(memory not stated: 80 GB assumed)"),
    ("GB200 NVL72", "", "gb200", "read as gb200"),  # (not b200)
    ("", "DGX-B300", "b300", "gpu 'DGX-B300' read as b300"),  # gpu_type where gpu is blank
    ("", "H100 96GB HBM2e @500W (Grand Teton)", "h100-96gb-500w", "read as h100-96gb-500w"),
    ("h100-pcie", "H100-SXM-80GB", "h100-pcie", None),  # another part: left as written, gpu_type not asked
    ("l40s", "", "l40s", None),
])
def test_a_published_gpu_name_is_read_as_its_catalog_key_with_a_note(gpu, gpu_type, key, note):
    from supercluster.formats.runs import row_gpu

    got, said = row_gpu({"gpu": gpu, "gpu_type": gpu_type})
    assert got == key
    assert (said is None) if note is None else (note in said)


def test_a_row_naming_its_gpu_as_published_is_priced_as_the_catalog_key():
    from supercluster.validation.validate import load_rows, predict_row

    base = next(r for r in load_rows() if r["id"] == "DGXC-L31-70B-bf16-64")
    keyed, named = predict_row(base), predict_row(dict(base, gpu="NVIDIA H100 SXM5 80GB"))
    assert named.supported and named.predicted_step_time_s == keyed.predicted_step_time_s
    assert named.gpu == "h100-sxm" and "read as h100-sxm" in named.reason
    other = predict_row(dict(base, gpu="h100-pcie"))
    assert not other.supported and other.reason.startswith("gpu: unknown GPU 'h100-pcie'")


@pytest.mark.parametrize("text,recompute", [
    ("full", "full"), ("Full (uniform, 1 layer)", "full"), ("activation checkpointing", "full"),
    ("yes", "full"), ("block", "full"), ("selective (op)", "selective"), ("SAC per op", "selective"),
    ("none", "none"), ("off", "none"), ("no activation checkpointing", "none"), ("partial", None),
])
def test_published_recompute_phrases_are_read(text, recompute):
    from supercluster.formats.runs import recompute_word

    assert recompute_word(text) == recompute


@pytest.mark.parametrize("text,zero", [
    ("ZeRO-1", 1), ("ZeRO 2", 2), ("zero stage 3", 3), ("3", 3), ("0", 0), ("FSDP", 3), ("FULL_SHARD", 3),
    ("SHARD_GRAD_OP", 2), ("NO_SHARD", 0), ("distributed optimizer (ZeRO-1)", 1), ("DDP", 0),
    ("FSDP: optimizer states and gradients sharded, weights not re-sharded after forward (ZeRO-2)", 2),
    ("Megatron FSDP (optim_grads_params)", 3), ("yes", None),
])
def test_published_zero_phrases_are_read(text, zero):
    from supercluster.formats.runs import zero_word

    assert zero_word(text) == zero


def test_blank_micro_batch_follows_the_framework_default():
    # torchtitan splits each DP rank's batch into one micro-batch per pipeline stage
    # (pipeline_parallel_microbatches defaults to the stage count); Megatron rows default to 1.
    from supercluster.validation.validate import load_rows, row_setup

    row = {r["id"]: r for r in load_rows()}["TT-H100-L31-405B-3D-1F1B-512"]  # local batch 32, PP 8
    row = {**row, "seq_len": "8192"}
    assert row["micro_batch"] == "" and row_setup(row)[1].micro_batch == 4
    assert row_setup({**row, "vpp": "2"})[1].micro_batch == 2
    assert row_setup({**row, "framework": "megatron"})[1].micro_batch == 1
    assert row_setup({**row, "pp": "1", "dp": "64"})[1].micro_batch == 4  # no pipeline: the local batch


def test_torchtitan_selective_layer_ac_is_every_other_block_recomputed():
    from supercluster.formats.phrases import parse_layer_ac
    from supercluster.validation.validate import load_rows, row_setup

    assert parse_layer_ac("selective (layer)") == 2 and parse_layer_ac("selective (op)") is None
    assert parse_layer_ac("selective layer, every 3 layers") == 3 and parse_layer_ac("full") is None
    row = {r["id"]: r for r in load_rows("heldout")}["TT-A100-L3-8B-sellayer"]  # 32 blocks, no PP
    _, layout, _, note = row_setup(row)
    assert (layout.recompute, layout.recompute_layers) == ("full", 16) and "one block in 2" in note
    _, layout, _, _ = row_setup({**row, "recompute": "selective (layer, every 1)"})
    assert (layout.recompute, layout.recompute_layers) == ("full", 0)  # every block


def test_a_runs_csv_names_megatron_recompute_modules():
    from supercluster.validation.validate import load_rows, predict_row, row_setup

    row = {r["id"]: r for r in load_rows("heldout")}["MB2602-GPTOSS-120B-GB300-bf16-64"]
    named = {**row, "recompute": "selective (recompute_modules=layernorm,moe_act)"}
    _, layout, _, _ = row_setup(named)
    assert (layout.recompute, layout.recompute_modules) == ("selective", ("layernorm", "moe_act"))
    plain, rc = predict_row(row), predict_row(named)
    assert rc.supported and rc.predicted_step_time_s > plain.predicted_step_time_s and "layernorm" in rc.reason
    # "layernorm" is not torchtitan's selective *layer* AC
    assert row_setup({**named, "framework": "nemo-megatron"})[1].recompute_layers == 0


def test_an_unpriced_recompute_module_in_a_runs_csv_is_left_out_with_a_note():
    from supercluster.validation.validate import load_rows, row_setup

    row = {r["id"]: r for r in load_rows("heldout")}["DGXC-DSV3-H100-bf16-1024"]
    assert "mla_up_proj" in row["recompute"]
    _, layout, _, note = row_setup(row)
    assert (layout.recompute, layout.recompute_modules) == ("selective", ("mla_up_proj",))
    _, layout, _, note = row_setup({**row, "recompute": "selective (recompute_modules=shared_experts)"})
    assert (layout.recompute, layout.recompute_modules) == ("none", ()) and "shared_experts not priced" in note
    _, layout, _, note = row_setup({**row, "recompute": "selective (recompute_modules=shared_experts,moe_act)"})
    assert (layout.recompute, layout.recompute_modules) == ("selective", ("moe_act",)) and "left out" in note


def test_a_row_asking_for_parallelism_its_framework_lacks_is_unsupported_with_the_reason():
    from supercluster.validation.validate import load_rows, predict_row

    row = {r["id"]: r for r in load_rows("heldout")}["MPT-A100-80-7b-2K-8"]
    res = predict_row({**row, "tp": "2", "dp": "4"})
    assert not res.supported and res.reason.startswith("tp: framework composer has no tensor parallelism")
    assert predict_row(row).supported


@pytest.mark.parametrize("field,value,reason", [
    ("step_time_s", "abc", "step_time_s: 'abc' is not a positive number"),
    ("step_time_s", "0", "step_time_s: '0' is not a positive number"),
    ("step_time_s", "inf", "step_time_s: 'inf' is not a positive number"),
    ("heads", "0", "heads: must be a positive integer"),
    ("vocab", "inf", "vocab: 'inf' is not a non-negative integer"),
])
def test_a_row_with_a_value_that_is_no_number_is_unsupported_with_the_field(field, value, reason):
    from supercluster.validation.validate import load_rows, predict_row

    row = load_rows()[0]
    res = predict_row({**row, field: value})
    assert not res.supported and res.predicted_step_time_s is None and res.reason.startswith(reason)


def test_a_runs_file_may_give_each_row_its_pipeline_layout(tmp_path):
    """An optional pp_layout column carries a run's explicit pipeline layout into its price."""

    from supercluster.validation.validate import load_rows, predict_row, row_setup

    row = dict({r["id"]: r for r in load_rows("heldout")}["MB2602-DSV3-B200-mxfp8-256"])
    assert row["pp_layout"] == "Et*4|(t*4|)*14,tmL"  # the recipe's layout, in the shipped file
    plain = predict_row({**row, "pp_layout": ""})  # the framework's own split
    model, layout, fw, _ = row_setup(row)
    assert layout.pp_layout == "Et*4|(t*4|)*14,tmL" and model.mtp_layers == 1
    laid = predict_row(row)
    assert laid.supported and laid.predicted_step_time_s < plain.predicted_step_time_s
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow(row)
    res = validate(str(path))
    assert res["rows"][0].predicted_step_time_s == pytest.approx(laid.predicted_step_time_s, rel=1e-12)
    row["pp_layout"] = "Et*4|(t*4|)*14,tL"  # the run trained an MTP module the layout leaves out
    bad = predict_row(row)
    assert not bad.supported and "pp_layout" in bad.reason


def test_optional_expert_tp_and_sequence_parallel_columns_set_the_layout():
    """Beyond the shared format: a run's expert tensor-parallel size and sequence parallelism, where
    the framework default would differ (the Megatron-LM profile runs without SP)."""
    from supercluster.job import Job
    from supercluster.validation.validate import load_rows

    row = next(r for r in load_rows("heldout") if r["id"] == "MZOO-QWEN3-235B-H100-TP4-EP8-256")
    job, _ = Job.from_row(row)
    lay = job.layout
    assert (lay.tp, lay.ep, lay.etp, lay.sequence_parallel, job.framework.sequence_parallel) == (4, 8, 1, True, False)
    # without the columns: EP 8 fits in dp 8, so expert TP would follow TP; SP is on all the same, as
    # Megatron-LM requires it of an MoE with tp > 1
    bare = Job.from_row({**row, "expert_tp": "", "sequence_parallel": ""})[0].layout
    assert (bare.etp, bare.sequence_parallel) == (4, True)
    with pytest.raises(InputError, match="^sequence_parallel: framework megatron"):
        Job.from_row({**row, "sequence_parallel": "no"})
    with pytest.raises(InputError, match="^sequence_parallel: 'maybe'"):
        Job.from_row({**row, "sequence_parallel": "maybe"})


def test_the_qwen3_next_preset_is_its_config_json():
    import dataclasses

    from supercluster.formats.hf import from_hf_config
    from supercluster.formats.load import load_model
    from test_hybrid import QWEN3_NEXT_HF

    a, b = from_hf_config(QWEN3_NEXT_HF), load_model("qwen3-next-80b-a3b")
    same = [f.name for f in dataclasses.fields(a) if f.name not in ("key", "name", "source", "shared_ffn_dim")]
    assert all(getattr(a, f) == getattr(b, f) for f in same) and a.num_params == b.num_params == 79_674_286_848


def test_rows_of_one_model_share_one_model_named_by_the_run():
    from supercluster.formats.runs import load_rows, row_model

    rows = [r for r in load_rows("public") if r["model_name"] == "GPT-3 175B"]
    assert len(rows) > 1
    models = {id(row_model(r)) for r in rows if r["seq_len"] == rows[0]["seq_len"]}
    assert len(models) == 1 and row_model(rows[0]).key == "GPT-3 175B"


@pytest.mark.parametrize("change,note", [
    ({"dp": ""}, "dp blank: 2 from the GPU count"),
    ({"dp": "4"}, "dp 4 read as counting the CP ranks: dp 2 x cp 2"),
])
def test_a_rows_dp_is_read_against_its_gpu_count(change, note):
    """tp4-pp4-dp2-cp2 on 64 GPUs written with dp blank, or with a dp that counts the CP ranks, is the
    same job; a dp that fits no reading is refused with the product named."""
    from supercluster.validation.validate import load_rows, predict_row

    base = next(r for r in load_rows() if r["id"] == "DGXC-L31-70B-bf16-64")
    res = predict_row(dict(base, **change))
    assert res.supported and note in res.reason
    assert res.predicted_step_time_s == predict_row(base).predicted_step_time_s
    bad = predict_row(dict(base, dp="8"))
    assert not bad.supported and "4 x 4 x 8 x 2 = 256, not the 64 GPUs" in bad.reason


def test_an_moe_rows_dp_that_leaves_out_the_ep_ranks_is_read_so():
    from supercluster.validation.validate import load_rows, predict_row

    base = {r["id"]: r for r in load_rows("heldout")}["MB2511-QWEN3-30B-GB300-mxfp8-8"]  # tp1 dp8 ep8
    res = predict_row(dict(base, dp="1"))
    assert res.supported and "dp 1 read as leaving out the EP ranks: dp 8" in res.reason
    assert res.predicted_step_time_s == predict_row(base).predicted_step_time_s
