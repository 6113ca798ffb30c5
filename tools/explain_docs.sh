#!/usr/bin/env bash
# Regenerates the `collie explain` excerpts of docs/algorithms.md: every
# fenced block that follows a line "<!-- collie explain ARGS -->" becomes
# the output of `collie explain ARGS`. A test (cli_explain_test) fails when
# the page and the command disagree; run this after changing either.
#   tools/explain_docs.sh [path/to/collie]   (default: build/release/bin/collie)
set -euo pipefail
cd "$(dirname "$0")/.."
collie=${1:-build/release/bin/collie}
[ -x "$collie" ] || { echo "explain_docs: build collie first (cmake --build --preset release)" >&2; exit 1; }
doc=docs/algorithms.md
out=$(mktemp)
trap 'rm -f "$out"' EXIT
state=text  # text | want_fence | in_block
while IFS= read -r line || [ -n "$line" ]; do
  case $state in
    text)
      printf '%s\n' "$line" >>"$out"
      if [[ $line =~ ^\<!--\ collie\ explain\ (.*)\ --\>$ ]]; then
        args=${BASH_REMATCH[1]}
        state=want_fence
      fi
      ;;
    want_fence)
      [ "$line" = '```text' ] || { echo "explain_docs: no \`\`\`text block after 'collie explain $args'" >&2; exit 1; }
      printf '%s\n' "$line" >>"$out"
      # shellcheck disable=SC2086  # the arguments are words, as written in the page
      "$collie" explain $args --color never >>"$out"
      state=in_block
      ;;
    in_block)
      if [ "$line" = '```' ]; then
        printf '%s\n' "$line" >>"$out"
        state=text
      fi
      ;;
  esac
done <"$doc"
[ "$state" = text ] || { echo "explain_docs: unterminated block in $doc" >&2; exit 1; }
cp "$out" "$doc"
echo "explain_docs: $doc updated"
