#!/usr/bin/env python3
"""Offline runs are reproducible: the same capture and policy give the same
output, whatever the scheduling. With one worker the output file is
byte-identical run after run; with two, the same records (workers interleave
their outputs, each in its own order).

The policy is deterministic (keyed hashes and Crypto-PAn, no random masks)
and protects TLS and HTTP names, so split headers are held: held segments
used to leave when a burst ended past their deadline, and how the reader
batched packets into bursts then decided where they landed in the output.

usage: test_reproducible.py AMON"""

import collections
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import e2e_lib as L

RUNS = 6
CAPTURES = ["mixed-capture2.pcap", "tls-clienthello-fragmented-mtu300.pcap", "mixed-browsing-example.pcap",
            "http-requests-4k.pcap"]


def main():
    amon = os.path.abspath(L.tool_paths(sys.argv))
    pdir = L.pcaps_dir()
    work = L.tmpdir("repro-")
    L.make_key(work)
    pol = L.write_policy(work, "p.amon",
                         'key k = file("keys/k.hex")\n'
                         "ip.client : cryptopan(key=k)\n"
                         "tls.sni, http.host, dns.qname : hash(key=k)\n"
                         "http.user_agent, http.cookie : redact()\n")
    os.chdir(work)
    failures = []
    for cap in CAPTURES:
        inp = os.path.join(pdir, cap)
        if not os.path.exists(inp):
            L.skip(f"{inp} missing")
        for workers in (1, 2):
            outs = []
            for i in range(RUNS):
                out = os.path.join(work, f"{cap}.w{workers}.{i}.pcap")
                L.run_amon(amon, inp, [("c", pol, out)], workers=workers)
                outs.append(L.read_pcap(out)[1])
            ref = outs[0]
            if not ref:
                failures.append(f"{cap}: no output")
                continue
            for i, o in enumerate(outs[1:], 1):
                if workers == 1:
                    if o != ref:
                        first = next((j for j in range(min(len(o), len(ref))) if o[j] != ref[j]), min(len(o), len(ref)))
                        failures.append(f"{cap} (1 worker): run {i} differs from run 0 from record {first}")
                elif collections.Counter(o) != collections.Counter(ref):
                    failures.append(f"{cap} (2 workers): run {i} has other records than run 0")
            print(f"{cap}: {len(ref)} records, {RUNS} runs x 1 and 2 workers")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
