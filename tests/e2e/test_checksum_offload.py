#!/usr/bin/env python3
"""End to end: TCP and UDP checksums as a transmit-offload capture holds them
(a host capturing what it sends: each checksum the pseudo-header's sum
alone, which the NIC would have completed) still read as such after amon
rewrote the addresses, cut the payload or snapped it; a wrong checksum stays
wrong by as much, a right one right, a UDP 0 stays 0.

Input: crafted IPv4 and IPv6 frames, TCP and UDP, one packet per kind of
checksum (partial, right, wrong, UDP 0), each on its own source port so that
the output's packet is found again. Policies: header kernels (Crypto-PAn and
prefix on the addresses; with the payload kept, zeroed, cut), the general
path (an application rule beside them; snap) and the shipped flows policy.
Oracle: the sums computed here (tshark would call a partial bad).

usage: test_checksum_offload.py AMON RULES_DIR"""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

ADDR = "ip.client : cryptopan(key=k)\nip.server : prefix(24, v6=48)\n"
POLICIES = {
    "kernel": ADDR,
    "kernel_zero": ADDR + "payload : zero()\n",
    "kernel_cut": ADDR + "payload : cut()\n",
    "general": ADDR + "dns.qname : redact()\n",
    "general_cut": ADDR + "dns.qname : redact()\npayload : cut()\n",
    "snap": ADDR + "payload : snap()\n",
}
KINDS = ("partial", "right", "wrong", "none")  # none: UDP without a checksum


def fold(s):
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def sum16(b, s=0):
    if len(b) % 2:
        b += b"\0"
    return fold(s + sum(struct.unpack("!%dH" % (len(b) // 2), b)))


def parse(frame):
    """(v6, proto, addrs, l4 offset, l4 length by the IP header) of an
    untagged Ethernet frame."""
    et = struct.unpack("!H", frame[12:14])[0]
    if et == 0x0800:
        ip = frame[14:]
        ihl = (ip[0] & 15) * 4
        return False, ip[9], ip[12:20], 14 + ihl, struct.unpack("!H", ip[2:4])[0] - ihl
    return True, frame[20], frame[22:54], 54, struct.unpack("!H", frame[18:20])[0]


def sums(frame):
    """(checksum field, the pseudo-header's sum, the sum of pseudo-header and
    segment with the field in it: 0xffff when the checksum is right)."""
    v6, proto, addrs, l4, n = parse(frame)
    seg = frame[l4:l4 + n]
    pseudo = sum16(addrs, proto + (n & 0xFFFF) + (n >> 16))
    co = 16 if proto == 6 else 6
    return struct.unpack("!H", seg[co:co + 2])[0], pseudo, sum16(seg, pseudo)


def build(v6, proto, sport, payload):
    if v6:
        src = bytes.fromhex("fd000000000000000000000000000001")
        dst = bytes.fromhex("2001067c000000000000000000000099")
    else:
        src, dst = L.ip4("10.1.2.3"), L.ip4("203.0.113.77")
    if proto == 6:
        l4 = struct.pack("!HHIIHHHH", sport, 8080, 1000, 2000, (5 << 12) | L.ACK | L.PSH, 65535, 0, 0) + payload
    else:
        l4 = struct.pack("!HHHH", sport, 9999, 8 + len(payload), 0) + payload
    if v6:
        ip = struct.pack("!IHBB", 0x60000000, len(l4), proto, 64) + src + dst
        et = b"\x86\xdd"
    else:
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 1, 0x4000, 64, proto, 0, src, dst)
        ip = ip[:10] + struct.pack("!H", L._csum(ip)) + ip[12:]
        et = b"\x08\x00"
    return b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01" + et + ip + l4


def set_ck(frame, value):
    _, proto, _, l4, _ = parse(frame)
    co = l4 + (16 if proto == 6 else 6)
    return frame[:co] + struct.pack("!H", value) + frame[co + 2:]


def crafted(path):
    """Frames and, by source port, (kind, the input's sums)."""
    frames, want, t, sport = [], {}, 1_000_000_000, 40000
    for v6 in (False, True):
        for proto in (6, 17):
            for kind in KINDS:
                if kind == "none" and (proto == 6 or v6):
                    continue
                payload = bytes((sport + i * 7) & 0xFF for i in range(101))
                f = build(v6, proto, sport, payload)
                _, pseudo, _ = sums(f)
                f = set_ck(f, {"partial": pseudo, "right": 0, "wrong": 0, "none": 0}[kind])
                if kind in ("right", "wrong"):
                    ck = (~sums(f)[2]) & 0xFFFF or (0xFFFF if proto == 17 else 0)
                    f = set_ck(f, ck ^ 0x1234 if kind == "wrong" else ck)
                frames.append((t, f))
                want[sport] = (kind, sums(f))
                t += 1_000_000
                sport += 1
    L.write_pcap(path, frames)
    return want


def check(inp, out, want, label, errors):
    _, rin = L.read_pcap(inp)
    _, rout = L.read_pcap(out)
    if len(rout) != len(rin):
        errors.append(f"{label}: {len(rin)} packets in, {len(rout)} out")
    by_port = {}
    for _, _, _, f in rin:
        l4 = parse(f)[3]
        by_port[struct.unpack("!H", f[l4:l4 + 2])[0]] = f
    seen = 0
    for _, _, _, f in rout:
        _, _, addrs, l4, _ = parse(f)
        sport = struct.unpack("!H", f[l4:l4 + 2])[0]
        kind, (_, _, err_in) = want[sport]
        ck, pseudo, err = sums(f)
        if parse(by_port[sport])[2] == addrs:
            errors.append(f"{label} {sport} {kind}: addresses not rewritten")
        ok = {"partial": ck == pseudo and err != 0xFFFF, "right": err == 0xFFFF, "wrong": err == err_in != 0xFFFF,
              "none": ck == 0}[kind]
        if not ok:
            errors.append(f"{label} {sport} {kind}: checksum {ck:#06x}, pseudo-header sum {pseudo:#06x}, "
                          f"sum {err:#06x} (input's {err_in:#06x})")
        seen += 1
    print(f"{label}: {seen} packets checked")


def main():
    amon = L.tool_paths(sys.argv)
    rules = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "../../rules")
    tmp = L.tmpdir("offload-")
    L.make_key(tmp)
    inp = os.path.join(tmp, "offload.pcap")
    want = crafted(inp)
    if sum(1 for k, _ in want.values() if k == "partial") != 4:
        sys.exit("crafted capture: not four partial checksums")
    errors = []
    consumers = []
    for name, body in POLICIES.items():
        pol = L.write_policy(tmp, name + ".amon", 'key k = file("%s")\n' % os.path.join(tmp, "keys/k.hex") + body)
        consumers.append((name, pol, os.path.join(tmp, name + ".pcap")))
    # The shipped flows policy (Crypto-PAn on the client, the payload snapped).
    with open(os.path.join(rules, "flows.amon")) as f:
        flows = f.read().replace('file("keys/flows.key")', 'file("%s")' % os.path.join(tmp, "keys/k.hex"))
    consumers.append(("flows", L.write_policy(tmp, "flows.amon", flows), os.path.join(tmp, "flows.pcap")))
    for workers in (1, 2):
        outs = [(n, p, o + ".w%d" % workers) for n, p, o in consumers]
        L.run_amon(amon, inp, outs, workers=workers)
        for n, _, o in outs:
            check(inp, o, want, f"{n} (workers={workers})", errors)
    sys.exit(L.report(errors, "every partial, right, wrong and absent checksum reads as it did in the input"))


if __name__ == "__main__":
    main()
