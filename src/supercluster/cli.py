"""Command line: parse, call the library, hand the result to ``reports``. Errors exit 2 in one line."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from .errors import InputError
from .formats.load import load_model
from .hardware.specs import get_gpu, gpu_catalog, system_catalog
from .models.catalog import model_catalog
from .parallelism.framework import DEFAULT_FRAMEWORK
from .parallelism.layout import Layout


class _Lazy:
    """A sibling module imported on first use: commands that do not need the cost model start faster."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        import importlib

        return getattr(importlib.import_module(self._name, __package__), attr)


reports = _Lazy(".reports.tables")
_estimate = _Lazy(".job")
_validate = _Lazy(".validation.validate")
_evidence = _Lazy(".validation.evidence")
_sensitivity = _Lazy(".planner.sensitivity")
plots = _Lazy(".reports.plots")

OBJECTIVE_HELP = "time | cost | energy (cost and energy may use fewer GPUs of the cluster)"


def _finite(text: str) -> float:
    """A number option that must be finite: ``nan`` or ``inf`` would price nonsense."""
    try:
        value = float(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise typer.BadParameter(f"{text!r} is not a finite number")
    return value


def _num(help: str) -> Any:
    """A typer option for a finite number."""
    return typer.Option(parser=_finite, help=help)


app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Treat a GPU cluster as one machine: step time, memory, MFU and where every FLOP goes.")


# Options several commands share (each command sets its own default).
ModelOpt = Annotated[str, typer.Option(help="preset key, or path to a Hugging Face config.json or a Megatron-LM "
                                             "launch script (its architecture arguments); a +mtp / +mtpN suffix "
                                             "adds N multi-token-prediction modules (deepseek-v3+mtp)")]
GpuOpt = Annotated[str, typer.Option(help="GPU key (supercluster catalog gpus)")]
PrecisionAnyOpt = Annotated[str, typer.Option(help="bf16 | fp16 | fp8 | any (bf16 and fp8, where the GPU has them)")]
GpusOpt = Annotated[int, typer.Option(help="number of GPUs")]
GbsOpt = Annotated[int, typer.Option(help="sequences per optimizer step")]
# settings a plan keeps while it searches the rest (plan, compare: planner.plan(fixed=...))
KeepMbOpt = Annotated[int | None, typer.Option(help="keep this micro-batch size", show_default="searched")]
KeepZeroOpt = Annotated[int | None, typer.Option(help="keep this ZeRO stage 0-3", show_default="searched")]
KeepRecomputeOpt = Annotated[str | None, typer.Option(help="keep this recompute policy: none | selective | full",
                                                      show_default="searched")]
SeqOpt = Annotated[int, typer.Option(help="tokens per sequence")]
FrameworkOpt = Annotated[str, typer.Option(help="megatron | nemo-megatron | deepspeed | torchtitan | composer | "
                                                  "hai-llm | megatron-legacy | deepspeed-legacy | torchtitan-2024 | "
                                                  "automodel (supercluster catalog frameworks); +compile for "
                                                  "torch.compile, +ep-overlap, +deepep (DeepEP's dispatcher), "
                                                  "+embedding-split (embedding and head take a layer's place in "
                                                  "the pipeline split), +round-robin-gate (a benchmark's fixed "
                                                  "gate: token i to experts ik ... ik + k - 1)")]


def _plot_path(path: str | None) -> str | None:
    """--plot's check at parse time, before any pricing: the suffix must name a format."""
    if path is not None:
        plots.check_path(path)
    return path


PlotOpt = Annotated[str | None, typer.Option(callback=_plot_path, help="also draw it to this file, the suffix its "
                                             "format: .png, .svg or .pdf (needs matplotlib: pip install "
                                             "'supercluster\\[plot]')")]  # \\[: rich markup would eat [plot]
CLI_FRAMEWORK = DEFAULT_FRAMEWORK  # (framework.DEFAULT_FRAMEWORK: one default for the API and every command)


class CatalogKind(StrEnum):
    gpus = "gpus"
    systems = "systems"
    models = "models"
    network = "network"
    frameworks = "frameworks"


def _out() -> Console:
    return Console(width=160)


def _emit_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, default=lambda o: dataclasses.asdict(o) if dataclasses.is_dataclass(o)
                          else str(o)))


def _plot(path: str | None, draw: Any) -> None:
    """Draw a figure (``draw()``) to ``--plot``'s file, when one was given; say so on stderr, so
    that --json on stdout stays one object."""
    if path is not None:
        typer.echo(f"wrote {plots.save(draw(), path)}", err=True)


