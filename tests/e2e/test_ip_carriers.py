#!/usr/bin/env python3
"""End to end: addresses carried in the messages of SCTP, OSPF, PIM, LISP
and BGP take the treatment the same address takes in an IP header, through
`amon pcap` under rules/ids.amon (users inside `clients` Crypto-PAn'd,
servers kept).

  BUILT  crafted frames of each protocol carrying users' addresses (inside
         ids.amon's `clients`) in the fields their plugins parse. Each such
         address is in the input's bytes and in none of the output's; an
         address of the packet's own header is written as that header's
         pseudonym; the protocol's checksums stay right (SCTP's and UDP's by
         tshark, OSPF's, LSAs' and PIM's computed here, over the IPv6
         pseudo-header where they cover it); a message
         that does not parse loses its payload (fail closed). A PIM
         Register's multicast data packet is a tunnel: tshark reads it
         whole in the output, its source pseudonymized. OSPF TE
         LSAs: tshark decodes their address fields in the output, and
         none holds an input address; likewise LISP LCAFs (instance ID,
         source/dest key, AFI list, explicit locator path, nonce locator).
         BGP (tcp/179): a router's own address as its BGP identifier and
         NEXT_HOP comes out as its header's pseudonym, other users'
         addresses and prefixes (IPv4 and an IPv6 MP_REACH_NLRI, one
         UPDATE split over two segments) are absent, tshark decodes the
         output's messages without complaint.

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
        # Linux's HEARTBEAT information holds the path's address as a sockaddr.
        hb = chunk(4, tlv(1, b"\x02\x00\x13\x88" + bytes(4 if len(packed(c)) == 16 else 0) + packed(c) + bytes(20)))
        f.append((ip_frame(s, c, 132, sctp(36412, 5000, [hb])), [c], [c]))
        asconf = chunk(0xC1, struct.pack("!I", 1) + addr_param(c) + tlv(0xC001, struct.pack("!I", 7) + addr_param(cb)))
        f.append((ip_frame(c, s, 132, sctp(5000, 36412, [asconf])), [c, cb], [c]))
    return f


def sctp_bad():
    """An INIT whose address parameter runs past its chunk."""
    init = chunk(1, struct.pack("!IIHHI", 1, 65535, 10, 10, 7) + struct.pack("!HH", 5, 12) + packed(C4B))
    return ip_frame(C4, S4, 132, sctp(5000, 36412, [init])), C4B


# ---------------------------------------------------------------- OSPF

def fletcher(lsa):
    """The checksum an LSA holds when right (age and checksum not summed)."""
    b = lsa[2:16] + b"\0\0" + lsa[18:]
    c0 = c1 = 0
    for x in b:
        c0 = (c0 + x) % 255
        c1 = (c1 + c0) % 255
    x = ((len(b) - 14 - 1) * c0 - c1) % 255
    x = x or 255
    y = 510 - c0 - x
    y = y - 255 if y > 255 else y
    return (x << 8) | y


def lsa(v, t, lsid, adv, body):
    head = struct.pack("!H", 1) + (bytes([0x22, t]) if v == 2 else struct.pack("!H", t)) + packed(lsid) + packed(adv)
    b = head + struct.pack("!IHH", 0x80000001, 0, 20 + len(body)) + body
    return b[:16] + struct.pack("!H", fletcher(b)) + b[18:]


def ospf(v, t, rid, body, src=None, dst=None):
    hl = 24 if v == 2 else 16
    b = bytes([v, t]) + struct.pack("!H", hl + len(body)) + packed(rid) + bytes(4) + bytes(4 if v == 3 else 12) + body
    ck = L._csum(b) if v == 2 else L._csum(pseudo6(src, dst, 89, len(b)) + b)
    return b[:12] + struct.pack("!H", ck) + b[14:]


def otlv(t, v):
    """An OSPF TLV: its length counts the value only, padded to 32 bits."""
    b = struct.pack("!HH", t, len(v)) + v
    return b + b"\0" * (-len(b) % 4)


R1, R2, R3 = "10.1.0.1", "10.1.0.2", "10.1.0.3"
LL1, LL2 = "fe80::1", "fe80::2"
PFX = bytes.fromhex("fd00000100020000")  # fd00:1:2::/64 as OSPFv3 stores it


def ospf_frames():
    f = []
    hello = struct.pack("!4sHBBI", packed("255.255.255.0"), 10, 2, 1, 40) + packed(R3) + bytes(4) + packed(R2)
    f.append((ip_frame(R1, "224.0.0.5", 89, ospf(2, 1, R1, hello), ttl=1), [R2, R3], [R1]))
    links = struct.pack("!BBH", 0, 0, 2) + packed(R3) + packed(R1) + bytes([2, 0, 0, 10]) \
        + packed("10.1.7.0") + packed("255.255.255.0") + bytes([3, 0, 0, 10])
    net = packed("255.255.255.0") + packed(R1) + packed(R2)
    upd = struct.pack("!I", 2) + lsa(2, 1, R1, R1, links) + lsa(2, 2, R3, R1, net)
    f.append((ip_frame(R1, "224.0.0.5", 89, ospf(2, 4, R1, upd), ttl=1), [R2, R3, "10.1.7.0"], [R1]))
    link = bytes([1, 0, 0, 0x13]) + packed(LL1) + struct.pack("!I", 1) + bytes([64, 0, 0, 0]) + PFX
    upd6 = struct.pack("!I", 1) + lsa(3, 0x0008, "0.0.0.5", R1, link)
    f.append((ip_frame(LL1, "ff02::5", 89, ospf(3, 4, R1, upd6, LL1, "ff02::5"), ttl=1), [R1, PFX], [LL1]))
    hello6 = struct.pack("!IBBHHH", 5, 1, 0, 0x13, 10, 40) + packed(R3) + bytes(4) + packed(R2)
    f.append((ip_frame(LL2, "ff02::5", 89, ospf(3, 1, R2, hello6, LL2, "ff02::5"), ttl=1), [R2, R3], [LL2]))
    # Opaque LSAs: TE (router address, a link's ID, local and remote
    # interface addresses), grace (the restarting interface), router information.
    te_link = otlv(1, b"\1") + otlv(2, packed(R2)) + otlv(3, packed(TE_L)) + otlv(4, packed(TE_R)) + otlv(5, bytes([0, 0, 0, 10]))
    te = lsa(2, 10, "1.0.0.7", R1, otlv(1, packed(TE_RID)) + otlv(2, te_link))
    grace = lsa(2, 9, "3.0.0.0", R1, otlv(1, struct.pack("!I", 120)) + otlv(2, b"\1") + otlv(3, packed(TE_G)))
    ri = lsa(2, 10, "4.0.0.0", R1, otlv(1, bytes([0x60, 0, 0, 0])))
    upd = struct.pack("!I", 3) + te + grace + ri
    f.append((ip_frame(R1, "224.0.0.5", 89, ospf(2, 4, R1, upd), ttl=1), [R2, TE_RID, TE_L, TE_R, TE_G], [R1]))
    te6_link = otlv(1, b"\1") + otlv(2, packed(R3)) + otlv(18, struct.pack("!I", 5) + packed(R2)) \
        + otlv(19, packed(TE_L6)) + otlv(20, packed(TE_R6))
    upd6 = struct.pack("!I", 1) + lsa(3, 0xA00A, "0.0.0.1", R1, otlv(3, packed(TE_L6)) + otlv(2, te6_link))
    f.append((ip_frame(LL1, "ff02::5", 89, ospf(3, 4, R1, upd6, LL1, "ff02::5"), ttl=1), [R1, R2, R3, TE_L6, TE_R6], [LL1]))
    return f


TE_RID, TE_L, TE_R, TE_G, TE_L6, TE_R6 = "10.1.9.9", "10.1.2.1", "10.1.2.2", "10.1.3.1", "fd00::2:1", "fd00::2:2"
# tshark's fields of the TE LSA's addresses: each must decode, none an input address.
OSPF_TE_FIELDS = ["ospf.mpls.routerid", "ospf.mpls.linkid", "ospf.mpls.local_addr", "ospf.mpls.remote_addr"]


def ospf_bad():
    """A TE link sub-TLV of a layout the plugin does not read."""
    upd = struct.pack("!I", 1) + lsa(2, 10, "1.0.0.1", R2, otlv(2, otlv(12, packed(R3))))
    return ip_frame(R1, "224.0.0.5", 89, ospf(2, 4, R1, upd), ttl=1), R3


def fields_decoded(name, inp, out, fields, want, fails):
    """tshark decodes `fields` in both files, the input's holding `want`; the output's hold none of the input's."""
    def values(path):
        rows = L.tshark_fields(path, fields, " || ".join(fields), [])
        return {v for r in rows for col in r[1:] for v in col}
    vin, vout = values(inp), values(out)
    if not set(want) <= vin:
        fails.append(f"{name}: tshark does not find {sorted(set(want) - vin)} in the input (the test is wrong)")
    if len(vout) < len(want) or vin & vout:
        fails.append(f"{name}: tshark's addresses in the output {sorted(vout)}: missing, or input addresses in clear")


