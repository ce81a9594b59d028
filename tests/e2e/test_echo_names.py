#!/usr/bin/env python3
"""End to end: a host's NetBIOS name, hashed where NBNS carries it, is
rewritten wherever kept payload writes it in plain, before the NBNS message
(offline: the pre-pass) and after it (the echo search), under the shipped
rules/ids.amon (its `dhcp.hostname` rule decides NBNS names: no DNS name
rule; NBNS's payload is kept, the names rewritten in it).

A crafted capture from one user: a DNS query for LP-TEST-HOST.corp.example
(a label of a name no rule hides: kept payload), a datagram naming the
host's account `lp-test-host$@corp.example` (as a TLS client certificate
does), then an NBNS name query for LP-TEST-HOST<00>, then a report naming
`LP-TEST-HOST` again; then an NBNS query for IPV6.GOOGLE.COM (a DNS name
a resolver asks over NBNS as its fallback) and an HTTP request to that
host. Through `amon pcap --read FILE`:

  - the name, in any case, is in none of the output's frames;
  - each copy reads as the same pseudonym (the NBNS name's decision on its
    plain text; the case of each letter kept);
  - the HTTP request leaves as it came: a dotted NBNS name is no device's,
    and no rule hides that DNS name.

Read from standard input (no pre-pass), the copies before the NBNS
message stay as they came, as live, and the one after it is rewritten:
the plain form of an NBNS name its rewrite hid is searched for once the
name is seen.

usage: test_echo_names.py AMON"""

import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

S = 1_000_000_000
USER, RESOLVER, BCAST, SERVER = "192.168.1.20", "192.168.1.1", "192.168.1.255", "93.184.216.34"
NAME = b"LP-TEST-HOST"
DNS_NAME = b"IPV6.GOOGLE.COM"


def nb_encode(name, suffix=0):
    raw = name.ljust(15, b" ") + bytes([suffix])
    return bytes(x for c in raw for x in (0x41 + (c >> 4), 0x41 + (c & 15)))


def dns_query(qid, labels, qtype=1, flags=0x0100):
    q = b"".join(bytes([len(x)]) + x for x in labels) + b"\x00" + struct.pack(">HH", qtype, 1)
    return struct.pack(">HHHHHH", qid, flags, 1, 0, 0, 0) + q


def build(d):
    t = 1_700_000_000 * S
    frames = [
        (t, L.udp4_frame(USER, RESOLVER, 50000, 53, dns_query(0x22e3, [NAME, b"corp", b"example"]))),
        (t + 1_000_000, L.udp4_frame(USER, SERVER, 50001, 9999, b"login lp-test-host$@corp.example ok\n")),
        (t + S, L.udp4_frame(USER, BCAST, 137, 137, dns_query(0x8101, [nb_encode(NAME)], qtype=0x20, flags=0x0110))),
        (t + 2 * S, L.udp4_frame(USER, SERVER, 50002, 9999, b"report: host LP-TEST-HOST up\n")),
        # A DNS name asked over NBNS (a resolver's fallback) is no device's
        # name: its copies elsewhere are the DNS name's, which no rule hides.
        (t + 3 * S, L.udp4_frame(USER, BCAST, 137, 137, dns_query(0x8102, [nb_encode(DNS_NAME)], qtype=0x20, flags=0x0110))),
        (t + 4 * S, L.udp4_frame(USER, SERVER, 50003, 80, b"GET / HTTP/1.1\r\nHost: " + DNS_NAME.lower() + b"\r\n\r\n")),
    ]
    path = os.path.join(d, "in.pcap")
    L.write_pcap(path, frames)
    return path


def policy(d, name):
    """rules/ids.amon as shipped, with a fixed key beside it."""
    p = os.path.join(d, name + ".amon")
    with open(p, "w") as fh:
        fh.write(L.shipped_ids(d))
    return p


def copies(fin, fout):
    """The output's bytes where each input frame carries the name in plain
    (any case): one per frame that has it, in frame order."""
    got = []
    for a, b in zip(fin, fout):
        i = a.lower().find(NAME.lower())
        if i >= 0:
            got.append(b[i:i + len(NAME)])
    return got


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    d = L.tmpdir("echo-names-")
    inp = build(d)
    fin = [r[3] for r in L.read_pcap(inp)[1]]
    fails = []
    if len(copies(fin, fin)) != 3 or nb_encode(NAME) not in fin[2]:
        fails.append("the input should carry the name three times in plain and once encoded (the test's frames are wrong)")

    for name in ("ids",):
        pol = policy(d, name)
        out = os.path.join(d, name + ".pcap")
        L.run_amon(amon, inp, [("ids", pol, out)])
        fout = [r[3] for r in L.read_pcap(out)[1]]
        if len(fout) != len(fin) or any(len(a) != len(b) for a, b in zip(fin, fout)):
            fails.append(f"{name}: frames or their lengths changed: {[len(f) for f in fin]} -> {[len(f) for f in fout]}")
            continue
        for i, f in enumerate(fout):
            if NAME.lower() in f.lower() or nb_encode(NAME) in f:
                fails.append(f"{name}: frame {i + 1}: the name left in clear")
        c = copies(fin, fout)
        if len(c) != 3 or c[0] != c[2] or c[1] != c[2].lower():
            fails.append(f"{name}: the copies are not one pseudonym (query, account, report): {c}")
        if fout[5][42:] != fin[5][42:]:  # its payload (the headers' addresses are mapped)
            fails.append(f"{name}: the HTTP request naming {DNS_NAME.lower()!r} changed: {fout[5][-40:]!r}")
        L.health(inp, out, name, fails)

    # Standard input cannot be read twice: no pre-pass. The NBNS message
    # rewritten (its payload kept), its name is searched for from then on.
    pol = policy(d, "ids")
    out = os.path.join(d, "stdin.pcap")
    with open(inp, "rb") as fh:
        r = subprocess.run([amon, "pcap", "--read", "-", "--workers", "1", "--quiet", "--consumer",
                            f"ids={pol}:{out}"], stdin=fh, capture_output=True, timeout=170)
    if r.returncode != 0:
        fails.append(f"amon on standard input failed: {r.stderr.decode(errors='replace')}")
    else:
        c = copies(fin, [r[3] for r in L.read_pcap(out)[1]])
        if c[:2] != [NAME, NAME.lower()]:
            fails.append(f"standard input: the copies before the NBNS message read {c[:2]}; with no pre-pass they stay")
        if len(c) != 3 or c[2] == NAME:
            fails.append(f"standard input: the report after the NBNS message left the name in clear: {c}")
    shutil.rmtree(d, ignore_errors=True)
    return L.report(fails, "ok: an NBNS name is rewritten where kept payload writes it in plain, before and after")


if __name__ == "__main__":
    sys.exit(main())
