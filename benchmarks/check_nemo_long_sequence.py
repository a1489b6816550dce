"""Dense long context with context parallelism against NVIDIA's long-sequence tables (not in the
validation files): does the error stay level as the sequence, and with it the context-parallel
degree, grows?

NVIDIA's NeMo documentation (docs/source/performance/performance_long_sequence.md in NVIDIA/NeMo)
publishes two tables of TFLOP/s per GPU, FP8, micro-batch 1, no pipeline:

* Llama 3 8B on DGX-B200, NeMo 25.04.rc2: 8K to 1M tokens on 2 to 256 GPUs, the batch (4M tokens)
  and TP / CP / DP given per row;
* Llama 2 7B on DGX-H100, NeMo 24.03.01: 4K to 1M tokens on 4 to 1,024 GPUs, TP / PP / DP / CP given
  per row, the batch not (taken here as 4M tokens, at least one sequence per data-parallel rank: it
  sets only the gradient accumulation, which hides the data-parallel traffic either way).

Their TFLOP/s are NeMo's model FLOPs (nemo/utils/flops_formulas.py llama2 / llama3: attention counted
in full, 12 s^2 h per layer, not causal: ModelSpec.model_flops_per_token(causal=False)); a step time
is those FLOPs over the TFLOP/s of the GPUs.
Neither table says whether activations were recomputed, so the step is priced both ways.

What it shows (read the columns, not one row): the error's drift from the shortest to the longest
sequence is what context parallelism and the attention kernel add; its level is the GPU's and the
release's (the same job at 8K on B200 is priced too fast by about as much).
"""

from __future__ import annotations

import supercluster as sc

#: (K tokens, GPUs, batch, TP, CP, DP, TFLOP/s per GPU): Llama 3 8B FP8, DGX-B200, NeMo 25.04.rc2
B200 = ((8, 2, 512, 1, 1, 2, 1671), (16, 4, 256, 1, 1, 4, 1717), (32, 8, 128, 1, 2, 4, 1624),
        (64, 16, 64, 1, 4, 4, 1600), (128, 32, 32, 2, 4, 4, 1588), (256, 64, 16, 4, 4, 4, 1590),
        (512, 128, 8, 4, 8, 4, 1619), (1024, 256, 4, 4, 16, 4, 1608))
#: (K tokens, TP, PP, DP, CP, TFLOP/s per GPU with CP): Llama 2 7B FP8, DGX-H100, NeMo 24.03.01
H100 = ((4, 1, 1, 4, 1, 768), (8, 1, 2, 4, 1, 730), (16, 2, 1, 8, 1, 660), (32, 2, 1, 8, 2, 610),
        (64, 4, 1, 8, 2, 574), (128, 4, 1, 8, 4, 555), (256, 4, 1, 8, 8, 549), (512, 8, 1, 4, 16, 549),
        (1024, 8, 1, 4, 32, 536))


def nemo_flops(model: str, seq: int, batch: int) -> float:
    """NeMo's model FLOPs of one step: the model's own count with full (not causal) attention, the
    PaLM / Megatron / NeMo convention that flops_formulas.py llama2 / llama3 write out."""
    return sc.load_model(model).model_flops_per_token(seq, causal=False) * seq * batch


def priced(model: str, gpu: str, label: str, batch: int, seq: int) -> tuple[float, float]:
    """Predicted step seconds with no recompute and with full recompute."""
    out = []
    for recompute in ("none", "full"):
        job = sc.Job.from_label(f"{label}-mb1-z1-{recompute}", model=model, gpu=gpu, global_batch=batch,
                                seq_len=seq, framework="nemo-megatron", precision="fp8")
        out.append(sc.estimate(job).step_time_s)
    return out[0], out[1]


def rows_priced(model: str, gpu: str, rows: list[tuple[int, int, int, int, int, int, int, int]]
                ) -> list[tuple[int, str, float, float, float]]:
    """(sequence, layout, measured s, priced s without and with full recompute) per table row given as
    (K tokens, GPUs, batch, TP, PP, CP, DP, TFLOP/s)."""
    out = []
    for k, gpus, batch, tp, pp, cp, dp, tflops in rows:
        seq = k * 1024
        label = f"tp{tp}-pp{pp}-dp{dp}-cp{cp}"
        out.append((seq, label, nemo_flops(model, seq, batch) / (tflops * 1e12 * gpus),
                    *priced(model, gpu, label, batch, seq)))
    return out


def b200_rows() -> list[tuple[int, int, int, int, int, int, int, int]]:
    return [(k, g, batch, tp, 1, cp, dp, tf) for k, g, batch, tp, cp, dp, tf in B200]


def h100_rows() -> list[tuple[int, int, int, int, int, int, int, int]]:
    return [(k, tp * pp * dp * cp, max(dp, 4096 // k), tp, pp, cp, dp, tf) for k, tp, pp, dp, cp, tf in H100]


def table(title: str, priced_rows: list[tuple[int, str, float, float, float]]) -> None:
    print(title)
    print(f"{'tokens':>8} {'layout':>20} {'measured s':>11} {'none s':>8} {'vs':>7} {'full s':>8} {'vs':>7}")
    for seq, label, measured, none, full in priced_rows:
        print(f"{seq:>8} {label:>20} {measured:>11.2f} {none:>8.2f} {none / measured - 1:>+7.1%} "
              f"{full:>8.2f} {full / measured - 1:>+7.1%}")


def main() -> None:
    table("Llama 3 8B, FP8, DGX-B200 (NeMo 25.04.rc2)", rows_priced("llama3-8b", "b200", b200_rows()))
    table("Llama 2 7B, FP8, DGX-H100 (NeMo 24.03.01; batch not published: 4M tokens)",
          rows_priced("llama2-7b", "h100-sxm", h100_rows()))


if __name__ == "__main__":
    main()
