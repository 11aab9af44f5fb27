#!/usr/bin/env bash
# The one script to run on the GPU machine, in stages that each fit one 10-minute device call:
#
#   tools/gpu_check.sh build      configure + build with all cores, ctest -L gpu (4 at a time on the
#                                 one GPU, ES_CTEST_J; ~50 s for 29 tests) and ctest -L cpu
#                                 (ES_CTEST_CPU=0 skips it)
#   tools/gpu_check.sh sanitize   compute-sanitizer memcheck over every GPU test binary, or over
#                                 those named in ES_SANITIZE_ONLY (e.g. "test_paged_attention_gpu
#                                 test_linear_gpu"), so the whole set can be split over calls;
#                                 ES_SANITIZE_J at a time (default 1), each stopped after
#                                 ES_SANITIZE_TIMEOUT seconds (default: never)
#   tools/gpu_check.sh bench      every bench/bench_*_gpu binary, then the PyTorch anchors
#   tools/gpu_check.sh build sanitize bench   (several stages in one call, in order)
#   tools/gpu_check.sh oracle     tools/dflash_reference.py make-fixture -> $OUT/dflash_tiny.tgz
#   tools/gpu_check.sh engine     edgespec bench (plain, replay draft, random DFlash draft) on the
#                                 random-weight presets in ES_ENGINE_PRESETS next to the torch anchor,
#                                 then a 4,096-token prefill (256-row chunks, and one 4,096-row
#                                 forward as a share of the cuBLASLt bf16 GEMM peak measured
#                                 first, tools/prefill_share.py), the prefix-reuse time to first token
#                                 (4,224-token prompt, 4,096 shared) and the replay's verify / decode
#                                 step costs after a 4,096-token prompt
#   tools/gpu_check.sh smollm2    the default model's GGUF ($ES_SMOLLM2_GGUF, e.g. assembled by
#                                 tools/device_parts.sh join) generated on cuda vs transformers
#   tools/gpu_check.sh draft      the same GGUF with and without models/'s DFlash draft:
#                                 tau and tok/s on held-out prompts (tools/draft_eval.py;
#                                 ES_DRAFT_PROMPTS 10, ES_DRAFT_TOKENS 200, ES_DRAFT_TEMPERATURES 0,1;
#                                 all 200 held-out prompts at 256 tokens, T = 0: ~2 min)
#   tools/gpu_check.sh pdl        programmatic dependent launch off vs on (ES_PDL=0 / unset):
#                                 ctest -L gpu both ways, then edgespec bench (plain + replay
#                                 draft) on the random presets in ES_ENGINE_PRESETS, both ways
#   tools/gpu_check.sh gemvrule   the gemv grid rules (ES_GEMV_RULE=onetile / wide / shortk, the default),
#                                 as pdl: ctest -L gpu and edgespec bench both ways
#   tools/gpu_check.sh fusiontests  the GPU tests of the gemv's SwiGLU epilogue with each of its
#                                 switches off (ES_GEMV_SWIGLU=0, ES_GATE_UP_INTERLEAVE=0)
#   tools/gpu_check.sh fusions    edgespec bench with each of those settings on
#                                 ES_ENGINE_PRESETS, twice, next to the torch anchor
#   tools/gpu_check.sh earlyreads edgespec bench with and without the kernels' reads before their
#                                 PDL wait (ES_PDL_EARLY_READS=0), as fusions
#   tools/gpu_check.sh normfusion edgespec bench with the decode layers' RMSNorms fused into the
#                                 gemvs (the default) and without (ES_GEMV_NORM=0), as fusions
#   tools/gpu_check.sh combinefirst  edgespec bench with the split-KV combine letting the o
#                                 projection in before its wait on decode rows (the default) and
#                                 not (ES_ATTN_COMBINE_TRIGGER_FIRST=0), as fusions
#   tools/gpu_check.sh shortk     the gemv rule ES_GEMV_RULE=shortk (the default since session 18:
#                                 two tiles for short K, Qwen3-0.6B's qkv and gate_up) against
#                                 ES_GEMV_RULE=wide: edgespec bench on ES_ENGINE_PRESETS (default
#                                 qwen3-0.6b) alternated twice (no torch anchor with
#                                 ES_SKIP_ANCHOR=1), then the linear, norm-gemv, model and engine
#                                 GPU tests under shortk
#   tools/gpu_check.sh batchdecode  plain decode at batch ES_DECODE_BATCHES (default "16 64") on
#                                 ES_ENGINE_PRESETS (default qwen3-8b): tok/s and the share of the
#                                 weights + KV roofline at the read ceiling measured first
#                                 (bench_linear_gpu --ceiling, tools/decode_roofline.py), under
#                                 each combination in ES_BATCHDECODE_COMBOS (as verify4k's): e.g.
#                                 the combine's trigger at batch 16, after its stores (default),
#                                 before its wait (ES_ATTN_COMBINE_TRIGGER_LAST=0) or after it
#                                 (ES_ATTN_COMBINE_TRIGGER_LAST=0,ES_ATTN_COMBINE_TRIGGER_FIRST=0)
#   tools/gpu_check.sh verify4k   the engine's 4k verify / decode ratio under each combination in
#                                 ES_VERIFY4K_COMBOS (e.g. "default ES_PDL_EARLY_READS=0")
#   tools/gpu_check.sh profile    ncu counters per kernel (clocks untouched) of bench_sampling_gpu's
#                                 B 16 verify, of random Qwen3-0.6B decode steps and (with
#                                 $ES_SMOLLM2_GGUF) of the default model's speculative steps with
#                                 models/'s draft, summed by kernel name (tools/ncu_summary.py); ~4 min
#   tools/gpu_check.sh cdfsplit   A/B of the split full-row CDF (ES_CDF_SPLIT=0 / 1), see sampling_ab below
#   tools/gpu_check.sh fullrowsplit  A/B of the cluster-split full-row decision (ES_FULLROW_SPLIT=0 / 1):
#                                 both run the sampling GPU tests under timeouts and bench_sampling_gpu
#                                 both ways, torch_anchor.py --sampling, and T = 1 generations of
#                                 $ES_SMOLLM2_GGUF (plain and with models/'s draft; top-p 0.9 for
#                                 fullrowsplit) that must give the same tokens both ways (~3 min)
#   tools/gpu_check.sh chunkasync A/B of the chunk stage's cp.async ring for f32 rows (ES_CHUNK_ASYNC=0:
#                                 loads into registers), as sampling_ab below
#   tools/gpu_check.sh chunkfinalize  A/B of the chunk CTA finalizing the rows it walked whole
#                                 (ES_CHUNK_FINALIZE=0: final_fast_kernel does), as sampling_ab below
#   tools/gpu_check.sh prefillab  A/B of the attention row tiles (ES_ATTN_ROWTILES=1 / default 2: the
#                                 prefill variant, and the batch-1 verify variant of two tiles per
#                                 CTA): test_paged_attention_gpu both ways (timeout 300),
#                                 bench_attention_gpu both ways (its prefill and B=1 16-row verify
#                                 rows), and edgespec bench's 4,096-token prefill of a random
#                                 Qwen3-8B both ways, in one 4,096-row forward and in 256-row
#                                 ones (~5 min); the verify's whole-model effect is the engine
#                                 stage's verify4k row
#   tools/gpu_check.sh prefillwgmma  the same A/B for the wgmma prefill kernel against the
#                                 mma.sync variant (ES_ATTN_PREFILL_WGMMA=0)
#   tools/gpu_check.sh prefillfew the same A/B for ES_ATTN_PREFILL_WGMMA_FEW (default on: the
#                                 wgmma kernel also for prefill calls of fewer than 132 CTAs)
#   tools/gpu_check.sh kernelprofile  one launch of one kernel under ncu's full set with source
#                                 counters (default: the wgmma prefill attention in
#                                 bench_attention_gpu, the 4k prefill; ES_PROFILE_KERNEL /
#                                 ES_PROFILE_CMD choose another), summarised by
#                                 tools/ncu_sass_summary.py: instruction mix, stalls, hot lines
#
# Every stage builds first (incremental), writes full logs under $OUT (or ./out), and prints a
# short summary table last. Dependencies missing on the GPU machine come from .deps/
# (tools/stage_device_deps.sh; carry ".deps" with the call).
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/env.sh
final_out="${OUT:-$PWD/out}"
out="$final_out/logs"
mkdir -p "$out"
build_dir="${BUILD_DIR:-build-gpu}"
summary=()

