"""A model from wherever a user has it: a preset key, a Hugging Face ``config.json`` (or the model
folder holding one), or a Megatron-LM launch script; a ``+mtp`` suffix adds MTP modules."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from ..errors import InputError, require
from ..models.catalog import model_catalog
from ..models.spec import ModelSpec
from . import megatron_args
from .hf import from_hf_config

#: a model reference ending in ``+mtp`` or ``+mtpN`` trains N (1) multi-token-prediction modules
MTP_SUFFIX = re.compile(r"\+mtp(\d*)$")


def load_model(ref: str) -> ModelSpec:
    """A preset key, a path to a Hugging Face ``config.json`` or to a Megatron-LM launch script (its
    architecture arguments, :mod:`supercluster.megatron_args`); a ``+mtp`` / ``+mtpN`` suffix sets
    its multi-token-prediction modules (``deepseek-v3+mtp``: the way DeepSeek-V3 trains)."""
    if m := MTP_SUFFIX.search(ref):
        base, n = load_model(ref[:m.start()]), int(m.group(1) or 1)
        return dataclasses.replace(base, key=ref, name=f"{base.name} + {n} MTP" if n else base.name, mtp_layers=n)
    cat = model_catalog()
    if ref in cat:
        return cat[ref]
    path = Path(ref)
    if ref.endswith(".json") or path.exists():
        require(path.is_file(), "model", f"no such file {ref!r}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError("model", f"cannot read {ref} ({exc})") from exc
        if not ref.endswith(".json") and not text.lstrip().startswith("{"):  # a Megatron-LM launch script
            return megatron_args.model_from_args(megatron_args.parse_args(text), key=path.stem)
        try:
            cfg = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError("model", f"{ref} is not valid JSON ({exc})") from exc
        require(isinstance(cfg, dict), "model", f"{ref} must hold a JSON object")
        return from_hf_config(cfg, key=path.stem)
    raise InputError("model", f"unknown model {ref!r}; presets: {', '.join(sorted(cat))}; or a config.json or "
                              "Megatron-LM arguments path "
                              "(any may end in +mtp or +mtpN: N multi-token-prediction modules)")
