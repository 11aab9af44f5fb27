#!/usr/bin/env bash
# The checks a maintainer runs on the GPU machine (H100/H200), in stages that each fit one
# 10-minute device call:   tools/gpu_check.sh STAGE...   (in order; --help lists the stages)
#
# Every call first builds (incremental, all cores) into $BUILD_DIR (default build-gpu), leaves its
# logs in $OUT/logs.tgz (OUT default ./out) and prints a summary table last, also written to
# $OUT/summary.txt. Build dependencies the GPU machine lacks come from .deps/
# (tools/stage_device_deps.sh; carry ".deps" with the call). Profiling is done by hand, e.g.
#   ncu --set full -k regex:KERNEL -c 1 -o prof build-gpu/bench/bench_attention_gpu
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source tools/env.sh

# The one list of stages: a name in the first column is a stage (function stage_<name>), the
# rest its usage text.
stage_table() {
  cat <<'EOF'
build     ctest -L gpu (ES_CTEST_J at a time, default 4), ctest -L cpu (ES_CTEST_CPU=0 skips it)
sanitize  compute-sanitizer memcheck over every tests/test_*_gpu binary (or those named in
          ES_SANITIZE_ONLY), ES_SANITIZE_J at a time (default 1), each stopped after
          ES_SANITIZE_TIMEOUT seconds (default never). The whole memcheck in one call:
          ES_CTEST_CPU=0 ES_SANITIZE_J=8 ES_SANITIZE_TIMEOUT=300 tools/gpu_check.sh build sanitize
bench     every bench/bench_*_gpu kernel benchmark, then their PyTorch anchors
          (tools/torch_anchor.py --sampling, --attention)
engine    edgespec bench on random-weight Qwen3 presets (ES_ENGINE_PRESETS, default
          "qwen3-0.6b qwen3-8b") next to torch.compile's decode (ES_ENGINE_ANCHOR=0 skips it): the
          engine runs listed below (ES_ENGINE_RUNS picks some). ES_BASELINE_TREE=DIR (another
          source tree, e.g. an exported old main) builds that tree's edgespec too and alternates
          baseline / new on every run, ES_ENGINE_ROUNDS rounds (default 2 with a baseline, else 1)
oracle    the PyTorch DFlash-draft oracle (tools/dflash_reference.py make-fixture ->
          $OUT/dflash_tiny.tgz), then the C++ oracle tests against it
smollm2   real models against transformers: a random Qwen3-0.6B's logits (test_real_model_gpu);
          the default model ($ES_SMOLLM2_GGUF, e.g. from tools/device_parts.sh join) generated
          greedily on cuda and cpu, ES_SMOLLM2_NEW_TOKENS tokens (default 64)
quantprep random-weight Qwen3 (ES_QUANT_PRESET, default qwen3-8b) in /dev/shm as a bf16 folder and
          `edgespec quantize --to int4` / `--to fp8` of it, in the background while the stages
          after it run (the call waits for it before its summary); skipped where they exist
quant     on those folders: the read ceiling, bench_linear_quant_gpu (the quantized gemv's GB/s
          beside the dense gemv), and edgespec bench per format: batch-1 decode with the replay
          draft (plain_tok_s, spec_tok_s, verify_over_decode) and a 4k prefill (bf16, fp8)
draft     the same GGUF with and without models/'s DFlash draft on held-out prompts: tau, tok/s
          (tools/draft_eval.py; ES_DRAFT_PROMPTS 10, ES_DRAFT_TOKENS 200, ES_DRAFT_TEMPERATURES 0,1)
EOF
}
stage_names=$(stage_table | awk '/^[a-z]/ {print $1}')

