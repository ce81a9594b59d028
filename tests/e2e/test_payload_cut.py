#!/usr/bin/env python3
"""End to end: `payload : cut()` keeps the headers that travel in an ICMP
payload, so the packets stay well formed (tshark flags none), with their
addresses mapped as the packet's own:

  ND     an NS, an NA and a Redirect keep their fixed part (target, and a
         Redirect's destination), mapped; their options go.
  ERROR  an ICMP port unreachable keeps the quoted IP header and the first
         8 bytes of the quoted UDP header, addresses mapped; the quoted
         payload goes.

usage: test_payload_cut.py AMON"""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402
import test_payload_addrs as P  # noqa: E402

S = 1_000_000_000
SRV4 = "198.51.100.9"


def icmp4_unreach(src, dst, quoted):
    body = bytes([3, 3, 0, 0, 0, 0, 0, 0]) + quoted
    ck = L._csum(body)
    body = body[:2] + struct.pack("!H", ck) + body[4:]
    s, d = L.ip4(src), L.ip4(dst)
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), 7, 0, 64, 1, 0, s, d)
    return iph[:10] + struct.pack("!H", L._csum(iph)) + iph[12:] + body


def build(d):
    t = 1_700_000_000 * S
    mc_ns = bytes.fromhex("3333ff000099")
    f = [
        (t, P.eth(mc_ns, P.MAC_C, 0x86DD) + P.icmp6(P.C6, "ff02::1:ff00:99", P.ns(P.N6, P.lla(1, P.MAC_C)))),
        (t + 1000, P.eth(P.MAC_C, P.MAC_N, 0x86DD) + P.icmp6(P.N6, P.C6, P.na(P.N6, P.lla(2, P.MAC_N)))),
    ]
    body = bytes([137, 0, 0, 0]) + bytes(4) + P.a6(P.N6) + P.a6(P.SRV6) + P.lla(2, P.MAC_N)
    f.append((t + 2000, P.eth(P.MAC_C, P.MAC_R, 0x86DD) + P.icmp6(P.R6, P.C6, body)))
    # The user's datagram to a server, then the server's port unreachable about it.
    dgram = P.udp4(P.C4, SRV4, 40000, 9999, b"secret payload of the user")
    f.append((t + 3000, P.eth(P.MAC_R, P.MAC_C, 0x0800) + dgram))
    f.append((t + 4000, P.eth(P.MAC_C, P.MAC_R, 0x0800) + icmp4_unreach(SRV4, P.C4, dgram)))
    path = os.path.join(d, "in.pcap")
    L.write_pcap(path, f)
    return path


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    d = L.tmpdir("payload-cut-")
    L.make_key(d, "k")
    pol = L.write_policy(d, "p.amon", P.POLICY + "payload : cut()\n")
    inp = build(d)
    out = os.path.join(d, "out.pcap")
    L.run_amon(amon, inp, [("c", pol, out)])
    _, rout = L.read_pcap(out)
    fails = []
    if len(rout) != 5:
        print(f"FAIL: {len(rout)} frames out of 5")
        return 1
    bad = L.bad_frames(out)
    if bad:
        fails.append(f"tshark flags frames {sorted(bad)} as malformed or in error")
    rows = {r[0]: r[1:] for r in L.tshark_fields(out, [
        "ipv6.src", "icmpv6.nd.ns.target_address", "icmpv6.nd.na.target_address", "icmpv6.nd.rd.target_address",
        "icmpv6.rd.na.destination_address", "icmpv6.opt", "ip.src", "ip.dst", "icmp.type", "udp.srcport",
        "udp.dstport"], None, L.CHECKS)}

    def col(frame, i):
        return rows.get(frame, [[]] * 11)[i]

    n_ps = col(2, 0)[0] if col(2, 0) else None
    if not n_ps or n_ps == P.N6:
        fails.append(f"NA source {n_ps}: not mapped")
    for n, i in ((1, 1), (2, 2), (3, 3)):
        if col(n, i) != [n_ps]:
            fails.append(f"frame {n}: target {col(n, i)}, the neighbour's pseudonym is {n_ps}")
        if col(n, 5):
            fails.append(f"frame {n}: options left: {col(n, 5)}")
    if len(col(3, 4)) != 1 or col(3, 4) == [P.SRV6]:
        fails.append(f"Redirect destination {col(3, 4)}: not mapped (a host of the link takes the user's rule)")
    icmp6_len = {1: 24, 2: 24, 3: 40}
    for n, want in icmp6_len.items():
        got = len(rout[n - 1][3]) - 14 - 40
        if got != want:
            fails.append(f"frame {n}: ICMPv6 message of {got} bytes, want its fixed part ({want})")
    # The ICMP error: outer and quoted addresses mapped alike, quoted UDP
    # header kept, quoted payload gone.
    c_ps = col(4, 6)[0] if col(4, 6) else None
    if not c_ps or c_ps == P.C4:
        fails.append(f"the user's datagram source {c_ps}: not mapped")
    if col(5, 6) != [SRV4, c_ps] or col(5, 7) != [c_ps, SRV4]:
        fails.append(f"ICMP error (outer, quoted) sources {col(5, 6)}, destinations {col(5, 7)}: want the user "
                     f"as {c_ps} in both")
    if col(5, 9) != ["40000"] or col(5, 10) != ["9999"]:
        fails.append(f"quoted UDP ports {col(5, 9)} {col(5, 10)}")
    frame5 = rout[4][3]
    if b"secret" in frame5 or len(frame5) != 14 + 20 + 8 + 20 + 8:
        fails.append(f"ICMP error of {len(frame5)} bytes: want the quoted headers only (70)")
    return L.report(fails, "payload cut: ND fixed parts and ICMP quotes kept, mapped, well formed")


if __name__ == "__main__":
    sys.exit(main())
