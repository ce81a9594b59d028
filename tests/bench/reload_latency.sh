#!/usr/bin/env bash
# Reload latency under traffic: `amon run` with four consumers on the shipped
# policies (ids, meter, flows, research), a capture replayed without end
# (net_pcap infinite_rx) into 2 workers, outputs discarded (net_null);
# N SIGHUPs, each waited for. Prints every reload's compile and publish
# times (from amon's reload log line) and their medians and maxima.
#   [AMON_WORKERS=2] tests/bench/reload_latency.sh [N] [CAPTURE]   (needs build/amon, rules/keys: scripts/keys)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
n=${1:-20}
cap=${2:-$root/../shared/pcaps/http-requests-4k.pcap}
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
cat > "$work/amon.yaml" <<YAML
workers: ${AMON_WORKERS:-2}
inputs:
  - port: "net_pcap0,rx_pcap=$cap,infinite_rx=1"
consumers:
  - { name: ids, policy: $root/rules/ids.amon, output: { port: net_null0 } }
  - { name: meter, policy: $root/rules/meter.amon, output: { port: net_null1 } }
  - { name: flows, policy: $root/rules/flows.amon, output: { port: net_null2 } }
  - { name: research, policy: $root/rules/research.amon, output: { port: net_null3 } }
YAML
"$root/build/amon" run --config "$work/amon.yaml" --quiet -- --file-prefix=amonreload$$ 2> "$work/err" &
pid=$!
for _ in $(seq 100); do grep -q "amon: started" "$work/err" && break; sleep 0.1; done
for i in $(seq "$n"); do
  before=$(grep -c "amon: reload" "$work/err" || true)
  kill -HUP "$pid"
  for _ in $(seq 500); do [[ $(grep -c "amon: reload" "$work/err" || true) -gt $before ]] && break; sleep 0.01; done
  sleep 0.2
done
kill -TERM "$pid"; wait "$pid" || true
grep -c "reload refused" "$work/err" && { grep -A5 "reload refused" "$work/err" | head; exit 1; } || true
grep -o 'compile [0-9.]* ms, publish [0-9.]* ms (taken by every worker after [0-9.]* ms' "$work/err" | python3 -c '
import statistics, sys
rows = [(float(l.split()[1]), float(l.split()[4]), float(l.split()[11])) for l in sys.stdin]
for i, (c, p, t) in enumerate(rows, 1):
    print("reload %d: compile %.1f ms, publish %.3f ms (taken after %.3f ms)" % (i, c, p, t))
c, p, t = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
print("reloads %d: compile median %.1f ms (max %.1f); publish median %.3f ms (max %.3f), of which taken by every "
      "worker median %.3f ms (max %.3f); SIGHUP to new generation active (compile + taken) median %.1f ms" %
      (len(rows), statistics.median(c), max(c), statistics.median(p), max(p), statistics.median(t), max(t),
       statistics.median([a + t for a, _, t in rows])))
'
