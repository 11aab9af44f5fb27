#!/usr/bin/env bash
# The serving benchmark (issue 41 §5) on the GPU machine, in stages that each fit one 10-minute
# device call:   tools/serve_bench.sh STAGE...   (in this order; --help lists them)
#
#   build    edgespec (target edgespec, $BUILD_DIR, default build-gpu) and llama.cpp's
#            llama-server and llama-bench (CUDA, sm_90) from .peer/llama.cpp.tar.gz
#            (tools/peer_llamacpp_prepare.sh), both at once on every core, each stopped after
#            ES_SB_BUILD_TIMEOUT s (default 530); both are incremental: re-run the stage in the
#            next call on the same warm machine if a build did not finish
#   models   in $ES_SB_WORK (default /dev/shm/es_sb): random-weight Qwen3-8B as an HF folder
#            (tools/torch_anchor.py --save-only; ES_SB_PRESET, default qwen3-8b; "tiny" writes a
#            2-layer stand-in without torch), the same weights as a bf16 GGUF for llama-server
#            with the Qwen2/3 vocabulary of the llama.cpp tree (tools/hf_to_gguf.py), a random
#            5-layer DFlash draft (tools/make_random_draft.py); the folder's tokenizer.json is
#            written once edgespec is built (edgespec convert of a tiny carrier GGUF)
#   prepare  build and models at once (models needs no edgespec binary): the first call
#   anchor   edgespec bench at the load's prompt and answer lengths, batch 1, on the rows'
#            models (the concurrency-1 reference): each of ES_SB_ANCHORS (default all: q8 =
#            plain + replay, q8-dflash = random draft, smol-draft = default model + its draft)
#   serve    each server of ES_SB_SERVERS in turn (start, wait for it, tools/loadgen.py sweep,
#            stop with SIGTERM); servers whose model or binary is missing are reported, skipped
#
# Every call writes $OUT (default ./out): serve_bench.md (the table over every server run so
# far on this machine, this call's summary), serve_bench.json (every loadgen report and bench
# result so far, kept in $ES_SB_WORK/reports), serve_logs.tgz (this call's logs).
# Carry ".deps" and ".peer/llama.cpp.tar.gz" (not ".peer": the unpacked tree and its build
# must stay on the warm machine between calls).
#
# Load (tools/loadgen.py): concurrency ES_SB_LEVELS (1,4,16,64), ES_SB_REQUESTS per level (auto:
# 16, 16, 64, 128), prompts of ES_SB_PROMPT_WORDS random words (128, ~1 token each), max_tokens
# ES_SB_MAX_TOKENS (128), temperature ES_SB_TEMPERATURE (0), one warm-up request per worker.
# Servers: ES_SB_SERVERS (default all of them: see servers() below), ES_SB_BACKEND (cuda),
# ES_SB_MAX_BATCH (64: edgespec --max-batch, llama-server -np), ES_SB_CONTEXT (1024 tokens a
# request: edgespec --context, llama-server -c MAX_BATCH x this), ES_SB_SERVE_ARGS (more
# edgespec serve flags), ES_SB_EDGESPEC_MODEL (folder | gguf: what edgespec serve loads for the
# Qwen3 rows; default folder, the same weights byte for byte), ES_SB_DEFAULT_MODEL (the default
# model, GGUF or folder; default ~/.cache/edgespec/smollm2-135m-instruct, else what
# tools/device_parts.sh join gives for SmolLM2-135M-Instruct.Q4_1.gguf), ES_SB_EDGESPEC and
# ES_SB_LLAMA_SERVER (binaries, for runs outside the GPU machine), ES_SB_START_TIMEOUT (300 s
# for a server to answer /health), ES_SB_COMMIT (the commit named in the report).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source tools/env.sh

