"""How far the slowest of N ranks lies above the mean: the order statistic behind two costs of the step.

* Stragglers (:mod:`~.step`): N GPUs whose sustained speeds spread normally; the slowest is
  :func:`expected_max_normal` standard deviations slower than the mean.
* The busiest expert rank (:func:`moe_load_factor`): an MoE layer's all-to-all and grouped GEMMs end
  when the rank that received the most tokens has them. A balanced router (Megatron-Core's aux-loss
  or aux-loss-free balancing; the framework profile's ``moe_router = "random"``) sends each of a rank's
  token-expert assignments to one of the ``ep`` expert-parallel ranks with equal chance, so a rank's
  count is binomial (n = ep a, p = 1 / ep) for ``a`` assignments per rank on average: mean a, standard
  deviation sqrt(a (1 - 1/ep)); the busiest of ``ep`` such counts (normal approximation) holds
  1 + z(ep) sqrt((1 - 1/ep) / a) times the mean. Tokens drawn independently is the floor of the
  imbalance: a learned router that correlates tokens does worse, which no published run states. A
  fixed round-robin gate (the benchmarks' forced balance) gives every rank the same count: 1.

  Token-drop routing at capacity factor C (Megatron-Core --moe-expert-capacity-factor) caps what each
  rank's router keeps for an expert at C times the mean, so no rank receives more than C times the
  mean: the busiest holds min(dropless figure, C) (the dropped tokens skip the experts, the combine
  returns zeros for them). Padded to capacity (--moe-pad-expert-input-to-capacity), every rank runs
  and exchanges exactly C times the mean, under any router.
"""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri


def expected_max_normal(n: np.ndarray | float) -> np.ndarray:
    """Expected largest of ``n`` independent standard normal draws (Blom's approximation,
    Phi^-1((n - 0.375) / (n + 0.25)); 0 for one draw, 1.42 for 8, 3.8 for 16,384)."""
    n = np.maximum(np.asarray(n, dtype=float), 1.0)
    return ndtri((n - 0.375) / (n + 0.25))


def moe_load_factor(assignments: np.ndarray | float, ep: np.ndarray | float, router: str,
                    capacity_factor: float = 0.0, pad: bool = False) -> np.ndarray:
    """The busiest of ``ep`` expert-parallel ranks' tokens over the mean, for ``assignments`` token-expert
    assignments a rank receives on average per micro-batch (see the module's physics); dropless
    (``capacity_factor`` 0): 1 without EP or under a round-robin gate; token-drop: at most
    ``capacity_factor``, exactly that when each expert's input is padded to capacity (``pad``)."""
    a = np.maximum(np.asarray(assignments, dtype=float), 1.0)
    g = np.maximum(np.asarray(ep, dtype=float), 1.0)
    excess = expected_max_normal(g) * np.sqrt((1.0 - 1.0 / g) / a)
    load = np.where((g > 1) & (router == "random"), 1.0 + excess, 1.0)
    if capacity_factor <= 0.0:
        return load
    return np.full_like(load, capacity_factor) if pad else np.minimum(load, capacity_factor)