# The engine stage's runs: name | edgespec bench arguments (DRAFT: a random 5-layer DFlash draft
# of the public shape) | fields shown. prefill adds its share of the GEMM peak, batch* their
# share of the weights + KV read roofline (both ceilings measured in the same call). A field
# names every number whose key starts with it.
engine_runs() {
  cat <<'EOF'
replay   | --replay --block-size 16 | plain_tok_s spec_tok_s speedup tau identical_prefix_fraction
draft    | --draft DRAFT | spec_tok_s speedup tau proposal_over_decode identical_prefix_fraction
prefill  | --prompt-len 4096 --gen-len 16 --prefill-chunk 4096 | prefill_ms
chunked  | --prompt-len 4096 --gen-len 16 | prefill_ms
ttft     | --prefix-reuse --prompt-len 4224 --shared-len 4096 | ttft_ms first_token_identical
verify4k | --replay --block-size 16 --prompt-len 4096 --gen-len 64 | verify_over decode_fo verify_fo
batch16  | --batch 16 | plain_tok_s plain_step_ms
batch64  | --batch 64 | plain_tok_s plain_step_ms
EOF
}

# sha256 (12 hex digits) of every file under src/, tests/, bench/, tools/ and CMakeLists.txt in
# name order: names the sources by content (a device's copy of .git can lag its working tree).
source_hash() {
  find src tests bench tools CMakeLists.txt -type f -not -name '*.pyc' -print0 | LC_ALL=C sort -z |
    xargs -0 sha256sum | sha256sum | cut -c1-12
}
case "${1:-}" in
  --source-hash) source_hash; exit 0 ;;
  -h | --help) echo "usage: tools/gpu_check.sh STAGE...  (in this order)"; stage_table
               printf '\nengine runs: name | edgespec bench arguments | fields shown\n'; engine_runs
               exit 0 ;;
  "") echo "usage: tools/gpu_check.sh STAGE... (${stage_names//$'\n'/ | }; --help)" >&2; exit 2 ;;
esac
for s in "$@"; do
  grep -qx -- "$s" <<<"$stage_names" && continue
  echo "gpu_check: unknown stage '$s' (valid: ${stage_names//$'\n'/, })" >&2
  exit 2
done

final_out="${OUT:-$PWD/out}"
out="$final_out/logs"
mkdir -p "$out"
build_dir="${BUILD_DIR:-build-gpu}"
summary=()

# A summary row: what, ok / FAILED (or nothing for a figure), details.
row() { summary+=("$(printf '%-36s %-7s %s' "$1" "$2" "${*:3}")"); }
okfail() { [ "$1" = 0 ] && echo ok || echo FAILED; }
# checked NAME DETAIL CMD...: runs CMD, adds the row NAME ok/FAILED DETAIL, returns CMD's status.
checked() {
  "${@:3}"
  local rc=$?
  row "$1" "$(okfail "$rc")" "$2"
  return "$rc"
}

# Configures and builds source tree $1 into $2 (ninja targets $3..., default all).
build() {
  local src=$1 dir=$2 log prefix=() t0=$SECONDS
  log="$out/build_$(basename "$dir").log"
  [ -d .deps ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.deps")
  if cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${prefix[@]}" >"$log" 2>&1 &&
     ninja -C "$dir" -j "$(nproc)" "${@:3}" >>"$log" 2>&1; then
    row "build $dir" ok "$src, $((SECONDS - t0)) s"
    return 0
  fi
  tail -40 "$log"
  row "build $dir" FAILED "$(basename "$log")"
  return 1
}

stage_build() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 |
    tee "$out/gpu.txt"
  local label jobs rc status=0
  for label in gpu cpu; do
    jobs=${ES_CTEST_J:-4}
    [ "$label" = cpu ] && { [ "${ES_CTEST_CPU:-1}" = 0 ] && continue; jobs=$(nproc); }
    (cd "$build_dir" && ctest -L "$label" --output-on-failure --timeout 300 -j "$jobs") \
      >"$out/ctest_$label.log" 2>&1
    rc=$?
    [ "$rc" = 0 ] || { status=1; grep -E "Failed|\*\*\*|Not Run" "$out/ctest_$label.log"; }
    row "ctest -L $label" "$(okfail "$rc")" "$(grep -Eo '[0-9]+% tests.*' "$out/ctest_$label.log")"
  done
  # A GPU test that skips on a GPU machine means a broken device check: list them.
  grep -h "SKIPPED \]" "$build_dir"/Testing/Temporary/LastTest*.log 2>/dev/null | sort -u | head -5
  return "$status"
}