def v6_body(fr, proto):
    """An IPv6 frame's payload of `proto` and its pseudo-header, or None."""
    if fr[12:14] != b"\x86\xdd" or fr[20] != proto:
        return None
    o = fr[54:]
    return o, fr[22:38] + fr[38:54] + struct.pack("!IxxxB", len(o), proto)


def ospf_checksums(out, name, fails):
    """OSPF packet checksums (OSPFv3's over the IPv6 pseudo-header) and every LSA's right in the output."""
    for i, (_, _, _, fr) in enumerate(L.read_pcap(out)[1]):
        v6 = v6_body(fr, 89)
        if v6 and len(v6[0]) >= 16:
            if L._csum(v6[1] + v6[0]) != 0:
                fails.append(f"{name} frame {i + 1}: OSPFv3 checksum wrong")
            continue
        if fr[12:14] != b"\x08\x00" or fr[23] != 89:
            continue
        o = fr[34:]
        if len(o) < 24:
            continue
        n = struct.unpack("!H", o[2:4])[0]
        if len(o) < n or n < 24:
            continue
        if L._csum(o[:16] + o[24:n]) != 0:
            fails.append(f"{name} frame {i + 1}: OSPF checksum wrong")
        if o[1] == 4:
            k = 28
            for _ in range(struct.unpack("!I", o[24:28])[0]):
                ln = struct.unpack("!H", o[k + 18:k + 20])[0]
                if struct.unpack("!H", o[k + 16:k + 18])[0] != fletcher(o[k:k + ln]):
                    fails.append(f"{name} frame {i + 1}: LSA at {k} checksum wrong")
                k += ln


