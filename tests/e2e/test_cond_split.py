#!/usr/bin/env python3
"""End to end: a condition on a name sees it when the message carrying it
is split over several TCP segments and parsed from its first part (a
ClientHello cut by a small MTU), so a rule guarded by a negated condition
cannot keep a name it should hide.

Two consumers, each of which must hide every SNI:
  neg  tls.sni : keep() when not tls.sni ~ /./   then   tls.sni : redact()
  pos  tls.sni : redact() when tls.sni ~ /./
A name taken as absent makes `neg` keep it and `pos` skip its rule.
tshark reassembles the hellos; no original name may be in either output.

usage: test_cond_split.py AMON"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    pdir = L.pcaps_dir()
    d = L.tmpdir("cond-split-")
    neg = L.write_policy(d, "neg.amon", "tls.sni : keep() when not tls.sni ~ /./\ntls.sni : redact()\n")
    pos = L.write_policy(d, "pos.amon", "tls.sni : redact() when tls.sni ~ /./\n")
    fails = []
    seen = 0
    for cap in ("tls-clienthello-fragmented-mtu300.pcap", "tunnel-geneve-tls-quic.pcap"):
        inp = os.path.join(pdir, cap)
        if not os.path.exists(inp):
            L.skip(f"{inp} missing")
        names = {n for r in L.tshark_fields(inp, ["tls.handshake.extensions_server_name"], "tls")
                 for n in r[1] if n}
        if not names:
            fails.append(f"{cap}: no SNI in the input")
            continue
        seen += len(names)
        outs = {k: os.path.join(d, f"{k}-{cap}") for k in ("neg", "pos")}
        L.run_amon(amon, inp, [("neg", neg, outs["neg"]), ("pos", pos, outs["pos"])])
        for k, out in outs.items():
            got = {n for r in L.tshark_fields(out, ["tls.handshake.extensions_server_name"], "tls")
                   for n in r[1] if n}
            left = sorted(names & got)
            if left:
                fails.append(f"{cap}, {k}: names in clear: {left[:5]}")
    for f in fails:
        print("FAIL: " + f)
    if not fails:
        print(f"split hellos: {seen} names hidden by both conditioned rules")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
