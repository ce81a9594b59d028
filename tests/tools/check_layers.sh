#!/usr/bin/env bash
# The tree's layers, bottom to top, and what each may use:
#
#   plugins/          the plugin API (core, crypto, names, actions, builtin) and
#                     the protocol plugins: nothing of ours above it
#   dsl/              the policy language: plugins/
#   engine/zanon/     the z-anonymity store: plugins/core (SipHash)
#   engine/pcapio/    reading captures: nothing of ours (libpcap, zlib)
#   engine/share/     sharing the store with other boxes (NATS): plugins/, engine/zanon/
#   engine/runtime/   the policy interpreter: plugins/, dsl/, engine/zanon/
#   engine/audit/     amon audit: plugins/, dsl/, engine/pcapio/ (never the runtime it audits)
#   engine/core/      EAL, ports, workers: everything below
#   engine/whatif/, engine/main.cpp, engine/map.*: everything
#
# Two checks:
# 1. Direction: every `#include "x"` of a file resolves to a header in a folder
#    its layer may use, and no CMakeLists.txt links a library of a layer above
#    its own. Includes are flat (the folder is not in the include), so the
#    header's folder is looked up by name; a header name defined in two
#    folders fails too, since the lookup would be ambiguous.
# 2. Protocol names: no file under engine/ or dsl/ names a protocol plugin
#    (its namespace dns::, tls::, ... or its header amon_<plugin>.hpp).
#    Protocols are reached through the registry and the plugin interface.
#
# usage: check_layers.sh [REPO_ROOT]
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"

fail=0

# --- 1. Direction -----------------------------------------------------------
# The layer a source folder belongs to.
layer_of() {
  case $1 in
    plugins/*) echo plugins ;;
    dsl/*) echo dsl ;;
    engine/zanon/*) echo zanon ;;
    engine/pcapio/*) echo pcapio ;;
    engine/share/*) echo share ;;
    engine/runtime/*) echo runtime ;;
    engine/audit/*) echo audit ;;
    engine/core/*) echo core ;;
    engine/whatif/* | engine/main.cpp | engine/map.* | engine/CMakeLists.txt) echo top ;;
    *) echo other ;;
  esac
}
# What each layer may include or link (its own layer included).
declare -A may=(
  [plugins]="plugins"
  [dsl]="plugins dsl"
  [zanon]="plugins zanon"
  [share]="plugins zanon share"
  [runtime]="plugins dsl zanon runtime"
  [pcapio]="pcapio"
  [audit]="plugins dsl pcapio audit"
  [core]="plugins dsl zanon share runtime pcapio core"
  [top]="plugins dsl zanon share runtime pcapio audit core top"
)
# Header name -> layer, and library target -> layer.
declare -A hdr_layer=() lib_layer=()
while IFS= read -r h; do
  b=$(basename "$h"); l=$(layer_of "$h")
  if [[ -n ${hdr_layer[$b]:-} && ${hdr_layer[$b]} != "$l" ]]; then
    echo "$h: the header name $b is also in the ${hdr_layer[$b]} layer: includes are flat, so names must be unique"
    fail=1
  fi
  hdr_layer[$b]=$l
done < <(find plugins dsl engine -type f \( -name '*.h' -o -name '*.hpp' \) | sort)
while IFS= read -r c; do
  l=$(layer_of "$c")
  for t in $(grep -oE 'add_library\(\s*[a-z_0-9]+' "$c" | sed -E 's/add_library\(\s*//'); do lib_layer[$t]=$l; done
done < <(find plugins dsl engine -name CMakeLists.txt | sort)
lib_layer[amon]=top

allowed_in() { [[ " ${may[$1]} " == *" $2 "* ]]; }

# One grep over every source: "file:header" per quoted include.
while IFS=: read -r f inc; do
  l=$(layer_of "$f")
  [[ $l == other ]] && continue
  inc=${inc##*/}
  hl=${hdr_layer[$inc]:-}
  [[ -z $hl ]] && continue   # generated (parser.hpp) or a system header in quotes
  if ! allowed_in "$l" "$hl"; then
    echo "$f includes $inc of the $hl layer: the $l layer may use only: ${may[$l]}"
    fail=1
  fi
done < <(find plugins dsl engine -type f \( -name '*.cpp' -o -name '*.c' -o -name '*.h' -o -name '*.hpp' -o -name '*.y' -o -name '*.l' \) -print0 \
           | xargs -0 grep -HoE '^\s*#\s*include\s+"[^"]+"' | sed -E 's/^([^:]+):.*"([^"]+)".*/\1:\2/' | sort)

while IFS= read -r c; do
  l=$(layer_of "$c")
  for t in $(sed -n '/target_link_libraries/,/)/p' "$c" | grep -oE '\bamon_[a-z_0-9]+\b' | sort -u); do
    tl=${lib_layer[$t]:-}
    [[ -z $tl ]] && continue
    if ! allowed_in "$l" "$tl"; then
      echo "$c links $t of the $tl layer: the $l layer may use only: ${may[$l]}"
      fail=1
    fi
  done
done < <(find plugins dsl engine -name CMakeLists.txt | sort)

# --- 2. Protocol names ------------------------------------------------------
# Protocol plugins: folders under plugins/ with a parser of their own; the
# others are the shared API.
plugins=()
for d in plugins/*/; do
  p=$(basename "$d")
  case $p in core|builtin|actions|crypto|l2l4|names|template) continue ;; esac
  plugins+=("$p")
done
alt=$(IFS='|'; echo "${plugins[*]}")
while IFS= read -r hit; do
  echo "$hit: names a protocol plugin (its namespace or header): reach it through the registry and the plugin interface"
  fail=1
done < <(find engine dsl -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.hpp' -o -name '*.y' -o -name '*.l' \) -print0 \
           | xargs -0 grep -HnoE "\\b($alt)::|amon_($alt)\\.hpp" | sort)

[[ $fail == 0 ]] && echo "check_layers: includes and links point down the layers; engine/ and dsl/ name no protocol plugin"
exit $fail
