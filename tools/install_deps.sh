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
# The server tests' client (tests/server): the official openai package, pinned, for the python3
# that CMake finds first on PATH. Where the system's Python is externally managed (PEP 668), pip
# is told to install anyway: the package is a test dependency, not part of the system.
openai_version="3.63.0"
if ! python3 -c "import openai, sys; sys.exit(openai.__version__ != '$openai_version')" \
  2>/dev/null; then
  echo "install_deps: python3 -m pip install openai==$openai_version" >&2
  python3 -m pip install --quiet "openai==$openai_version" 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages "openai==$openai_version"
fi
# tests/tools/test_quantize_folder.py reads `edgespec quantize`'s output with numpy (array basics
# only, stable across numpy releases, so any version the Python takes will do).
if ! python3 -c "import numpy" 2>/dev/null; then
  echo "install_deps: python3 -m pip install numpy" >&2
  python3 -m pip install --quiet numpy 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages numpy
fi
