"""Human tables (rich) and machine JSON for every command. No cost formulas here."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..hardware.specs import GpuSpec, SystemSpec
from ..models.spec import ModelSpec
from ..parallelism.framework import Framework
from ..parallelism.layout import Layout
from ..perf.step import LEDGER, StepBreakdown
from ..units import GiB, fmt_bytes, fmt_count, fmt_ibytes, fmt_seconds, fmt_usd, fmt_watt_hours, fmt_watts
from ..validation.validate import RANK_TIE

LEDGER_HELP = {
    "ideal_compute": "the job's FLOPs at dense peak",
    "gemm_inefficiency": "GEMMs below peak (fp8/fp4: and their casts)",
    "attention_inefficiency": "attention kernels below peak",
    "memory_bound_ops": "norms, acts, adds, loss, CP merges, grad sums",
    "kernel_launch": "GPU waiting for the host to launch kernels",
    "comm_contention": "compute slowed by the SMs hidden TP/CP holds",
    "recompute": "activation recomputation",
    "exposed_tp_comm": "TP all-gather / reduce-scatter",
    "exposed_cp_comm": "CP ring K/V exchange",
    "exposed_ep_comm": "MoE token dispatch and combine",
    "exposed_pp_comm": "pipeline send / recv",
    "stage_imbalance": "the heaviest pipeline stage's work over the mean",
    "pipeline_bubble": "pipeline fill and drain",
    "exposed_dp_comm": "gradient / parameter sync (+ SMs it holds)",
    "optimizer": "Adam step",
    "stragglers": "pace of the slowest GPU of the job",
}


#: what tailors :func:`fit_reason`: the layout, its framework and (optionally) the model
Fit = tuple[Layout, Framework | None] | tuple[Layout, Framework | None, ModelSpec]


def model_label(m: ModelSpec) -> str:
    """A model's name and size, as every estimate and plan names it: ``Llama 3 405B (405.8 B
    parameters)``, ``DeepSeek-V3 671B (671.0 B parameters, 37.6 B active)``."""
    active = f", {m.num_active_params / 1e9:,.1f} B active" if m.num_active_params < m.num_params else ""
    return f"{m.name} ({m.num_params / 1e9:,.1f} B parameters{active})"


def breakdown_json(b: StepBreakdown, fit: Fit | None = None, **extra: Any) -> dict[str, Any]:
    """The JSON of a priced step; ``fit`` (the layout, its framework, the model) tailors ``fit_reason``."""
    return {
        **extra,
        "step_time_s": b.step_time_s, "tokens_per_s": b.tokens_per_s, "tokens_per_s_per_gpu": b.tokens_per_s_per_gpu,
        "tflops_per_gpu": b.tflops_per_gpu, "mfu": b.mfu, "hfu": b.hfu,
        "flop_convention": "6N + 12 L a d s per token (full non-causal attention, PaLM/Megatron), no recompute; "
                           "vs dense peak of the precision used",
        "memory_per_gpu_bytes": b.memory_per_gpu_bytes, "hbm_bytes": b.hbm_bytes, "fits": b.fits,
        "fit_reason": None if b.fits else fit_reason(b, *(fit or ())),
        "memory": b.memory, "ledger": b.ledger, "microbatches": b.microbatches,
        "gemm_tiling_delta_s": b.gemm_tiling_delta_s, "gemm_cast_s": b.gemm_cast_s,
        **({"moe": b.moe} if b.moe else {}),
    }


def print_breakdown(console: Console, b: StepBreakdown, title: str, fit: Fit | None = None) -> None:
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
    if abs(b.gemm_tiling_delta_s) >= 0.005 * b.step_time_s:
        console.print(tiling_line(b), markup=False)
    if b.gemm_cast_s >= 0.005 * b.step_time_s:
        console.print(cast_line(b), markup=False)
    m = b.memory
    status = "[green]fits[/green]" if b.fits else "[red]does NOT fit[/red]"
    console.print(
        f"memory per GPU {m['memory_per_gpu_bytes'] / GiB:.1f} GiB of {b.hbm_bytes / GiB:.0f} GiB ({status}): "
        f"weights {fmt_ibytes(m['mem_weights_bytes'])}, grads {fmt_ibytes(m['mem_grads_bytes'])}, "
        f"optimizer {fmt_ibytes(m['mem_optimizer_bytes'])}, activations {fmt_ibytes(m['mem_activations_bytes'])}, "
        f"other {fmt_ibytes(m['mem_other_bytes'])}"
    )
    if not b.fits:
        console.print(f"[yellow]does not fit: {fit_reason(b, *(fit or ()))}[/yellow]")
    if b.moe:
        console.print(moe_line(b), markup=False)


def tiling_line(b: StepBreakdown) -> str:
    """What the layers' GEMM shapes gain or lose on the SMs' tile waves against the shapes the GPU's GEMM
    rate was measured at (part of ``gemm_inefficiency``): thin TP slices and small experts leave SMs idle."""
    share = 100 * b.gemm_tiling_delta_s / b.step_time_s
    if b.gemm_tiling_delta_s > 0:
        return (f"GEMM shapes: {b.gemm_tiling_delta_s:.3f} s of gemm_inefficiency ({share:.1f} % of the step) are SMs "
                "left idle by tiles past the GEMMs' edges and part-filled last waves (less tensor parallelism, "
                "more tokens a micro-batch or larger experts fill them better)")
    return (f"GEMM shapes: they fill the SMs' tile waves better than the shapes the GPU's GEMM rate was measured "
            f"at, {-b.gemm_tiling_delta_s:.3f} s ({-share:.1f} % of the step) faster")


def cast_line(b: StepBreakdown) -> str:
    """What the fp8 / fp4 casts before the GEMMs take (part of ``gemm_inefficiency``)."""
    share = 100 * b.gemm_cast_s / b.step_time_s
    return (f"low-precision casts: {b.gemm_cast_s:.3f} s of gemm_inefficiency ({share:.1f} % of the step) "
            "cast each GEMM's input and output gradient once a micro-batch and its weights once a step")


def moe_line(b: StepBreakdown) -> str:
    """What an MoE step's expert layers were priced with: the routing assumed, the busiest expert-parallel
    rank's load, one dispatch call and where its bytes go, and what of it stays exposed."""
    e = b.moe or {}
    router = ("a balanced router (tokens spread at random over the experts)" if e["router"] == "random"
              else "a fixed round-robin gate (every rank the same tokens)")
    if e["router"] == "random" and e.get("router_groups"):
        router += f" inside each token's best {e['router_group_topk']} of {e['router_groups']} expert groups"
    per_gpu = float(e["experts_per_gpu"])  # type: ignore[arg-type]
    cap = float(e.get("capacity_factor") or 0.0)  # type: ignore[arg-type]
    routing = ("dropless" if cap <= 0 else f"token-drop at capacity factor {cap:g}"
               + (", inputs padded to capacity" if e.get("padded") else ""))
    line = f"MoE: {e['experts']} experts, top-{e['top_k']}, EP {e['ep']} ({per_gpu:g} a GPU), {router}, {routing}"
    host = (f"; the host launches {float(e['host_kernels']):.0f} kernels more a layer and micro-batch than "  # type: ignore[arg-type]
            "a dense layer's" + (" and waits for the router's counts before the experts'" if e.get("host_waits")
                                 else ""))
    if int(e["ep"]) <= 1:  # type: ignore[call-overload]
        held = "" if cap <= 0 else f"; experts run {float(e['load_factor']):.2f} x the mean tokens"  # type: ignore[arg-type]
        return line + held + "; no expert parallelism: no dispatch" + host
    load = float(e["load_factor"])  # type: ignore[arg-type]
    held = (f"every EP rank runs {load:.2f} x the mean tokens" if e.get("padded")
            else f"busiest EP rank {100 * (load - 1):+.1f} % tokens over the mean"
            + (" (at most the capacity)" if cap > 0 else ""))
    up, out = e.get("dispatch_scaleup_s"), e.get("dispatch_scaleout_s")
    paths = "" if up is None or out is None else (
        f": {float(up) * 1e3:.2f} ms on the scale-up links, {float(out) * 1e3:.2f} ms on the scale-out network, "  # type: ignore[arg-type]
        "the rest latency")
    return (line + f"; {held}; "  # type: ignore[arg-type]
            f"a dispatch or combine {float(e['dispatch_call_s']) * 1e3:.2f} ms{paths} "  # type: ignore[arg-type]
            f"({float(e['dispatch_calls']):g} a layer and micro-batch), "  # type: ignore[arg-type]
            f"{100 * float(e['remote_byte_share']):.0f} % of its bytes over the scale-out "  # type: ignore[arg-type]
            f"network{' before DeepEP sends each token once a node' if e['node_dedup'] else ''}; "
            f"exposed {b.ledger['exposed_ep_comm']:.2f} s a step" + host)


