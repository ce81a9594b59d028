#!/usr/bin/env python3
"""End to end: protocols that write other hosts' addresses into their
payload, where no plugin rewrites them, are `addr_carrier`: a policy that
protects users' addresses and cuts carriers' payload (as rules/ids.amon
does) leaves none of those addresses in clear, through `amon pcap` on
crafted frames.

  MEGACO  H.248 text (UDP 2944) with SDP naming a media gateway's address
          (`c=IN IP4 ...`), a user other than the packet's two ends, before
          any packet of its own.
  AFS     a volume location server's reply (Rx, UDP 7003) listing a file
          server's address in binary.
  DLINK   D-Link Smart Console discovery (UDP 62976): the switch's IPv6
          announcement carries its IPv4 address in binary, its IPv4 one its
          IPv6 address.
  LDP     a hello (UDP 646) naming its router by its LSR identifier, another
          address than the packet's source.
  BABEL   an update (UDP 6696) whose next hop is a neighbour's link-local
          address.
  SKINNY  Cisco SCCP (TCP 2000): a StartMediaTransmission naming a phone's
          media address in binary.
  SYNC    Syncthing local discovery (UDP 21027): a device's IPv6
          announcement with its IPv4 address in a URL.

Each such payload is cut; the other packets keep theirs; no checksum is
left bad.

usage: test_carrier_ports.py AMON"""

import ipaddress
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402
import test_payload_addrs as P  # noqa: E402

S = 1_000_000_000
GW, MGC, MEDIA, PEER = "10.23.1.42", "10.35.40.22", "10.23.1.52", "10.35.60.100"
VLS, CLIENT, FILESRV = "198.51.100.5", "192.168.1.2", "192.168.3.4"
SW4, SW6 = "192.168.125.30", "fd00::30"

MEGACO = (b"MEGACO/1 [" + GW.encode() + b"]:2944\r\nReply=7{Context=1{Add=A1{Media{Local{\r\nv=0\r\n"
          b"o=- 191 1228500743 IN IP4 " + MEDIA.encode() + b"\r\ns=-\r\nc=IN IP4 " + MEDIA.encode() +
          b"\r\nt=0 0\r\nm=audio 16756 RTP/AVP 8\r\n}}}}}\r\n")
# Rx header (28 bytes: epoch, cid, call, seq, serial, type 1 data, flags,
# status, security, checksum, service) then a VL entry: name, then the
# server address list.
RX = struct.pack("!IIIIIBBBBHH", 0x3a7b0000, 0x1000, 1, 1, 1, 1, 0, 0, 0, 0, 0)
VL_REPLY = RX + b"root.cell".ljust(65, b"\0") + bytes(3) + struct.pack("!I", 1) + L.ip4(FILESRV) + bytes(12)
DLINK6 = b"\x00\x00\x02\x00\x27\x01" + b"DGS-1210-10P".ljust(64, b"\0") + L.ip4(SW4) + b"\xff\xff\x00\x00Port 10\0"
DLINK4 = b"\x00\x00\x02\x00\x27\x01" + b"DGS-1210-10P".ljust(64, b"\0") + ipaddress.IPv6Address(SW6).packed
LSR, LDP_IF = "10.0.1.1", "10.0.0.1"
# LDP header (version 1, PDU length, LSR id, label space), a Hello with a
# Common Hello Parameters TLV and an IPv4 Transport Address TLV.
LDP_HELLO = (struct.pack("!HH", 1, 30) + L.ip4(LSR) + b"\0\0" + struct.pack("!HHI", 0x0100, 20, 1) +
             struct.pack("!HHHH", 0x0400, 4, 15, 0) + struct.pack("!HH", 0x0401, 4) + L.ip4(LSR))
NEIGH6, BABEL_SRC = "fe80::21e:64ff:fe23:4d34", "fe80::218:f3ff:fea9:914e"
# Babel: magic 42, version 2, body length; a Next Hop TLV (type 7, IPv6).
BABEL = (bytes([42, 2]) + struct.pack("!H", 20) + bytes([7, 18, 2, 0]) +
         ipaddress.IPv6Address(NEIGH6).packed)


PHONE, CALLMGR, PEER_PHONE = "192.168.195.58", "192.168.193.1", "192.168.193.24"
# SCCP: length, reserved, message id 0x8a (StartMediaTransmission), then
# conference and party ids, the remote address and port.
SKINNY = struct.pack("<III", 24, 0, 0x8a) + struct.pack("<II", 1, 2) + L.ip4(PEER_PHONE) + struct.pack("<I", 9395)
SYNC4, SYNC6 = "192.168.2.100", "fd00::100"
SYNC = b"\x2e\xa7\xd9\x0b" + b"\x0a\x20" + bytes(32) + b"\x12\x19tcp://" + SYNC4.encode() + b":22000"


