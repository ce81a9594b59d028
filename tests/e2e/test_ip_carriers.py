#!/usr/bin/env python3
"""End to end: addresses carried in the messages of SCTP, OSPF, PIM and
LISP take the treatment the same address takes in an IP header, through
`amon pcap` under rules/ids.amon (users inside `clients` Crypto-PAn'd,
servers kept).

  BUILT  crafted frames of each protocol carrying users' addresses (inside
         ids.amon's `clients`) in the fields their plugins parse. Each such
         address is in the input's bytes and in none of the output's; an
         address of the packet's own header is written as that header's
         pseudonym; the protocol's checksums stay right (tshark); a message
         that does not parse loses its payload (fail closed).

usage: test_ip_carriers.py AMON"""

import ipaddress
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
ETH4 = b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00"
ETH6 = b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x86\xdd"


def packed(a):
    return ipaddress.ip_address(a).packed


def ip_frame(src, dst, proto, payload, ttl=64):
    s, d = packed(src), packed(dst)
    if len(s) == 4:
        iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0x4000, ttl, proto, 0, s, d)
        iph = iph[:10] + struct.pack("!H", L._csum(iph)) + iph[12:]
        return ETH4 + iph + payload
    return ETH6 + struct.pack("!IHBB", 0x60000000, len(payload), proto, ttl) + s + d + payload


def pseudo6(src, dst, proto, n):
    return packed(src) + packed(dst) + struct.pack("!IxxxB", n, proto)


# ---------------------------------------------------------------- SCTP

def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c ^= x
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def sctp(sport, dport, chunks):
    pkt = struct.pack("!HHII", sport, dport, 0x1234, 0) + b"".join(chunks)
    return pkt[:8] + struct.pack("<I", crc32c(pkt)) + pkt[12:]


def tlv(t, v, pad=True):
    b = struct.pack("!HH", t, 4 + len(v)) + v
    return b + b"\0" * (-len(b) % 4 if pad else 0)


def chunk(t, v, flags=0):
    b = struct.pack("!BBH", t, flags, 4 + len(v)) + v
    return b + b"\0" * (-len(b) % 4)


def addr_param(a):
    return tlv(5 if len(packed(a)) == 4 else 6, packed(a))


C4, C4B, S4, S4B = "10.9.0.1", "10.9.0.2", "198.51.100.7", "198.51.100.8"
C6, C6B, S6 = "fd00::17", "fd00::18", "2001:db8::80"


def sctp_frames():
    """[(frame, users' addresses it carries, header addresses its body repeats)]."""
    f = []
    for c, cb, s in ((C4, C4B, S4), (C6, C6B, S6)):
        init = chunk(1, struct.pack("!IIHHI", 1, 65535, 10, 10, 7) + addr_param(c) + addr_param(cb) + tlv(12, b"\0\5"))
        f.append((ip_frame(c, s, 132, sctp(5000, 36412, [init])), [c, cb], [c]))
        # The State Cookie copies the INIT whole, as Linux's does.
        cookie = b"\xaa" * 36 + packed(c) + b"\0" * 3 + init
        ack = chunk(2, struct.pack("!IIHHI", 2, 65535, 10, 10, 9) + addr_param(s) + tlv(7, cookie))
        f.append((ip_frame(s, c, 132, sctp(36412, 5000, [ack])), [c, cb], [c]))
        f.append((ip_frame(c, s, 132, sctp(5000, 36412, [chunk(10, cookie)])), [c, cb], [c]))
        asconf = chunk(0xC1, struct.pack("!I", 1) + addr_param(c) + tlv(0xC001, struct.pack("!I", 7) + addr_param(cb)))
        f.append((ip_frame(c, s, 132, sctp(5000, 36412, [asconf])), [c, cb], [c]))
    return f


def sctp_bad():
    """An INIT whose address parameter runs past its chunk."""
    init = chunk(1, struct.pack("!IIHHI", 1, 65535, 10, 10, 7) + struct.pack("!HH", 5, 12) + packed(C4B))
    return ip_frame(C4, S4, 132, sctp(5000, 36412, [init])), C4B


# ---------------------------------------------------------------- checks

def header_map(fin, fout):
    """Input header address -> its output, for one frame."""
    v4 = fin[12:14] == b"\x08\x00"
    o, n = (26, 4) if v4 else (22, 16)
    return {fin[o:o + n]: fout[o:o + n], fin[o + n:o + 2 * n]: fout[o + n:o + 2 * n]}


def check(amon, work, name, frames, bad, fails, tshark_checks):
    inp, out = os.path.join(work, name + ".pcap"), os.path.join(work, name + "-ids.pcap")
    allf = [fr for fr, _, _ in frames] + [b for b, _ in bad]
    L.write_pcap(inp, [(1_700_000_000_000_000_000 + i * 1_000_000, fr) for i, fr in enumerate(allf)])
    L.run_amon(amon, inp, [("ids", os.path.join(ROOT, "rules", "ids.amon"), out)])
    recs = L.read_pcap(out)[1]
    if len(recs) != len(allf):
        fails.append(f"{name}: {len(recs)} frames out of {len(allf)}")
        return 0
    n = 0
    for i, (fr, users, own) in enumerate(frames):
        o = recs[i][3]
        hm = header_map(fr, o)
        for a in users:
            b = packed(a)
            n += 1
            if b not in fr[34:]:
                fails.append(f"{name} frame {i + 1}: {a} is not in the input's body (the test is wrong)")
            if b in o:
                fails.append(f"{name} frame {i + 1}: {a} in clear in the output")
        for a in own:
            b = packed(a)
            if fr.count(b) < 2:
                continue
            # Every place the input held the header's address holds its pseudonym.
            at = [k for k in range(len(fr) - len(b) + 1) if fr[k:k + len(b)] == b]
            for k in at:
                if o[k:k + len(b)] != hm[b]:
                    fails.append(f"{name} frame {i + 1}: {a} at {k} is not its header pseudonym")
    for j, (b, a) in enumerate(bad):
        o = recs[len(frames) + j][3]
        if packed(a) in o:
            fails.append(f"{name} malformed frame: {a} in clear")
        if len(o) >= len(b):
            fails.append(f"{name} malformed frame: its payload was not cut")
    for flt, extra in tshark_checks:
        rows = L.tshark_fields(out, [], flt, extra)
        if rows:
            fails.append(f"{name}: tshark finds {flt} in frames {[r[0] for r in rows]}")
    return n


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    work = L.tmpdir("ipcarriers-")
    fails = []
    n = check(amon, work, "sctp", sctp_frames(), [sctp_bad()], fails,
              [("sctp.checksum.status == 0", ["-o", "sctp.checksum:CRC-32C"])])
    return L.report(fails, f"ok: {n} users' addresses carried in message bodies are absent from the ids output")


if __name__ == "__main__":
    sys.exit(main())
