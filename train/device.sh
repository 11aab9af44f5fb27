#!/usr/bin/env bash
# The DFlash training pipeline's steps on the GPU machine (see docs/training.md), and the staging
# step on the development machine.
#
#   train/device.sh stage            HERE: GGUF parts (.devparts/smollm2.gguf, 16 MiB each) and the
#                                    tokenizer files (train/work/tokenizer) to carry
#   train/device.sh dry-run          tiny random models on the CPU: generate, train, eval (seconds)
#   train/device.sh prepare          join the GGUF parts, dequantize into train/work/smollm2
#   train/device.sh generate [ARGS]  prepare if needed; responses -> train/work/responses.npz, $OUT
#   train/device.sh train [ARGS]     train (ARGS go to train_dflash.py) -> train/work/draft, $OUT/draft
#   train/device.sh all [ARGS]       generate, then train for the rest of a 9.5-minute call
#   train/device.sh gen START COUNT [SECONDS]
#                                    prepare if needed; greedy responses to training prompts
#                                    [START, START + COUNT) of $ES_PROMPTS (default
#                                    train/work/prompts_train_200k.jsonl.gz, carried) in 1,024-row
#                                    batches, stopping after SECONDS (default 500) ->
#                                    train/work/extra_START.npz (uint16 ids) and $OUT
#   train/device.sh eval [ARGS]      held-out τ of train/work/draft -> $OUT/tau.json
#   train/device.sh train-eval [ARGS]
#                                    one call: train (ARGS as for train; give --max-seconds ~420),
#                                    meanwhile build edgespec from this checkout in the background;
#                                    then eval, then tools/draft_eval.py (20 held-out prompts, 200
#                                    tokens, T = 0 and 1, cuda) -> $OUT/draft, tau.json,
#                                    draft_eval.json, train_stdout.txt (8 files)
#
# $OUT defaults to ./out. Everything under train/work stays on the machine while it is warm.
set -euo pipefail
cd "$(dirname "$0")/.."
work=train/work
out="${OUT:-$PWD/out}"
mkdir -p "$work" "$out"
t0=$SECONDS
gguf_name=smollm2.gguf

prepare() {
  if [ -f "$work/smollm2/model.safetensors" ] && [ -f "$work/smollm2/tokenizer.json" ]; then return 0; fi
  [ -f "$work/tokenizer/tokenizer.json" ] || { echo "device.sh: $work/tokenizer is missing (carry it)" >&2; exit 1; }
  local joined
  joined=$(tools/device_parts.sh join "$gguf_name")
  python3 train/gguf_to_hf.py "$joined" "$work/smollm2" --tokenizer-dir "$work/tokenizer"
}

copy_draft() {  # the z-lab folder + train_log.json back through $OUT (<= 16 MiB per file)
  if [ -f "$work/draft/config.json" ]; then rm -rf "$out/draft" && cp -r "$work/draft" "$out/draft"; fi
}