# The servers: name | program (edgespec / llama) | model | load | arguments. MODEL names:
# Q8 (the random Qwen3 for edgespec: folder or GGUF), Q8GGUF, Q8DRAFT, SMOL (default model),
# SMOLGGUF (its GGUF, for llama-server), SMOLDRAFT (models/'s trained draft). Load "words":
# /v1/completions on random words (random weights have no text to follow); "chat":
# /v1/chat/completions on the held-out prompts the draft was evaluated on (a trained draft's
# acceptance depends on real text; answers may end before max_tokens).
servers() {
  cat <<'EOF'
q8-plain    | edgespec | Q8       | words | --no-draft
q8-replay   | edgespec | Q8       | words | --replay --block-size 16
q8-dflash   | edgespec | Q8       | words | --draft Q8DRAFT
llama-q8    | llama    | Q8GGUF   | words |
smol-plain  | edgespec | SMOL     | chat  | --no-draft
smol-draft  | edgespec | SMOL     | chat  | --draft SMOLDRAFT
llama-smol  | llama    | SMOLGGUF | chat  |
EOF
}

case "${1:-}" in
  -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
               printf '\nservers: name | program | model | load | arguments\n'; servers; exit 0 ;;
  "") echo "usage: tools/serve_bench.sh STAGE... (prepare, build, models, anchor, serve)" >&2
      exit 2 ;;
esac
for s in "$@"; do
  case "$s" in prepare | build | models | anchor | serve) ;;
    *) echo "serve_bench: unknown stage '$s' (valid: prepare, build, models, anchor, serve)" >&2
       exit 2 ;;
  esac
done

final_out="${OUT:-$PWD/out}"
logs="$final_out/serve_logs"
mkdir -p "$logs"
build_dir="${BUILD_DIR:-build-gpu}"
edgespec="${ES_SB_EDGESPEC:-$build_dir/edgespec}"
peer=.peer/llama.cpp
llama_server="${ES_SB_LLAMA_SERVER:-$peer/build/bin/llama-server}"
work="${ES_SB_WORK:-/dev/shm/es_sb}"
# Every loadgen report and bench result so far on this machine (each call's $OUT starts empty):
# the table at the end covers the servers run in earlier calls too.
reports="$work/reports"
mkdir -p "$reports"
backend="${ES_SB_BACKEND:-cuda}"
max_batch="${ES_SB_MAX_BATCH:-64}"
prompt_words="${ES_SB_PROMPT_WORDS:-128}"
max_tokens="${ES_SB_MAX_TOKENS:-128}"
context="${ES_SB_CONTEXT:-1024}"
summary=()
row() { summary+=("$(printf '%-34s %-7s %s' "$1" "$2" "${*:3}")"); }

# --- build ---------------------------------------------------------------------------------

