"""Framework behaviour profiles (``data/frameworks.toml``) and kernel efficiencies (``data/kernels.toml``)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cache, lru_cache
from typing import TYPE_CHECKING

import numpy as np

from .._toml import check_keys, load_package_toml
from ..errors import InputError, require
from ..hardware.kernels import FP8_RECIPES
from .suffixes import (
    CAPACITY_PREFIX,
    CAPACITY_RANGE,
    COMPILE_SUFFIX,
    CP_A2A_SUFFIX,
    CUDA_GRAPHS_SUFFIX,
    DEEPEP_SUFFIX,
    DP_OVERLAP_SUFFIX,
    EMBED_SPLIT_SUFFIX,
    EP_OVERLAP_SUFFIX,
    FLASH_ATTN_SUFFIX,
    FP8_RECIPE_SUFFIXES,
    NO_DP_OVERLAP_SUFFIX,
    NO_TP_OVERLAP_SUFFIX,
    PAD_SUFFIX,
    ROUND_ROBIN_SUFFIX,
    SUFFIXES,
    TP_OVERLAP_SUFFIX,
    split_suffixes,
)

if TYPE_CHECKING:
    from ..models.spec import ModelSpec
    from .layout import Layout

ALIASES = {
    "megatron-lm": "megatron", "megatron-core": "megatron", "mcore": "megatron",
    "nemo": "nemo-megatron", "nemo2": "nemo-megatron", "nemo-megatron": "nemo-megatron",
    "megatron-bridge": "nemo-megatron",  # NeMo's Megatron-Core training library (same recipes)
    "deepspeed-zero": "deepspeed", "deepspeed-megatron": "megatron-deepspeed",
    "fsdp": "torchtitan", "fsdp2": "torchtitan", "pytorch": "torchtitan",
    "deepseek": "hai-llm", "dualpipe": "hai-llm", "hai": "hai-llm",
    "jax": "maxtext",
}
#: The one default everywhere (the Python API, every command, validate's reading of an unknown framework):
#: Megatron-Core as NVIDIA's maintained recipes run it (NeMo / Megatron-Bridge: sequence parallelism and
#: TP overlap with TP > 1, distributed optimizer). ``megatron`` is Megatron-LM's bare argument defaults
#: (no SP), with which the Llama 3 405B layout on 16,384 H100 needs 199 GiB per 80 GiB GPU.
DEFAULT_FRAMEWORK = "nemo-megatron"

#: how a benchmark's router assigns tokens to experts: "random" = each token's top-k experts drawn
#: uniformly (a balanced learned router; Megatron-Core --moe-router-force-load-balancing draws random
#: logits); "round-robin" = token i of a micro-batch goes to experts i k ... i k + k - 1 (mod E)
#: (NeMo AutoModel's FakeBalancedGate, its benchmark configs' fake_balanced_gate: true)
ROUTERS = ("random", "round-robin")
#: how context parallelism can move K/V (:attr:`Framework.cp_rotate`)
CP_ROTATES = ("p2p", "allgather", "a2a")
#: how a framework overlaps its TP collectives with the GEMMs (:attr:`Framework.tp_overlap`)
TP_OVERLAPS = ("userbuffers", "async-tp")

#: each recipe as Megatron-LM's --fp8-recipe spells it (current scaling is its "tensorwise")
MEGATRON_FP8_RECIPE = {"delayed": "delayed", "current": "tensorwise", "blockwise": "blockwise", "mxfp8": "mxfp8"}
#: every name a run may give a recipe (ours and Megatron-LM's), and the recipe it means
FP8_RECIPE_NAMES = {**{r: r for r in FP8_RECIPES}, **{m: r for r, m in MEGATRON_FP8_RECIPE.items()}}


@dataclass(frozen=True, slots=True, kw_only=True)
class Framework:
    """What a framework overlaps, shards and runs by default."""

    key: str
    sequence_parallel: bool
    tp_comm_overlap: bool
    dp_overlap: bool
    pp_overlap: bool
    ep_overlap: bool
    attention: str
    grad_bytes: float
    grad_reduce_bytes: float
    zero3_gathers_per_layer: int
    zero3_prefetch: bool
    zero3_regather_on_recompute: bool
    default_recompute: str
    default_zero_stage: int
    doc: str
    dropout: bool = False
    pp_scatter_gather: bool = False
    selective_recompute: str = "attention"
    #: the framework recomputes chosen modules of a layer (Megatron-Core --recompute-modules); elsewhere a
    #: layout naming them is refused. The planner searches ``module_sets`` of them (selective rows; () = the
    #: framework's own policy), where given, else Megatron-Core's MoE pairs for an MoE model
    recompute_modules: bool = False
    module_sets: tuple[tuple[str, ...], ...] = ()
    elementwise: str = "fused"
    #: the layers' kernels are captured in CUDA graphs and replayed by one launch (Megatron-Core
    #: --enable-cuda-graph / --external-cuda-graph, NeMo's enable_cuda_graph): no host launch cost per
    #: kernel (perf.host.host_bound)
    cuda_graphs: bool = False
    #: how fp8 GEMMs are scaled (:data:`FP8_RECIPES`)
    fp8_recipe: str = "delayed"
    context_parallel: bool = True
    #: the framework can shard layers over GPUs (tensor parallelism) / split them into pipeline stages;
    #: the planner searches TP / PP only then, and an estimate with tp or pp > 1 is refused otherwise
    tensor_parallel: bool = True
    pipeline_parallel: bool = True
    #: the pipeline can interleave virtual stages (vpp > 1: Megatron's interleaved 1F1B, torchtitan's
    #: Interleaved1F1B); DeepSpeed's PipelineEngine runs plain 1F1B over contiguous stages
    interleaved_pipeline: bool = True
    #: how many micro-batches an interleaved schedule (vpp > 1) takes: "pp_multiple" = a multiple of pp
    #: (Megatron-Core's microbatch_group_size_per_vp_stage defaults to pp, in [pp, M], no smaller last group;
    #: older Megatron-LM: "number of microbatches is not divisible by pipeline-model-parallel-size"); "rounds"
    #: = torch.distributed.pipelining's Interleaved1F1B: a multiple of its rounds, max(1, M // pp)
    interleave_microbatches: str = "pp_multiple"
    #: an MoE model with tp > 1 needs sequence parallelism (Megatron-LM arguments.py: "When using MoE and
    #: tensor parallelism, sequence parallelism must be used"): a layout gets it; turning it off is refused
    moe_tp_needs_sp: bool = False
    #: the ZeRO stages the framework has, and the highest it runs with pipeline parallelism (frameworks.toml)
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    zero_max_with_pp: int = 3
    #: the framework can replicate its ZeRO / FSDP shard group (a layout's dp_replicate; frameworks.toml)
    hybrid_shard: bool = False
    era_of: str = ""
    #: the framework family the profile belongs to where it is neither that family's key nor an era of it
    #: (frameworks.toml ``family_key``): which launcher config it exports to, which published runs are its
    #: kind, and whose era profiles describe its runs from earlier years; "" = its era or its own key
    family_key: str = ""
    #: gradient reduce-scatters per layer and pass under ZeRO-3 / FSDP; 0 = as many as the gathers
    zero3_reduces_per_layer: int = 0
    until_year: int = 0
    pp_split_counts_head: bool = False
    #: how the layers are cut into pipeline chunks: "even" = ceil(L / (pp vpp)) on the heaviest chunk
    #: (Megatron: L divisible, or the remainder spread over the first chunks); "middle" = torchtitan's
    #: generate_split_points: the first and the last chunk take floor(L / (pp vpp)) layers, the middle
    #: chunks one more each until the remainder is used, the last chunk whatever is left
    pp_split: str = "even"
    fp8_param_gather: bool = False
    #: EP overlap limited by the compute it runs under (Megatron-Core); False with ep_overlap = the
    #: framework's documentation says the all-to-all is fully hidden (DeepSeek's DualPipe)
    ep_overlap_bounded: bool = False
    #: the MoE dispatcher sends a token once to each scale-up domain holding any of its experts and forwards it
    #: over the scale-up links (DeepEP's internode kernels, Megatron-Core --moe-enable-deepep; DeepSeek-V3
    #: report sec. 3.2.2): cross-domain bytes shrink by :func:`supercluster.network.twolevel.node_dedup_factor`
    ep_node_dedup: bool = False
    #: how the run's router spreads tokens over the experts (:data:`ROUTERS`): "random" (a balanced router) or
    #: "round-robin" (a benchmark's fixed gate, "+round-robin-gate"): how many ranks DeepEP's dispatch reaches
    moe_router: str = "random"
    #: token-drop routing (Megatron-Core --moe-expert-capacity-factor): each rank's router keeps at most
    #: ceil(capacity_factor x its tokens x top_k / experts) tokens for each expert and drops the rest, so
    #: no expert-parallel rank receives more than capacity_factor times the mean; 0 = dropless (the
    #: default: every token reaches its experts, the busiest rank takes what the router sends it)
    moe_capacity_factor: float = 0.0
    #: with a capacity factor, every expert's input is padded to its capacity (--moe-pad-expert-input-to-capacity)
    moe_pad_to_capacity: bool = False
    #: how the experts' grouped GEMM launches: "per_expert" (a GEMM, and its quantisations, per local
    #: expert: Transformer Engine 2.x GroupedLinear) or "grouped" (one kernel per GEMM); and whether a
    #: dropless dispatcher makes the host wait for the router's counts (frameworks.toml's header;
    #: both priced in perf.host.host_bound)
    moe_expert_launches: str = "grouped"
    #: how many local experts' GEMMs share the SMs at once where each expert is its own GEMM
    #: ("per_expert"): Transformer Engine's multi-stream cuBLAS backend runs them 4 at a time, DeepSpeed's
    #: expert loop 1 (frameworks.toml's header); 0 = all of them, one grid (a grouped kernel)
    moe_expert_streams: int = 0
    moe_dispatch_sync: bool = True
    #: how a TP overlap (:attr:`tp_comm_overlap`) runs (:data:`TP_OVERLAPS`): "userbuffers" = Transformer
    #: Engine's, the forward's and the backward's collectives pipelined with their GEMMs by SM kernels;
    #: "async-tp" = PyTorch's micro-pipeline TP (torchtitan's async TP), the forward's collectives
    #: pipelined by the copy engines, the backward's exposed (frameworks.toml's header)
    tp_overlap: str = "userbuffers"
    #: the router's probabilities weight the experts' activation (frameworks.toml's header), so the
    #: combined expert outputs are not kept for the gate's gradient (perf.memory)
    moe_probs_in_experts: bool = False
    #: the lowest ZeRO stage whose DP traffic :attr:`dp_overlap` hides by default (DeepSpeed's overlap_comm:
    #: stage 3 only, zero/config.py overlap_comm_valid); a run's "+dp-overlap" hides every stage
    dp_overlap_from_zero: int = 0
    #: ZeRO 1 / 2 all-gather the updated parameters in the optimizer step, under no compute (DeepSpeed
    #: stage_1_and_2.py step(): all_gather_dp_groups, "ready for next round forward"); else under the next
    #: forward (Megatron-Core --overlap-param-gather)
    param_gather_in_step: bool = False
    #: ZeRO-2 as FSDP runs it (SHARD_GRAD_OP) unshards before each forward, reshards after each backward
    zero2_regather: bool = False
    dp_bucket_params: float = 0.0  #: per ZeRO 0-2 gradient bucket (DeepSpeed: 5e8); 0 = Megatron-Core's
    #: how context parallelism moves K/V: "p2p" = a ring of point-to-point sends, one per attention
    #: block, each hidden under that block (Transformer Engine's CP in Megatron-Core); "allgather" =
    #: PyTorch's ring attention (torch.distributed.tensor.experimental, the default rotate method in
    #: torchtitan): one all-gather of K/V hidden only under the first block, the K/V gradients
    #: passed around the ring in fp32, partial outputs merged in fp32 by eager ops; "a2a" = all-to-all
    #: (Ulysses) CP, Transformer Engine's cp_comm_type "a2a" (:data:`CP_A2A_SUFFIX`): Q, K and V
    #: exchanged for whole heads over the full sequence before the attention, its output back after it
    cp_rotate: str = "p2p"
    #: the pipeline schedule: "1f1b" (1F1B, or Megatron's interleaved 1F1B with vpp > 1) or "dualpipe"
    #: (DeepSeek-V3 report sec. 3.2.1, deepseek-ai/DualPipe: micro-batches fed from both ends, each rank
    #: holding two stages, forward and backward chunks overlapped pairwise); DualPipe needs an even pp
    #: and an even number of micro-batches, at least 2 pp (the reference implementation's asserts)
    pipeline_schedule: str = "1f1b"
    #: K/V reach the attention kernel repeated to every query head (the model code calls repeat_kv
    #: before SDPA), so context parallelism moves a/tp heads instead of the kv heads
    cp_kv_repeated: bool = False
    #: HBM bytes each ZeRO-3 parameter gather moves per gathered byte besides the collective
    #: (copies the framework and PyTorch make around it)
    zero3_gather_copy_bytes: float = 0.0
    #: ZeRO-3 gathers and reduce-scatters go through PyTorch's list-form collectives, one tensor view per
    #: rank, which copy each rank's slice with its own launch: the host pays one op launch per rank per call
    zero3_list_collectives: bool = False
    #: tensor view ops the framework's Python loop builds per data-parallel rank before each ZeRO-3
    #: gather / reduce-scatter call (DeepSpeed before v0.4: one ``narrow`` per rank in _allgather_param;
    #: ``grad.view(-1).narrow`` per rank in _reduce_scatter_gradient); each costs kernels.toml [host]
    #: view_op_s on the host, exposed like the launches
    zero3_gather_views_per_rank: int = 0
    zero3_reduce_views_per_rank: int = 0
    #: a device-wide synchronise, waiting for every stream, precedes each ZeRO-3 gather (DeepSpeed < v0.4):
    #: neither the gathers nor the gradient reduce-scatters run under compute
    zero3_gather_syncs_device: bool = False
    #: with pipeline parallelism, FSDP keeps each stage's parameters gathered for the whole step and
    #: accumulates unsharded gradients (in the reduce dtype) over the micro-batches, reducing them
    #: once at the last: one gather and one reduce-scatter per step instead of per micro-batch
    fsdp_pp_unsharded: bool = False
    #: ZeRO-3 / FSDP frees each layer's gathered parameters after its forward and gathers them again
    #: for its backward (FSDP2 reshard_after_forward=True, the default); False keeps them gathered from
    #: the forward to the backward: one gather per layer and micro-batch, the stage's weights whole
    zero3_reshard_after_forward: bool = True
    #: where a run does not state its micro-batch size, the framework splits each DP rank's batch into
    #: this many micro-batches per pipeline stage it runs (pp x vpp in all); 0 = micro-batch 1
    pp_microbatches_per_stage: int = 0
    #: optimizer-state bytes per parameter in 16-bit training: an fp32 master copy and Adam's fp32 m and
    #: v (12, the mixed-precision default); 4 where the 16-bit parameters are the master and Adam keeps
    #: its states in their dtype (torch.optim.Adam: zeros_like(param))
    optimizer_bytes_per_param: float = 12.0
    #: the same where the layout trains in bf16 (fp8 / fp4 runs keep ``optimizer_bytes_per_param``); 0 =
    #: ``optimizer_bytes_per_param``. A recipe that turns on a precision-aware optimizer for bf16 only
    bf16_optimizer_bytes_per_param: float = 0.0
    #: a framework that quantises for fp8 with its own kernels: HBM bytes per quantised element over
    #: forward and backward; 0 = Transformer Engine's figure for the recipe (kernels.toml [quantize])
    fp8_quantize_bytes_per_element: float = 0.0
    #: DeepSeek-V3's low-precision activation caching (report sec. 3.3.4), in fp8 / fp4 layouts: the
    #: attention output, which the attention's backward and the output projection's weight gradient both
    #: read, kept once in its 12-bit E5M6 format instead of in 16 bits and quantised; the MoE layers'
    #: SwiGLU inputs (their FC1 outputs) kept in the GEMM precision and the SwiGLU output recomputed in
    #: the backward instead of kept (perf.memory, perf.compute)
    low_precision_activations: bool = False
    #: peak bytes per logit the loss holds (default: fp32 logits and their fp32 gradient)
    loss_bytes_per_logit: float = 8.0
    #: the same where the framework compiles its loss under torch.compile (the "+compile" option);
    #: 0 = compiling leaves the loss as it is
    compiled_loss_bytes_per_logit: float = 0.0

    def optimizer_state_bytes(self, bf16: bool, distributed: bool) -> float:
        """Optimizer-state bytes per parameter of a 16-bit layout: the profile's bf16 figure on a bf16
        layout with a distributed optimizer where it has one (Megatron-Core's precision-aware optimizer
        runs only as the distributed optimizer: OptimizerConfig asserts it), else
        ``optimizer_bytes_per_param``."""
        if bf16 and distributed and self.bf16_optimizer_bytes_per_param > 0:
            return self.bf16_optimizer_bytes_per_param
        return self.optimizer_bytes_per_param

    @property
    def family(self) -> str:
        """The framework this profile describes, whatever its era or options
        (``torchtitan-2024+compile`` -> ``torchtitan``)."""
        return self.family_key or self.era_of or _base_name(self.key)

    @property
    def extra_pp_layers(self) -> int:
        """Pipeline slots the framework fills with the embedding and the loss (0 or 2)."""
        return 2 if self.pp_split_counts_head else 0

    def check_parallelism(self, tp: int, pp: int, cp: int, vpp: int = 1) -> None:
        """Refuse a parallel degree above 1 that the framework does not have, naming the field."""
        for field, degree, has, what in (("tp", tp, self.tensor_parallel, "tensor parallelism"),
                                         ("pp", pp, self.pipeline_parallel, "pipeline parallelism"),
                                         ("cp", cp, self.context_parallel, "context parallelism"),
                                         ("vpp", vpp, self.interleaved_pipeline, "interleaved pipeline schedule")):
            if degree > 1 and not has:
                raise InputError(field, f"framework {self.key} has no {what}; {field} must be 1, got {degree}")

    def check_schedule(self, pp: int, microbatches: int, vpp: int = 1) -> None:
        """Refuse a pipeline the framework's schedule cannot run, naming the field (DualPipe: an even pp,
        and an even number of micro-batches of at least 2 pp; interleaving: :attr:`interleave_microbatches`)."""
        if pp > 1 and vpp > 1 and not bool(self.interleave_ok(np.int64(pp), np.int64(microbatches))):
            rule = (f"a multiple of the {max(1, microbatches // pp)} rounds of {pp}"
                    if self.interleave_microbatches == "rounds" else f"a multiple of pp = {pp}")
            raise InputError("global_batch", f"framework {self.key}'s interleaved schedule (vpp = {vpp}) needs the "
                             f"micro-batches per data-parallel rank to be {rule}; got {microbatches} (global "
                             "batch / (dp x micro-batch x grad-accum)); give vpp 1, or change the global batch, "
                             "dp or the micro-batch")
        if self.pipeline_schedule != "dualpipe" or pp <= 1:
            return
        require(pp % 2 == 0, "pp", f"framework {self.key} runs DualPipe, which needs an even pipeline degree; "
                                   f"got {pp}")
        require(microbatches % 2 == 0 and microbatches >= 2 * pp, "global_batch",
                f"framework {self.key} runs DualPipe, which needs an even number of micro-batches per "
                f"data-parallel rank, at least 2 x pp = {2 * pp}; got {microbatches} (global batch / (dp x "
                "micro-batch))")

    def ep_overlap_ok(self, moe: bool, pp: np.ndarray, vpp: np.ndarray, ep: np.ndarray, zero: np.ndarray,
                      recompute: np.ndarray | int = 0, lowp: np.ndarray | int = 0, mtp: int = 0) -> np.ndarray:
        """Which rows Megatron-Core's combined 1F1B runs where the profile overlaps the MoE all-to-all by
        it (the vectorised :meth:`check_ep_overlap`, for the planner); every row elsewhere."""
        if not (self.ep_overlap and self.ep_overlap_bounded and moe):
            return np.ones(np.shape(pp), dtype=bool)
        delayed_replay = (self.fp8_recipe == "delayed") & (np.asarray(lowp) == 1) & (np.asarray(recompute) == 2)
        return (ep > 1) & ((pp <= 1) | ((vpp > 1) & (zero <= 1))) & ~delayed_replay & (mtp <= 1)

    def check_ep_overlap(self, model: ModelSpec, layout: Layout) -> None:
        """Refuse a layout Megatron-Core's combined 1F1B (``--overlap-moe-expert-parallel-comm``, this
        profile's EP overlap) does not run, naming the field: its hard requirements (Megatron-LM
        docs/user-guide/features/moe_a2a_overlap.md) are expert parallelism (``ep > 1``), under pipeline
        parallelism the interleaved schedule (``vpp > 1``), no more than one MTP layer, and no ``moe``
        among the recomputed modules (the schedule decomposes the MoE layer itself); Megatron-FSDP (ZeRO
        2 / 3 here) runs it only without pipeline parallelism, and its full recompute replays the layers,
        which delayed-scaling fp8 cannot (the replay would update the amax history twice)."""
        if not (self.ep_overlap and self.ep_overlap_bounded and model.is_moe):
            return
        doc = "(Megatron-LM's combined 1F1B, docs/user-guide/features/moe_a2a_overlap.md)"
        pp, vpp, ep, zero = layout.pp, layout.vpp, layout.ep, layout.zero_stage
        require(ep > 1, "ep", f"framework {self.key} overlaps the MoE all-to-all, which needs expert parallelism: "
                              f"ep > 1, got {ep} {doc}")
        require(pp <= 1 or vpp > 1, "vpp", f"framework {self.key}'s EP overlap runs under pipeline parallelism only "
                                           f"with the interleaved schedule: vpp > 1 with pp = {pp} {doc}")
        require(pp <= 1 or zero <= 1, "zero", f"framework {self.key}'s EP overlap runs Megatron-FSDP (ZeRO {zero}) "
                                              f"only without pipeline parallelism: pp 1, or ZeRO 1 {doc}")
        require(model.mtp_layers <= 1, "model", f"framework {self.key}'s EP overlap schedules at most one "
                f"multi-token-prediction layer; {model.name} has {model.mtp_layers} {doc}")
        require("moe" not in layout.recompute_modules, "recompute",
                f"framework {self.key}'s EP overlap decomposes the MoE layer itself: 'moe' cannot be a recomputed "
                f"module {doc}")
        require(not (self.fp8_recipe == "delayed" and layout.precision == "fp8" and layout.recompute == "full"),
                "recompute", f"framework {self.key}'s EP overlap replays a fully recomputed layer, which "
                             f"delayed-scaling fp8 cannot (it would update the amax history twice): use a current "
                             f"scaling recipe (+fp8-current, +fp8-mxfp8, +fp8-blockwise) or selective recompute {doc}")

    def zero_ok(self, zero: np.ndarray, pp: np.ndarray) -> np.ndarray:
        """Which rows' ZeRO stage the framework runs, with their pipeline degree (the vectorised
        :meth:`check_zero`, for the planner)."""
        return np.isin(zero, self.zero_stages) & ((pp <= 1) | (zero <= self.zero_max_with_pp))

    def check_zero(self, zero: int, pp: int) -> None:
        """Refuse a ZeRO stage the framework does not run with pipeline parallelism. (A stage it does not
        have at all, such as ZeRO-1 under an FSDP stack, is left out of the planner's search but still
        priced when asked for: every layout's default is ZeRO-1.)"""
        require(pp <= 1 or zero <= self.zero_max_with_pp, "zero_stage",
                f"framework {self.key} runs ZeRO stage {self.zero_max_with_pp} at most with pipeline parallelism "
                f"(pp = {pp}); got {zero}: use zero {self.zero_max_with_pp} or lower, or pp 1")

    def runnable(self, layout: Layout, model: ModelSpec) -> Layout:
        """``layout`` as this framework runs ``model`` with it, or an error naming the field it cannot run:
        its parallel degrees, the heads all-to-all CP splits, its ZeRO stage, its pipeline schedule's
        micro-batches, and sequence parallelism set where required."""
        self.check_parallelism(layout.tp, layout.pp, layout.cp, layout.vpp)
        require(bool(self.cp_heads_ok(model, np.int64(layout.tp), np.int64(layout.cp))), "cp",
                f"all-to-all CP (framework {self.key}) gives each of the {layout.cp} CP ranks whole heads of its TP "
                f"rank: cp must divide the {model.num_heads // layout.tp} query and {model.num_kv_heads // layout.tp} "
                f"KV heads per TP rank of {model.name} (tp = {layout.tp}; Transformer Engine asserts it)")
        self.check_zero(layout.zero_stage, layout.pp)
        require(layout.dp_replicate == 1 or self.hybrid_shard, "dp_replicate", f"framework {self.key} shards over all "
                "of dp x cp: use 1, or " + ", ".join(k for k, f in framework_catalog().items() if f.hybrid_shard))
        self.check_schedule(layout.pp, layout.schedule_microbatches, layout.vpp)
        self.check_ep_overlap(model, layout)
        sp = self.sequence_parallel_for(model.is_moe, layout.tp, layout.sequence_parallel)
        return replace(layout, sequence_parallel=sp) if layout.sequence_parallel is None and \
            sp != self.sequence_parallel else layout

    def sequence_parallel_for(self, moe: bool, tp: int, sequence_parallel: bool | None) -> bool:
        """Sequence parallelism as the run has it: the layout's, else the framework's default, and on where
        the framework requires it (:attr:`moe_tp_needs_sp`); refuses turning it off there."""
        needed = self.moe_tp_needs_sp and moe and tp > 1
        if sequence_parallel is False and needed:
            raise InputError("sequence_parallel", f"framework {self.key} needs sequence parallelism for an MoE "
                             f"model with tp > 1 (tp = {tp}), as Megatron-LM refuses MoE with tensor parallelism "
                             "without --sequence-parallel; turn it on or use tp 1")
        return bool(self.sequence_parallel or needed) if sequence_parallel is None else sequence_parallel

    def cp_heads_ok(self, model: ModelSpec, tp: np.ndarray, cp: np.ndarray) -> np.ndarray:
        """Which rows all-to-all CP can run: it splits each TP rank's query and KV heads over the CP ranks
        (the vectorised check of :meth:`runnable`, for the planner); any row under the other rotations."""
        if self.cp_rotate != "a2a":
            return np.ones(np.shape(cp), dtype=bool)
        return (cp <= 1) | ((model.num_heads // tp % cp == 0) & (model.num_kv_heads // tp % cp == 0))

    def sequence_parallel_ok(self, moe: bool, tp: np.ndarray, sp: np.ndarray) -> np.ndarray:
        """Which rows keep the sequence parallelism the framework needs (:meth:`sequence_parallel_for`)."""
        return (sp > 0) | (tp <= 1) | (not (self.moe_tp_needs_sp and moe))

    def interleave_ok(self, pp: np.ndarray, microbatches: np.ndarray) -> np.ndarray:
        """Whether interleaving over ``pp`` stages runs ``microbatches`` (:attr:`interleave_microbatches`)."""
        if self.interleave_microbatches == "rounds":
            return microbatches % np.maximum(1, microbatches // pp) == 0
        return microbatches % pp == 0

    def schedule_ok(self, pp: np.ndarray, microbatches: np.ndarray, vpp: np.ndarray | None = None) -> np.ndarray:
        """Which rows the schedule can run (the vectorised :meth:`check_schedule`, for the planner)."""
        ok = np.ones(np.shape(pp), dtype=bool)
        if vpp is not None:
            ok &= (vpp <= 1) | (pp <= 1) | self.interleave_ok(pp, microbatches)
        if self.pipeline_schedule != "dualpipe":
            return ok
        return ok & ((pp <= 1) | ((pp % 2 == 0) & (microbatches % 2 == 0) & (microbatches >= 2 * pp)))

    def default_vpp(self, pp: int) -> int:
        """Interleaved chunks per stage when a user gives none: 4 where the pipeline interleaves."""
        return 4 if pp > 1 and self.interleaved_pipeline else 1

    def overlaps_dp(self, zero: np.ndarray | int) -> np.ndarray | bool:
        """Whether ZeRO stage(s) ``zero`` run their DP traffic under compute (:attr:`dp_overlap_from_zero`)."""
        return self.dp_overlap & (zero >= self.dp_overlap_from_zero)


_FW_KEYS = {"sequence_parallel", "tp_comm_overlap", "dp_overlap", "pp_overlap", "ep_overlap", "attention",
            "grad_bytes", "grad_reduce_bytes", "zero3_gathers_per_layer", "zero3_prefetch",
            "zero3_regather_on_recompute", "default_recompute", "default_zero_stage", "doc"}
_FW_OPTIONAL = {f.name for f in fields(Framework)} - _FW_KEYS - {"key", "moe_capacity_factor",  # (a run's
                                                                 "moe_pad_to_capacity"}  # +capacity- option)


def _inherited(raw: dict[str, dict], key: str) -> dict:
    """A profile's table with what it takes from the profile it names in ``based_on`` (that profile's
    keys, less its doc and its era, overridden by its own); one level, so every profile reads whole
    from at most two tables."""
    t = dict(raw[key])
    base = t.pop("based_on", None)
    if base is None:
        return t
    if base not in raw or "based_on" in raw[base]:
        raise InputError(f"framework {key}.based_on", f"{base!r} is not a profile of its own (one level: "
                                                      f"{', '.join(k for k in raw if 'based_on' not in raw[k])})")
    own = {k: v for k, v in raw[base].items() if k not in ("doc", "era_of", "until_year", "family_key")}
    return {**own, **t}


@cache
def framework_catalog() -> dict[str, Framework]:
    out = {}
    raw = load_package_toml("frameworks.toml")
    for key in raw:
        t = _inherited(raw, key)
        check_keys(f"framework {key}", t, _FW_KEYS, _FW_OPTIONAL)
        if t.get("selective_recompute", "attention") not in ("attention", "op"):
            raise InputError(f"framework {key}.selective_recompute", "must be 'attention' or 'op'")
        if t.get("elementwise", "fused") not in ("fused", "eager"):
            raise InputError(f"framework {key}.elementwise", "must be 'fused' or 'eager'")
        if t.get("cp_rotate", "p2p") not in CP_ROTATES:
            raise InputError(f"framework {key}.cp_rotate", f"must be one of {', '.join(CP_ROTATES)}")
        if t.get("tp_overlap", "userbuffers") not in TP_OVERLAPS:
            raise InputError(f"framework {key}.tp_overlap", f"must be one of {', '.join(TP_OVERLAPS)}")
        if t.get("moe_router", "random") not in ROUTERS:
            raise InputError(f"framework {key}.moe_router", f"must be one of {', '.join(ROUTERS)}")
        if t.get("moe_expert_launches", "grouped") not in ("grouped", "per_expert"):
            raise InputError(f"framework {key}.moe_expert_launches", "must be 'grouped' or 'per_expert'")
        streams = t.get("moe_expert_streams", 0)
        if isinstance(streams, bool) or not isinstance(streams, int) or not 0 <= streams <= 1024:
            raise InputError(f"framework {key}.moe_expert_streams", "must be a whole number in 0 .. 1024")
        q = t.get("fp8_quantize_bytes_per_element", 0.0)
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0.0 <= q <= 100.0:
            raise InputError(f"framework {key}.fp8_quantize_bytes_per_element", "must be a number in 0 .. 100")
        if t.get("fp8_recipe", "delayed") not in FP8_RECIPES:
            raise InputError(f"framework {key}.fp8_recipe", f"must be one of {', '.join(FP8_RECIPES)}")
        if t.get("pipeline_schedule", "1f1b") not in ("1f1b", "dualpipe"):
            raise InputError(f"framework {key}.pipeline_schedule", "must be '1f1b' or 'dualpipe'")
        if t.get("pipeline_schedule") == "dualpipe" and t.get("interleaved_pipeline", True):
            raise InputError(f"framework {key}.interleaved_pipeline", "DualPipe has no interleaving: set false")
        if t.get("interleave_microbatches", "pp_multiple") not in ("pp_multiple", "rounds"):
            raise InputError(f"framework {key}.interleave_microbatches", "must be 'pp_multiple' or 'rounds'")
        if t.get("pp_split", "even") not in ("even", "middle"):
            raise InputError(f"framework {key}.pp_split", "must be 'even' or 'middle'")
        if t.get("pp_split", "even") == "middle" and t.get("pp_split_counts_head", False):
            raise InputError(f"framework {key}.pp_split", "'middle' does not combine with pp_split_counts_head")
        stages = t.get("zero_stages", [0, 1, 2, 3])
        if not (isinstance(stages, list) and stages and all(z in (0, 1, 2, 3) for z in stages)):
            raise InputError(f"framework {key}.zero_stages", "must be a list of ZeRO stages from 0, 1, 2, 3")
        if t.get("zero3_gather_syncs_device", False) and t.get("zero3_prefetch", True):
            raise InputError(f"framework {key}.zero3_prefetch", "gathers after a device synchronise: set false")
        for field in ("zero_max_with_pp", "dp_overlap_from_zero"):
            if t.get(field, 0) not in (0, 1, 2, 3):
                raise InputError(f"framework {key}.{field}", "must be a ZeRO stage: 0, 1, 2 or 3")
        out[key] = Framework(key=key, **{**t, "zero_stages": tuple(stages),
                                         "module_sets": tuple(tuple(x) for x in t.get("module_sets", ()))})
    return out


@lru_cache(maxsize=512)
def _base_name(name: str) -> str:
    """A framework name without its option suffixes (:func:`.options.split_suffixes`)."""
    return split_suffixes(name)[0]


def get_framework(name: str) -> Framework:
    """A framework profile by name or alias; :class:`InputError` lists the known ones.

    A ``+compile`` suffix (e.g. ``torchtitan+compile``) is the profile run under torch.compile:
    Inductor fuses the elementwise ops, so they are priced as fused kernels; the other suffixes
    switch on the options :mod:`.options` names (``+ep-overlap``, ``+embedding-split``, ...).
    """
    cat = framework_catalog()
    base, mods = split_suffixes(name)
    key = ALIASES.get(base, base)
    if key not in cat:
        raise InputError("framework", f"unknown {name!r}; known: {', '.join(sorted(cat))} "
                                      f"(each also as <name>{', <name>'.join(SUFFIXES)}, "
                                      f"<name>{CAPACITY_PREFIX}<factor>)")
    return with_suffixes(cat[key], mods)


def with_suffixes(fw: Framework, mods: list[str]) -> Framework:
    """``fw`` with the options its suffixes name (:data:`SUFFIXES`, ``+capacity-<C>``) switched on,
    each appended to its key; an option the profile cannot take is refused by name."""
    if COMPILE_SUFFIX in mods:
        fw = replace(fw, key=fw.key + COMPILE_SUFFIX, elementwise="fused",
                     loss_bytes_per_logit=fw.compiled_loss_bytes_per_logit or fw.loss_bytes_per_logit)
    require(TP_OVERLAP_SUFFIX not in mods or fw.tp_overlap != "async-tp" or fw.elementwise == "fused", "framework",
            f"{fw.key}'s TP overlap is PyTorch's async TP, an Inductor pass that runs only under torch.compile: "
            f"name {fw.key}{COMPILE_SUFFIX}{TP_OVERLAP_SUFFIX}")
    require(CP_A2A_SUFFIX not in mods or fw.cp_rotate == "p2p", "framework",
            f"{CP_A2A_SUFFIX} is Transformer Engine's all-to-all context parallelism; {fw.key} rings K/V with "
            f"PyTorch's ring attention ({fw.cp_rotate}), which has no all-to-all form")
    require(FLASH_ATTN_SUFFIX not in mods or fw.attention == "unfused", "framework",
            f"{fw.key} already runs fused attention ({fw.attention}); {FLASH_ATTN_SUFFIX} names FlashAttention "
            f"in place of an unfused core attention (Megatron-DeepSpeed's default, --use-flash-attn-v2)")
    for suffix, change in ((EP_OVERLAP_SUFFIX, {"ep_overlap": True, "ep_overlap_bounded": True}),
                           (DEEPEP_SUFFIX, {"ep_node_dedup": True}),
                           (ROUND_ROBIN_SUFFIX, {"moe_router": "round-robin"}), (CP_A2A_SUFFIX, {"cp_rotate": "a2a"}),
                           (CUDA_GRAPHS_SUFFIX, {"cuda_graphs": True}), (FLASH_ATTN_SUFFIX, {"attention": "sdpa"}),
                           (TP_OVERLAP_SUFFIX, {"tp_comm_overlap": True, "sequence_parallel": True}),
                           (NO_TP_OVERLAP_SUFFIX, {"tp_comm_overlap": False}),
                           (DP_OVERLAP_SUFFIX, {"dp_overlap": True, "dp_overlap_from_zero": 0}),
                           (NO_DP_OVERLAP_SUFFIX, {"dp_overlap": False})):
        if suffix in mods:
            fw = replace(fw, key=fw.key + suffix, **change)  # type: ignore[arg-type]
    for suffix, recipe in FP8_RECIPE_SUFFIXES.items():
        if suffix in mods:
            fw = replace(fw, key=fw.key + suffix, fp8_recipe=recipe)
    fw = _with_capacity(fw, mods)
    if EMBED_SPLIT_SUFFIX in mods and not fw.pp_split_counts_head:
        fw = replace(fw, key=fw.key + EMBED_SPLIT_SUFFIX, pp_split_counts_head=True, pp_split="even")
    return fw


def capacity_factor(text: str, field: str) -> float:
    """A token-drop capacity factor as a run states it (a suffix, a runs column), checked against
    :data:`CAPACITY_RANGE`; an InputError under ``field`` otherwise."""
    try:
        factor = float(text)
    except ValueError:
        factor = float("nan")
    lo, hi = CAPACITY_RANGE
    require(lo <= factor <= hi, field, f"capacity factor {text!r} is not a number or lies outside [{lo:g}, "
                                       f"{hi:g}] (e.g. {CAPACITY_PREFIX}1.25; dropless: none)")
    return factor


def _with_capacity(fw: Framework, mods: list[str]) -> Framework:
    """The profile with the token-drop routing its ``+capacity-<C>`` / ``+pad-to-capacity`` suffixes state."""
    said = [m for m in mods if m.startswith(CAPACITY_PREFIX)]
    if said:
        factor = capacity_factor(said[-1].removeprefix(CAPACITY_PREFIX), "framework")
        fw = replace(fw, key=fw.key + f"{CAPACITY_PREFIX}{factor:g}", moe_capacity_factor=factor)
    if PAD_SUFFIX in mods:
        require(fw.moe_capacity_factor > 0, "framework",
                f"{PAD_SUFFIX} pads each expert's input to its capacity and needs a capacity factor "
                f"({CAPACITY_PREFIX}<factor>{PAD_SUFFIX})")
        # (Megatron-Core's flex dispatcher asserts against it: "Flex token dispatcher does not support
        # --moe-pad-expert-input-to-capacity", token_dispatcher.py)
        require(not fw.ep_node_dedup, "framework", f"DeepEP's dispatcher does not pad to capacity: drop "
                                                   f"{PAD_SUFFIX} or {DEEPEP_SUFFIX}")
        fw = replace(fw, key=fw.key + PAD_SUFFIX, moe_pad_to_capacity=True)
    return fw