# ---------------------------------------------------------------- PIM

def enc_u(a):
    b = packed(a)
    return bytes([1 if len(b) == 4 else 2, 0]) + b


def enc_g(a, masklen=None):
    b = packed(a)
    return bytes([1 if len(b) == 4 else 2, 0, 0, masklen if masklen is not None else len(b) * 8]) + b


def pim(t, body, src=None, dst=None, summed=None):
    b = bytes([0x20 | t, 0, 0, 0]) + body
    n = summed or len(b)
    ck = L._csum(b[:n]) if src is None else L._csum(pseudo6(src, dst, 103, n) + b[:n])
    return b[:2] + struct.pack("!H", ck) + b[4:]


def udp_packet(src, dst, sport, dport, data):
    """An IP datagram (IPv4 or IPv6 by the addresses) holding UDP, checksums right."""
    s, d = packed(src), packed(dst)
    n = 8 + len(data)
    pseudo = s + d + (struct.pack("!BBH", 0, 17, n) if len(s) == 4 else struct.pack("!IxxxB", n, 17))
    u = struct.pack("!HHHH", sport, dport, n, 0) + data
    u = u[:6] + struct.pack("!H", L._csum(pseudo + u) or 0xFFFF) + u[8:]
    if len(s) == 16:
        return struct.pack("!IHBB", 0x60000000, n, 17, 64) + s + d + u
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + n, 7, 0, 64, 17, 0, s, d)
    return iph[:10] + struct.pack("!H", L._csum(iph)) + iph[12:] + u


P1, P2, P3, P4, P9, G = "10.5.0.1", "10.5.0.2", "10.5.0.3", "10.5.0.4", "10.5.0.9", "239.1.2.3"
RP = "198.51.100.9"


