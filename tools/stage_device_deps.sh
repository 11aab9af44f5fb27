#!/usr/bin/env bash
# Copies the header-only and static build dependencies (GoogleTest, nlohmann-json, CLI11) from this
# machine's Debian packages into .deps/ (git-ignored), laid out as an install prefix, so that a
# device call can carry them (`carry: [".deps"]`) to a GPU machine that cannot reach a registry.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
rm -rf .deps && mkdir -p .deps/include .deps/share/cmake .deps/lib/x86_64-linux-gnu/cmake
cp -r /usr/include/gtest /usr/include/gmock /usr/include/nlohmann /usr/include/CLI .deps/include/
cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 .deps/share/cmake/
cp -r /usr/lib/x86_64-linux-gnu/cmake/GTest .deps/lib/x86_64-linux-gnu/cmake/
cp /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a .deps/lib/x86_64-linux-gnu/
du -sh .deps
