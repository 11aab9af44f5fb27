#!/usr/bin/env bash
# Packs the committed tree (HEAD) into .snap/ (git-ignored via .git/info/exclude) so a device call
# builds exactly what is committed, whatever else sits uncommitted in the working tree:
#   device command: mkdir -p /tmp/src && tar -xzf .snap/src.tar.gz -C /tmp/src && cd /tmp/src && tools/gpu_check.sh build
#   carry: [".snap"]   (add ".deps" where the GPU machine lacks GoogleTest, nlohmann-json, CLI11)
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.snap/' .git/info/exclude 2>/dev/null || echo '/.snap/' >> .git/info/exclude
mkdir -p .snap
git rev-parse --short HEAD > .snap/COMMIT
# Without models/ (the shipped draft, 24.6 MB): builds and tests do not need it, and the working
# tree that travels with every call already holds it.
git archive HEAD -o .snap/src.tar -- . ':(exclude)models'
tar -rf .snap/src.tar --transform 's|^.snap/COMMIT$|.commit|' .snap/COMMIT
# Compressed (~7 MB instead of ~18): it shares a call's 64 MiB with the tree and a 32 MiB model part.
gzip -f -1 .snap/src.tar
echo "snapshot of $(cat .snap/COMMIT): $(du -h .snap/src.tar.gz | cut -f1)"