def pim_frames():
    f = []
    hello = struct.pack("!HHH", 1, 2, 105) + struct.pack("!HH", 24, 6) + enc_u(P2)
    f.append((ip_frame(P1, "224.0.0.13", 103, pim(0, hello), ttl=1), [P2], [P1]))
    bsr = struct.pack("!HBB", 7, 30, 64) + enc_u(P3) + enc_g("224.0.0.0", 4) + bytes([1, 1, 0, 0]) \
        + enc_u(P4) + struct.pack("!HBB", 150, 1, 0)
    f.append((ip_frame(P1, "224.0.0.13", 103, pim(4, bsr), ttl=1), [P3, P4], [P1]))
    jp = enc_u(P2) + bytes([0, 1]) + struct.pack("!H", 210) + enc_g(G) + struct.pack("!HH", 1, 0) + enc_g(P9)
    f.append((ip_frame(P1, "224.0.0.13", 103, pim(3, jp), ttl=1), [P2, P9], [P1]))
    inner = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20, 0, 0, 1, 17, 0, packed(P9), packed(G))
    inner = inner[:10] + struct.pack("!H", L._csum(inner)) + inner[12:]
    f.append((ip_frame(P1, RP, 103, pim(1, struct.pack("!I", 0x40000000) + inner, summed=8)), [P9], [P1]))
    hello6 = struct.pack("!HHH", 1, 2, 105) + struct.pack("!HH", 24, 18) + enc_u("fd00::51")
    f.append((ip_frame("fe80::5", "ff02::d", 103, pim(0, hello6, "fe80::5", "ff02::d"), ttl=1), ["fd00::51"], ["fe80::5"]))
    # Registers carrying their multicast packet (a tunnel: the packet takes
    # the policy, its source a user's address, its payload naming it again).
    data = udp_packet(P9, G, 5004, 5004, b"from " + P9.encode())
    f.append((ip_frame(P1, RP, 103, pim(1, struct.pack("!I", 0) + data, summed=8)), [P9], [P1]))
    data6 = udp_packet("fd00::52", "ff3e::1234", 5004, 5004, b"stream of fd00::52")
    f.append((ip_frame("fd00::5", "2001:db8::9", 103, pim(1, struct.pack("!I", 0) + data6, "fd00::5", "2001:db8::9", 8)),
              ["fd00::52"], ["fd00::5"]))
    return f


def pim_bad():
    """Registers whose data cannot be read as a packet: a Null-Register with
    data after its dummy header, a Register whose data is no IP packet
    (fail closed: cut)."""
    inner = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28, 0, 0, 1, 17, 0, packed(P9), packed(G)) + bytes(8)
    junk = bytes([0x10, 0, 0, 0]) + packed(P9) + bytes(24)
    return [(ip_frame(P1, RP, 103, pim(1, struct.pack("!I", 0x40000000) + inner, summed=8)), P9),
            (ip_frame(P1, RP, 103, pim(1, struct.pack("!I", 0) + junk, summed=8)), P9)]


def pim_checksums(out, name, fails):
    """PIM checksums (over IPv6 with the pseudo-header; a Register's inner IPv4 header) right in the output."""
    for i, (_, _, _, fr) in enumerate(L.read_pcap(out)[1]):
        v6 = v6_body(fr, 103)
        if v6 and len(v6[0]) >= 8 and v6[0][0] & 0xF == 1:  # a Register: its header, a pseudo-header of 8
            v6 = v6[0][:8], v6[1][:32] + struct.pack("!IxxxB", 8, 103)
        if v6 and len(v6[0]) >= 4 and L._csum(v6[1] + v6[0]) != 0:
            fails.append(f"{name} frame {i + 1}: PIM checksum over IPv6 wrong")
        if fr[12:14] != b"\x08\x00" or fr[23] != 103 or len(fr) < 38:
            continue
        o = fr[34:]
        if L._csum(o[:8] if o[0] & 0xF == 1 else o) != 0:
            fails.append(f"{name} frame {i + 1}: PIM checksum wrong")
        if o[0] & 0xF == 1 and len(o) >= 28 and L._csum(o[8:28]) != 0:
            fails.append(f"{name} frame {i + 1}: the Register's inner IPv4 checksum wrong")


def pim_registers_kept(inp, out, fails):
    """A Register's multicast packet is decoded, not cut: tshark reads the
    inner UDP datagram whole in the output, from the pseudonym of its source."""
    key = ["ip.src", "ipv6.src", "udp.length"]

    def rows(path):  # frame -> (the inner source: the last one, the UDP length)
        flt = "pim.type == 1 && pim.register_flag.null_register == 0 && udp"
        return {r[0]: ((r[1] + r[2])[-1], r[3]) for r in L.tshark_fields(path, key, flt)}
    a, b = rows(inp), rows(out)
    if len(a) != 2:
        fails.append(f"pim: {len(a)} Registers with a UDP datagram in the input, 2 expected (the test is wrong)")
    for k, (src, ulen) in a.items():
        if k not in b or b[k][1] != ulen:
            fails.append(f"pim frame {k}: the Register's UDP datagram was not kept whole")
        elif b[k][0] == src:
            fails.append(f"pim frame {k}: the Register's inner source {src} is unchanged")


