"""A model from wherever a user has it: a preset key, a Hugging Face ``config.json`` (or the model
folder holding one), or a Megatron-LM launch script; a ``+mtp`` suffix adds MTP modules."""

from __future__ import annotations

import dataclasses
import functools
import re

from ..errors import InputError, require
from ..files import parse_json, read_input, user_path
from ..models.catalog import model_catalog
from ..models.spec import ModelSpec
from . import megatron_args
from .hf import from_hf_config

#: a model reference ending in ``+mtp`` or ``+mtpN`` trains N (1) multi-token-prediction modules
MTP_SUFFIX = re.compile(r"\+mtp(\d*)$")


#: the largest model config or launch script read (the largest real ones are a few tens of KB)
MAX_CONFIG_BYTES = 4 * 2**20


def _script_text(ref: str, text: str) -> bool:
    """Whether the text of the file ``ref`` is a Megatron-LM launch script rather than a JSON config."""
    return not ref.endswith(".json") and not text.lstrip().startswith("{")


def is_launch_script(ref: str) -> bool:
    """Whether ``ref`` names a file :func:`load_model` reads as a Megatron-LM launch script (not a preset,
    a model folder or a JSON config): the file whose layout and GPU count ``--config`` also reads."""
    if ref in model_catalog():
        return False
    try:
        path = user_path(MTP_SUFFIX.sub("", ref), "model")
        return path.is_file() and _script_text(str(path), read_input(path, "model", max_bytes=MAX_CONFIG_BYTES))
    except InputError:
        return False


def load_model(ref: str) -> ModelSpec:
    """A preset key, a Hugging Face model folder or its ``config.json``, or a Megatron-LM launch script (its
    architecture arguments, :mod:`supercluster.megatron_args`); a ``+mtp`` / ``+mtpN`` suffix sets
    its multi-token-prediction modules (``deepseek-v3+mtp``: the way DeepSeek-V3 trains)."""
    if m := MTP_SUFFIX.search(ref):
        base, n = load_model(ref[:m.start()]), int(m.group(1) or 1)
        return dataclasses.replace(base, key=ref, name=f"{base.name} + {n} MTP" if n else base.name, mtp_layers=n)
    cat = model_catalog()
    if ref in cat:
        return cat[ref]
    path = user_path(ref, "model")
    if path.is_dir():  # a Hugging Face model folder: its config.json
        require((path / "config.json").is_file(), "model",
                f"{ref} is a folder without a config.json (a Hugging Face model folder holds one)")
        path = path / "config.json"
        ref = str(path)
    if ref.endswith(".json") or path.exists():
        require(path.is_file(), "model", f"no such file {ref!r}")
        # (a command asks for its model more than once: the file is read and parsed once while unchanged)
        st = path.stat()
        return _load_file(ref, st.st_mtime_ns, st.st_size)
    raise InputError("model", f"unknown model {ref!r}; presets: {', '.join(sorted(cat))}; or a config.json or "
                              "Megatron-LM arguments path "
                              "(any may end in +mtp or +mtpN: N multi-token-prediction modules)")


@functools.lru_cache(maxsize=32)
def _load_file(ref: str, mtime_ns: int, size: int) -> ModelSpec:
    """The model a config.json or launch script at ``ref`` describes (as last modified at ``mtime_ns``,
    ``size`` bytes long: a changed file is read again)."""
    path = user_path(ref, "model")
    text = read_input(path, "model", max_bytes=MAX_CONFIG_BYTES)
    if _script_text(ref, text):  # a Megatron-LM launch script
        return megatron_args.model_from_args(megatron_args.parse_args(text), key=path.stem)
    cfg = parse_json(text, "model", f"{ref} is ")
    require(isinstance(cfg, dict), "model", f"{ref} must hold a JSON object")
    # (a model's config.json is named after its folder: Llama-3.1-8B/config.json is Llama-3.1-8B)
    key = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    return from_hf_config(cfg, key=key)
