"""The measured kernel figures of ``data/kernels.toml`` the cost model reads: fused attention's
efficiency and its fall-off at short sequences, fp8 / fp4 quantisation bytes and kernel rates per
recipe, how GEMM kernels tile their output over the SMs (:class:`GemmGrid`), the host's cost to launch
an op, the SM share a collective holds, the achievable HBM fraction and the spread of GPU speeds. Each
figure cites its source in the TOML."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

from .._toml import load_package_toml
from ..errors import InputError

#: Transformer Engine's fp8 recipes (Megatron-LM --fp8-recipe: delayed, tensorwise = current scaling,
#: blockwise, mxfp8), each priced by its own quantisation cost (kernels.toml [quantize]); "delayed" is
#: Megatron-LM's and Transformer Engine's default
FP8_RECIPES = ("delayed", "current", "blockwise", "mxfp8")


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionEfficiency:
    """A fused attention kernel's achieved fractions of the dense 16-bit peak (long causal sequences, head
    dim 128). Where the forward is bound by the softmax's exponentials (``exp_frac`` > 0: the share of the
    GPU's special-function-unit rate it sustains), ``mma_frac`` is its rate where the matmuls bind and the
    forward takes the longer of the two; ``fwd_frac`` is what it was measured at."""

    fwd_frac: float
    bwd_frac: float
    source: str
    mma_frac: float = 0.0
    exp_frac: float = 0.0


@cache
def _kernels() -> dict[str, object]:
    return load_package_toml("kernels.toml")


def attention_efficiency(family: str, arch: str) -> AttentionEfficiency:
    table = _kernels().get(family)
    if not isinstance(table, dict) or arch not in table:
        raise InputError("attention", f"no efficiency for kernel {family!r} on {arch!r}")
    t = table[arch]
    return AttentionEfficiency(fwd_frac=float(t["fwd_frac"]), bwd_frac=float(t["bwd_frac"]), source=t["source"],
                               mma_frac=float(t.get("mma_frac", 0.0)), exp_frac=float(t.get("exp_frac", 0.0)))


def _log2_curve(at: np.ndarray | float, points: object, values: object) -> np.ndarray:
    """A measured curve at ``at``, relative to its last point: interpolated in log2 of ``points``,
    held at the ends."""
    xs = np.log2(np.asarray(points, dtype=float))
    ys = np.asarray(values, dtype=float)
    return np.interp(np.log2(np.maximum(np.asarray(at, dtype=float), 1.0)), xs, ys / ys[-1])


def attention_length_factor(tokens: np.ndarray | float, family: str = "flash") -> np.ndarray:
    """A fused attention kernel's rate at ``tokens`` of sequence per rank relative to its long-sequence
    rate, with the causal mask (kernels.toml [attention_length], the ``family``'s own curve):
    interpolated in log2 of the length, held at the ends."""
    t = _kernels()["attention_length"]  # type: ignore[index]
    if f"{family}_tflops" not in t:  # type: ignore[operator]
        raise InputError("attention", f"no sequence-length curve for kernel {family!r}")
    return _log2_curve(tokens, t["tokens"], t[f"{family}_tflops"])  # type: ignore[index]


def attention_head_rate(family: str, head_dim: float) -> tuple[float, float]:
    """A fused attention kernel's (forward, backward) rate at QK head dim ``head_dim`` relative to head
    dim 128 (kernels.toml [attention_head_rate]): interpolated in log2 of the head dim, held at the
    ends; (1, 1) for a kernel with no figure."""
    t = _kernels()["attention_head_rate"]  # type: ignore[index]
    if f"{family}_fwd_tflops" not in t:  # type: ignore[operator]
        return 1.0, 1.0
    return (float(_log2_curve(head_dim, t["head_dims"], t[f"{family}_fwd_tflops"])),  # type: ignore[index]
            float(_log2_curve(head_dim, t["head_dims"], t[f"{family}_bwd_tflops"])))  # type: ignore[index]


def attention_head_padding(family: str, qk_dim: float, v_dim: float) -> float:
    """How much more a fused attention kernel of ``family`` computes than the model's head dims ask:
    (padded QK + padded V head dim) / (QK + V) as the kernel's tiles run them (kernels.toml
    [attention_head_dim]); 1 where the kernel takes the head dim as it is."""
    rule = _kernels()["attention_head_dim"].get(family)  # type: ignore[union-attr]
    if rule is None or qk_dim + v_dim <= 0:
        return 1.0

    def pad(d: float) -> float:
        if rule == "power_of_two":
            return float(max(2 ** math.ceil(math.log2(max(d, 1.0))), 16))
        return float(math.ceil(d / float(rule)) * float(rule))  # type: ignore[arg-type]

    return (pad(qk_dim) + pad(v_dim)) / (qk_dim + v_dim)


def _recipe_key(precision: str, recipe: str) -> str:
    return precision if precision == "fp4" or recipe == "delayed" else "mxfp8" if recipe == "mxfp8" \
        else f"fp8_{recipe}"


def quantize_bytes_per_element(arch: str, precision: str, recipe: str = "delayed") -> float:
    """HBM bytes Transformer Engine's autocast moves per element it quantises to ``precision`` (fp8 /
    fp4) for a GEMM under the fp8 ``recipe`` (kernels.toml [quantize]); 0 for 16-bit GEMMs or where no
    figure applies. A recipe measured on no GPU of ``arch``'s generation is refused by name."""
    if precision not in ("fp8", "fp4"):
        return 0.0
    table = _kernels()["quantize"]  # type: ignore[index]
    row = table.get(arch, {})  # type: ignore[union-attr]
    key = _recipe_key(precision, recipe)
    if precision == "fp8" and recipe != "delayed" and f"{key}_bytes_per_element" not in row:
        here = ", ".join(r for r in FP8_RECIPES
                         if r == "delayed" or f"{_recipe_key('fp8', r)}_bytes_per_element" in row)
        if recipe == "mxfp8":
            raise InputError("fp8_recipe", f"MXFP8 runs on block-scaled tensor cores (Blackwell) only, not on "
                                           f"{arch} GPUs; allowed here: {here}")
        raise InputError("fp8_recipe", f"{recipe!r} has no measurement on {arch} GPUs; allowed here: {here}")
    return float(row.get(f"{key}_bytes_per_element", 0.0))


