"""One transformer layer on one H100 against Transformer Engine's own published timing of it.

Transformer Engine's getting-started guide (NVIDIA/TransformerEngine docs/getting_started:
getting_started_pytorch.py and its published output, getting_started_pytorch_summary.csv; "on an
NVIDIA H100 GPU") times a GPT layer's forward and backward: hidden 4096, FFN 16384 (GELU), 32 heads
of 128, causal, LayerNorm, biases, 8 sequences of 2,048 tokens, bf16 parameters. ``te.TransformerLayer``
under FP8 delayed scaling, without dropout, takes 21.84 ms. The bf16 figure published beside it is
for a layer of separate modules with dropout (0.1 on the attention and both residual branches, torch's
GELU): 35.78 ms; it is printed for scale, not as a like-for-like check.

Prints supercluster's time for the same layer (framework nemo-megatron: Transformer Engine's fused
modules; the layer's share of the step, the optimizer step and the tiny head left out).
"""

from __future__ import annotations

from dataclasses import replace

import supercluster as sc

#: (precision, framework, published ms, what was timed)
CASES = (("fp8", "nemo-megatron+fp8-delayed", 21.84, "te.TransformerLayer, FP8 delayed scaling, no dropout"),
         ("bf16", "nemo-megatron", 35.78, "separate TE modules, dropout 0.1, torch GELU (for scale)"))


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
