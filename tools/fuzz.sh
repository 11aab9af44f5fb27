#!/usr/bin/env bash
# Fuzzes the file-format parsers with libFuzzer + ASan + UBSan for a bounded time each.
#
#   tools/fuzz.sh [safetensors] [gguf] [SECONDS]    (default: both, 60 s each; or FUZZ_SECONDS)
#
# Builds tests/fuzz/fuzz_<target>_header.cpp with clang++ directly (the main CMake build does
# not need clang), then runs it over a scratch copy of the target's seed corpus (new inputs stay
# out of the repository). Exits non-zero on a crash, sanitizer report, leak or timeout; the
# reproducer is left in build-fuzz-<target>/ as crash-*/leak-*/timeout-*.
# Installs clang with apt-get when no clang++ is found (needs root or sudo).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
targets=()
seconds="${FUZZ_SECONDS:-60}"
for arg in "$@"; do
  case "$arg" in
    safetensors | gguf) targets+=("$arg") ;;
    *[!0-9]* | "") echo "usage: tools/fuzz.sh [safetensors] [gguf] [SECONDS]" >&2; exit 2 ;;
    *) seconds=$arg ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(safetensors gguf)
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

for target in "${targets[@]}"; do
  # Per target: the parser's sources, the seed corpus and the dictionary.
  case "$target" in
    safetensors)
      sources=("$root/src/model/safetensors.cpp" "$root/src/common/json.cpp")
      corpus="$root/tests/fuzz/corpus"
      dict="$root/tests/fuzz/safetensors.dict" ;;
    gguf)
      sources=("$root/src/model/gguf.cpp" "$root/src/model/gguf_dequant.cpp"
               "$root/src/model/gguf_tokenizer.cpp")
      corpus="$root/tests/fuzz/gguf_corpus"
      dict="$root/tests/fuzz/gguf.dict" ;;
  esac
  out="$root/build-fuzz-$target"
  mkdir -p "$out"
  bin="$out/fuzz_${target}_header"
  echo "fuzz($target): building $bin with $cxx" >&2
  "$cxx" -std=c++20 -O1 -g -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/src" "${json_flags[@]}" \
    "$root/tests/fuzz/fuzz_${target}_header.cpp" \
    "${sources[@]}" \
    "$root/src/common/logging.cpp" \
    "$root/src/common/mapped_file.cpp" \
    "$root/src/common/input_file.cpp" \
    -o "$bin"

  work_corpus="$out/corpus"
  mkdir -p "$work_corpus"
  cp -n "$corpus"/* "$work_corpus"/ 2>/dev/null || true

  echo "fuzz($target): fuzzing for ${seconds}s" >&2
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:allocator_may_return_null=1" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -dict="$dict" -artifact_prefix="$out/" -print_final_stats=1 \
    "$work_corpus" "$corpus"
  echo "fuzz($target): no findings in ${seconds}s" >&2
done