def fp8_kernel_frac(arch: str, recipe: str) -> float:
    """The fp8 GEMM kernel's rate under ``recipe`` relative to the tensorwise kernel the catalog's fp8
    fractions measure (kernels.toml [quantize] mxfp8_kernel_frac; 1 for the other recipes)."""
    row = _kernels()["quantize"].get(arch, {})  # type: ignore[union-attr]
    return float(row.get("mxfp8_kernel_frac", 1.0)) if recipe in ("mxfp8", "blockwise") else 1.0


@dataclass(frozen=True, slots=True)
class GemmGrid:
    """How a GPU's GEMM kernels spread a product over its ``sms`` streaming multiprocessors
    (kernels.toml [gemm] tiles): the M x N output is cut into tiles of one of the library's shapes,
    each computed by one thread block on one SM, and the SMs run the tiles in waves. Two losses follow
    (tile quantisation: a tile past the edge of the output computes padding; wave quantisation: the
    last wave leaves SMs idle), and the kernel takes the tile shape that loses least. ``reference`` is
    the share kept busy over the catalogue's reference layer (kernels.toml [gemm] reference_*), whose
    GEMMs measured the GPU's GEMM rate: shapes are priced relative to it."""

    sms: int
    tiles: tuple[tuple[int, int], ...]
    reference: float = 1.0

    def efficiency(self, M: np.ndarray | float, N: np.ndarray | float,
                   groups: np.ndarray | float = 1.0) -> np.ndarray:
        """Share of the SMs' tile slots an M x N output keeps busy at its best tile shape; ``groups``
        outputs of that shape scheduled as one grid (a grouped GEMM's experts) share the waves."""
        m, n = np.maximum(np.asarray(M, dtype=float), 1.0), np.maximum(np.asarray(N, dtype=float), 1.0)
        g = np.asarray(groups, dtype=float)
        # busy share = useful area over the slots the waves hold: M N g / (tm tn sms waves)
        rows = {t: np.ceil(m / t) for t in {tm for tm, _ in self.tiles}}
        cols = {t: np.ceil(n / t) for t in {tn for _, tn in self.tiles}}
        held = np.minimum.reduce([(tm * tn) * np.ceil(rows[tm] * cols[tn] * g / self.sms) for tm, tn in self.tiles])
        return m * n * g / (self.sms * held)

    def slowdown(self, M: np.ndarray | float, K: np.ndarray | float, N: np.ndarray | float,
                 groups: np.ndarray | float = 1.0) -> np.ndarray:
        """Time of an (M x K) @ (K x N) GEMM's three training passes (forward M x N, data gradient
        M x K, weight gradient K x N), each at its own tiling, over the same work at the reference
        layer's: 1 on the reference layer, above 1 for shapes that use the SMs worse."""
        inv = 1.0 / self.efficiency(M, N, groups) + 1.0 / self.efficiency(M, K, groups) \
            + 1.0 / self.efficiency(K, N, groups)
        return inv * self.reference / 3.0