build_edgespec() {
  local prefix=()
  [ -d .deps ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.deps")
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${prefix[@]}" &&
    ninja -C "$build_dir" -j "$(nproc)" edgespec
}

unpack_peer() {
  local tgz=.peer/llama.cpp.tar.gz
  if [ ! -f "$tgz" ]; then
    echo "serve_bench: $tgz is missing (tools/peer_llamacpp_prepare.sh)" >&2
    return 1
  fi
  # Unpacked once per tarball: a warm machine keeps the tree and its build.
  local sum
  sum=$(sha256sum "$tgz" | cut -c1-16)
  if [ "$(cat "$peer/.tarball" 2>/dev/null)" != "$sum" ]; then
    rm -rf "$peer" && tar -xzf "$tgz" -C .peer && echo "$sum" >"$peer/.tarball"
  fi
}

build_llama() {
  unpack_peer || return 1
  cmake -S "$peer" -B "$peer/build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA_QUANTS=f16-f16 -DGGML_CUDA_NCCL=OFF \
    -DGGML_CCACHE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF &&
    cmake --build "$peer/build" --target llama-server llama-bench -j "$(nproc)"
}

stage_build() {
  local limit="${ES_SB_BUILD_TIMEOUT:-530}" t0=$SECONDS pe pl re rl
  unpack_peer  # here, not in the timed job: a concurrent models stage reads the tree too
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$logs/gpu.txt" 2>&1
  ( export -f build_edgespec; export build_dir
    timeout "$limit" bash -c build_edgespec ) >"$logs/build_edgespec.log" 2>&1 &
  pe=$!
  ( export -f build_llama unpack_peer; export peer
    timeout "$limit" bash -c build_llama ) >"$logs/build_llama.log" 2>&1 &
  pl=$!
  wait "$pe"; re=$?
  wait "$pl"; rl=$?
  for what in "edgespec $re $edgespec" "llama-server $rl $llama_server"; do
    set -- $what
    if [ "$2" = 0 ]; then row "build $1" ok "$3, $((SECONDS - t0)) s"
    elif [ "$2" = 124 ]; then row "build $1" STOPPED "after $limit s: run the build stage again"
    else row "build $1" FAILED "build_$1.log: $(tail -1 "$logs/build_${1/llama-server/llama}.log")"
    fi
  done
  [ "$re" = 0 ] && [ "$rl" = 0 ]
}

# --- models --------------------------------------------------------------------------------

q8_dir="$work/q8"
q8_gguf="$work/q8.gguf"
q8_draft="$work/q8_draft"
vocab="$peer/models/ggml-vocab-qwen2.gguf"

stage_models() {
  local preset="${ES_SB_PRESET:-qwen3-8b}" t0=$SECONDS
  mkdir -p "$work"
  [ -f "$vocab" ] || unpack_peer || { row "models" FAILED "no $vocab"; return 1; }
  rm -rf "$q8_dir" "$q8_gguf" "$q8_draft" "$work/carrier"*
  if [ "$preset" = tiny ]; then
    python3 tools/hf_to_gguf.py tiny-hf "$q8_dir" --layers 2 --hidden 256 >"$logs/models.log" 2>&1
  else
    python3 tools/torch_anchor.py --preset "$preset" --save "$q8_dir" --save-only \
      >"$logs/models.log" 2>&1
  fi || { row "models $preset" FAILED "models.log: $(tail -1 "$logs/models.log")"; return 1; }
  python3 tools/hf_to_gguf.py convert "$q8_dir" "$q8_gguf" --vocab-gguf "$vocab" \
    >>"$logs/models.log" 2>&1 ||
    { row "models gguf" FAILED "models.log: $(tail -1 "$logs/models.log")"; return 1; }
  row "models $preset" ok "folder + GGUF ($(du -h "$q8_gguf" | cut -f1)), $((SECONDS - t0)) s"
  ensure_tokenizer || true  # here when edgespec is built; else before the first server
  if python3 -c "import torch" 2>/dev/null; then
    python3 tools/make_random_draft.py "$q8_dir" "$q8_draft" --layers 5 --block-size 16 \
      >>"$logs/models.log" 2>&1 && row "models random draft" ok "5 layers, block 16" ||
      row "models random draft" FAILED "models.log"
  else
    row "models random draft" skipped "no torch here"
  fi
}

# tokenizer.json for the random folder: edgespec convert writes it from a GGUF's tokenizer, and
# a tiny carrier model holds the same vocabulary (needs the edgespec binary).
ensure_tokenizer() {
  [ -f "$q8_dir/config.json" ] && [ ! -f "$q8_dir/tokenizer.json" ] || return 0
  [ -x "$edgespec" ] || return 1
  rm -rf "$work/carrier"*
  { python3 tools/hf_to_gguf.py tiny-hf "$work/carrier" --layers 1 --hidden 64 --heads 1 \
      --kv-heads 1 --head-dim 64 &&
    python3 tools/hf_to_gguf.py convert "$work/carrier" "$work/carrier.gguf" \
      --vocab-gguf "$vocab" &&
    "$edgespec" convert "$work/carrier.gguf" "$work/carrier_hf" --dtype bf16 -q &&
    cp "$work/carrier_hf/tokenizer.json" "$work/carrier_hf/tokenizer_config.json" "$q8_dir/" &&
    rm -rf "$work/carrier"*; } >>"$logs/models.log" 2>&1 && return 0
  row "models tokenizer" FAILED "models.log: $(tail -1 "$logs/models.log")"
  return 1
}

# build and models at once (the models need no edgespec binary and little CPU; the GPU is idle
# during the build): the whole preparation in one call.
stage_prepare() {
  local n=${#summary[@]} pm rm_
  unpack_peer  # once, before the two jobs that read the tree
  ( stage_models; rc=$?; printf '%s\n' "${summary[@]:$n}" >"$logs/models.rows"; exit $rc ) \
    >>"$logs/models.log" 2>&1 &
  pm=$!
  stage_build
  local rb=$?
  wait "$pm"; rm_=$?
  while IFS= read -r line; do summary+=("$line"); done <"$logs/models.rows"
  rm -f "$logs/models.rows"
  [ "$rb" = 0 ] && ensure_tokenizer && [ "$rm_" = 0 ]
}

# --- the default model ---------------------------------------------------------------------

smol_model() {
  local m="${ES_SB_DEFAULT_MODEL:-}" parts=.devparts/SmolLM2-135M-Instruct.Q4_1.gguf
  if [ -z "$m" ]; then
    m="$HOME/.cache/edgespec/smollm2-135m-instruct"
    [ -f "$m/config.json" ] || m="$parts/SmolLM2-135M-Instruct.Q4_1.gguf"
    [ -f "$m" ] || [ ! -f "$parts/SHA256" ] || m=$(tools/device_parts.sh join \
      SmolLM2-135M-Instruct.Q4_1.gguf 2>>"$logs/models.log") || m=
  fi
  [ -e "$m" ] && echo "$m"
}

smol_gguf() {
  local m
  m=$(smol_model) || return 1
  # A folder from tools/fetch_default_model.sh has the GGUF it was converted from beside it.
  [[ "$m" == *.gguf ]] || m="$(dirname "$m")/SmolLM2-135M-Instruct.Q4_1.gguf"
  [ -f "$m" ] && echo "$m"
}

# Resolves a MODEL name of servers() to a path (empty when it does not exist here).
model_path() {
  local p=
  case "$1" in
    Q8) p=$q8_dir; [ "${ES_SB_EDGESPEC_MODEL:-folder}" = gguf ] && p=$q8_gguf ;;
    Q8GGUF) p=$q8_gguf ;;
    Q8DRAFT) p=$q8_draft ;;
    SMOL) p=$(smol_model) ;;
    SMOLGGUF) p=$(smol_gguf) ;;
    SMOLDRAFT) p=models/smollm2-135m-instruct-dflash ;;
  esac
  [ -n "$p" ] && [ -e "$p" ] && echo "$p"
}

