"""Pipeline schedules: the order each stage runs its forwards and backwards, what each operation
waits for, and the makespan of a whole schedule, vectorized over layouts.

Where every chunk of every stage does the same work, the 1F1B makespan has the closed form the
ledger uses (m + (pp - 1) / vpp stage-times). Where the chunks differ (torchtitan's split, an
explicit Megatron-Core layout) under an interleaved schedule, stages stall waiting on each other
even in the steady state, and no closed form bounds it: :func:`makespan` then walks the schedule's
dependency graph, the longest path over all operations, one wave of independent operations at a
time across every layout row at once. The timeline simulator runs the same schedule event by event.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

Op = tuple[str, int, int]  # ("F" | "B", micro-batch, chunk)


def schedule(stage: int, pp: int, vpp: int, m: int) -> list[Op]:
    """The order in which ``stage`` runs its forwards and backwards: 1F1B (vpp = 1) or Megatron-Core's
    interleaved 1F1B (warm-up of 2 (pp - stage - 1) + (vpp - 1) pp chunk forwards, then one forward
    and one backward in turn, then the remaining backwards)."""
    kind, mb, ch = (x[stage].tolist() for x in _orders(pp, vpp, m))
    return [("FB"[k], i, c) for k, i, c in zip(kind, mb, ch, strict=True)]


def dependency(stage: int, op: Op, pp: int, vpp: int) -> tuple[int, Op] | None:
    """The operation (stage, op) whose output ``op`` on ``stage`` needs: a forward the previous
    stage's forward of the same micro-batch and chunk (the first stage: the last stage's previous
    chunk), a backward the next stage's backward (the last stage: the first stage's next chunk, or
    its own forward of the last chunk)."""
    kind, i, c = op
    if kind == "F":
        if stage > 0:
            return stage - 1, ("F", i, c)
        return (pp - 1, ("F", i, c - 1)) if c > 0 else None
    if stage < pp - 1:
        return stage + 1, ("B", i, c)
    return (0, ("B", i, c + 1)) if c < vpp - 1 else (stage, ("F", i, c))


def _orders(pp: int, vpp: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`schedule` for every stage at once: kind (0 forward, 1 backward), micro-batch and
    chunk of each stage's operations in order, arrays of shape (pp, 2 m vpp)."""
    total = m * vpp
    k = np.arange(total)
    mb_of = (k // (pp * vpp)) * pp + k % pp
    chunk_f = (k % (pp * vpp)) // pp
    kind = np.empty((pp, 2 * total), dtype=np.int64)
    src = np.empty((pp, 2 * total), dtype=np.int64)
    for s in range(pp):
        # the warm-up: 1F1B pp - s - 1 forwards; interleaved 2 (pp - s - 1) + (vpp - 1) pp chunk
        # forwards, or all of them when m = pp
        warm = min(pp - s - 1, m) if vpp == 1 else total if m == pp else min(2 * (pp - s - 1) + (vpp - 1) * pp, total)
        steady = total - warm
        kind[s] = np.concatenate([np.zeros(warm, dtype=np.int64), np.tile([0, 1], steady),
                                  np.ones(warm, dtype=np.int64)])
        src[s] = np.concatenate([np.arange(warm), np.stack([np.arange(warm, total), np.arange(steady)], axis=1).ravel(),
                                 np.arange(steady, total)])
    return kind, mb_of[src], np.where(kind == 0, chunk_f[src], vpp - 1 - chunk_f[src])


#: operations x rows walked at once by :func:`makespan` (its working arrays: 64 MB)
_CELLS = 1 << 22


@lru_cache(maxsize=256)
def _graph(pp: int, vpp: int, m: int) -> tuple[np.ndarray, np.ndarray, tuple[tuple[int, int, np.ndarray], ...]]:
    """The schedule as a graph, its operations numbered wave by wave (each wave depends only on
    earlier ones): ``where[s, kind, i, c]``, the number of stage s's forward (kind 0) or backward
    (1) of micro-batch i and chunk c (1, 2, ...; 0 stands for 'nothing', time 0); each operation's
    duration index 2 (stage vpp + chunk) + kind; and the waves, each as its numbers a..b-1 and the
    numbers of their same-stage predecessors followed by those of their inputs."""
    kind, mb, ch = _orders(pp, vpp, m)
    n = 2 * m * vpp
    stage = np.repeat(np.arange(pp), n).reshape(pp, n)
    index = 1 + np.arange(pp * n).reshape(pp, n)
    where = np.zeros((pp, 2, m, vpp), dtype=np.int64)
    where[stage, kind, mb, ch] = index
    prev = np.where(np.arange(n) > 0, np.roll(index, 1, axis=1), 0)
    # the input each operation waits for: dependency's rule, vectorized (a test checks the walk
    # against the event engine, which calls dependency itself)
    fwd, last = kind == 0, stage == pp - 1
    dep = np.zeros_like(index)
    for mask, s2, k2, c2 in ((fwd & (stage > 0), stage - 1, 0, ch), (fwd & (stage == 0) & (ch > 0), pp - 1, 0, ch - 1),
                             (~fwd & ~last, stage + 1, 1, ch), (~fwd & last & (ch < vpp - 1), 0, 1, ch + 1),
                             (~fwd & last & (ch == vpp - 1), pp - 1, 0, ch)):
        dep[mask] = where[np.broadcast_to(s2, stage.shape)[mask], k2, mb[mask], c2[mask]]
    # wave of each operation: 1 + the later of its predecessor's and its input's, stage by stage in
    # schedule order, each stage advancing as far as its inputs allow
    prev_l, dep_l, total = prev.ravel().tolist(), dep.ravel().tolist(), pp * n
    level = [0] * (total + 1)
    pos = [0] * pp
    done = 0
    while done < total:
        moved = False
        for s in range(pp):
            k, g = pos[s], s * n + pos[s]
            while k < n:
                d = dep_l[g]
                if d and not level[d]:
                    break
                p_, d_ = level[prev_l[g]], level[d]
                level[g + 1] = 1 + (p_ if p_ > d_ else d_)
                k += 1
                g += 1
            moved |= k > pos[s]
            done += k - pos[s]
            pos[s] = k
        if not moved:  # (cannot happen for the schedules above; a test runs them)
            raise RuntimeError(f"pipeline schedule pp={pp} vpp={vpp} m={m} deadlocks")
    lv = np.asarray(level[1:])
    order = np.argsort(lv, kind="stable")
    renum = np.zeros(total + 1, dtype=np.int64)
    renum[order + 1] = 1 + np.arange(total)
    dur = (2 * (stage * vpp + ch) + kind).ravel()[order]
    cuts = np.array([0, *(np.flatnonzero(np.diff(lv[order])) + 1).tolist(), total])
    # each wave's predecessors then inputs, wave after wave: operation j of the wave [a, b) at a + j, b + j
    size = np.diff(cuts)
    j = np.arange(total)
    gather = np.empty(2 * total, dtype=np.int64)
    gather[j + np.repeat(cuts[:-1], size)] = renum[prev.ravel()[order]]
    gather[j + np.repeat(cuts[1:], size)] = renum[dep.ravel()[order]]
    waves = tuple((a + 1, b + 1, gather[2 * a:2 * b]) for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(),
                                                                          strict=True))
    return renum[where], dur, waves


