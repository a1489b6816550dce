"""Hypothesis over the commands' options: any mix of plausible and implausible values ends in an
answer or one named error (exit 0 or 2), never a traceback, and no answer holds a NaN, an infinity or
a negative time, memory, power or cost. Examples are drawn the same on every run (tests/conftest.py)."""

from __future__ import annotations

import json
import math
import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from supercluster.cli import app
from supercluster.errors import InputError

NUMBERS = ["0", "-1", "1", "2", "3", "7", "8", "64", "1024", "16384", "2147483648", "99999999999999999999", "1e30",
           "abc", "nan", "-0.5"]
FLOATS = ["0", "-1", "0.5", "1", "1.1", "54", "1e300", "inf", "x"]
#: command -> its options and the values drawn for each
OPTIONS: dict[str, dict[str, list[str]]] = {
    "estimate": {"--model": ["llama3-8b", "mixtral-8x7b", "nemotronh-8b", "nope", "n" * 300], "--gpus": NUMBERS,
                 "--tp": NUMBERS, "--pp": NUMBERS, "--cp": NUMBERS, "--ep": NUMBERS, "--micro-batch": NUMBERS,
                 "--global-batch": NUMBERS, "--seq-len": NUMBERS, "--precision": ["bf16", "fp8", "fp4", "int3"],
                 "--recompute": ["none", "full", "half"], "--zero": ["0", "3", "9"],
                 "--framework": ["megatron", "torchtitan", "deepspeed", "unknown", "megatron+cp-a2a"],
                 "--layout": ["tp2-pp2", "tp8-pp1-dp8", "tpx", "tp0"], "--nic-gbit-per-gpu": FLOATS,
                 "--gpus-per-node": NUMBERS},
    "plan": {"--model": ["llama3-8b", "gpt-oss-20b"], "--gpus": NUMBERS, "--global-batch": NUMBERS,
             "--seq-len": NUMBERS, "--top": NUMBERS, "--objective": ["time", "cost", "energy", "speed"],
             "--headroom": FLOATS, "--gpu-hour-usd": FLOATS, "--nic-gbit-per-gpu": FLOATS, "--gpus-per-node": NUMBERS},
    "goodput": {"--gpus": NUMBERS, "--days": FLOATS, "--trials": ["1", "50", "0", "-3"], "--pue": FLOATS,
                "--layout": ["tp8-pp16-dp128-vpp4", "tp8-pp2"], "--model": ["llama3-8b", "llama3-405b"],
                "--storage-bw": FLOATS, "--interval": FLOATS, "--rates": ["llama3", "rsc1", "none"]},
    "train": {"--gpus": NUMBERS, "--tokens": FLOATS, "--trials": ["1", "50", "0"], "--model": ["llama3-8b"],
              "--deadline-days": FLOATS, "--gpu-hour-usd": FLOATS},
    "fabric": {"--gpus": NUMBERS, "--pue": FLOATS, "--tiers": NUMBERS, "--planes": NUMBERS,
               "--oversubscription": ["1", "2,2", "0.5", "x", "1,1,1,1,1"], "--gpu": ["h100-sxm", "gb200", "tpu"]},
    "simulate": {"--gpus": NUMBERS, "--layout": ["tp4-pp4-dp4-vpp5", "tp1-pp2-dp32", "zz"], "--jitter": FLOATS,
                 "--global-batch": NUMBERS, "--model": ["llama3-8b", "llama3-70b"], "--seed": NUMBERS},
    "compare": {"--model": ["llama3-8b", "mixtral-8x7b", "nope"], "--gpu-types": ["h100-sxm,b200", "tpu", ","],
                "--gpus": NUMBERS, "--global-batch": NUMBERS, "--seq-len": NUMBERS, "--tokens": FLOATS,
                "--objective": ["time", "cost", "x"], "--framework": ["megatron", "nemo-megatron+capacity-1.2", "x"]},
    "scale": {"--model": ["llama3-8b", "x"], "--gpu": ["gb200", "x"], "--max-gpus": NUMBERS, "--tokens": FLOATS,
              "--seq-len": NUMBERS, "--rates": ["llama3", "none", "x"], "--trials": NUMBERS, "--seed": NUMBERS},
    "validate": {"--runs": ["public", "heldout", "x", "/nonexistent.csv", "r" * 300 + ".csv"],
                 "--by": ["gpu", "kind", "x"]},
    "sweep": {"--models": ["llama3-8b", "llama3-8b,mixtral-8x7b", "x", ""], "--gpu-types": ["h100-sxm", "x"],
              "--sizes": ["8", "8,16", "0", "x", "8,1048576", "2147483648"],
              "--tp": ["1", "1,2", "0", "x", "1,2147483648"],
              "--pp": ["1", "2", "-1"], "--micro-batch": ["1", "1,2", "0"], "--zero": ["0", "1,3", "9"],
              "--seq-len": ["2048", "0", "x"], "--global-batch": ["64", "0", "2147483648"], "--workers": NUMBERS,
              # (a chunk of 1-8 cells commits every few cells: a default grid then takes 20 s, by design)
              "--chunk": ["0", "-1", "64", "2147483648", "x"], "--precision": ["bf16", "bf16,fp8", "x"]},
    "report": {"--model": ["llama3-8b", "x"], "--gpus": NUMBERS, "--global-batch": NUMBERS, "--seq-len": NUMBERS,
               "--tokens": FLOATS, "--gpu-types": ["h100-sxm", "x"], "--trials": NUMBERS, "--seed": NUMBERS},
}
#: the file each writing command is given (in a fresh folder per example), and whether it prints JSON
WRITES = {"sweep": ("--db", "grid.duckdb"), "report": ("--out", "report")}
#: what an answer may never hold below zero
NON_NEGATIVE = ("_s", "_bytes", "_w", "_usd", "_mw", "_mwh", "_flops", "days", "hours", "power", "cost")