# ---------------------------------------------------------------- LISP

def afi(a):
    b = packed(a)
    return struct.pack("!H", 1 if len(b) == 4 else 2) + b


def record(eid, mask, locs):
    b = struct.pack("!IBBHH", 60, len(locs), mask, 0, 0) + afi(eid)
    for loc in locs:
        b += bytes([1, 100, 255, 0, 0, 5]) + afi(loc)
    return b


E1, E5, E9, X2, X3 = "10.8.0.1", "10.8.0.5", "10.8.0.9", "10.8.0.2", "10.8.0.3"
MR = "198.51.100.30"
NONCE = bytes(range(8))


def lisp_frames():
    f = []
    req = bytes([0x10, 0, 1, 1]) + NONCE + afi(E5) + afi(E1) + afi(X2) + bytes([0, 32]) + afi(E9)
    f.append((L.udp4_frame(E1, MR, 40000, 4342, req), [E5, X2, E9], [E1]))
    reply = bytes([0x20, 0, 0, 1]) + NONCE + record(E9, 32, [X3, E1])
    f.append((L.udp4_frame(MR, E1, 4342, 40000, reply), [E9, X3], [E1]))
    reg = bytes([0x30, 0, 0, 1]) + NONCE + struct.pack("!HH", 1, 4) + bytes(4) + record("10.8.0.0", 24, [E1, X2])
    f.append((L.udp4_frame(E1, MR, 4342, 4342, reg), [X2, "10.8.0.0"], [E1]))
    # LCAFs: an EID as a source/dest key in an instance ID; locators as an
    # AFI list, an explicit locator path, a nonce locator.
    sd = lcaf(12, bytes([0, 0, 32, 32]) + afi(LS) + afi(LD))
    eid = lcaf(2, struct.pack("!I", 7) + sd, 24)
    locs = [lcaf(1, afi(X2) + afi("fd00::8:2")), lcaf(10, b"\0\1" + afi(X3) + b"\0\0" + afi(LX)), lcaf(8, bytes(4) + afi(LN))]
    rec = struct.pack("!IBBHH", 60, len(locs), 32, 0, 0) + eid + b"".join(bytes([1, 100, 255, 0, 0, 5]) + x for x in locs)
    f.append((L.udp4_frame(MR, E1, 4342, 40000, bytes([0x20, 0, 0, 1]) + NONCE + rec),
              [LS, LD, X2, "fd00::8:2", X3, LX, LN], [E1]))
    return f


LS, LD, LX, LN = "10.8.1.1", "10.8.2.2", "10.8.0.7", "10.8.0.8"
# tshark's fields of those LCAF addresses: each must decode, none an input address.
LISP_LCAF_FIELDS = ["lisp.lcaf.srcdst.src.ipv4", "lisp.lcaf.srcdst.dst.ipv4", "lisp.lcaf.afi_list.ipv4",
                    "lisp.lcaf.afi_list.ipv6", "lisp.lcaf.elp_hop.ipv4"]


def lcaf(t, body, rsvd2=0):
    return struct.pack("!HBBBBH", 16387, 0, 0, t, rsvd2, len(body)) + body


def lisp_bad():
    """An Encapsulated Control Message: its inner packet is not rewritten."""
    inner = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20, 0, 0, 64, 17, 0, packed(E5), packed(MR))
    return L.udp4_frame(E1, MR, 4342, 4342, bytes([0x80, 0, 0, 0]) + inner), E5


# ---------------------------------------------------------------- BGP

# The router (the flow's client, inside `clients`) speaks to a peer outside.
B_RTR, B_PEER = "10.1.1.1", "198.51.100.179"
B_ORIG, B_CL, B_AGG, B_PFX = "10.1.1.4", "10.1.1.5", "10.1.1.6", "10.1.7.0"
B_NH6, B_LL6, B_PFX6 = "fd00::1:1", "fe80::1", "fd00:1:2::"
B_KEPT = "203.0.113.0"  # a prefix outside `clients`: ip.server's keep()


