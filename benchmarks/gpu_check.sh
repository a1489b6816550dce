#!/usr/bin/env bash
# The GPU check: on a CUDA machine, calibrate this GPU, then train a real small GPT on 1 GPU (and on
# 2, data- and tensor-parallel, where there are two or more) and print measured against predicted
# step time. About 3-6 minutes on one H100-class GPU; every step has its own time limit, so the
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
# 1. calibrate: GEMMs, memory kernels, attention and (on 2 GPUs) NCCL collectives of this machine
timeout 240 "$PY" -m supercluster calibrate --device cuda --nproc "$NPROC" --out "$OUT/profile.toml" --force \
    --json >"$OUT/calibrate.json"

# 2. train for real and compare: "name|nproc|verify options"
CASES=(
    "1 GPU, h1024 x 4 layers|1|--layers 4 --hidden 1024 --heads 16 --seq-len 1024 --micro-batch 8"
    "1 GPU, h2048 x 4 layers|1|--layers 4 --hidden 2048 --heads 16 --seq-len 1024 --micro-batch 8"
    "1 GPU, h2048 x 8 layers, mb 2|1|--layers 8 --hidden 2048 --heads 16 --seq-len 2048 --micro-batch 2"
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

"$PY" - "$OUT/verify.jsonl" <<'EOF'
import json, sys
rows = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]
print(f"{'case':40s} {'measured s':>11s} {'predicted s':>12s} {'error':>8s}")
for d in rows:
    print(f"{d['case']:40s} {d['measured_step_time_s']:11.4f} {d['predicted_step_time_s']:12.4f} {d['error']:+8.1%}")
for d in rows:
    print(json.dumps(d))
EOF
exit $status