@app.command()
def catalog(kind: Annotated[CatalogKind, typer.Argument(help="what to list")] = CatalogKind.gpus,
            as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """List the built-in GPUs, systems, models, network parts or framework profiles with their figures."""
    if kind.value == "network":
        from ._toml import load_package_toml

        net = {k: v for k, v in load_package_toml("network.toml").items() if k in ("switches", "nics", "scaleup",
                                                                                     "optics", "collectives")}
        if as_json:
            _emit_json(net)
            return
        from rich.table import Table

        con = _out()
        for section, items in net.items():
            if section == "collectives":
                continue
            t = Table(title=section)
            cols = sorted({c for v in items.values() for c in v})
            t.add_column("key")
            for c in cols:
                t.add_column(c)
            for key, v in items.items():
                t.add_row(key, *[str(v.get(c, "")) for c in cols])
            con.print(t)
        return
    if kind.value == "frameworks":
        from .parallelism.framework import framework_catalog

        fws = framework_catalog()
        if as_json:
            _emit_json({k: dataclasses.asdict(v) for k, v in fws.items()})
            return
        _out().print(reports.frameworks_table(fws))
        return
    data = {"gpus": gpu_catalog, "systems": system_catalog, "models": model_catalog}[kind.value]()
    if as_json:
        _emit_json({k: dataclasses.asdict(v) for k, v in data.items()})
        return
    table = {"gpus": reports.gpus_table, "systems": reports.systems_table, "models": reports.models_table}[kind.value]
    _out().print(table(data))  # type: ignore[operator]


def _megatron_script(config: str) -> dict[str, Any] | None:
    """The flags of ``config`` when it is a Megatron-LM arguments file (None otherwise, or when it
    cannot be read: load_layout then names the problem)."""
    from .formats import megatron_args
    from .formats.launchers import detect_format

    path = Path(config)
    if not path.is_file() or detect_format(path) != "megatron":
        return None
    try:
        return megatron_args.parse_args(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, InputError):
        return None


def _config_framework(config: str, script: dict[str, Any] | None) -> Any:
    """The framework a launcher config describes: Megatron-LM as a script's flags set it, torchtitan
    (compiled where the job config says so) for a job TOML, DeepSpeed for a DeepSpeed JSON."""
    from .formats import megatron_args
    from .formats.launchers import detect_format, torchtitan_compiles

    path = Path(config)
    if script is not None:
        return megatron_args.framework_from_args(script, name=f"megatron-lm ({path.name})")
    kind = detect_format(path) if path.is_file() else "megatron"
    if kind == "torchtitan":
        return "torchtitan+compile" if torchtitan_compiles(path.read_text(encoding="utf-8")) else "torchtitan"
    return "deepspeed" if kind == "deepspeed" else CLI_FRAMEWORK


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
    pp_layout: Annotated[str | None, typer.Option(help="explicit pipeline layout, Megatron-Core notation: E "
                                                  "embedding, t layer, m MTP module, L loss, '|' between virtual "
                                                  "stages, x*n / (...)*n repeat, e.g. 'Et*4|(t*4|)*14,tmL' "
                                                  "(sets vpp)")] = None,
    framework: Annotated[str | None, typer.Option(help="megatron | nemo-megatron | deepspeed | torchtitan | "
                                                  "composer | hai-llm | megatron-legacy | deepspeed-legacy | "
                                                  "torchtitan-2024 | automodel (supercluster catalog frameworks); "
                                                  "+compile, +ep-overlap, +deepep, +embedding-split, "
                                                  "+round-robin-gate",
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
                                               "--recompute, --grad-accum; dp may be left out")] = None,
    config: Annotated[str | None, typer.Option(help="read the layout from a Megatron args file or launch script "
                                               "(its model and framework flags too), TorchTitan .toml or "
                                               "DeepSpeed .json (layout options then ignored)")] = None,
    profile: Annotated[str | None, typer.Option(help="device profile (supercluster calibrate) in place of the "
                                                "catalog's rates for --gpu")] = None,
    switch: Annotated[str | None, typer.Option(help="fabric: scale-out switch (see supercluster fabric)")] = None,
    tiers: Annotated[int | None, typer.Option(help="fabric: tiers")] = None,
    oversubscription: Annotated[str | None, typer.Option(
        help="fabric: down:up of each tier below the top, leaf first, e.g. 1,2")] = None,
    planes: Annotated[int | None, typer.Option(help="fabric: network planes",
                                               show_default="the system's NIC ports per GPU")] = None,
    sharp: Annotated[bool, typer.Option("--sharp", help="fabric: in-network all-reduce")] = False,
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
) -> None:
    """Predict one training step: time, throughput, MFU, memory and the time ledger."""
    if config is not None:
        from .formats import megatron_args
        from .formats.launchers import load_layout

        # a Megatron-LM launch script names the model it builds and the behaviours its flags switch
        script = _megatron_script(config)
        if model is None:
            model = config if script is not None and megatron_args.has_model(script) else "llama3-405b"
        fw: str | Any = framework or _config_framework(config, script)
        layout = load_layout(config, num_gpus=gpus, num_layers=load_model(model).num_layers)
        fab = dict(switch=switch, tiers=tiers, oversubscription=_over(oversubscription), planes=planes, sharp=sharp)
        _estimate_and_print(model, gpu, layout.num_gpus, layout, fw, as_json, profile, fab, rank_order, evidence,
                            plot, sensitivity, show_placement=placement)
        return
    model, framework = model or "llama3-405b", framework or CLI_FRAMEWORK
    # Name the real culprit before deriving dp: an unknown model or GPU, a non-positive number.
    load_model(model)
    get_gpu(gpu)
    given = _given_options(ctx)
    for field, value in (("gpus", gpus), ("tp", tp), ("pp", pp), ("cp", cp), ("micro_batch", micro_batch),
                         ("global_batch", global_batch), ("seq_len", seq_len), ("grad_accum", grad_accum)):
        if value <= 0:
            raise InputError(field, f"must be a positive integer, got {value}")
    fab = dict(switch=switch, tiers=tiers, oversubscription=_over(oversubscription), planes=planes, sharp=sharp)
    if layout is not None:
        both = sorted(given & LAYOUT_STRING_OPTIONS)
        if both:
            raise InputError("layout", "give the layout either as --layout or as options, not both: --layout and "
                             + ", ".join("--" + x.replace("_", "-") for x in both))
        lay = Layout.from_string(layout, global_batch=global_batch, seq_len=seq_len, precision=precision,
                                 sequence_parallel=sequence_parallel, recompute_layers=recompute_layers,
                                 recompute_modules=tuple(x.strip() for x in recompute_modules.split(",") if x.strip()),
                                 pp_layout=pp_layout, **({} if "dp" in _layout_degrees(layout) else
                                                          {"dp": _derived_dp(layout, gpus)}))
        _estimate_and_print(model, gpu, gpus, lay, framework, as_json, profile, fab, rank_order, evidence, plot,
                            sensitivity, show_placement=placement)
        return
    if vpp is None and pp_layout is not None:
        from .parallelism.pplayout import chunks_per_rank

        vpp = chunks_per_rank(pp_layout, pp)
    if vpp is None:
        from .parallelism.framework import get_framework

        vpp = get_framework(framework).default_vpp(pp)
    if dp < 0:
        raise InputError("dp", f"must be >= 0 (0 = gpus / (tp pp cp)), got {dp}")
    planned = False
    try:
        if dp == 0:
            denom = tp * pp * cp
            if gpus % denom:
                raise InputError("dp", f"gpus {gpus} is not divisible by tp x pp x cp = {tp} x {pp} x {cp} (defaults: "
                                 "tp 8, pp 16, the 16,384-GPU Llama 3 405B layout); give --tp / --pp / --cp that "
                                 "divide the GPU count, or --dp, or no layout option to let the planner pick one")
            dp = gpus // denom
        layout = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, micro_batch=micro_batch,
                        global_batch=global_batch, seq_len=seq_len, precision=precision, recompute=recompute,
                        zero_stage=zero, sequence_parallel=sequence_parallel, recompute_layers=recompute_layers,
                        expert_tp=expert_tp or None,
                        recompute_modules=tuple(x.strip() for x in recompute_modules.split(",") if x.strip()),
                        pp_layout=pp_layout, grad_accum=grad_accum)
        if not given & LAYOUT_OPTIONS:  # the defaults: do they suit this model and GPU count?
            _estimate.estimate(load_model(model), gpu=get_gpu(gpu), num_gpus=gpus, layout=layout,
                               framework=framework, network=_estimate.default_network(get_gpu(gpu), num_gpus=gpus))
    except InputError as err:
        if given & LAYOUT_OPTIONS or err.field not in LAYOUT_FIELDS:
            raise
        kept = {k: v for k, v in (("micro_batch", micro_batch), ("zero", zero), ("recompute", recompute),
                                  ("recompute_modules", recompute_modules),
                                  ("sequence_parallel", sequence_parallel)) if k in given}
        extra = {k: v for k, v in (("grad_accum", grad_accum), ("recompute_layers", recompute_layers)) if k in given}
        layout = _planned_layout(model, gpu, gpus, framework, global_batch, seq_len, precision,
                                 _fixed_settings(seq_len, precision, **kept), extra, fab, err)
        planned = True
    _estimate_and_print(model, gpu, gpus, layout, framework, as_json, profile, fab, rank_order, evidence, plot,
                        sensitivity, planned, show_placement=placement)


#: estimate's options that set the parallel layout; when none is given and the defaults (the
#: 16,384-GPU Llama 3 405B layout) do not suit the job, the planner picks the layout
LAYOUT_OPTIONS = frozenset({"tp", "pp", "dp", "cp", "ep", "expert_tp", "vpp", "pp_layout"})
#: what ``--layout`` sets: none of these may be given with it
LAYOUT_STRING_OPTIONS = frozenset({"tp", "pp", "dp", "cp", "ep", "expert_tp", "vpp", "micro_batch", "zero",
                                   "recompute", "grad_accum"})


def _layout_degrees(text: str) -> dict[str, int]:
    """The parallel degrees a layout string names: {"tp": 8, "pp": 16, ...}."""
    import re

    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"(?:^|-)(tp|pp|dp|cp|ep|etp|vpp|mb|ga)(\d+)", text.lower())}


def _derived_dp(text: str, gpus: int) -> int:
    """dp for a layout string that leaves it out: the GPUs over tp x pp x cp."""
    d = _layout_degrees(text)
    tp, pp, cp = d.get("tp", 1), d.get("pp", 1), d.get("cp", 1)
    if min(tp, pp, cp) < 1:
        return 1  # (the layout names the bad degree)
    if gpus % (tp * pp * cp):
        raise InputError("layout", f"gpus {gpus} is not divisible by tp x pp x cp = {tp} x {pp} x {cp} of {text!r}; "
                         "give dp in it or another --gpus")
    return gpus // (tp * pp * cp)


#: the fields whose errors mean "this layout does not suit the job"
LAYOUT_FIELDS = LAYOUT_OPTIONS | {"gpus", "global_batch", "micro_batch", "layout"}


def _given_options(ctx: typer.Context) -> set[str]:
    """The command's options the user set (not left at their defaults)."""
    return {name for name in ctx.params
            if (src := ctx.get_parameter_source(name)) is not None and src.name not in ("DEFAULT", "DEFAULT_MAP")}


