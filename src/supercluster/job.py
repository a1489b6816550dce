"""The public one-layout API: resolve names, validate, and price through the cost model."""

from __future__ import annotations

from .formats.load import load_model
from .hardware.specs import GpuSpec, SystemSpec, get_gpu, get_system
from .models.spec import ModelSpec
from .network.twolevel import Network, TwoLevelNetwork
from .parallelism.framework import DEFAULT_FRAMEWORK, Framework, get_framework
from .parallelism.layout import Layout
from .perf.columns import DEFAULT_RANK_ORDER
from .perf.step import StepBreakdown, step_breakdown


def default_network(gpu: GpuSpec, system: SystemSpec | None = None, num_gpus: int | None = None,
                    **fabric_options: object) -> Network:
    """The network of ``gpu``'s default system (or the given one).

    With ``num_gpus``: the system's rail-optimized fabric sized for that many GPUs (1:1 unless
    ``fabric_options`` - switch, tiers, oversubscription, planes, sharp - say otherwise); without:
    the two-level scale-up / scale-out model.
    """
    sys_ = system or get_system(gpu.system)
    if num_gpus is None:
        return TwoLevelNetwork.for_system(gpu, sys_)
    from .network.fabric import FabricNetwork, build_fabric

    sharp = bool(fabric_options.pop("sharp", False))
    fab = build_fabric(num_gpus, gpu, sys_, **fabric_options)  # type: ignore[arg-type]
    return FabricNetwork.for_fabric(fab, gpu, sys_, sharp=sharp)


def estimate(model: ModelSpec | str, *, gpu: GpuSpec | str, num_gpus: int, layout: Layout,
             framework: Framework | str = DEFAULT_FRAMEWORK, network: Network | None = None,
             rank_order: str = DEFAULT_RANK_ORDER) -> StepBreakdown:
    """Predict one training step of ``model`` on ``num_gpus`` GPUs with ``layout``.

    >>> b = estimate("llama3-8b", gpu="h100-sxm", num_gpus=8,
    ...              layout=Layout(dp=8, global_batch=64, seq_len=8192))
    >>> 0.2 < b.mfu < 0.8
    True
    """
    m = load_model(model) if isinstance(model, str) else model
    g = get_gpu(gpu) if isinstance(gpu, str) else gpu
    fw = get_framework(framework) if isinstance(framework, str) else framework
    layout.check_gpus(num_gpus)
    layout.check_model(m, extra_pp_layers=fw.extra_pp_layers)
    layout = fw.runnable(layout, m.is_moe)
    g.peak(layout.precision)
    return step_breakdown(m, layout=layout, gpu=g, net=network or default_network(g, num_gpus=num_gpus), fw=fw,
                          rank_order=rank_order)


def placement(model: ModelSpec, layout: Layout, network: Network,
              rank_order: str = DEFAULT_RANK_ORDER) -> list[dict[str, object]]:
    """Where each parallel group of ``layout`` sends its traffic on ``network`` (see
    :meth:`supercluster.network.fabric.FabricNetwork.placement`): groups of one member left out, the experts'
    data-parallel group for MoE only. Empty where the network is not a sized fabric (a device profile's
    measured collectives, the two-level model)."""
    import numpy as np

    from .network.fabric import FabricNetwork
    from .perf.columns import group_shapes

    if not isinstance(network, FabricNetwork):
        return []
    one = {k: np.array([v]) for k, v in dict(tp=layout.tp, cp=layout.cp, dp=layout.dp, pp=layout.pp,
                                             ep=layout.ep, etp=layout.etp).items()}
    shapes = group_shapes(rank_order, one["tp"], one["cp"], one["dp"], one["pp"], one["ep"], one["etp"])
    groups = {k: (int(g[0]), int(s[0])) for k, (g, s) in shapes.items()
              if int(g[0]) > 1 and (k not in ("ep", "edp") or model.is_moe)}
    return network.placement(groups)
