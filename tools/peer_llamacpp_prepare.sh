#!/usr/bin/env bash
# Prepares llama.cpp's source for the GPU machine (no network there): the tree vendored by the
# llama-cpp-python 0.3.36 sdist (llama.cpp 0c1e57098), pruned to what llama-server,
# llama-bench, llama-speculative-simple and llama-quantize need on CPU and CUDA, plus gguf-py,
# convert_hf_to_gguf.py and the Qwen2/3 vocab GGUF (tools/hf_to_gguf.py's tokenizer).
#
#   tools/peer_llamacpp_prepare.sh [--check] [--build-server] [DEST]     DEST default .peer
#
# Writes DEST/llama.cpp/ (the pruned tree) and DEST/llama.cpp.tar.gz (the same, ~7 MB: what a
# device call carries; tools/serve_bench.sh unpacks it there). --check configures the pruned
# tree CPU-only into a temporary folder (catches a prune that broke a CMakeLists);
# --build-server also builds llama-server there (minutes on 2 cores).
# The sdist: $ES_LLAMA_SDIST, else ~/.cache/edgespec/, else /tmp/cpuprefill_llama/, else
# `pip download` (sha256-checked in every case).
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
commit=0c1e57098
sdist_name="llama_cpp_python-$version.tar.gz"

check=0 build_server=0 dest=.peer
for a in "$@"; do
  case "$a" in
    --check) check=1 ;;
    --build-server) check=1 build_server=1 ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "peer_llamacpp_prepare: unknown option '$a' (--check, --build-server)" >&2; exit 2 ;;
    *) dest=$a ;;
  esac
done

sdist=${ES_LLAMA_SDIST:-}
if [ -z "$sdist" ]; then
  for d in "$HOME/.cache/edgespec" /tmp/cpuprefill_llama; do
    [ -f "$d/$sdist_name" ] && { sdist=$d/$sdist_name; break; }
  done
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "$sdist" ]; then
  echo "peer_llamacpp_prepare: pip download llama-cpp-python==$version (sdist)" >&2
  python3 -m pip download --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$version" >&2
  sdist=$work/$sdist_name
fi
if [ ! -f "$sdist" ]; then
  echo "peer_llamacpp_prepare: ES_LLAMA_SDIST = '$sdist' is not a file" >&2
  exit 1
fi
actual=$(sha256sum "$sdist" | cut -d' ' -f1)
if [ "$actual" != "$sha256" ]; then
  echo "peer_llamacpp_prepare: $sdist has sha256 $actual, expected $sha256" >&2
  exit 1
fi

tar -xzf "$sdist" -C "$work" "llama_cpp_python-$version/vendor/llama.cpp"
t=$work/llama_cpp_python-$version/vendor/llama.cpp
(
  cd "$t"
  # Documentation, tests, CI, web UI sources (LLAMA_USE_PREBUILT_UI=OFF embeds no UI), media.
  rm -rf .git .github .devops docs tests benches media ci skills tools/ui/src tools/ui/tests \
    build build-* AGENTS.md CLAUDE.md
  # Vocab GGUFs and their test vectors, except the Qwen2/3 vocabulary.
  find models -type f ! -name ggml-vocab-qwen2.gguf -delete
  # Examples: only speculative-simple (the DFlash peer); the list in examples/CMakeLists.txt
  # goes with them.
  find examples -mindepth 1 -maxdepth 1 ! -name speculative-simple ! -name CMakeLists.txt \
    -exec rm -rf {} +
  sed -i '/add_subdirectory(/{/speculative-simple/!d}' examples/CMakeLists.txt
  # ggml backends other than CPU and CUDA (each is add_subdirectory'd only when enabled).
  for b in ggml/src/ggml-*/; do
    case "$(basename "$b")" in ggml-cpu | ggml-cuda) ;; *) rm -rf "$b" ;; esac
  done
  # No .git: build info names the vendored commit instead of asking git (which would find the
  # surrounding edgespec checkout on the device).
  sed -i -e "s/^set(BUILD_COMMIT \"unknown\")/set(BUILD_COMMIT \"$commit\")/" \
    -e 's/^if(Git_FOUND)$/if(FALSE)  # commit fixed above/' cmake/build-info.cmake
)
grep -q 'add_subdirectory(speculative-simple)' "$t/examples/CMakeLists.txt" ||
  { echo "peer_llamacpp_prepare: examples/CMakeLists.txt lost speculative-simple" >&2; exit 1; }
grep -q "BUILD_COMMIT \"$commit\"" "$t/cmake/build-info.cmake" ||
  { echo "peer_llamacpp_prepare: cmake/build-info.cmake was not patched" >&2; exit 1; }
echo "llama-cpp-python $version, llama.cpp $commit, pruned by tools/peer_llamacpp_prepare.sh" \
  >"$t/PRUNED"

mkdir -p "$dest"
rm -rf "$dest/llama.cpp"
mv "$t" "$dest/llama.cpp"
# Reproducible (names sorted, fixed times and owners, no gzip time stamp): preparing again gives
# the same file, so a warm device machine keeps its unpacked tree and build.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - -C "$dest" llama.cpp |
  gzip -n >"$dest/llama.cpp.tar.gz"
echo "peer_llamacpp_prepare: $dest/llama.cpp ($(du -sh "$dest/llama.cpp" | cut -f1)), " \
  "$dest/llama.cpp.tar.gz ($(du -h "$dest/llama.cpp.tar.gz" | cut -f1))" >&2

if [ "$check" = 1 ]; then
  b=$work/build
  echo "peer_llamacpp_prepare: configuring the pruned tree (CPU only) in $b" >&2
  cmake -S "$dest/llama.cpp" -B "$b" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF \
    -DGGML_CCACHE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    >"$work/cmake.log" 2>&1 || { tail -30 "$work/cmake.log" >&2; exit 1; }
  echo "peer_llamacpp_prepare: configure ok" >&2
  if [ "$build_server" = 1 ]; then
    cmake --build "$b" --target llama-server llama-speculative-simple -j "$(nproc)" \
      >"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; exit 1; }
    "$b/bin/llama-server" --version 2>&1 | head -3 >&2
    echo "peer_llamacpp_prepare: llama-server and llama-speculative-simple build (CPU)" >&2
  fi
fi
case "$dest" in
  .peer | ./.peer) echo "peer_llamacpp_prepare: keep it out of git:" \
    "echo /.peer/ >> .git/info/exclude;" \
    "a device call carries .peer/llama.cpp.tar.gz (not .peer: the unpacked tree and its build" \
    "stay on a warm machine)" >&2 ;;
esac