@cache
def gemm_grid(sms: int) -> GemmGrid | None:
    """The :class:`GemmGrid` of a GPU with ``sms`` SMs (gpus.toml sm_count), normalised to the
    reference layer (fprop, dgrad and wgrad of its QKV, projection, FC1 and FC2 GEMMs, weighted by
    their FLOPs); None where the count is not catalogued (no quantisation is priced)."""
    if sms <= 0:
        return None
    g = _kernels()["gemm"]
    grid = GemmGrid(sms=sms, tiles=tuple((int(a), int(b)) for a, b in g["tiles"]))  # type: ignore[index]
    t, h, f = float(g["reference_tokens"]), float(g["reference_hidden"]), float(g["reference_ffn"])  # type: ignore[index]
    flops = busy = 0.0
    for k, n in ((h, 3.0 * h), (h, h), (h, f), (f, h)):
        work = 2.0 * t * k * n
        flops += work
        busy += work * float(grid.slowdown(t, k, n))
    return GemmGrid(sms=sms, tiles=grid.tiles, reference=flops / busy)


def _host_slowdown(host_cpu: str) -> float:
    """How much slower ``host_cpu`` runs PyTorch's host work than an x86 server (kernels.toml [host])."""
    return float(_kernels()["host"]["grace_op_factor"]) if host_cpu == "grace" else 1.0  # type: ignore[index]


def host_op_launch_s(host_cpu: str = "intel") -> float:
    """Host seconds PyTorch takes to launch one small GPU op from ``host_cpu`` (kernels.toml [host])."""
    return float(_kernels()["host"]["op_launch_s"]) * _host_slowdown(host_cpu)  # type: ignore[index]


def host_view_op_s(host_cpu: str = "intel") -> float:
    """Host seconds one tensor op called from Python takes when it launches no kernel (a view), from
    ``host_cpu``: kernels.toml [host] view_op_s."""
    return float(_kernels()["host"]["view_op_s"]) * _host_slowdown(host_cpu)  # type: ignore[index]


def comm_sm_frac() -> float:
    """Share of a GPU's SMs a collective running beside compute holds (kernels.toml [overlap])."""
    return float(_kernels()["overlap"]["comm_sm_frac"])  # type: ignore[index]


def hbm_frac() -> float:
    """Achievable fraction of HBM bandwidth for memory-bound kernels."""
    return float(_kernels()["memory"]["hbm_frac"])  # type: ignore[index]


def gpu_speed_sigma() -> float:
    """Relative standard deviation of the sustained speed of identical GPUs (kernels.toml
    [synchronization])."""
    return float(_kernels()["synchronization"]["gpu_speed_sigma"])  # type: ignore[index]