@contextlib.contextmanager
def _pricing_bar() -> Iterator[Callable[[int, int], None]]:
    """A bar while a plan prices its layouts (MoE searches run to millions of layouts, several
    seconds); transient and on stderr, so --json and --export stay clean. Yields the planner's
    ``progress`` callback."""
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task("pricing layouts", total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _fixed_settings(seq_len: int, precision: str, micro_batch: int | None = None, zero: int | None = None,
                    recompute: str | None = None, recompute_modules: str | None = None,
                    sequence_parallel: bool | None = None) -> dict[str, int]:
    """The planner's ``fixed`` columns for the settings given (None: searched). They are checked alone
    first, on a one-GPU layout: an unknown recompute, module, ZeRO stage or precision is the user's to
    mend, whatever the layout."""
    from .perf.columns import RECOMPUTE_CODE, module_bits

    mods = tuple(x.strip() for x in (recompute_modules or "").split(",") if x.strip())
    mb = 1 if micro_batch is None else micro_batch
    probe = Layout(tp=1, pp=1, dp=1, micro_batch=mb, global_batch=mb, seq_len=seq_len, precision=precision,
                   recompute=recompute or ("selective" if mods else "none"), zero_stage=zero or 0,
                   recompute_modules=mods)
    out = {"mb": micro_batch, "zero": zero, "sp": sequence_parallel,
           "recompute": RECOMPUTE_CODE[probe.recompute] if recompute is not None else None,
           "rcm": module_bits(probe.recompute_modules) if recompute_modules is not None else None}
    return {col: int(v) for col, v in out.items() if v is not None}


def _planned_layout(model: str, gpu: str, gpus: int, framework: str, global_batch: int, seq_len: int,
                    precision: str, fixed: dict[str, int], extra: dict[str, int],
                    fabric_options: dict[str, Any], why: InputError) -> Layout:
    """The planner's fastest layout that fits, keeping the ``fixed`` settings the user gave (micro-batch,
    ZeRO stage, recompute and its modules, sequence parallelism; ``extra``, which it does not search,
    are set on its winner), announced on stderr; ``why``: the defaults' error."""
    from .job import default_network
    from .parallelism.framework import get_framework
    from .planner.search import plan

    g = get_gpu(gpu)
    try:
        with _pricing_bar() as progress:
            best = plan(load_model(model), g, gpus, global_batch=global_batch, seq_len=seq_len,
                        framework=get_framework(framework), precisions=(precision,), top=1, fixed=fixed,
                        network=default_network(g, num_gpus=gpus, **fabric_options), progress=progress).best.layout
    except InputError as err:  # nothing fits, or nothing keeps the settings given: say that, after why
        raise InputError(err.field, f"{str(err).removeprefix(err.field + ': ')} (the default layout does not "
                         f"suit this job either: {str(why).split(' (defaults:')[0]})") from None
    best = dataclasses.replace(best, **extra)
    reason = str(why).split(" (defaults:")[0]
    Console(stderr=True).print(f"layout: none given, and the default (tp 8, pp 16: Llama 3 405B on 16,384 GPUs) does "
                               f"not suit this job ({reason}); estimating the planner's fastest layout that fits: "
                               f"{best.label()} (supercluster plan lists the others)",
                               style="dim", markup=False, highlight=False)
    return best


def _estimate_and_print(model: str, gpu: str, gpus: int, layout: Layout, framework: str | Any, as_json: bool,
                        profile: str | None = None, fabric_options: dict[str, Any] | None = None,
                        rank_order: str = "tp-cp-ep-dp-pp", evidence: bool = True, plot: str | None = None,
                        sensitivity: bool = False, planned: bool = False, show_placement: bool = False) -> None:
    from .job import default_network
    from .parallelism.framework import get_framework

    m = load_model(model)
    g = get_gpu(gpu)
    layout.check_gpus(gpus)
    net = default_network(g, num_gpus=gpus, **(fabric_options or {}))
    if sensitivity and profile is not None:
        raise InputError("sensitivity", "scales the catalog's rates and links; a --profile's measured "
                         "collectives have none to scale: drop --profile or --sensitivity")
    if profile is not None:
        from .calibration.calibrate import load_profile

        prof = load_profile(profile)
        base = None if prof.kind == "cpu" else g
        g = prof.gpu_spec(base)
        net = prof.network(fallback=net if base else None)
    framework_given = framework
    fw = get_framework(framework) if isinstance(framework, str) else framework  # (or a launch script's profile)
    framework = fw.key if not isinstance(framework, str) else framework
    b = _estimate.estimate(m, gpu=g, num_gpus=gpus, layout=layout, framework=fw, network=net, rank_order=rank_order)
    # (a calibrated device profile is its own evidence: supercluster verify compares it with real steps)
    evidence = evidence and profile is None
    ev = _evidence.evidence_for(m, g, fw.family, layout.precision, gpus, layout.seq_len) if evidence else None
    title = (f"{m.name} on {gpus:,} x {gpu}, {layout.short()}" + (f" ({layout.pp_layout})" if layout.pp_layout else "")
             + f", {layout.precision}, {framework}")
    obj = reports.breakdown_json(b, (layout, fw, m), model=m.key, gpu=gpu, gpus=gpus, layout=layout.short(),
                                 **({"pp_layout": layout.pp_layout} if layout.pp_layout else {}), framework=framework,
                                 **({"layout_from": "planner"} if planned else {}))
    sens = _sensitivity.sensitivity(m, gpu=g, num_gpus=gpus, layout=layout, framework=fw, network=net,
                                    rank_order=rank_order) if sensitivity else None
    where = _estimate.placement(m, layout, net, rank_order)
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
            from .network.fabric import FabricNetwork

            _out().print("placement: " + ("every parallel group has one member; no traffic to place"
                                          if isinstance(net, FabricNetwork) else "a device profile prices measured "
                                          "collectives, not a fabric; nothing to place"), style="dim", markup=False)
    if not isinstance(framework_given, str):  # a launch script's own profile: say what its flags switched
        _out().print(fw.doc, style="dim", markup=False)
    if ev is not None:
        _out().print(ev.line(), style="dim", markup=False)
    elif evidence:
        _out().print(_evidence.no_runs_line(m), style="dim", markup=False)


@app.command()
def plan(
    model: ModelOpt = "llama3-405b",
    gpu: GpuOpt = "h100-sxm",
    gpus: GpusOpt = 16384,
    global_batch: GbsOpt = 2048,
    seq_len: SeqOpt = 8192,
    precision: PrecisionAnyOpt = "bf16",
    objective: Annotated[str, typer.Option(help=OBJECTIVE_HELP)] = "time",
    framework: Annotated[str | None, typer.Option(help="as estimate --framework",
                                                  show_default=f"{CLI_FRAMEWORK}; with --export, the framework "
                                                  "that runs it: torchtitan, deepspeed, or "
                                                  f"{CLI_FRAMEWORK} for megatron")] = None,
    headroom: Annotated[float, _num(help="fraction of HBM kept free (0-1)")] = 0.0,
    top: Annotated[int, typer.Option(help="rows in the table")] = 10,
    micro_batch: KeepMbOpt = None,
    zero: KeepZeroOpt = None,
    recompute: KeepRecomputeOpt = None,
    gpu_hour_usd: Annotated[float | None, _num(help="price of a GPU-hour (default: ownership cost)")] = None,
    export: Annotated[str | None, typer.Option(help="print the winner as megatron | torchtitan | deepspeed")] = None,
    tokens: Annotated[float | None, _num(help="token budget: also days, dollars and MWh to train it "
                                                 "(failure-free; supercluster train adds failures)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    evidence: Annotated[bool, typer.Option(help="also report the model's error on the published runs closest "
                                           "to the best layout's kind")] = True,
    plot: PlotOpt = None,
) -> None:
    """Search every legal layout; the fastest (or cheapest) that fits, why, and how to launch it."""

    from .formats.launchers import export as export_layout
    from .formats.launchers import export_framework
    from .parallelism.framework import get_framework
    from .planner.search import plan as run_plan

    framework = export_framework(export, framework) if export else framework or CLI_FRAMEWORK
    m, g, fw = load_model(model), get_gpu(gpu), get_framework(framework)
    precs = ("bf16", "fp8") if precision == "any" else (precision,)
    fixed = _fixed_settings(seq_len, precs[0], micro_batch=micro_batch, zero=zero, recompute=recompute)
    with _pricing_bar() as progress:
        res = run_plan(m, g, gpus, global_batch=global_batch, seq_len=seq_len, framework=fw,
                       objective=objective, precisions=precs, headroom=headroom, top=top, gpu_hour_usd=gpu_hour_usd,
                       progress=progress, fixed=fixed)
    if export:
        typer.echo(export_layout(res.best.layout, export, m, fw), nl=False)
        return
    if tokens is not None and tokens <= 0:
        raise InputError("tokens", f"must be > 0, got {tokens}")
    found = res.to_json()
    _plot(plot, lambda: plots.plan(found, title=f"{m.name} on {gpus:,} x {gpu}, global batch {global_batch:,} x "
                                               f"{seq_len:,}, {framework}", hbm_bytes=g.hbm_bytes))
    ev = (_evidence.evidence_for(m, g, framework, res.best.layout.precision, res.best.layout.num_gpus, seq_len)
          if evidence else None)
    if as_json:
        extra = {"budget": res.best.budget(tokens)} if tokens else {}
        if evidence:
            extra["evidence"] = ev.as_json() if ev else None
        _emit_json(extra | found)
        return
    reports.print_plan(_out(), res, f"{m.name} on {gpus:,} x {gpu}: best layouts by {objective}")
    if tokens:
        b = res.best.budget(tokens)
        _out().print(f"{tokens:.3g} tokens with #1: {b['days_to_train']:,.1f} days (failure-free), "
                     f"${b['cost_usd'] / 1e6:,.2f} M, {b['energy_mwh']:,.0f} MWh")
    if ev is not None:
        _out().print(ev.line(), style="dim", markup=False)
    elif evidence:
        _out().print(_evidence.no_runs_line(m), style="dim", markup=False)


@app.command()
def compare(
    model: ModelOpt = "llama3-70b",
    gpu_types: Annotated[str, typer.Option("--gpu-types", help="comma-separated GPU keys (supercluster catalog "
                                           "gpus)")] = "a100-80gb,h100-sxm,h200,b200,gb200,mi300x",
    gpus: GpusOpt = 1024,
    global_batch: GbsOpt = 1024,
    seq_len: SeqOpt = 8192,
    precision: PrecisionAnyOpt = "bf16",
    objective: Annotated[str, typer.Option(help=OBJECTIVE_HELP)] = "time",
    framework: FrameworkOpt = CLI_FRAMEWORK,
    tokens: Annotated[float | None, _num(help="token budget for days, dollars and MWh (default: 20 per "
                                                 "parameter)")] = None,
    micro_batch: KeepMbOpt = None,
    zero: KeepZeroOpt = None,
    recompute: KeepRecomputeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON rows")] = False,
    plot: PlotOpt = None,
) -> None:
    """Which GPU? Plan the same job on each GPU type: best layout, throughput, days, dollars, MWh."""
    from rich.progress import track
    from rich.table import Table

    from .parallelism.framework import get_framework
    from .planner.search import compare_gpus
    from .planner.sweep import parse_axis

    m, fw = load_model(model), get_framework(framework)
    kinds = [get_gpu(k) for k in parse_axis(gpu_types, str, "gpu_types")]
    precs = ("bf16", "fp8") if precision == "any" else (precision,)
    for p in precs:  # an unknown precision is one error, not a row per GPU
        Layout(precision=p)
    fixed = _fixed_settings(seq_len, precs[0], micro_batch=micro_batch, zero=zero, recompute=recompute)
    rows = []
    for g in track(kinds, description="planning", disable=as_json or len(kinds) < 2, transient=True,
                   console=Console(stderr=True)):
        rows += compare_gpus(m, [g], gpus, global_batch=global_batch, seq_len=seq_len, framework=fw,
                             objective=objective, precisions=precs, tokens=tokens, fixed=fixed)
    tok = tokens if tokens is not None else 20.0 * m.num_params
    title = f"{m.name} on {gpus:,} GPUs, global batch {global_batch:,} x {seq_len:,}, {tok:.3g} tokens, {framework}"
    _plot(plot, lambda: plots.compare(rows, title=title))
    if as_json:
        _emit_json(rows)
        return
    t = Table(title=title + f": best layout by {objective} per GPU type")
    for col in ("GPU", "layout", "prec", "step s", "MFU", "tok/s/GPU", "mem GiB", "days", "cost", "MWh"):
        t.add_column(col, justify="left" if col in ("GPU", "layout", "prec") else "right")
    for r in rows:
        if not r["fits"]:
            t.add_row(str(r["gpu"]), str(r["reason"])[:70], *["-"] * 8)
            continue
        b = r["best"]
        t.add_row(str(r["gpu"]), f"{b['layout']} mb{b['micro_batch']} z{b['zero_stage']} {b['recompute']}",
                  str(b["precision"]), f"{b['step_time_s']:.3f}",
                  f"{100 * b['mfu']:.1f}%", f"{r['tokens_per_s_per_gpu']:,.0f}",
                  f"{b['memory_per_gpu_bytes'] / 2**30:.1f}", f"{r['days_to_train']:,.1f}",
                  f"${r['cost_usd'] / 1e6:,.2f} M" if r["cost_usd"] >= 1e6 else f"${r['cost_usd'] / 1e3:,.1f} k",
                  f"{r['energy_mwh']:,.1f}")
    _out().print(t)
    _out().print("days are failure-free: supercluster train --gpu ... adds interruptions and checkpoints",
                 style="dim")


@app.command()
def report(
    model: ModelOpt = "llama3-70b",
    gpu: GpuOpt = "h100-sxm",
    gpus: GpusOpt = 1024,
    global_batch: GbsOpt = 1024,
    seq_len: SeqOpt = 8192,
    precision: PrecisionAnyOpt = "bf16",
    framework: FrameworkOpt = CLI_FRAMEWORK,
    tokens: Annotated[float | None, _num(help="token budget (default: 20 per parameter)")] = None,
    gpu_types: Annotated[str, typer.Option("--gpu-types", help="also plan the job on these GPU types, "
                                           "comma-separated (empty: none)")] = "",
    rates: RatesOpt = "llama3", trials: TrialsOpt = 2000, seed: SeedOpt = 0,
    out: Annotated[str, typer.Option(help="directory for report.md, report.json and the figures")] = "report",
) -> None:
    """One job, one shareable report: plan, step, run with failures, network, other GPUs, figures."""
    from rich.progress import Progress, SpinnerColumn, TextColumn

    from .parallelism.framework import get_framework
    from .planner.sweep import parse_axis
    from .reliability.run import RunOptions
    from .reports import page as _report

    _report.check_out(out)
    m, g, fw = load_model(model), get_gpu(gpu), get_framework(framework)
    kinds = parse_axis(gpu_types, str, "gpu_types") if gpu_types.strip() else ()
    for k in kinds:
        get_gpu(k)
    precs = ("bf16", "fp8") if precision == "any" else (precision,)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=Console(stderr=True), transient=True,
                  disable=not sys.stderr.isatty()) as bar:
        bar.add_task("planning, pricing and simulating the run", total=None)
        r = _report.build(m, g, gpus, global_batch=global_batch, seq_len=seq_len, framework=fw, precisions=precs,
                          tokens=tokens, gpu_types=kinds, options=RunOptions(rates=rates, trials=trials, seed=seed))
        md = _report.write(r, out)
    typer.echo(f"wrote {md} (and report.json, {len(list(md.parent.glob('*.png')))} figures)")


