"""JAX stacks (MaxText, Paxml) read as the MaxText profile, not as Megatron-LM: FSDP by default, fp32
parameters and gradients, full remat (MaxText's remat policies as the modules they recompute), XLA's
fused and graph-captured kernels; checked against NVIDIA's published MaxText and Paxml recipes
(benchmarks/check_jax_stacks.py)."""

from __future__ import annotations

import pytest

import supercluster as sc
from supercluster.parallelism.framework import get_framework
from supercluster.parallelism.layout import Layout
from supercluster.parallelism.published import resolve_framework


@pytest.mark.parametrize("published", ["MaxText", "maxtext (JAX 0.4.35)", "Paxml on JAX-Toolbox", "jax", "PAX",
                                       "NVIDIA JAX-Toolbox", "T5X", "Levanter"])
def test_a_jax_run_reads_as_the_maxtext_profile_and_says_so(published):
    fw, note = resolve_framework(published)
    assert fw.key == "maxtext"
    # (a profile name or alias is read as it is; a published name that mentions one, with a note)
    assert note is None if published in ("MaxText", "jax") else note == f"framework {published!r} read as maxtext"


def test_the_profile_runs_as_maxtext_configures_it():
    fw = get_framework("maxtext")
    assert (fw.default_zero_stage, fw.default_recompute, fw.grad_reduce_bytes) == (3, "full", 4)
    lay = Layout(tp=1, pp=1, dp=64, zero_stage=3, recompute="full", global_batch=256, seq_len=8192, micro_batch=1)
    jax = sc.estimate("llama3-8b", gpu="h100-sxm", num_gpus=64, layout=lay, framework=fw)
    nemo = sc.estimate("llama3-8b", gpu="h100-sxm", num_gpus=64, layout=lay, framework="nemo-megatron")
    assert jax.ledger["kernel_launch"] == 0  # one compiled program with command buffers: no per-op host cost
    # fp32 gradients (weight_dtype float32): twice the bytes held, and reduced at 4 bytes, not 2
    assert jax.memory["mem_grads_bytes"] == pytest.approx(2 * nemo.memory["mem_grads_bytes"], rel=1e-9)
    # the fp32 parameters are the optimizer's master: 10 bytes of state beside the 2 counted as weights,
    # where Megatron-LM keeps an fp32 master, m and v (12)
    mega = sc.estimate("llama3-8b", gpu="h100-sxm", num_gpus=64, layout=lay, framework="megatron")
    assert jax.memory["mem_optimizer_bytes"] == pytest.approx(10 / 12 * mega.memory["mem_optimizer_bytes"], rel=1e-9)
    with pytest.raises(sc.InputError) as e:  # (MaxText's circular pipeline is not modelled as interleaving)
        sc.estimate("llama3-8b", gpu="h100-sxm", num_gpus=64, framework=fw,
                    layout=Layout(tp=1, pp=4, dp=16, vpp=2, global_batch=256, seq_len=8192))
    assert e.value.field == "vpp"


def test_a_maxtext_remat_policy_reads_as_the_modules_it_recomputes():
    from supercluster.formats.runs import parse_recompute, parse_recompute_modules, remat_policy

    fw = get_framework("maxtext")
    assert parse_recompute("remat_policy save_dot_except_mlp", fw) == "selective"
    assert parse_recompute_modules("remat_policy=save_dot_except_mlp") == ("core_attn", "layernorm", "mlp")
    assert parse_recompute_modules("MaxText minimal") == ("core_attn", "layernorm")
    assert "not priced" in remat_policy("save_qkv_proj")[1]
    # (Paxml / Praxis's CHECKPOINT_POLICY is not read: the profile's full remat is priced, with a note)
    assert remat_policy("SAVE_QKV_OUT_PROJ") is None and parse_recompute("SAVE_QKV_OUT_PROJ", fw) == "full"


def test_a_remat_policy_prices_its_modules_not_the_per_op_policy():
    lay = dict(tp=1, pp=1, dp=64, zero_stage=3, global_batch=128, seq_len=4096, micro_batch=2)
    step = {}
    for name, extra in (("op", dict(recompute="selective")), ("full", dict(recompute="full")),
                        ("modules", dict(recompute="selective", recompute_modules=("core_attn", "layernorm", "mlp")))):
        step[name] = sc.estimate("llama2-70b", gpu="h100-sxm", num_gpus=64, layout=Layout(**lay, **extra),
                                 framework="maxtext")
    # recomputing everything but the q, k, v and output projections: less than the whole layer, more than
    # the per-op policy's every other matmul
    assert step["op"].ledger["recompute"] < step["modules"].ledger["recompute"] < step["full"].ledger["recompute"]


@pytest.fixture(scope="module")
def recipes():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "check_jax_stacks.py"
    spec = importlib.util.spec_from_file_location("check_jax_stacks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_maxtext_steps_follow_its_remat_policy_at_every_scale(recipes):
    """NVIDIA's MaxText Llama 2 70B BF16 recipe on 64-2,048 H100 (benchmarks/check_jax_stacks.py), priced
    with its save_qkv_proj policy and its sharding: within 6 % at every scale (the recompute of the
    attention output projection, which no module holds, is left out)."""
    rows = [r for r in recipes.maxtext_rows() if r[1] == "bf16"]
    assert [r[0] for r in rows] == [64, 128, 256, 512, 1024, 2048]
    assert all(abs(policy / measured - 1.0) < 0.06 for _, _, measured, policy, _, _ in rows)


def test_hybrid_sharding_keeps_the_paxml_step_level_with_the_gpu_count(recipes):
    """Paxml's GPT-3 175B FP8 grows 7 % from 128 to 2,048 H100 measured (FSDP over 128 GPUs, data parallel
    beyond); priced with the recipe's replicated shard groups it grows about as much, fully sharded over
    every GPU several times more."""
    rows = recipes.paxml_175b_rows()
    (_, _, m0, _, f0, e0), (_, _, m1, _, f1, e1) = rows[0], rows[-1]
    measured, recipe, everywhere = m1 / m0 - 1.0, f1 / f0 - 1.0, e1 / e0 - 1.0
    assert abs(recipe - measured) < 0.05 < everywhere - measured
    assert all(abs(full / m - 1.0) < 0.10 for _, _, m, _, full, _ in rows)