case "${1:-}" in
  stage)
    gguf="${ES_SMOLLM2_GGUF:-$HOME/.cache/edgespec/SmolLM2-135M-Instruct.Q4_1.gguf}"
    folder="${ES_SMOLLM2_FOLDER:-$HOME/.cache/edgespec/smollm2-135m-instruct}"
    [ -f "$gguf" ] || { echo "device.sh stage: no GGUF at $gguf (tools/fetch_default_model.sh)" >&2; exit 1; }
    if [ ! -f ".devparts/$gguf_name/SHA256" ] || [ "$(cut -d' ' -f1 ".devparts/$gguf_name/SHA256")" != "$(sha256sum < "$gguf" | cut -d' ' -f1)" ]; then
      # 16 MiB: the tracked tree (~45 MB with models/) travels with every call too.
      PART_MIB="${PART_MIB:-16}" tools/device_parts.sh split "$gguf" "$gguf_name"
    fi
    mkdir -p "$work/tokenizer"
    for f in tokenizer.json tokenizer_config.json generation_config.json; do cp "$folder/$f" "$work/tokenizer/"; done
    # The numpy dequantizer must reproduce `edgespec convert` bit for bit.
    python3 train/gguf_to_hf.py "$gguf" --verify "$folder"
    tools/device_parts.sh list "$gguf_name"
    echo "$work/tokenizer"
    ;;
  dry-run)
    python3 train/build_prompts.py --check
    python3 train/train_dflash.py --check
    python3 train/generate_responses.py --dry-run --out "$work/dry/responses.npz"
    python3 train/eval_tau.py --dry-run
    ;;
  prepare) prepare ;;
  generate)
    shift
    prepare
    python3 train/generate_responses.py --model "$work/smollm2" --out "$work/responses.npz" "$@"
    cp "$work/responses.npz" "$work/responses.json" "$out/"
    ;;
  train)
    shift
    prepare  # a fresh machine has only the GGUF parts: the HF folder the training reads comes first
    set +e
    python3 train/train_dflash.py --model "$work/smollm2" --data "$work/responses.npz" --out "$work/draft" "$@" \
      2>&1 | tee "$out/train_stdout.txt"
    rc=${PIPESTATUS[0]}
    set -e
    copy_draft
    exit "$rc"
    ;;
  all)
    shift
    prepare
    python3 train/generate_responses.py --model "$work/smollm2" --out "$work/responses.npz"
    cp "$work/responses.npz" "$work/responses.json" "$out/"
    left=$((560 - (SECONDS - t0)))
    [ "$left" -gt 120 ] || { echo "device.sh all: only $left s left after generation; run train next" >&2; exit 0; }
    # No train_stdout.txt here: responses (2) + the draft folder (5) already make 7 of the 8 files.
    set +e
    python3 train/train_dflash.py --model "$work/smollm2" --data "$work/responses.npz" --out "$work/draft" \
      --max-seconds "$((left - 50))" "$@"
    rc=$?
    set -e
    copy_draft
    exit "$rc"
    ;;
  gen)
    start="${2:?gen START COUNT [SECONDS]}" count="${3:?gen START COUNT [SECONDS]}" seconds="${4:-500}"
    prompts="${ES_PROMPTS:-$work/prompts_train_200k.jsonl.gz}"
    [ -f "$prompts" ] || { echo "device.sh gen: no prompt file $prompts (build it here with build_prompts.py --out-train, carry it)" >&2; exit 1; }
    prepare
    python3 train/generate_responses.py --model "$work/smollm2" --train-prompts "$prompts" \
      --skip-train "$start" --take "$count" --no-heldout --sampled-rounds 0 --batch 1024 \
      --max-new-tokens 256 --max-seconds "$((seconds - (SECONDS - t0)))" --out "$work/extra_$start.npz"
    cp "$work/extra_$start.npz" "$work/extra_$start.json" "$out/"
    ;;
  eval)
    shift
    prepare
    python3 train/eval_tau.py --model "$work/smollm2" --draft "$work/draft" --data "$work/responses.npz" \
      --json "$out/tau.json" "$@"
    ;;
  train-eval)
    shift
    build=/dev/shm/es-train-eval-build
    # The runtime build (~40 s on 16 cores) overlaps the training, which is GPU-bound.
    ( cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$work/train_eval_build.log" 2>&1 &&
      ninja -C "$build" -j 8 edgespec >>"$work/train_eval_build.log" 2>&1 ) &
    builder=$!
    set +e
    "$0" train "$@"
    rc=$?
    # tau.json's tau_first_sequences: the first 20 held-out responses answer the 20 prompts
    # draft_eval runs, so τ replayed on the same prompts tells the runtime's τ from the prompt set's.
    "$0" eval
    wait "$builder" || { tail -20 "$work/train_eval_build.log" >&2; echo "device.sh train-eval: edgespec build failed" >&2; exit 1; }
    python3 tools/draft_eval.py --edgespec "$build/edgespec" --model "$(tools/device_parts.sh join "$gguf_name")" \
      --draft "$work/draft" --limit 20 -n 200 --temperatures 0,1 --backend cuda --json "$out/draft_eval.json"
    set -e
    exit "$rc"
    ;;
  *) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
