#!/usr/bin/env bash
# tools/gpu-check.sh where a GPU is visible (kernels bit for bit against the CPU, bandwidth,
# 2-rank keel-bench --device cuda --check); exits 77 (skipped) where none is, or where the CUDA
# Toolkit is not installed. Here, on machines without a GPU, `make test` still builds and links
# every CUDA part (libkeel_cuda.a, gpu-check, keel-bench) when nvcc is present.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
[ -x "$CUDA_HOME/bin/nvcc" ] || skip "no CUDA Toolkit ($CUDA_HOME/bin/nvcc)"
exec tools/gpu-check.sh
