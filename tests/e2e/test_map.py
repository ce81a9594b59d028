#!/usr/bin/env python3
"""amon map gives exactly what amon pcap writes: a capture's client and
server addresses, anonymized by a policy's Crypto-PAn (with a fixed key, and
with a key rotating every hour), are what `amon map` prints for them with the
key file, with the policy's key name, and with --rotate/--at for the
rotating one; a prefix maps to the prefix of every address in it.

usage: test_map.py AMON"""

import ipaddress
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import e2e_lib as L

T0 = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z
CLIENTS = ["10.1.2.3", "10.1.200.9", "172.16.5.5"]
SERVER = "192.0.2.7"


def mapped(amon, args):
    r = subprocess.run([amon, "map", *args], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"amon map {' '.join(args)}: exit {r.returncode}: {r.stderr}")
    return dict(line.split() for line in r.stdout.splitlines())


def main():
    amon = os.path.abspath(sys.argv[1])
    work = L.tmpdir("map-")
    L.make_key(work)
    os.chdir(work)
    fr = []
    for i, c in enumerate(CLIENTS):
        fr += [(ts, f) for ts, f, _ in L.tcp_flow(T0 + i * 10_000_000, c, SERVER, 40000 + i)]
    L.write_pcap("in.pcap", sorted(fr))
    fails = []
    for name, action, extra in [("fixed", "cryptopan(key=k)", []),
                                ("rotating", "cryptopan(key=k, rotate=1h)", ["--rotate", "1h", "--at", str(T0 // 10**9)])]:
        L.write_policy(work, f"{name}.amon", f'key k = file("keys/k.hex")\nip.client, ip.server : {action}\n')
        L.run_amon(amon, "in.pcap", [("c", f"{name}.amon", f"{name}.pcap")])
        _, recs = L.read_pcap(f"{name}.pcap")
        _, orig = L.read_pcap("in.pcap")
        want = {}
        for (_, _, _, a), (_, _, _, b) in zip(orig, recs):
            for x, y in zip(L.ipv4_addrs(a), L.ipv4_addrs(b)):
                want[x] = y
        for how, keyargs in [("--key", ["--key", "keys/k.hex"]),
                             ("--policy", ["--policy", f"{name}.amon", "--consumer-key", "k"])]:
            got = mapped(amon, keyargs + extra + sorted(want))
            for x, y in want.items():
                if got.get(x) != y:
                    fails.append(f"{name} key, {how}: amon map {x} -> {got.get(x)}, amon pcap wrote {y}")
            pref = mapped(amon, keyargs + extra + ["10.1.0.0/16", "10.0.0.0/8"])
            for cidr, m in pref.items():
                net = ipaddress.ip_network(m)
                for x, y in want.items():
                    if ipaddress.ip_address(x) in ipaddress.ip_network(cidr) and ipaddress.ip_address(y) not in net:
                        fails.append(f"{name} key, {how}: {x} is in {cidr} but its {y} is not in {m}")
    # The rotating key differs from the fixed one, and from the next period's.
    a = mapped(amon, ["--key", "keys/k.hex", "--rotate", "1h", "--at", str(T0 // 10**9), SERVER])
    b = mapped(amon, ["--key", "keys/k.hex", "--rotate", "1h", "--at", str(T0 // 10**9 + 3600), SERVER])
    if a == b:
        fails.append("--rotate 1h: two periods map the same")
    return L.report(fails, "amon map agrees with amon pcap, fixed and rotating keys, addresses and prefixes")


if __name__ == "__main__":
    sys.exit(main())