@app.command()
def validate(
    runs: Annotated[str | None, typer.Option(help="runs CSV, or a shipped set: public (default) | heldout "
                                                      "(other published runs, a check only)")] = None,
    ranks: Annotated[bool, typer.Option("--ranks", help="instead: where each published layout ranks among the "
                                                        "planner's feasible layouts")] = False,
    by: Annotated[str | None, typer.Option(help="also summarise the rows by gpu | framework | kind (dense / moe): "
                                                "count, MAPE, error range")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    plot: PlotOpt = None,
) -> None:
    """Predict every scored published run and report per-row error, MAPE and the worst row."""
    if by is not None:
        _validate.check_group_key(by)  # before the (slower) predictions, and in --ranks mode too
    if plot is not None and ranks:
        raise InputError("plot", "draws the per-row errors; it does not go with --ranks")
    if ranks:
        from rich.table import Table

        rk = _validate.published_ranks(runs)
        if as_json:
            _emit_json(rk)
            return
        t = Table(title="published layouts ranked by the planner (1 = the planner's best)")
        for col in ("row", "rank", "of feasible", "planner's best", "note"):
            t.add_column(col)
        for r in rk["rows"]:
            t.add_row(str(r["id"]), str(r["rank"] or "-"), f"{r['feasible']:,}", str(r.get("best", "")),
                      str(r.get("reason", ""))[:60])
        con = _out()
        con.print(t)
        sm = rk["summary"]
        con.print(f"ranked {sm['ranked']} of {sm['rows']} rows: #1 {sm['top1']}, top 10 {sm['top10']}, top 100 "
                  f"{sm['top100']}; median percentile {sm['median_percentile']}, p90 {sm['p90_percentile']}")
        return
    res = _validate.validate(runs)
    groups = _validate.by_group(res["rows"], by) if by else None  # type: ignore[arg-type]
    _plot(plot, lambda: plots.validation(
        [dataclasses.asdict(r) for r in res["rows"]], group=by or "kind",  # type: ignore[attr-defined]
        title=f"{runs or 'public'} runs: MAPE {100 * res['mape']:.1f} %, worst {100 * res['worst_abs_error']:.1f} % "
              f"({res['worst_row']})"))
    if as_json:
        out = dict(res)
        out["rows"] = [dataclasses.asdict(r) for r in res["rows"]]  # type: ignore[attr-defined]
        if groups is not None:
            out["groups"] = groups
        _emit_json(out)
        return
    con = _out()
    con.print(reports.validation_table(res))
    if groups is not None:
        con.print(reports.groups_table(groups, f"by {by}"))
    con.print(f"MAPE {100 * res['mape']:.1f}% | worst {100 * res['worst_abs_error']:.1f}% ({res['worst_row']}) | "
              f"supported {100 * res['supported_fraction']:.0f}%")
    for g in res["ranking"]:  # type: ignore[attr-defined]
        con.print(f"ranking {g['group']}: {'matches' if g['match'] else 'DIFFERS'} "
                  f"(measured {g['measured_order']}, predicted {g['predicted_order']})")


def _run_options(rates: str, trials: int, seed: int, asynchronous: bool, hot_spares: bool, elastic: bool,
                 storage_bw: float | None, interval_min: float | None, pue: float,
                 gpu_hour_usd: float | None) -> Any:
    from .reliability.run import RunOptions

    return RunOptions(rates=rates, trials=trials, seed=seed, asynchronous=asynchronous, hot_spares=hot_spares,
                      elastic=elastic, storage_bytes_per_s=None if storage_bw is None else storage_bw * 1e9,
                      interval_s=None if interval_min is None else interval_min * 60.0, pue=pue,
                      gpu_hour_usd=gpu_hour_usd)


RatesOpt = Annotated[str, typer.Option(help="interruption rates: llama3 | rsc1 | rsc2 | path to a TOML file")]
TrialsOpt = Annotated[int, typer.Option(help="Monte Carlo trials")]
SeedOpt = Annotated[int, typer.Option(help="random seed")]
AsyncOpt = Annotated[bool, typer.Option("--async-checkpoint/--sync-checkpoint", help="checkpoint mode")]
SparesOpt = Annotated[bool, typer.Option("--hot-spares", help="warm standby nodes take over at once")]
ElasticOpt = Annotated[bool, typer.Option("--elastic", help="continue with fewer DP replicas while one is repaired")]
StorageOpt = Annotated[float | None, _num(help="checkpoint storage GB/s (default 2000, Llama 3's Tectonic)")]
IntervalOpt = Annotated[float | None, _num(help="checkpoint interval in minutes (default: best in simulation)")]
PueOpt = Annotated[float, _num(help="facility PUE")]
PriceOpt = Annotated[float | None, _num(help="price of a GPU-hour in USD (default: ownership cost)")]
LayoutOpt = Annotated[str | None, typer.Option(help="layout like tp8-pp16-dp128-vpp4, -ga4 for four pipeline "
                                                   "schedules a step, or a plan's label (...-mb1-z1-full-sp) "
                                                   "(default: the planner's best)")]
RecomputeOpt = Annotated[str, typer.Option(help="none | selective | full, for a --layout that does not name "
                                                 "it (as estimate --layout reads it)")]


def _layout_arg(layout: str | None, gbs: int, seq: int, recompute: str, precision: str) -> Layout | None:
    if layout is None:
        return None
    return Layout.from_string(layout, global_batch=gbs, seq_len=seq, recompute=recompute, precision=precision)


def _analyse(model: str, gpu: str, gpus: int, framework: str, layout: Layout | None, global_batch: int,
             seq_len: int, opts: Any, **horizon: Any) -> dict[str, Any]:
    from .parallelism.framework import get_framework
    from .reliability.run import analyse_run

    r = analyse_run(load_model(model), get_gpu(gpu), gpus, framework=get_framework(framework), layout=layout,
                    global_batch=global_batch, seq_len=seq_len, options=opts, **horizon)
    return r.summary()


@app.command()
def goodput(
    gpu: GpuOpt = "h100-sxm",
    gpus: GpusOpt = 16384,
    days: Annotated[float, _num(help="wall-clock days of the run")] = 54.0,
    model: Annotated[str, typer.Option(help="model (sets checkpoint size and step)")] = "llama3-405b",
    layout: LayoutOpt = None, recompute: RecomputeOpt = "none", global_batch: GbsOpt = 2048,
    seq_len: SeqOpt = 8192, framework: FrameworkOpt = CLI_FRAMEWORK,
    rates: RatesOpt = "llama3", trials: TrialsOpt = 10000, seed: SeedOpt = 0, asynchronous: AsyncOpt = False,
    hot_spares: SparesOpt = False, elastic: ElasticOpt = False, storage_bw: StorageOpt = None,
    interval: IntervalOpt = None, pue: PueOpt = 1.1, gpu_hour_usd: PriceOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    plot: PlotOpt = None,
) -> None:
    """Interruptions, checkpoint interval and effective training time (ETTR) of a run of --days."""
    opts = _run_options(rates, trials, seed, asynchronous, hot_spares, elastic, storage_bw, interval, pue, gpu_hour_usd)
    s = _analyse(model, gpu, gpus, framework, _layout_arg(layout, global_batch, seq_len, recompute, "bf16"),
                 global_batch, seq_len, opts, days=days)
    _plot(plot, lambda: plots.goodput(s, title=f"{days:g} days on {gpus:,} x {gpu} ({model}, {s['layout']}), "
                                                f"rates {rates}"))
    if as_json:
        _emit_json(s)
        return
    reports.print_run(_out(), s, f"{days:g} days on {gpus:,} x {gpu} ({model}): where the peak FLOPs went")


@app.command()
def train(
    model: ModelOpt = "llama3-405b",
    gpu: GpuOpt = "h100-sxm",
    gpus: GpusOpt = 16384,
    tokens: Annotated[float | None, _num(help="token budget (default: 20 per parameter, Chinchilla)")] = None,
    layout: LayoutOpt = None, recompute: RecomputeOpt = "none", global_batch: GbsOpt = 2048,
    seq_len: SeqOpt = 8192, framework: FrameworkOpt = CLI_FRAMEWORK,
    precision: Annotated[str, typer.Option(help="bf16 | fp8 (with --layout)")] = "bf16",
    deadline_days: Annotated[float | None, _num(help="also: compute-optimal model for it")] = None,
    rates: RatesOpt = "llama3", trials: TrialsOpt = 10000, seed: SeedOpt = 0, asynchronous: AsyncOpt = False,
    hot_spares: SparesOpt = False, elastic: ElasticOpt = False, storage_bw: StorageOpt = None,
    interval: IntervalOpt = None, pue: PueOpt = 1.1, gpu_hour_usd: PriceOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    plot: PlotOpt = None,
) -> None:
    """Time to train a token budget: days, GPU-hours, MWh, dollars and the run's entropy ledger."""
    from .reliability.run import compute_optimal_for_deadline

    opts = _run_options(rates, trials, seed, asynchronous, hot_spares, elastic, storage_bw, interval, pue, gpu_hour_usd)
    g = get_gpu(gpu)
    s = _analyse(model, gpu, gpus, framework, _layout_arg(layout, global_batch, seq_len, recompute, precision),
                 global_batch, seq_len, opts, tokens=tokens)
    if deadline_days is not None:
        s["compute_optimal_for_deadline"] = compute_optimal_for_deadline(s["model_flops_per_s"], deadline_days,
                                                                         s["ettr_mean"])
    # the days scale with the step time, so the step's evidence bounds them too
    ev = _evidence.evidence_for(load_model(model), g, framework, precision, gpus, seq_len)
    s["evidence"] = ev.as_json() if ev else None
    title = f"training {model} on {gpus:,} x {gpu}: where the peak FLOPs go"
    _plot(plot, lambda: plots.run_ledger(s, title=f"{title} ({s['layout']}, {s['wall_days_p50']:,.1f} days)"))
    if as_json:
        _emit_json(s)
        return
    reports.print_run(_out(), s, title)
    if deadline_days is not None:
        c = s["compute_optimal_for_deadline"]
        _out().print(f"compute-optimal for {deadline_days:g} days at this MFU and ETTR: {c['params'] / 1e9:,.0f} B "
                     f"parameters on {c['tokens'] / 1e12:,.1f} T tokens ({c['compute_flops']:.2e} FLOP)")
    if ev is not None:
        _out().print(ev.line() + " (the days scale with the step)", style="dim", markup=False)
    else:
        _out().print(_evidence.no_runs_line(load_model(model)), style="dim", markup=False)


@app.command()
def scale(
    model: ModelOpt = "llama3-8b",
    gpu: GpuOpt = "gb200",
    max_gpus: Annotated[int, typer.Option(help="largest cluster (sizes are powers of 4 from 1)")] = 1048576,
    tokens: Annotated[float | None, _num(help="token budget (default: 20 per parameter)")] = 15e12,
    seq_len: SeqOpt = 8192, framework: FrameworkOpt = CLI_FRAMEWORK,
    rates: RatesOpt = "llama3", trials: TrialsOpt = 2000, seed: SeedOpt = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON rows")] = False,
    plot: PlotOpt = None,
) -> None:
    """From one GPU to a million: step time, job MTBF, checkpoint interval, ETTR and days to train."""
    from rich.progress import track
    from rich.table import Table

    from .parallelism.framework import get_framework
    from .reliability.run import RunOptions, scale_table

    if max_gpus < 1:
        raise InputError("max_gpus", f"must be a positive integer, got {max_gpus}")
    sizes, n = [], 1
    while n <= max_gpus:
        sizes.append(n)
        n *= 4
    m, g, fw = load_model(model), get_gpu(gpu), get_framework(framework)
    opts = RunOptions(rates=rates, trials=trials, seed=seed)
    rows = []
    for size in track(sizes, description="planning and simulating", disable=as_json, transient=True):
        rows += scale_table(m, g, [size], framework=fw, tokens=tokens, seq_len=seq_len, options=opts)
    _plot(plot, lambda: plots.scale(rows, title=f"{m.name} on {gpu}, {tokens or 20 * m.num_params:.3g} tokens, "
                                                f"rates {rates}, {framework}"))
    if as_json:
        _emit_json(rows)
        return
    t = Table(title=f"{m.name} on {gpu}, {tokens or 20 * m.num_params:.3g} tokens, rates {rates}")
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
    _out().print(t)


@app.command()
def sweep(
    db: Annotated[str, typer.Option(help="DuckDB file (new, or resumed if same grid)")] = "sweep.duckdb",
    models: Annotated[str, typer.Option(help="comma-separated model keys")] = "llama3-8b,llama3-70b",
    gpu_types: Annotated[str, typer.Option("--gpu-types", help="comma-separated GPU keys")] = "h100-sxm,b200",
    sizes: Annotated[str, typer.Option(help="comma-separated GPU counts")] = "64,256,1024",
    tp: Annotated[str, typer.Option(help="TP values")] = "1,2,4,8",
    pp: Annotated[str, typer.Option(help="PP values")] = "1,2,4,8",
    cp: Annotated[str, typer.Option(help="CP values")] = "1,2",
    micro_batch: Annotated[str, typer.Option(help="micro-batch values")] = "1,2",
    recompute: Annotated[str, typer.Option(help="recompute values")] = "none,selective,full",
    zero: Annotated[str, typer.Option(help="ZeRO stages")] = "1,3",
    seq_len: Annotated[str, typer.Option(help="sequence lengths")] = "8192",
    global_batch: Annotated[str, typer.Option(help="global batch sizes")] = "1024",
    precision: Annotated[str, typer.Option(help="precisions")] = "bf16",
    framework: FrameworkOpt = CLI_FRAMEWORK,
    executor: Annotated[str, typer.Option(help="local (processes) | ray")] = "local",
    address: Annotated[str | None, typer.Option(help="Ray cluster address (with --executor ray)")] = None,
    workers: Annotated[int, typer.Option(help="local processes or Ray CPUs")] = 2,
    chunk: Annotated[int, typer.Option(help="scenarios per task and per transaction")] = 500,
    log: Annotated[bool, typer.Option("--log", help="print a line per committed chunk instead of a bar")] = False,
    plot: PlotOpt = None,
) -> None:
    """Price a grid of scenarios into DuckDB; rerun the same command to resume after a kill.

    Prints, on stderr, the fastest layout that fits for each model, GPU type, size, batch, sequence
    and precision (from the database: a resumed sweep reports every scenario stored); stdout's one
    line is the JSON count of scenarios."""
    from rich.progress import Progress

    from .parallelism.framework import get_framework
    from .planner.sweep import SweepGrid, best_per_cell, parse_axis, print_progress_line, run_sweep

    get_framework(framework)
    grid = SweepGrid(model=parse_axis(models, str, "models"), gpu=parse_axis(gpu_types, str, "gpu-types"),
                     gpus=parse_axis(sizes, int, "sizes"), tp=parse_axis(tp, int, "tp"), pp=parse_axis(pp, int, "pp"),
                     cp=parse_axis(cp, int, "cp"), micro_batch=parse_axis(micro_batch, int, "micro-batch"),
                     recompute=parse_axis(recompute, str, "recompute"), zero=parse_axis(zero, int, "zero", 0),
                     seq_len=parse_axis(seq_len, int, "seq-len"),
                     global_batch=parse_axis(global_batch, int, "global-batch"),
                     precision=parse_axis(precision, str, "precision"), framework=framework)
    for m in grid.model:
        load_model(m)
    for g in grid.gpu:
        get_gpu(g)
    for p in grid.precision:  # values no scenario could use: one error now, not a table of failed rows
        Layout(precision=p)
    for r in grid.recompute:
        Layout(recompute=r)
    for z in grid.zero:
        Layout(zero_stage=z)
    if log:
        res = run_sweep(grid, db, executor=executor, workers=workers, chunk=chunk, address=address,
                        progress=print_progress_line)
    else:
        with Progress(console=_out()) as bar:
            task = bar.add_task("scenarios", total=grid.size)
            res = run_sweep(grid, db, executor=executor, workers=workers, chunk=chunk, address=address,
                            progress=lambda done, total: bar.update(task, completed=done))
    cells = best_per_cell(db)
    Console(stderr=True, width=160).print(reports.sweep_table(cells, f"{db}: the fastest layout that fits, per cell"))
    _plot(plot, lambda: plots.sweep(cells, title=f"{db} ({grid.framework})"))
    typer.echo(json.dumps(res))


@app.command()
def calibrate(
    out: Annotated[str, typer.Option(help="profile TOML to write")] = "profile.toml",
    nproc: Annotated[int, typer.Option(help="local processes for collectives (1 = device only)")] = 1,
    quick: Annotated[bool, typer.Option("--quick", help="a smaller grid (about 15 s on a CPU)")] = False,
    device: Annotated[str, typer.Option(help="auto | cpu | cuda")] = "auto",
    dtypes: Annotated[str | None, typer.Option(help="comma-separated: fp32, bf16, fp16 (default by device)")] = None,
    nccl_tests: Annotated[list[str] | None, typer.Option("--nccl-tests", help="nccl-tests output file(s) to "
                                                          "fit instead of measuring collectives")] = None,
    kind: Annotated[str | None, typer.Option(help="collective of the nccl-tests files if not in them")] = None,
    gpu: Annotated[str | None, typer.Option(help="with --nccl-tests: take compute figures from this catalog GPU "
                                            "instead of measuring here (no torch needed)")] = None,
    timeout: Annotated[float, _num(help="seconds before worker processes are killed")] = 900.0,
    as_json: Annotated[bool, typer.Option("--json", help="print the profile as JSON")] = False,
) -> None:
    """Measure GEMMs, memory kernels, attention and collectives here; fit; write a device profile."""
    import dataclasses as dc

    from rich.progress import Progress, SpinnerColumn, TextColumn

    from .calibration import calibrate as cal

    if gpu is not None:
        if not nccl_tests:
            raise InputError("gpu", "--gpu replaces the device measurement only together with --nccl-tests")
        prof = cal.catalog_profile(get_gpu(gpu))
    else:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=_out(), transient=True,
                      disable=as_json) as bar:
            task = bar.add_task("calibrating", total=None)
            prof = cal.calibrate(nproc=nproc, quick=quick, device=device,
                                 dtypes=tuple(d.strip() for d in dtypes.split(",")) if dtypes else None,
                                 timeout_s=timeout, progress=lambda msg: bar.update(task, description=msg))
    if nccl_tests:
        coll = dict(prof.collectives)
        for path in nccl_tests:
            from pathlib import Path

            p = Path(path)
            if not p.is_file():
                raise InputError("nccl-tests", f"no such file: {p}")
            r = cal.parse_nccl_tests(p.read_text(), kind=kind, name=p.name)
            coll[r["kind"]] = {"alpha_s": r["alpha_s"], "busbw_bytes_per_s": r["busbw_bytes_per_s"],
                               "nranks": float(r["nranks"])}
        prof = dc.replace(prof, collectives=coll, backend=prof.backend or "nccl-tests")
    from pathlib import Path

    Path(out).write_text(prof.to_toml())
    if as_json:
        _emit_json({k: v for k, v in dc.asdict(prof).items() if k != "points"} | {"profile": out})
        return
    con = _out()
    for dt, g in prof.gemm.items():
        con.print(f"GEMM {dt}: {g['rate_flops_per_s'] / 1e12:.3f} TFLOP/s sustained ({g['overhead_s'] * 1e6:.0f} us "
                  "per call)")
    con.print(f"memory-bound kernels: {prof.memory_bytes_per_s / 1e9:.1f} GB/s; large copies "
              f"{prof.copy_bytes_per_s / 1e9:.1f} GB/s; per-kernel overhead {prof.op_overhead_s * 1e6:.1f} us")
    con.print(f"attention ({prof.attention['dtype']}): fwd {prof.attention['fwd_flops_per_s'] / 1e12:.3f}, bwd "
              f"{prof.attention['bwd_flops_per_s'] / 1e12:.3f} TFLOP/s")
    for k, c in prof.collectives.items():
        con.print(f"{k} ({int(c['nranks'])} ranks): alpha {c['alpha_s'] * 1e6:.0f} us, busbw "
                  f"{c['busbw_bytes_per_s'] / 1e9:.2f} GB/s")
    con.print(f"wrote {out}")


