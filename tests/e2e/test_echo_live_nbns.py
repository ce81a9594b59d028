#!/usr/bin/env python3
"""End to end, live (no pre-pass): the device names NBNS and the NetBIOS
datagram service carry enter the echo search under the shipped
rules/ids.amon, so a host name its `dhcp.hostname` rule hashes does not
travel in clear in another payload it keeps.

A crafted capture read from standard input (amon cannot read it twice: no
pre-pass, as live), from one user whose DHCP lease was taken before it
starts:

  1. an NBNS node status answer (NBSTAT) from the user's host: its names
     LP-NB-HOST<00>, LP-NB-HOST<20>, WORKGROUP<00> and its unit ID (the
     adapter's MAC);
  2. a NetBIOS datagram (UDP 138) from the workgroup's master browser to
     another host: a backup list response naming LP-NB-SRV;
  3. an HTTP POST whose body names both hosts in plain (an inventory
     agent's report);
  4. an NBNS registration of LP-NB-HOST<00>, its address in an ADDITIONAL
     NB record (the registering host's own);
  5. the DHCP renewal that names LP-NB-HOST (option 12).

Under the shipped policy:

  - the NBNS and datagram payloads are kept (no longer cut as address
    carriers), same lengths, and decode (tshark: a node status answer, a
    backup list response, a registration);
  - neither name, plain or first-level encoded, nor the MAC is in any
    output frame; the body's copies keep their lengths;
  - the NB record's address is the header's source address as rewritten;
  - the body's copy of LP-NB-HOST reads as DHCP's option 12 does (one
    pseudonym for one host name).

usage: test_echo_live_nbns.py AMON"""

import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

S = 1_000_000_000
USER, BCAST, SERVER = "192.168.1.20", "192.168.1.255", "93.184.216.34"
USER_MAC = bytes.fromhex("c42c03064901")
MASTER_IP, PEER_IP = "192.168.1.30", "192.168.1.40"
HOST, SRV, MASTER, PEER = b"LP-NB-HOST", b"LP-NB-SRV", b"LP-NB-MASTER", b"LP-NB-PEER"


def nb_encode(name, suffix=0):
    raw = name.ljust(15, b" ") + bytes([suffix])
    return bytes(x for c in raw for x in (0x41 + (c >> 4), 0x41 + (c & 15)))


def nbns_registration():
    """A broadcast registration (opcode 5, RD, B): the name asked, and in an
    ADDITIONAL NB record (a pointer to the question's name) the flags and
    the address it registers."""
    q = bytes([32]) + nb_encode(HOST) + b"\x00" + struct.pack(">HH", 0x20, 1)
    ar = b"\xc0\x0c" + struct.pack(">HHIH", 0x20, 1, 300000, 6) + b"\x00\x00" + L.ip4(USER)
    return struct.pack(">HHHHHH", 0x8107, 0x2910, 1, 0, 0, 1) + q + ar


def nbstat_answer():
    """A node status answer to the wildcard name: three names (15
    characters and the suffix, not encoded; 2 bytes of flags each), then
    the statistics, the unit ID first."""
    names = [(HOST, 0x00, 0x0400), (HOST, 0x20, 0x0400), (b"WORKGROUP", 0x00, 0x8400)]
    rd = bytes([len(names)]) + b"".join(n.ljust(15, b" ") + bytes([x]) + struct.pack(">H", f) for n, x, f in names)
    rd += USER_MAC + bytes(40)
    owner = bytes([32]) + b"CK" + b"A" * 30 + b"\x00"
    return struct.pack(">HHHHHH", 0x20a8, 0x8400, 0, 1, 0, 0) + owner + struct.pack(">HHIH", 0x21, 1, 0, len(rd)) + rd


def nbds_backup_list():
    """A direct unique datagram from the master browser LP-NB-MASTER to the
    host that asked, LP-NB-PEER: an SMB Trans request writing a backup list
    response (one backup browser, LP-NB-SRV) to \\MAILSLOT\\BROWSE."""
    slot = b"\\MAILSLOT\\BROWSE\x00"
    msg = b"\x0a\x01" + struct.pack("<I", 7) + SRV + b"\x00"
    smb = b"\xffSMB\x25" + bytes(27)
    data_off = 32 + 1 + 17 * 2 + 2 + len(slot)
    words = struct.pack("<HHHHBBHIHHHHHBB", 0, len(msg), 0, 0, 0, 0, 0, 1000, 0, 0, 0, len(msg), data_off, 3, 0)
    words += struct.pack("<HHH", 1, 1, 2)
    trans = smb + bytes([17]) + words + struct.pack("<H", len(slot) + len(msg)) + slot + msg
    names = bytes([32]) + nb_encode(MASTER) + b"\x00" + bytes([32]) + nb_encode(PEER) + b"\x00"
    hdr = struct.pack(">BBH4sHHH", 0x10, 0x02, 0x8106, L.ip4(MASTER_IP), 138, len(names) + len(trans), 0)
    return hdr + names + trans


