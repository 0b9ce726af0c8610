#!/usr/bin/env bash
# The trainer benchmark on a machine with an NVIDIA GPU: run.py's figures (real input vs
# in-memory, float32 vs the mixed precision the toolkit picks: mixed_float16 on compute
# capability 7.0+) on the GPU(s), the same models on the CPU alone, and the GPU/CPU speed-up.
#
#   benchmarks/trainer/gpu.sh                      # the project's TFX venv (+ CUDA wheels)
#   TF_PYTHON=/path/to/python benchmarks/trainer/gpu.sh   # an existing TensorFlow 2.21 + tf-keras
#   MODELS=synthetic64,resnet50 STEPS=50 benchmarks/trainer/gpu.sh
#
# Writes gpu.json, cpu.json and speedup.txt under ${OUT:-work/bench-gpu}.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-work/bench-gpu}
mkdir -p "$OUT"

if ! command -v nvidia-smi >/dev/null; then
  echo "gpu.sh: nvidia-smi not found; this script is for a machine with an NVIDIA GPU and driver" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv

if [[ -n "${TF_PYTHON:-}" ]]; then
  PY=$TF_PYTHON
  # Without TFX there is no pipeline to produce taxi/digits Transform outputs.
  MODELS=${MODELS:-synthetic64,resnet50}
else
  make venv
  PY=.venv/bin/python
  # TensorFlow 2.21's CUDA 12 / cuDNN 9 user-space libraries come as NVIDIA's pip wheels, at
  # the versions requirements/tfx-gpu.lock pins (the CPU lock's versions plus nvidia-* only),
  # installed by the same script as the GPU image (on a root-kind runtime, inside the root).
  if [ "$(cat .runtime/kind)" = root ]; then
    runtime/enter.sh .runtime/debian13 env UV="$PWD/.tools/bin/uv" PYTHON=/usr/bin/python3.13 \
      runtime/install.sh deps "$PWD/.venv" requirements/tfx-gpu.lock
  else
    UV="$PWD/.tools/bin/uv" runtime/install.sh deps "$PWD/.venv" requirements/tfx-gpu.lock
  fi
  MODELS=${MODELS:-taxi,digits,synthetic64,resnet50}
fi

if ! "$PY" -c "import tensorflow as tf, sys; g = tf.config.list_physical_devices('GPU'); print('TensorFlow', tf.__version__, 'sees', len(g), 'GPU(s)'); sys.exit(0 if g else 1)"; then
  echo "gpu.sh: TensorFlow sees no GPU (CUDA libraries missing or mismatched; see the log above)" >&2
  exit 3
fi

STEPS_ARG=()
[[ -n "${STEPS:-}" ]] && STEPS_ARG=(--steps "$STEPS")
echo "== GPU ==";  "$PY" benchmarks/trainer/run.py --models "$MODELS" --device auto "${STEPS_ARG[@]}" --json "$OUT/gpu.json"
echo "== CPU only =="; "$PY" benchmarks/trainer/run.py --models "$MODELS" --device cpu "${STEPS_ARG[@]}" --json "$OUT/cpu.json"

"$PY" - "$OUT" <<'PY' | tee "$OUT/speedup.txt"
import json, sys
out = sys.argv[1]
gpu, cpu = (json.load(open(f"{out}/{n}.json")) for n in ("gpu", "cpu"))
print(f"\nGPU: {gpu['device']}   CPU: {cpu['device']}")
print(f"{'model':<12} {'GPU precision':<15} {'GPU ex/s':>10} {'CPU best ex/s':>14} {'speed-up':>9}")
for model in dict.fromkeys(r["model"] for r in gpu["rows"]):
    g = max((r for r in gpu["rows"] if r["model"] == model), key=lambda r: r["real_examples_per_sec"])
    c = max((r for r in cpu["rows"] if r["model"] == model), key=lambda r: r["real_examples_per_sec"])
    print(f"{model:<12} {g['precision']:<15} {g['real_examples_per_sec']:>10.1f} {c['real_examples_per_sec']:>14.1f} "
          f"{g['real_examples_per_sec'] / c['real_examples_per_sec']:>8.1f}x")
PY