# sha256 (12 hex digits) of every file under src/, tests/, bench/, tools/ and CMakeLists.txt, in
# name order: the same on both machines for the same checkout.
source_hash() {
  find src tests bench tools CMakeLists.txt -type f -not -name '*.pyc' -print0 | LC_ALL=C sort -z |
    xargs -0 sha256sum | sha256sum | cut -c1-12
}
if [ "${1:-}" = --source-hash ]; then
  source_hash
  exit 0
fi

build() {
  local prefix=()
  [ -d .deps ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.deps")
  local t0=$SECONDS
  if cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${prefix[@]}" >"$out/configure.log" 2>&1 &&
     ninja -C "$build_dir" -j "$(nproc)" >"$out/build.log" 2>&1; then
    summary+=("build                 ok       $((SECONDS - t0)) s")
    return 0
  fi
  tail -40 "$out/build.log" "$out/configure.log"
  summary+=("build                 FAILED   see build.log")
  return 1
}

stage_build() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv >"$out/gpu.txt" 2>&1
  cat "$out/gpu.txt"
  (cd "$build_dir" && ctest -L gpu --output-on-failure --timeout 300 -j "${ES_CTEST_J:-4}") >"$out/ctest_gpu.log" 2>&1
  local rc=$?
  grep -E "tests passed|tests failed|Failed|\*\*\*|Not Run" "$out/ctest_gpu.log" | tail -20
  summary+=("ctest -L gpu          $([ $rc -eq 0 ] && echo ok || echo FAILED)       $(grep -Eo '[0-9]+% tests passed.*' "$out/ctest_gpu.log")")
  # ES_CTEST_CPU=0 skips the CPU suite (CI runs it) when a call needs its minutes for other stages.
  if [ "${ES_CTEST_CPU:-1}" != 0 ]; then
    (cd "$build_dir" && ctest -L cpu --timeout 300 -j 8) >"$out/ctest_cpu.log" 2>&1
    rc=$?
    summary+=("ctest -L cpu          $([ $rc -eq 0 ] && echo ok || echo FAILED)       $(grep -Eo '[0-9]+% tests passed.*' "$out/ctest_cpu.log")")
  fi
  # Skipped GPU tests on a GPU machine mean a broken device check: list them.
  grep -h "SKIPPED \]" "$build_dir"/Testing/Temporary/LastTest*.log 2>/dev/null | sort -u | head -5
}

# One test binary (by name) under memcheck; its exit status and seconds go to memcheck_$name.rc
# for the summary.
memcheck_one() {
  local name=$1 t0=$SECONDS rc
  local limit=()
  [ "${ES_SANITIZE_TIMEOUT:-0}" != 0 ] && limit=(timeout "$ES_SANITIZE_TIMEOUT")
  "${limit[@]}" compute-sanitizer --tool memcheck --error-exitcode 99 --leak-check full \
      "$build_dir/tests/$name" --gtest_brief=1 >"$out/memcheck_$name.log" 2>&1
  rc=$?
  echo "$rc $((SECONDS - t0))" >"$out/memcheck_$name.rc"
}

stage_sanitize() {
  local status=0 want
  for want in ${ES_SANITIZE_ONLY:-}; do  # a name with no binary would be a silent pass
    if [ ! -x "$build_dir/tests/$want" ]; then
      summary+=("memcheck $(printf '%-28s' "$want") FAILED   no such GPU test binary (ES_SANITIZE_ONLY)")
      status=1
    fi
  done
  local names=() bin name
  for bin in "$build_dir"/tests/test_*_gpu; do
    name=$(basename "$bin")
    if [ -n "${ES_SANITIZE_ONLY:-}" ] && [[ " $ES_SANITIZE_ONLY " != *" $name "* ]]; then
      continue
    fi
    names+=("$name")
  done
  # ES_SANITIZE_J binaries at a time on the one GPU (default 1; with 8, ctest -L gpu and the
  # memcheck of all 29 binaries took ~95 s together in session 26, the longest binary 26-38 s).
  # ES_SANITIZE_TIMEOUT (seconds, default none) stops a binary that would run the call out before
  # the logs are packed.
  for name in "${names[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "${ES_SANITIZE_J:-1}" ]; do wait -n; done
    memcheck_one "$name" &
  done
  wait
  local rc secs
  for name in "${names[@]}"; do
    read -r rc secs <"$out/memcheck_$name.rc"
    if [ "$rc" = 0 ]; then
      summary+=("memcheck $(printf '%-28s' "$name") ok       $secs s")
    else
      status=1
      tail -30 "$out/memcheck_$name.log"
      local why="memcheck_$name.log"
      [ "$rc" = 124 ] && why="stopped at ES_SANITIZE_TIMEOUT=$ES_SANITIZE_TIMEOUT s"
      summary+=("memcheck $(printf '%-28s' "$name") FAILED   $why")
    fi
  done
  return $status
}

