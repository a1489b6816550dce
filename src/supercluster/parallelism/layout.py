"""The parallel layout and batch of a training job, validated in one place.

Rank order (innermost first): TP, CP, EP-within-DP, DP, PP - Megatron-Core's default
``tp-cp-ep-dp-pp``. EP is carved out of DP x CP: it must divide ``dp * cp``; with a smaller expert
tensor parallelism (``expert_tp``, Megatron-Core's MoE parallel folding) the expert layers re-grid
TP x CP x DP as ETP x EP x EDP, so EP must divide ``tp * cp * dp / expert_tp``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ..errors import InputError, require
from ..models.spec import ModelSpec
from . import pplayout

#: the largest degree, batch or sequence a layout may hold (2^31: beyond any machine, and within the
#: 64-bit integer columns the step and the planner price it in)
MAX_COUNT = 2**31

RECOMPUTE = ("none", "selective", "full")
#: Megatron-Core ``--recompute-modules`` (selective granularity) the cost model prices; an empty
#: tuple is the framework's own selective policy (Megatron: core_attn).
RECOMPUTE_MODULES = ("core_attn", "layernorm", "moe_act", "mlp", "moe", "mla_up_proj")
#: Megatron-Core modules it does not price (their saved tensors are not in the activation census).
UNPRICED_MODULES = ("shared_experts",)
PRECISION = ("bf16", "fp16", "fp8", "fp4", "fp32")  # fp32: CPU runs with a calibrated profile


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """Parallel degrees, batch and training options of one job."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    seq_len: int = 2048
    precision: str = "bf16"
    recompute: str = "none"
    zero_stage: int = 1
    sequence_parallel: bool | None = None  # None = the framework's default
    #: with recompute "full": recompute only the first N layers of each pipeline chunk (Megatron
    #: --recompute-method block --recompute-num-layers N); 0 = every layer
    recompute_layers: int = 0
    #: expert tensor parallelism (Megatron --expert-tensor-parallel-size); None = tp
    expert_tp: int | None = None
    #: with recompute "selective": Megatron-Core --recompute-modules (see RECOMPUTE_MODULES);
    #: () = the framework's selective policy
    recompute_modules: tuple[str, ...] = ()
    #: an explicit pipeline layout, Megatron-Core --pipeline-model-parallel-layout notation
    #: (:mod:`supercluster.parallelism.pplayout`); None = the framework's own split
    pp_layout: str | None = None
    #: gradient-accumulation steps, each its own pipeline schedule with its own fill and drain
    #: (torchtitan and NeMo AutoModel run global batch / (dp x local batch) of them, each a
    #: schedule.step over local batch / micro-batch micro-batches); 1 = every micro-batch of the step
    #: in one schedule (Megatron-LM, DeepSpeed's PipelineEngine)
    grad_accum: int = 1
    #: data-parallel replicas of the ZeRO / FSDP shard group (hybrid sharding: PyTorch FSDP2's HSDP,
    #: torchtitan data_parallel_replicate_degree, MaxText / Paxml's DCN data parallelism, Megatron-Core
    #: --num-distributed-optimizer-instances): the dp x cp ranks split into this many groups, each holding a
    #: whole sharded copy of the weights' states, that all-reduce their gradient shards; 1 = one shard
    #: group over all of dp x cp
    dp_replicate: int = 1

    def __post_init__(self) -> None:
        # (each check raises its own message; no message is built for a layout that passes them all)
        for f in ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch", "global_batch", "seq_len", "grad_accum",
                  "dp_replicate"):
            v = getattr(self, f)
            if not (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_COUNT):
                raise InputError(f, f"must be a positive integer up to {MAX_COUNT:,}, got {v!r}")
        if self.precision not in PRECISION:
            raise InputError("precision", f"unknown {self.precision!r}; allowed: {', '.join(PRECISION)}")
        if self.recompute not in RECOMPUTE:
            raise InputError("recompute", f"unknown {self.recompute!r}; allowed: {', '.join(RECOMPUTE)}")
        rcl = self.recompute_layers
        if not (isinstance(rcl, int) and rcl >= 0):
            raise InputError("recompute_layers", f"must be a non-negative integer (0 = every layer), got {rcl!r}")
        if rcl and self.recompute != "full":
            raise InputError("recompute_layers", f"{rcl} layers needs --recompute full, got {self.recompute!r}")
        mods = self.recompute_modules
        if not (isinstance(mods, (tuple, list)) and all(isinstance(x, str) for x in mods)):
            raise InputError("recompute_modules", f"must be a list of module names, got {mods!r}")
        for x in mods:
            if x in UNPRICED_MODULES:
                raise InputError("recompute_modules", f"{x!r} is not priced (its saved tensors are not in the "
                                 f"model); allowed: {', '.join(RECOMPUTE_MODULES)}")
            if x not in RECOMPUTE_MODULES:
                raise InputError("recompute_modules", f"unknown {x!r}; allowed: {', '.join(RECOMPUTE_MODULES)}")
        if mods and self.recompute != "selective":
            raise InputError("recompute_modules",
                             f"{', '.join(mods)} needs --recompute selective, got {self.recompute!r}")
        # one canonical order, no repeats (a frozen dataclass: set through object.__setattr__)
        object.__setattr__(self, "recompute_modules", tuple(x for x in RECOMPUTE_MODULES if x in mods))
        if self.zero_stage not in (0, 1, 2, 3):
            raise InputError("zero", f"must be 0, 1, 2 or 3 (3 = FSDP), got {self.zero_stage!r}")
        per_step = self.dp * self.micro_batch
        if self.global_batch % per_step:
            raise InputError("global_batch", f"{self.global_batch} must be a multiple of dp x micro_batch = "
                             f"{self.dp} x {self.micro_batch} = {per_step}")
        if self.num_microbatches % self.grad_accum:
            raise InputError("grad_accum", f"{self.grad_accum} must divide the {self.num_microbatches} micro-batches "
                             f"per data-parallel rank (global_batch / (dp x micro_batch) = {self.global_batch} / "
                             f"({self.dp} x {self.micro_batch}))")
        self._check_experts()
        self._check_replicas()
        if self.vpp > 1 and self.pp == 1:
            raise InputError("vpp", f"interleaving (vpp={self.vpp}) needs pp > 1")
        if self.pp_layout is not None:
            n = len(pplayout.parse(self.pp_layout))
            require(n == self.pp * self.vpp, "pp_layout",
                    f"has {n} stages; pp x vpp = {self.pp} x {self.vpp} = {self.pp * self.vpp}"
                    + (f" (give --vpp {n // self.pp})" if n % self.pp == 0 else f" ({n} is not a multiple of pp)"))

    def _check_experts(self) -> None:
        etp = self.etp
        if not (isinstance(etp, int) and not isinstance(etp, bool) and etp >= 1 and self.tp % etp == 0):
            raise InputError("expert_tp", f"must divide tp = {self.tp}, got {self.expert_tp!r}")
        if etp == self.tp:
            if (self.dp * self.cp) % self.ep:
                raise InputError("ep", f"{self.ep} must divide dp x cp = {self.dp} x {self.cp} = {self.dp * self.cp}"
                                 + (" (or set expert_tp < tp to fold EP over TP)" if self.tp > 1 else ""))
        elif (grid := self.tp * self.cp * self.dp // etp) % self.ep:
            raise InputError("ep", f"{self.ep} must divide tp x cp x dp / expert_tp = {self.tp} x {self.cp} x "
                             f"{self.dp} / {etp} = {grid}")

    def _check_replicas(self) -> None:
        rep = self.dp_replicate
        if rep == 1:
            return
        require(self.dp % rep == 0, "dp_replicate", f"{rep} replicas must divide dp = {self.dp}")
        require(self.zero_stage >= 1, "dp_replicate", f"{rep} replicas of a shard group need ZeRO 1-3 (zero "
                                                      f"{self.zero_stage} shards nothing: every rank holds a replica)")
        edp = self.tp * self.cp * self.dp // (self.ep * self.etp)
        require(edp % rep == 0, "dp_replicate", f"{rep} replicas must divide the experts' data-parallel group, tp x "
                                                f"cp x dp / (ep x expert_tp) = {self.tp} x {self.cp} x {self.dp} / "
                                                f"({self.ep} x {self.etp}) = {edp}")

    @property
    def shard_group(self) -> int:
        """Ranks one ZeRO / FSDP shard group of the dense weights spans: dp x cp / dp_replicate."""
        return self.dp * self.cp // self.dp_replicate

    @property
    def etp(self) -> int:
        """Expert tensor parallelism in effect (tp unless set)."""
        return self.tp if self.expert_tp is None else self.expert_tp

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def num_microbatches(self) -> int:
        return self.global_batch // (self.dp * self.micro_batch)

    @property
    def schedule_microbatches(self) -> int:
        """Micro-batches in each pipeline schedule (the step runs ``grad_accum`` of them)."""
        return self.num_microbatches // self.grad_accum

    def check_model(self, model: ModelSpec, extra_pp_layers: int = 0) -> None:
        """The rules that depend on the model (:data:`supercluster.parallelism.rules.RULES`, the table
        the planner keeps its candidates by); the first one broken is raised, naming every number.
        ``extra_pp_layers``: pipeline slots a framework fills with the embedding and the loss (2 in
        Megatron-Core's account_for_*_in_pipeline_split)."""
        if err := _model_error(model, self.tp, self.pp, self.vpp, self.cp, self.ep, self.seq_len, extra_pp_layers,
                               self.pp_layout):
            raise InputError(*err)

    def check_gpus(self, num_gpus: int) -> None:
        require(self.num_gpus == num_gpus, "gpus",
                f"tp x pp x dp x cp = {self.tp} x {self.pp} x {self.dp} x {self.cp} = {self.num_gpus}, "
                f"not the {num_gpus} GPUs asked for")

    @classmethod
    def from_string(cls, text: str, **kwargs: object) -> Layout:
        """``Layout.from_string("tp8-pp16-dp128", global_batch=2048)``; also reads what :meth:`label`
        writes: ``mbN``, ``zN`` (ZeRO stage), ``repN`` (shard-group replicas), ``none`` / ``full`` / ``selective`` or
        ``selective(mod,...)`` (recompute and its modules), ``sp`` / ``nosp``."""
        fields: dict[str, object] = dict(kwargs)
        low = text.lower()
        sel = re.search(r"selective\(([^)]*)\)", low)
        if sel:  # module names hold underscores: read them before the parts are split
            fields["recompute"] = "selective"
            fields["recompute_modules"] = tuple(x.strip() for x in sel.group(1).split(",") if x.strip())
            low = low[:sel.start()] + low[sel.end():]
        for part in low.replace("_", "-").split("-"):
            if not part:
                continue
            if part in ("none", "selective", "full"):
                fields["recompute"] = part
                continue
            if part in ("sp", "nosp"):
                fields["sequence_parallel"] = part == "sp"
                continue
            m = re.fullmatch(r"(tp|pp|dp|cp|ep|etp|vpp|mb|ga|z|rep)(\d+)", part)
            if not m:
                raise InputError("layout", f"cannot read {part!r} in {text!r}; use e.g. tp8-pp16-dp128-cp1-ep1-vpp1 "
                                           "(also etp, mb, ga, rep; a plan's label: -mb1-z1-full-sp)")
            name = {"mb": "micro_batch", "etp": "expert_tp", "ga": "grad_accum", "z": "zero_stage",
                    "rep": "dp_replicate"}.get(
                m.group(1), m.group(1))
            fields[name] = int(m.group(2))
        return cls(**fields)  # type: ignore[arg-type]

    @property
    def recompute_label(self) -> str:
        """'none', 'selective', 'selective(layernorm,moe_act)', 'full'."""
        mods = ",".join(self.recompute_modules)
        return f"{self.recompute}({mods})" if mods else self.recompute

    def label(self) -> str:
        """:meth:`short` plus what else the planner varies: micro-batch, ZeRO stage, recompute, SP."""
        sp = "-sp" if self.sequence_parallel else "-nosp" if self.sequence_parallel is False and self.tp > 1 else ""
        return f"{self.short()}-mb{self.micro_batch}-z{self.zero_stage}-{self.recompute_label}{sp}"

    def short(self) -> str:
        s = f"tp{self.tp}-pp{self.pp}-dp{self.dp}"
        if self.dp_replicate > 1:
            s += f"-rep{self.dp_replicate}"
        for name in ("cp", "ep", "vpp"):
            if getattr(self, name) > 1:
                s += f"-{name}{getattr(self, name)}"
        if self.etp != self.tp:
            s += f"-etp{self.etp}"
        if self.grad_accum > 1:
            s += f"-ga{self.grad_accum}"
        return s


@functools.lru_cache(maxsize=4096)
def _model_error(model: ModelSpec, tp: int, pp: int, vpp: int, cp: int, ep: int, seq: int, extra_pp_layers: int,
                 pp_layout: str | None) -> tuple[str, str] | None:
    """The field and message of the first rule of :meth:`Layout.check_model` these degrees break, or None
    (kept: a sweep or a runs file asks again for the same degrees of one model)."""
    from . import rules

    row = dict(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, seq=seq)
    for rule in rules.RULES:
        if rule is rules.PIPELINE_SLOTS and pp_layout is not None:  # the layout says where every layer goes
            try:
                pplayout.check(pplayout.parse(pp_layout), pp=pp, vpp=vpp, num_layers=model.num_layers,
                               mtp_layers=model.mtp_layers, name=model.name)
            except InputError as exc:
                return exc.field, str(exc).removeprefix(f"{exc.field}: ")
        elif err := rules.broken(rule, model, row, extra_pp_layers):
            return err.field, str(err).removeprefix(f"{err.field}: ")
    return None
