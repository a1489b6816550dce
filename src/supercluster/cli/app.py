"""The typer app, the options several commands share, and the helpers every command uses."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
from collections.abc import Callable, Iterator
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console

from ..errors import InputError
from ..parallelism.framework import DEFAULT_FRAMEWORK

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
                  help="Treat a GPU cluster as one machine: step time, memory, MFU and where every FLOP goes. "
                       f"Every command prices under the {DEFAULT_FRAMEWORK} framework profile unless --framework "
                       "(or a launcher config) says otherwise.")


def _version(value: bool) -> None:
    if value:
        from .._version import __version__

        typer.echo(f"supercluster {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print the version and exit")] = False) -> None:
    """Treat a GPU cluster as one machine: step time, memory, MFU and where every FLOP goes."""


# Options several commands share (each command sets its own default).
ModelOpt = Annotated[str, typer.Option(help="preset key, or path to a Hugging Face config.json or a Megatron-LM "
                                             "launch script (its architecture arguments); a +mtp / +mtpN suffix "
                                             "adds N multi-token-prediction modules (deepseek-v3+mtp)")]
def _gpu_key(value: str | None) -> str | None:
    """--gpu: a catalog key in any case (H200, MI300X) is that key, so every view names it alike."""
    from ..hardware.specs import gpu_key

    return value if value is None else gpu_key(value)


GpuOpt = Annotated[str, typer.Option(help="GPU key (supercluster catalog gpus)", callback=_gpu_key)]
PrecisionAnyOpt = Annotated[str, typer.Option(help="bf16 | fp16 | fp8 | any (bf16 and fp8, where the GPU has them)")]


def _gpu_count(value: int | None) -> int | None:
    """--gpus, checked where it enters: no more GPUs than any catalog fabric reaches (every count the
    commands size work by, divisors and all, stays bounded)."""
    if value is None:
        return None
    from ..network.fabric import check_gpu_count

    return check_gpu_count(value)


GpusOpt = Annotated[int, typer.Option(help="number of GPUs", callback=_gpu_count)]
GbsOpt = Annotated[int, typer.Option(help="sequences per optimizer step")]
# settings a plan keeps while it searches the rest (plan, compare: planner.plan(fixed=...))
KeepMbOpt = Annotated[int | None, typer.Option(help="keep this micro-batch size", show_default="searched")]
KeepZeroOpt = Annotated[int | None, typer.Option(help="keep this ZeRO stage 0-3", show_default="searched")]
KeepRecomputeOpt = Annotated[str | None, typer.Option(help="keep this recompute policy: none | selective | full",
                                                      show_default="searched")]
SeqOpt = Annotated[int, typer.Option(help="tokens per sequence")]
#: what --framework takes, said once for every command: a catalog profile and the options its suffixes add
FRAMEWORK_HELP = ("megatron | nemo-megatron | deepspeed | megatron-deepspeed | torchtitan | composer | hai-llm | "
                  "megatron-legacy | deepspeed-legacy | torchtitan-2024 | automodel | maxtext (supercluster catalog "
                  "frameworks); +compile for torch.compile, +ep-overlap, +deepep (DeepEP's dispatcher), "
                  "+embedding-split (embedding and head take a layer's place in the pipeline split), "
                  "+round-robin-gate (a benchmark's fixed gate: token i to experts ik ... ik + k - 1), +cp-a2a "
                  "(all-to-all, Ulysses, context parallelism); MoE routing: dropless unless +capacity-<C> "
                  "(token-drop at capacity factor C, e.g. +capacity-1.25), +pad-to-capacity (each expert's input "
                  "padded to its capacity); run options +cuda-graphs, +flash-attn (FlashAttention-2 where the "
                  "profile's attention is unfused), +tp-overlap / +no-tp-overlap, +dp-overlap / +no-dp-overlap, "
                  "fp8 recipe +fp8-delayed (default) / +fp8-current / +fp8-blockwise / +fp8-mxfp8")
FrameworkOpt = Annotated[str, typer.Option(help=FRAMEWORK_HELP)]


def _force(ctx: typer.Context, value: bool) -> bool:
    """--force, read first (an eager option) so that the output options' checks know it."""
    ctx.meta["force"] = value
    return value


ForceOpt = Annotated[bool, typer.Option("--force", is_eager=True, callback=_force,
                                        help="overwrite output files that exist (never one of the command's inputs)")]


def _output_path(ctx: typer.Context, param: Any, path: str | None) -> str | None:
    """An output file option's check at parse time, before any work: it may not exist (unless
    --force), be a symbolic link, or lie in a missing folder."""
    if path is not None:
        from ..files import check_output

        check_output(path, param.name, force=bool(ctx.meta.get("force")))
    return path


