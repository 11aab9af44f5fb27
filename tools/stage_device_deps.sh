#!/usr/bin/env bash
# Copies the build dependencies (GoogleTest, nlohmann-json, CLI11, cpp-httplib) from this machine's
# Debian packages into .deps/ (git-ignored), laid out as an install prefix, so that a device call
# can carry them (`carry: [".deps"]`) to a GPU machine that cannot reach a registry.
# cpp-httplib is a shared library built with OpenSSL, zlib and brotli: its header includes theirs
# (copied too; OpenSSL's per-architecture headers merged into include/openssl), and the GPU machine
# may lack the brotli libraries, so those come along (libssl3 and zlib are on every Ubuntu).
# CMake finds all of it in .deps (cmake/FindHttplib.cmake); binaries get an RPATH to .deps/lib.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
rm -rf .deps && mkdir -p .deps/include .deps/share/cmake .deps/lib/x86_64-linux-gnu/cmake
cp -r /usr/include/gtest /usr/include/gmock /usr/include/nlohmann /usr/include/CLI .deps/include/
cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 .deps/share/cmake/
cp -r /usr/lib/x86_64-linux-gnu/cmake/GTest .deps/lib/x86_64-linux-gnu/cmake/
cp /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a .deps/lib/x86_64-linux-gnu/
cp /usr/include/httplib.h /usr/include/zlib.h /usr/include/zconf.h .deps/include/
cp -r /usr/include/openssl /usr/include/brotli .deps/include/
cp /usr/include/x86_64-linux-gnu/openssl/*.h .deps/include/openssl/
cp -P /usr/lib/x86_64-linux-gnu/libcpp-httplib.so* /usr/lib/x86_64-linux-gnu/libbrotlicommon.so.1* \
  /usr/lib/x86_64-linux-gnu/libbrotlidec.so.1* /usr/lib/x86_64-linux-gnu/libbrotlienc.so.1* \
  .deps/lib/x86_64-linux-gnu/
du -sh .deps
