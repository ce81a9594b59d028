#!/usr/bin/env bash
# Fails when engine/ (the runtime included) or dsl/ recognise an action, a field
# or a protocol by comparing its name with a string literal (`== "zanon"`,
# `"dns" != p`). Behaviour comes from the registry: an action's kind and
# flags (ActionDesc::kind, uses_zstore, protects), a field's id. A name
# compare is how a new or renamed action used to skip a branch unnoticed
# (e.g. become redact() on names), so it may live only in the action's or
# field's own plugin and in the registry.
#
# The names are read from the registry itself (`amon fields`, `amon
# actions`) and the protocol plugin folders, so a new one is covered at
# once. Listed below: compares of a word that is something else's name (a
# YAML section called like an action), each with its reason.
#
# usage: check_names.sh AMON_BINARY [REPO_ROOT]
set -euo pipefail
amon=${1:?usage: check_names.sh AMON_BINARY [REPO_ROOT]}
root=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"

names=$( { "$amon" fields | awk 'NR > 1 { print $1; split($1, p, "."); print p[1] }'
           "$amon" actions | awk 'NR > 1 { print $1 }'
           for d in plugins/*/; do
             case $(basename "$d") in core|builtin|actions|crypto|l2l4|names|template) ;; *) basename "$d" ;; esac
           done; } | sort -u | grep -E '^[a-z0-9_.]+$')
[[ -n $names ]] || { echo "check_names: no names from $amon"; exit 1; }
alt=$(echo "$names" | sed 's/\./\\./g' | paste -sd'|')
re="(==|!=)[[:space:]]*\"($alt)\"|\"($alt)\"[[:space:]]*(==|!=)"

# file: an extended regex of the lines allowed there, and why.
declare -A allowed=(
  # `amon whatif --field`: the option's words, off the packet path (a report
  # on the three domain-name fields it knows how to replay).
  [engine/whatif/whatif.cpp]='f == "(dns\.qname|tls\.sni|http\.host)"'
  # The YAML configuration's `zanon:` section (the store's size) and the
  # `rotate:` mapping's `keep:` key (how many files), not the actions.
  [engine/core/config.cpp]='k == "(zanon|keep)"'
  # The audit's own description of where a hit lies (the IP header's
  # source or destination), which it wrote itself, not a field lookup.
  [engine/audit/audit_search.cpp]='h\.context == "ip\.(src|dst)"'
)

fail=0
while IFS= read -r f; do
  while IFS= read -r hit; do
    line=${hit#*:}
    if [[ -n ${allowed[$f]:-} ]] && grep -qE "${allowed[$f]}" <<<"$line"; then continue; fi
    echo "$f:$hit"
    fail=1
  done < <(grep -nE "$re" "$f" || true)
done < <(find engine dsl -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.hpp' -o -name '*.y' -o -name '*.l' \) | sort)
if [[ $fail != 0 ]]; then
  echo "check_names: the lines above recognise an action, field or protocol by its name; use the registry's"
  echo "ids and properties (ActionDesc::kind and flags, FieldDesc::id) instead"
  exit 1
fi
echo "check_names: engine/ and dsl/ compare no action, field or protocol name ($(echo "$names" | wc -l) names)"
