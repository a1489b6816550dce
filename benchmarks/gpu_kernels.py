"""Kernels per layer: count what ``verify``'s small GPT launches per step, by pass, with PyTorch's profiler.

The cost model prices a layer's host-launch and per-kernel costs from a count of kernels per layer and
pass (``perf/compute.py`` OPS_PER_LAYER for the elementwise ops, plus the layer's GEMMs and attention).
This counts them on the machine at hand: two models that differ only in layer count are profiled for
one step (forward, backward, optimizer, each in its own profiler window after warm-up), and the
difference divided by the layer difference is the per-layer count. On CUDA it counts GPU kernels; on
a CPU it counts the top-level ATen operators dispatched (the host work that launches them).

Prints a table and, last, one JSON line. Run: ``python benchmarks/gpu_kernels.py [--device cuda]``.
"""

from __future__ import annotations

import argparse
import json


def count(cfg: object, dev: object) -> dict[str, int]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from supercluster.calibration.verify import _build

    torch.manual_seed(0)
    model = _build(cfg).to(dev)
    if cfg.precision == "bf16":
        model = model.to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    idx = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq_len + 1), device=dev)
    x, y = idx[:, :-1], idx[:, 1:]
    cuda = dev.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    out: dict[str, int] = {}
    for step in range(3):
        loss = None
        for phase in ("forward", "backward", "optimizer"):
            with profile(activities=acts) as prof:
                if phase == "forward":
                    loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
                elif phase == "backward":
                    loss.backward()
                else:
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                if cuda:
                    torch.cuda.synchronize()
            if step == 2:
                out[phase] = _kernels(prof, cuda)
    return out


def _kernels(prof: object, cuda: bool) -> int:
    import torch

    evs = prof.events()
    if cuda:
        return sum(1 for e in evs if e.device_type == torch.autograd.DeviceType.CUDA)
    return sum(1 for e in evs if e.name.startswith("aten::") and (e.cpu_parent is None or
                                                                   not e.cpu_parent.name.startswith("aten::")))


def main() -> None:
    import dataclasses

    import torch

    from supercluster.calibration.verify import VerifyConfig

    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, nargs=2, default=(2, 6))
    args = ap.parse_args()
    dev = torch.device(args.device)
    prec = "bf16" if dev.type == "cuda" else "fp32"
    base = VerifyConfig(hidden=args.hidden, heads=16, seq_len=512, micro_batch=2, precision=prec)
    lo, hi = (count(dataclasses.replace(base, layers=n), dev) for n in args.layers)
    per_layer = {k: (hi[k] - lo[k]) / (args.layers[1] - args.layers[0]) for k in lo}
    fixed = {k: lo[k] - args.layers[0] * per_layer[k] for k in lo}
    what = "GPU kernels" if dev.type == "cuda" else "top-level ATen operators"
    print(f"{what} per step of verify's GPT (hidden {args.hidden}, {prec}, on {args.device})")
    for k in lo:
        print(f"  {k:10s} per layer {per_layer[k]:7.1f}   outside the layers {fixed[k]:7.1f}")
    print(json.dumps({"device": args.device, "what": what, "hidden": args.hidden, "precision": prec,
                      "per_layer": per_layer, "fixed": fixed, "counts": {str(n): c for n, c in
                                                                         zip(args.layers, (lo, hi), strict=True)}}))


if __name__ == "__main__":
    main()
