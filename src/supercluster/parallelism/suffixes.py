"""Run options a framework name carries as suffixes (``nemo-megatron+fp8-mxfp8+capacity-1.25``): what
each names, and how a name splits into its profile and options (:func:`split_suffixes`);
:func:`.framework.with_suffixes` switches them on in a profile."""

from __future__ import annotations

import re

from ..hardware.kernels import FP8_RECIPES

COMPILE_SUFFIX = "+compile"
#: Megatron-Core --overlap-moe-expert-parallel-comm (Megatron-Bridge moe_a2a_overlap; Megatron-Core
#: MoE README, v0.14: "batch-level overlapping to hide EP-A2A communication"): the EP all-to-all of
#: one micro-batch runs under the compute of another.
EP_OVERLAP_SUFFIX = "+ep-overlap"
#: the pipeline split counts the embedding and the output head (with the loss) as one layer each, so
#: the first and last stages hold one layer fewer: Megatron-Core --account-for-embedding-in-pipeline-split
#: and --account-for-loss-in-pipeline-split, Megatron-DeepSpeed --pp-partition-method
#: 'type:transformer|embedding' (BigScience tr11 README: "pp rank 0: [embed | 5 transformer blocks]")
EMBED_SPLIT_SUFFIX = "+embedding-split"
#: DeepEP's dispatcher (see :attr:`Framework.ep_node_dedup`)
DEEPEP_SUFFIX = "+deepep"
#: all-to-all (Ulysses) context parallelism: Megatron-Core --cp-comm-type a2a, Transformer Engine's
#: AttnFuncWithCPAndQKVOA2A (see :attr:`Framework.cp_rotate`); a p2p (Transformer Engine) profile only
CP_A2A_SUFFIX = "+cp-a2a"
#: the run routes with a fixed round-robin gate instead of its learned router: token i of a micro-batch
#: to experts i k ... i k + k - 1 (mod E). NeMo AutoModel's FakeBalancedGate (nemo_automodel
#: components/moe/layers.py; every benchmark config sets fake_balanced_gate: true, and its performance
#: summary notes "Fake balanced gate is enabled to simulate ideal expert routing").
ROUND_ROBIN_SUFFIX = "+round-robin-gate"
#: token-drop routing at a capacity factor C ("+capacity-1.25"; see :attr:`Framework.moe_capacity_factor`),
#: with "+pad-to-capacity" each expert's input padded to its capacity
CAPACITY_PREFIX, PAD_SUFFIX = "+capacity-", "+pad-to-capacity"
_CAPACITY_RE = re.compile(r"\+capacity-([0-9]+(?:\.[0-9]+)?)$")
#: the capacity factors a run may state (beyond the experts over top-k nothing can be dropped)
CAPACITY_RANGE = (0.01, 1000.0)
#: run options a published run states and a profile's default may not match: the layers captured in
#: CUDA graphs (Megatron-Core --enable-cuda-graph); TP communication overlapped with the GEMMs
#: (Megatron-LM --tp-comm-overlap, which needs --sequence-parallel; torchtitan's async TP) or not;
#: data-parallel traffic overlapped with compute (--overlap-grad-reduce / --overlap-param-gather) or not
CUDA_GRAPHS_SUFFIX = "+cuda-graphs"
#: FlashAttention in place of an unfused core attention: Megatron's --use-flash-attn (Megatron-DeepSpeed:
#: --use-flash-attn-v1 / -v2 / -triton, megatron/arguments.py, each off by default) runs the flash_attn
#: package's kernels instead of CoreAttention's batched GEMMs and softmax; priced as the "sdpa" kernel family
#: (FlashAttention-2, which PyTorch SDPA's flash backend runs too). Only a profile whose attention is
#: unfused takes it.
FLASH_ATTN_SUFFIX = "+flash-attn"
TP_OVERLAP_SUFFIX, NO_TP_OVERLAP_SUFFIX = "+tp-overlap", "+no-tp-overlap"
DP_OVERLAP_SUFFIX, NO_DP_OVERLAP_SUFFIX = "+dp-overlap", "+no-dp-overlap"
#: the fp8 recipe the run used (:data:`FP8_RECIPES`), as "+fp8-<recipe>"
FP8_RECIPE_SUFFIXES = {f"+fp8-{r}": r for r in FP8_RECIPES}
RUN_OPTION_SUFFIXES = (CUDA_GRAPHS_SUFFIX, FLASH_ATTN_SUFFIX, TP_OVERLAP_SUFFIX, NO_TP_OVERLAP_SUFFIX,
                       DP_OVERLAP_SUFFIX, NO_DP_OVERLAP_SUFFIX, *FP8_RECIPE_SUFFIXES)
SUFFIXES = (COMPILE_SUFFIX, EP_OVERLAP_SUFFIX, EMBED_SPLIT_SUFFIX, DEEPEP_SUFFIX, ROUND_ROBIN_SUFFIX,
            PAD_SUFFIX, CP_A2A_SUFFIX, *RUN_OPTION_SUFFIXES)


def split_suffixes(name: str) -> tuple[str, list[str]]:
    """``"torchtitan+compile+ep-overlap"`` -> ``("torchtitan", [suffixes])``, in any order."""
    base, mods = name.strip().lower(), []
    while found := next((x for x in SUFFIXES if base.endswith(x)), None) or (
            m.group(0) if (m := _CAPACITY_RE.search(base)) else None):
        mods.append(found)
        base = base.removesuffix(found)
    return base, mods
