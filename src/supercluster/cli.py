"""Command line: parse, call the library, hand the result to ``reports``. Errors exit 2 in one line."""

from __future__ import annotations

import dataclasses
import json
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console

from . import reports
from .errors import InputError
from .estimate import estimate as estimate_step
from .hardware import get_gpu, gpu_catalog, system_catalog
from .layout import Layout
from .models import load_model, model_catalog
from .validate import validate as run_validation

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Treat a GPU cluster as one machine: step time, memory, MFU and where every FLOP goes.")


class CatalogKind(StrEnum):
    gpus = "gpus"
    systems = "systems"
    models = "models"


def _out() -> Console:
    return Console(width=160)


def _emit_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, default=lambda o: dataclasses.asdict(o) if dataclasses.is_dataclass(o)
                          else str(o)))


@app.command()
def catalog(kind: Annotated[CatalogKind, typer.Argument(help="what to list")] = CatalogKind.gpus,
            as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """List the built-in GPUs, systems or models with their figures."""
    data = {"gpus": gpu_catalog, "systems": system_catalog, "models": model_catalog}[kind.value]()
    if as_json:
        _emit_json({k: dataclasses.asdict(v) for k, v in data.items()})
        return
    table = {"gpus": reports.gpus_table, "systems": reports.systems_table, "models": reports.models_table}[kind.value]
    _out().print(table(data))  # type: ignore[operator]


@app.command()
def estimate(
    model: Annotated[str, typer.Option(help="preset key or path to a Hugging Face config.json")] = "llama3-405b",
    gpu: Annotated[str, typer.Option(help="GPU key (supercluster catalog gpus)")] = "h100-sxm",
    gpus: Annotated[int, typer.Option(help="number of GPUs")] = 16384,
    tp: Annotated[int, typer.Option(help="tensor parallel degree")] = 8,
    pp: Annotated[int, typer.Option(help="pipeline parallel degree")] = 16,
    dp: Annotated[int, typer.Option(help="data parallel degree (0 = gpus / (tp pp cp))")] = 0,
    cp: Annotated[int, typer.Option(help="context parallel degree")] = 1,
    ep: Annotated[int, typer.Option(help="expert parallel degree (carved out of dp x cp)")] = 1,
    vpp: Annotated[int, typer.Option(help="interleaved pipeline chunks per stage")] = 4,
    micro_batch: Annotated[int, typer.Option(help="sequences per micro-batch")] = 1,
    global_batch: Annotated[int, typer.Option(help="sequences per optimizer step")] = 2048,
    seq_len: Annotated[int, typer.Option(help="sequence length in tokens")] = 8192,
    precision: Annotated[str, typer.Option(help="bf16 | fp16 | fp8 | fp4")] = "bf16",
    recompute: Annotated[str, typer.Option(help="none | selective | full")] = "none",
    zero: Annotated[int, typer.Option(help="ZeRO stage 0-3 (1 = distributed optimizer, 3 = FSDP)")] = 1,
    framework: Annotated[str, typer.Option(help="megatron | nemo-megatron | deepspeed | torchtitan")] = "megatron",
    sequence_parallel: Annotated[bool, typer.Option("--sequence-parallel/--no-sequence-parallel",
                                                    help="shard norms and dropout over TP ranks")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object")] = False,
) -> None:
    """Predict one training step: time, throughput, MFU, memory and the time ledger."""
    if dp == 0:
        denom = tp * pp * cp
        if denom <= 0 or gpus % denom:
            raise InputError("dp", f"gpus {gpus} is not divisible by tp x pp x cp = {tp} x {pp} x {cp}; give --dp")
        dp = gpus // denom
    layout = Layout(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vpp=vpp, micro_batch=micro_batch, global_batch=global_batch,
                    seq_len=seq_len, precision=precision, recompute=recompute, zero_stage=zero,
                    sequence_parallel=sequence_parallel)
    m = load_model(model)
    b = estimate_step(m, gpu=get_gpu(gpu), num_gpus=gpus, layout=layout, framework=framework)
    if as_json:
        _emit_json(reports.breakdown_json(b, model=m.key, gpu=gpu, gpus=gpus, layout=layout.short(),
                                          framework=framework))
        return
    reports.print_breakdown(_out(), b, f"{m.name} on {gpus:,} x {gpu}, {layout.short()}, {precision}, {framework}")


@app.command()
def validate(
    runs: Annotated[str | None, typer.Option(help="runs CSV (default: the shipped public-runs.csv)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Predict every scored published run and report per-row error, MAPE and the worst row."""
    res = run_validation(runs)
    if as_json:
        out = dict(res)
        out["rows"] = [dataclasses.asdict(r) for r in res["rows"]]  # type: ignore[attr-defined]
        _emit_json(out)
        return
    con = _out()
    con.print(reports.validation_table(res))
    con.print(f"MAPE {100 * res['mape']:.1f}% | worst {100 * res['worst_abs_error']:.1f}% ({res['worst_row']}) | "
              f"supported {100 * res['supported_fraction']:.0f}%")
    for g in res["ranking"]:  # type: ignore[attr-defined]
        con.print(f"ranking {g['group']}: {'matches' if g['match'] else 'DIFFERS'} "
                  f"(measured {g['measured_order']}, predicted {g['predicted_order']})")


def main() -> None:
    """Entry point: user mistakes print one line and exit 2, never a traceback."""
    try:
        app(standalone_mode=True)
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
