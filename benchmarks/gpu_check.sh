#!/usr/bin/env bash
# The GPU check: on a CUDA machine, calibrate this GPU, then train a real small GPT on 1 GPU (and on
# 2, data- and tensor-parallel, where there are two or more) and print measured against predicted
# step time, and count the kernels a layer launches. About 3-6 minutes on one H100-class GPU; every step has its own time limit, so the
# whole check stays under 8 minutes.
#
#     bash benchmarks/gpu_check.sh            # prints a table, then one JSON line per case
#     OUT=/some/folder bash benchmarks/gpu_check.sh   # keeps the profile and the JSON there
#
# Exit status: 0 when every case ran, 3 when there is no CUDA GPU (nothing was checked), 1 otherwise.
set -euo pipefail

PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)" 2>/dev/null; then
    echo "gpu_check: no CUDA GPU visible to torch here; nothing was checked" >&2
    exit 3
fi
NGPU=$("$PY" -c "import torch; print(torch.cuda.device_count())")
NAME=$("$PY" -c "import torch; print(torch.cuda.get_device_name(0))")
echo "gpu_check: $NGPU x $NAME; results in $OUT"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu \
    --format=csv >"$OUT/nvidia-smi.csv" 2>/dev/null || true

NPROC=1
[ "$NGPU" -ge 2 ] && NPROC=2
# 1. calibrate: GEMMs, memory kernels, launch cost, attention and (on 2 GPUs) NCCL collectives of this
#    machine (the quick grid if the full one fails)
if ! timeout 240 "$PY" -m supercluster calibrate --device cuda --nproc "$NPROC" --out "$OUT/profile.toml" --force \
        --json >"$OUT/calibrate.json"; then
    echo "gpu_check: calibrate failed; trying its quick grid" >&2
    timeout 120 "$PY" -m supercluster calibrate --device cuda --quick --out "$OUT/profile.toml" --force \
        --json >"$OUT/calibrate.json"
fi

# 2. train for real and compare: "name|nproc|verify options"
CASES=(
    "1 GPU, h1024 x 4 layers|1|--layers 4 --hidden 1024 --heads 16 --seq-len 1024 --micro-batch 8"
    "1 GPU, h2048 x 4 layers|1|--layers 4 --hidden 2048 --heads 16 --seq-len 1024 --micro-batch 8"
    "1 GPU, h2048 x 8 layers, mb 2|1|--layers 8 --hidden 2048 --heads 16 --seq-len 2048 --micro-batch 2"
    # few tokens per step: the kernels' fixed costs (launch, host) against their work
    "1 GPU, h1024 x 8 layers, mb 1|1|--layers 8 --hidden 1024 --heads 16 --seq-len 1024 --micro-batch 1"
    "1 GPU, h1024 x 16 layers, mb 1|1|--layers 16 --hidden 1024 --heads 16 --seq-len 1024 --micro-batch 1"
    "1 GPU, h2048 x 8 layers, mb 1|1|--layers 8 --hidden 2048 --heads 16 --seq-len 1024 --micro-batch 1"
    "1 GPU, h1024 x 8 layers, s128 mb 1|1|--layers 8 --hidden 1024 --heads 16 --seq-len 128 --micro-batch 1"
    # many tokens, wide: compute-bound
    "1 GPU, h4096 x 4 layers, mb 4|1|--layers 4 --hidden 4096 --heads 32 --seq-len 2048 --micro-batch 4"
)
if [ "$NGPU" -ge 2 ]; then
    CASES+=("2 GPUs DP, h2048 x 4 layers|2|--dp 2 --layers 4 --hidden 2048 --heads 16 --seq-len 1024 --micro-batch 8")
    CASES+=("2 GPUs TP, h2048 x 4 layers|2|--tp 2 --layers 4 --hidden 2048 --heads 16 --seq-len 1024 --micro-batch 8")
fi

status=0
: >"$OUT/verify.jsonl"
for case in "${CASES[@]}"; do
    IFS='|' read -r name nproc opts <<<"$case"
    # shellcheck disable=SC2086  # (the options are words)
    if line=$(timeout 120 "$PY" -m supercluster verify --profile "$OUT/profile.toml" --nproc "$nproc" $opts \
                  --steps 8 --timeout 110 --json); then
        "$PY" -c "import json, sys; d = json.loads(sys.argv[2]); d['case'] = sys.argv[1]; print(json.dumps(d))" \
            "$name" "$line" >>"$OUT/verify.jsonl"
    else
        echo "gpu_check: case '$name' failed" >&2
        status=1
    fi
done

# 3. kernels per layer and pass of the verify GPT (what the cost model's per-kernel costs multiply)
timeout 120 "$PY" benchmarks/gpu_kernels.py --device cuda 2>/dev/null | tail -1 >"$OUT/kernels.json" || status=1

"$PY" - "$OUT/verify.jsonl" <<'EOF'
import json, sys
rows = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
print(f"{'case':40s} {'measured s':>11s} {'predicted s':>12s} {'error':>8s} {'+ host launch':>14s} {'error':>8s}")
for d in rows:
    alt = d.get("predicted_with_launch_step_time_s")
    tail = f" {alt:14.4f} {d['error_with_launch']:+8.1%}" if alt is not None else ""
    print(f"{d['case']:40s} {d['measured_step_time_s']:11.4f} {d['predicted_step_time_s']:12.4f} {d['error']:+8.1%}"
          + tail)
for d in rows:
    print(json.dumps(d))
EOF
exit $status
