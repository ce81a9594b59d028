#!/usr/bin/env python3
"""z-anonymity's hidden names are unlinkable, recognizable and reproducible
(doc/zanon.md, "Hidden names").

On captures full of rarely visited names (many TLS and QUIC SNIs, DNS
queries), with a meter-like policy:
  - every name in the output is either a name of the input in clear, or the
    hidden form: its hidden labels all '_' (the filler no host name has),
    the labels kept (sld fallback) a suffix of an input name;
  - hidden names do not inflate the distinct names a meter counts: no more
    distinct names leave than came in;
  - two runs with the same key give byte-identical output.

usage: test_hidden_names.py AMON"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import e2e_lib as L

CAPTURES = [("quic-initials-many-sni-vlan.pcap", "tls.handshake.extensions_server_name"),
            ("tls-clienthello-many-sni.pcap", "tls.handshake.extensions_server_name"),
            ("dns-udp-many-queries.pcap", "dns.qry.name")]


def names(path, field):
    out = set()
    for row in L.tshark_fields(path, [field]):
        out.update(n.lower().rstrip(".") for n in row[1])
    return out


def hidden_form_ok(name, clear):
    labels = name.split(".")
    hidden = [all(c == "_" for c in lab) and lab != "" for lab in labels]
    if not any(hidden):
        return name in clear
    k = hidden.index(False) if False in hidden else len(labels)
    if any(hidden[k:]):  # hidden labels are the leftmost ones
        return False
    kept = ".".join(labels[k:])
    return kept == "" or any(c == kept or c.endswith("." + kept) for c in clear)


def main():
    amon = os.path.abspath(L.tool_paths(sys.argv))
    L.need_tshark()
    pdir = L.pcaps_dir()
    work = L.tmpdir("hidden-")
    L.make_key(work)
    pol = L.write_policy(work, "p.amon",
                         'key k = file("keys/k.hex")\n'
                         "ip.client : cryptopan(key=k)\n"
                         "tls.sni, dns.qname : zanon(z=10, dt=1h, fallback=sld)\n")
    os.chdir(work)
    fails = []
    for cap, field in CAPTURES:
        inp = os.path.join(pdir, cap)
        if not os.path.exists(inp):
            L.skip(f"{inp} missing")
        outs = []
        for i in range(2):
            out = os.path.join(work, f"{cap}.{i}.pcap")
            L.run_amon(amon, inp, [("c", pol, out)])
            outs.append(out)
        with open(outs[0], "rb") as a, open(outs[1], "rb") as b:
            if a.read() != b.read():
                fails.append(f"{cap}: two runs with one key differ")
        clear, got = names(inp, field), names(outs[0], field)
        bad = sorted(n for n in got if not hidden_form_ok(n, clear))
        if bad:
            fails.append(f"{cap}: {len(bad)} names neither clear nor of the hidden form, e.g. {bad[:3]}")
        hidden = sum(1 for n in got if "_" in n)
        if len(got) > len(clear):
            fails.append(f"{cap}: {len(got)} distinct names out of {len(clear)}")
        if hidden == 0:
            fails.append(f"{cap}: nothing hidden (the test would prove nothing)")
        print(f"{cap}: {len(clear)} distinct names in, {len(got)} out, {hidden} of them hidden")
    sys.exit(L.report(fails, "ok"))


if __name__ == "__main__":
    main()
