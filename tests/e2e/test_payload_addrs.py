#!/usr/bin/env python3
"""End to end: addresses and MACs that travel in a kept payload take the
mapping of the packet's own, through `amon pcap` on crafted frames, with
tshark reading the output.

  ND    neighbour solicitation/advertisement/redirect: targets equal the
        pseudonym the same address has in IP headers (Crypto-PAn), the
        link-layer address options equal the frame's rewritten source MAC,
        a Redirect's destination is mapped, the redirected packet zeroed; a
        body that does not parse is cut (fail closed); checksums stay good.
  PTR   a reverse-DNS question for a user's address leaves with its address
        labels masked (lengths kept), a server's stays; counted.
  OWNER an mDNS EDNS0 Owner option's MAC equals the frame's rewritten source
        MAC, the wake-up MAC is mapped, the password zeroed.
  RIPNG route prefixes map as addresses, their lengths kept.
  RIP   (v2 over IPv4) the same, and a plain-text password entry is zeroed.

usage: test_payload_addrs.py AMON"""

import ipaddress
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

S = 1_000_000_000
MAC_C = bytes.fromhex("001b213a4f5d")   # the user's device
MAC_N = bytes.fromhex("001b213a4f99")   # a neighbour
MAC_W = bytes.fromhex("0a1b2c3d4e5f")   # the MAC to wake the device with
MAC_R = bytes.fromhex("00005e000101")   # the router
C6, N6 = "fd00::17", "fd00::99"          # users (inside clients)
R6 = "fe80::1"
SRV6 = "2001:db8::80"
C4 = "192.168.7.7"


def a6(s):
    return ipaddress.IPv6Address(s).packed


def eth(dst, src, et):
    return dst + src + struct.pack("!H", et)


def icmp6(src, dst, body):
    """body: the ICMPv6 message with a zero checksum at bytes 2..3."""
    ph = a6(src) + a6(dst) + struct.pack("!IxxxB", len(body), 58)
    ck = L._csum(ph + body)
    body = body[:2] + struct.pack("!H", ck) + body[4:]
    return struct.pack("!IHBB", 0x60000000, len(body), 58, 255) + a6(src) + a6(dst) + body


def udp6(src, dst, sport, dport, payload):
    u = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ph = a6(src) + a6(dst) + struct.pack("!IxxxB", len(u), 17)
    ck = L._csum(ph + u) or 0xFFFF
    u = u[:6] + struct.pack("!H", ck) + u[8:]
    return struct.pack("!IHBB", 0x60000000, len(u), 17, 64) + a6(src) + a6(dst) + u


def udp4(src, dst, sport, dport, payload):
    s, d = L.ip4(src), L.ip4(dst)
    u = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ck = L._csum(s + d + struct.pack("!BBH", 0, 17, len(u)) + u) or 0xFFFF
    u = u[:6] + struct.pack("!H", ck) + u[8:]
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(u), 1, 0x4000, 64, 17, 0, s, d)
    return iph[:10] + struct.pack("!H", L._csum(iph)) + iph[12:] + u


def lla(t, mac):
    return bytes([t, 1]) + mac


def ns(target, opts):
    return bytes([135, 0, 0, 0]) + bytes(4) + a6(target) + opts


def na(target, opts):
    return bytes([136, 0, 0, 0]) + bytes([0x60, 0, 0, 0]) + a6(target) + opts


def wire_name(n):
    return b"".join(bytes([len(x)]) + x.encode() for x in n.split(".")) + b"\0"


def dns_q(txid, name, qtype=12, opt=b""):
    m = struct.pack("!HHHHHH", txid, 0x0100, 1, 0, 0, 1 if opt else 0) + wire_name(name) + struct.pack("!HH", qtype, 1)
    if opt:
        m += b"\0" + struct.pack("!HHIH", 41, 1440, 0, len(opt)) + opt
    return m


def dns_ptr_resp(txid, name, target):
    rd = wire_name(target)
    return (struct.pack("!HHHHHH", txid, 0x8180, 1, 1, 0, 0) + wire_name(name) + struct.pack("!HH", 12, 1) +
            b"\xc0\x0c" + struct.pack("!HHIH", 12, 1, 300, len(rd)) + rd)


