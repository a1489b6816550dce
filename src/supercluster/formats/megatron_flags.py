"""What a Megatron-LM launch script's flags say about how the framework runs (overlaps, gradient
precision, dropout, fp8 recipe, MoE dispatch and routing), and the flags that make Megatron-LM run the
way a profile is priced: :func:`framework_from_args` and its inverse :func:`framework_args`. The
model and layout flags are :mod:`.megatron_args`' and :func:`supercluster.formats.launchers.from_megatron_args`'."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import require
from ..parallelism.framework import FP8_RECIPE_NAMES, MEGATRON_FP8_RECIPE, Framework, get_framework
from ..parallelism.layout import Layout
from ..parallelism.suffixes import CAPACITY_PREFIX, CP_A2A_SUFFIX, DEEPEP_SUFFIX, EP_OVERLAP_SUFFIX, PAD_SUFFIX
from .megatron_args import float_flag

#: profiles whose behaviours Megatron-LM flags can set (others export the layout and model only)
MEGATRON_FAMILIES = ("megatron", "nemo-megatron")

#: bytes an optimizer-state element takes by Megatron-LM's --exp-avg-dtype / --exp-avg-sq-dtype /
#: --main-params-dtype names
STATE_DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
#: what Transformer Engine's cross-entropy kernel (--cross-entropy-fusion-impl te) keeps a logit: the
#: 16-bit logits, the gradient written into them in place (frameworks.toml nemo-megatron)
TE_LOSS_BYTES_PER_LOGIT = 2.0


def precision_aware_bytes(exp_avg: str = "fp32", exp_avg_sq: str = "fp32", main_params: str = "fp32",
                          bf16: bool = True) -> float:
    """Optimizer-state bytes a parameter under Megatron-LM's --use-precision-aware-optimizer
    (Transformer Engine's FusedAdam): the master weights (fp32 ones of bf16 parameters kept as their
    16-bit remainders, store_param_remainders from TE 2.1: 2; else their own dtype) and Adam's m and v."""
    master = 2 if bf16 and main_params == "fp32" else STATE_DTYPE_BYTES[main_params]
    return float(master + STATE_DTYPE_BYTES[exp_avg] + STATE_DTYPE_BYTES[exp_avg_sq])


def _optimizer_args(fw: Framework, precision: str, zero_stage: int) -> list[str]:
    """The flags of the precision-aware optimizer state the profile keeps on this precision, if any (only
    with the distributed optimizer, as Megatron-Core's OptimizerConfig requires)."""
    bf16 = precision in ("bf16", "fp16")
    own = fw.optimizer_state_bytes(bf16, zero_stage >= 1)
    plain = precision_aware_bytes(bf16=False)  # (fp32 master, m and v: what Megatron-LM keeps without the flag)
    for dt in ("fp32", "bf16"):
        if zero_stage >= 1 and own != plain and own == precision_aware_bytes(dt, dt, bf16=bf16):
            return ["--use-precision-aware-optimizer" + ("" if dt == "fp32" else f" --exp-avg-dtype {dt} "
                                                          f"--exp-avg-sq-dtype {dt}")]
    return []


