#!/usr/bin/env python3
"""End to end: Mobile IPv6's addresses outside the fixed IPv6 header
(RFC 6275) take the treatment the same address takes in a header, through
`amon pcap`, on crafted frames:

  - the Home Address destination option (the source's home address) and a
    type 2 routing header (the destination's), on TCP whose checksum a
    mobile node's stack sums over the home addresses: each home address
    leaves as the pseudonym its own packets' headers give it, the checksum
    right over the rewritten home addresses;
  - Mobility Header messages: a Binding Update carrying an alternate
    care-of address and a home address option, a Binding Error naming the
    packet's own destination, a Home Agent Switch listing home agents;
    each address as its header pseudonym (one address, one treatment),
    the Mobility Header checksum right as it came (over the header's
    addresses, or over the home address);
  - an unknown mobility option: the message is cut where addresses are
    protected (its frame ends after the IPv6 header);
  - a routing header listing a path (type 0): not forwarded.

Under a policy mapping both roles and under the shipped rules/ids.amon:
no address of a user leaves in clear in any frame; tshark decodes every
frame.

usage: test_mip6_e2e.py AMON"""

import ipaddress
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "e2e"))
import e2e_lib as L  # noqa: E402

HOME, COA, ACOA = "fd00:1::5", "fd00:2::9", "fd00:3::7"  # the mobile node's
HA, HA2 = "fd00:1::1", "fd00:1::2"                      # its home agents
CN = "2001:db8::80"                                      # a correspondent
USERS = (HOME, COA, ACOA, HA, HA2)


def a(s):
    return ipaddress.ip_address(s).packed


def csum16(b):
    return L._csum(b)


def pseudo(src, dst, nh, n):
    return a(src) + a(dst) + struct.pack("!IxxxB", n, nh)


def ipv6(src, dst, nh, body):
    return b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x86\xdd" + struct.pack("!IHBB", 0x60000000, len(body), nh, 64) + \
        a(src) + a(dst) + body


def tcp(sport, dport, flags, psrc, pdst):
    """A TCP header whose checksum is summed over psrc and pdst."""
    t = struct.pack("!HHIIHHHH", sport, dport, 1, 0, (5 << 12) | flags, 65535, 0, 0)
    return t[:16] + struct.pack("!H", csum16(pseudo(psrc, pdst, 6, len(t)) + t)) + t[18:]


def hao(nh, home):
    """A Destination Options header with PadN to 8n+6, then the Home Address option."""
    return bytes([nh, 2, 1, 2, 0, 0, 0xC9, 16]) + a(home)


def rh2(nh, home):
    return bytes([nh, 2, 2, 1, 0, 0, 0, 0]) + a(home)


