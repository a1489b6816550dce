"""Human tables (rich) and machine JSON for every command. No cost formulas here."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from .hardware import GpuSpec, SystemSpec
from .models import ModelSpec
from .step import LEDGER, StepBreakdown
from .units import GiB, fmt_bytes

LEDGER_HELP = {
    "ideal_compute": "model FLOPs at dense peak",
    "gemm_inefficiency": "GEMMs below peak",
    "attention_inefficiency": "flash attention below peak",
    "memory_bound_ops": "norms, activations, adds, loss",
    "recompute": "activation recomputation",
    "exposed_tp_comm": "TP all-gather / reduce-scatter",
    "exposed_cp_comm": "CP ring K/V exchange",
    "exposed_ep_comm": "MoE all-to-all",
    "exposed_pp_comm": "pipeline send / recv",
    "pipeline_bubble": "pipeline fill and drain",
    "exposed_dp_comm": "gradient / parameter sync",
    "optimizer": "Adam step",
    "stragglers": "waiting for the slowest rank",
}


def breakdown_json(b: StepBreakdown, **extra: Any) -> dict[str, Any]:
    return {
        **extra,
        "step_time_s": b.step_time_s, "tokens_per_s": b.tokens_per_s, "tokens_per_s_per_gpu": b.tokens_per_s_per_gpu,
        "tflops_per_gpu": b.tflops_per_gpu, "mfu": b.mfu, "hfu": b.hfu,
        "flop_convention": "6N + 12 L a d s per token (full non-causal attention, PaLM/Megatron), no recompute; "
                           "vs dense peak of the precision used",
        "memory_per_gpu_bytes": b.memory_per_gpu_bytes, "hbm_bytes": b.hbm_bytes, "fits": b.fits,
        "fit_reason": None if b.fits else fit_reason(b),
        "memory": b.memory, "ledger": b.ledger, "microbatches": b.microbatches,
    }


def print_breakdown(console: Console, b: StepBreakdown, title: str) -> None:
    t = Table(title=title, show_lines=False)
    t.add_column("ledger (per step)")
    t.add_column("seconds", justify="right")
    t.add_column("share", justify="right")
    t.add_column("what")
    for name in LEDGER:
        v = b.ledger[name]
        if v > 0 or name == "ideal_compute":
            t.add_row(name, f"{v:.4f}", f"{100 * v / b.step_time_s:.1f}%", LEDGER_HELP[name])
    t.add_row("[bold]step time[/bold]", f"[bold]{b.step_time_s:.4f}[/bold]", "100.0%", "")
    console.print(t)
    console.print(
        f"tokens/s {b.tokens_per_s:,.0f} ({b.tokens_per_s_per_gpu:,.0f} per GPU) | "
        f"{b.tflops_per_gpu:.0f} TFLOP/s per GPU | MFU {100 * b.mfu:.1f}% | HFU {100 * b.hfu:.1f}%"
    )
    m = b.memory
    status = "[green]fits[/green]" if b.fits else "[red]does NOT fit[/red]"
    console.print(
        f"memory per GPU {m['memory_per_gpu_bytes'] / GiB:.1f} GiB of {b.hbm_bytes / GiB:.0f} GiB ({status}): "
        f"weights {fmt_bytes(m['mem_weights_bytes'])}, grads {fmt_bytes(m['mem_grads_bytes'])}, "
        f"optimizer {fmt_bytes(m['mem_optimizer_bytes'])}, activations {fmt_bytes(m['mem_activations_bytes'])}, "
        f"other {fmt_bytes(m['mem_other_bytes'])}"
    )
    if not b.fits:
        console.print(f"[yellow]does not fit: {fit_reason(b)}[/yellow]")


def fit_reason(b: StepBreakdown) -> str:
    """Why a layout does not fit, naming the largest memory term and what reduces it."""
    parts = {k: v for k, v in b.memory.items() if k != "memory_per_gpu_bytes"}
    top = max(parts, key=lambda k: parts[k])
    over = (b.memory_per_gpu_bytes - b.hbm_bytes) / GiB
    advice = {
        "mem_activations_bytes": "try --recompute full, a larger --pp or --cp, or --micro-batch 1",
        "mem_weights_bytes": "try a larger --tp or --pp, or --zero 3",
        "mem_grads_bytes": "try --zero 2 or 3, or a larger --tp / --pp",
        "mem_optimizer_bytes": "try --zero 1 or higher with a larger data-parallel group",
        "mem_other_bytes": "reduce the framework reserve",
    }[top]
    return f"{over:.1f} GiB over; largest term {top.removeprefix('mem_').removesuffix('_bytes')} " \
           f"({parts[top] / GiB:.1f} GiB): {advice}"


def gpus_table(gpus: dict[str, GpuSpec]) -> Table:
    t = Table(title="GPUs (dense peaks; sources in data/gpus.toml)")
    for c in ("key", "name", "bf16 TF", "fp8 TF", "fp4 TF", "HBM GiB", "HBM TB/s", "scale-up GB/s", "domain",
              "TDP W", "GEMM frac bf16"):
        t.add_column(c)
    for k, g in gpus.items():
        p = g.peak_flops_per_s
        t.add_row(k, g.name, f"{p['bf16'] / 1e12:.0f}", f"{p['fp8'] / 1e12:.0f}", f"{p['fp4'] / 1e12:.0f}",
                  f"{g.hbm_bytes / GiB:.0f}", f"{g.hbm_bytes_per_s / 1e12:.2f}", f"{g.scaleup_bytes_per_s / 1e9:.0f}",
                  str(g.scaleup_domain), f"{g.tdp_w:.0f}", f"{g.gemm_frac['bf16']:.3f}")
    return t


def systems_table(systems: dict[str, SystemSpec]) -> Table:
    t = Table(title="Systems")
    for c in ("key", "name", "gpu", "GPUs/node", "scale-up domain", "NIC Gb/s per GPU"):
        t.add_column(c)
    for k, s in systems.items():
        t.add_row(k, s.name, s.gpu, str(s.gpus_per_node), str(s.scaleup_domain), f"{s.nic_bytes_per_s * 8 / 1e9:.0f}")
    return t


def models_table(models: dict[str, ModelSpec]) -> Table:
    t = Table(title="Models")
    for c in ("key", "name", "params B", "active B", "layers", "width", "heads/kv", "ffn", "experts"):
        t.add_column(c)
    for k, m in models.items():
        ex = f"{m.top_k}/{m.num_experts}" if m.is_moe else ""
        t.add_row(k, m.name, f"{m.num_params / 1e9:.1f}", f"{m.num_active_params / 1e9:.1f}", str(m.num_layers),
                  str(m.d_model), f"{m.num_heads}/{m.num_kv_heads}", str(m.ffn_dim), ex)
    return t


def validation_table(result: dict[str, Any]) -> Table:
    t = Table(title="Validation against published runs (error = predicted / measured - 1)")
    for c in ("id", "layout", "predicted s", "measured s", "error", "note"):
        t.add_column(c)
    for r in result["rows"]:
        err = "unsupported" if not r.supported else f"{100 * r.error:+.1f}%"
        color = "red" if (not r.supported or abs(r.error) > 0.25) else ("yellow" if abs(r.error) > 0.10 else "green")
        pred = f"{r.predicted_step_time_s:.3f}" if r.predicted_step_time_s is not None else "-"
        t.add_row(r.id, r.layout, pred, f"{r.measured_step_time_s:.3f}", f"[{color}]{err}[/{color}]", r.reason)
    return t
