#!/usr/bin/env python3
"""End to end: `redact(shape=length)` leaves only a hidden name's total
length, through `amon pcap` on real captures, with tshark reading the output.

  DNS  a query's question name (nothing points inside it) becomes labels of
       a fixed layout for its length: no dot in a name up to 63 bytes; a
       name other names point inside keeps its label lengths, all 'x'. Every
       name keeps its length, every message still parses (no new malformed
       frame) and its UDP checksum stays good.
  TLS  the SNI loses its dots, its length stays.

usage: test_name_shape.py AMON"""

import os
import sys

# e2e_lib: the end-to-end tests' shared pcap reader, tshark calls and work files.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e"))
import e2e_lib as L  # noqa: E402


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    pdir = L.pcaps_dir()
    d = L.tmpdir("name-shape-")
    pol = L.write_policy(d, "p.amon", "dns.qname, dns.answer.name, dns.rdata.name : redact(shape=length)\n"
                         "tls.sni, http.host : redact(shape=length)\n")
    fails = []
    flat = checked = 0
    for cap, fields, flt in (("dns-udp-many-queries.pcap", ["dns.qry.name", "dns.flags.response", "dns.count.answers",
                                                             "udp.checksum.status"], "dns"),
                             ("tls-clienthello-many-sni.pcap", ["tls.handshake.extensions_server_name"], "tls")):
        inp = os.path.join(pdir, cap)
        if not os.path.exists(inp):
            L.skip(f"{inp} missing")
        out = os.path.join(d, cap)
        L.run_amon(amon, inp, [("c", pol, out)])
        rin = {r[0]: r[1:] for r in L.tshark_fields(inp, fields, flt, L.CHECKS)}
        rout = {r[0]: r[1:] for r in L.tshark_fields(out, fields, flt, L.CHECKS)}
        new_bad = L.bad_frames(out) - L.bad_frames(inp)
        if new_bad:
            fails.append(f"{cap}: frames malformed after the rewrite: {sorted(new_bad)[:10]}")
        for fr, r in rin.items():
            if not r[0]:
                continue  # no name (a server's TLS records, cut when its SNI was hidden)
            o = rout.get(fr)
            if o is None:
                fails.append(f"{cap}: frame {fr} no longer {flt}")
                continue
            for a, b in zip(r[0], o[0]):
                checked += 1
                if len(a) != len(b) or set(b) - set("x."):
                    fails.append(f"{cap}: frame {fr}: {a!r} became {b!r}")
                if flt == "tls" and "." in b:
                    fails.append(f"{cap}: frame {fr}: SNI {b!r} keeps its dots")
                if flt == "dns" and r[1] in (["False"], ["0"]) and r[2] == ["0"] and len(a) <= 63 and "." in a:
                    flat += 1
                    if "." in b:
                        fails.append(f"{cap}: frame {fr}: query name {a!r} became {b!r}: label structure kept")
            if flt == "dns" and r[3] == ["1"] and o[3] != ["1"]:
                fails.append(f"{cap}: frame {fr}: UDP checksum {o[3]}")
    if not flat:
        fails.append("no query name to re-label")
    for f in fails[:30]:
        print("FAIL: " + f)
    if not fails:
        print(f"name shape: {checked} names keep only their length ({flat} queries re-labelled)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