def _bad_numbers(obj: object, path: str = "") -> list[str]:
    if isinstance(obj, dict):
        return [b for k, v in obj.items() for b in _bad_numbers(v, f"{path}.{k}")]
    if isinstance(obj, list):
        return [b for i, v in enumerate(obj) for b in _bad_numbers(v, f"{path}[{i}]")]
    if isinstance(obj, float) and not math.isfinite(obj):
        return [f"{path} = {obj}"]
    if isinstance(obj, (int, float)) and obj < 0 and any(path.lower().endswith(s) for s in NON_NEGATIVE) \
            and "error" not in path and "delta" not in path:
        return [f"{path} = {obj}"]
    return []


@st.composite
def invocations(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(sorted(OPTIONS)))
    opts = OPTIONS[command]
    names = draw(st.lists(st.sampled_from(sorted(opts)), min_size=1, max_size=4, unique=True))
    argv = [command]
    for name in names:
        argv += [name, draw(st.sampled_from(opts[name]))]
    return argv


#: examples per run: 120 in the suite (about 70 s alone, most of it the default compare, report and simulate
#: jobs); SUPERCLUSTER_FUZZ_EXAMPLES=400 SUPERCLUSTER_EXPLORE=1 for a hunt
EXAMPLES = int(os.environ.get("SUPERCLUSTER_FUZZ_EXAMPLES", "120"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(invocations())
def test_any_options_give_an_answer_or_one_named_error(argv):
    if argv[0] in WRITES:  # (no --json: a table or the files written)
        flag, name = WRITES[argv[0]]
        with tempfile.TemporaryDirectory() as folder:
            r = CliRunner().invoke(app, [*argv, flag, os.path.join(folder, name)])
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            assert isinstance(r.exception, InputError), (argv, repr(r.exception))
        else:
            assert r.exit_code in (0, 2), (argv, r.output[-500:])
        return
    r = CliRunner().invoke(app, [*argv, "--json"])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        assert isinstance(r.exception, InputError), (argv, repr(r.exception))
        return
    assert r.exit_code in (0, 2), (argv, r.output[-500:])  # 2: the option parser refused a value
    if r.exit_code == 0:
        bad = _bad_numbers(json.loads(r.stdout))
        assert not bad, (argv, bad[:5])
