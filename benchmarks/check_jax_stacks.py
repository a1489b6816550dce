"""JAX stacks on H100 against NVIDIA's published MaxText and Paxml recipes (not in the validation
files): the step time from 16 to 2,048 GPUs under FSDP and hybrid sharding, priced with the maxtext
profile (the JAX / XLA behaviour both share) and each recipe's own sharding, with its stated remat
policy and with full remat.

NVIDIA's dgxc-benchmarking (GSW 25.01) publishes seconds per step, H100 SXM, synthetic data:

* maxtext/README_70b.md: Llama 2 70B, MaxText (container maxtext-2024-12-09), BF16 and FP8,
  sequence 4,096, 2 sequences per GPU, 64 to 2,048 GPUs. Its configure.sh: FSDP over every GPU up to
  32 nodes, from 64 nodes FSDP over 16 nodes (128 GPUs) and data parallelism across them
  (dcn_data_parallelism: hybrid sharding); remat_policy save_qkv_proj (the q, k, v projections saved,
  the rest of each layer recomputed: core_attn, layernorm and mlp, the attention output projection's
  recompute left unpriced); cuDNN flash attention through Transformer Engine.
* paxml/README_175b.md: GPT-3 175B, Paxml 24.11 with Transformer Engine, FP8, sequence 2,048, 2 per
  GPU, 128 to 2,048 GPUs. configure.sh: DCN_MESH_SHAPE [nodes / 16, 16, 1], FSDP over 16 nodes (the
  node's 8 GPUs taken as FSDP too, as the table's "FSDP+DP" says), the rest data parallel;
  paxml_mod_configs.py: CHECKPOINT_POLICY SAVE_QKV_OUT_PROJ (as stated: core_attn, layernorm and mlp
  recomputed). The vocabulary is 51,200 (the README's FLOP count).
* paxml/README_5b.md: GPT 5B (24 layers, hidden 4,096, the README's FLOP count; 32 heads of 128
  assumed), BF16 and FP8, sequence 2,048, 4 per GPU, 16 to 128 GPUs; FSDP = 1 across nodes, so FSDP
  over a node's 8 GPUs and data parallelism across nodes (assumed from the table's "FSDP+DP");
  CHECKPOINT_POLICY SAVE_DOT_ONLY (as stated: every weight matmul's output saved, core_attn and
  layernorm recomputed).

What it shows: MaxText's steps are met with its remat policy (BF16 within a few percent at every
scale); Paxml's are met with full remat (within about 7 %), not with its stated policy (about 20 %
slower than that prices), so the Paxml runs recompute more than their policy names say, for a reason
not known here (the runs reader leaves Praxis's policy names unread: the profile's full remat, noted).
Hybrid sharding is what keeps the priced step level with the GPU count as measured: GPT-3 175B fully
sharded over 2,048 GPUs would be priced well above the measured step.
"""

from __future__ import annotations

import dataclasses

import supercluster as sc
from supercluster.parallelism.layout import Layout

#: (GPUs, BF16 s, FP8 s): MaxText Llama 2 70B, 2 x 4,096 tokens per GPU
MAXTEXT_70B = ((64, 6.999, 4.324), (128, 7.072, 4.556), (256, 7.153, 4.959), (512, 7.091, 5.043),
               (1024, 7.084, 5.062), (2048, 7.066, 4.93))
#: (GPUs, FP8 s): Paxml GPT-3 175B, 2 x 2,048 tokens per GPU
PAXML_175B = ((128, 7.47), (256, 7.58), (512, 7.60), (1024, 7.89), (2048, 8.02))
#: (GPUs, FP8 s, BF16 s): Paxml GPT 5B, 4 x 2,048 tokens per GPU
PAXML_5B = ((16, 0.47, 0.634), (32, 0.48, 0.639), (64, 0.48, 0.643), (128, 0.50, 0.651))
NODE = 8
ATTENTION_MLP = ("core_attn", "layernorm", "mlp")


