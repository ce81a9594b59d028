#!/usr/bin/env python3
"""802.11 captures (radiotap, PPI, plain 802.11) are read, anonymized and
written back in their link type, with tshark as the oracle.

The frames are built here (no shared capture is 802.11): beacons, probe
requests and responses, an association request, data frames to and from an
access point carrying IPv4 UDP and TCP, a protected data frame, two
whose Protected bit a decrypting capture left on their clear bodies (one
with its CCMP header kept, as adapters that decrypt write them), control
frames, a deauthentication, and malformed ones (an element running past the
frame, a frame cut inside its addresses, a radiotap header longer than the
record). Each capture header carries what names a device (a radiotap vendor
namespace with a serial number, a PPI GPS field) and a frame check sequence.

Checked on the output: tshark reads every frame as radiotap/PPI/802.11
without a malformed one (but the three built malformed); the capture header
holds only rate, channel, signal and flags, no vendor data, no GPS, no FCS;
no station or BSSID address, SSID, WPS device name or client IP address of
the input is left anywhere in the output bytes; addresses follow the MAC
rule (one station keeps one pseudonym in every frame, broadcast stays
broadcast); the IP packets inside are anonymized as the same packets over
Ethernet are (same addresses, valid checksums); an explicit wlan.ssid rule
is applied; a policy that protects nothing keeps the 802.11 values.

usage: test_wlan.py AMON"""

import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import e2e_lib as L

DLT_80211, DLT_RADIOTAP, DLT_PPI = 105, 127, 192

AP = bytes.fromhex("a4b1c2d3e4f5")
STA = bytes.fromhex("3c22fb123456")
STA2 = bytes.fromhex("f0d5bf654321")
GW = bytes.fromhex("001122334455")
BCAST = b"\xff" * 6
SSIDS = [b"HomeNet-Alice", b"CafeDeFlore-Guest", b"AirportFreeWiFi", b"Hotel.Lutetia"]
WPS_NAME = b"Bobs-iPhone-XR"
SERIAL = b"SERIAL-RT-998877"
GPS = b"LAT48.8566LON2.3522"
CLIENT_IP, SERVER_IP = "10.1.2.3", "93.184.216.34"


def ie(i, data):
    return bytes([i, len(data)]) + data


def fc(type_, sub, flags=0):
    return bytes([(sub << 4) | (type_ << 2), flags])


def mgmt(sub, da, sa, bssid, body, flags=0):
    return fc(0, sub, flags) + b"\0\0" + da + sa + bssid + b"\x10\x00" + body


def wps(name):
    # WPS vendor element: OUI 00:50:F2 type 4, attribute Device Name (0x1011)
    return ie(221, b"\x00\x50\xf2\x04" + struct.pack("!HH", 0x1011, len(name)) + name)


def beacon():
    fixed = struct.pack("<QHH", 123456789, 100, 0x0431)
    body = fixed + ie(0, SSIDS[0]) + ie(1, b"\x82\x84\x8b\x96") + ie(3, b"\x06") + wps(b"AlicesRouter") + \
        ie(48, b"\x01\x00\x00\x0f\xac\x04\x01\x00\x00\x0f\xac\x04\x01\x00\x00\x0f\xac\x02\x00\x00")
    return mgmt(8, BCAST, AP, AP, body)


def probe_request(sta):
    body = ie(0, SSIDS[1]) + ie(1, b"\x02\x04\x0b\x16") + ie(84, ie(0, SSIDS[2]) + ie(0, SSIDS[3])) + wps(WPS_NAME)
    return mgmt(4, BCAST, sta, BCAST, body)


def probe_response():
    fixed = struct.pack("<QHH", 99, 100, 0x0431)
    return mgmt(5, STA, AP, AP, fixed + ie(0, SSIDS[0]) + ie(1, b"\x82\x84"))