def build(d):
    f = []
    t = 1_700_000_000 * S
    mc_ns = bytes.fromhex("3333ff000099")
    # 1 NS: the user asks for its neighbour; 2 NA: the neighbour answers.
    f.append((t, eth(mc_ns, MAC_C, 0x86DD) + icmp6(C6, "ff02::1:ff00:99", ns(N6, lla(1, MAC_C)))))
    f.append((t + 1000, eth(MAC_C, MAC_N, 0x86DD) + icmp6(N6, C6, na(N6, lla(2, MAC_N)))))
    # 3 Redirect from the router: a better first hop (a neighbour) for a server.
    redir_hdr = bytes([4, 6]) + bytes(6) + icmp6(C6, SRV6, bytes([128, 0, 0, 0, 0, 1, 0, 1]) + bytes(0))[:40]
    body = bytes([137, 0, 0, 0]) + bytes(4) + a6(N6) + a6(SRV6) + lla(2, MAC_N) + redir_hdr
    f.append((t + 2000, eth(MAC_C, MAC_R, 0x86DD) + icmp6(R6, C6, body)))
    # 4 A malformed NS: an option of length 0 after the source link-layer one.
    f.append((t + 3000, eth(mc_ns, MAC_C, 0x86DD) + icmp6(C6, "ff02::1:ff00:99",
                                                         ns(N6, lla(1, MAC_C) + bytes([1, 0]) + a6(C6)[:6]))))
    # 5 The user's own traffic to a server, so its pseudonym shows in an IP header.
    f.append((t + 4000, eth(MAC_R, MAC_C, 0x86DD) + udp6(C6, SRV6, 40000, 53, dns_q(1, "example.com", 1))))
    # 6, 7 PTR of the user's own IPv4 address, and 8, 9 of a server's.
    f.append((t + 5000, eth(MAC_R, MAC_C, 0x0800) + udp4(C4, "192.0.2.53", 40001, 53, dns_q(2, "7.7.168.192.in-addr.arpa"))))
    f.append((t + 6000, eth(MAC_C, MAC_R, 0x0800) + udp4("192.0.2.53", C4, 53, 40001,
                                                       dns_ptr_resp(2, "7.7.168.192.in-addr.arpa", "host7.lan"))))
    f.append((t + 7000, eth(MAC_R, MAC_C, 0x0800) + udp4(C4, "192.0.2.53", 40002, 53, dns_q(3, "9.2.0.198.in-addr.arpa"))))
    f.append((t + 8000, eth(MAC_C, MAC_R, 0x0800) + udp4("192.0.2.53", C4, 53, 40002,
                                                       dns_ptr_resp(3, "9.2.0.198.in-addr.arpa", "www.example.net"))))
    # 10 mDNS with an Owner option: primary MAC, wake-up MAC, 4-byte password.
    owner = struct.pack("!HH", 4, 18) + bytes([0, 7]) + MAC_C + MAC_W + b"\x11\x22\x33\x44"
    f.append((t + 9000, eth(bytes.fromhex("01005e0000fb"), MAC_C, 0x0800) +
              udp4(C4, "224.0.0.251", 5353, 5353, dns_q(0, "printer.local", 255, owner))))
    # 11 RIPng response from the router: a /64 of the users and a /128 host route.
    rip = bytes([2, 1, 0, 0]) + a6("fd00::") + struct.pack("!HBB", 0, 64, 1) + a6(C6) + struct.pack("!HBB", 0, 128, 2)
    f.append((t + 10000, eth(bytes.fromhex("333300000009"), MAC_R, 0x86DD) + udp6(R6, "ff02::9", 521, 521, rip)))
    # 12 RIPv2 response from the user's host (a router): a simple-password
    # authentication entry, the users' /24, a host route to the user's
    # address via a neighbour, and a server's network.
    rip2 = bytes([2, 2, 0, 0]) + struct.pack("!HH", 0xFFFF, 2) + b"hunter2-password"
    rip2 += struct.pack("!HH4s4s4sI", 2, 0, L.ip4("192.168.7.0"), L.ip4("255.255.255.0"), bytes(4), 1)
    rip2 += struct.pack("!HH4s4s4sI", 2, 0, L.ip4(C4), L.ip4("255.255.255.255"), L.ip4("192.168.7.9"), 2)
    f.append((t + 11000, eth(bytes.fromhex("01005e000009"), MAC_C, 0x0800) + udp4(C4, "224.0.0.9", 520, 520, rip2)))
    path = os.path.join(d, "in.pcap")
    L.write_pcap(path, f)
    return path


