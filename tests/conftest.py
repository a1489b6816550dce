from __future__ import annotations

import pytest

from supercluster.estimate import default_network
from supercluster.framework import get_framework
from supercluster.hardware import get_gpu
from supercluster.models import load_model


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
