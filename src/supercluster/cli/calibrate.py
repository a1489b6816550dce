"""supercluster calibrate, verify: measure this machine, check the model against real steps."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import InputError
from ..hardware.specs import get_gpu
from .app import (
    ForceOpt,
    _emit_json,
    _num,
    _out,
    _output_path,
    _spinner,
    app,
)


@app.command()
def calibrate(
    out: Annotated[str, typer.Option(help="profile TOML to write", callback=_output_path)] = "profile.toml",
    force: ForceOpt = False,
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

    from ..calibration import calibrate as cal
    from ..calibration.profile import catalog_profile
    from ..network.twolevel import KINDS

    if kind is not None:  # (checked before any measuring)
        if not nccl_tests:
            raise InputError("kind", "--kind names the collective of --nccl-tests files; give it with them")
        if kind not in KINDS:
            raise InputError("kind", f"unknown {kind!r}; allowed: {', '.join(KINDS)}")
    if gpu is not None:
        if not nccl_tests:
            raise InputError("gpu", "--gpu replaces the device measurement only together with --nccl-tests")
        prof = catalog_profile(get_gpu(gpu))
    else:
        with _spinner("calibrating") as say:
            prof = cal.calibrate(nproc=nproc, quick=quick, device=device,
                                 dtypes=tuple(d.strip() for d in dtypes.split(",")) if dtypes else None,
                                 timeout_s=timeout, progress=say)
    if nccl_tests:
        coll = dict(prof.collectives)
        for path in nccl_tests:
            from ..files import read_input, user_path

            p = user_path(path, "nccl-tests")
            if not p.is_file():
                raise InputError("nccl-tests", f"no such file: {p}")
            r = cal.parse_nccl_tests(read_input(p, "nccl-tests"), kind=kind, name=p.name)
            coll[r["kind"]] = {"alpha_s": r["alpha_s"], "busbw_bytes_per_s": r["busbw_bytes_per_s"],
                               "nranks": float(r["nranks"])}
        prof = dc.replace(prof, collectives=coll, backend=prof.backend or "nccl-tests")

    from ..files import check_output, write_atomic

    write_atomic(check_output(out, "out", force=force, inputs=nccl_tests or ()), prof.to_toml())
    if as_json:
        _emit_json({k: v for k, v in dc.asdict(prof).items() if k != "points"} | {"profile": out})
        return
    con = _out()
    for dt, g in prof.gemm.items():
        con.print(f"GEMM {dt}: {g['rate_flops_per_s'] / 1e12:.3f} TFLOP/s sustained ({g['overhead_s'] * 1e6:.0f} us "
                  "per call)")
    con.print(f"memory-bound kernels: {prof.memory_bytes_per_s / 1e9:.1f} GB/s; large copies "
              f"{prof.copy_bytes_per_s / 1e9:.1f} GB/s; per-kernel overhead {prof.op_overhead_s * 1e6:.1f} us "
              f"(synchronized), {prof.launch_s * 1e6:.1f} us to issue one into a busy queue")
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
    from ..calibration.profile import load_profile
    from ..calibration.verify import VerifyConfig
    from ..calibration.verify import verify as run_verify

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
