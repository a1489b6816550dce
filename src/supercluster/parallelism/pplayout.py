"""Explicit pipeline layouts, in Megatron-Core's ``--pipeline-model-parallel-layout`` notation.

A layout lists the virtual pipeline stages in model order, separated by ``|``: ``E`` the
embedding, ``t`` a transformer layer, ``m`` a multi-token-prediction module, ``L`` the output head
and loss. ``x*n`` repeats a character, ``(...)*n`` a group; commas are cosmetic. Virtual stage
``k`` runs on pipeline rank ``k mod pp`` as its chunk ``k // pp`` (Megatron-Core
``PipelineParallelLayerLayout``). DeepSeek-V3 on 16 stages, as Megatron-Bridge's recipes place it:
``Et*4|(t*4|)*14,tmL``.

The cost model prices each rank's blocks (:func:`rank_blocks`): its layers, its MTP modules (a
layer plus their projection and a pass of the head) and the head; the slowest rank sets the pace.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import InputError, require

BLOCKS = "EtmL"
#: no model has more blocks than this; a larger repeat is a typo
MAX_BLOCKS = 100_000


def parse(layout: str) -> list[str]:
    """The virtual stages of ``layout`` in model order, each a string over ``EtmL``."""
    require(isinstance(layout, str) and layout.strip() != "", "pp_layout", "is empty; e.g. Et*4|(t*4|)*14,tmL")
    text = layout.replace(",", "").replace(" ", "")
    # (every repeat together may write at most MAX_BLOCKS characters: no model has more blocks, and the
    # text never grows past what its reading can afford; a count of more than 6 digits stays unread)
    room = [MAX_BLOCKS]

    def repeat(mt: re.Match[str]) -> str:
        room[0] -= len(mt.group(1)) * int(mt.group(2))
        require(room[0] >= 0, "pp_layout", f"repeats {mt.group(0)[:40]!r} past {MAX_BLOCKS:,} blocks in all")
        return mt.group(1) * int(mt.group(2))

    for pattern in (r"\(([^()]+)\)\*(\d{1,6})(?!\d)", r"(.)\*(\d{1,6})(?!\d)"):
        text = re.sub(pattern, repeat, text)
    bad = sorted({c for c in text if c not in BLOCKS + "|"})
    if bad:
        shown = layout if len(layout) <= 80 else f"{layout[:80]}..."
        raise InputError("pp_layout", f"cannot read {''.join(bad)!r} in {shown!r}; blocks are E (embedding), "
                                      "t (layer), m (MTP module), L (head and loss), '|' between stages, x*n and "
                                      "(...)*n repeat")
    return text.split("|")


def chunks_per_rank(layout: str, pp: int) -> int:
    """The vpp a layout implies on ``pp`` ranks (1 where its stage count does not divide, which
    :class:`~supercluster.parallelism.layout.Layout` then reports)."""
    require(pp >= 1, "pp", f"must be a positive integer, got {pp}")
    n = len(parse(layout))
    return n // pp if n % pp == 0 and n >= pp else 1


def check(stages: list[str], *, pp: int, vpp: int, num_layers: int, mtp_layers: int, name: str) -> None:
    """The layout must fill pp x vpp stages and hold the model's layers and MTP modules, the
    embedding first and the loss last; errors name the numbers."""
    require(len(stages) == pp * vpp, "pp_layout",
            f"has {len(stages)} stages; pp x vpp = {pp} x {vpp} = {pp * vpp} (give --vpp {len(stages) // pp})"
            if len(stages) % pp == 0 else f"has {len(stages)} stages, not a multiple of pp = {pp}")
    flat = "".join(stages)
    require(flat.count("t") == num_layers, "pp_layout",
            f"places {flat.count('t')} layers; {name} has {num_layers}")
    require(flat.count("m") == mtp_layers, "pp_layout",
            f"places {flat.count('m')} MTP modules; the model has {mtp_layers} (a +mtpN model reference adds them)")
    require(flat.count("E") == 1 and flat.startswith("E"), "pp_layout", "must start with the embedding E, once")
    require(flat.count("L") == 1 and flat.endswith("L"), "pp_layout", "must end with the loss L, once")


def rank_blocks(stages: list[str], pp: int) -> np.ndarray:
    """Per pipeline rank (rows) its layers, MTP modules and heads (columns t, m, L), over its chunks."""
    out = np.zeros((pp, 3))
    for k, stage in enumerate(stages):
        out[k % pp] += [stage.count("t"), stage.count("m"), stage.count("L")]
    return out


def chunk_blocks(stages: list[str], pp: int) -> np.ndarray:
    """Per (rank, chunk): its layer-like blocks (layers and MTP modules), MTP modules and heads,
    shape (pp, vpp, 3), for the pipeline schedule."""
    vpp = len(stages) // pp
    return np.array([[[st.count("t") + st.count("m"), st.count("m"), st.count("L")]
                      for st in (stages[c * pp + s] for c in range(vpp))] for s in range(pp)], dtype=float)


def from_stage_layers(layers: list[int]) -> str:
    """The layout with ``layers[k]`` layers on virtual stage k, the embedding first and the loss last,
    written compactly (``Et*20|t*21|t*20|t*19L``)."""
    parts = [f"t*{n}" for n in layers]
    parts[0], parts[-1] = "E" + parts[0], parts[-1] + "L"
    return "|".join(parts)


def chunk_layers(num_layers: int, pp: int, vpp: int, counts_head: bool = False,
                 split: str = "even") -> list[list[int]]:
    """Transformer layers on each (stage, chunk); chunk c of stage s is virtual stage c pp + s.

    ``split`` "even": the L (or L + 2, where the embedding and the loss take a layer's slot each)
    slots spread evenly in model order, the earlier chunks taking the remainder. "middle"
    (torchtitan's generate_split_points): the first chunk takes floor(L / (pp vpp)), each middle
    chunk one more while the remainder lasts, the last chunk what is left."""
    n = pp * vpp
    if split == "middle":
        base, extra = divmod(num_layers, n)
        per = [base] * n
        for k in range(1, n - 1):
            if extra == 0:
                break
            per[k] += 1
            extra -= 1
        per[-1] += extra
    else:
        slots = num_layers + (2 if counts_head else 0)
        base, rem = divmod(slots, n)
        per = [base + (1 if k < rem else 0) for k in range(n)]
        if counts_head:
            per[0] -= 1
            per[-1] -= 1
    require(min(per) >= 0 and (split != "middle" or min(per) >= 1), "pp",
            f"pp x vpp = {pp} x {vpp} leaves a chunk without a layer")
    return [[per[c * pp + s] for c in range(vpp)] for s in range(pp)]