# --- anchor: edgespec bench at the same lengths -----------------------------------------------

stage_anchor() {
  local status=0 name model draft args m d dp f plen
  ensure_tokenizer
  plen=$(python3 -c "print(max(int(x) for x in '$prompt_words'.split(',')))")
  while IFS='|' read -r name model draft args; do
    name=${name// /} model=${model// /} draft=${draft// /}
    [[ " ${ES_SB_ANCHORS:-$name} " == *" $name "* ]] || continue
    m=$(model_path "$model") || { row "bench $name" skipped "no model $model"; continue; }
    d=()
    if [ -n "$draft" ]; then
      dp=$(model_path "$draft") || { row "bench $name" skipped "no $draft"; continue; }
      d=(--draft "$dp")
    fi
    f="$reports/bench_$name"
    # shellcheck disable=SC2086  # the row's arguments, split into words
    if "$edgespec" bench --model "$m" "${d[@]}" $args --backend "$backend" --prompt-len "$plen" \
         --gen-len "${max_tokens##*,}" --json >"$f.json" 2>"$logs/bench_$name.err"; then
      row "bench $name" "" "$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(" ".join(f"{k}={d[k]:.4g}" for k in ("plain_tok_s", "spec_tok_s", "speedup", "tau")
               if isinstance(d.get(k), (int, float))))' "$f.json")"
    else
      rm -f "$f.json"
      row "bench $name" FAILED "bench_$name.err: $(tail -1 "$logs/bench_$name.err")"
      status=1
    fi
  done < <(printf '%s\n' "q8 | Q8 | | --replay --block-size 16" "q8-dflash | Q8 | Q8DRAFT |" \
             "smol-draft | SMOL | SMOLDRAFT |")
  return "$status"
}

