"""supercluster estimate: one training step priced, and why."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ..errors import InputError
from ..formats.load import is_launch_script, load_model
from ..hardware.specs import get_gpu
from ..job import Job, default_network, placement
from ..job import estimate as estimate_step
from ..parallelism.layout import Layout
from ..planner.fallback import LAYOUT_FIELDS, default_or_planned, fixed_settings, planned_layout
from ..planner.sensitivity import sensitivity as sensitivity_rows
from ..reports import plots
from ..reports import tables as reports
from ..validation import evidence as evidence_lines
from .app import (
    CLI_FRAMEWORK,
    FRAMEWORK_HELP,
    ForceOpt,
    GbsOpt,
    GpuOpt,
    GpusOpt,
    NicOpt,
    NodeOpt,
    PlotOpt,
    SeqOpt,
    _emit_json,
    _given_options,
    _out,
    _over,
    _plot,
    _pricing_bar,
    app,
)


@app.command()
def estimate(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(help="preset key, or path to a Hugging Face config.json or a "
                                              "Megatron-LM launch script; a +mtp / +mtpN suffix adds N "
                                              "multi-token-prediction modules",
                                              show_default="the model in --config's Megatron arguments, else "
                                              "llama3-405b")] = None,
    gpu: GpuOpt = "h100-sxm",
    gpus: GpusOpt = 16384,
    tp: Annotated[int, typer.Option(help="tensor parallel degree")] = 8,
    pp: Annotated[int, typer.Option(help="pipeline parallel degree")] = 16,
    dp: Annotated[int, typer.Option(help="data parallel degree (0 = gpus / (tp pp cp))")] = 0,
    cp: Annotated[int, typer.Option(help="context parallel degree")] = 1,
    ep: Annotated[int, typer.Option(help="expert parallel degree (carved out of dp x cp)")] = 1,
    expert_tp: Annotated[int, typer.Option(help="expert tensor parallel degree (0 = tp; 1 folds EP over TP, "
                                           "Megatron-Core MoE parallel folding)")] = 0,
    vpp: Annotated[int | None, typer.Option(help="interleaved pipeline chunks per stage",
                                            show_default="4 when pp > 1 and the framework interleaves, else 1")] = None,
    micro_batch: Annotated[int, typer.Option(help="sequences per micro-batch")] = 1,
    global_batch: GbsOpt = 2048,
    grad_accum: Annotated[int, typer.Option(help="gradient-accumulation steps, each its own pipeline schedule "
                                            "with its own fill and drain (torchtitan, NeMo AutoModel: global "
                                            "batch / (dp x local batch)); 1 = one schedule a step (Megatron)")]
    = 1,
    seq_len: SeqOpt = 8192,
    precision: Annotated[str, typer.Option(help="bf16 | fp16 | fp8 | fp4")] = "bf16",
    recompute: Annotated[str, typer.Option(help="none | selective | full")] = "none",
    recompute_layers: Annotated[int, typer.Option(help="with --recompute full: only the first N layers of each "
                                                  "pipeline chunk (Megatron block method); 0 = all")] = 0,
    recompute_modules: Annotated[str, typer.Option(help="with --recompute selective: Megatron-Core modules to "
                                                   "recompute, comma-separated: core_attn, layernorm, moe_act, "
                                                   "mlp, moe, mla_up_proj (empty = core_attn)")] = "",
    zero: Annotated[int, typer.Option(help="ZeRO stage 0-3 (1 = distributed optimizer, 3 = FSDP)")] = 1,
    dp_replicate: Annotated[int, typer.Option(help="hybrid sharding: replicas of the ZeRO / FSDP shard group, "
                                              "each over dp x cp / N ranks, that all-reduce their gradient "
                                              "shards (HSDP; Megatron --num-distributed-optimizer-instances); "
                                              "1 = shard over all of dp x cp")] = 1,
    pp_layout: Annotated[str | None, typer.Option(help="explicit pipeline layout, Megatron-Core notation: E "
                                                  "embedding, t layer, m MTP module, L loss, '|' between virtual "
                                                  "stages, x*n / (...)*n repeat, e.g. 'Et*4|(t*4|)*14,tmL' "
                                                  "(sets vpp)")] = None,
    framework: Annotated[str | None, typer.Option(help=FRAMEWORK_HELP,
                                                  show_default="what --config describes: Megatron-LM as a "
                                                  "script's flags set it (overlaps, gradient precision, dropout), "
                                                  "torchtitan (+compile) for a job TOML, deepspeed for a JSON; "
                                                  f"else {CLI_FRAMEWORK}")] = None,
    sequence_parallel: Annotated[bool | None, typer.Option(
        "--sequence-parallel/--no-sequence-parallel",
        help="shard norms and dropout over TP ranks", show_default="the framework's")] = None,
    layout: Annotated[str | None, typer.Option(help="the layout as one string, e.g. tp8-pp16-dp128-vpp4, or a "
                                               "plan's label (tp8-pp16-dp128-vpp4-mb1-z1-none-sp): in place of "
                                               "--tp, --pp, --dp, --cp, --ep, --vpp, --micro-batch, --zero, "
                                               "--recompute, --grad-accum, --dp-replicate (rep16); dp may be left "
                                               "out")] = None,
    config: Annotated[str | None, typer.Option(help="read the layout from a Megatron args file or launch script "
                                               "(its model and framework flags too), a torchtitan or MaxText "
                                               "launch line, TorchTitan .toml or DeepSpeed .json (layout options "
                                               "then ignored)")] = None,
    profile: Annotated[str | None, typer.Option(help="device profile (supercluster calibrate) in place of the "
                                                "catalog's rates for --gpu")] = None,
    switch: Annotated[str | None, typer.Option(help="fabric: scale-out switch (see supercluster fabric)")] = None,
    tiers: Annotated[int | None, typer.Option(help="fabric: tiers")] = None,
    oversubscription: Annotated[str | None, typer.Option(
        help="fabric: down:up of each tier below the top, leaf first, e.g. 2:1 or 1,2")] = None,
    planes: Annotated[int | None, typer.Option(help="fabric: network planes",
                                               show_default="the system's NIC ports per GPU")] = None,
    sharp: Annotated[bool, typer.Option("--sharp", help="fabric: in-network all-reduce")] = False,
    nic_gbit_per_gpu: NicOpt = None,
    gpus_per_node: NodeOpt = None,
    rank_order: Annotated[str, typer.Option(help="rank order, innermost first (Megatron-Core: tp-cp-ep-dp-pp)")]
    = "tp-cp-ep-dp-pp",
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    evidence: Annotated[bool, typer.Option(help="also report the model's error on the published runs closest "
                                           "to this configuration (framework, GPU architecture, dense/MoE, "
                                           "precision)")] = True,
    sensitivity: Annotated[bool, typer.Option("--sensitivity", help="also price the step with each hardware rate "
                                              "(tensor FLOP/s, HBM, NVLink, NIC) 1.1x and 2x faster: which "
                                              "upgrade buys the most")] = False,
    placement: Annotated[bool, typer.Option("--placement", help="also show where each parallel group's traffic "
                                            "goes on the fabric: its span, the tier it climbs to, how many "
                                            "groups share it and the slowdown")] = False,
    plot: PlotOpt = None,
    force: ForceOpt = False,
) -> None:
    """Predict one training step: time, throughput, MFU, memory and the time ledger."""
    fab = dict(switch=switch, tiers=tiers, oversubscription=_over(oversubscription), planes=planes, sharp=sharp,
               nic_gbit_per_gpu=nic_gbit_per_gpu, gpus_per_node=gpus_per_node)
    show = dict(as_json=as_json, profile=profile, fabric_options=fab, rank_order=rank_order, evidence=evidence,
                plot=plot, sensitivity=sensitivity, show_placement=placement)
    if config is not None:
        from ..formats.launchers import config_gpus_per_node, read_config

        # (without --gpus: the GPUs the config itself starts, where it says; without --gpus-per-node:
        # the node its torchrun line starts, where it starts several, as the planner's export wrote it)
        if gpus_per_node is None:
            fab["gpus_per_node"] = config_gpus_per_node(config)
        model, fw, lay = read_config(config, model=model, framework=framework,
                                     num_gpus=gpus if "gpus" in _given_options(ctx) else None)
        _estimate_and_print(model, gpu, lay.num_gpus, lay, fw, **show)
        return
    model, framework = model or "llama3-405b", framework or CLI_FRAMEWORK
    # Name the real culprit before deriving dp: an unknown model or GPU, a non-positive number.
    load_model(model)
    get_gpu(gpu)
    given = _given_options(ctx)
    for field, value in (("gpus", gpus), ("tp", tp), ("pp", pp), ("cp", cp), ("micro_batch", micro_batch),
                         ("global_batch", global_batch), ("seq_len", seq_len), ("grad_accum", grad_accum),
                         ("dp_replicate", dp_replicate)):
        if value <= 0:
            raise InputError(field, f"must be a positive integer, got {value}")
    mods = tuple(x.strip() for x in recompute_modules.split(",") if x.strip())
    if layout is not None:
        both = sorted(given & LAYOUT_STRING_OPTIONS)
        if both:
            raise InputError("layout", "give the layout either as --layout or as options, not both: --layout and "
                             + ", ".join("--" + x.replace("_", "-") for x in both))
        lay = Job.from_label(layout, model=model, gpu=gpu, num_gpus=gpus, global_batch=global_batch,
                             seq_len=seq_len, framework=framework, precision=precision,
                             sequence_parallel=sequence_parallel, recompute_layers=recompute_layers,
                             recompute_modules=mods, pp_layout=pp_layout).layout
        _estimate_and_print(model, gpu, gpus, lay, framework, **show)
        return
    opts = dict(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, micro_batch=micro_batch, global_batch=global_batch,
                seq_len=seq_len, precision=precision, recompute=recompute, zero_stage=zero,
                sequence_parallel=sequence_parallel, recompute_layers=recompute_layers, expert_tp=expert_tp or None,
                recompute_modules=mods, pp_layout=pp_layout, grad_accum=grad_accum, dp_replicate=dp_replicate)
    lay, planned = _layout_from_options(model, gpu, gpus, framework, opts, given, fab)
    _estimate_and_print(model, gpu, gpus, lay, framework, planned=planned, **show)


def _layout_from_options(model: str, gpu: str, gpus: int, framework: str, opts: dict[str, Any], given: set[str],
                         fab: dict[str, Any]) -> tuple[Layout, bool]:
    """The layout the options describe; where none of them sets a parallel degree and the default
    (the 16,384-GPU Llama 3 405B layout) does not suit the job, the planner's (True: planned)."""
    from ..parallelism.framework import get_framework
    from ..parallelism.pplayout import chunks_per_rank

    fw, tp, pp, cp, dp = get_framework(framework), opts["tp"], opts["pp"], opts["cp"], opts["dp"]
    if opts["vpp"] is None:
        opts["vpp"] = chunks_per_rank(opts["pp_layout"], pp) if opts["pp_layout"] is not None else fw.default_vpp(pp)
    if dp < 0:
        raise InputError("dp", f"must be >= 0 (0 = gpus / (tp pp cp)), got {dp}")
    why: InputError | None = None
    try:
        if dp == 0 and gpus % (tp * pp * cp):
            raise InputError("dp", f"gpus {gpus} is not divisible by tp x pp x cp = {tp} x {pp} x {cp} (defaults: "
                             "tp 8, pp 16, the 16,384-GPU Llama 3 405B layout); give --tp / --pp / --cp that "
                             "divide the GPU count, or --dp, or no layout option to let the planner pick one")
        layout = Layout(**{**opts, "dp": dp or gpus // (tp * pp * cp)})
    except InputError as err:
        if given & LAYOUT_OPTIONS or err.field not in LAYOUT_FIELDS:
            raise
        why = err
    if given & LAYOUT_OPTIONS:
        return layout, False
    kept = {k: opts[o] for k, o in (("micro_batch", "micro_batch"), ("zero", "zero_stage"), ("recompute", "recompute"),
                                     ("recompute_modules", "recompute_modules"),
                                     ("sequence_parallel", "sequence_parallel")) if k in given}
    if "recompute_modules" in kept:
        kept["recompute_modules"] = ",".join(kept["recompute_modules"])
    extra = {k: opts[k] for k in ("grad_accum", "recompute_layers") if k in given}
    m, g, gbs, seq, prec = load_model(model), get_gpu(gpu), opts["global_batch"], opts["seq_len"], opts["precision"]
    with _pricing_bar() as progress:
        if why is None:
            best, note = default_or_planned(m, g, gpus, fw, layout, kept, extra, fab, progress)
        else:  # (the default layout cannot even be laid out for this job)
            best, note = planned_layout(m, g, gpus, fw, gbs, seq, prec, fixed_settings(seq, prec, **kept), extra,
                                        fab, why, progress)
    if note:
        if is_launch_script(model):  # (the user may have meant the whole run the script describes)
            note += (f"; --model reads only the architecture of {Path(model).name}: --config {model} also takes "
                     "its layout and GPU count")
        Console(stderr=True).print(note, style="dim", markup=False, highlight=False)
    return best, note is not None


#: estimate's options that set the parallel layout; when none is given and the defaults (the
#: 16,384-GPU Llama 3 405B layout) do not suit the job, the planner picks the layout
LAYOUT_OPTIONS = frozenset({"tp", "pp", "dp", "cp", "ep", "expert_tp", "vpp", "pp_layout", "dp_replicate"})
#: what ``--layout`` sets: none of these may be given with it
LAYOUT_STRING_OPTIONS = frozenset({"tp", "pp", "dp", "cp", "ep", "expert_tp", "vpp", "micro_batch", "zero",
                                   "recompute", "grad_accum", "dp_replicate"})


def _estimate_and_print(model: str, gpu: str, gpus: int, layout: Layout, framework: str | Any, as_json: bool,
                        profile: str | None = None, fabric_options: dict[str, Any] | None = None,
                        rank_order: str = "tp-cp-ep-dp-pp", evidence: bool = True, plot: str | None = None,
                        sensitivity: bool = False, planned: bool = False, show_placement: bool = False) -> None:
    from ..parallelism.framework import get_framework

    m = load_model(model)
    g = get_gpu(gpu)
    layout.check_gpus(gpus)
    net = default_network(g, num_gpus=gpus, **(fabric_options or {}))
    if sensitivity and profile is not None:
        raise InputError("sensitivity", "scales the catalog's rates and links; a --profile's measured "
                         "collectives have none to scale: drop --profile or --sensitivity")
    if profile is not None:
        from ..calibration.profile import load_profile

        prof = load_profile(profile)
        base = None if prof.kind == "cpu" else g
        g = prof.gpu_spec(base)
        net = prof.network(fallback=net if base else None)
    framework_given = framework
    fw = get_framework(framework) if isinstance(framework, str) else framework  # (or a launch script's profile)
    framework = fw.key if not isinstance(framework, str) else framework
    b = estimate_step(m, gpu=g, num_gpus=gpus, layout=layout, framework=fw, network=net, rank_order=rank_order)
    # (a calibrated device profile is its own evidence: supercluster verify compares it with real steps)
    evidence = evidence and profile is None
    ev = evidence_lines.evidence_for(m, g, fw.family, layout.precision, gpus, layout.seq_len) if evidence else None
    title = (f"{reports.model_label(m)} on {gpus:,} x {gpu}, {layout.short()}"
             + (f" ({layout.pp_layout})" if layout.pp_layout else "") + f", {layout.precision}, {framework}")
    obj = reports.breakdown_json(b, (layout, fw, m), model=m.key, model_name=m.name, model_params=m.num_params,
                                 model_active_params=m.num_active_params, gpu=gpu, gpus=gpus, layout=layout.short(),
                                 **({"pp_layout": layout.pp_layout} if layout.pp_layout else {}), framework=framework,
                                 **({"layout_from": "planner"} if planned else {}))
    sens = sensitivity_rows(m, gpu=g, num_gpus=gpus, layout=layout, framework=fw, network=net,
                                    rank_order=rank_order) if sensitivity else None
    where = placement(m, layout, net, rank_order)
    if where:
        obj["placement"] = where
    _plot(plot, lambda: plots.ledger(obj, title=title))
    if as_json:
        _emit_json(obj | ({"evidence": ev.as_json() if ev else None} if evidence else {})
                   | ({"sensitivity": [r.as_json() for r in sens]} if sens else {}))
        return
    reports.print_breakdown(_out(), b, title, (layout, fw, m))
    if sens:
        _out().print(reports.sensitivity_table(sens, "Which faster part buys the most (the same step, one rate "
                                               "scaled, the fabric's topology kept)"))
    if show_placement:
        if where:
            _out().print(reports.placement_table(where, f"Where the traffic goes (ranks in {rank_order} order, "
                                                 "inner first; slowdown: a flow's NIC rate over its share of a "
                                                 "thin tier)"))
        else:
            from ..network.fabric import FabricNetwork

            _out().print("placement: " + ("every parallel group has one member; no traffic to place"
                                          if isinstance(net, FabricNetwork) else "a device profile prices measured "
                                          "collectives, not a fabric; nothing to place"), style="dim", markup=False)
    if not isinstance(framework_given, str):  # a launch script's own profile: say what its flags switched
        _out().print(fw.doc, style="dim", markup=False)
    if ev is not None:
        _out().print(ev.line(), style="dim", markup=False)
    elif evidence:
        _out().print(evidence_lines.no_runs_line(m), style="dim", markup=False)
