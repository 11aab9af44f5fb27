#!/usr/bin/env bash
# Fuzzes the file-format parsers with libFuzzer + ASan + UBSan for a bounded time each.
#
#   tools/fuzz.sh [TARGET...] [SECONDS]
#
# Targets (default: all): safetensors and gguf (the weight file headers, 60 s each), tokenizer
# (tokenizer.json), tokenizer_config (tokenizer_config.json and its chat template),
# chat_template (the chat-template renderer) and quant_config (config.json's
# quantization_config), 30 s each. SECONDS (or FUZZ_SECONDS) sets every
# target's time.
#
# Builds tests/fuzz/fuzz_<target>*.cpp with clang++ directly (the main CMake build does not need
# clang), then runs it over a scratch copy of the target's seed corpus (new inputs stay out of
# the repository). Exits non-zero on a crash, sanitizer report, leak or timeout; the reproducer
# is left in build-fuzz-<target>/ as crash-*/leak-*/timeout-*.
# Installs clang with apt-get when no clang++ is found (needs root or sudo).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
all_targets=(safetensors gguf tokenizer tokenizer_config chat_template quant_config)
targets=()
seconds="${FUZZ_SECONDS:-}"
for arg in "$@"; do
  case "$arg" in
    safetensors | gguf | tokenizer | tokenizer_config | chat_template | quant_config)
      targets+=("$arg") ;;
    *[!0-9]* | "")
      echo "usage: tools/fuzz.sh [${all_targets[*]}] [SECONDS]" >&2
      exit 2 ;;
    *) seconds=$arg ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
probe_dir="$root/build-fuzz-probe"
mkdir -p "$probe_dir"

find_clang() {
  local c
  for c in ${FUZZ_CXX:-} clang++ clang++-{19,18,17,16,15,14}; do
    if command -v "$c" >/dev/null 2>&1; then command -v "$c"; return 0; fi
  done
  return 1
}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

cxx="$(find_clang || true)"
if [ -z "$cxx" ]; then
  echo "fuzz: no clang++ found, installing clang with apt-get" >&2
  as_root apt-get update -qq
  as_root apt-get install -y -qq clang >/dev/null
  cxx="$(find_clang)"
fi

# The fuzzer runtime ships separately on some Debian/Ubuntu releases (libclang-rt-N-dev).
probe="$probe_dir/probe.cpp"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  >"$probe"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe" -o "$probe_dir/probe" >/dev/null 2>&1; then
  major="$("$cxx" -dumpversion | cut -d. -f1)"
  echo "fuzz: $cxx cannot link -fsanitize=fuzzer; installing libclang-rt-$major-dev" >&2
  as_root apt-get update -qq
  as_root apt-get install -y -qq "libclang-rt-$major-dev" >/dev/null
  "$cxx" -fsanitize=fuzzer,address,undefined "$probe" -o "$probe_dir/probe"
fi

# nlohmann/json headers: the system's, else the project's staged copy (.deps).
# (The system include directories are searched anyway; naming /usr/include with -isystem would
# reorder them and break libstdc++'s #include_next <stdlib.h>.)
json_flags=()
if [ -f /usr/include/nlohmann/json.hpp ] || [ -f /usr/local/include/nlohmann/json.hpp ]; then
  :
elif [ -f "$root/.deps/include/nlohmann/json.hpp" ]; then
  json_flags=(-isystem "$root/.deps/include")
else
  echo "fuzz: nlohmann/json.hpp not found (tools/install_deps.sh installs it)" >&2
  exit 2
fi

tokenizer_sources=("$root/src/tokenizer/tokenizer_json.cpp" "$root/src/tokenizer/bpe_tokenizer.cpp"
                   "$root/src/tokenizer/pretokenizer.cpp" "$root/src/tokenizer/unicode.cpp"
                   "$root/src/tokenizer/chat_template.cpp" "$root/src/common/json.cpp")
for target in "${targets[@]}"; do
  # Per target: the fuzz target, the parser's sources, the seed corpus, the dictionary and the
  # default time.
  target_seconds=30
  case "$target" in
    safetensors)
      source="$root/tests/fuzz/fuzz_safetensors_header.cpp"
      sources=("$root/src/model/safetensors.cpp" "$root/src/common/json.cpp")
      corpus="$root/tests/fuzz/corpus"
      dict="$root/tests/fuzz/safetensors.dict"
      target_seconds=60 ;;
    gguf)
      source="$root/tests/fuzz/fuzz_gguf_header.cpp"
      sources=("$root/src/model/gguf.cpp" "$root/src/model/gguf_dequant.cpp"
               "$root/src/model/gguf_tokenizer.cpp" "$root/src/common/quant_format.cpp"
               "$root/src/common/quant_dequant.cpp")
      corpus="$root/tests/fuzz/gguf_corpus"
      dict="$root/tests/fuzz/gguf.dict"
      target_seconds=60 ;;
    tokenizer)
      source="$root/tests/fuzz/fuzz_tokenizer_json.cpp"
      sources=("${tokenizer_sources[@]}")
      corpus="$root/tests/fuzz/tokenizer_corpus"
      dict="$root/tests/fuzz/tokenizer.dict" ;;
    tokenizer_config)
      source="$root/tests/fuzz/fuzz_tokenizer_config.cpp"
      sources=("${tokenizer_sources[@]}")
      corpus="$root/tests/fuzz/tokenizer_config_corpus"
      dict="$root/tests/fuzz/tokenizer.dict" ;;
    chat_template)
      source="$root/tests/fuzz/fuzz_chat_template.cpp"
      sources=("$root/src/tokenizer/chat_template.cpp")
      corpus="$root/tests/fuzz/chat_template_corpus"
      dict="$root/tests/fuzz/chat_template.dict" ;;
    quant_config)
      source="$root/tests/fuzz/fuzz_quant_config.cpp"
      sources=("$root/src/model/quantization_config.cpp" "$root/src/common/json.cpp"
               "$root/src/common/quant_format.cpp")
      corpus="$root/tests/fuzz/quant_config_corpus"
      dict="$root/tests/fuzz/quant_config.dict" ;;
  esac
  target_seconds="${seconds:-$target_seconds}"
  out="$root/build-fuzz-$target"
  mkdir -p "$out"
  bin="$out/fuzz_${target}"
  echo "fuzz($target): building $bin with $cxx" >&2
  "$cxx" -std=c++20 -O1 -g -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/src" "${json_flags[@]}" \
    "$source" \
    "${sources[@]}" \
    "$root/src/common/logging.cpp" \
    "$root/src/common/mapped_file.cpp" \
    "$root/src/common/input_file.cpp" \
    -o "$bin"

  work_corpus="$out/corpus"
  mkdir -p "$work_corpus"
  cp -n "$corpus"/* "$work_corpus"/ 2>/dev/null || true

  echo "fuzz($target): fuzzing for ${target_seconds}s" >&2
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:allocator_may_return_null=1" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
  "$bin" -max_total_time="$target_seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -dict="$dict" -artifact_prefix="$out/" -print_final_stats=1 \
    "$work_corpus" "$corpus"
  echo "fuzz($target): no findings in ${target_seconds}s" >&2
done