def eth(et):
    return bytes.fromhex("00005e000101") + bytes.fromhex("001b213a4f5d") + struct.pack("!H", et)


POLICY = """key k = file("{key}")
clients = {{ 10.0.0.0/8, 192.168.0.0/16, fc00::/7 }}
ip.client : cryptopan(key=k)
ip.server : keep()
payload   : cut() when proto in {{ addr_carrier }}
payload   : keep()
"""


def main():
    amon = os.path.abspath(L.tool_paths(sys.argv))
    d = L.tmpdir("carriers")
    key = L.make_key(d)
    pol = L.write_policy(d, "ids.amon", POLICY.format(key=key))
    t = 1_700_000_000 * S
    frames = [
        (t, eth(0x0800) + P.udp4(GW, MGC, 2944, 2944, MEGACO)),                  # 0 carrier
        (t + 1000, eth(0x0800) + P.udp4(MEDIA, PEER, 16756, 15580, bytes(172))),  # 1 the media's own
        (t + 2000, eth(0x0800) + P.udp4(VLS, CLIENT, 7003, 1792, VL_REPLY)),     # 2 carrier
        (t + 3000, eth(0x0800) + P.udp4(CLIENT, FILESRV, 1792, 7000, RX)),       # 3
        (t + 4000, eth(0x86DD) + P.udp6(SW6, "ff02::1", 62976, 62976, DLINK6)),  # 4 carrier
        (t + 5000, eth(0x0800) + P.udp4(SW4, "255.255.255.255", 62976, 62976, DLINK4)),  # 5 carrier
        (t + 6000, eth(0x0800) + P.udp4(LDP_IF, "224.0.0.2", 646, 646, LDP_HELLO)),  # 6 carrier
        (t + 7000, eth(0x86DD) + P.udp6(BABEL_SRC, "ff02::1:6", 6696, 6696, BABEL)),  # 7 carrier
        (t + 8000, eth(0x86DD) + P.udp6(NEIGH6, BABEL_SRC, 40000, 22, bytes(20))),  # 8 the neighbour's own
        (t + 9000, L.tcp4_frame(CALLMGR, PHONE, 2000, 52000, 1, 1, 0x18, SKINNY)),  # 9 carrier
        (t + 10000, eth(0x86DD) + P.udp6(SYNC6, "ff12::8384", 47077, 21027, SYNC)),  # 10 carrier
    ]
    inp = os.path.join(d, "in.pcap")
    L.write_pcap(inp, frames)
    out = os.path.join(d, "out.pcap")
    L.run_amon(amon, inp, [("ids", pol, out)])
    _, rout = L.read_pcap(out)
    fails = []
    if len(rout) != len(frames):
        return L.report([f"{len(rout)} frames out of {len(frames)}"], "")
    clear = [MEDIA.encode(), L.ip4(MEDIA), L.ip4(FILESRV), L.ip4(SW4), ipaddress.IPv6Address(SW6).packed,
             L.ip4(LSR), ipaddress.IPv6Address(NEIGH6).packed, L.ip4(PEER_PHONE), SYNC4.encode()]
    for i, hdr in ((0, 42), (2, 42), (4, 62), (5, 42), (6, 42), (7, 62), (9, 54), (10, 62)):
        o = rout[i][3]
        for v in clear:
            if v in o[hdr:]:
                fails.append(f"frame {i}: {v!r} in clear in its payload")
        if len(o) != hdr:
            fails.append(f"frame {i}: {len(o) - hdr} payload bytes left of {len(frames[i][1]) - hdr} (not cut)")
    for i in (1, 3):
        if rout[i][3][42:] != frames[i][1][42:]:
            fails.append(f"frame {i}: a payload that is no carrier's changed")
    for fno, (ip, _, udp) in sorted(L.checksum_status(out).items()):
        if "0" in ip + udp:
            fails.append(f"frame {fno}: checksum status ip {ip} udp {udp}")
    return L.report(fails, "carriers' payloads cut: no MEGACO, AFS, D-Link discovery, LDP, Babel, "
                    "Skinny or Syncthing address in clear")


if __name__ == "__main__":
    sys.exit(main())