def _plot_path(ctx: typer.Context, param: Any, path: str | None) -> str | None:
    """--plot's check at parse time, before any pricing: the suffix must name a format, and the file
    may be written (:func:`_output_path`)."""
    if path is not None:
        from ..reports import plots

        plots.check_path(path)
    return _output_path(ctx, param, path)


PlotOpt = Annotated[str | None, typer.Option(callback=_plot_path, help="also draw it to this file, the suffix its "
                                             "format: .png, .svg or .pdf")]
CLI_FRAMEWORK = DEFAULT_FRAMEWORK  # (framework.DEFAULT_FRAMEWORK: one default for the API and every command)


class CatalogKind(StrEnum):
    gpus = "gpus"
    systems = "systems"
    models = "models"
    network = "network"
    frameworks = "frameworks"


def _out() -> Console:
    return Console(width=160)


def _finite_json(obj: Any) -> Any:
    """``obj`` with each non-finite number as null: JSON has no Infinity or NaN (a zero failure rate's
    MTBF is unbounded, not a number)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite_json(v) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _finite_json(dataclasses.asdict(obj))
    return obj


def _emit_json(obj: Any) -> None:
    typer.echo(json.dumps(_finite_json(obj), indent=2, allow_nan=False, default=str))


def _plot(path: str | None, draw: Any) -> None:
    """Draw a figure (``draw()``) to ``--plot``'s file, when one was given; say so on stderr, so
    that --json on stdout stays one object."""
    if path is not None:
        from ..reports import plots

        typer.echo(f"wrote {plots.save(draw(), path)}", err=True)


def _given_options(ctx: typer.Context) -> set[str]:
    """The command's options the user set (not left at their defaults)."""
    return {name for name in ctx.params
            if (src := ctx.get_parameter_source(name)) is not None and src.name not in ("DEFAULT", "DEFAULT_MAP")}


@contextlib.contextmanager
def _pricing_bar(description: str = "pricing layouts") -> Iterator[Callable[[int, int | None], None]]:
    """A bar while a plan prices its layouts (MoE searches run to millions of layouts, several
    seconds) or validate its rows; transient and on stderr, so --json and --export stay clean. Yields
    the ``progress(done, total)`` callback (total None: not known ahead)."""
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task(description, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@contextlib.contextmanager
def _spinner(description: str, *, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A transient spinner on stderr (shown on a terminal only, so --json stays clean) while a step of
    unknown length runs; yields the callback that changes its text."""
    from rich.progress import Progress, SpinnerColumn, TextColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=Console(stderr=True), transient=True,
                  disable=not enabled or not sys.stderr.isatty()) as bar:
        task = bar.add_task(description, total=None)
        yield lambda text: bar.update(task, description=text)


def _run_options(rates: str, trials: int, seed: int, asynchronous: bool, hot_spares: bool, elastic: bool,
                 storage_bw: float | None, interval_min: float | None, pue: float,
                 gpu_hour_usd: float | None) -> Any:
    from ..reliability.run import RunOptions

    return RunOptions(rates=rates, trials=trials, seed=seed, asynchronous=asynchronous, hot_spares=hot_spares,
                      elastic=elastic, storage_bytes_per_s=None if storage_bw is None else storage_bw * 1e9,
                      interval_s=None if interval_min is None else interval_min * 60.0, pue=pue,
                      gpu_hour_usd=gpu_hour_usd)


RatesOpt = Annotated[str, typer.Option(help="interruption rates: llama3 | rsc1 | rsc2 | path to a TOML file")]
NicOpt = Annotated[float | None, _num(help="the run's own network: scale-out Gb/s per GPU (its node's NICs over its "
                                           "GPUs: 8 x 200 Gb/s for 8 GPUs is 200); without fabric options, priced "
                                           "on the two-level model")]
NodeOpt = Annotated[int | None, typer.Option(help="the run's own node: its GPUs, joined by the scale-up links where "
                                             "the system's scale-up domain is one node")]
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


def _over(text: str | None) -> tuple[float, ...] | None:
    """--oversubscription: each tier's down:up ratio, leaf first, comma-separated; a tier as one number
    ("2") or as the ratio network engineers write ("2:1", "3:2")."""
    if text is None:
        return None

    def tier(part: str) -> float:
        down, _, up = part.partition(":")
        ratio = float(down) / float(up) if up.strip() else float(down)
        if not math.isfinite(ratio):
            raise ValueError(part)
        return ratio

    try:
        return tuple(tier(x) for x in text.split(",") if x.strip())
    except (ValueError, ZeroDivisionError):
        raise InputError("oversubscription", f"cannot read {text!r}; use e.g. 2:1 or 1,2 (down:up of each tier "
                         "below the top, leaf first)") from None