def bgp_msg(t, body):
    return b"\xff" * 16 + struct.pack("!HB", 19 + len(body), t) + body


def bgp_open(ident):
    return bgp_msg(1, struct.pack("!BHH4sB", 4, 65001, 180, packed(ident), 8)
                   + bytes([2, 6, 1, 4, 0, 1, 0, 1]))  # multiprotocol: IPv4 unicast


def bgp_updates():
    """An UPDATE whose NEXT_HOP is the router's own address (with AGGREGATOR,
    ORIGINATOR_ID, CLUSTER_LIST and two prefixes), and one with an IPv6
    MP_REACH_NLRI (global and link-local next hops, a /48)."""
    attrs = bytes([0x40, 1, 1, 0]) + bytes([0x40, 2, 0]) + bytes([0x40, 3, 4]) + packed(B_RTR) \
        + bytes([0xC0, 7, 8]) + struct.pack("!I", 65001) + packed(B_AGG) \
        + bytes([0x80, 9, 4]) + packed(B_ORIG) + bytes([0x80, 10, 4]) + packed(B_CL)
    nlri = bytes([24]) + packed(B_PFX)[:3] + bytes([24]) + packed(B_KEPT)[:3]
    upd = bgp_msg(2, struct.pack("!HH", 0, len(attrs)) + attrs + nlri)
    reach = struct.pack("!HBB", 2, 1, 32) + packed(B_NH6) + packed(B_LL6) + bytes([0, 48]) + packed(B_PFX6)[:6]
    attrs6 = bytes([0x40, 1, 1, 0]) + bytes([0x40, 2, 0]) + bytes([0x90, 14]) + struct.pack("!H", len(reach)) + reach
    return upd, bgp_msg(2, struct.pack("!HH", 0, len(attrs6)) + attrs6)


def bgp_flow():
    """The OPENs, then the two UPDATEs and a KEEPALIVE in two segments: the
    second UPDATE starts in the first and ends in the second."""
    t0, ms = 1_700_000_000_000_000_000, 1_000_000
    c, s = 1000, 5000
    upd, upd6 = bgp_updates()
    cut = len(upd) + 30
    data = upd + upd6 + bgp_msg(4, b"")
    segs = [(B_RTR, B_PEER, 50179, 179, c, s, 0x02, b""), (B_PEER, B_RTR, 179, 50179, s, c + 1, 0x12, b""),
            (B_RTR, B_PEER, 50179, 179, c + 1, s + 1, 0x10, b"")]
    o1, o2 = bgp_open(B_RTR), bgp_open(B_PEER)
    segs.append((B_RTR, B_PEER, 50179, 179, c + 1, s + 1, 0x18, o1))
    segs.append((B_PEER, B_RTR, 179, 50179, s + 1, c + 1 + len(o1), 0x18, o2))
    segs.append((B_RTR, B_PEER, 50179, 179, c + 1 + len(o1), s + 1 + len(o2), 0x18, data[:cut]))
    segs.append((B_RTR, B_PEER, 50179, 179, c + 1 + len(o1) + cut, s + 1 + len(o2), 0x18, data[cut:]))
    segs.append((B_PEER, B_RTR, 179, 50179, s + 1 + len(o2), c + 1 + len(o1) + len(data), 0x10, b""))
    return [(t0 + i * ms, L.tcp4_frame(a, b, sp, dp, sq, ak, fl, pl)) for i, (a, b, sp, dp, sq, ak, fl, pl)
            in enumerate(segs)]