stage_bench() {
  for bin in "$build_dir"/bench/bench_*_gpu; do
    [ -x "$bin" ] || continue
    [ "$(basename "$bin")" = bench_decode_gpu ] && continue  # needs a model: see below
    local name
    name=$(basename "$bin")
    if "$bin" >"$out/$name.txt" 2>&1; then
      summary+=("$(printf '%-30s' "$name") ok       $name.txt")
    else
      summary+=("$(printf '%-30s' "$name") FAILED   $name.txt")
    fi
    tail -25 "$out/$name.txt"
  done
  # Decode tokens/s next to the PyTorch anchor on the same random-weight model, for each preset
  # in ES_DECODE_PRESETS (default qwen3-0.6b).
  for preset in ${ES_DECODE_PRESETS-qwen3-0.6b}; do  # set it empty to skip (edgespec bench in stage engine supersedes it)
    local dir="/dev/shm/es_$preset"
    if python3 tools/torch_anchor.py --preset "$preset" --save "$dir" >"$out/anchor_$preset.json" 2>"$out/anchor_$preset.err" &&
       "$build_dir/bench/bench_decode_gpu" "$dir" >"$out/decode_$preset.json" 2>&1; then
      summary+=("decode $(printf '%-23s' "$preset") ok       $(grep -o '"decode_tok_s": [0-9.]*' "$out/decode_$preset.json") vs anchor $(grep -o '"decode_tok_s": [0-9.]*' "$out/anchor_$preset.json")")
    else
      summary+=("decode $(printf '%-23s' "$preset") FAILED   anchor_$preset.err / decode_$preset.json")
    fi
    cat "$out/anchor_$preset.json" "$out/decode_$preset.json"
    # The same real-shape model against transformers' f32 logits.
    if python3 tools/real_model_reference.py "$dir" >"$out/real_$preset.log" 2>&1 &&
       ES_REAL_MODEL_DIR="$dir" "$build_dir/tests/test_real_model_gpu" >>"$out/real_$preset.log" 2>&1; then
      summary+=("real-model logits $(printf '%-12s' "$preset") ok       $(grep -o 'cosine [0-9.]*' "$out/real_$preset.log")")
    else
      summary+=("real-model logits $(printf '%-12s' "$preset") FAILED   real_$preset.log")
    fi
    tail -3 "$out/real_$preset.log"
    rm -rf "$dir"
  done
  if python3 tools/torch_anchor.py --sampling >"$out/anchor_sampling.json" 2>"$out/anchor_sampling.err"; then
    summary+=("torch anchor --sampling        ok       anchor_sampling.json")
    cat "$out/anchor_sampling.json"
  else
    summary+=("torch anchor --sampling        FAILED   anchor_sampling.err")
  fi
}

