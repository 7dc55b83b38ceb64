#!/usr/bin/env bash
# The repository's docs stand alone: every relative link in a Markdown file (README, docs/,
# each crate's README) names a file or directory inside this repository. A link that climbs out
# of it (`../shared/…`, which only some machines have) or names a file that is gone fails,
# and so does a code-span path that climbs up (`` `../x` ``), the form a reader follows by hand;
# naming the file and the link. Links with a scheme (https:, mailto:) and in-page anchors are
# not checked here.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$(pwd -P)
status=0
checked=0
while IFS= read -r file; do
  dir=$(dirname "$file")
  # [text](target) and [text](target "title"): the target, without an #anchor.
  while IFS= read -r target; do
    [ -z "$target" ] && continue
    case "$target" in
      *://* | mailto:* | \#*) continue ;;
    esac
    path=${target%%#*}
    [ -z "$path" ] && continue
    checked=$((checked + 1))
    resolved=$(realpath -m "$dir/$path")
    case "$resolved" in
      "$top" | "$top"/*) ;;
      *)
        echo "FAIL $file: link $target leaves the repository" >&2
        status=1
        continue
        ;;
    esac
    if [ ! -e "$resolved" ]; then
      echo "FAIL $file: link $target names nothing in the repository" >&2
      status=1
    fi
  done < <(
    grep -oE '\]\([^) ]+' "$file" | sed 's/^](//' || true
    # A path in a code span that climbs up (`../x`) is a reference too, and the one a reader
    # follows by hand.
    grep -oE '`(\.\./)+[^` ]*`' "$file" | tr -d '`' || true
  )
done < <(git ls-files '*.md')
[ "$status" -eq 0 ] && echo "doc links: $checked relative links, each inside the repository"
exit "$status"
