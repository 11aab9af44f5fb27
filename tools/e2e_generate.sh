#!/usr/bin/env bash
# End-to-end check of the CLI on the embedded default model, on the CPU backend: the greedy
# answer to a factual question must contain the fact, and the process must exit cleanly. Then the
# same request with the shipped DFlash draft: greedy speculative decoding must give exactly the
# plain tokens (the CPU backend computes in f32, so no bf16 near-tie can excuse a difference), and
# the trained draft must get tokens accepted (τ > 1.2; an untrained or mis-loaded draft gives
# τ ≈ 1).
set -euo pipefail
cd "$(dirname "$0")/.."
model="$(bash tools/fetch_default_model.sh ./build/edgespec)"
prompt="What is the capital of France?"
answer="$(./build/edgespec generate --model "$model" --backend cpu -n 32 -p "$prompt")"
echo "e2e_generate: answer: $answer"
case "$answer" in
  *Paris*) echo "e2e_generate: ok" ;;
  *) echo "e2e_generate: FAILED: expected the answer to mention Paris" >&2; exit 1 ;;
esac

# A longer answer than the one above, so τ is measured over several steps (the draft gives 1.48
# here; an untrained one ≈ 1.0).
draft="$(dirname "$model")/smollm2-135m-instruct-dflash"
prompt="Write one sentence about the sea."
plain_json="$(./build/edgespec generate --model "$model" --backend cpu -n 48 --json -p "$prompt")"
spec_json="$(./build/edgespec generate --model "$model" --backend cpu -n 48 --json --draft "$draft" -p "$prompt")"
python3 - "$plain_json" "$spec_json" <<'PY'
import json, sys
plain, spec = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"e2e_generate: with the draft: tau {spec['tau']:.2f}, {len(spec['tokens'])} tokens, "
      f"{spec['decode_tok_s']:.1f} tok/s (plain {plain['decode_tok_s']:.1f})")
if spec["tokens"] != plain["tokens"]:
    sys.exit(f"e2e_generate: FAILED: speculative tokens differ from plain\n{plain['tokens']}\n{spec['tokens']}")
if not spec["tau"] > 1.2:
    sys.exit(f"e2e_generate: FAILED: tau {spec['tau']:.2f} <= 1.2: the shipped draft is not accepting")
print("e2e_generate: draft ok")
PY