def gpt(layers: int, hidden: int, heads: int, name: str) -> sc.ModelSpec:
    """Paxml's GPT: GPT-3's shape at this size, a 51,200-token vocabulary."""
    base = sc.load_model("gpt3-175b")
    return dataclasses.replace(base, key=name.lower().replace(" ", "-"), name=name, num_layers=layers,
                               d_model=hidden, ffn_dim=4 * hidden, num_heads=heads, num_kv_heads=heads,
                               vocab_size=51200)


def priced(model: sc.ModelSpec | str, gpus: int, per_gpu: int, seq: int, precision: str, shard: int,
           modules: tuple[str, ...] = ()) -> float:
    """Step seconds of FSDP (ZeRO-3) over shard groups of ``shard`` GPUs, replicated across the rest,
    recomputing ``modules`` (none: the whole layer), under the maxtext profile."""
    lay = Layout(dp=gpus, micro_batch=per_gpu, global_batch=per_gpu * gpus, seq_len=seq, precision=precision,
                 zero_stage=3, recompute="selective" if modules else "full", recompute_modules=modules,
                 dp_replicate=gpus // shard)
    return sc.estimate(sc.Job.of(model, gpu="h100-sxm", num_gpus=gpus, layout=lay, framework="maxtext")).step_time_s


Row = tuple[int, str, float, float, float, float]


def _row(model: sc.ModelSpec | str, gpus: int, precision: str, measured: float, per_gpu: int, seq: int,
         shard: int, policy: tuple[str, ...]) -> Row:
    """(GPUs, precision, measured s, priced s with the recipe's sharding and stated policy, with its
    sharding and full remat, fully sharded with full remat)."""
    return (gpus, precision, measured, priced(model, gpus, per_gpu, seq, precision, shard, policy),
            priced(model, gpus, per_gpu, seq, precision, shard), priced(model, gpus, per_gpu, seq, precision, gpus))


def maxtext_rows() -> list[Row]:
    return [_row("llama2-70b", gpus, precision, measured, 2, 4096, gpus if gpus <= 32 * NODE else 16 * NODE,
                 ATTENTION_MLP)
            for gpus, bf16, fp8 in MAXTEXT_70B for precision, measured in (("bf16", bf16), ("fp8", fp8))]


def paxml_175b_rows() -> list[Row]:
    model = gpt(96, 12288, 96, "GPT-3 175B")
    return [_row(model, gpus, "fp8", s, 2, 2048, 16 * NODE, ATTENTION_MLP) for gpus, s in PAXML_175B]


def paxml_5b_rows() -> list[Row]:
    model = gpt(24, 4096, 32, "GPT 5B")
    return [_row(model, gpus, precision, measured, 4, 2048, NODE, ("core_attn", "layernorm"))
            for gpus, fp8, bf16 in PAXML_5B for precision, measured in (("bf16", bf16), ("fp8", fp8))]


def table(title: str, rows: list[Row]) -> None:
    print(title)
    print(f"{'GPUs':>6} {'prec':>5} {'measured s':>11} {'policy s':>9} {'vs':>7} {'full s':>8} {'vs':>7} "
          f"{'all-FSDP s':>10} {'vs':>7}")
    for gpus, precision, measured, policy, full, everywhere in rows:
        print(f"{gpus:>6} {precision:>5} {measured:>11.3f} {policy:>9.3f} {policy / measured - 1:>+7.1%} "
              f"{full:>8.3f} {full / measured - 1:>+7.1%} {everywhere:>10.3f} {everywhere / measured - 1:>+7.1%}")


def main() -> None:
    table("MaxText Llama 2 70B, H100 (FSDP to 256 GPUs, then FSDP 128 x data parallel)", maxtext_rows())
    table("Paxml GPT-3 175B FP8, H100 (FSDP 128 x data parallel)", paxml_175b_rows())
    table("Paxml GPT 5B, H100 (FSDP 8 x data parallel)", paxml_5b_rows())


if __name__ == "__main__":
    main()
