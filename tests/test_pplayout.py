"""Explicit pipeline layouts (Megatron-Core --pipeline-model-parallel-layout notation)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from supercluster.errors import InputError
from supercluster.formats.load import load_model
from supercluster.hardware.specs import get_gpu
from supercluster.job import default_network, estimate
from supercluster.parallelism.layout import Layout
from supercluster.parallelism.pplayout import chunk_blocks, parse, rank_blocks
from supercluster.perf.step import step_breakdown


def test_the_notation_expands_repeats_groups_and_cosmetic_commas():
    assert parse("Et*3|(tt|)*2,tmL") == ["Ettt", "tt", "tt", "tmL"]
    assert parse("E,t|t*2|(t)*2,L") == ["Et", "tt", "ttL"]
    stages = parse("Et*4|(t*4|)*14,tmL")  # Megatron-Bridge's DeepSeek-V3 layout on 16 stages
    assert len(stages) == 16 and "".join(stages).count("t") == 61
    # virtual stage k runs on rank k mod pp as its chunk k // pp
    blocks = rank_blocks(stages, 8)
    assert blocks[0].tolist() == [8, 0, 0] and blocks[7].tolist() == [5, 1, 1]
    # per (rank, chunk): layer-like blocks, MTP modules, heads
    assert chunk_blocks(stages, 8)[7].tolist() == [[4, 0, 0], [2, 1, 1]]
    assert chunk_blocks(stages, 8)[0].tolist() == [[4, 0, 0], [4, 0, 0]]


@pytest.mark.parametrize("text, match", [
    ("Et*4|Xt", "cannot read 'X'"),
    ("", "is empty"),
    # the repeats together write at most MAX_BLOCKS characters (a CSV cell of many large repeats once
    # built gigabytes), and a count of more than 6 digits is not read (Python refuses to convert one of
    # 4,300)
    ("t*99999" * 300, r"repeats 't\*99999' past 100,000 blocks in all"),
    ("(t*99999|)*2", "past 100,000 blocks in all"),
    ("t*" + "9" * 5000, r"cannot read '\*9' in 't\*999.*\.\.\.'; blocks are"),
])
def test_unreadable_layouts_name_the_field(text, match):
    with pytest.raises(InputError, match=f"^pp_layout: .*{match}"):
        parse(text)


def test_a_layout_must_fit_the_parallel_degrees_and_the_model():
    base = dict(pp=4, dp=2, global_batch=8, seq_len=4096)
    with pytest.raises(InputError, match=r"^pp_layout: has 4 stages; pp x vpp = 4 x 2 = 8 \(give --vpp 1\)"):
        Layout(vpp=2, pp_layout="Et*20|t*20|t*20|t*20L", **base)
    model, gpu = load_model("llama3-70b"), get_gpu("h100-sxm")
    for text, match in (("Et*20|t*20|t*20|t*19L", "places 79 layers; Llama 3 70B has 80"),
                        ("Et*20|t*20|t*20|t*20mL", "places 1 MTP modules; the model has 0"),
                        ("t*20|t*20|t*20|Et*20L", "must start with the embedding E")):
        with pytest.raises(InputError, match=f"^pp_layout: {match}"):
            estimate(model, gpu=gpu, num_gpus=8, layout=Layout(pp_layout=text, **base), framework="megatron")


def test_the_even_layout_prices_as_the_even_split_and_a_lighter_last_stage_is_faster():
    gpu = get_gpu("h100-sxm")
    net = default_network(gpu, num_gpus=64)
    from supercluster.parallelism.framework import get_framework

    megatron = get_framework("megatron")
    model = load_model("llama3-70b")
    lay = Layout(tp=4, pp=4, dp=4, micro_batch=1, global_batch=64, seq_len=8192, recompute="full")
    even = step_breakdown(model, layout=lay, gpu=gpu, net=net, fw=megatron)
    same = step_breakdown(model, layout=dataclasses.replace(lay, pp_layout="Et*20|t*20|t*20|t*20L"), gpu=gpu,
                          net=net, fw=megatron)
    assert same.step_time_s == pytest.approx(even.step_time_s, rel=1e-12)
    assert same.memory_per_gpu_bytes == pytest.approx(even.memory_per_gpu_bytes, rel=1e-12)
    # one layer moved off the head's stage: that stage is lighter, a middle stage now sets the pace
    moved = step_breakdown(model, layout=dataclasses.replace(lay, pp_layout="Et*20|t*21|t*20|t*19L"), gpu=gpu,
                           net=net, fw=megatron)
    assert moved.step_time_s != even.step_time_s
    assert sum(moved.ledger.values()) == pytest.approx(moved.step_time_s, rel=1e-12)
    # DeepSeek-V3 with its MTP module, as Megatron-Bridge lays it on 16 stages: the last stage holds one
    # layer, the MTP module and the head, lighter than the account-for-loss split's 2 layers + m + L
    ds = load_model("deepseek-v3+mtp")
    nemo = get_framework("nemo-megatron")
    lay = Layout(pp=16, dp=16, ep=8, micro_batch=1, global_batch=4096, seq_len=4096, precision="fp8")
    b200 = get_gpu("b200")
    net = default_network(b200, num_gpus=256)
    split = step_breakdown(ds, layout=lay, gpu=b200, net=net, fw=nemo)
    recipe = step_breakdown(ds, layout=dataclasses.replace(lay, pp_layout="Et*4|(t*4|)*14,tmL"), gpu=b200,
                            net=net, fw=nemo)
    assert recipe.step_time_s < split.step_time_s
    assert sum(recipe.ledger.values()) == pytest.approx(recipe.step_time_s, rel=1e-12)
    assert np.isfinite(recipe.memory_per_gpu_bytes) and recipe.memory_per_gpu_bytes > 0