def check_bgp(amon, work, fails):
    """BGP through ids.amon: the router's own address (its BGP identifier,
    the NEXT_HOP it sends) is written as its header's pseudonym wherever it
    stands, the other users' addresses and prefixes are absent, the peer's
    and a prefix outside `clients` are kept, and tshark decodes every
    message, one of them split over two segments, without complaint."""
    inp, out = os.path.join(work, "bgp.pcap"), os.path.join(work, "bgp-ids.pcap")
    flow = bgp_flow()
    L.write_pcap(inp, flow)
    L.run_amon(amon, inp, [("ids", os.path.join(ROOT, "rules", "ids.amon"), out)])
    recs = L.read_pcap(out)[1]
    if len(recs) != len(flow):
        fails.append(f"bgp: {len(recs)} frames out of {len(flow)}")
        return 0
    users = [B_ORIG, B_CL, B_AGG, B_NH6, B_LL6]
    n = 0
    for i, ((_, fr), (_, _, _, o)) in enumerate(zip(flow, recs)):
        hm = header_map(fr, o)
        rtr = packed(B_RTR)
        for k in range(54, len(fr) - 3):
            if fr[k:k + 4] == rtr:
                n += 1
                if o[k:k + 4] != hm[rtr] or hm[rtr] == rtr:
                    fails.append(f"bgp frame {i + 1}: the router's address at {k} is not its header pseudonym")
        for a in users:
            if packed(a) in o[54:]:
                fails.append(f"bgp frame {i + 1}: {a} in clear in the output")
        if packed(B_PEER) in fr[54:] and packed(B_PEER) not in o[54:]:
            fails.append(f"bgp frame {i + 1}: the peer's identifier was not kept")
    if n != 2:
        fails.append(f"bgp: the router's address found {n} times in the input's messages, not 2 (the test is wrong)")
    if not any(packed(a) in fr for _, fr in flow for a in users):
        fails.append("bgp: the input does not carry the users' addresses (the test is wrong)")
    rows = L.tshark_fields(out, ["bgp.update.path_attribute.next_hop", "bgp.nlri_prefix",
                                 "bgp.mp_reach_nlri_ipv6_prefix"], "bgp.type == 2")
    got = {v for r in rows for cell in r[1:] for v in cell}
    pseud = str(ipaddress.ip_address(header_map(flow[5][1], recs[5][3])[packed(B_RTR)]))
    for want in (pseud, B_KEPT):
        if want not in got:
            fails.append(f"bgp: tshark does not read {want} in the output's UPDATEs ({sorted(got)})")
    for bad in (B_PFX, B_PFX6, B_RTR):
        if bad in got:
            fails.append(f"bgp: tshark reads {bad} in the output's UPDATEs ({sorted(got)})")
    if L.tshark_fields(out, [], "_ws.malformed || _ws.expert.severity >= error"):
        fails.append("bgp: tshark finds malformed or erroneous frames in the output")
    if len(L.tshark_fields(out, [], "bgp.type == 2")) != 2:
        fails.append("bgp: tshark does not find the two UPDATEs in the output")
    return n + len(users)


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
        return 0, out
    n = 0
    for i, (fr, users, own) in enumerate(frames):
        o = recs[i][3]
        hm = header_map(fr, o)
        for a in users:
            b = a if isinstance(a, bytes) else packed(a)
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
        if packed(a) in o[34:]:
            fails.append(f"{name} malformed frame: {a} in clear")
        if len(o) >= len(b):
            fails.append(f"{name} malformed frame: its payload was not cut")
    for flt, extra in tshark_checks:
        rows = L.tshark_fields(out, [], flt, extra)
        if rows:
            fails.append(f"{name}: tshark finds {flt} in frames {[r[0] for r in rows]}")
    return n, out


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    work = L.tmpdir("ipcarriers-")
    fails = []
    n, _ = check(amon, work, "sctp", sctp_frames(), [sctp_bad()], fails,
                 [("sctp.checksum.status == 0", ["-o", "sctp.checksum:CRC-32C"])])
    k, out = check(amon, work, "ospf", ospf_frames(), [ospf_bad()], fails, [("_ws.malformed", [])])
    ospf_checksums(out, "ospf", fails)
    fields_decoded("ospf", os.path.join(work, "ospf.pcap"), out, OSPF_TE_FIELDS, [R2, TE_RID, TE_L, TE_R], fails)
    n += k
    k, out = check(amon, work, "pim", pim_frames(), pim_bad(), fails,
                   [("_ws.malformed", []), ("udp.checksum.status == 0 || ip.checksum.status == 0", L.CHECKS)])
    pim_checksums(out, "pim", fails)
    pim_registers_kept(os.path.join(work, "pim.pcap"), out, fails)
    n += k
    k, out = check(amon, work, "lisp", lisp_frames(), [lisp_bad()], fails, [("udp.checksum.status == 0", L.CHECKS)])
    fields_decoded("lisp", os.path.join(work, "lisp.pcap"), out, LISP_LCAF_FIELDS, [LS, LD, X2, "fd00::8:2", X3], fails)
    n += k
    n += check_bgp(amon, work, fails)
    return L.report(fails, f"ok: {n} users' addresses carried in message bodies are absent from the ids output")


if __name__ == "__main__":
    sys.exit(main())
