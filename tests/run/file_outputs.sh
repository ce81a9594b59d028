#!/usr/bin/env bash
# `amon pcap` with several file outputs, each written by its own thread:
# every output holds every record in the order one output alone gets them,
# the report counts what reached each file, and a failing file (disk full)
# stops the run with its name and the error, exit 1, without hanging.
#   file_outputs.sh AMON AMON_GEN
set -euo pipefail
amon=$1
gen=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
mkdir keys && (umask 077 && printf '%064x\n' 5 > keys/k.key)
cat > p.amon <<'POL'
key k = file("keys/k.key")
eth.src, eth.dst : timestamp()
ip.src, ip.dst   : cryptopan(key=k)
POL
"$gen" --out in.pcap --seed 3 --packets 20000 > /dev/null
fail=0
bad() { echo "FAIL: $*"; fail=1; }

"$amon" pcap --read in.pcap --consumer one=p.amon:one.pcap --quiet --stats-json one.json 2> one.err
args=()
for c in 0 1 2 3; do args+=(--consumer "c$c=p.amon:c$c.pcap"); done
"$amon" pcap --read in.pcap "${args[@]}" --quiet --stats-json four.json 2> four.err
[[ $(stat -c %s one.pcap) -gt 24 ]] || bad "one.pcap is empty"
for c in 0 1 2 3; do
  cmp -s one.pcap "c$c.pcap" || bad "c$c.pcap differs from the single output's file"
done
# Each writer reserves disk space ahead of its writes and must give back
# what it did not use: no more allocated than the file's bytes, to the
# block (a few blocks of slack for file systems that keep metadata there).
for f in one.pcap c0.pcap c3.pcap; do
  read -r size blocks bsize < <(stat -c '%s %b %B' "$f")
  (( blocks * bsize <= size + 65536 )) ||
    bad "$f: $((blocks * bsize)) bytes allocated for $size bytes (reserved space not released)"
done
python3 - one.json four.json <<'PY' || fail=1
import json, sys
for path in sys.argv[1:]:
    d = json.load(open(path))
    for c in d["consumers"]:
        if c["written"] != c["out"] or c["written"] == 0:
            print("FAIL: %s: consumer %s wrote %d of %d" % (path, c["name"], c["written"], c["out"]))
            sys.exit(1)
PY

# A full disk: /dev/full refuses every write with ENOSPC.
set +e
timeout 60 "$amon" pcap --read in.pcap --consumer ok=p.amon:ok.pcap --consumer full=p.amon:/dev/full --quiet \
  > full.out 2> full.err
rc=$?
set -e
[[ $rc == 1 ]] || bad "a full disk: exit $rc, expected 1"
grep -q "consumer 'full': output /dev/full: No space left on device" full.err ||
  bad "a full disk: no message naming the output and the error: $(tail -3 full.err)"

if [[ $fail == 0 ]]; then echo "file outputs: ok"; fi
exit $fail
