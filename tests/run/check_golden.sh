#!/usr/bin/env bash
# amon check on good and broken configurations: its summary, its messages
# and its exit status against tests/run/check/NAME.expected. It must start
# nothing and write nothing: the folder holds the same files afterwards.
# AMON_UPDATE_GOLDENS=1 rewrites the expected files.
set -euo pipefail
amon=$1
src=$(cd "$(dirname "$0")/check" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$src"/*.yaml "$src"/*.amon "$work"/
cd "$work"
# Keys: git keeps no file modes, so they are made here (one private, one not).
printf '%064x\n' 7 > k.key && chmod 600 k.key
printf '%064x\n' 9 > open.key && chmod 644 open.key
# A capture header is all `check` looks at (it reads no packet).
python3 -c 'import struct,sys; sys.stdout.buffer.write(struct.pack("<IHHiIII",0xa1b2c3d4,2,4,0,0,65535,1))' > in.pcap
ln in.pcap link.pcap
before=$(ls -lA --time-style=+%s . | sort)
fail=0
for y in good outputs policies typo program mistakes; do
  set +e
  "$amon" check --config "$y.yaml" > "$y.out" 2>&1
  rc=$?
  set -e
  echo "exit $rc" >> "$y.out"
  if [[ ${AMON_UPDATE_GOLDENS:-0} == 1 ]]; then
    cp "$y.out" "$src/$y.expected"
  elif ! diff -u "$src/$y.expected" "$y.out"; then
    echo "FAIL: amon check --config $y.yaml differs from $y.expected"
    fail=1
  fi
  rm "$y.out"
done
after=$(ls -lA --time-style=+%s . | sort)
if [[ "$before" != "$after" ]]; then
  echo "FAIL: amon check changed the folder"; diff <(echo "$before") <(echo "$after") || true
  fail=1
fi
# amon run --check is the same check.
"$amon" run --check --config good.yaml > /dev/null 2>&1 || { echo "FAIL: amon run --check on good.yaml"; fail=1; }
exit $fail
