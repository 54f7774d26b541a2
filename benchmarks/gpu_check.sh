#!/usr/bin/env bash
# GPU checks of the Triton backend on one GPU (about 5 minutes on an H200): GEMM vs cuBLAS,
# fused softmax / layernorm vs torch (and % of HBM bandwidth), attention vs SDPA.
# Writes docs/benchmarks/gpu_check.json. Usage: benchmarks/gpu_check.sh [target-name]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
unset TRITON_INTERPRET
timeout 470 "$PY" benchmarks/gpu_check.py --target "${1:-h200-sxm}" --out docs/benchmarks/gpu_check.json