# One test binary (by name) under memcheck; its exit status and seconds go to memcheck_NAME.rc.
memcheck_one() {
  local name=$1 t0=$SECONDS limit=()
  [ "${ES_SANITIZE_TIMEOUT:-0}" != 0 ] && limit=(timeout "$ES_SANITIZE_TIMEOUT")
  "${limit[@]}" compute-sanitizer --tool memcheck --error-exitcode 99 --leak-check full \
    "$build_dir/tests/$name" --gtest_brief=1 >"$out/memcheck_$name.log" 2>&1
  echo "$? $((SECONDS - t0))" >"$out/memcheck_$name.rc"
}

stage_sanitize() {
  local status=0 names=() name bin rc secs
  for name in ${ES_SANITIZE_ONLY:-}; do  # a name with no binary would be a silent pass
    [ -x "$build_dir/tests/$name" ] && continue
    row "memcheck $name" FAILED "no such GPU test binary (ES_SANITIZE_ONLY)"
    status=1
  done
  for bin in "$build_dir"/tests/test_*_gpu; do
    name=$(basename "$bin")
    [ -z "${ES_SANITIZE_ONLY:-}" ] || [[ " $ES_SANITIZE_ONLY " == *" $name "* ]] && names+=("$name")
  done
  # With ES_SANITIZE_J=8 the whole set takes about 95 s on an H200, the longest binary ~40 s.
  for name in "${names[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "${ES_SANITIZE_J:-1}" ]; do wait -n; done
    memcheck_one "$name" &
  done
  wait
  for name in "${names[@]}"; do
    read -r rc secs <"$out/memcheck_$name.rc"
    [ "$rc" = 0 ] && { row "memcheck $name" ok "$secs s"; continue; }
    status=1
    tail -30 "$out/memcheck_$name.log"
    [ "$rc" = 124 ] && row "memcheck $name" FAILED "stopped at ES_SANITIZE_TIMEOUT"
    [ "$rc" = 124 ] || row "memcheck $name" FAILED "memcheck_$name.log"
  done
  return "$status"
}

stage_bench() {
  local status=0 bin name what
  for bin in "$build_dir"/bench/bench_*_gpu; do
    name=$(basename "$bin")
    [ "$name" = bench_decode_gpu ] && continue  # needs a model; the engine stage times decode
    checked "$name" "$name.txt" "$bin" >"$out/$name.txt" 2>&1 || status=1
    tail -25 "$out/$name.txt"
  done
  for what in sampling attention; do
    checked "torch_anchor.py --$what" "anchor_$what.json" python3 tools/torch_anchor.py "--$what" \
      >"$out/anchor_$what.json" 2>"$out/anchor_$what.err" || status=1
    cat "$out/anchor_$what.json"
  done
  return "$status"
}

# The numbers whose keys start with a word of $1 from JSON files $2...: key=value from one file,
# key min-max over several (the spread of repeated runs).
fields() {
  python3 - "$@" <<'PY'
import json, sys
ds = [json.load(open(p)) for p in sys.argv[2:]]
keys = [k for w in sys.argv[1].split() for k in ds[0] if k.startswith(w)
        and all(isinstance(d.get(k), (int, float)) for d in ds)]
lo, hi = ({k: f(d[k] for d in ds) for k in keys} for f in (min, max))
print(" ".join(f"{k}={lo[k]:.4g}" if len(ds) == 1 else f"{k} {lo[k]:.4g}-{hi[k]:.4g}"
               for k in keys))
PY
}

