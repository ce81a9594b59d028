#!/usr/bin/env bash
# amon run on a multi-queue vdev (net_null: symmetric RSS queues polled by the
# workers themselves, one Tx queue per worker on the output): the run must
# stop cleanly on SIGINT (exit 0, report written) and its counts must add up.
# This path once hung: the main lcore waited for packets it never dispatched.
set -euo pipefail
amon=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'eth.src, eth.dst : timestamp()\n' > "$work/p.amon"
cat > "$work/amon.yaml" <<YAML
workers: 2
inputs:
  - port: net_null0
consumers:
  - name: a
    policy: p.amon
    output: { port: net_null1 }
YAML
"$amon" run --config "$work/amon.yaml" --stats-json "$work/s.json" --quiet -- --file-prefix=amonrss$$ 2>"$work/err" &
pid=$!
# Packets flow once it has started (a loaded machine may take seconds to get there).
for _ in $(seq 300); do grep -q "amon: started" "$work/err" 2>/dev/null && break; sleep 0.1; done
sleep 1
kill -INT "$pid"
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then
  kill -9 "$pid"
  echo "FAIL: amon run did not stop within 5 s of SIGINT"
  exit 1
fi
wait "$pid" || { echo "FAIL: exit status $?"; cat "$work/err"; exit 1; }
python3 - "$work/s.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
c = j["consumers"][0]
ok = True
def check(cond, msg):
    global ok
    if not cond:
        print("FAIL:", msg); ok = False
check(j["rx"] > 0, "no packet received")
check(c["in"] + j["rx_dispatch_drops"] == j["rx"], "rx %d != in %d + dispatch drops %d" % (j["rx"], c["in"], j["rx_dispatch_drops"]))
check(c["in"] == c["out"] + c["dropped"] + c["filtered"], "in != out + dropped + filtered: %s" % c)
check(c["out"] == c["written"] + c["tx_dropped"], "out != written + tx_dropped: %s" % c)
print("rss_signal: rx=%d in=%d out=%d written=%d" % (j["rx"], c["in"], c["out"], c["written"]))
sys.exit(0 if ok else 1)
PY
