#!/usr/bin/env bash
# Fetches llama.cpp's tokenizer test vectors (ggml-vocab-{qwen2,gpt-2,llama-bpe}.gguf and their
# .inp/.out) for tests/tokenizer/test_tokenizer_vectors. They ship in the llama-cpp-python source
# distribution on PyPI (vendor/llama.cpp/models/); the sdist is pinned by version and sha256 and
# the vocabularies are never committed.
#
#   tools/fetch_tokenizer_vectors.sh [DEST]     DEST default: <repo>/build-vectors/tokenizer
#
# Environment: ES_LLAMA_CPP_SDIST=/path/to/llama_cpp_python-0.3.36.tar.gz uses a local copy of the
# sdist (still sha256-checked) instead of downloading. Idempotent: does nothing when DEST already
# holds every file.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$repo/build-vectors/tokenizer}"
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
sdist_name="llama_cpp_python-$version.tar.gz"
vocabs=(qwen2 gpt-2 llama-bpe)

files=()
for v in "${vocabs[@]}"; do
  for ext in "" .inp .out; do files+=("ggml-vocab-$v.gguf$ext"); done
done
missing=0
for f in "${files[@]}"; do [ -s "$dest/$f" ] || missing=1; done
if [ "$missing" = 0 ]; then
  exit 0
fi

mkdir -p "$dest"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -n "${ES_LLAMA_CPP_SDIST:-}" ]; then
  sdist="$ES_LLAMA_CPP_SDIST"
else
  # pip prepares the sdist metadata, which brings its build backend into an isolated env.
  echo "fetch_tokenizer_vectors: pip download llama-cpp-python==$version (sdist)" >&2
  python3 -m pip download --quiet --no-deps --no-binary :all: \
    -d "$work" "llama-cpp-python==$version" >&2
  sdist="$work/$sdist_name"
fi
[ -f "$sdist" ] || { echo "fetch_tokenizer_vectors: $sdist not found" >&2; exit 1; }
actual="$(sha256sum "$sdist" | cut -d' ' -f1)"
if [ "$actual" != "$sha256" ]; then
  echo "fetch_tokenizer_vectors: sha256 mismatch for $sdist: $actual, expected $sha256" >&2
  exit 1
fi
prefix="llama_cpp_python-$version/vendor/llama.cpp/models"
members=()
for f in "${files[@]}"; do members+=("$prefix/$f"); done
tar -xzf "$sdist" -C "$work" "${members[@]}"
for f in "${files[@]}"; do mv "$work/$prefix/$f" "$dest/$f"; done
echo "fetch_tokenizer_vectors: ${#files[@]} files in $dest" >&2
