"""Long-context MoE with context parallelism against a published table the validation files do not hold.

NVIDIA's Megatron-Core MoE model zoo (github.com/yanring/Megatron-MoE-ModelZoo best_practice/qwen3/
readme.md, "Long Context": Qwen3-235B-A22B, bf16, DeepEP, 32 nodes of 8 H100, TP 4, PP 8, VPP 4, EP 8,
CP 1-8, micro-batch 1, global batch 256, recompute of layernorm and moe) publishes TFLOP/s per GPU at
16K-128K tokens, once with the router forced to balance the experts and once dropless. The table's
TFLOP/s are Megatron-LM's num_floating_point_operations (causal attention counted half: "Only half of
the attention matrix is non-zero"); its main H100 table's 245 TFLOP/s at 19.7 s for 4K tokens checks
that convention. A step time is those FLOPs over the TFLOP/s of the 256 GPUs.

Prints, per sequence length, the measured steps and supercluster's (framework megatron+deepep+
embedding-split, as the model zoo's other rows in heldout-runs.csv; its router balanced, as the forced
runs are). The dropless runs' trained router loads some experts more than others; that imbalance is
not priced, so they are not a check of the model, only of how much a learned router costs here.
"""

from __future__ import annotations

import supercluster as sc

#: (sequence, CP, TFLOP/s per GPU forced-balance, dropless): the model zoo's long-context table
TABLE = ((16384, 1, 295, 237), (32768, 2, 335, 277), (65536, 4, 368, 320), (131072, 8, 389, 357))
GPUS, GLOBAL_BATCH = 256, 256


def megatron_flops_per_token(seq: int) -> float:
    """Megatron-LM's num_floating_point_operations per token for Qwen3-235B-A22B (94 layers, hidden 4096,
    64 heads of 128, 4 KV groups, 128 experts of 1536, top-8, SwiGLU, vocab 151,936), causal attention."""
    layers, h, q_proj, groups, heads = 94, 4096, 64 * 128, 4, 64
    attention = (1 + groups / heads + seq / h / 2) * q_proj / h
    mlp = 1536 * 8 * 1.5 / h
    logits = 151936 / (2 * layers * h)
    return 12 * layers * h * h * (attention + mlp + logits)


def main() -> None:
    print(f"{'tokens':>8} {'CP':>3} {'forced s':>9} {'dropless s':>11} {'predicted s':>12} {'vs forced':>10}")
    for seq, cp, forced, dropless in TABLE:
        job = sc.Job.from_label(f"tp4-pp8-dp{8 // cp}-cp{cp}-ep8-vpp4-etp1-mb1-z1-selective(layernorm,moe)-sp",
                                model="qwen3-235b-a22b", gpu="h100-sxm", global_batch=GLOBAL_BATCH, seq_len=seq,
                                framework="megatron+deepep+embedding-split")
        flops = megatron_flops_per_token(seq) * GLOBAL_BATCH * seq
        t_forced, t_dropless = (flops / (tf * 1e12 * GPUS) for tf in (forced, dropless))
        pred = sc.estimate(job).step_time_s
        print(f"{seq:>8} {cp:>3} {t_forced:>9.2f} {t_dropless:>11.2f} {pred:>12.2f} {pred / t_forced - 1:>+10.1%}")


if __name__ == "__main__":
    main()
