#!/usr/bin/env bash
# Installs what edgespec builds with on a fresh Debian/Ubuntu machine (apt-get), and puts the CUDA
# toolkit on PATH when it is installed under /usr/local/cuda. Idempotent and quiet when all is there.
set -euo pipefail
# clang-format-14: what Debian bookworm's clang-format package installs, and the version
# tools/format.sh requires (named, so releases whose default clang-format is newer get 14 too).
# libcpp-httplib-dev: `edgespec serve`'s HTTP server (a shared library built with OpenSSL, zlib
# and brotli, whose headers its header includes).
packages=(cmake ninja-build g++ libgtest-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev python3
          clang-format-14 libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "install_deps: apt-get install ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
