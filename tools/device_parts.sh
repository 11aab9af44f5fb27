#!/usr/bin/env bash
# Moves a file too big for one device call (each call carries at most 64 MiB of ignored paths)
# to the GPU machine in parts of at most 60 MiB, under the git-ignored folder .devparts/.
#
#   tools/device_parts.sh split FILE [NAME]   here: .devparts/NAME/part-000, part-001, ... and
#                                             .devparts/NAME/SHA256 (NAME: FILE's base name)
#   tools/device_parts.sh join NAME [DEST]    there: concatenates the parts into DEST (default
#                                             .devparts/NAME/NAME), checks size and sha256, prints DEST
#   tools/device_parts.sh list NAME           the paths to carry, one a line (one call each)
#
# The machine keeps ignored paths between calls while it stays warm, so carry one part per call
# (the first together with SHA256), then run `join` in the call that needs the file.
set -euo pipefail
cd "$(dirname "$0")/.."
root=.devparts
# PART_MIB: part size (default 60); the whole working tree counts towards a call's 64 MiB too
# (~45 MB since models/ holds the default model's draft: use PART_MIB=16).
part_bytes=$((${PART_MIB:-60} * 1024 * 1024))

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

cmd="${1:-}"
case "$cmd" in
  split)
    file="${2:-}"
    [ -f "$file" ] || { echo "device_parts: split: argument FILE = '$file' is not a file" >&2; exit 2; }
    name="${3:-$(basename "$file")}"
    case "$name" in */* | .* | "") echo "device_parts: NAME = '$name' must be a plain file name" >&2; exit 2 ;; esac
    dir="$root/$name"
    rm -rf "$dir" && mkdir -p "$dir"
    split -b "$part_bytes" -d -a 3 "$file" "$dir/part-"
    # Size and hash of the whole file, checked by join.
    echo "$(sha256sum < "$file" | cut -d' ' -f1) $(stat -c %s "$file")" > "$dir/SHA256"
    ls -1 "$dir"/part-* | while read -r p; do echo "$p ($(stat -c %s "$p") bytes)"; done >&2
    echo "device_parts: $file -> $dir ($(ls "$dir"/part-* | wc -l) parts of at most $((part_bytes >> 20)) MiB)" >&2
    ;;
  list)
    name="${2:-}"
    [ -d "$root/$name" ] || { echo "device_parts: list: no $root/$name (split first)" >&2; exit 2; }
    echo "$root/$name/SHA256"
    ls -1 "$root/$name"/part-*
    ;;
  join)
    name="${2:-}"
    dir="$root/$name"
    dest="${3:-$dir/$name}"
    [ -f "$dir/SHA256" ] || { echo "device_parts: join: $dir/SHA256 is missing (carry it with the first part)" >&2; exit 1; }
    read -r want_sha want_size < "$dir/SHA256"
    parts=("$dir"/part-*)
    [ -e "${parts[0]}" ] || { echo "device_parts: join: no parts in $dir" >&2; exit 1; }
    # Parts are numbered without gaps: a missing one means a call did not carry it.
    for ((i = 0; i < ${#parts[@]}; i++)); do
      expect=$(printf '%s/part-%03d' "$dir" "$i")
      [ "${parts[$i]}" = "$expect" ] || { echo "device_parts: join: $expect is missing" >&2; exit 1; }
    done
    cat "${parts[@]}" > "$dest.tmp"
    got_size=$(stat -c %s "$dest.tmp")
    got_sha=$(sha256sum < "$dest.tmp" | cut -d' ' -f1)
    if [ "$got_size" != "$want_size" ] || [ "$got_sha" != "$want_sha" ]; then
      rm -f "$dest.tmp"
      echo "device_parts: join: $name has $got_size bytes sha256 $got_sha, expected $want_size bytes" \
           "sha256 $want_sha (a part is missing or stale)" >&2
      exit 1
    fi
    mv "$dest.tmp" "$dest"
    echo "$dest"
    ;;
  *) usage ;;
esac