def assoc_request():
    return mgmt(0, AP, STA, AP, struct.pack("<HH", 0x0431, 10) + ie(0, SSIDS[0]) + ie(1, b"\x82\x84"))


def deauth():
    return mgmt(12, STA, AP, AP, struct.pack("<H", 3))


def ip_packet(udp=True, reverse=False):
    """An IPv4 packet (UDP or TCP) from the client to the server, or back."""
    src, dst = (SERVER_IP, CLIENT_IP) if reverse else (CLIENT_IP, SERVER_IP)
    if udp:
        f = L.udp4_frame(src, dst, 40000 if not reverse else 9999, 9999 if not reverse else 40000, b"hello-wifi")
    else:
        f = L.tcp4_frame(src, dst, 443 if reverse else 51000, 51000 if reverse else 443, 1000, 2000, 0x18,
                         b"payload-bytes")
    return f[14:]


SNAP4 = b"\xaa\xaa\x03\x00\x00\x00\x08\x00"


def data_to_ap(ip):  # QoS data, ToDS: addr1 BSSID, addr2 SA, addr3 DA
    return fc(2, 8, 0x01) + b"\0\0" + AP + STA + GW + b"\x20\x00" + b"\x00\x00" + SNAP4 + ip


def data_from_ap(ip):  # data, FromDS: addr1 DA, addr2 BSSID, addr3 SA
    return fc(2, 0, 0x02) + b"\0\0" + STA + AP + GW + b"\x30\x00" + SNAP4 + ip


def protected_data():
    return fc(2, 8, 0x41) + b"\0\0" + AP + STA2 + GW + b"\x40\x00" + b"\x00\x00" + \
        b"\x01\x00\x00\x20\x00\x00\x00\x00" + b"CIPHERTEXT" * 4


def decrypted_data(ccmp_header=False):
    """Protected, its body in clear: a capture decrypted where it was taken
    keeps the Protected bit, and the adapter's keeps the CCMP header too."""
    head = b"\x11\x00\x00\x20\x00\x00\x00\x00" if ccmp_header else b""
    return fc(2, 8, 0x41) + b"\0\0" + AP + STA2 + GW + b"\x50\x00" + b"\x00\x00" + head + SNAP4 + ip_packet(True)


def rts():
    return fc(1, 11) + b"\0\0" + AP + STA


def ack():
    return fc(1, 13) + b"\0\0" + STA


def bad_element():
    return mgmt(8, BCAST, AP, AP, struct.pack("<QHH", 1, 100, 1) + ie(0, SSIDS[0]) + b"\x00\x20short")


FRAMES = [beacon, lambda: probe_request(STA), lambda: probe_request(STA2), probe_response, assoc_request,
          lambda: data_to_ap(ip_packet(True)), lambda: data_from_ap(ip_packet(True, True)),
          lambda: data_to_ap(ip_packet(False)), lambda: data_from_ap(ip_packet(False, True)),
          decrypted_data, lambda: decrypted_data(True), protected_data, rts, ack, deauth, bad_element]
MALFORMED = 1  # bad_element, last


def fcs(frame):
    import zlib
    return struct.pack("<I", zlib.crc32(frame) & 0xffffffff)


def radiotap(frame, with_fcs=True):
    """TSFT, flags (FCS at end), rate, channel, dBm signal, antenna, then a
    vendor namespace carrying a serial number."""
    present0 = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 3) | (1 << 5) | (1 << 11) | (1 << 30) | (1 << 31)
    present1 = 0  # the vendor namespace's own bitmap
    hdr = struct.pack("<BBHII", 0, 0, 0, present0, present1)  # 12 bytes
    hdr += b"\0" * 4  # TSFT aligned to 8
    hdr += struct.pack("<QBBHHbB", 0x1122334455667788, 0x10 if with_fcs else 0, 108, 2437, 0x00a0, -42, 1)
    hdr += b"\x00\x10\x18\x01" + struct.pack("<H", len(SERIAL)) + SERIAL  # OUI, sub-namespace, skip length
    hdr = hdr[:2] + struct.pack("<H", len(hdr)) + hdr[4:]
    return hdr + frame + (fcs(frame) if with_fcs else b"")


