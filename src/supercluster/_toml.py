"""Loading package TOML data with an exact key check (unknown or missing keys are errors)."""

from __future__ import annotations

import copy
import functools
import tomllib
from importlib import resources
from typing import Any

from .errors import InputError


def load_package_toml(name: str) -> dict[str, Any]:
    """Parse ``data/<name>`` shipped inside the package (parsed once a process; each caller gets its
    own copy, free to change)."""
    return copy.deepcopy(_parsed(name))


@functools.cache
def _parsed(name: str) -> dict[str, Any]:
    text = resources.files("supercluster").joinpath("data").joinpath(name).read_text(encoding="utf-8")
    return tomllib.loads(text)


def check_keys(where: str, table: dict[str, Any], required: set[str], optional: set[str]) -> None:
    """Raise :class:`InputError` if ``table`` lacks a required key or has an unknown one."""
    keys = set(table)
    missing = required - keys
    unknown = keys - required - optional
    if missing:
        raise InputError(where, f"missing keys {sorted(missing)}")
    if unknown:
        raise InputError(where, f"unknown keys {sorted(unknown)}; allowed: {sorted(required | optional)}")