def framework_args(fw: Framework, layout: Layout, sequence_parallel: bool, moe: bool = False) -> list[str]:
    """The flags that make Megatron-LM run the way ``fw`` is priced on ``layout`` (the inverse of
    :func:`framework_from_args`; empty for a framework outside :data:`MEGATRON_FAMILIES`); ``moe``:
    the model has experts (its token dispatcher: DeepEP's, or the all-to-all one)."""
    if fw.family not in MEGATRON_FAMILIES:
        return []
    tp, pp, ep, zero_stage, precision = layout.tp, layout.pp, layout.ep, layout.zero_stage, layout.precision
    a = []
    if moe:
        a.append("--moe-token-dispatcher-type flex --moe-enable-deepep" if fw.ep_node_dedup
                 else "--moe-token-dispatcher-type alltoall")
    if moe and fw.moe_capacity_factor > 0:
        a.append(f"--moe-expert-capacity-factor {fw.moe_capacity_factor:g}"
                 + (" --moe-pad-expert-input-to-capacity" if fw.moe_pad_to_capacity else ""))
    if fw.dp_overlap:
        a.append("--overlap-grad-reduce" + (" --overlap-param-gather" if zero_stage >= 1 else ""))
    if fw.tp_comm_overlap and tp > 1 and sequence_parallel:
        a.append("--tp-comm-overlap")
    if not fw.pp_overlap and pp > 1:
        a.append("--no-overlap-p2p-communication")
    if fw.ep_overlap and ep > 1:
        a.append("--overlap-moe-expert-parallel-comm")
    if fw.cp_rotate == "a2a" and layout.cp > 1:
        a.append("--cp-comm-type a2a")
    if fw.grad_bytes == 2 and precision != "fp16":
        a.append("--grad-reduce-in-bf16")
    elif fw.grad_bytes == 4 and precision == "fp16":
        a.append("--accumulate-allreduce-grads-in-fp32")
    if not fw.dropout:
        a.append("--attention-dropout 0 --hidden-dropout 0")
    if fw.fp8_param_gather and precision == "fp8":
        a.append("--fp8-param-gather")
    # (a profile's Transformer Engine loss is not exported: Megatron-LM refuses --cross-entropy-fusion-impl
    # te, "disabled due to stability issues" (megatron-core 0.17 arguments.py), so the script runs the
    # native kernel, whose fp32 buffer its read-back prices: memory only, the step time is the plan's)
    return a + _optimizer_args(fw, precision, zero_stage)


