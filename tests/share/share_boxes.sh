#!/usr/bin/env bash
# Three boxes in one process share a z-anonymity view through a real
# nats-server -js started here on a free loopback port; bench_share exits 1
# unless every box, once in sync, and a box started afterwards (the live
# replay, through a wait heap smaller than what it reads) decide every value
# as one store fed all the traffic, and no box released where that store hid. Exit 77 (skipped) without nats-server.
set -euo pipefail
bench=$1
command -v nats-server >/dev/null || { echo "nats-server is not on PATH (scripts/setup installs it)"; exit 77; }
d=$(mktemp -d /tmp/share-boxes.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
nats-server -js -a 127.0.0.1 -p "$port" -sd "$d/js" >"$d/nats.log" 2>&1 &
srv=$!
trap 'kill $srv 2>/dev/null || true; wait $srv 2>/dev/null || true; rm -rf "$d"' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
openssl rand -hex 32 >"$d/share.key"
chmod 600 "$d/share.key"
rc=0
"$bench" --url "nats://127.0.0.1:$port" --key "$d/share.key" --boxes 3 --obs 60000 --values 5000 --users 800 --restart-heap 4096 || rc=$?
exit $rc
