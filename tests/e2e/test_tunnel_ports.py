#!/usr/bin/env python3
"""End to end: plain UDP on a tunnel's port is plain UDP. Windows and NAT
gateways use the tunnels' ports (VXLAN 4789, VXLAN-GPE 4790, Geneve 6081,
GTP-U 2152, Teredo 3544) as ephemeral ports; a DNS exchange, a QUIC
Initial and other UDP from each of them (and the answers to it) must keep
their normal treatment: none dropped or cut as a tunnel that failed to
parse, DNS names rewritten as from any other port. A real VXLAN datagram
to its port is still opened.

usage: test_tunnel_ports.py AMON"""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

S = 1_000_000_000
PORTS = (4789, 4790, 6081, 2152, 3544)


def udp4_frame(src, dst, sport, dport, payload):
    s, d = L.ip4(src), L.ip4(dst)
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ck = L._csum(s + d + struct.pack("!BBH", 0, 17, len(udp)) + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", ck) + udp[8:]
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0x4000, 64, 17, 0, s, d)
    iph = iph[:10] + struct.pack("!H", L._csum(iph)) + iph[12:]
    return b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00" + iph + udp


def wire_name(n):
    return b"".join(bytes([len(x)]) + x.encode() for x in n.split(".")) + b"\0"


def dns(txid, flags, qname, answers=0):
    return struct.pack("!HHHHHH", txid, flags, 1, answers, 0, 0) + wire_name(qname) + struct.pack("!HH", 1, 1)


def main():
    amon = L.tool_paths(sys.argv)
    d = L.tmpdir("amon-tunport-")
    L.make_key(d)
    pol = L.write_policy(d, "p.amon", 'key k = file("keys/k.hex")\n'
                                       "clients = { 192.168.0.0/16 }\n"
                                       "ip.client : cryptopan(key=k)\n"
                                       "ip.server : keep()\n"
                                       "dns.qname : redact()\n"
                                       "payload : keep()\n")
    client, server = "192.168.7.9", "198.51.100.53"
    frames, secrets, t = [], [], 10 * S
    quic = bytes([0xC3]) + struct.pack("!I", 1) + bytes([8]) + bytes(range(8)) + b"\0\0" + bytes(1180)
    other = bytes(range(64))
    for i, port in enumerate(PORTS):
        secret = f"zq{port}secretlabel"
        secrets.append(secret.encode())
        name = f"{secret}.example.org"
        # Transaction IDs that read as GTP-U flags with a G-PDU, and as VXLAN's I flag.
        for txid in (0x3AFF, 0x0800 + i):
            frames.append((t, udp4_frame(client, server, port, 53, dns(txid, 0x0100, name))))
            frames.append((t + 1000, udp4_frame(server, client, 53, port, dns(txid, 0x8183, name))))
            t += S // 100
        frames.append((t, udp4_frame(client, server, port, 443, quic)))
        frames.append((t + 1000, udp4_frame(client, server, port, 5000, other)))
        frames.append((t + 2000, udp4_frame(server, client, 5000, port, other)))
        t += S // 100
    inp, out = os.path.join(d, "in.pcap"), os.path.join(d, "out.pcap")
    L.write_pcap(inp, frames)
    L.run_amon(amon, inp, [("c", pol, out)])
    _, recs = L.read_pcap(out)

    fails = []
    if len(recs) != len(frames):
        fails.append(f"{len(frames)} records in, {len(recs)} out: plain UDP on a tunnel port was dropped")
    for (_, a), (_, cap, wire, b) in zip(frames, recs):
        sport, dport = struct.unpack("!HH", a[34:38])
        if len(b) != len(a) or wire != len(a):
            fails.append(f"{sport}->{dport}: {len(a)} bytes in, {len(b)} (wire {wire}) out: cut as a tunnel")
            continue
        if not L.ipv4_checksums_ok(b):
            fails.append(f"{sport}->{dport}: checksums wrong in the output")
        if dport == 53 or sport == 53:
            if any(s in b for s in secrets):
                fails.append(f"{sport}->{dport}: the DNS name left in clear (not parsed as DNS)")
        elif b[42:] != a[42:]:
            fails.append(f"{sport}->{dport}: payload changed")
    # A real VXLAN datagram to its port is still a tunnel: its inner client is anonymized.
    inner = udp4_frame(client, server, 40000, 5000, other)[14:]
    vx = struct.pack("!BBBBI", 0x08, 0, 0, 0, 77 << 8) + b"\x02\x00\x00\x00\x00\x04\x02\x00\x00\x00\x00\x03\x08\x00" + inner
    tin, tout = os.path.join(d, "vx.pcap"), os.path.join(d, "vx-out.pcap")
    L.write_pcap(tin, [(t, udp4_frame("10.9.9.1", "10.9.9.2", 51000, 4789, vx))])
    L.run_amon(amon, tin, [("c", pol, tout)])
    _, vrecs = L.read_pcap(tout)
    if len(vrecs) != 1 or L.ip4(client) in vrecs[0][3][50:]:
        fails.append("a VXLAN datagram to port 4789 was not opened (inner client in clear or dropped)")
    return L.report(fails, f"{len(frames)} datagrams on tunnel ports kept as plain UDP; ok")


if __name__ == "__main__":
    sys.exit(main())
