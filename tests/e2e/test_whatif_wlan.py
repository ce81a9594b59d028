#!/usr/bin/env python3
"""amon whatif reads 802.11 captures (radiotap, PPI, plain 802.11) as the
engine does: the DNS queries inside data frames (LLC/SNAP IPv4) count as
the same queries sent over Ethernet.

The same DNS queries (names asked by 1, 3 and 8 clients) are written as an
Ethernet capture and, carried in 802.11 data frames between beacons, probe
requests and control frames (test_wlan.py's frames), as a radiotap, a PPI
and a plain 802.11 capture. `amon whatif` on each must succeed and give the
Ethernet capture's whatif.csv row for row, and that report must hold every
query as an occurrence, the popular name released from its fifth client on
and the others hidden at z=5.

usage: test_whatif_wlan.py AMON"""

import csv
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import e2e_lib as L  # noqa: E402
import test_wlan as W  # noqa: E402

NAMES = [("popular.example.com", 8), ("mid.example.net", 3)] + [("rare-%d.example.org" % i, 1) for i in range(4)]


def dns_query(qid, name):
    q = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + q + struct.pack("!HH", 1, 1)


def queries():
    """Ethernet frames of the queries, one a second, clients 10.9.0.1..."""
    frames = []
    for name, clients in NAMES:
        for c in range(clients):
            qid = len(frames) + 1
            frames.append(L.udp4_frame("10.9.0.%d" % (c + 1), "192.0.2.53", 40000 + qid, 53, dns_query(qid, name)))
    return frames


def wlan_records(wrap, frames):
    """The queries in 802.11 data frames to the access point, with frames
    that carry no IP packet between them."""
    others = [W.beacon, lambda: W.probe_request(W.STA), W.rts, W.ack]
    recs = []
    for i, f in enumerate(frames):
        other = wrap(others[i % len(others)]())
        recs.append((other, len(other)))
        frame = wrap(W.data_to_ap(f[14:]))
        recs.append((frame, len(frame)))
    return recs


def whatif(amon, inp, out, fails, name):
    r = subprocess.run([amon, "whatif", "--read", inp, "--out", out, "--z", "2,5", "--dt", "1h,1d", "--quiet"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fails.append("%s: amon whatif exited %d: %s" % (name, r.returncode, r.stderr.strip()[-300:]))
        return None
    return list(csv.DictReader(open(os.path.join(out, "whatif.csv"))))


def main():
    amon = L.tool_paths(sys.argv)
    work = L.tmpdir("whatif-wlan-")
    fails = []
    frames = queries()
    eth = os.path.join(work, "eth.pcap")
    W.write(eth, 1, [(f, len(f)) for f in frames])
    ref = whatif(amon, eth, os.path.join(work, "out-eth"), fails, "ethernet")
    if ref is None:
        return L.report(fails, "")
    z5 = [r for r in ref if r["z"] == "5"]
    total = sum(n for _, n in NAMES)
    if any(int(r["occurrences"]) != total for r in ref):
        fails.append("ethernet: occurrences %s, want %d" % ([r["occurrences"] for r in ref], total))
    # z=5: the name of 8 clients is released from its fifth client on, those
    # of 1 and 3 clients stay hidden (their registrable domains too:
    # example.org of the 4 rare names has 4 users).
    if not z5 or any(int(r["occ_released"]) != 4 or int(r["occ_hidden"]) != total - 4 for r in z5):
        fails.append("ethernet: z=5 released %s, want 4" % [r["occ_released"] for r in z5])
    for name, lt, wrap in (("radiotap", W.DLT_RADIOTAP, W.radiotap), ("ppi", W.DLT_PPI, W.ppi),
                           ("802.11", W.DLT_80211, W.plain)):
        inp = os.path.join(work, name + ".pcap")
        W.write(inp, lt, wlan_records(wrap, frames))
        rows = whatif(amon, inp, os.path.join(work, "out-" + name), fails, name)
        if rows is None:
            continue
        for a, b in zip(rows, ref):
            a = {k: v for k, v in a.items() if k != "store_bytes"}
            b = {k: v for k, v in b.items() if k != "store_bytes"}
            if a != b:
                fails.append("%s: z=%s dt=%s: %s, Ethernet %s" % (name, a["z"], a["dt"], a, b))
        if len(rows) != len(ref):
            fails.append("%s: %d rows, Ethernet %d" % (name, len(rows), len(ref)))
    if not fails:
        shutil.rmtree(work, ignore_errors=True)
    return L.report(fails, "ok: whatif reads radiotap, PPI and plain 802.11 as Ethernet (%d queries)" % total)


if __name__ == "__main__":
    sys.exit(main())
