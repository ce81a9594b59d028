#!/usr/bin/env bash
# Fails when a file under engine/, dsl/ or plugins/runtime/ names a protocol
# plugin: its namespace (dns::, tls::, http::, quic::, dhcp::, or any other
# plugin folder's) or its header (amon_<plugin>.hpp). Protocols are reached
# through the registry and their plugin's interface, so the engine, the
# language and the runtime stay protocol-agnostic.
#
# No file is listed: every application runs behind the plugin interface.
# The list below may only shrink; a new file or a new plugin in a listed
# file fails the check.
#
# usage: check_layers.sh [REPO_ROOT]
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"

# Protocol plugins: folders under plugins/ with a parser of their own.
# core, builtin, runtime, actions, crypto, l2l4 and names are shared layers.
plugins=()
for d in plugins/*/; do
  p=$(basename "$d")
  case $p in core|builtin|runtime|actions|crypto|l2l4|names) continue ;; esac
  plugins+=("$p")
done

# No file is listed: the tools that read a capture's values off the packet
# path (amon audit, amon whatif) do so through the plugins' own parses
# (plugins/core/values.h).
declare -A allowed=()

fail=0
while IFS= read -r f; do
  for p in "${plugins[@]}"; do
    if grep -qE "\\b${p}::|amon_${p}\\.hpp" "$f"; then
      case " ${allowed[$f]:-} " in
        *" $p "*) ;;
        *) echo "$f names the $p plugin (${p}:: or amon_${p}.hpp): reach it through the registry and the plugin interface"; fail=1 ;;
      esac
    fi
  done
done < <(find engine dsl plugins/runtime -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.hpp' -o -name '*.y' -o -name '*.l' \) | sort)
[[ $fail == 0 ]] && echo "check_layers: engine/, dsl/ and plugins/runtime/ name no protocol plugin"
exit $fail