@app.command()
def verify(
    profile: Annotated[str, typer.Option(help="device profile from supercluster calibrate")] = "profile.toml",
    nproc: Annotated[int, typer.Option(help="local processes (must equal dp x tp)")] = 2,
    dp: Annotated[int, typer.Option(help="data parallel degree")] = 0,
    tp: Annotated[int, typer.Option(help="tensor parallel degree")] = 1,
    fsdp: Annotated[bool, typer.Option("--fsdp", help="FSDP2 instead of DDP for data parallelism")] = False,
    layers: Annotated[int, typer.Option(help="transformer layers")] = 2,
    hidden: Annotated[int, typer.Option(help="model width")] = 512,
    heads: Annotated[int, typer.Option(help="attention heads")] = 8,
    seq_len: Annotated[int, typer.Option(help="tokens per sequence")] = 256,
    micro_batch: Annotated[int, typer.Option(help="sequences per rank")] = 4,
    steps: Annotated[int, typer.Option(help="timed steps after 2 warm-up steps")] = 6,
    timeout: Annotated[float, _num(help="seconds before worker processes are killed")] = 600.0,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Train a small GPT for real on local processes; compare its median step with the prediction."""
    from .calibration.calibrate import load_profile
    from .calibration.verify import VerifyConfig
    from .calibration.verify import verify as run_verify

    prof = load_profile(profile)
    if dp == 0:
        if nproc % tp:
            raise InputError("tp", f"{tp} does not divide --nproc {nproc}")
        dp = nproc // tp
    if dp * tp != nproc:
        raise InputError("nproc", f"{nproc} must equal dp x tp = {dp} x {tp}")
    cfg = VerifyConfig(layers=layers, hidden=hidden, heads=heads, seq_len=seq_len, micro_batch=micro_batch, dp=dp,
                       tp=tp, fsdp=fsdp, steps=steps, precision="fp32" if prof.kind == "cpu" else "bf16")
    r = run_verify(cfg, prof, timeout_s=timeout)
    if as_json:
        _emit_json(r)
        return
    _out().print(f"{r['layout']}{' FSDP2' if fsdp else ''}, GPT L{layers} H{hidden} s{seq_len} b{micro_batch}: "
                 f"measured {r['measured_step_time_s']:.4f} s, predicted {r['predicted_step_time_s']:.4f} s, "
                 f"error {100 * r['error']:+.1f}%")


def _over(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError("oversubscription", f"cannot read {text!r}; use e.g. 1,2 (down:up of each tier below "
                         "the top, leaf first)") from None


@app.command()
def simulate(
    ctx: typer.Context,
    model: ModelOpt = "llama3-70b",
    gpu: GpuOpt = "h100-sxm",
    gpus: GpusOpt = 64,
    layout: LayoutOpt = None,
    recompute: Annotated[str, typer.Option(help="none | selective | full",
                                           show_default="none; without --layout, the planner's choice")] = "none",
    global_batch: GbsOpt = 128, seq_len: SeqOpt = 8192,
    precision: Annotated[str, typer.Option(help="bf16 | fp16 | fp8 | fp4")] = "bf16",
    framework: FrameworkOpt = CLI_FRAMEWORK,
    jitter: Annotated[float, _num(help="log-normal sigma of each operation's duration (0 = none)")] = 0.0,
    seed: SeedOpt = 0,
    exact_stages: Annotated[bool, typer.Option("--exact-stages", help="each stage its own layers (and the last "
                                               "the head) instead of the ledger's heaviest stage")] = False,
    trace: Annotated[str | None, typer.Option(help="write a Chrome / Perfetto trace JSON here")] = None,
    pp_layout: Annotated[str | None, typer.Option(help="explicit pipeline layout (as estimate --pp-layout; "
                                                  "with --layout)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
    plot: PlotOpt = None,
) -> None:
    """Lay one step out on the pipeline schedule: when each stage computes, sends and idles."""
    from .job import default_network
    from .parallelism.framework import get_framework
    from .planner.search import plan
    from .simulation.timeline import simulate as run_sim

    m, g, fw = load_model(model), get_gpu(gpu), get_framework(framework)
    if pp_layout is not None and not layout:
        raise InputError("pp_layout", "needs --layout (the parallel degrees it splits)")
    lay = Layout.from_string(layout, global_batch=global_batch, seq_len=seq_len, recompute=recompute,
                             precision=precision, pp_layout=pp_layout) if layout else \
        plan(m, g, gpus, global_batch=global_batch, seq_len=seq_len, framework=fw, precisions=(precision,),
             top=1, fixed=_fixed_settings(seq_len, precision, recompute=recompute)
             if "recompute" in _given_options(ctx) else None).best.layout
    lay.check_gpus(gpus)
    from rich.progress import Progress, SpinnerColumn, TextColumn

    ops = 2 * lay.num_microbatches * lay.vpp * lay.pp
    # a spinner for the big schedules (about 40,000 operations a second)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=_out(), transient=True,
                  disable=as_json or ops < 20000) as bar:
        bar.add_task(f"simulating {ops:,} operations on {lay.pp} stage(s)", total=None)
        tl = run_sim(m, layout=lay, gpu=g, net=default_network(g, num_gpus=gpus), fw=fw, jitter=jitter, seed=seed,
                     exact_stages=exact_stages)
    if trace:
        try:
            with open(trace, "w", encoding="utf-8") as f:
                json.dump(tl.to_trace(), f)
        except OSError as exc:
            raise InputError("trace", f"cannot write {trace}: {exc.strerror}") from None
    _plot(plot, lambda: plots.timeline(tl.to_trace(), title=f"{model} on {gpus:,} x {gpu}, {lay.short()} (mb "
                                                            f"{lay.micro_batch}): one step, {tl.step_time_s:.3g} s"))
    s = {**tl.summary(), "layout": lay.short(), "micro_batch": lay.micro_batch, "trace": trace,
         "gantt": tl.gantt() if tl.pp <= 32 else []}
    if as_json:
        _emit_json(s)
        return
    reports.print_timeline(_out(), s, f"{model} on {gpus:,} x {gpu}, {lay.short()} (mb {lay.micro_batch}): "
                                      "one step on the pipeline schedule")


@app.command()
def fabric(
    gpus: GpusOpt = 16384,
    gpu: Annotated[str, typer.Option(help="GPU key (its default system sets node, NIC and host power)")] = "h100-sxm",
    switch: Annotated[str | None, typer.Option(help="scale-out switch (default by NIC speed)")] = None,
    tiers: Annotated[int | None, typer.Option(help="tiers (default: the fewest that reach --gpus)")] = None,
    oversubscription: Annotated[str | None, typer.Option(
        help="down:up of each tier below the top, leaf first, e.g. 1,2 (the top tier has no uplinks)")] = None,
    planes: Annotated[int | None, typer.Option(help="independent network planes",
                                               show_default="the system's NIC ports per GPU")] = None,
    sharp: Annotated[bool, typer.Option("--sharp", help="in-network all-reduce (switches that support it)")] = False,
    pue: Annotated[float, _num(help="facility PUE")] = 1.1,
    compare: Annotated[bool, typer.Option("--compare", help="every catalog switch x 1/2/4/8 planes side by side")]
    = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    plot: PlotOpt = None,
) -> None:
    """Size the scale-out fabric for N GPUs: tiers, switches, optics, bisection, power and cost."""
    if plot is not None and not compare:
        raise InputError("plot", "draws the options side by side: use it with --compare")
    from rich.table import Table

    from .hardware.specs import get_system
    from .network.fabric import build_fabric, compare_options, fabric_summary

    g = get_gpu(gpu)
    system = get_system(g.system)
    over = _over(oversubscription)
    if compare:
        rows = compare_options(gpus, g, system, pue=pue, oversubscription=over)
        _plot(plot, lambda: plots.fabric_options(rows, title=f"{gpus:,} x {gpu}: fabric options (rail-optimized "
                                                              f"Clos, PUE {pue:g})"))
        if as_json:
            _emit_json(rows)
            return
        t = Table(title=f"{gpus:,} x {gpu}: fabric options (rail-optimized Clos, PUE {pue:g})")
        for col in ("switch", "planes", "link", "tiers", "switches", "optics", "MW", "network MW", "capex $B",
                    "network $B", "bisection PB/s", "1 TB all-reduce"):
            t.add_column(col, justify="left" if col == "switch" else "right")
        for r in rows:
            t.add_row(str(r["switch"]), str(r["planes"]), f"{r['link_gbit']:g}G", str(len(r["tiers"])),  # type: ignore[arg-type]
                      f"{r['total_switches']:,}", f"{r['transceivers']:,}", f"{r['power_w'] / 1e6:,.0f}",
                      f"{r['network_power_w'] / 1e6:,.1f}", f"{r['capex_usd'] / 1e9:,.1f}",
                      f"{r['network_capex_usd'] / 1e9:,.2f}", f"{r['bisection_bytes_per_s'] / 1e15:,.1f}",
                      f"{r['allreduce_time_s']:.2f} s")
        _out().print(t)
        return
    fab = build_fabric(gpus, g, system, switch=switch, tiers=tiers, oversubscription=over, planes=planes)
    s = fabric_summary(fab, g, system, pue=pue, sharp=sharp)
    if as_json:
        _emit_json(s)
        return
    t = Table(title=f"{gpus:,} x {gpu} on {fab.switch.name}, {fab.planes} plane(s) of {fab.link_gbit:g} Gb/s links")
    for col in ("tier", "switches", "radix", "down", "up", "down:up", "links up", "GPUs below", "latency"):
        t.add_column(col, justify="right")
    for tr in s["tiers"]:  # type: ignore[attr-defined]
        t.add_row(str(tr["level"]), f"{tr['switches']:,}", str(tr["radix"]), str(tr["down_ports"]),
                  str(tr["up_ports"]), f"{tr['oversubscription']:g}", f"{tr['links']:,}", f"{tr['gpus_below']:,}",
                  f"{tr['latency_s'] * 1e6:.2f} us")
    con = _out()
    con.print(t)
    con.print(f"switches {s['total_switches']:,} | transceivers {s['transceivers']:,} | bisection "
              f"{s['bisection_bytes_per_s'] / 1e12:,.1f} TB/s | max {s['max_hops']} switch hops")
    con.print(f"power {s['power_w'] / 1e6:,.1f} MW at PUE {pue:g} (GPUs {s['gpu_power_w'] / 1e6:,.1f}, hosts "
              f"{s['host_power_w'] / 1e6:,.1f}, network {s['network_power_w'] / 1e6:,.2f} MW) | capex "
              f"${s['capex_usd'] / 1e9:,.2f} B (network ${s['network_capex_usd'] / 1e9:,.3f} B; hosts not priced)")
    con.print(f"all-reduce of {s['allreduce_bytes'] / 1e12:g} TB over all GPUs: {s['allreduce_time_s']:.3f} s")


def main() -> None:
    """Entry point: user mistakes print one line and exit 2, never a traceback."""
    try:
        app(standalone_mode=True)
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