def mh(mtype, body, psrc, pdst):
    """A Mobility Header padded with PadN, its checksum over psrc and pdst."""
    b = bytes([59, 0, mtype, 0, 0, 0]) + body
    pad = -len(b) % 8
    b += b"\0" if pad == 1 else (bytes([1, pad - 2]) + bytes(pad - 2) if pad else b"")
    b = bytes([59, len(b) // 8 - 1]) + b[2:]
    return b[:4] + struct.pack("!H", csum16(pseudo(psrc, pdst, 135, len(b)) + b)) + b[6:]


def opt(t, data):
    return bytes([t, len(data)]) + data


def frames():
    """[(frame, what to check)]"""
    f = []
    # Home: the mobile node's own packets show its home address's pseudonym.
    f.append((ipv6(HOME, CN, 6, tcp(40000, 80, 0x02, HOME, CN)), "home"))
    for h in (HA, HA2, ACOA):
        f.append((ipv6(h, CN, 6, tcp(40001, 80, 0x02, h, CN)), "plain"))
    # Away: the home address in the option and in the routing header.
    f.append((ipv6(COA, CN, 60, hao(6, HOME) + tcp(40002, 80, 0x02, HOME, CN)), "tcp-hao"))
    f.append((ipv6(CN, COA, 43, rh2(6, HOME) + tcp(80, 40002, 0x12, CN, HOME)), "tcp-rh2"))
    # A Binding Update to the home agent, from the care-of address.
    bu = struct.pack("!HHH", 7, 0x8000, 100) + opt(3, a(ACOA)) + opt(4, b"\0\1\0\2")
    f.append((ipv6(COA, HA, 60, hao(135, HOME) + mh(5, bu, COA, HA)), "bu"))
    # The same, its checksum summed over the home address (as a stack that sends from it does).
    f.append((ipv6(COA, HA, 60, hao(135, HOME) + mh(5, bu, HOME, HA)), "bu-home"))
    # A Binding Error naming the packet's own destination; a Home Agent Switch.
    f.append((ipv6(HA, COA, 135, mh(7, b"\1\0" + a(COA), HA, COA)), "be"))
    f.append((ipv6(HA, HOME, 135, mh(12, b"\2\0" + a(HA) + a(HA2), HA, HOME)), "has"))
    # An unknown mobility option, and a type 0 routing header.
    f.append((ipv6(COA, HA, 135, mh(5, struct.pack("!HHH", 8, 0x8000, 100) + opt(200, a(ACOA)), COA, HA)), "unknown"))
    f.append((ipv6(COA, CN, 43, bytes([6, 2, 0, 1, 0, 0, 0, 0]) + a(HA) + tcp(40003, 80, 0x02, COA, HA)), "rh0"))
    return f



def check(amon, d, name, pol, fails, server_mapped):
    fs = frames()
    inp, out = os.path.join(d, name + "-in.pcap"), os.path.join(d, name + "-out.pcap")
    L.write_pcap(inp, [(1_700_000_000_000_000_000 + i * 1_000_000, fr) for i, (fr, _) in enumerate(fs)])
    L.run_amon(amon, inp, [(name, pol, out)])
    _, rout = L.read_pcap(out)
    got = [r[3] for r in rout]
    kinds = [k for _, k in fs]
    want = [k for k in kinds if k != "rh0"]
    if len(got) != len(want):
        fails.append(f"{name}: {len(got)} frames out, want {len(want)} (the type 0 routing header's dropped)")
        return
    by = dict(zip(want, got))
    # Each address's pseudonym, from the frames whose header carries it as the source.
    ps = {HOME: by["home"][22:38]}
    plain = [g for k, g in zip(want, got) if k == "plain"]
    for h, g in zip((HA, HA2, ACOA), plain):
        ps[h] = g[22:38]
    ps[COA] = by["tcp-hao"][22:38]
    for u in USERS:
        if ps[u] == a(u):
            fails.append(f"{name}: {u} is not rewritten in its own header")
    for i, g in enumerate(got):
        for u in USERS:
            if a(u) in g:
                fails.append(f"{name}: frame {i + 1} ({want[i]}): {u} in clear")
    cn = by["tcp-hao"][38:54]
    if server_mapped == (cn == a(CN)):
        fails.append(f"{name}: the correspondent's address {'kept' if server_mapped else 'rewritten'}")

    def tcp_ok(g, hs, hd, at):
        seg = g[at:]
        return csum16(hs + hd + struct.pack("!IxxxB", len(seg), 6) + seg) == 0

    def mh_ok(g, at):
        seg = g[at:]
        return csum16(g[22:38] + g[38:54] + struct.pack("!IxxxB", len(seg), 135) + seg) == 0

    g = by["tcp-hao"]
    if g[54 + 8:54 + 24] != ps[HOME]:
        fails.append(f"{name}: the home address option is not the home address's pseudonym")
    if not tcp_ok(g, g[62:78], g[38:54], 78):
        fails.append(f"{name}: TCP checksum over the home address option wrong")
    g = by["tcp-rh2"]
    if g[54 + 8:54 + 24] != ps[HOME]:
        fails.append(f"{name}: the type 2 routing header's home address is not its pseudonym")
    if not tcp_ok(g, g[22:38], g[62:78], 78):
        fails.append(f"{name}: TCP checksum over the routing header's home address wrong")
    g = by["bu"]
    if g[62:78] != ps[HOME]:
        fails.append(f"{name}: the Binding Update's home address option is not the home address's pseudonym")
    if g[78 + 12 + 2:78 + 12 + 18] != ps[ACOA]:
        fails.append(f"{name}: the alternate care-of address is not its pseudonym")
    if not mh_ok(g, 78):
        fails.append(f"{name}: Binding Update checksum wrong")
    g = by["bu-home"]
    seg = g[78:]
    if g[62:78] != ps[HOME] or csum16(g[62:78] + g[38:54] + struct.pack("!IxxxB", len(seg), 135) + seg) != 0:
        fails.append(f"{name}: Binding Update checksum over the home address wrong")
    g = by["be"]
    if g[54 + 8:54 + 24] != g[38:54]:
        fails.append(f"{name}: the Binding Error's address is not its header's rewrite")
    if not mh_ok(g, 54):
        fails.append(f"{name}: Binding Error checksum wrong")
    g = by["has"]
    if g[62:78] != ps[HA] or g[78:94] != ps[HA2]:
        fails.append(f"{name}: the home agents listed are not their pseudonyms")
    if not mh_ok(g, 54):
        fails.append(f"{name}: Home Agent Switch checksum wrong")
    g = by["unknown"]
    if len(g) > 54 and any(g[54:]):
        fails.append(f"{name}: a Mobility Header with an unknown option kept its bytes")
    # The cut message's frame ends after its IPv6 header, which still names it.
    bad = L.bad_frames(out) - {want.index("unknown") + 1}
    if bad:
        fails.append(f"{name}: tshark flags frames {sorted(bad)}")


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    d = L.tmpdir("mip6-")
    fails = []
    key = L.make_key(d)
    both = L.write_policy(d, "both.amon", f'key k = file("{key}")\nclients = {{ fd00::/8 }}\n'
                                          "ip.client : cryptopan(key=k)\nip.server : prefix(16, v6=32)\n")
    check(amon, d, "both", both, fails, True)
    check(amon, d, "ids", L.write_policy(d, "ids.amon", L.shipped_ids(d)), fails, False)
    return L.report(fails, "ok: home addresses in the option, the routing header and Mobility Header messages "
                           "take their header pseudonyms; checksums right; unknown layouts fail closed")


if __name__ == "__main__":
    sys.exit(main())
