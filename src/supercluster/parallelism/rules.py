"""What a layout must keep to lay a model out, as one table.

Each rule is a test over integer layout columns (numpy arrays, one row per layout) and the message
naming every number when a layout breaks it. :meth:`~supercluster.parallelism.layout.Layout.check_model`
applies the table to one layout (columns of length one) and raises the first rule it breaks; the
planner keeps the candidate rows that keep every rule. So the two cannot disagree.

>>> from supercluster.formats.load import load_model
>>> import numpy as np
>>> cols = {"tp": np.array([1, 8, 16]), "pp": np.array([1, 1, 1]), "vpp": np.array([1, 1, 1]),
...         "cp": np.array([1, 1, 1]), "ep": np.array([1, 1, 1]), "seq": np.array([8192] * 3)}
>>> keeps(load_model("llama3-8b"), cols).tolist()   # 8 KV heads: tp 16 cannot hold whole ones
[True, True, False]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..models.spec import ModelSpec

Cols = dict[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class Rule:
    """``ok(model, cols, extra_pp_layers)``: which rows keep the rule; ``why(model, row, extra_pp_layers)``:
    the message for a row (a dict of ints) that does not, under ``field``."""

    field: str
    ok: Callable[[ModelSpec, Cols, int], np.ndarray]
    why: Callable[[ModelSpec, dict[str, int], int], str]


def _divides(count: Callable[[ModelSpec], int], what: str, applies: Callable[[ModelSpec], bool] = lambda m: True
             ) -> Rule:
    """tp must divide ``count`` (where the model has such layers)."""
    return Rule("tp", lambda m, c, x: (np.mod(count(m), c["tp"]) == 0) | (not applies(m)),
                lambda m, r, x: f"{r['tp']} must divide the {count(m)} {what} of {m.name}")


def _slots(m: ModelSpec, c: Cols, x: int) -> np.ndarray:
    """Pipeline slots: the layers, and where the framework counts them (pp > 1) the embedding and the loss."""
    return m.num_layers + np.where(c["pp"] > 1, x, 0)


def _cp_layers(m: ModelSpec) -> str:
    return "Mamba / Gated DeltaNet layers" if m.recurrent_layers else \
        "sparse attention (its indexer scores the whole sequence)"


#: pipeline stages (x chunks) no more than the layers to put in them (an explicit pipeline layout is
#: checked by :func:`supercluster.parallelism.pplayout.check` instead)
PIPELINE_SLOTS = Rule(
    "pp", lambda m, c, x: c["pp"] * c["vpp"] <= _slots(m, c, x),
    lambda m, r, x: f"pp x vpp = {r['pp']} x {r['vpp']} exceeds the {m.num_layers} layers of {m.name}"
                    + (f" + {x} (embedding and loss)" if r["pp"] > 1 and x else ""))

RULES: tuple[Rule, ...] = (
    _divides(lambda m: m.num_heads, "attention heads"),
    Rule("tp", lambda m, c, x: np.mod(m.num_kv_heads, c["tp"]) == 0,
         lambda m, r, x: f"{r['tp']} must divide the {m.num_kv_heads} KV heads (query groups) of {m.name}: each TP "
                         "rank holds whole KV heads (Megatron-Core: num_query_groups a multiple of the TP size)"),
    _divides(lambda m: m.ssm_heads, "Mamba heads", lambda m: m.ssm_layers > 0),
    _divides(lambda m: m.ssm_groups, "Mamba groups", lambda m: m.ssm_layers > 0),
    _divides(lambda m: m.gdn_k_heads, "Gated DeltaNet key heads", lambda m: m.gdn_layers > 0),
    _divides(lambda m: m.gdn_v_heads, "Gated DeltaNet value heads", lambda m: m.gdn_layers > 0),
    Rule("cp", lambda m, c, x: (c["cp"] == 1) | m.context_parallel_ok,
         lambda m, r, x: f"context parallelism of {_cp_layers(m)} is not modelled ({m.name}); use cp 1"),
    PIPELINE_SLOTS,
    Rule("cp", lambda m, c, x: (c["cp"] == 1) | (np.mod(c["seq"], 2 * c["cp"]) == 0),
         lambda m, r, x: f"seq_len {r['seq']} must be divisible by 2 x cp = {2 * r['cp']} (load-balanced CP)"),
    Rule("ep", lambda m, c, x: (np.mod(m.num_experts, c["ep"]) == 0) if m.is_moe else c["ep"] == 1,
         lambda m, r, x: f"{r['ep']} must divide the {m.num_experts} experts of {m.name}" if m.is_moe
         else f"{m.name} is dense: ep must be 1, got {r['ep']}"),
)


def keeps(model: ModelSpec, cols: Cols, extra_pp_layers: int = 0) -> np.ndarray:
    """The rows of ``cols`` (tp, pp, vpp, cp, ep, seq) that keep every rule."""
    ok = np.ones(len(cols["tp"]), dtype=bool)
    for rule in RULES:
        ok &= np.broadcast_to(rule.ok(model, cols, extra_pp_layers), ok.shape)
    return ok


def broken(rule: Rule, model: ModelSpec, row: dict[str, int], extra_pp_layers: int = 0) -> InputError | None:
    """The error one layout (``row``: tp, pp, vpp, cp, ep, seq) gets for breaking ``rule``, or None."""
    ok = rule.ok(model, row, extra_pp_layers)  # type: ignore[arg-type]  (the rules' numpy reads plain ints too)
    if bool(ok):
        return None
    return InputError(rule.field, rule.why(model, row, extra_pp_layers))
