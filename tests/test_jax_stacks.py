"""JAX stacks (MaxText, Paxml) read as the MaxText profile, not as Megatron-LM: FSDP by default, fp32
parameters and gradients, full remat, XLA's fused and graph-captured kernels."""

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