def _run(pp: int, vpp: int, m: int, table: np.ndarray, window: tuple[int, int] = (0, 0)
         ) -> tuple[np.ndarray, np.ndarray]:
    """The makespan per row of ``table`` (durations by index), and the end times of the operations
    of micro-batches ``window[0]`` .. ``window[1] - 1``, shape (pp, 2, micro-batches, vpp, rows)."""
    where, dur, waves = _graph(pp, vpp, m)
    keep = where[:, :, window[0]:window[1]]
    rows = table.shape[1]
    span, kept = np.zeros(rows), np.zeros((*keep.shape, rows))
    step = max(1, _CELLS // (len(dur) + 1))
    for r0 in range(0, rows, step):
        r1 = min(r0 + step, rows)
        e = np.zeros((len(dur) + 1, r1 - r0))
        d = np.zeros_like(e)
        d[1:] = table[dur, r0:r1]
        for a, b, pd in waves:
            g = e[pd]
            np.maximum(g[:b - a], g[b - a:], out=e[a:b])
            e[a:b] += d[a:b]
        span[r0:r1], kept[..., r0:r1] = e.max(axis=0), e[keep]
    return span, kept


#: rounds of pp micro-batches walked before the steady state is checked for periodicity: most
#: schedules settle within 3; those that do not are tried again after 16, then walked to the end
ROUNDS = (3, 16)
#: rounds after the checked ones (the cool-down reaches back less than two rounds)
_TAIL = 2


def makespan(pp: int, vpp: int, m: int | np.ndarray, durations_s: np.ndarray) -> np.ndarray:
    """Seconds from the first forward to the last backward of the schedule, per layout row.

    ``durations_s`` has shape (pp, vpp, 2, rows): each (stage, chunk)'s forward and backward time
    per micro-batch, anything the operation holds its stage for (its send) included; ``m``, the
    micro-batches, per row or one for all (a multiple of pp when vpp > 1).

    A long schedule is not walked to its end. Its steady state repeats every round of pp
    micro-batches, and each operation waits on operations of the last two rounds at most: so once
    every operation of three consecutive rounds ends one same period after its counterpart in the
    round before, every later round does too, and the cool-down after them as well. The walk then
    covers ``ROUNDS`` + 5 rounds and adds one period per further round; rows whose rounds have
    not settled (or whose m is not whole rounds) are walked to the end."""
    table = np.asarray(durations_s, dtype=float).reshape(pp * vpp * 2, -1)
    rows = table.shape[1]
    m = np.broadcast_to(np.asarray(m, dtype=np.int64), (rows,))
    out = np.full(rows, np.nan)
    for rounds in ROUNDS:
        run = (rounds + 3 + _TAIL) * pp
        sub = np.flatnonzero(np.isnan(out) & (m >= run) & (m % pp == 0))
        if not sub.size:
            continue
        # the rounds rounds - 1 .. rounds + 2, each against the one before
        span, e = _run(pp, vpp, run, table[:, sub], ((rounds - 1) * pp, (rounds + 3) * pp))
        period = e[0, 0, pp, 0] - e[0, 0, 0, 0]
        tol = 1e-10 * span
        steady = m[sub] == run  # (walked to the end)
        settled = np.ones(len(sub), dtype=bool)
        for r in range(1, 4):
            shift = e[:, :, r * pp:(r + 1) * pp] - e[:, :, (r - 1) * pp:r * pp]
            settled &= np.all(np.abs(shift - period) <= tol, axis=(0, 1, 2, 3))
        steady |= settled
        out[sub[steady]] = (span + (m[sub] - run) // pp * period)[steady]
    for mm in np.unique(m[np.isnan(out)]):
        sel = (m == mm) & np.isnan(out)
        out[sel] = _run(pp, vpp, int(mm), table[:, sel])[0]
    return out


def makespan_bound(m: int | np.ndarray, durations_s: np.ndarray) -> np.ndarray:
    """A lower bound of :func:`makespan`, exact where every chunk does the same work, at the cost of
    a sum (no walk): the busiest stage plus what must run before its first operation and after
    its last.

    Stage s cannot start before micro-batch 0's first chunk has gone forward through stages
    0 .. s - 1, runs m micro-batches of every chunk's forward and backward, and ends with the
    backward of chunk 0 of the last micro-batch, which stages s - 1 .. 0 then run backward in turn.
    With equal chunks this is the closed form (m + (pp - 1) / vpp) stage-times; with unequal ones
    the stalls of the steady state come on top, which only the walk finds."""
    d = np.asarray(durations_s, dtype=float)
    pp = d.shape[0]
    d = d.reshape(pp, d.shape[1], 2, -1)
    m = np.asarray(m, dtype=float)
    busy = m * d.sum(axis=(1, 2))  # (pp, rows)
    first_f, first_b = d[:, 0, 0], d[:, 0, 1]
    before = np.cumsum(first_f, axis=0) - first_f  # forwards of chunk 0 on the stages before s
    after = np.cumsum(first_b, axis=0) - first_b  # backwards of chunk 0 on the stages before s
    return (before + busy + after).max(axis=0)


def chunk_durations(blocks: np.ndarray, layer_s: np.ndarray, layer_forward_frac: np.ndarray,
                    head_s: np.ndarray, head_forward_s: np.ndarray, mtp_s: np.ndarray, mtp_forward_s: np.ndarray,
                    send_s: np.ndarray) -> np.ndarray:
    """Forward and backward seconds of each (stage, chunk), shape (pp, vpp, 2, rows). ``blocks``
    (pp, vpp, 3) counts each chunk's layer-like blocks (``layer_s`` each, ``layer_forward_frac`` of
    it in the forward), its MTP modules (each ``mtp_s`` more: its projection and a pass of the head)
    and its heads (``head_s``); each operation then holds its stage for ``send_s``."""
    n = np.asarray(blocks, dtype=float)[..., None]
    layer_s, frac, head_s, head_f, mtp_s, mtp_f, send_s = (
        np.atleast_1d(np.asarray(x, dtype=float))
        for x in (layer_s, layer_forward_frac, head_s, head_forward_s, mtp_s, mtp_forward_s, send_s))
    fwd = n[:, :, 0] * layer_s * frac + n[:, :, 1] * mtp_f + n[:, :, 2] * head_f
    bwd = n[:, :, 0] * layer_s * (1.0 - frac) + n[:, :, 1] * (mtp_s - mtp_f) + n[:, :, 2] * (head_s - head_f)
    return np.stack([fwd + send_s, bwd + send_s], axis=2)