def ppi(frame):
    common = struct.pack("<HH", 2, 20) + struct.pack("<QHHHHBBbb", 0x99, 0x0001, 108, 2437, 0x00a0, 0, 0, -40, -90)
    gps = struct.pack("<HH", 30002, len(GPS)) + GPS
    body = common + gps
    return struct.pack("<BBHI", 0, 0, 8 + len(body), DLT_80211) + body + frame + fcs(frame)


def write(path, linktype, recs):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, linktype))
        for i, (b, wire) in enumerate(recs):
            f.write(struct.pack("<IIII", 1700000000 + i, 0, len(b), wire))
            f.write(b)


def records(wrap):
    recs = [(wrap(f()), len(wrap(f()))) for f in FRAMES]
    # A frame cut by the snap length inside its addresses, and a radiotap
    # header that claims more than the record holds.
    cut = wrap(data_to_ap(ip_packet(True)))
    hl = len(wrap(b"")) - (4 if wrap is not plain else 0)
    recs.append((cut[:hl + 12], len(cut)))
    if wrap is not plain:
        bad = bytearray(wrap(beacon()))
        bad[2:4] = struct.pack("<H", len(bad) + 50)
        recs.append((bytes(bad), len(bad)))
    return recs


def plain(frame):
    return frame


SECRETS = [AP, STA, STA2, GW, WPS_NAME, b"AlicesRouter", SERIAL, GPS] + SSIDS + \
    [L.ip4(CLIENT_IP)]


def run(amon, work, name, lt, recs, policy, fails, protects=True):
    inp = os.path.join(work, name + ".pcap")
    out = os.path.join(work, name + ".out.pcap")
    write(inp, lt, recs)
    L.run_amon(amon, inp, [("c", policy, out)])
    olt, orecs = L.read_pcap(out)
    if olt != lt:
        fails.append(f"{name}: output link type {olt}, input {lt}")
    blob = b"".join(r[3] for r in orecs)
    if protects:
        for s in SECRETS:
            if s in blob:
                fails.append(f"{name}: {s!r} left in the output")
    for s in (SERIAL, GPS, struct.pack("<Q", 0x1122334455667788)):
        if s in blob:
            fails.append(f"{name}: capture header value {s!r} left in the output")
    return out, orecs


def audit_signs_off(amon, work, name, pol, inp, out, fails):
    """amon audit reads 802.11 as the engine does: the output is clean, and
    the input given as its own output shows the stations and SSIDs."""
    def leaks(anon):
        r = subprocess.run([amon, "audit", "--policy", pol, "--original", inp, "--anonymized", anon,
                            "--format", "json", "--max-listed", "1000"], capture_output=True, text=True, cwd=work)
        if r.returncode not in (0, 1):
            fails.append(f"{name}: amon audit exit {r.returncode}: {r.stderr.strip()[:300]}")
            return None
        return json.loads(r.stdout)["leak_list"]
    clean = leaks(out)
    if clean:
        fails.append(f"{name}: the audit finds leaks in the output: {clean[:3]}")
    raw = leaks(inp)
    if raw is not None:
        found = {h["value"] for h in raw}
        for a in (AP, STA):
            if ":".join("%02x" % x for x in a) not in found:
                fails.append(f"{name}: the audit does not find station {a.hex()} left in clear")
        if not any(h["value"] == SSIDS[1].decode().lower() for h in raw):
            fails.append(f"{name}: the audit does not find SSID {SSIDS[1]!r} left in clear: {sorted(found)[:10]}")


# Columns of tshark_rows (after frame.number).
TYPE, RA, TA, BSSID, SSID, IPSRC, IPDST, TSFT, FCS, SIGNAL, FREQ, PPI_FREQ = range(1, 13)


