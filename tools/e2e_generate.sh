#!/usr/bin/env bash
# End-to-end check of the CLI on the embedded default model, on the CPU backend: the greedy
# answer to a factual question must contain the fact, and the process must exit cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
model="$(bash tools/fetch_default_model.sh ./build/edgespec)"
answer="$(./build/edgespec generate --model "$model" --backend cpu -n 32 \
          -p "What is the capital of France?")"
echo "e2e_generate: answer: $answer"
case "$answer" in
  *Paris*) echo "e2e_generate: ok" ;;
  *) echo "e2e_generate: FAILED: expected the answer to mention Paris" >&2; exit 1 ;;
esac
