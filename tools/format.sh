#!/usr/bin/env bash
# clang-format over the C++/CUDA sources (src/ tests/ bench/: *.h *.cuh *.cu *.cpp; not
# tests/data/ nor src/tokenizer/unicode_tables.h, whose layout tools/gen_unicode_tables.py
# owns), with the style in .clang-format and Debian bookworm's clang-format 14: another major
# version formats differently, so it is refused.
#
#   tools/format.sh --check   lists every file that is not formatted (one violation each), exits 1
#                             if any (tools/run_tests.sh runs this before the build)
#   tools/format.sh           formats them in place
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-fix}
case "$mode" in
  --check | fix) ;;
  *) echo "usage: tools/format.sh [--check]" >&2; exit 2 ;;
esac
cf=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$cf" ]; then
  echo "format: no clang-format (tools/install_deps.sh installs it)" >&2
  exit 2
fi
version=$("$cf" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [ "$version" != 14 ]; then
  echo "format: $cf is version $version; the tree is formatted with clang-format 14" >&2
  exit 2
fi
files=$(find src tests bench -type f \( -name '*.h' -o -name '*.cuh' -o -name '*.cu' -o \
          -name '*.cpp' \) -not -path 'tests/data/*' -not -path src/tokenizer/unicode_tables.h |
        LC_ALL=C sort)
jobs=$(nproc)
if [ "$mode" = fix ]; then
  xargs -P "$jobs" -n 16 "$cf" -i <<<"$files"
  exit 0
fi
# One process per 16 files, all cores; --dry-run prints a file's first violation as a warning.
report=$(xargs -P "$jobs" -n 16 "$cf" --dry-run --ferror-limit=1 2>&1 <<<"$files" | grep -E \
  '^[^ ].*: (warning|error):' || true)
if [ -n "$report" ]; then
  echo "$report"
  echo "format: $(wc -l <<<"$report") file(s) not clang-formatted; tools/format.sh formats them" >&2
  exit 1
fi
echo "format: $(wc -l <<<"$files") files ok"
