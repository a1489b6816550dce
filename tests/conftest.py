from __future__ import annotations

import pytest

from supercluster.formats.load import load_model
from supercluster.hardware.specs import get_gpu
from supercluster.job import default_network
from supercluster.parallelism.framework import get_framework


@pytest.fixture
def h100():
    return get_gpu("h100-sxm")


@pytest.fixture
def llama3_70b():
    return load_model("llama3-70b")


@pytest.fixture
def megatron():
    return get_framework("megatron")


@pytest.fixture
def h100_net(h100):
    return default_network(h100)


# Property tests draw the same examples on every run, so CI is reproducible; set
# SUPERCLUSTER_EXPLORE=1 to draw new random examples on each run.
import os  # noqa: E402

from hypothesis import settings  # noqa: E402

settings.register_profile("reproducible", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("explore" if os.environ.get("SUPERCLUSTER_EXPLORE") else "reproducible")
