#!/usr/bin/env bash
# The man pages cover the product as built: amon(8) has an entry for every
# command `amon --help` lists; amon.policy(5) lists every field and action
# of the registry (scripts/man-sync).
set -euo pipefail
amon=$1
src=$2
python3 "$src/scripts/man-sync" "$amon" "$src/packaging/amon.policy.5"
cmds=$("$amon" --help 2>&1 | awk '/^commands:/ { c = 1; next } c && /^  [a-z]+ / { print $1 }')
if [[ -z $cmds ]]; then
  echo "man_pages: no command read from amon --help"
  exit 1
fi
status=0
for c in $cmds; do
  if ! grep -q "^\.B $c\$" "$src/packaging/amon.8"; then
    echo "man_pages: amon(8) has no entry for the command '$c'"
    status=1
  fi
done
[[ $status == 0 ]] && echo "man_pages: amon(8) names every command ($(echo $cmds | wc -w))"
exit $status
