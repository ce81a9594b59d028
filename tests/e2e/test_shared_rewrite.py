#!/usr/bin/env python3
"""End to end: consumers with the same policy share one rewrite (the first
runs its program, the others take its output), and nothing of that shows:
run together with consumers of other policies, on real captures (HTTP with
cookies, IPv4 fragments made whole, fragments whose datagram is never
whole),
  - every consumer writes what its policy writes as the only consumer;
  - its counters (packets in and out, copies, address text, echoes, each
    rule's hits) are those of its policy as the only consumer;
  - two policies that differ only in their key bytes do not share: their
    outputs differ;
  - z-anonymity policies share too, and each of their consumers still
    decides as its policy alone.

usage: test_shared_rewrite.py AMON"""

import json
import os
import sys

import e2e_lib as L

COUNTS = ("in", "out", "dropped", "filtered", "copied", "error_cut", "error_drop", "l7_cut", "addr_text",
          "echoes", "echoes_filled", "policy_drop")


def main():
    amon = sys.argv[1]
    pcaps = L.pcaps_dir()
    d = L.tmpdir("shared-rewrite")
    L.make_key(d, "k")
    L.make_key(d, "j")
    app = ('key k = file("keys/k.hex")\nclients = { 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 }\n'
           "eth.src, eth.dst : timestamp()\nip.client : cryptopan(key=k)\nip.server : keep()\n"
           "http.cookie, http.set_cookie, http.authorization : redact()\ntls.sni : hash(key=k)\npayload : keep()\n")
    hdr = 'key k = file("keys/k.hex")\neth.src, eth.dst : timestamp()\nip.src, ip.dst : cryptopan(key=k)\n'
    zan = ('key k = file("keys/k.hex")\nclients = { 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 }\n'
           "ip.client : cryptopan(key=k)\nip.server : zanon(z=Z, dt=1h, fallback=prefix(24))\n"
           "dns.qname, http.host, tls.sni : zanon(z=Z, dt=1h, fallback=sld)\npayload : keep()\n")
    pols = {"app": L.write_policy(d, "app.amon", app), "hdr": L.write_policy(d, "hdr.amon", hdr),
            "hdr_j": L.write_policy(d, "hdr_j.amon", hdr.replace("keys/k.hex", "keys/j.hex")),
            "z2": L.write_policy(d, "z2.amon", zan.replace("Z", "2")),
            "z5": L.write_policy(d, "z5.amon", zan.replace("Z", "5"))}
    fails, ok = [], 0
    # ipv4-fragments-garbage: later fragments of datagrams never made whole,
    # which a policy without flows cannot vouch for (no tunnel inside?) even
    # when the worker makes flows for another consumer.
    for cap in ("http-requests-4k.pcap", "ipv4-fragments.pcap", "ipv4-fragments-garbage.pcap"):
        inp = os.path.join(pcaps, cap)
        alone = {}
        for name, pol in pols.items():
            out = os.path.join(d, f"alone-{name}-{cap}")
            st = os.path.join(d, f"alone-{name}-{cap}.json")
            L.run_amon(amon, inp, [(name, pol, out)], extra=["--stats-json", st])
            with open(st) as f:
                alone[name] = (open(out, "rb").read(), json.load(f)["consumers"][0])
        # Both header policies, and the application one first, between and last;
        # z-anonymity policies twice each (a second consumer of the same one
        # follows the first: its observations would change no count).
        order = ["app", "hdr", "app", "hdr_j", "hdr", "z2", "app", "hdr_j", "z5", "app", "z2", "z5"]
        outs = [os.path.join(d, f"multi-{i}-{cap}") for i in range(len(order))]
        st = os.path.join(d, f"multi-{cap}.json")
        L.run_amon(amon, inp, [(f"c{i}", pols[n], outs[i]) for i, n in enumerate(order)], extra=["--stats-json", st])
        with open(st) as f:
            cons = json.load(f)["consumers"]
        for i, n in enumerate(order):
            want, wst = alone[n]
            if open(outs[i], "rb").read() != want:
                fails.append(f"{cap}: consumer {i} ({n}) differs from {n} alone")
            else:
                ok += 1
            for k in COUNTS:
                if cons[i][k] != wst[k]:
                    fails.append(f"{cap}: consumer {i} ({n}) counts {k} {cons[i][k]}, alone {wst[k]}")
            if [r["hits"] for r in cons[i]["rules"]] != [r["hits"] for r in wst["rules"]]:
                fails.append(f"{cap}: consumer {i} ({n}) rule hits {cons[i]['rules']} against {wst['rules']}")
        if alone["hdr"][0] == alone["hdr_j"][0]:
            fails.append(f"{cap}: two keys gave the same output")
    sys.exit(L.report(fails, ok))


if __name__ == "__main__":
    main()
