"""Golden outputs: every command's JSON on varied jobs, pinned.

Each case runs one command with ``--json`` in process and compares its output with the file in
``tests/golden/``: numbers to 1e-9 relative (a refactor may reorder arithmetic), everything else
exactly. A change that moves a figure on purpose regenerates the files in the same commit and says
why in its message::

    python tests/test_golden.py            # rewrite every golden file
    python tests/test_golden.py plan-8b    # rewrite the named cases
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from supercluster.cli import app

GOLDEN = Path(__file__).parent / "golden"
RTOL = 1e-9
#: keys whose values are measured, not priced (the planner's own run time): left out of the files
VOLATILE = frozenset({"seconds"})

#: name -> argv (``--json`` is added). Dense, MoE, hybrid, CP, FSDP, fp8 / fp4, torchtitan, DeepSpeed,
#: one GPU, a million GPUs; every command that prints JSON.
CASES: dict[str, list[str]] = {
    "estimate-default": ["estimate"],
    "estimate-70b-pp": ["estimate", "--model", "llama3-70b", "--gpus", "64", "--layout", "tp8-pp2-dp4-vpp5",
                        "--global-batch", "128"],
    "estimate-70b-megatron-full": ["estimate", "--model", "llama3-70b", "--gpus", "64", "--layout",
                                   "tp8-pp1-dp8-full", "--framework", "megatron", "--global-batch", "64"],
    "estimate-8b-torchtitan": ["estimate", "--model", "llama3-8b", "--gpus", "8", "--layout", "tp1-pp1-dp8",
                               "--framework", "torchtitan", "--global-batch", "32"],
    "estimate-8b-torchtitan-compile-fsdp": ["estimate", "--model", "llama3-70b", "--gpus", "128", "--layout",
                                            "tp1-pp1-dp128-z3-full", "--framework", "torchtitan+compile",
                                            "--global-batch", "128"],
    "estimate-8b-one-gpu": ["estimate", "--model", "llama3-8b", "--gpus", "1", "--layout", "tp1-pp1-dp1-full",
                            "--global-batch", "8", "--seq-len", "2048"],
    "estimate-8b-planned": ["estimate", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256"],
    "estimate-mixtral-ep": ["estimate", "--model", "mixtral-8x7b", "--gpus", "64", "--tp", "2", "--pp", "4",
                            "--ep", "8", "--global-batch", "256", "--seq-len", "4096"],
    "estimate-qwen3-moe-megatron": ["estimate", "--model", "qwen3-30b-a3b", "--gpus", "16", "--layout",
                                    "tp2-pp1-dp8-ep8", "--framework", "megatron", "--global-batch", "128",
                                    "--seq-len", "4096"],
    "estimate-dsv3-fp8": ["estimate", "--model", "deepseek-v3+mtp", "--gpus", "1024", "--layout",
                          "tp2-pp8-dp64-ep64-vpp4-full", "--precision", "fp8", "--global-batch", "8192",
                          "--seq-len", "4096", "--framework", "nemo-megatron+ep-overlap+fp8-current"],
    "estimate-gpt-oss": ["estimate", "--model", "gpt-oss-120b", "--gpus", "64", "--layout", "tp1-pp1-dp64-ep8",
                         "--global-batch", "512", "--seq-len", "4096"],
    "estimate-nemotronh-hybrid": ["estimate", "--model", "nemotronh-8b", "--gpus", "64", "--layout",
                                  "tp2-pp1-dp32", "--global-batch", "768"],
    "estimate-qwen3-next-gdn": ["estimate", "--model", "qwen3-next-80b-a3b", "--gpus", "64", "--layout",
                                "tp2-pp1-dp32-ep8", "--global-batch", "256", "--seq-len", "4096"],
    "estimate-70b-cp-128k": ["estimate", "--model", "llama3-70b", "--gpus", "256", "--layout",
                             "tp8-pp1-dp4-cp8-full", "--global-batch", "32", "--seq-len", "131072"],
    "estimate-405b-gb300-fp4": ["estimate", "--model", "llama3.1-405b", "--gpu", "gb300", "--gpus", "256",
                                "--layout", "tp4-pp8-dp8-vpp4", "--precision", "fp4", "--global-batch", "256"],
    "estimate-gpt3-deepspeed": ["estimate", "--model", "gpt3-175b", "--gpus", "512", "--layout",
                                "tp8-pp8-dp8-full", "--framework", "deepspeed", "--global-batch", "1536",
                                "--seq-len", "2048"],
    "estimate-mi355x-fp8": ["estimate", "--model", "llama3-70b", "--gpu", "mi355x", "--gpus", "64", "--layout",
                            "tp8-pp1-dp8", "--precision", "fp8", "--global-batch", "128"],
    "estimate-1m-gpus": ["estimate", "--gpu", "gb200", "--gpus", "1048576", "--layout", "tp8-pp16-dp8192-vpp4",
                         "--global-batch", "131072"],
    "estimate-placement-oversub": ["estimate", "--placement", "--oversubscription", "4", "--sensitivity"],
    "estimate-megatron-legacy": ["estimate", "--model", "gpt3-175b", "--gpus", "1024", "--layout",
                                 "tp8-pp16-dp8-full", "--framework", "megatron-legacy", "--global-batch", "1536",
                                 "--seq-len", "2048"],
    "plan-default": ["plan", "--top", "5"],
    "plan-8b": ["plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256", "--top", "5"],
    "plan-mixtral": ["plan", "--model", "mixtral-8x7b", "--gpus", "64", "--global-batch", "256",
                     "--seq-len", "4096", "--top", "5"],
    "plan-70b-torchtitan-cost": ["plan", "--model", "llama3-70b", "--gpus", "256", "--global-batch", "256",
                                 "--framework", "torchtitan", "--objective", "cost", "--top", "5",
                                 "--tokens", "1e12"],
    "export-8b-megatron": ["plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256",
                           "--export", "megatron"],
    "export-8b-torchtitan": ["plan", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256",
                             "--framework", "torchtitan", "--export", "torchtitan"],
    "export-70b-deepspeed": ["plan", "--model", "llama3-70b", "--gpus", "64", "--global-batch", "128",
                             "--framework", "deepspeed", "--export", "deepspeed"],
    "simulate-default": ["simulate"],
    "simulate-jitter": ["simulate", "--layout", "tp4-pp4-dp4-vpp5", "--global-batch", "64", "--jitter", "0.05",
                        "--seed", "3", "--exact-stages"],
    "validate-public": ["validate", "--by", "kind"],
    "validate-heldout": ["validate", "--runs", "heldout", "--by", "gpu"],
    "train-default": ["train", "--trials", "300"],
    "train-70b-layout-deadline": ["train", "--model", "llama3-70b", "--gpus", "1024", "--layout",
                                  "tp8-pp4-dp32-vpp5", "--global-batch", "1024", "--trials", "300",
                                  "--deadline-days", "10", "--tokens", "2e12"],
    "goodput-default": ["goodput", "--trials", "500"],
    "goodput-async-spares": ["goodput", "--gpus", "4096", "--days", "20", "--async-checkpoint", "--hot-spares",
                             "--model", "llama3-70b", "--layout", "tp8-pp4-dp128-vpp5", "--trials", "500"],
    "fabric-default": ["fabric"],
    "fabric-1m-gb300": ["fabric", "--gpus", "1048576", "--gpu", "gb300", "--oversubscription", "1,2"],
    "fabric-compare": ["fabric", "--gpus", "4096", "--compare"],
    "compare-two-gpus": ["compare", "--gpus", "256", "--gpu-types", "h100-sxm,b200", "--global-batch", "256"],
    "scale-small": ["scale", "--max-gpus", "1024", "--trials", "200"],
}


def run_case(argv: list[str]) -> object:
    """The command's JSON; an export (a launcher's text, no --json) as ``{"text": ...}``."""
    text = "--export" in argv
    r = CliRunner().invoke(app, argv if text else [*argv, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return {"text": r.stdout} if text else _stable(json.loads(r.stdout))


def _stable(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _stable(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_stable(v) for v in obj]
    return obj


def _diff(want: object, got: object, path: str = "$") -> list[str]:
    """Where ``got`` departs from ``want``: numbers beyond RTOL, anything else not equal."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{path}: keys {sorted(set(want) ^ set(got))} on one side only"] if set(want) != set(got) else []
        for k in want.keys() & got.keys():
            out += _diff(want[k], got[k], f"{path}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: {len(want)} items expected, {len(got)} got"]
        return [d for i, (a, b) in enumerate(zip(want, got, strict=True)) for d in _diff(a, b, f"{path}[{i}]")]
    numbers = (int, float)
    if isinstance(want, numbers) and isinstance(got, numbers) and not isinstance(want, bool) \
            and not isinstance(got, bool):
        if math.isclose(want, got, rel_tol=RTOL, abs_tol=1e-300):
            return []
        return [f"{path}: {want!r} expected, {got!r} got"]
    return [] if want == got else [f"{path}: {want!r} expected, {got!r} got"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    path = GOLDEN / f"{name}.json"
    want = json.loads(path.read_text(encoding="utf-8"))
    diffs = _diff(want, run_case(CASES[name]))
    assert not diffs, f"{name} ({' '.join(CASES[name])}) departs from {path.name}:\n" + "\n".join(diffs[:20])


def test_the_comparison_sees_a_change() -> None:
    assert _diff({"a": [1.0, "x"]}, {"a": [1.0 + 1e-6, "x"]})
    assert not _diff({"a": [1.0, "x"]}, {"a": [1.0 + 1e-12, "x"]})
    assert _diff({"a": 1}, {"b": 1})


def regenerate(names: list[str]) -> None:
    GOLDEN.mkdir(exist_ok=True)
    for name in names or sorted(CASES):
        (GOLDEN / f"{name}.json").write_text(json.dumps(run_case(CASES[name]), indent=1, sort_keys=True) + "\n",
                                             encoding="utf-8")
        print("wrote", GOLDEN / f"{name}.json")


if __name__ == "__main__":
    regenerate(sys.argv[1:])
