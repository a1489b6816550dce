"""Verify: train a small GPT for real on local processes and compare with the cost model's prediction.

Layouts: data parallel (DDP, or FSDP2 with ``--fsdp``), tensor parallel (DTensor: q, k, v and
fc1 column-parallel, proj and fc2 row-parallel, as Megatron splits a block), and both on a 2-D
mesh (FSDP2 over dp x TP) where the world size allows. The block matches the cost model's
(pre-norm attention with causal SDPA and a GELU MLP, no biases); position embeddings are left
out (they do not change the step time measurably). The median step (forward, backward, AdamW)
after warm-up is compared with :func:`~supercluster.perf.step.step_columns` priced with the
calibrated profile: the same code path as every estimate.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

from ..errors import require

#: the largest small GPT verify trains (each field of :class:`VerifyConfig`)
VERIFY_LIMITS = {"layers": 1024, "hidden": 65536, "heads": 1024, "seq_len": 1 << 20, "micro_batch": 4096,
                 "vocab": 1 << 20, "dp": 1024, "tp": 1024, "steps": 10_000}


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyConfig:
    layers: int = 2
    hidden: int = 512
    heads: int = 8
    seq_len: int = 256
    micro_batch: int = 4
    vocab: int = 4096
    dp: int = 1
    tp: int = 1
    fsdp: bool = False
    steps: int = 6
    warmup: int = 2
    precision: str = "fp32"

    def __post_init__(self) -> None:
        # (a check of the machinery on this machine: each bound is far past what one host trains)
        for f in ("layers", "hidden", "heads", "seq_len", "micro_batch", "vocab", "dp", "tp", "steps"):
            v, most = getattr(self, f), VERIFY_LIMITS[f]
            require(isinstance(v, int) and 1 <= v <= most, f, f"must be an integer from 1 to {most:,}, got {v!r}")
        require(self.hidden % self.heads == 0, "hidden", f"{self.hidden} must be divisible by heads {self.heads}")
        require(self.heads % self.tp == 0, "tp", f"{self.tp} must divide the {self.heads} heads")
        require((4 * self.hidden) % self.tp == 0, "tp", f"{self.tp} must divide the MLP width {4 * self.hidden}")
        require(self.precision in ("fp32", "bf16"), "precision", f"fp32 or bf16, got {self.precision!r}")

    @property
    def world(self) -> int:
        return self.dp * self.tp


def model_spec(cfg: VerifyConfig) -> Any:
    from ..models.spec import ModelSpec

    return ModelSpec(key="verify-gpt", name=f"GPT L{cfg.layers} H{cfg.hidden}", num_layers=cfg.layers,
                     d_model=cfg.hidden, ffn_dim=4 * cfg.hidden, num_heads=cfg.heads, num_kv_heads=cfg.heads,
                     head_dim=cfg.hidden // cfg.heads, vocab_size=cfg.vocab, mlp="gelu", tied_embeddings=False,
                     seq_len=cfg.seq_len, source="supercluster verify")


def layout_for(cfg: VerifyConfig) -> Any:
    from ..parallelism.layout import Layout

    zero = 3 if (cfg.fsdp or (cfg.dp > 1 and cfg.tp > 1)) else 0
    return Layout(tp=cfg.tp, dp=cfg.dp, micro_batch=cfg.micro_batch, global_batch=cfg.micro_batch * cfg.dp,
                  seq_len=cfg.seq_len, precision=cfg.precision, recompute="none", zero_stage=zero,
                  sequence_parallel=False)


def predict(cfg: VerifyConfig, profile: Any, host_launch: bool = False) -> Any:
    """The cost model's step for this run, priced with the calibrated profile; ``host_launch``: with the
    profile's measured host cost per kernel launch as well (a GPU profile that measured one), so that
    a GPU run shows which of the two per-kernel figures its steps pay."""
    from ..job import Job, estimate
    from ..parallelism.framework import get_framework

    gpu = profile.gpu_spec()
    if host_launch:
        gpu = dataclasses.replace(gpu, host_launch_s=profile.launch_s)
    net = profile.network()
    # The verify GPT's norms and activation are single PyTorch kernels (nn.LayerNorm, GELU), no RoPE:
    # priced as fused elementwise ops, not torchtitan's op-by-op Llama code.
    fw = dataclasses.replace(get_framework("torchtitan"), elementwise="fused")
    if profile.kind == "cpu":
        # gloo moves and reduces data with the same CPU cores that compute (PyTorch distributed docs:
        # gloo is the CPU backend), so nothing overlaps on a CPU run.
        fw = dataclasses.replace(fw, dp_overlap=False, tp_comm_overlap=False, zero3_prefetch=False)
    layout = layout_for(cfg)
    return estimate(Job(model=model_spec(cfg), gpu=gpu, num_gpus=layout.num_gpus, layout=layout, framework=fw,
                        network=net))


def _build(cfg: VerifyConfig) -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            h = cfg.hidden
            self.ln1, self.ln2 = nn.LayerNorm(h, bias=False), nn.LayerNorm(h, bias=False)
            # Fused q, k, v laid out as tp groups of [q | k | v] heads, so a column split gives each
            # rank whole heads (one all-reduce per block input in the backward, as Megatron).
            self.qkv = nn.Linear(h, 3 * h, bias=False)
            self.proj = nn.Linear(h, h, bias=False)
            self.fc1, self.fc2 = nn.Linear(h, 4 * h, bias=False), nn.Linear(4 * h, h, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            y = self.ln1(x)
            hd = cfg.hidden // cfg.heads
            q, k, v = self.qkv(y).view(b, s, 3, -1, hd).transpose(1, 3).unbind(2)
            a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, -1))
            return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(cfg.vocab, cfg.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg.layers))
            self.ln = nn.LayerNorm(cfg.hidden, bias=False)
            self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.emb(idx)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    return GPT()


def run_training(args: dict[str, Any]) -> dict[str, Any]:
    """Inside an initialised process group: build, parallelise, train, time (rank 0 reports)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    cfg = VerifyConfig(**args["config"])
    require(dist.get_world_size() == cfg.world, "nproc", f"world size {dist.get_world_size()} != dp x tp = "
                                                           f"{cfg.dp} x {cfg.tp}")
    cuda = args.get("device") == "cuda"
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    torch.manual_seed(0)
    model = _build(cfg).to(dev)
    if cfg.precision == "bf16":
        model = model.to(torch.bfloat16)
    mesh = init_device_mesh(dev.type, (cfg.dp, cfg.tp), mesh_dim_names=("dp", "tp"))
    if cfg.tp > 1:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        plan = {"qkv": ColwiseParallel(), "proj": RowwiseParallel(), "fc1": ColwiseParallel(),
                "fc2": RowwiseParallel()}
        for blk in model.blocks:
            parallelize_module(blk, mesh["tp"], plan)
        # Vocabulary-parallel logits and loss (Megatron's, and what the cost model prices: head / tp).
        from torch.distributed.tensor import Replicate, Shard

        parallelize_module(model, mesh["tp"], {
            "emb": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
            "head": ColwiseParallel(input_layouts=Replicate(), output_layouts=Shard(-1), use_local_output=False)})
    if cfg.dp > 1 and (cfg.fsdp or cfg.tp > 1):
        from torch.distributed.fsdp import fully_shard

        for blk in model.blocks:
            fully_shard(blk, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    elif cfg.dp > 1:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    # Blocks hold DTensors under TP while the embedding and head do not: no multi-tensor path then.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=cfg.tp == 1)
    gen = torch.Generator(device="cpu").manual_seed(1 + mesh["dp"].get_local_rank())
    idx = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq_len + 1), generator=gen).to(dev)
    x, y = idx[:, :-1], idx[:, 1:]
    if cfg.tp > 1:
        from torch.distributed.tensor.parallel import loss_parallel
    else:
        from contextlib import nullcontext as loss_parallel
    times = []
    for step in range(cfg.warmup + cfg.steps):
        dist.barrier()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(x)
        with loss_parallel():
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()
        if step >= cfg.warmup:
            times.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.median(times)], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return {"measured_step_time_s": float(t.item()), "steps": times, "loss": float(loss.item())}


def verify(cfg: VerifyConfig, profile: Any, timeout_s: float = 600.0) -> dict[str, Any]:
    """Run the real steps on ``dp x tp`` local processes and compare with the prediction."""
    from dataclasses import asdict

    from .launch import run_workers

    pred = predict(cfg, profile)
    res = run_workers("verify", {"config": asdict(cfg), "device": profile.kind}, cfg.world, timeout_s=timeout_s,
                      threads_per_proc=profile.threads if profile.kind == "cpu" else None)
    measured = res["measured_step_time_s"]
    out = {"measured_step_time_s": measured, "predicted_step_time_s": pred.step_time_s,
           "error": pred.step_time_s / measured - 1.0, "layout": layout_for(cfg).short(),
           "fsdp": cfg.fsdp, "config": asdict(cfg), "ledger": pred.ledger, "steps_s": res["steps"]}
    if profile.kind == "cuda" and profile.launch_s > 0:
        # (a GPU's host runs beside it: the same step with the host's measured launch cost priced too)
        alt = predict(cfg, profile, host_launch=True)
        out.update(predicted_with_launch_step_time_s=alt.step_time_s,
                   error_with_launch=alt.step_time_s / measured - 1.0)
    return out