def framework_from_args(args: dict[str, Any], name: str = "megatron-lm script") -> Framework:
    """The Megatron-LM profile with the behaviours these flags switch, at Megatron-LM's defaults
    where a flag is absent (arguments.py): ``--tp-comm-overlap`` (off), ``--overlap-grad-reduce``
    (off), ``--no-overlap-p2p-communication`` (pipeline sends overlap by default),
    ``--overlap-moe-expert-parallel-comm`` (off), ``--moe-enable-deepep`` (DeepEP's dispatcher: each
    token crosses once per node; off), ``--account-for-embedding-in-pipeline-split`` /
    ``--account-for-loss-in-pipeline-split`` (either: the pipeline split counts both),
    ``--grad-reduce-in-bf16`` / ``--accumulate-allreduce-grads-in-fp32`` (bf16 runs keep and reduce
    gradients in fp32 by default, fp16 runs in fp16), ``--attention-dropout`` /
    ``--hidden-dropout`` (0.1 each), ``--fp8-param-gather``, ``--attention-backend unfused|local``,
    ``--fp8-recipe delayed|tensorwise|blockwise|mxfp8`` (delayed), ``--moe-expert-capacity-factor`` and
    ``--moe-pad-expert-input-to-capacity`` (token-drop routing; dropless without), ``--cp-comm-type
    p2p|a2a`` (p2p; a2a: all-to-all CP; TE's allgather and hierarchical a2a+p2p are refused by name)."""
    capacity = float_flag(args, "moe-expert-capacity-factor", -1.0)  # (Megatron-Core: < 0 or absent is dropless)
    cp_comm = str(args.get("cp-comm-type", "p2p")).lower()
    require(cp_comm in ("p2p", "a2a"), "cp-comm-type", f"{cp_comm!r} is not modelled; allowed: p2p (the ring) or a2a "
                                                       "(all-to-all), one type for every layer")
    fw = get_framework("megatron" + (EP_OVERLAP_SUFFIX if args.get("overlap-moe-expert-parallel-comm") else "")
                       + (DEEPEP_SUFFIX if args.get("moe-enable-deepep") else "")
                       + (f"{CAPACITY_PREFIX}{capacity:g}" if capacity >= 0 else "")
                       + (PAD_SUFFIX if args.get("moe-pad-expert-input-to-capacity") else "")
                       + (CP_A2A_SUFFIX if cp_comm == "a2a" else ""))
    # bf16 accumulates and reduces gradients in fp32 unless --grad-reduce-in-bf16; fp16 in fp16 unless
    # --accumulate-allreduce-grads-in-fp32 (arguments.py validate_args; DDP grad buffer dtype)
    fp32 = args.get("accumulate-allreduce-grads-in-fp32") or (not args.get("fp16")
                                                               and not args.get("grad-reduce-in-bf16"))
    grad = 4 if fp32 else 2
    dropout = any(float_flag(args, f, 0.1) > 0 for f in ("attention-dropout", "hidden-dropout"))
    backend = str(args.get("attention-backend", "auto")).lower()
    recipe = str(args.get("fp8-recipe", "delayed")).lower()
    require(recipe in FP8_RECIPE_NAMES, "fp8-recipe", f"{recipe!r}: allowed {', '.join(MEGATRON_FP8_RECIPE.values())}")
    # --use-precision-aware-optimizer: TE's FusedAdam with the state dtypes the flags name
    opt = {}
    if args.get("use-precision-aware-optimizer"):
        dts = [str(args.get(f, "fp32")).lower() for f in ("exp-avg-dtype", "exp-avg-sq-dtype", "main-params-dtype")]
        for f, dt in zip(("exp-avg-dtype", "exp-avg-sq-dtype", "main-params-dtype"), dts, strict=True):
            require(dt in STATE_DTYPE_BYTES, f, f"{dt!r}; allowed: {', '.join(STATE_DTYPE_BYTES)}")
        opt = dict(optimizer_bytes_per_param=precision_aware_bytes(*dts, bf16=False),
                   bf16_optimizer_bytes_per_param=precision_aware_bytes(*dts, bf16=True))
    impl = str(args.get("cross-entropy-fusion-impl", "native")).lower()
    require(impl in ("native", "te"), "cross-entropy-fusion-impl", f"{impl!r}; allowed: native, te")
    te_loss = args.get("cross-entropy-loss-fusion") and impl == "te"
    loss = TE_LOSS_BYTES_PER_LOGIT if te_loss else fw.loss_bytes_per_logit
    out = dataclasses.replace(
        fw, key=name, era_of="megatron",  # (its family: the evidence line and the notes name Megatron-LM)
        loss_bytes_per_logit=loss, **opt,
        tp_comm_overlap=bool(args.get("tp-comm-overlap")), dp_overlap=bool(args.get("overlap-grad-reduce")),
        pp_overlap=not args.get("no-overlap-p2p-communication"),
        pp_split_counts_head=bool(args.get("account-for-embedding-in-pipeline-split")
                                  or args.get("account-for-loss-in-pipeline-split")),
        grad_bytes=grad, grad_reduce_bytes=grad, dropout=dropout, fp8_param_gather=bool(args.get("fp8-param-gather")),
        attention="unfused" if backend in ("unfused", "local") else fw.attention, fp8_recipe=FP8_RECIPE_NAMES[recipe])
    return dataclasses.replace(out, doc=describe(out))


def describe(fw: Framework) -> str:
    """One line of what a script-set Megatron-LM profile does, in the flags' words (the estimate
    prints it, so a slow script shows which switch it left off)."""
    on = {True: "on", False: "off"}
    return ("Megatron-LM as the script's flags set it: gradient-sync overlap " + on[fw.dp_overlap]
            + " (--overlap-grad-reduce), TP overlap " + on[fw.tp_comm_overlap] + " (--tp-comm-overlap), "
            + "EP overlap " + on[fw.ep_overlap] + ", DeepEP " + on[fw.ep_node_dedup] + ", pipeline sends "
            + ("overlapped" if fw.pp_overlap else "exposed")
            + f", gradients {'fp32' if fw.grad_bytes == 4 else '16-bit'} (--grad-reduce-in-bf16), dropout "
            + on[fw.dropout] + ", embedding and loss " + ("counted" if fw.pp_split_counts_head else "not counted")
            + " in the pipeline split, attention " + fw.attention + ", fp8 recipe " + fw.fp8_recipe
            + ", CP " + ("all-to-all" if fw.cp_rotate == "a2a" else "ring") + " (--cp-comm-type)")
