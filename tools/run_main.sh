#!/usr/bin/env bash
# README command 1: set up, build, and run the main job as it stands today: the paged KV cache
# plan of a Qwen3-8B target with a 5-layer DFlash draft, 8 sequences of 4096 tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
bash tools/build.sh >&2
./build/edgespec inspect --preset qwen3-8b --draft-layers 5 --max-batch 8 --max-seq-len 4096 "$@"