def tshark_rows(path, fields):
    return L.tshark_fields(path, fields, None, L.CHECKS)


def check(amon, work, fails):
    key = L.make_key(work)
    pol = L.write_policy(work, "p.amon", f'key k = file("{key}")\n'
                         "eth.src, eth.dst : hash(key=k)\n"
                         "ip.client : cryptopan(key=k)\n"
                         "ip.server : keep()\n")
    eth_in = os.path.join(work, "eth.pcap")
    eth_out = os.path.join(work, "eth.out.pcap")
    ips = [ip_packet(True), ip_packet(True, True), ip_packet(False), ip_packet(False, True), ip_packet(True),
           ip_packet(True)]
    L.write_pcap(eth_in, [(1700000000 * 10**9 + i, GW + STA + b"\x08\x00" + p) for i, p in enumerate(ips)])
    L.run_amon(amon, eth_in, [("c", pol, eth_out)])
    eth_ips = [r[3][14:] for r in L.read_pcap(eth_out)[1]]

    for name, lt, wrap in (("radiotap", DLT_RADIOTAP, radiotap), ("ppi", DLT_PPI, ppi), ("plain", DLT_80211, plain)):
        recs = records(wrap)
        out, orecs = run(amon, work, name, lt, recs, pol, fails)
        if len(orecs) != len(recs):
            fails.append(f"{name}: {len(orecs)} records out of {len(recs)}")
            continue
        rows = tshark_rows(out, ["wlan.fc.type_subtype", "wlan.ra", "wlan.ta", "wlan.bssid", "wlan.ssid",
                                 "ip.src", "ip.dst", "radiotap.present.tsft", "radiotap.flags.fcs",
                                 "radiotap.dbm_antsignal", "radiotap.channel.freq", "ppi.80211-common.chan.freq"])
        if len(rows) != len(recs):
            fails.append(f"{name}: tshark read {len(rows)} frames")
            continue
        bad = L.bad_frames(out)
        expected_bad = set(range(len(FRAMES) - MALFORMED + 1, len(recs) + 1))
        if bad - expected_bad:
            fails.append(f"{name}: tshark finds frames {sorted(bad - expected_bad)} malformed")
        # One pseudonym per station in every frame, broadcast kept.
        sta_ps = set()
        for i, r in enumerate(rows[:len(FRAMES)]):
            fr = FRAMES[i]
            for a in r[RA] + r[TA] + r[BSSID]:
                if a in ("ff:ff:ff:ff:ff:ff",):
                    continue
                if a.count(":") == 5 and bytes.fromhex(a.replace(":", "")) in (AP, STA, STA2, GW):
                    fails.append(f"{name} frame {i + 1}: address {a} in clear")
        # probe request (frame 2): transmitter is STA's pseudonym; association request (5) too.
        if rows[1][TA] != rows[4][TA] or not rows[1][TA]:
            fails.append(f"{name}: the station's pseudonym differs between frames: {rows[1][TA]} {rows[4][TA]}")
        if rows[1][RA] != ["ff:ff:ff:ff:ff:ff"]:
            fails.append(f"{name}: broadcast receiver became {rows[1][RA]}")
        for i in range(len(FRAMES)):
            for s in rows[i][SSID]:
                if s and set(s) - {"0", ":"} and s not in ("<MISSING>",):
                    # tshark prints a hidden (zeroed) SSID as its bytes in hex or empty
                    if any(x.decode() in s for x in SSIDS):
                        fails.append(f"{name} frame {i + 1}: SSID {s} in clear")
        # The IP packets inside: as over Ethernet.
        for k, fi in enumerate((5, 6, 7, 8, 9, 10)):
            frame = orecs[fi][3]
            if eth_ips[k] not in frame:
                fails.append(f"{name} frame {fi + 1}: the IP packet differs from the same packet over Ethernet")
        if lt == DLT_RADIOTAP:
            for i, r in enumerate(rows[:len(FRAMES)]):
                if r[TSFT] not in (["0"], ["False"]) or r[FCS] not in (["0"], ["False"]):
                    fails.append(f"{name} frame {i + 1}: TSFT or FCS flag still present ({r[TSFT]}, {r[FCS]})")
                if r[SIGNAL] != ["-42"] or r[FREQ] != ["2437"]:
                    fails.append(f"{name} frame {i + 1}: signal/channel lost ({r[SIGNAL]}, {r[FREQ]})")
        if lt == DLT_PPI and rows[0][PPI_FREQ] != ["2437"]:
            fails.append(f"{name}: PPI channel lost ({rows[0][PPI_FREQ]})")
        # The checksums of the IP packets hold.
        for fno, st in L.checksum_status(out).items():
            if fno <= len(FRAMES) and any(x == "0" for t in st for x in t):
                fails.append(f"{name} frame {fno}: a bad checksum {st}")

        audit_signs_off(amon, work, name, pol, os.path.join(work, name + ".pcap"), out, fails)

    # An explicit SSID rule, and a policy that protects nothing.
    pol2 = L.write_policy(work, "p2.amon", f'key k = file("{key}")\n'
                          "wlan.src, wlan.dst, wlan.bssid, wlan.ra, wlan.ta : hash(key=k)\n"
                          "wlan.ssid : redact()\n"
                          "wlan.ie : keep()\n")
    out, orecs = run(amon, work, "rules", DLT_RADIOTAP, records(radiotap), pol2, fails, protects=False)
    blob = b"".join(r[3] for r in orecs)
    if b"x" * len(SSIDS[1]) not in blob:
        fails.append("rules: wlan.ssid : redact() did not redact the probe request's SSID")
    if WPS_NAME not in blob:
        fails.append("rules: wlan.ie : keep() did not keep the WPS device name")
    for a in (AP, STA, STA2):
        if a in blob:
            fails.append(f"rules: {a.hex()} in clear under hash()")
    pol3 = L.write_policy(work, "p3.amon", "ip.client : keep()\n")
    out, orecs = run(amon, work, "keep", DLT_RADIOTAP, records(radiotap), pol3, fails, protects=False)
    blob = b"".join(r[3] for r in orecs)
    for s in (STA, AP, SSIDS[1], WPS_NAME):
        if s not in blob:
            fails.append(f"keep: {s!r} not kept by a policy that protects nothing")
    proto_wlan(amon, work, key, eth_in, fails)