def sensitivity_table(rows: list[Any], title: str) -> Table:
    """``estimate --sensitivity``: the step with each rate scaled, one row per resource."""
    factors = sorted({r.factor for r in rows})
    t = Table(title=title)
    t.add_column("faster part")
    for f in factors:
        t.add_column(f"step at x{f:g}", justify="right")
        t.add_column("speedup", justify="right")
    t.add_column(f"elasticity (x{factors[0]:g})", justify="right")
    for res in dict.fromkeys(r.resource for r in rows):
        mine = {r.factor: r for r in rows if r.resource == res}
        cells = [c for f in factors for c in (f"{mine[f].step_time_s:.4f}", f"{mine[f].speedup:.3f}x")]
        t.add_row(mine[factors[0]].label, *cells, f"{mine[factors[0]].elasticity:+.2f}")
    return t


GROUP_HELP = {"tp": "tensor parallel", "cp": "context parallel", "ep": "expert parallel, all-to-all",
              "dp": "data parallel, dense weights", "edp": "expert data parallel", "pp": "pipeline neighbours"}


def placement_table(rows: list[dict[str, Any]], title: str) -> Table:
    """``estimate --placement``: each parallel group's span and the tier its traffic climbs to."""
    t = Table(title=title)
    for col, just in (("group", "left"), ("members", "right"), ("rank stride", "right"), ("per domain", "right"),
                      ("domains", "right"), ("span GPUs", "right"), ("tops out at", "left"),
                      ("groups at once", "right"), ("slowdown", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in rows:
        t.add_row(f"{r['group']} ({GROUP_HELP.get(str(r['group']), '')})", f"{r['members']:,}", f"{r['stride']:,}",
                  f"{r['per_domain']:,}", f"{r['domains']:,}", f"{r['span_gpus']:,}", str(r["tier_name"]),
                  f"{r['concurrent_groups']:,}", f"{r['slowdown']:.2f}x")
    return t


def fit_reason(b: StepBreakdown, layout: Layout | None = None, fw: Framework | None = None,
               model: ModelSpec | None = None) -> str:
    """Why a layout does not fit, naming the largest memory term and what reduces it; given the
    layout (and its framework), only the remedies it does not already use; given the model, only
    those it allows (no context parallelism for Mamba / Gated DeltaNet layers)."""
    parts = {k: v for k, v in b.memory.items() if k != "memory_per_gpu_bytes"}
    top = max(parts, key=lambda k: parts[k])
    over = (b.memory_per_gpu_bytes - b.hbm_bytes) / GiB
    if layout is None:  # no layout given: advise every remedy
        tp, zero, mb, recompute, sp = 1, 0, 2, "none", False
    else:
        tp, zero, mb, recompute = layout.tp, layout.zero_stage, layout.micro_batch, layout.recompute
        sp = layout.sequence_parallel if layout.sequence_parallel is not None else bool(fw and fw.sequence_parallel)
    tips = {
        "mem_activations_bytes": (["--sequence-parallel" + (" (with --tp > 1)" if tp == 1 else "")]
                                  if not (sp and tp > 1) else [])
        + (["--recompute full"] if recompute != "full" else [])
        + ["a larger --pp" + (" or --cp" if model is None or model.context_parallel_ok else "")]
        + (["--micro-batch 1"] if mb > 1 else []),
        "mem_weights_bytes": ["a larger --tp or --pp"] + (["--zero 3"] if zero < 3 else []),
        "mem_grads_bytes": (["--zero 2 or 3"] if zero < 2 else []) + ["a larger --tp / --pp"],
        "mem_optimizer_bytes": (["--zero 1 or higher with a larger data-parallel group"] if zero < 1
                                else ["a larger data-parallel group or --tp / --pp"]),
        "mem_other_bytes": ["reduce the framework reserve"],
    }[top]
    advice = "try " + (tips[0] if len(tips) == 1 else ", ".join(tips[:-1]) + ", or " + tips[-1])
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
    for c in ("key", "name", "gpu", "GPUs/node", "scale-up domain", "NIC Gb/s per GPU", "scale-out", "host CPU"):
        t.add_column(c)
    for k, s in systems.items():
        gbit = s.nic_bytes_per_s * 8 / 1e9
        ports = f"{s.nic_ports} x {gbit / s.nic_ports:g}G" if s.nic_ports > 1 else "1 port"
        t.add_row(k, s.name, s.gpu, str(s.gpus_per_node), str(s.scaleup_domain), f"{gbit:.0f}",
                  ports + (f", {s.switch}" if s.switch else ""), s.host_cpu)
    return t


def models_table(models: dict[str, ModelSpec]) -> Table:
    t = Table(title="Models")
    for c in ("key", "name", "params B", "active B", "layers", "width", "heads/kv", "ffn", "experts"):
        t.add_column(c)
    for k, m in models.items():
        ex = f"{m.top_k}/{m.num_experts}" if m.is_moe else ""
        kinds = [f"{n} {k}" for n, k in ((m.ssm_layers, "Mamba"), (m.gdn_layers, "GDN")) if n]
        layers = str(m.num_layers) + (f" ({', '.join(kinds)}, {m.attention_layers} attn)" if kinds else "")
        t.add_row(k, m.name, f"{m.num_params / 1e9:.1f}", f"{m.num_active_params / 1e9:.1f}", layers,
                  str(m.d_model), f"{m.num_heads}/{m.num_kv_heads}", str(m.ffn_dim), ex)
    return t


def validation_table(result: dict[str, Any]) -> Table:
    t = Table(title="Validation against published runs (error = predicted / measured - 1)")
    for c in ("id", "layout", "predicted s", "measured s", "error", "note"):
        t.add_column(c)
    for r in result["rows"]:
        # (a row priced without a measured time has no error; an unsupported one may have neither)
        if not r.supported or r.error is None:
            err, color = ("unsupported", "red") if not r.supported else ("-", "default")
        else:
            err = f"{100 * r.error:+.1f}%"
            color = "red" if abs(r.error) > 0.25 else ("yellow" if abs(r.error) > 0.10 else "green")
        pred, meas = (f"{x:.3f}" if x is not None else "-" for x in (r.predicted_step_time_s, r.measured_step_time_s))
        t.add_row(r.id, r.layout, pred, meas, f"[{color}]{err}[/{color}]", r.reason)
    return t


def groups_table(groups: list[dict[str, Any]], title: str) -> Table:
    """Rows of :func:`~supercluster.validation.validate.by_group`: count, MAPE, error range per group."""
    t = Table(title=title)
    for col in ("group", "rows", "MAPE", "error range"):
        t.add_column(col, justify="left" if col == "group" else "right")
    for g in groups:
        rng = "-" if g["min_error"] is None else f"{100 * g['min_error']:+.1f} .. {100 * g['max_error']:+.1f} %"
        rows = f"{g['rows']}" + (f" ({g['unsupported']} unsupported)" if g["unsupported"] else "")
        t.add_row(str(g["group"]), rows, f"{100 * g['mape']:.1f} %", rng)
    return t


def sweep_table(cells: list[dict[str, Any]], title: str) -> Table:
    """Rows of :func:`~supercluster.planner.sweep.best_per_cell`: each cell's fastest fitting layout."""
    t = Table(title=title)
    for col in ("model", "gpu", "gpus", "seq", "batch", "prec", "fit / legal", "layout", "mb", "recompute", "zero",
                "step s", "tok/s/GPU", "MFU", "mem GiB"):
        t.add_column(col, justify="left" if col in ("model", "gpu", "prec", "layout", "recompute") else "right")
    for c in cells:
        head = [c["model"], c["gpu"], f"{c['gpus']:,}", f"{c['seq_len']:,}", f"{c['global_batch']:,}", c["precision"],
                f"{c['fit']:,} / {c['legal']:,}"]
        b = c["best"]
        if b is None:
            t.add_row(*head, "none fits", *["-"] * 7)
            continue
        t.add_row(*head, f"tp{b['tp']}-pp{b['pp']}-cp{b['cp']}", str(b["micro_batch"]), b["recompute"],
                  str(b["zero"]), f"{b['step_time_s']:.3f}", f"{b['tokens_per_s_per_gpu']:,.0f}",
                  f"{100 * b['mfu']:.1f}%", f"{b['memory_per_gpu_bytes'] / GiB:.1f}")
    return t


def plan_table(result: Any, title: str) -> Table:
    """Top-k layouts of a :class:`~supercluster.planner.search.PlanResult`."""
    t = Table(title=title)
    for col in ("#", "gpus", "layout", "mb", "zero", "recompute", "sp", "prec", "step s", "MFU", "mem GiB",
                "$/Mtok", "J/tok"):
        t.add_column(col, justify="right" if col not in ("layout", "recompute", "prec") else "left")
    for c in result.top:
        lay = c.layout
        t.add_row(str(c.rank), f"{c.num_gpus:,}", lay.short(), str(lay.micro_batch), str(lay.zero_stage),
                  lay.recompute_label, "y" if lay.sequence_parallel else "n", lay.precision, f"{c.step_time_s:.3f}",
                  f"{100 * c.mfu:.1f}%", f"{c.memory_per_gpu_bytes / GiB:.1f}", f"{c.cost_usd_per_mtok:.3f}",
                  f"{c.energy_j_per_token:.3f}")
    return t


def print_plan(console: Console, result: Any, title: str) -> None:
    console.print(plan_table(result, title))
    console.print(f"evaluated {result.evaluated:,} layouts, {result.feasible:,} fit, in {result.seconds:.2f} s")
    if result.why:
        b, r = result.top[0], result.top[1]
        gap = r.step_time_s / b.step_time_s - 1.0
        close = (f" ({100 * gap:.1f} % apart, under the {100 * RANK_TIE:.0f} % that validate's ranking counts as a "
                 "tie between published steps: too close to call)" if gap < RANK_TIE else f" ({100 * gap:.1f} % apart)")
        console.print(f"why #1 ({b.layout.label()}) beats #2 ({r.layout.label()}): step "
                      f"{b.step_time_s:.4f} s vs {r.step_time_s:.4f} s{close}; ledger lines that differ (s):")
        for name, d in result.why[:6]:
            console.print(f"  {name:24s} {d:+.4f}  ({LEDGER_HELP[name]})")
    if len(result.by_ep) > 1:
        console.print(ep_lines(result))
    if result.cp_a2a_step_time_s is not None:
        b, a2a = result.best, result.cp_a2a_step_time_s
        console.print(f"context parallelism: #1 passes K/V around a ring of {b.layout.cp} CP ranks; all-to-all CP "
                      f"(framework option +cp-a2a) on the same layout: {a2a:.4f} s "
                      f"({100 * (a2a / b.step_time_s - 1):+.1f} %)")
    if result.pareto:
        console.print(f"Pareto front ({result.objective} vs {'memory' if result.objective == 'time' else 'time'}): "
                      + ", ".join(f"{c.layout.label()} ({c.step_time_s:.3f} s, "
                                  f"{c.memory_per_gpu_bytes / GiB:.0f} GiB)" for c in result.pareto[:8]))


def ep_lines(result: Any) -> str:
    """An MoE plan: the best fitting layout at each expert-parallel degree, and for each the ledger
    lines that most separate it from the plan's best (why EP is kept where it pays, dropped where not)."""
    best = result.best
    lines = [f"expert parallelism: the best layout at each EP degree (#1 at EP {best.layout.ep}):"]
    width = max(len(c.layout.label()) for c in result.by_ep)
    for c in result.by_ep:
        head = (f"  EP {c.layout.ep:<4d} {c.layout.label():{width}s} {c.step_time_s:9.3f} s  "
                f"{100 * (c.step_time_s / best.step_time_s - 1):+6.1f} %")
        if c.layout.ep == best.layout.ep:
            lines.append(head + "  (the plan's #1 EP)")
            continue
        diff = sorted(((k, c.ledger[k] - best.ledger[k]) for k in c.ledger), key=lambda kv: -abs(kv[1]))[:3]
        lines.append(head + "  " + ", ".join(f"{k} {d:+.2f} s" for k, d in diff if abs(d) > 1e-9))
    return "\n".join(lines)


RUN_HELP = {
    "checkpoint_stalls": "training paused to write checkpoints",
    "failed_work": "work since the last checkpoint, lost at interruptions",
    "restarts": "detection, restart, reload; planned maintenance",
    "degraded_replicas": "elastic: data-parallel replicas out for repair",
}


def run_ledger_table(summary: dict[str, Any], title: str) -> Table:
    """The entropy ledger of a run: peak FLOPs x GPUs x wall time down to useful model FLOPs."""
    t = Table(title=title)
    for col in ("line", "GPU-days (whole machine)", "EFLOP", "share", "what"):
        t.add_column(col, justify="left" if col in ("line", "what") else "right")
    led, fl = summary["ledger_s"], summary["ledger_flops"]
    wall = sum(led.values())
    gpus = summary["gpus"]
    for name, v in led.items():
        if v <= 0 and name != "ideal_compute":
            continue
        label = "useful model FLOPs (ideal)" if name == "ideal_compute" else name
        t.add_row(label, f"{v * gpus / 86400:,.0f}", f"{fl[name] / 1e18:,.0f}", f"{100 * v / wall:.2f}%",
                  RUN_HELP.get(name) or LEDGER_HELP.get(name, ""))
    t.add_row("[bold]peak x GPUs x wall[/bold]", f"[bold]{wall * gpus / 86400:,.0f}[/bold]",
              f"[bold]{summary['peak_flops_total'] / 1e18:,.0f}[/bold]", "100.00%", "")
    return t


def print_run(console: Console, s: dict[str, Any], title: str) -> None:
    console.print(run_ledger_table(s, title))
    ck = s["checkpoint"]
    console.print(
        f"layout {s['layout']} | step {s['step_time_s']:.3f} s | MFU {100 * s['mfu']:.1f}% | job MTBF "
        f"{s['job_mtbf_h']:.2f} h | interruptions p10/p50/p90 {s['interruptions_p10']:.0f}/"
        f"{s['interruptions_p50']:.0f}/{s['interruptions_p90']:.0f}")
    console.print(
        f"ETTR p10/p50/p90 {100 * s['ettr_p10']:.1f}/{100 * s['ettr_p50']:.1f}/{100 * s['ettr_p90']:.1f}% | "
        f"checkpoint every {s['checkpoint_interval_s'] / 60:.1f} min "
        f"(Young {s['checkpoint_interval_young_s'] / 60:.1f}, Daly {s['checkpoint_interval_daly_s'] / 60:.1f}); "
        f"state {fmt_bytes(ck['state_bytes'])}, stall "
        f"{ck['stall_s']:.1f} s, recovery {ck['recovery_s'] / 60:.1f} min")
    console.print(
        f"wall days p10/p50/p90 {s['wall_days_p10']:.1f}/{s['wall_days_p50']:.1f}/{s['wall_days_p90']:.1f} | "
        f"{s['tokens']:.3g} tokens | {fmt_count(s['gpu_hours'])} GPU-hours | "
        f"{fmt_watt_hours(s['energy_mwh'] * 1e6)} at {fmt_watts(s['facility_power_mw'] * 1e6)} | "
        f"{fmt_usd(s['cost_usd'])} at ${s['gpu_hour_usd']:.2f}/GPU-h")


def frameworks_table(fws: dict[str, Framework]) -> Table:
    """What each framework profile overlaps, shards and runs (data/frameworks.toml)."""
    t = Table(title="Framework profiles (data/frameworks.toml; '<name>+compile' prices torch.compile, "
                    "'<name>+ep-overlap' overlaps the MoE all-to-all with compute, '<name>+tp-overlap' the TP "
                    "collectives: 'async' = PyTorch's async TP, the forward's only)")
    for c in ("key", "attention", "elementwise", "SP", "TP ovl", "DP ovl", "PP ovl", "EP ovl", "selective",
              "Z3 gathers", "CP ring", "era"):
        t.add_column(c, no_wrap=True)
    t.add_column("what", overflow="fold", min_width=48)
    yn = {True: "y", False: "n"}
    for k, f in fws.items():
        era = f"{f.era_of} <= {f.until_year}" if f.era_of else ""
        ring = (f.cp_rotate + (" (K/V repeated)" if f.cp_kv_repeated else "")) if f.context_parallel else "-"
        dp = yn[f.dp_overlap] + (f" (z{f.dp_overlap_from_zero}+)" if f.dp_overlap and f.dp_overlap_from_zero else "")
        tp = yn[f.tp_comm_overlap] + (" (async)" if f.tp_overlap == "async-tp" else "")
        t.add_row(k, f.attention, f.elementwise, yn[f.sequence_parallel], tp, dp,
                  yn[f.pp_overlap], yn[f.ep_overlap], f.selective_recompute, str(f.zero3_gathers_per_layer), ring, era,
                  f.doc)
    return t


def print_timeline(console: Console, s: dict[str, Any], title: str) -> None:
    """Per stage: compute, send, tail and idle seconds of the simulated step."""
    t = Table(title=title)
    layers = s.get("layers_per_chunk") or []
    for col in ("stage", *(["layers"] if layers else []), "first forward s", "compute s", "send s", "DP/opt/wait s",
                "idle s", "idle %", "peak GiB"):
        t.add_column(col, justify="right")
    step = s["step_time_s"]
    for r in s["stages"]:
        lay = ["+".join(str(x) for x in layers[r["stage"]])] if layers else []
        t.add_row(str(r["stage"]), *lay, f"{r['first_forward_s']:.3f}", f"{r['compute_s']:.3f}",
                  f"{r['send_s']:.3f}", f"{r['tail_s']:.3f}", f"{r['idle_s']:.3f}", f"{100 * r['idle_s'] / step:.1f}",
                  f"{r.get('memory_bytes', 0.0) / GiB:.1f}")
    console.print(t)
    if s.get("gantt"):
        console.print("F forward, B backward, q fp8/fp4 weight casts, - send, d DP sync, o optimizer, "
                      "w straggler wait, . idle", style="dim")
        for i, line in enumerate(s["gantt"]):
            console.print(f"stage {i:>3} |{line}|", markup=False, highlight=False)
    schedule = "1F1B" if s["vpp"] == 1 else f"interleaved 1F1B x {s['vpp']}"
    note = "equals the ledger's" if s["jitter"] == 0 and not s.get("exact_stages") else \
        ", ".join(x for x in (f"jitter sigma {s['jitter']:g}" if s["jitter"] else "",
                              "each stage its own layers" if s.get("exact_stages") else "") if x) + "; ledger"
    runs = f" in {s['schedules']} schedules" if s.get("schedules", 1) > 1 else ""
    console.print(f"{schedule}, {s['micro_batches']} micro-batches{runs} on {s['pp']} stage(s), {s['tasks']} tasks: "
                  f"step {step:.4f} s ({note} {s['ledger_step_time_s']:.4f} s)"
                  + (f"; trace written to {s['trace']} (open in ui.perfetto.dev)" if s.get("trace") else ""))


def compare_table(rows: list[dict[str, Any]], title: str, objective: str) -> Table:
    """``compare``'s rows: each GPU type's best layout, days, dollars and energy."""
    t = Table(title=title + f": best layout by {objective} per GPU type")
    for col in ("GPU", "layout", "prec", "step s", "MFU", "tok/s/GPU", "mem GiB", "time", "cost", "energy"):
        t.add_column(col, justify="left" if col in ("GPU", "layout", "prec") else "right")
    for r in rows:
        if not r["fits"]:
            t.add_row(str(r["gpu"]), str(r["reason"])[:70], *["-"] * 8)
            continue
        b = r["best"]
        t.add_row(str(r["gpu"]), f"{b['layout']} mb{b['micro_batch']} z{b['zero_stage']} {b['recompute']}",
                  str(b["precision"]), f"{b['step_time_s']:.3f}",
                  f"{100 * b['mfu']:.1f}%", f"{r['tokens_per_s_per_gpu']:,.0f}",
                  f"{b['memory_per_gpu_bytes'] / 2**30:.1f}", fmt_seconds(r["days_to_train"] * 86400.0),
                  fmt_usd(r["cost_usd"]), fmt_watt_hours(r["energy_mwh"] * 1e6))
    return t


def scale_table(rows: list[dict[str, Any]], title: str) -> Table:
    """``scale``'s rows: per cluster size the layout, step, MFU, job MTBF, checkpoint interval, ETTR, days."""
    t = Table(title=title)
    for col in ("GPUs", "batch", "layout", "step s", "MFU", "job MTBF", "ckpt every", "ETTR", "days"):
        t.add_column(col, justify="left" if col == "layout" else "right")
    for r in rows:
        if not r["fits"]:
            why = "no legal layout" if str(r["reason"]).startswith("global_batch") else "no layout fits"
            t.add_row(f"{r['gpus']:,}", f"{r['global_batch']:,}", why, *["-"] * 6)
            continue
        t.add_row(f"{r['gpus']:,}", f"{r['global_batch']:,}", str(r["layout"]), f"{r['step_time_s']:.2f}",
                  f"{100 * r['mfu']:.1f}%", f"{r['job_mtbf_h']:,.1f} h" if r["job_mtbf_h"] >= 1 else
                  f"{60 * r['job_mtbf_h']:.1f} min", f"{r['checkpoint_interval_s'] / 60:,.1f} min",
                  f"{100 * r['ettr_p50']:.1f}%", f"{r['days_p50']:,.1f}")
    return t


def fabric_options_table(rows: list[dict[str, Any]], title: str) -> Table:
    """``fabric --compare``: each switch and plane count side by side."""
    t = Table(title=title)
    for col in ("switch", "planes", "link", "tiers", "switches", "optics", "power", "network power", "capex",
                "network capex", "bisection", "1 TB all-reduce"):
        t.add_column(col, justify="left" if col == "switch" else "right")
    for r in rows:
        t.add_row(str(r["switch"]), str(r["planes"]), f"{r['link_gbit']:g}G", str(len(r["tiers"])),  # type: ignore[arg-type]
                  f"{r['total_switches']:,}", f"{r['transceivers']:,}", fmt_watts(r["power_w"]),
                  fmt_watts(r["network_power_w"]), fmt_usd(r["capex_usd"]), fmt_usd(r["network_capex_usd"]),
                  f"{fmt_bytes(r['bisection_bytes_per_s'])}/s", f"{r['allreduce_time_s']:.2f} s")
    return t


def fabric_tiers_table(s: dict[str, Any], title: str) -> Table:
    """``fabric``: each tier's switches, ports, oversubscription, links, reach and latency."""
    t = Table(title=title)
    for col in ("tier", "switches", "radix", "down", "up", "down:up", "links up", "GPUs below", "latency"):
        t.add_column(col, justify="right")
    for tr in s["tiers"]:  # type: ignore[attr-defined]
        t.add_row(str(tr["level"]), f"{tr['switches']:,}", str(tr["radix"]), str(tr["down_ports"]),
                  str(tr["up_ports"]), f"{tr['oversubscription']:g}", f"{tr['links']:,}", f"{tr['gpus_below']:,}",
                  f"{tr['latency_s'] * 1e6:.2f} us")
    return t


def ranks_table(rk: dict[str, Any]) -> Table:
    """``validate --ranks``: where each published layout ranks among the planner's."""
    t = Table(title="published layouts ranked by the planner (1 = the planner's best)")
    for col in ("row", "rank", "of feasible", "planner's best", "note"):
        t.add_column(col)
    for r in rk["rows"]:
        t.add_row(str(r["id"]), str(r["rank"] or "-"), f"{r['feasible']:,}", str(r.get("best", "")),
                  str(r.get("reason", ""))[:60])
    return t
