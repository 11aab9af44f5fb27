#!/usr/bin/env bash
# Configure and build edgespec into ./build (CUDA code too when nvcc is found, else CPU-only).
# Usage: tools/build.sh [extra cmake args...]     env: BUILD_DIR (default build), JOBS
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/env.sh
build_dir="${BUILD_DIR:-build}"
jobs="${JOBS:-$(nproc)}"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$build_dir" -j "$jobs"