stage_engine() {
  local status=0 trees=(new) base_dir="$build_dir-baseline" rounds=1 peak ceiling known run
  if [ -n "${ES_BASELINE_TREE:-}" ]; then
    build "$ES_BASELINE_TREE" "$base_dir" edgespec || return 1
    trees=(base new)
    rounds=2
  fi
  rounds=${ES_ENGINE_ROUNDS:-$rounds}
  known=$(engine_runs | awk '{print $1}')
  for run in ${ES_ENGINE_RUNS:-}; do
    grep -qx -- "$run" <<<"$known" && continue
    row "engine run $run" FAILED "not one of: ${known//$'\n'/ }"
    status=1
  done
  local ceilings="$build_dir/bench/bench_linear_gpu"
  peak=$("$ceilings" --gemm-peak 2>&1 | awk '$1 == "square" {print $(NF - 1)}')
  ceiling=$("$ceilings" --ceiling 2>&1 | awk '/^read_ceiling_tbps/ {print $2}')
  row "ceilings" "" "cuBLASLt bf16 GEMM ${peak:-?} TFLOP/s, read stream ${ceiling:-?} TB/s"
  local preset name args keys round tree
  for preset in ${ES_ENGINE_PRESETS:-qwen3-0.6b qwen3-8b}; do
    local dir="/dev/shm/es_$preset" draft="/dev/shm/es_${preset}_draft" save=()
    [ "${ES_ENGINE_ANCHOR:-1}" = 0 ] && save=(--save-only)
    if ! python3 tools/torch_anchor.py --preset "$preset" --save "$dir" "${save[@]}" \
           >"$out/anchor_$preset.json" 2>"$out/anchor_$preset.err" ||
       ! python3 tools/make_random_draft.py "$dir" "$draft" --layers 5 --block-size 16 \
           >"$out/draft_$preset.log" 2>&1; then
      row "engine $preset" FAILED "anchor_$preset.err / draft_$preset.log"
      status=1
      continue
    fi
    [ -z "${save[*]}" ] && row "anchor $preset" "" "$(fields decode_tok "$out/anchor_$preset.json")"
    while IFS='|' read -r -u 3 name args keys; do  # fd 3: a run may read stdin
      name=${name// /}
      [[ " ${ES_ENGINE_RUNS:-$name} " == *" $name "* ]] || continue
      for round in $(seq 1 "$rounds"); do
        for tree in "${trees[@]}"; do
          local bin="$build_dir/edgespec" base="$out/engine_${preset}_${name}_${tree}_$round" extra=
          [ "$tree" = base ] && bin="$base_dir/edgespec"
          # shellcheck disable=SC2086  # the table's arguments, split into words
          "$bin" bench --model "$dir" ${args//DRAFT/$draft} --json >"$base.json" 2>"$base.err" || {
            tail -3 "$base.err"
            rm -f "$base.json"
            row "$preset $name r$round $tree" FAILED "$(basename "$base").err"
            status=1
            continue
          }
          [ "$name" = prefill ] && [ -n "$peak" ] &&
            extra=$(python3 tools/prefill_share.py "$dir" "$base.json" "$peak")
          [[ "$name" == batch* ]] && [ -n "$ceiling" ] && extra=$(python3 tools/decode_roofline.py \
            --model "$dir" --bench "$base.json" --ceiling "$ceiling" | grep -o 'fraction_of_roof.*')
          row "$preset $name r$round $tree" "" "$(fields "$keys" "$base.json")${extra:+ $extra}"
        done
      done
      for tree in "${trees[@]}"; do  # the run-to-run spread of each tree
        local runs=("$out/engine_${preset}_${name}_${tree}_"*.json)
        [ ${#runs[@]} -gt 1 ] &&
          row "$preset $name $tree spread" "" "$(fields "$keys" "${runs[@]}")"
      done
    done 3< <(engine_runs)
    rm -rf "$dir" "$draft"
  done
  return "$status"
}

stage_oracle() {
  local t status=0
  checked "oracle fixture" "oracle.log, dflash_tiny.tgz" python3 tools/dflash_reference.py \
    make-fixture tests/data/models/dflash_tiny >"$out/oracle.log" 2>&1 ||
    { tail -20 "$out/oracle.log"; return 1; }
  tar -czf "$final_out/dflash_tiny.tgz" -C tests/data/models dflash_tiny
  for t in test_dflash_oracle test_dflash_oracle_gpu; do  # they read the fixture at run time
    checked "oracle $t" oracle.log "$build_dir/tests/$t" >>"$out/oracle.log" 2>&1 || status=1
  done
  tail -15 "$out/oracle.log"
  return "$status"
}

# A random-weight Qwen3-0.6B's last-token logits against transformers' f32 ones
# (tools/real_model_reference.py). The default model: $ES_SMOLLM2_GGUF converted to an f32 HF
# folder (exact: every GGUF type dequantises to f32 without rounding); edgespec generates greedily
# on cuda from the GGUF and from the folder (same weights: same tokens), and on the cpu (f32
# activations, where bf16 near-ties cannot explain a divergence), for three chat prompts;
# tools/hf_greedy_check.py replays the same prompt ids through transformers in fp32.
stage_smollm2() {
  local status=0 real=/dev/shm/es_real_qwen3-0.6b
  { python3 tools/torch_anchor.py --preset qwen3-0.6b --save "$real" --save-only &&
    python3 tools/real_model_reference.py "$real" &&
    ES_REAL_MODEL_DIR="$real" "$build_dir/tests/test_real_model_gpu"; } >"$out/real.log" 2>&1 ||
    status=1
  row "real logits qwen3-0.6b" "$(okfail "$status")" "$(grep -o 'cosine [0-9.]*' "$out/real.log")"
  rm -rf "$real"
  local gguf="${ES_SMOLLM2_GGUF:-}" dir=/dev/shm/es_smollm2_f32 n="${ES_SMOLLM2_NEW_TOKENS:-64}"
  [ -f "$gguf" ] || { row "smollm2" FAILED "ES_SMOLLM2_GGUF = '$gguf' is not a file"; return 1; }
  checked "smollm2 convert to f32" smollm2_convert.log "$build_dir/edgespec" convert "$gguf" \
    "$dir" --dtype f32 -q >"$out/smollm2_convert.log" 2>&1 || return 1
  local prompts=("What is the capital of France?" "Write one sentence about the sea."
                 "Explain in two sentences why the sky is blue.")
  local prompt_args=() i run backend line
  for i in 0 1 2; do
    prompt_args+=(--prompt "${prompts[$i]}")
    for run in gguf:cuda folder:cuda gguf:cpu; do
      local model=$gguf f="$out/smollm2_${run/:/_}_$i"
      [ "${run%:*}" = folder ] && model=$dir
      "$build_dir/edgespec" generate --model "$model" --backend "${run#*:}" --json -n "$n" \
        -p "${prompts[$i]}" >"$f.json" 2>"$f.err" || { tail -3 "$f.err"; status=1; }
    done
    checked "smollm2 gguf = folder, prompt $i" "smollm2_{gguf,folder}_cuda_$i.json" python3 -c \
      'import json,sys; a,b=(json.load(open(p))["tokens"] for p in sys.argv[1:]); sys.exit(a!=b)' \
      "$out/smollm2_gguf_cuda_$i.json" "$out/smollm2_folder_cuda_$i.json" 2>/dev/null || status=1
  done
  for backend in cuda cpu; do
    local hf="$out/smollm2_hf_$backend"
    checked "smollm2 $backend vs transformers" "$(basename "$hf").txt" \
      python3 tools/hf_greedy_check.py --model "$dir" "$out/smollm2_gguf_${backend}"_{0,1,2}.json \
      "${prompt_args[@]}" --report "$hf.json" >"$hf.txt" 2>&1 || status=1
    while read -r line; do summary+=("  $line"); done <"$hf.txt"
  done
  rm -rf "$dir"
  return "$status"
}

quant_dir="/dev/shm/es_q_${ES_QUANT_PRESET:-qwen3-8b}"
quantprep_pid=

stage_quantprep() {
  (
    set -e
    [ -f "$quant_dir/bf16/config.json" ] ||
      python3 tools/torch_anchor.py --preset "${ES_QUANT_PRESET:-qwen3-8b}" \
        --save "$quant_dir/bf16" --save-only
    local pids=() pid to
    for to in int4 fp8; do  # at once: each is one thread
      [ -f "$quant_dir/$to/config.json" ] && continue
      "$build_dir/edgespec" quantize --to "$to" "$quant_dir/bf16" "$quant_dir/$to" --force &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
  ) >"$out/quantprep.log" 2>&1 &
  quantprep_pid=$!
}

# Waits for this call's quantprep (if it started one) and adds its row; its exit status.
wait_quantprep() {
  [ -n "$quantprep_pid" ] || return 0
  local rc
  wait "$quantprep_pid"
  rc=$?
  quantprep_pid=
  row "quantprep" "$(okfail "$rc")" "$(tail -1 "$out/quantprep.log")"
  return "$rc"
}

stage_quant() {
  local status=0 f base
  wait_quantprep  # this call's quantprep: its folders first
  for f in bf16 int4 fp8; do
    [ -f "$quant_dir/$f/config.json" ] || { row "quant" FAILED "no $quant_dir/$f (quantprep)"; return 1; }
  done
  row "ceilings" "" "read stream $("$build_dir/bench/bench_linear_gpu" --ceiling 2>&1 |
    awk '/^read_ceiling_tbps/ {print $2}') TB/s"
  checked "bench_linear_quant_gpu" "bench_linear_quant.txt" \
    "$build_dir/bench/bench_linear_quant_gpu" >"$out/bench_linear_quant.txt" 2>&1 || status=1
  grep -E "GB/s|MISMATCH" "$out/bench_linear_quant.txt" | head -60
  for f in bf16 int4 fp8; do
    base="$out/quant_${f}"
    if "$build_dir/edgespec" bench --model "$quant_dir/$f" --replay --block-size 16 --json \
         >"$base.json" 2>"$base.err"; then
      row "bench $f replay" "" "$(fields "plain_tok_s plain_step spec_tok_s verify_over" "$base.json")"
    else
      row "bench $f replay" FAILED "$(tail -1 "$base.err")"
      status=1
    fi
    [ "$f" = int4 ] && continue
    if "$build_dir/edgespec" bench --model "$quant_dir/$f" --prompt-len 4096 --gen-len 16 \
         --prefill-chunk 4096 --json >"${base}_prefill.json" 2>"${base}_prefill.err"; then
      row "bench $f prefill 4k" "" "$(fields prefill_ms "${base}_prefill.json")"
    else
      row "bench $f prefill 4k" FAILED "$(tail -1 "${base}_prefill.err")"
      status=1
    fi
  done
  "$build_dir/edgespec" inspect --model "$quant_dir/int4" --tensors >"$out/inspect_int4.txt" 2>&1
  row "inspect int4" "" "$(grep -iE "total|quantized" "$out/inspect_int4.txt" | tail -2 | tr '\n' ' ')"
  return "$status"
}

stage_draft() {
  local gguf="${ES_SMOLLM2_GGUF:-}" line
  [ -f "$gguf" ] || { row "draft" FAILED "ES_SMOLLM2_GGUF = '$gguf' is not a file"; return 1; }
  checked "draft eval" draft_eval.txt python3 tools/draft_eval.py --edgespec "$build_dir/edgespec" \
    --model "$gguf" --draft models/smollm2-135m-instruct-dflash --limit "${ES_DRAFT_PROMPTS:-10}" \
    -n "${ES_DRAFT_TOKENS:-200}" --temperatures "${ES_DRAFT_TEMPERATURES:-0,1}" --backend cuda \
    --json "$final_out/draft_eval.json" >"$out/draft_eval.txt" 2>&1
  local rc=$?
  [ "$rc" = 0 ] || { tail -5 "$out/draft_eval.txt"; return "$rc"; }
  while read -r line; do summary+=("  $line"); done <"$out/draft_eval.txt"
}

status=0
if build . "$build_dir"; then
  for s in "$@"; do "stage_$s" || status=1; done
else
  status=1
fi
wait_quantprep || status=1
# One archive for all logs (a device call returns few files); the summary beside it.
tar -czf "$final_out/logs.tgz" -C "$final_out" logs && rm -rf "$out"
commit=$(git rev-parse --short HEAD 2>/dev/null || cat .commit 2>/dev/null || echo '?')
{
  echo
  echo "== gpu_check summary ($(date -u +%FT%TZ), commit $commit, sources $(source_hash)) =="
  printf '%s\n' "${summary[@]}"
} | tee "$final_out/summary.txt"
exit $status