def proto_wlan(amon, work, key, eth_in, fails):
    """`proto == wlan` holds for an 802.11 capture's records (the IP packets
    of its data frames too), never for the same packets over Ethernet."""
    pol = L.write_policy(work, "p4.amon", f'key k = file("{key}")\n'
                         "eth.src, eth.dst : hash(key=k)\n"
                         "payload : cut() when proto == wlan\n")
    _, orecs = run(amon, work, "proto-wlan", DLT_RADIOTAP, records(radiotap), pol, fails, protects=False)
    blob = b"".join(r[3] for r in orecs)
    for s in (b"hello-wifi", b"payload-bytes"):
        if s in blob:
            fails.append(f"proto == wlan: {s!r} kept in a data frame's packet")
    eth_out = os.path.join(work, "proto-wlan-eth.out.pcap")
    L.run_amon(amon, eth_in, [("c", pol, eth_out)])
    blob = b"".join(r[3] for r in L.read_pcap(eth_out)[1])
    if b"hello-wifi" not in blob or b"payload-bytes" not in blob:
        fails.append("proto == wlan: held for packets over Ethernet")


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    work = L.tmpdir("wlan-")
    fails = []
    check(amon, work, fails)
    return L.report(fails, "ok: 802.11 captures (radiotap, PPI, plain) anonymized and valid")


if __name__ == "__main__":
    sys.exit(main())
