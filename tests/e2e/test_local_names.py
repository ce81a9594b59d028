#!/usr/bin/env python3
"""Device names of the local name protocols follow the DNS name rules.

mDNS (5353), LLMNR (5355) and NBNS (137) are DNS's message format; their
names (Lucas-iMac.local, USER-PC, WORKGROUP) are dns.qname, dns.answer.name
and dns.rdata.name by their place in the message (plugins/dns/README.md).
With those three fields redacted, no NBNS name and no mDNS name of the
input is found in clear in the output (tshark's reading of both), and
every message is still there.

usage: test_local_names.py AMON"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import e2e_lib as L

CASES = [("mixed-tls-http-nbns.pcap", "nbns", ["nbns.name"]),
         ("mdns-iphone-txt.pcap", "mdns", ["dns.qry.name", "dns.resp.name"])]


def names(path, filt, fields):
    out = set()
    for row in L.tshark_fields(path, fields, filt):
        for col in row[1:]:
            for n in col:
                n = n.split(" (")[0].split("<")[0].strip().lower()
                if n and not n.startswith("illegal") and n not in ("<root>", "local"):
                    out.add(n)
    return out


def main():
    amon = os.path.abspath(L.tool_paths(sys.argv))
    L.need_tshark()
    pdir = L.pcaps_dir()
    work = L.tmpdir("local-names-")
    pol = L.write_policy(work, "p.amon", "dns.qname, dns.answer.name, dns.rdata.name : redact()\n")
    fails = []
    for cap, filt, fields in CASES:
        inp = os.path.join(pdir, cap)
        if not os.path.exists(inp):
            L.skip(f"{inp} missing")
        out = os.path.join(work, cap + ".out.pcap")
        L.run_amon(amon, inp, [("c", pol, out)])
        n_in, n_out = len(L.tshark_fields(inp, [], filt)), len(L.tshark_fields(out, [], filt))
        if n_out != n_in:
            fails.append(f"{cap}: {n_in} {filt} messages in, {n_out} out")
        clear = sorted(names(inp, filt, fields) & names(out, filt, fields))
        if clear:
            fails.append(f"{cap}: {len(clear)} {filt} names in clear, e.g. {clear[:4]}")
        print(f"{cap}: {n_in} {filt} messages, {len(names(inp, filt, fields))} names in, {len(clear)} in clear out")
    sys.exit(L.report(fails, "ok"))


if __name__ == "__main__":
    main()