# The users' addresses and MACs mapped, the servers' kept (test_payload_cut
# adds its own payload rule to the same).
POLICY = ('key k = file("keys/k.hex")\n'
          "clients = { 192.168.0.0/16, fd00::/8, fe80::/10 }\n"
          "eth.src, eth.dst : hash(key=k)\n"
          "ip.client : cryptopan(key=k)\n"
          "ip.server : keep()\n")


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    d = L.tmpdir("payload-addrs-")
    L.make_key(d, "k")
    pol = L.write_policy(d, "p.amon", POLICY + "dns.qname : keep()\npayload : keep()\n")
    inp = build(d)
    out = os.path.join(d, "out.pcap")
    sj = os.path.join(d, "stats.json")
    L.run_amon(amon, inp, [("c", pol, out)], extra=["--stats-json", sj])
    with open(sj) as fh:
        st = json.load(fh)["consumers"][0]
    _, rin = L.read_pcap(inp)
    _, rout = L.read_pcap(out)
    fails = []
    if len(rout) != len(rin):
        print(f"FAIL: {len(rin)} frames in, {len(rout)} out")
        return 1
    fr = {i + 1: r[3] for i, r in enumerate(rout)}
    rows = {r[0]: r[1:] for r in L.tshark_fields(out, [
        "ipv6.src", "ipv6.dst", "eth.src", "icmpv6.nd.ns.target_address", "icmpv6.nd.na.target_address",
        "icmpv6.nd.rd.target_address", "icmpv6.rd.na.destination_address", "icmpv6.opt.linkaddr",
        "icmpv6.checksum.status", "dns.qry.name", "dns.ptr.domain_name", "udp.checksum.status",
        "ripng.rte.ipv6_prefix", "ripng.rte.prefix_length", "ip.src", "rip.ip", "rip.next_hop",
        "rip.auth.passwd"], None, L.CHECKS)}

    def col(frame, i):
        return rows.get(frame, [[]] * 18)[i]

    # Nothing of the users' addresses or MACs in any ND or RIPng frame.
    secrets = {"fd00::17": a6(C6), "fd00::99": a6(N6), "mac C": MAC_C, "mac N": MAC_N, "wake mac": MAC_W}
    for n in (1, 2, 3, 4, 10, 11, 12):
        for what, b in secrets.items():
            if b in fr[n]:
                fails.append(f"frame {n}: {what} in clear")
    # The pseudonym of each address in IP headers.
    c_ps = col(5, 0)[0] if col(5, 0) else None
    n_ps = col(2, 0)[0] if col(2, 0) else None
    if not c_ps or c_ps == C6 or not n_ps or n_ps == N6:
        fails.append(f"IP headers not Crypto-PAn'd: {c_ps} {n_ps}")
    if col(1, 3) != [n_ps]:
        fails.append(f"NS target {col(1, 3)}, the neighbour's pseudonym is {n_ps}")
    if col(2, 4) != [n_ps]:
        fails.append(f"NA target {col(2, 4)}, the neighbour's pseudonym is {n_ps}")
    if col(1, 7) != col(1, 2) or col(2, 7) != col(2, 2):
        fails.append(f"link-layer options {col(1, 7)} {col(2, 7)} differ from the frames' source MACs "
                     f"{col(1, 2)} {col(2, 2)}")
    if col(3, 5) != [n_ps]:
        fails.append(f"Redirect target {col(3, 5)}, the neighbour's pseudonym is {n_ps}")
    dest = col(3, 6)
    if not dest or dest[0] == SRV6:
        fails.append(f"Redirect destination {dest}: not mapped")
    if fr[3][-40:] != bytes(40):
        fails.append("the redirected packet is not zeroed")
    for n in (1, 2, 3):
        if col(n, 8) != ["1"]:
            fails.append(f"frame {n}: ICMPv6 checksum status {col(n, 8)}")
    if len(fr[4]) >= len(rin[3][3]):
        fails.append(f"malformed NS not cut: {len(fr[4])} bytes of {len(rin[3][3])}")
    # PTR
    if col(6, 9) != ["x.x.xxx.xxx.in-addr.arpa"] or col(7, 9) != ["x.x.xxx.xxx.in-addr.arpa"]:
        fails.append(f"PTR of the user: {col(6, 9)} {col(7, 9)}")
    if col(7, 10) != ["host7.lan"]:
        fails.append(f"PTR answer {col(7, 10)}")
    if col(8, 9) != ["9.2.0.198.in-addr.arpa"] or col(9, 9) != ["9.2.0.198.in-addr.arpa"]:
        fails.append(f"PTR of a server changed: {col(8, 9)} {col(9, 9)}")
    for n in (6, 7, 8, 9, 10):
        if col(n, 11) != ["1"]:
            fails.append(f"frame {n}: UDP checksum status {col(n, 11)}")
    if st.get("reverse_hidden") != 2:
        fails.append(f"reverse_hidden {st.get('reverse_hidden')}, want 2")
    # Owner option: MACs after OPT RR header; the password last.
    o = fr[10]
    opt = o[-22:]
    src_mac = o[6:12]
    if opt[:2] != b"\x00\x04" or opt[6:12] != src_mac or opt[12:18] in (MAC_W, bytes(6)) or opt[18:] != bytes(4):
        fails.append(f"Owner option {opt.hex()} (source MAC {src_mac.hex()})")
    # RIPng
    pre, plen = col(11, 12), col(11, 13)
    if plen != ["64", "128"] or not pre or pre[0] == "fd00::" or pre[1] != c_ps:
        fails.append(f"RIPng prefixes {pre} /{plen}: want mapped, the host route {c_ps}")
    elif ipaddress.IPv6Address(pre[0]).packed[8:] != bytes(8) or ipaddress.IPv6Address(c_ps).packed[:8] != \
            ipaddress.IPv6Address(pre[0]).packed[:8]:
        fails.append(f"RIPng /64 {pre[0]} is not the prefix of the user's pseudonym {c_ps}")
    # RIPv2: the /24 is the prefix of the user's pseudonym, the host route is
    # the pseudonym, the neighbour next hop mapped, the password zeroed.
    ps4 = col(12, 14)[0] if col(12, 14) else None
    routes, hops = col(12, 15), col(12, 16)
    if not ps4 or ps4 == C4 or len(routes) != 2:
        fails.append(f"RIPv2: source {ps4}, routes {routes}")
    else:
        if routes[1] != ps4:
            fails.append(f"RIPv2 host route {routes[1]}, the user's pseudonym is {ps4}")
        if routes[0] != ".".join(ps4.split(".")[:3] + ["0"]):
            fails.append(f"RIPv2 /24 {routes[0]} is not the prefix of {ps4}")
        if len(hops) != 2 or hops[1] in ("192.168.7.9", "0.0.0.0") or hops[0] != "0.0.0.0":
            fails.append(f"RIPv2 next hops {hops}: a neighbour's mapped, none kept as 0.0.0.0")
    if b"hunter2" in fr[12]:
        fails.append("RIPv2 password in clear")
    if col(12, 11) != ["1"]:
        fails.append(f"RIPv2 UDP checksum status {col(12, 11)}")
    if st.get("nd_zeroed", 0) < 1:
        fails.append(f"nd_zeroed {st.get('nd_zeroed')}: the redirected header was zeroed")
    return L.report(fails, "payload addresses: ND, PTR, Owner, RIPng, RIP as the packet's own")


if __name__ == "__main__":
    sys.exit(main())