# The default model end to end on the GPU against transformers: the GGUF named by
# $ES_SMOLLM2_GGUF is converted to an f32 HF folder (exact: every GGUF type dequantises to f32
# without rounding), edgespec generates greedily on cuda from the GGUF itself (and, as a check
# of the direct load, from the folder) for three chat prompts, and tools/hf_greedy_check.py
# replays the same prompt ids through transformers in fp32 (ES_SMOLLM2_NEW_TOKENS, default 64).
stage_smollm2() {
  local gguf="${ES_SMOLLM2_GGUF:-}" dir=/dev/shm/es_smollm2_f32 n="${ES_SMOLLM2_NEW_TOKENS:-64}"
  if [ ! -f "$gguf" ]; then
    summary+=("smollm2               FAILED   ES_SMOLLM2_GGUF = '$gguf' is not a file")
    return 1
  fi
  if ! "$build_dir/edgespec" convert "$gguf" "$dir" --dtype f32 -q >"$out/smollm2_convert.log" 2>&1; then
    tail -5 "$out/smollm2_convert.log"
    summary+=("smollm2 convert       FAILED   smollm2_convert.log")
    return 1
  fi
  local prompts=("What is the capital of France?" "Write one sentence about the sea."
                 "Explain in two sentences why the sky is blue.")
  local files=() prompt_args=() status=0 i
  for i in 0 1 2; do
    if ! "$build_dir/edgespec" generate --model "$gguf" --backend cuda --json -n "$n" -p "${prompts[$i]}"            >"$out/smollm2_gguf_$i.json" 2>"$out/smollm2_gguf_$i.err" ||
       ! "$build_dir/edgespec" generate --model "$dir" --backend cuda --json -n "$n" -p "${prompts[$i]}"            >"$out/smollm2_folder_$i.json" 2>"$out/smollm2_folder_$i.err"; then
      tail -3 "$out/smollm2_gguf_$i.err" "$out/smollm2_folder_$i.err"
      summary+=("smollm2 generate $i     FAILED   smollm2_{gguf,folder}_$i.err")
      status=1
      continue
    fi
    # The GGUF and its f32 folder upload the same bf16 weights: the tokens must be identical.
    if python3 -c 'import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); sys.exit(a["tokens"]!=b["tokens"])'          "$out/smollm2_gguf_$i.json" "$out/smollm2_folder_$i.json"; then
      summary+=("smollm2 gguf=folder $i  ok       same tokens from the GGUF and the converted folder")
    else
      summary+=("smollm2 gguf=folder $i  FAILED   smollm2_gguf_$i.json vs smollm2_folder_$i.json")
      status=1
    fi
    files+=("$out/smollm2_gguf_$i.json")
    prompt_args+=(--prompt "${prompts[$i]}")
  done
  if [ ${#files[@]} -gt 0 ]; then
    python3 tools/hf_greedy_check.py --model "$dir" "${files[@]}" "${prompt_args[@]}"       --report "$out/smollm2_hf_check.json" >"$out/smollm2_hf_check.txt" 2>"$out/smollm2_hf_check.err"
    local rc=$?
    cat "$out/smollm2_hf_check.txt"
    [ $rc -eq 0 ] || { tail -5 "$out/smollm2_hf_check.err"; status=1; }
    summary+=("smollm2 vs transformers $([ $rc -eq 0 ] && echo ok || echo FAILED)   smollm2_hf_check.txt")
    while read -r line; do summary+=("  $line"); done < "$out/smollm2_hf_check.txt"
    # The same prompts on the CPU backend (f32 activations, as transformers' fp32 run): the
    # exact-arithmetic comparison, where bf16 near-ties cannot explain a divergence.
    local cpu_files=()
    for i in 0 1 2; do
      "$build_dir/edgespec" generate --model "$gguf" --backend cpu --json -n "$n" -p "${prompts[$i]}" \
        >"$out/smollm2_cpu_$i.json" 2>"$out/smollm2_cpu_$i.err" && cpu_files+=("$out/smollm2_cpu_$i.json")
    done
    python3 tools/hf_greedy_check.py --model "$dir" "${cpu_files[@]}" "${prompt_args[@]}" \
      --report "$out/smollm2_hf_check_cpu.json" >"$out/smollm2_hf_check_cpu.txt" 2>"$out/smollm2_hf_check_cpu.err"
    rc=$?
    summary+=("smollm2 cpu (f32) vs transformers $([ $rc -eq 0 ] && echo ok || echo FAILED)   smollm2_hf_check_cpu.txt")
    while read -r line; do summary+=("  $line"); done < "$out/smollm2_hf_check_cpu.txt"
  fi
  rm -rf "$dir"
  return $status
}

# The default model with and without its shipped DFlash draft on held-out prompts (docs/perf.md,
# issue 9): tau and tok/s at T = 0 and 1 through `edgespec generate --warmup`.
stage_draft() {
  local gguf="${ES_SMOLLM2_GGUF:-}"
  if [ ! -f "$gguf" ]; then
    summary+=("draft                 FAILED   ES_SMOLLM2_GGUF = '$gguf' is not a file")
    return 1
  fi
  if python3 tools/draft_eval.py --edgespec "$build_dir/edgespec" --model "$gguf" \
       --draft models/smollm2-135m-instruct-dflash --limit "${ES_DRAFT_PROMPTS:-10}" -n "${ES_DRAFT_TOKENS:-200}" \
       --temperatures "${ES_DRAFT_TEMPERATURES:-0,1}" --backend cuda --json "$final_out/draft_eval.json" \
       >"$out/draft_eval.txt" 2>&1; then
    while read -r line; do summary+=("draft  $line"); done < "$out/draft_eval.txt"
    return 0
  fi
  tail -5 "$out/draft_eval.txt"
  summary+=("draft                 FAILED   draft_eval.txt")
  return 1
}

# The DFlash draft oracle's fixture (PyTorch on this machine), returned as one archive.
stage_oracle() {
  local dir=tests/data/models/dflash_tiny
  if python3 tools/dflash_reference.py make-fixture "$dir" >"$out/oracle.log" 2>&1; then
    tar -czf "$final_out/dflash_tiny.tgz" -C tests/data/models dflash_tiny
    summary+=("oracle fixture        ok       dflash_tiny.tgz")
    # The C++ oracle tests, when this tree has them (built with the fixture now in place).
    for t in test_dflash_oracle test_dflash_oracle_gpu; do
      [ -f "tests/model/$t.cpp" ] || continue
      ninja -C "$build_dir" "tests/$t" >>"$out/oracle.log" 2>&1 && "$build_dir/tests/$t" >>"$out/oracle.log" 2>&1
      summary+=("oracle $(printf '%-22s' "$t") $([ $? -eq 0 ] && echo ok || echo FAILED)       oracle.log")
    done
    tail -15 "$out/oracle.log"
  else
    tail -20 "$out/oracle.log"
    summary+=("oracle fixture        FAILED   oracle.log")
    return 1
  fi
}

# Issue 8's verify / decode ratio: the replay draft's isolated decode and 16-row verify forward
# costs after a 4,096-token prompt of the model in $1, as one summary row labelled $3 ($2: output
# path without extension; $4: --gen-len; the rest: VAR=value settings for the run).
verify4k_row() {
  local dir=$1 base=$2 label=$3 gen=$4
  shift 4
  if env "$@" "$build_dir/edgespec" bench --model "$dir" --replay --block-size 16 --prompt-len 4096 \
       --gen-len "$gen" --json >"$base.json" 2>"$base.err"; then
    summary+=("verify4k $label $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(f"{k}={d[k]:.4g}" for k in ("decode_forward_ms","verify_forward_ms","verify_over_decode") if k in d))' "$base.json")")
  else
    tail -3 "$base.err"
    summary+=("verify4k $label FAILED   $(basename "$base").err")
    return 1
  fi
}

# The decode engine end to end on random-weight presets: plain decode (CUDA graphs), the replay
# draft (tau = 16) and a random 5-layer DFlash draft of the public shape, next to torch's decode.
stage_engine() {
  local status=0 preset peak=""
  # The bf16 GEMM peak (cuBLASLt, 8192^3) the 4,096-row prefill is judged against, in this call.
  if "$build_dir/bench/bench_linear_gpu" --gemm-peak >"$out/gemm_peak.txt" 2>&1; then
    peak=$(awk '$1 == "square" {print $(NF - 1)}' "$out/gemm_peak.txt")
    summary+=("gemm peak             ${peak:-?} TFLOP/s (cuBLASLt bf16 8192^3)   gemm_peak.txt")
  else
    summary+=("gemm peak             FAILED   gemm_peak.txt")
    status=1
  fi
  for preset in ${ES_ENGINE_PRESETS:-qwen3-0.6b qwen3-8b}; do
    local dir="/dev/shm/es_$preset" draft="/dev/shm/es_${preset}_draft"
    if ! python3 tools/torch_anchor.py --preset "$preset" --save "$dir" >"$out/anchor_$preset.json" 2>"$out/anchor_$preset.err" ||
       ! python3 tools/make_random_draft.py "$dir" "$draft" --layers 5 --block-size 16 >"$out/draft_$preset.log" 2>&1; then
      summary+=("engine $(printf '%-22s' "$preset") FAILED   anchor_$preset.err / draft_$preset.log")
      status=1
      continue
    fi
    summary+=("anchor $(printf '%-22s' "$preset") $(grep -o '"decode_tok_s": [0-9.]*' "$out/anchor_$preset.json")")
    local mode
    for mode in replay draft; do
      local args=(--replay --block-size 16)
      [ "$mode" = draft ] && args=(--draft "$draft")
      if "$build_dir/edgespec" bench --model "$dir" "${args[@]}" --json >"$out/bench_${preset}_$mode.json" 2>"$out/bench_${preset}_$mode.err"; then
        summary+=("bench $(printf '%-10s %-12s' "$preset" "$mode") $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(f"{k}={d[k]:.4g}" for k in ("plain_tok_s","spec_tok_s","speedup","tau","decode_forward_ms","verify_over_decode","proposal_over_decode","identical_prefix_fraction") if k in d))' "$out/bench_${preset}_$mode.json")")
      else
        tail -5 "$out/bench_${preset}_$mode.err"
        summary+=("bench $(printf '%-10s %-12s' "$preset" "$mode") FAILED   bench_${preset}_$mode.err")
        status=1
      fi
    done
    # Long prompts: the whole-model prefill of 4,096 tokens, and the time to first token of a
    # 4,224-token prompt whose first 4,096 tokens an earlier request ran (reuse off vs on).
    # The prefill also as one 4,096-row forward (--prefill-chunk): the default 256-row chunks read
    # every weight 16 times (16 GB each for Qwen3-8B).
    if "$build_dir/edgespec" bench --model "$dir" --prompt-len 4096 --gen-len 16 --prefill-chunk 4096 --json \
         >"$out/prefill4096_$preset.json" 2>"$out/prefill4096_$preset.err"; then
      summary+=("prefill $(printf '%-10s' "$preset") one 4096-row forward: $(python3 -c 'import json,sys; print("%.1f ms" % json.load(open(sys.argv[1]))["prefill_ms"])' "$out/prefill4096_$preset.json")")
      [ -n "$peak" ] && summary+=("prefill $(printf '%-10s' "$preset") $(python3 tools/prefill_share.py "$dir" "$out/prefill4096_$preset.json" "$peak")")
    else
      tail -3 "$out/prefill4096_$preset.err"
      summary+=("prefill $(printf '%-10s' "$preset") one 4096-row forward FAILED   prefill4096_$preset.err")
      status=1
    fi
    if "$build_dir/edgespec" bench --model "$dir" --prompt-len 4096 --gen-len 16 --json >"$out/prefill_$preset.json" 2>"$out/prefill_$preset.err" &&
       "$build_dir/edgespec" bench --model "$dir" --prefix-reuse --prompt-len 4224 --shared-len 4096 --json >"$out/ttft_$preset.json" 2>"$out/ttft_$preset.err"; then
      summary+=("prefill $(printf '%-10s' "$preset") $(python3 -c 'import json,sys; a,b=(json.load(open(p)) for p in sys.argv[1:]); print("4096-token prefill %.1f ms; ttft reuse off %.1f ms, on %.1f ms, first token identical %d/%d" % (a["prefill_ms"], b["ttft_ms_reuse_off"], b["ttft_ms_reuse_on"], b["first_token_identical"], b["runs"]))' "$out/prefill_$preset.json" "$out/ttft_$preset.json")")
    else
      tail -3 "$out/prefill_$preset.err" "$out/ttft_$preset.err"
      summary+=("prefill $(printf '%-10s' "$preset") FAILED   prefill_$preset.err / ttft_$preset.err")
      status=1
    fi
    # Issue 8's "verify of 16 tokens at 4k context <= 1.15x one decode step".
    verify4k_row "$dir" "$out/verify4k_$preset" "$(printf '%-10s' "$preset")" 64 || status=1
    rm -rf "$dir" "$draft"
  done
  return $status
}

# A/B of an environment switch ($1 = each of the values after the tag) over the GPU tests and the
# engine: ctest -L gpu each way, then edgespec bench (plain + replay draft) on the random presets
# in ES_ENGINE_PRESETS each way, next to the torch anchor.
engine_ab() {
  local var=$1 tag=$2 values=("${@:3}") status=0 val combos=()
  for val in "${values[@]}"; do
    (cd "$build_dir" && env "$var=$val" ctest -L gpu --timeout 300 -j "${ES_CTEST_J:-4}") >"$out/ctest_gpu_$tag$val.log" 2>&1
    local rc=$?
    summary+=("ctest -L gpu $var=$val $([ $rc -eq 0 ] && echo ok || echo FAILED)   $(grep -Eo '[0-9]+% tests passed.*' "$out/ctest_gpu_$tag$val.log")")
    [ $rc -eq 0 ] || status=1
    combos+=("$var=$val")
  done
  engine_combos "$tag" 1 "${combos[@]}" || status=1
  return $status
}

# edgespec bench (plain + replay draft) on the random presets in ES_ENGINE_PRESETS next to the
# torch anchor, once per environment combination ($3...: space-separated VAR=value lists, or
# "default" for none), the whole list $2 times in turn (alternated runs expose drift).
engine_combos() {
  local tag=$1 rounds=$2 combos=("${@:3}") status=0 preset combo round
  for preset in ${ES_ENGINE_PRESETS:-qwen3-0.6b qwen3-8b}; do
    local dir="/dev/shm/es_$preset"
    if [ "${ES_SKIP_ANCHOR:-0}" = 1 ]; then  # an A/B of our own settings only: no torch run
      saved_model "$preset" "$dir" || { summary+=("$tag $preset FAILED   save_$preset.log"); status=1; continue; }
    elif ! python3 tools/torch_anchor.py --preset "$preset" --save "$dir" >"$out/anchor_$preset.json" 2>"$out/anchor_$preset.err"; then
      summary+=("$tag $(printf '%-22s' "$preset") FAILED   anchor_$preset.err")
      status=1
      continue
    else
      summary+=("anchor $(printf '%-22s' "$preset") $(grep -o '"decode_tok_s": [0-9.]*' "$out/anchor_$preset.json")")
    fi
    for round in $(seq 1 "$rounds"); do
      for combo in "${combos[@]}"; do
        local envs=() name=${combo// /_}
        [ "$combo" = default ] || read -r -a envs <<<"$combo"
        local base="$out/bench_${preset}_${tag}_${name}_$round"
        if env "${envs[@]}" "$build_dir/edgespec" bench --model "$dir" --replay --block-size 16 --json >"$base.json" 2>"$base.err"; then
          summary+=("bench $(printf '%-10s %s' "$preset" "$combo") $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(f"{k}={d[k]:.4g}" for k in ("plain_tok_s","spec_tok_s","decode_forward_ms","verify_forward_ms","identical_prefix_fraction") if k in d))' "$base.json")")
        else
          tail -5 "$base.err"
          summary+=("bench $(printf '%-10s %s' "$preset" "$combo") FAILED")
          status=1
        fi
      done
    done
    [ -n "${ES_KEEP_MODELS:-}" ] || rm -rf "$dir"  # ES_KEEP_MODELS=1: a later stage reuses it
  done
  return $status
}

# Per-kernel hardware counters (ncu, clocks left alone) of the cases furthest from their targets:
# bench_sampling_gpu's B 16 verify (issue 4) and plain decode steps of the random Qwen3-0.6B
# (issue 8). Aggregated by kernel name: launches, mean time, DRAM and SM throughput (% of peak).
stage_profile() {
  local status=0 preset=qwen3-0.6b dir=/dev/shm/es_profile_q06
  local metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
  metrics+=,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,sm__warps_active.avg.pct_of_peak_sustained_active
  local ncu_args=(--clock-control none --csv --page raw --metrics "$metrics")
  # The model runs profile hundreds of launches: time and DRAM throughput only (fewer replay
  # passes per kernel; ncu prints nothing if the timeout kills it).
  local ncu_fast=(--clock-control none --csv --page raw
                  --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed)
  # bench_sampling_gpu verify: 20 warm-up calls first (skipped), then 8 calls' kernels.
  timeout 240 ncu "${ncu_args[@]}" --launch-skip 80 --launch-count 40 \
    "$build_dir/bench/bench_sampling_gpu" verify >"$out/ncu_verify.csv" 2>"$out/ncu_verify.err" || status=1
  summary+=("profile verify        $([ $status -eq 0 ] && echo ok || echo FAILED)   ncu_verify.csv")
  # The same verify with ncu's sections (stall reasons, occupancy, memory chart) for one call's
  # kernels: why a kernel is below the DRAM roofline, not only that it is.
  timeout 150 ncu --clock-control none --launch-skip 80 --launch-count 5 --section SpeedOfLight \
    --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section SourceCounters "$build_dir/bench/bench_sampling_gpu" verify \
    >"$out/ncu_verify_sections.txt" 2>&1 || status=1
  if python3 tools/torch_anchor.py --preset "$preset" --save "$dir" >"$out/anchor_$preset.json" 2>"$out/anchor_$preset.err"; then
    # 16-token prompt, 12 decode steps; past the first 500 launches (load, prefill) ~3 decode
    # steps. 2,500 launches did not finish in 200 s on 2026-11-30 (ncu replays every kernel).
    timeout 200 ncu "${ncu_fast[@]}" --launch-skip 500 --launch-count 700 "$build_dir/edgespec" bench --model "$dir" \
      --prompt-len 16 --gen-len 12 --repeats 1 --json >"$out/ncu_decode06.csv" 2>"$out/ncu_decode06.err" || status=1
    summary+=("profile decode 0.6b   $([ -s "$out/ncu_decode06.csv" ] && echo ok || echo FAILED)   ncu_decode06.csv")
  else
    summary+=("profile decode 0.6b   FAILED   anchor_$preset.err")
    status=1
  fi
  rm -rf "$dir"
  local reports=("$out/ncu_verify.csv" "$out/ncu_decode06.csv")
  # The default model decoding greedily with its draft: where a speculative step's 1.44 plain
  # steps go (draft forward, 16-row verify, accept and commit kernels).
  if [ -f "${ES_SMOLLM2_GGUF:-}" ]; then
    timeout 200 ncu "${ncu_fast[@]}" --launch-skip 300 --launch-count 900 "$build_dir/edgespec" generate --model "$ES_SMOLLM2_GGUF" \
      --draft models/smollm2-135m-instruct-dflash --backend cuda -n 64 --temperature 0 \
      -p "Write a short story about a lighthouse keeper." >"$out/ncu_spec_smollm2.csv" 2>"$out/ncu_spec_smollm2.err" || status=1
    reports+=("$out/ncu_spec_smollm2.csv")
  fi
  summary+=("$(python3 tools/ncu_summary.py "${reports[@]}" 2>&1)")
  return $status
}

# One launch of kernel $ES_PROFILE_KERNEL (an ncu name regex) in $ES_PROFILE_CMD under ncu's full
# set with source counters: the details page, and the SASS source page summarised per opcode and
# stall reason (tools/ncu_sass_summary.py). The default is the first launch of the wgmma prefill
# attention in bench_attention_gpu, its 4k causal prefill (1,024 CTAs x 8 warps x 16.5 tiles:
# --per 135168 gives instructions per warp and tile).
stage_kernelprofile() {
  local kernel=${ES_PROFILE_KERNEL:-prefill_kernel} per=${ES_PROFILE_PER:-135168}
  local cmd=${ES_PROFILE_CMD:-$build_dir/bench/bench_attention_gpu}
  local rep="$out/kernelprofile"
  # shellcheck disable=SC2086  # ES_PROFILE_CMD may carry arguments
  if ! timeout 300 ncu --set full --import-source yes -k "regex:$kernel" -c 1 -o "$rep" $cmd \
         >"$out/kernelprofile_run.log" 2>&1; then
    tail -5 "$out/kernelprofile_run.log"
    summary+=("kernelprofile $kernel FAILED   kernelprofile_run.log")
    return 1
  fi
  ncu -i "$rep.ncu-rep" --page details >"$out/kernelprofile_details.txt" 2>&1
  ncu -i "$rep.ncu-rep" --page source --print-source sass --csv >"$out/kernelprofile_sass.csv" 2>&1
  python3 tools/ncu_sass_summary.py "$out/kernelprofile_sass.csv" --per "$per" --top 40 \
    >"$out/kernelprofile_summary.txt" 2>&1
  local line
  while read -r line; do summary+=("  $line"); done < <(grep -E "Duration|Compute \(SM\) Throughput|Issue Slots Busy|Registers Per|Executed Ipc A" "$out/kernelprofile_details.txt")
  while read -r line; do summary+=("  $line"); done < <(head -45 "$out/kernelprofile_summary.txt")
  rm -f "$rep.ncu-rep"
  summary+=("kernelprofile $kernel ok   kernelprofile_details.txt, kernelprofile_summary.txt")
}

# A sampling path switched by an environment variable (VAR=0 off, 1 on) against the path it
# replaces, in one call: the sampling GPU tests under timeouts both ways (the split CDF's first GPU
# run hung in a barrier), bench_sampling_gpu both ways next to the torch anchor, and T = 1
# generations of $ES_SMOLLM2_GGUF (plain and with models/'s draft) that must give the same tokens
# both ways. EXTRA: generate flags that route the generations through the path (e.g. --top-p 0.9).
sampling_ab() {
  local var=$1 tag=$2 extra=("${@:3}") status=0 t m d rc
  for m in 1 0; do
    for t in test_sampling_fullrow_split_gpu test_sampling_gpu test_spec_verify_gpu test_sampling_cdf_split_gpu \
             test_sampling_chunk_fast_gpu; do
      env "$var=$m" timeout 120 "$build_dir/tests/$t" --gtest_brief=1 >"$out/${tag}${m}_$t.log" 2>&1
      rc=$?
      [ $rc -eq 0 ] || { status=1; grep -A6 "Failure" "$out/${tag}${m}_$t.log" | head -30; }
      summary+=("$tag $var=$m $(printf '%-32s' "$t") $([ $rc -eq 0 ] && echo ok || echo "FAILED rc=$rc")")
    done
  done
  for m in 1 0; do
    env "$var=$m" timeout 150 "$build_dir/bench/bench_sampling_gpu" >"$out/${tag}_bench$m.txt" 2>&1
    summary+=("bench_sampling $var=$m rc=$?   ${tag}_bench$m.txt")
    grep -E "^case|k-off|verify|V=151936 f32 B=(1|64) k50|argmax|small" "$out/${tag}_bench$m.txt" | while read -r line; do echo "  $var=$m $line"; done
  done
  timeout 120 python3 tools/torch_anchor.py --sampling >"$out/anchor_sampling.json" 2>"$out/anchor_sampling.err"
  summary+=("anchor sampling rc=$?   $(head -c 400 "$out/anchor_sampling.json")")
  local gguf="${ES_SMOLLM2_GGUF:-}"
  if [ ! -f "$gguf" ]; then
    summary+=("$tag generate  skipped  ES_SMOLLM2_GGUF = '$gguf' is not a file")
    return $status
  fi
  for m in 0 1; do
    for d in plain draft; do
      local args=(--no-draft)
      [ $d = draft ] && args=(--draft models/smollm2-135m-instruct-dflash)
      env "$var=$m" timeout 60 "$build_dir/edgespec" generate --model "$gguf" "${args[@]}" --backend cuda --json \
        -n 128 --temperature 1 "${extra[@]}" --seed 11 -p "Write a short story about a lighthouse keeper." \
        >"$out/${tag}_t1_${d}_$m.json" 2>"$out/${tag}_t1_${d}_$m.err" || status=1
    done
  done
  for d in plain draft; do
    if python3 -c 'import json,sys; a,b=(json.load(open(p))["tokens"] for p in sys.argv[1:]); sys.exit(a!=b)' \
         "$out/${tag}_t1_${d}_0.json" "$out/${tag}_t1_${d}_1.json" 2>/dev/null; then
      summary+=("$tag T=1 ${extra[*]} $d   ok       same tokens with $var=0 and 1")
    else
      summary+=("$tag T=1 ${extra[*]} $d   FAILED   ${tag}_t1_${d}_{0,1}.json differ or are missing")
      status=1
    fi
  done
  return $status
}

# An A/B of an attention switch $1 between its values $3 (the default) and $4, in one call; $2
# names the logs and summary rows. The attention GPU test both ways under a timeout (a hung
# barrier must not eat the call), bench_attention_gpu both ways (its 4k causal prefill and
# 128-row-suffix TFLOP/s rows and its B=1 4k 16-row verify rows; each run also forces both row-tile
# variants, and the verify's two outputs must be bit-identical), then the whole-model 4,096-token
# prefill of a random Qwen3-8B ($ES_PREFILL_PRESET) next to torch's prefill of the same tokens:
# one 4,096-row forward ($3, $4, $3 again), then the default 256-row forwards ($3, $4; a chunk's
# attention has too few CTAs for the prefill row tiles under ES_ATTN_PREFILL_WGMMA_FEW=0).
#   prefillab     ES_ATTN_ROWTILES 2 / 1: two 16-row tiles per warp row (paged_attention_split.h:
#                 prefill at warpsM 4, 128 rows a CTA; batch-1 verify at warpsM 1, 32 rows a CTA)
#                 or one. The verify's whole-model effect (verify / decode forward at 4k) is the
#                 engine stage's verify4k row: ES_ENGINE_PRESETS=qwen3-8b tools/gpu_check.sh engine.
#   prefillwgmma  ES_ATTN_PREFILL_WGMMA 1 / 0: the wgmma prefill kernel or the mma.sync variant
#                 (paged_attention_prefill.h).
#   prefillfew    ES_ATTN_PREFILL_WGMMA_FEW 0 / 1: the wgmma kernel also for prefill calls of
#                 fewer than 132 CTAs of 128 rows (the default since session 20).
prefill_ab() {
  local var=$1 tag=$2 a=$3 b=$4 status=0 m rc preset=${ES_PREFILL_PRESET:-qwen3-8b}
  for m in "$a" "$b"; do
    env "$var=$m" timeout 300 "$build_dir/tests/test_paged_attention_gpu" --gtest_brief=1 >"$out/${tag}_test$m.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || { status=1; grep -A6 "Failure" "$out/${tag}_test$m.log" | head -30; }
    summary+=("$tag test_paged_attention_gpu $var=$m $([ $rc -eq 0 ] && echo ok || echo "FAILED rc=$rc")")
  done
  for m in "$a" "$b"; do
    env "$var=$m" timeout 240 "$build_dir/bench/bench_attention_gpu" >"$out/${tag}_bench$m.txt" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    summary+=("$tag bench_attention_gpu $var=$m rc=$rc   ${tag}_bench$m.txt")
    local line
    while read -r line; do summary+=("  $var=$m $line"); done < <(grep -E "^prefill|^verify|MISMATCH|rowTiles" "$out/${tag}_bench$m.txt")
  done
  # The random checkpoint; its torch prefill of the same 4,096 tokens is the anchor (same call).
  local dir="/dev/shm/es_${tag}_$preset"
  if ! timeout 240 python3 tools/torch_anchor.py --preset "$preset" --save "$dir" --prompt-len 4096 --gen-len 16 \
         >"$out/${tag}_anchor.json" 2>"$out/${tag}_anchor.err"; then
    summary+=("$tag $preset        FAILED   ${tag}_anchor.err")
    rm -rf "$dir"
    return 1
  fi
  summary+=("$tag anchor $preset $(grep -o '"prefill_ms": [0-9.]*' "$out/${tag}_anchor.json")")
  local chunk pair run=0
  for pair in "$a 4096" "$b 4096" "$a 4096" "$a 256" "$b 256"; do
    read -r m chunk <<<"$pair"
    run=$((run + 1))
    local base="$out/${tag}_engine_${run}_${m}_$chunk"
    if env "$var=$m" timeout 150 "$build_dir/edgespec" bench --model "$dir" --prompt-len 4096 --gen-len 64 \
         --prefill-chunk "$chunk" --json >"$base.json" 2>"$base.err"; then
      summary+=("$tag $preset 4096-token prefill in $chunk-row forwards $var=$m $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.1f ms" % d["prefill_ms"])' "$base.json")")
    else
      tail -3 "$base.err"
      summary+=("$tag $preset 4096-token prefill in $chunk-row forwards $var=$m FAILED   $(basename "$base").err")
      status=1
    fi
  done
  rm -rf "$dir"
  return $status
}

# The decode fusion of session 13, the gemv's SwiGLU epilogue (ES_GEMV_SWIGLU=0: gemv then the
# SwiGLU kernel; ES_GATE_UP_INTERLEAVE=0: the checkpoint's gate | up order, no fusion possible).
# fusiontests: the GPU tests that cover it with each switch off (the build stage runs them on);
# fusions: the engine with each setting, twice.
stage_fusiontests() {
  local status=0 t sw
  for t in test_gate_up_swiglu_gpu test_target_model_gpu test_decode_engine_gpu; do
    for sw in "ES_GEMV_SWIGLU=0" "ES_GATE_UP_INTERLEAVE=0"; do
      if env "$sw" timeout 300 "$build_dir/tests/$t" --gtest_brief=1 >"$out/fusions_${t}_$sw.log" 2>&1; then
        summary+=("$(printf '%-28s' "$t") $sw ok")
      else
        tail -10 "$out/fusions_${t}_$sw.log"
        summary+=("$(printf '%-28s' "$t") $sw FAILED   fusions_${t}_$sw.log")
        status=1
      fi
    done
  done
  return $status
}
stage_fusions() {
  engine_combos fusions 2 "ES_GATE_UP_INTERLEAVE=0" "ES_GEMV_SWIGLU=0" default
}
# Early reads before the PDL wait (pdl.cuh; ES_PDL_EARLY_READS=0: wait first) in the q/k-norm +
# RoPE + K/V write and the split attention kernels: the engine both ways, alternated twice.
stage_earlyreads() {
  engine_combos earlyreads 2 "ES_PDL_EARLY_READS=0" default
}
# The decode layers' RMSNorms fused into the gemvs (kernels/linear.h; on by default,
# ES_GEMV_NORM=0 turns them off), and its R = 1 instances forced to 2 or 3 CTAs an SM
# (linear_gemv.cu: by default 3 only for grids over one wave of 2): the engine each way,
# alternated twice.
stage_normfusion() {
  engine_combos normfusion 2 "ES_GEMV_NORM=0" default "ES_GEMV_NORM_CTAS_PER_SM=2" "ES_GEMV_NORM_CTAS_PER_SM=3"
}

# The combine kernel's dependent (the o projection) let in before the combine waits on decode
# rows, so its early W loads overlap the split kernel (the default), against not
# (ES_ATTN_COMBINE_TRIGGER_FIRST=0), alternated twice.
stage_combinefirst() {
  engine_combos combinefirst 2 "ES_ATTN_COMBINE_TRIGGER_FIRST=0" default
}

# Session 12's sweep had Qwen3-0.6B's qkv and gate_up gemvs faster alone with two tiles a CTA
# and no K split (linear_gemv.h, kShortK, the default since): that rule against session 12's.
stage_shortk() {
  local status=0
  ES_ENGINE_PRESETS=${ES_ENGINE_PRESETS:-qwen3-0.6b} engine_combos shortk 2 ES_GEMV_RULE=wide ES_GEMV_RULE=shortk || status=1
  (cd "$build_dir" && ES_GEMV_RULE=shortk ctest -L gpu --timeout 300 -j "${ES_CTEST_J:-4}" \
     -R 'test_linear_gpu|test_gemv_norm_gpu|test_target_model_gpu|test_decode_engine_gpu|test_gate_up') \
    >"$out/ctest_gpu_shortk.log" 2>&1 || status=1
  summary+=("ctest shortk          $(grep -Eo '[0-9]+% tests passed.*' "$out/ctest_gpu_shortk.log")")
  return $status
}

# The random model of preset $1 in folder $2, written once (torch_anchor.py --save-only, log in
# save_$1.log) unless an earlier stage kept it there (ES_KEEP_MODELS=1).
saved_model() {
  [ -d "$2" ] || python3 tools/torch_anchor.py --preset "$1" --save "$2" --save-only >"$out/save_$1.log" 2>&1
}

# Plain decode at larger batches (issue 8: "qwen3-8b decode at batch 16 / 64: report tok/s and %
# of roofline (weights + KV)"): the read-stream ceiling first, then edgespec bench --batch B
# (128-token prompts, 256 tokens, plain only) per preset and batch, each against the bytes a step
# must read at that ceiling (tools/decode_roofline.py).
stage_batchdecode() {
  local status=0 preset b ceiling
  ceiling=$("$build_dir/bench/bench_linear_gpu" --ceiling 2>"$out/ceiling.err" | awk '/^read_ceiling_tbps/ {print $2}')
  if [ -z "$ceiling" ]; then
    summary+=("batchdecode read ceiling FAILED   ceiling.err")
    return 1
  fi
  summary+=("batchdecode read ceiling $ceiling TB/s (4 GiB reduction)")
  for preset in ${ES_ENGINE_PRESETS:-qwen3-8b}; do
    local dir="/dev/shm/es_$preset"
    saved_model "$preset" "$dir" || { summary+=("batchdecode $preset FAILED   save_$preset.log"); status=1; continue; }
    local combo run=0
    for combo in ${ES_BATCHDECODE_COMBOS:-default}; do
      local envs=()
      [ "$combo" = default ] || IFS=, read -r -a envs <<<"$combo"
      for b in ${ES_DECODE_BATCHES:-16 64}; do
        run=$((run + 1))
        local base="$out/batchdecode_${preset}_${b}_$run" label
        label="$(printf '%-10s' "$preset")$([ "$combo" = default ] || echo " $combo")"
        if env "${envs[@]}" "$build_dir/edgespec" bench --model "$dir" --batch "$b" --json >"$base.json" 2>"$base.err"; then
          summary+=("batchdecode $label $(python3 tools/decode_roofline.py --model "$dir" --bench "$base.json" --ceiling "$ceiling")")
        else
          tail -5 "$base.err"
          summary+=("batchdecode $label B $b FAILED   $(basename "$base").err")
          status=1
        fi
        echo "${summary[-1]}"
      done
    done
    [ -n "${ES_KEEP_MODELS:-}" ] || rm -rf "$dir"
  done
  return $status
}

# The 16-row verify / decode forward ratio after a 4,096-token prompt (the engine stage's verify4k
# row) under each environment combination in ES_VERIFY4K_COMBOS ("default" = none; space-separated
# combos, VAR=value with commas between several), on each preset in ES_ENGINE_PRESETS: what a
# switch does to the context-dependent part of a step. The random model is saved only (no anchor).
stage_verify4k() {
  local status=0 preset combo
  for preset in ${ES_ENGINE_PRESETS:-qwen3-8b}; do
    local dir="/dev/shm/es_$preset"
    saved_model "$preset" "$dir" || { summary+=("verify4k $preset FAILED   save_$preset.log"); status=1; continue; }
    local run=0
    for combo in ${ES_VERIFY4K_COMBOS:-default}; do
      local envs=()
      [ "$combo" = default ] || IFS=, read -r -a envs <<<"$combo"
      run=$((run + 1))  # a combination listed twice keeps both logs
      verify4k_row "$dir" "$out/verify4k_${preset}_${combo//,/_}_$run" "$(printf '%-10s %-28s' "$preset" "$combo")" 16 \
        "${envs[@]}" || status=1
      echo "${summary[-1]}"
    done
    [ -n "${ES_KEEP_MODELS:-}" ] || rm -rf "$dir"
  done
  return $status
}

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(build)
status=0
if build; then
  for s in "${stages[@]}"; do
    case "$s" in
      build) stage_build || status=1 ;;
      sanitize) stage_sanitize || status=1 ;;
      bench) stage_bench || status=1 ;;
      smollm2) stage_smollm2 || status=1 ;;
      draft) stage_draft || status=1 ;;
      oracle) stage_oracle || status=1 ;;
      engine) stage_engine || status=1 ;;
      pdl) engine_ab ES_PDL pdl 0 1 || status=1 ;;
      gemvrule) engine_ab ES_GEMV_RULE gemvrule onetile shortk || status=1 ;;
      fusiontests) stage_fusiontests || status=1 ;;
      fusions) stage_fusions || status=1 ;;
      earlyreads) stage_earlyreads || status=1 ;;
      normfusion) stage_normfusion || status=1 ;;
      verify4k) stage_verify4k || status=1 ;;
      combinefirst) stage_combinefirst || status=1 ;;
      batchdecode) stage_batchdecode || status=1 ;;
      shortk) stage_shortk || status=1 ;;
      cdfsplit) sampling_ab ES_CDF_SPLIT cdfsplit || status=1 ;;
      profile) stage_profile || status=1 ;;
      kernelprofile) stage_kernelprofile || status=1 ;;
      fullrowsplit) sampling_ab ES_FULLROW_SPLIT fullrow --top-p 0.9 || status=1 ;;
      prefillab) prefill_ab ES_ATTN_ROWTILES prefillab 2 1 || status=1 ;;
      prefillwgmma) prefill_ab ES_ATTN_PREFILL_WGMMA prefillwgmma 1 0 || status=1 ;;
      prefillfew) prefill_ab ES_ATTN_PREFILL_WGMMA_FEW prefillfew 0 1 || status=1 ;;
      chunkasync) sampling_ab ES_CHUNK_ASYNC chunkasync || status=1 ;;
      chunkfinalize) sampling_ab ES_CHUNK_FINALIZE chunkfinalize || status=1 ;;
      *) echo "gpu_check: unknown stage '$s' (build, sanitize, bench, smollm2, draft, oracle, engine, pdl, cdfsplit, profile, fullrowsplit, prefillab, prefillwgmma, prefillfew, kernelprofile, chunkasync, chunkfinalize, gemvrule, fusiontests, fusions, earlyreads, normfusion, verify4k, combinefirst, batchdecode, shortk)" >&2; status=2 ;;
    esac
  done
else
  status=1
fi
# One archive for all logs (a device call returns at most 8 files); the summary beside it.
tar -czf "$final_out/logs.tgz" -C "$final_out" logs && rm -rf "$out"
commit=$(git rev-parse --short HEAD 2>/dev/null || cat .commit 2>/dev/null || echo '?')
# The device's copy of .git can lag the copied working tree (its HEAD read dc821f3 for later
# trees in session 9), so the summary also names the sources by content:
# `tools/gpu_check.sh --source-hash` here prints the same figure for the local tree.
{
echo
echo "== gpu_check summary ($(date -u +%FT%TZ), commit $commit, sources $(source_hash)) =="
printf '%s\n' "${summary[@]}"
} | tee "$final_out/summary.txt"
exit $status