# --- serve ---------------------------------------------------------------------------------

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# Waits until the server whose log is $1 and pid $2 answers GET /health at $3 (a URL, or "parse"
# to read edgespec's "listening on http://HOST:PORT" line first); prints the URL.
wait_ready() {
  local log=$1 pid=$2 url=$3 t0=$SECONDS limit="${ES_SB_START_TIMEOUT:-300}"
  while [ $((SECONDS - t0)) -lt "$limit" ]; do
    kill -0 "$pid" 2>/dev/null || return 1
    if [ "$url" = parse ]; then
      local line
      line=$(grep -o 'listening on http://[^ ]*' "$log" | head -1)
      [ -n "$line" ] && url=${line#listening on }
    fi
    if [ "$url" != parse ] &&
       python3 -c 'import sys, urllib.request
sys.exit(urllib.request.urlopen(sys.argv[1] + "/health", timeout=5).status != 200)' "$url" \
         2>/dev/null; then
      echo "$url"
      return 0
    fi
    sleep 1
  done
  return 1
}

# SIGTERM (edgespec drains), then SIGKILL after 60 s; returns the exit status.
stop_server() {
  local pid=$1
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid"; echo "killed after 60 s" >>"$2"; }
  wait "$pid"
}

serve_one() {
  local name=$1 program=$2 model=$3 load=$4 args=$5 m cmd=() url pid rc load_args=()
  local log="$logs/server_$name.log"
  m=$(model_path "$model") || { row "serve $name" skipped "no model $model"; return 0; }
  local draft_name
  draft_name=$(grep -o '[A-Z0-9]*DRAFT' <<<"$args")
  if [ -n "$draft_name" ]; then
    local d
    d=$(model_path "$draft_name") || { row "serve $name" skipped "no $draft_name"; return 0; }
    args=${args//$draft_name/$d}
  fi
  if [ "$program" = edgespec ]; then
    [ -x "$edgespec" ] || { row "serve $name" skipped "no $edgespec"; return 0; }
    if [[ "$args" == *--replay* ]] &&
       ! timeout 20 "$edgespec" serve --help 2>&1 | grep -q -- --replay; then
      row "serve $name" skipped "edgespec serve has no --replay"
      return 0
    fi
    # shellcheck disable=SC2206  # the row's and the environment's arguments, split into words
    cmd=("$edgespec" serve --model "$m" $args --backend "$backend" --host 127.0.0.1 --port 0
         --max-batch "$max_batch" --context "$context" --served-model-name "$name"
         ${ES_SB_SERVE_ARGS:-})
    url=parse
  else
    [ -x "$llama_server" ] || { row "serve $name" skipped "no $llama_server"; return 0; }
    local port
    port=$(free_port)
    cmd=("$llama_server" -m "$m" --host 127.0.0.1 --port "$port" -np "$max_batch"
         -c $((max_batch * context)) -fa on --no-webui)
    [ "$backend" = cuda ] && cmd+=(-ngl 99)
    url="http://127.0.0.1:$port"
  fi
  echo "${cmd[*]}" >"$log"
  local t0=$SECONDS
  "${cmd[@]}" >>"$log" 2>&1 &
  pid=$!
  if ! url=$(wait_ready "$log" "$pid" "$url"); then
    row "serve $name" FAILED "not ready in ${ES_SB_START_TIMEOUT:-300} s: $(tail -1 "$log")"
    stop_server "$pid" "$log"
    return 1
  fi
  local ready=$((SECONDS - t0))
  [ "$load" = chat ] && load_args=(--endpoint chat --prompts-file train/data/prompts_heldout.jsonl)
  python3 tools/loadgen.py run --url "$url" --label "$name" \
    --concurrency "${ES_SB_LEVELS:-1,4,16,64}" \
    --requests "${ES_SB_REQUESTS:-auto}" --prompt-words "$prompt_words" --max-tokens "$max_tokens" \
    --temperature "${ES_SB_TEMPERATURE:-0}" "${load_args[@]}" --json "$reports/load_$name.json" -q \
    2>"$logs/load_$name.err"
  rc=$?
  stop_server "$pid" "$log"
  local stop_rc=$?
  local figures
  figures=$(python3 - "$reports/load_$name.json" 2>/dev/null <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(" ".join("c%d:%.0f" % (l["concurrency"], l["output_tok_s"]) for l in r["levels"]), "tok/s")
PY
)
  if [ "$rc" = 0 ]; then
    row "serve $name" ok "${figures}; ready in $ready s; exit $stop_rc"
  else
    row "serve $name" FAILED "load_$name.err: $(tail -1 "$logs/load_$name.err") ${figures}"
  fi
  [ "$rc" = 0 ]
}

stage_serve() {
  local status=0 name program model load args
  ensure_tokenizer
  while IFS='|' read -r -u 3 name program model load args; do
    name=${name// /}
    [[ " ${ES_SB_SERVERS:-$name} " == *" $name "* ]] || continue
    # shellcheck disable=SC2116,SC2086  # echo trims the column's spaces
    serve_one "$name" "${program// /}" "${model// /}" "${load// /}" "$(echo $args)" || status=1
  done 3< <(servers)
  return "$status"
}

status=0
for s in "$@"; do "stage_$s" || status=1; done

# The report: every loadgen table so far (in the order of servers()), the bench rows, this
# call's summary.
report_files=()
while IFS='|' read -r name _; do
  f="$reports/load_${name// /}.json"
  [ -f "$f" ] && report_files+=("$f")
done < <(servers)
table=
[ ${#report_files[@]} -gt 0 ] && table=$(python3 tools/loadgen.py table "${report_files[@]}")
{
  echo "## serve_bench $(date -u +%FT%TZ) stages: $*"
  echo
  # ES_SB_COMMIT: the caller names the commit (the GPU machine's copy of the tree may carry a
  # .git of another commit).
  echo "commit ${ES_SB_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}," \
       "$(tail -1 "$logs/gpu.txt" 2>/dev/null)"
  echo
  [ -n "$table" ] && printf '%s\n\n' "$table"
  echo '```'
  printf '%s\n' "${summary[@]}"
  echo '```'
  echo
} >>"$final_out/serve_bench.md"
python3 - "$final_out/serve_bench.json" "$reports" <<'PY'
import glob, json, os, sys
out = {"loadgen": [], "bench": {}}
for p in sorted(glob.glob(os.path.join(sys.argv[2], "load_*.json"))):
    out["loadgen"].append(json.load(open(p)))
for p in sorted(glob.glob(os.path.join(sys.argv[2], "bench_*.json"))):
    try:
        out["bench"][os.path.basename(p)[6:-5]] = json.load(open(p))
    except ValueError:
        pass
json.dump(out, open(sys.argv[1], "w"), indent=1)
PY
cp "$reports"/*.json "$logs/" 2>/dev/null
tar -czf "$final_out/serve_logs.tgz" -C "$final_out" serve_logs && rm -rf "$logs"
echo
echo "== serve_bench summary =="
printf '%s\n' "${summary[@]}"
[ -n "$table" ] && printf '%s\n' "$table"
exit $status
