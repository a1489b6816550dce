"""The public face: what ``import supercluster`` gives, guarded (httpx's test_exported_members.py), and
the docstring examples run as doctests."""

from __future__ import annotations

import doctest
import importlib

import pytest
from typer.testing import CliRunner

import supercluster
from supercluster.cli import app

#: the public API; a name added or removed here is a decision, not an accident
PUBLIC = {
    "DEFAULT_FRAMEWORK", "Fabric", "Framework", "GpuSpec", "InputError", "Job", "Layout", "ModelSpec", "PlanResult",
    "RunOptions", "RunReport", "StepBreakdown", "Timeline", "__version__", "build_fabric", "check_job", "estimate",
    "get_framework", "get_gpu", "goodput", "load_model", "plan", "simulate", "train", "validate",
}


def test_the_exported_members_are_the_public_api():
    assert set(supercluster.__all__) == PUBLIC
    assert len(supercluster.__all__) == len(set(supercluster.__all__))
    for name in supercluster.__all__:
        member = getattr(supercluster, name)
        if name not in ("__version__", "DEFAULT_FRAMEWORK"):
            assert member.__module__.startswith("supercluster."), name
            assert not member.__module__.split(".")[-1].startswith("_"), name


def test_the_public_functions_are_not_shadowed_by_modules():
    """A sub-package named like a function (supercluster.estimate, .plan, .simulate) would replace the
    function on the package once imported."""
    for name in ("estimate", "plan", "simulate", "validate", "goodput", "train"):
        assert callable(getattr(supercluster, name)), name
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"supercluster.{name}")


def test_version_is_printed_by_the_cli():
    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0 and r.stdout.strip() == f"supercluster {supercluster.__version__}"
    assert supercluster.__version__ != "0+unknown"


@pytest.mark.parametrize("module", ["supercluster", "supercluster.api", "supercluster.job",
                                    "supercluster.parallelism.rules"])
def test_docstring_examples_run(module):
    mod = importlib.import_module(module)
    result = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, result


def test_the_api_answers_as_the_cli_does():
    job = supercluster.Job.from_label("tp8-pp1-dp8-full", model="llama3-70b", gpu="h100-sxm", global_batch=64,
                                      seq_len=8192, framework="megatron")
    import json

    r = CliRunner().invoke(app, ["estimate", "--model", "llama3-70b", "--gpus", "64", "--layout", "tp8-pp1-dp8-full",
                                 "--global-batch", "64", "--framework", "megatron", "--json", "--no-evidence"])
    assert json.loads(r.stdout)["step_time_s"] == pytest.approx(supercluster.estimate(job).step_time_s, rel=1e-12)
    run = supercluster.goodput(job, days=10, options=supercluster.RunOptions(trials=50))
    assert run.step.step_time_s == pytest.approx(supercluster.estimate(job).step_time_s, rel=1e-12)
    assert supercluster.simulate(job).step_time_s == pytest.approx(run.step.step_time_s, rel=1e-3)
