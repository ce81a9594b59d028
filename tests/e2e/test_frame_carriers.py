#!/usr/bin/env python3
"""End to end: protocols that carry other hosts' whole frames, where no
plugin reads them, leave nothing of what they carry under the shipped
rules/ids.amon, which keeps other payload. CAPWAP (RFC 5415): its control
channel (UDP 5246) names the access point (its radio MAC in the header, its
default name `AP` + its MAC in Cisco's dotted form) and its data channel
(UDP 5247) carries the stations' whole 802.11 frames (their MACs, their
DHCP host names); LWAPP (UDP 12222), its forerunner, the same frames;
OpenFlow (TCP 6633, 6653) a switch's PACKET_IN, the frame it received. All
are `addr_carrier` ports and their payload is cut; the headers around it
stay well formed.

A crafted capture: a CAPWAP Discovery Request from the access point, a
CAPWAP data datagram carrying a station's DHCP Request inside an 802.11
data frame, the same frame through LWAPP, and the station's DHCP Request
as a switch's OpenFlow 1.0 PACKET_IN to its controller.

usage: test_frame_carriers.py AMON"""

import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

S = 1_000_000_000
AP, CTRL = "10.1.1.5", "10.1.1.6"
SWITCH, CONTROLLER = "10.1.1.7", "10.1.1.8"
AP_MAC = bytes.fromhex("b83861f305ac")
RADIO_MAC = bytes.fromhex("580a20690e20")
STATION = bytes.fromhex("1caba7f2139d")
BSSID = bytes.fromhex("580a20690e2e")
AP_NAME = b"APb838.61f3.05ac"
HOST = b"kawai-iPad3"


def capwap_header(wbid, with_radio_mac, t_bit):
    """Preamble, HLEN, RID, WBID, flags (T, M), fragment id/offset, and the
    radio MAC (length 6, padded to a 4-byte boundary) when asked."""
    opt = bytes([6]) + RADIO_MAC + b"\x00" if with_radio_mac else b""
    hlen = (8 + len(opt)) // 4
    word = (hlen << 19) | (1 << 14) | (wbid << 9) | (t_bit << 8) | ((1 if with_radio_mac else 0) << 4)
    return b"\x00" + struct.pack("!I", word)[1:] + b"\x00\x00\x00\x00" + opt


def discovery_request():
    # Control header: message type 1 (Discovery Request), sequence, length, flags; one
    # WTP Name element (type 45) with the access point's default name.
    elem = struct.pack("!HH", 45, len(AP_NAME)) + AP_NAME
    ctrl = struct.pack("!IBHB", 1, 0, 3 + len(elem), 0) + elem
    return capwap_header(1, True, 0) + ctrl


def dhcp_request():
    """The station's DHCP Request, from its IP header on."""
    bootp = struct.pack("!BBBBIHH4s4s4s4s", 1, 1, 6, 0, 0x1234, 0, 0, b"\0" * 4, b"\0" * 4, b"\0" * 4, b"\0" * 4)
    bootp += STATION + b"\0" * 10 + b"\0" * 192 + bytes.fromhex("63825363")
    bootp += b"\x35\x01\x03\x0c" + bytes([len(HOST)]) + HOST + b"\xff"
    return L.udp4_frame("0.0.0.0", "255.255.255.255", 68, 67, bootp)[14:]


def data_frame():
    ipudp = dhcp_request()
    # 802.11 data frame, To DS: addr1 BSSID, addr2 the station, addr3 the
    # destination; its frame control's two bytes swapped, as Cisco's
    # controllers send it (and tshark reads CAPWAP by default).
    wlan = b"\x01\x08\x00\x00" + BSSID + STATION + b"\xff" * 6 + b"\x00\x00"
    llc = b"\xaa\xaa\x03\x00\x00\x00\x08\x00"
    return capwap_header(1, True, 1) + wlan + llc + ipudp


def lwapp_data_frame():
    """The same station's frame through LWAPP, CAPWAP's forerunner: a
    6-byte header (flags, fragment id, length, status) before the 802.11
    frame, whose frame control LWAPP does not swap."""
    frame = data_frame()[16:]
    frame = b"\x08\x01" + frame[2:]  # its frame control in the standard's byte order
    return struct.pack("!BBHH", 0x08, 0, len(frame), 0) + frame


def openflow_packet_in():
    """OpenFlow 1.0 PACKET_IN: header (version, type 10, length, xid),
    buffer id, total length, in port, reason, pad, then the frame."""
    frame = b"\xff" * 6 + STATION + b"\x08\x00" + dhcp_request()
    body = struct.pack("!IHHBB", 0xffffffff, len(frame), 3, 0, 0) + frame
    return struct.pack("!BBHI", 1, 10, 8 + len(body), 7) + body


def build(d):
    t = 1_700_000_000 * S
    frames = [
        (t, L.udp4_frame(AP, CTRL, 12380, 5246, discovery_request())),
        (t + S, L.udp4_frame(AP, CTRL, 12380, 5247, data_frame())),
        (t + 2 * S, L.udp4_frame(AP, CTRL, 20105, 12222, lwapp_data_frame())),
        (t + 3 * S, L.tcp4_frame(SWITCH, CONTROLLER, 56068, 6633, 1000, 2000, L.ACK | L.PSH, openflow_packet_in())),
    ]
    frames = [(ts, fr[:6] + AP_MAC + fr[12:]) for ts, fr in frames]  # sent by the access point
    path = os.path.join(d, "in.pcap")
    L.write_pcap(path, frames)
    return path


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    d = L.tmpdir("frame-carriers-")
    inp = build(d)
    fin = [r[3] for r in L.read_pcap(inp)[1]]
    secrets = [RADIO_MAC, AP_NAME, STATION, BSSID, HOST]
    fails = []
    for s in secrets:
        if s not in b"".join(fin):
            fails.append(f"input lacks {s!r} (the test's own frames are wrong)")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "rules", "ids.amon")
    os.makedirs(os.path.join(d, "keys"), exist_ok=True)
    fd = os.open(os.path.join(d, "keys", "ids.key"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("6c1f0a9e3b7d52c48e2a91f05d3c7b6a19e8f4d2c0b5a3978e6d1c4b2a0f9e8d\n")
    pol = os.path.join(d, "ids.amon")
    shutil.copy(src, pol)
    out = os.path.join(d, "out.pcap")
    L.run_amon(amon, inp, [("ids", pol, out)])
    fout = [r[3] for r in L.read_pcap(out)[1]]
    if len(fout) != len(fin):
        fails.append(f"{len(fin)} frames in, {len(fout)} out")
    for i, f in enumerate(fout):
        for s in secrets:
            if s in f:
                fails.append(f"frame {i + 1}: {s!r} left in clear")
    L.health(inp, out, "ids", fails)
    shutil.rmtree(d, ignore_errors=True)
    return L.report(fails, "ok: CAPWAP's, LWAPP's and OpenFlow's payload is cut under ids.amon")


if __name__ == "__main__":
    sys.exit(main())
