"""One transformer layer on one H100 against Transformer Engine's own published timings of it.

Transformer Engine's getting-started guide (NVIDIA/TransformerEngine docs/getting_started, "on an
NVIDIA H100 GPU") times a GPT layer's forward and backward: hidden 4096, FFN 16384 (GELU), 32 heads
of 128, causal, LayerNorm, biases, 8 sequences of 2,048 tokens, bf16 parameters. Its published
outputs (getting_started_pytorch_summary.csv, getting_started_jax_summary.csv):

- PyTorch, ``te.TransformerLayer`` under FP8 delayed scaling, no dropout: 21.84 ms;
- JAX (jitted, dropout off in every timed run): TE modules with TE attention in bf16 35.05 ms, the
  same under FP8 delayed scaling 22.64 ms, ``te_flax.TransformerLayer`` under FP8 22.81 ms.

(The PyTorch bf16 figure, 35.78 ms, is for separate modules with dropout 0.1: not like for like.)
Prints supercluster's time for the same layer (framework nemo-megatron: Transformer Engine's fused
modules; the optimizer step and the tiny head left out).
"""

from __future__ import annotations

from dataclasses import replace

import supercluster as sc

#: (precision, framework, published ms, what was timed)
CASES = (("fp8", "nemo-megatron+fp8-delayed", 21.84, "PyTorch te.TransformerLayer, FP8 delayed"),
         ("fp8", "nemo-megatron+fp8-delayed", 22.81, "JAX te_flax.TransformerLayer, FP8 delayed"),
         ("fp8", "nemo-megatron+fp8-delayed", 22.64, "JAX TE modules + TE attention, FP8 delayed"),
         ("bf16", "nemo-megatron", 35.05, "JAX TE modules + TE attention, bf16"))


def layer_ms(precision: str, framework: str) -> float:
    """The priced forward and backward of the guide's layer, in milliseconds."""
    gpt = sc.load_model("gpt3-175b")  # LayerNorm, GELU, biases: the guide's layer kind
    model = replace(gpt, num_layers=1, d_model=4096, ffn_dim=16384, num_heads=32, num_kv_heads=32, head_dim=128,
                    vocab_size=128, name="TE getting-started layer")
    layout = sc.Layout(tp=1, dp=1, micro_batch=8, global_batch=8, seq_len=2048, precision=precision,
                       recompute="none", zero_stage=0)
    step = sc.estimate(model, gpu="h100-sxm", num_gpus=1, layout=layout, framework=framework)
    return 1e3 * (step.step_time_s - step.ledger["optimizer"])


def main() -> None:
    print(f"{'precision':>9} {'published ms':>13} {'predicted ms':>13} {'vs published':>13}  timed")
    for precision, framework, published, what in CASES:
        pred = layer_ms(precision, framework)
        print(f"{precision:>9} {published:>13.2f} {pred:>13.2f} {pred / published - 1:>+13.1%}  {what}")


if __name__ == "__main__":
    main()
