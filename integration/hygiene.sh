#!/usr/bin/env bash
# Fails when a tracked file is a compiled binary, or larger than 1 MiB
# without a reason given in .large-files ("<path> <reason>" per line).
# Build outputs belong in .gitignore, not in every clone.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
limit=$((1024 * 1024))
allowed() { [ -f .large-files ] && awk -v p="$1" '$1 == p && NF > 1 { f = 1 } END { exit !f }' .large-files; }
bad=0
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue
  magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
  case "$magic" in
    7f454c46|cffaedfe|cefaedfe|feedface|feedfacf|4d5a*)
      echo "hygiene: $f is a compiled binary; add it to .gitignore and git rm --cached it" >&2; bad=1; continue ;;
  esac
  size=$(stat -c %s "$f")
  if [ "$size" -gt "$limit" ] && ! allowed "$f"; then
    echo "hygiene: $f is $size bytes (over 1 MiB) with no reason in .large-files" >&2; bad=1
  fi
done < <(git ls-files -z)
exit "$bad"