def http_post(t):
    body = b"inventory: host=" + HOST + b" peer=" + SRV.lower() + b" ok\n"
    req = (b"POST /inventory HTTP/1.1\r\nHost: example.com\r\nContent-Type: text/plain\r\nContent-Length: " +
           str(len(body)).encode() + b"\r\n\r\n" + body)
    c, s = 1000, 5000
    tf = L.tcp4_frame
    f = [
        tf(USER, SERVER, 40000, 80, c, 0, L.SYN),
        tf(SERVER, USER, 80, 40000, s, c + 1, L.SYN | L.ACK),
        tf(USER, SERVER, 40000, 80, c + 1, s + 1, L.ACK),
        tf(USER, SERVER, 40000, 80, c + 1, s + 1, L.ACK | L.PSH, req),
    ]
    return [(t + i * 1_000_000, fr) for i, fr in enumerate(f)]


def dhcp_request():
    bootp = struct.pack("!BBBBIHH4s4s4s4s", 1, 1, 6, 0, 0x3903F326, 0, 0, L.ip4(USER), b"\0" * 4,
                        b"\0" * 4, b"\0" * 4)
    bootp += USER_MAC + b"\0" * 10 + b"\0" * 64 + b"\0" * 128 + bytes.fromhex("63825363")
    bootp += b"\x35\x01\x03" + b"\x0c" + bytes([len(HOST)]) + HOST + b"\xff"
    return L.udp4_frame(USER, "192.168.1.1", 68, 67, bootp)


def build(d):
    t = 1_700_000_000 * S
    frames = [(t, L.udp4_frame(USER, MASTER_IP, 137, 137, nbstat_answer())),
              (t + S, L.udp4_frame(MASTER_IP, PEER_IP, 138, 138, nbds_backup_list()))]
    frames += http_post(t + 2 * S)
    frames.append((t + 3 * S, L.udp4_frame(USER, BCAST, 137, 137, nbns_registration())))
    frames.append((t + 4 * S, dhcp_request()))
    path = os.path.join(d, "in.pcap")
    L.write_pcap(path, frames)
    return path


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    d = L.tmpdir("echo-live-nbns-")
    inp = build(d)
    fin = [r[3] for r in L.read_pcap(inp)[1]]
    fails = []
    secrets = [HOST, SRV, HOST.lower(), SRV.lower(), nb_encode(HOST), nb_encode(HOST, 0x20), nb_encode(SRV),
               USER_MAC]
    kinds = ["NBSTAT", "Backup List Response", "", "", "", "", "Registration", "DHCP"]

    def decoded(path):
        info = [str(r[1]) for r in L.tshark_fields(path, ["_ws.col.Info"])]
        return len(info) == len(kinds) and all(k in i for k, i in zip(kinds, info)), info

    ok, info = decoded(inp)
    if not ok:
        fails.append(f"the input is not what the test means to build: {info}")

    pol = os.path.join(d, "ids.amon")
    with open(pol, "w") as fh:
        fh.write(L.shipped_ids(d))
    out = os.path.join(d, "out.pcap")
    with open(inp, "rb") as fh:
        r = subprocess.run([amon, "pcap", "--read", "-", "--workers", "1", "--quiet", "--consumer",
                            f"ids={pol}:{out}"], stdin=fh, capture_output=True, timeout=170)
    if r.returncode != 0:
        fails.append(f"amon on standard input failed: {r.stderr.decode(errors='replace')}")
        return L.report(fails, "")
    fout = [r[3] for r in L.read_pcap(out)[1]]
    if [len(f) for f in fout] != [len(f) for f in fin]:
        fails.append(f"frames or their lengths changed (a payload cut?): {[len(f) for f in fin]} -> "
                     f"{[len(f) for f in fout]}")
        if len(fout) != len(fin):
            shutil.rmtree(d, ignore_errors=True)
            return L.report(fails, "")
    for i, f in enumerate(fout):
        for s in secrets:
            if s in f:
                fails.append(f"frame {i + 1}: {s!r} left in clear")
    ok, oinfo = decoded(out)
    if not ok:
        fails.append(f"the NBNS and datagram payloads do not decode as they came: {oinfo}")
    # The ADDITIONAL record's address: the last 4 bytes of the registration.
    reg = fout[6]
    if reg[-4:] != reg[26:30]:
        fails.append(f"the NB record's address {reg[-4:].hex()} is not the header's {reg[26:30].hex()}")
    if reg[-4:] == L.ip4(USER):
        fails.append("the NB record's address left in clear")
    i = fin[5].index(b"host=" + HOST) + 5
    body_copy = fout[5][i:i + len(HOST)]
    j = fin[7].index(b"\x0c" + bytes([len(HOST)]) + HOST) + 2
    dhcp_copy = fout[7][j:j + len(HOST)]
    if body_copy != dhcp_copy:
        fails.append(f"the body's copy {body_copy!r} is not the DHCP host name's rewrite {dhcp_copy!r}")
    L.health(inp, out, "ids", fails)
    shutil.rmtree(d, ignore_errors=True)
    return L.report(fails, "ok: live, NBNS and datagram names reach the echo search; their payloads are kept, rewritten")


if __name__ == "__main__":
    sys.exit(main())
