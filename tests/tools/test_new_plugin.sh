#!/usr/bin/env bash
# scripts/new-plugin into a scratch tree: the plugin and its test appear
# under the new name, no trace of the template's name is left, and the
# plugin's sources compile against the plugin API. (The full build and the
# skeleton's own test are what tests/plugins/template runs for the
# template itself.)
# usage: test_new_plugin.sh SOURCE_DIR CXX
set -euo pipefail
src=$1
cxx=${2:-c++}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$src/scripts/new-plugin" demo "$work"
for f in plugins/demo/{CMakeLists.txt,README.md,amon_demo.hpp,demo.cpp,plugin.cpp} \
         tests/plugins/demo/{CMakeLists.txt,test_demo.cpp}; do
  [[ -s $work/$f ]] || fail "$f missing"
done
if grep -rn template "$work"; then fail "the template's name is left"; fi
grep -q 'add_library(amon_demo ' "$work/plugins/demo/CMakeLists.txt" || fail "no amon_demo library"
grep -q '"demo.host"' "$work/plugins/demo/plugin.cpp" || fail "no demo.host field"
grep -q 'namespace amon::demo_plugin' "$work/plugins/demo/plugin.cpp" || fail "no amon::demo_plugin namespace"
# A second run refuses to overwrite; a bad name is refused.
if "$src/scripts/new-plugin" demo "$work" 2>/dev/null; then fail "overwrote plugins/demo"; fi
if "$src/scripts/new-plugin" Bad-Name "$work" 2>/dev/null; then fail "accepted Bad-Name"; fi
for f in demo.cpp plugin.cpp; do
  "$cxx" -std=c++20 -fsyntax-only -Wall -Werror -I "$src/plugins/core" -I "$src/plugins/names" \
    -I "$work/plugins/demo" "$work/plugins/demo/$f" || fail "plugins/demo/$f does not compile"
done
echo "ok: scripts/new-plugin demo made a plugin that compiles and its test"
