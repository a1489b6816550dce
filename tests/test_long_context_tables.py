"""Context parallelism against NVIDIA's dense long-sequence tables (benchmarks/check_nemo_long_sequence.py):
the pricing error may sit at a GPU's level, but it must not drift as the context-parallel degree grows
with the sequence (B200: CP 1-16 from 8K to 1M tokens; H100: CP 2-32 from 64K to 1M)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "check_nemo_long_sequence.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("check_nemo_long_sequence", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _errors(rows, at_least: int = 0) -> list[float]:
    return [none / measured - 1.0 for seq, _, measured, none, _ in rows if seq >= at_least]


def test_b200_error_level_from_8k_to_1m_tokens(check):
    errors = _errors(check.rows_priced("llama3-8b", "b200", check.b200_rows()))
    assert len(errors) == 8
    assert max(errors) - min(errors) < 0.08


def test_h100_error_level_from_cp2_to_cp32(check):
    rows = check.rows_priced("llama2-7b", "h100-sxm", check.h100_rows())
    assert [label.split("-")[-1] for seq, label, *_ in rows if seq >= 65536] == ["cp2", "cp4", "cp8", "cp16", "cp32"]
    errors = _errors(rows, at_least=65536)
    assert max(errors) - min(errors) < 0.05


def test_measured_steps_follow_nemo_flops(check):
    # the 1M-token B200 row: NeMo's FLOPs at 1,608 TFLOP/s on 256 GPUs
    assert check.nemo_flops("llama3-8b", 1048576, 4) / (1608e12 * 256) == pytest.approx(17.26, abs=0.01)
