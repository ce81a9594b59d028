#!/usr/bin/env python3
"""A pcapng input's metadata never reaches the output. amon writes classic
pcap, which has no place for it: the section header's hardware, OS and
application options, interface names, descriptions and hardware, comments on
the section, the interface and each packet, and name-resolution blocks that
map addresses to host names are all dropped, while the packets themselves
come out anonymized. The test writes such a file (the packets of a shared
capture, with secrets in every metadata slot) and looks for the secrets in
the output's bytes and through tshark.

usage: test_pcapng_meta.py AMON"""

import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import e2e_lib as L

CAPTURE = "mixed-capture2.pcap"
SECRETS = {
    "shb_hardware": "SECRET-HW-Xeon-serial-4711",
    "shb_os": "SECRET-OS-hostname-alice-laptop",
    "shb_userappl": "SECRET-APP-dumpcap-on-alice",
    "shb_comment": "SECRET-COMMENT-captured-at-acme-hq",
    "if_name": "SECRET-IFNAME-enp0s31f6-alice",
    "if_description": "SECRET-IFDESC-office-uplink-room-12",
    "if_hardware": "SECRET-IFHW-intel-i219-serial",
    "if_comment": "SECRET-IFCOMMENT-mirror-port",
    "pkt_comment": "SECRET-PKTCOMMENT-suspicious-login",
    "nrb_v4": "secret-host-alice.corp.example",
    "nrb_v6": "secret-host-bob.corp.example",
}


def opt(code, val):
    if isinstance(val, str):
        val = val.encode()
    pad = (4 - len(val) % 4) % 4
    return struct.pack("<HH", code, len(val)) + val + b"\0" * pad


def block(btype, body):
    total = 12 + len(body)
    return struct.pack("<II", btype, total) + body + struct.pack("<I", total)


def write_pcapng(path, linktype, recs, v4addr, v6addr):
    out = []
    shb = struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)
    shb += (opt(2, SECRETS["shb_hardware"]) + opt(3, SECRETS["shb_os"]) + opt(4, SECRETS["shb_userappl"]) +
            opt(1, SECRETS["shb_comment"]) + opt(0, b""))
    out.append(block(0x0A0D0D0A, shb))
    idb = struct.pack("<HHI", linktype, 0, 262144)
    idb += (opt(2, SECRETS["if_name"]) + opt(3, SECRETS["if_description"]) + opt(15, SECRETS["if_hardware"]) +
            opt(1, SECRETS["if_comment"]) + opt(9, b"\x09") + opt(0, b""))  # if_tsresol: ns
    out.append(block(1, idb))
    # Name resolution: IPv4 and IPv6 records naming addresses that occur in the packets.
    def rec(rtype, val):
        pad = (4 - len(val) % 4) % 4
        return struct.pack("<HH", rtype, len(val)) + val + b"\0" * pad
    nrb = (rec(1, v4addr + SECRETS["nrb_v4"].encode() + b"\0") + rec(2, v6addr + SECRETS["nrb_v6"].encode() + b"\0") +
           rec(0, b""))
    out.append(block(4, nrb))
    for i, (ts, cap, wire, b) in enumerate(recs):
        pad = (4 - len(b) % 4) % 4
        epb = struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(b), wire) + b + b"\0" * pad
        if i % 7 == 0:
            epb += opt(1, SECRETS["pkt_comment"]) + opt(0, b"")
        out.append(block(6, epb))
    with open(path, "wb") as f:
        f.write(b"".join(out))


def main():
    amon = os.path.abspath(L.tool_paths(sys.argv))
    pdir = L.pcaps_dir()
    inp = os.path.join(pdir, CAPTURE)
    if not os.path.exists(inp):
        L.skip(f"{inp} missing")
    work = L.tmpdir("pcapng-")
    L.make_key(work)
    pol = L.write_policy(work, "p.amon",
                         'key k = file("keys/k.hex")\n'
                         "eth.src, eth.dst : hash(key=k)\n"
                         "ip.src, ip.dst : cryptopan(key=k)\n")
    os.chdir(work)
    lt, recs = L.read_pcap(inp)
    v4 = next(b[26:30] for _, _, _, b in recs if b[12:14] == b"\x08\x00")
    v6 = bytes.fromhex("20010db8000000000000000000000001")
    fin, fout = os.path.join(work, "in.pcapng"), os.path.join(work, "out.pcap")
    write_pcapng(fin, lt, recs, v4, v6)
    failures = []
    # The input carries every secret (tshark sees them), so finding none in the output means something.
    r = subprocess.run(["tshark", "-r", fin, "-c", "8", "-V", "-N", "n"], capture_output=True, text=True) \
        if L.shutil.which("tshark") else None
    if r is not None and SECRETS["pkt_comment"] not in r.stdout:
        failures.append("tshark does not see the packet comments in the input: the input is not what the test meant")
    L.run_amon(amon, fin, [("c", pol, fout)])
    data = open(fout, "rb").read()
    if data[:4] not in (b"\x4d\x3c\xb2\xa1", b"\xd4\xc3\xb2\xa1"):
        failures.append(f"output is not classic pcap (magic {data[:4].hex()})")
    for k, v in SECRETS.items():
        if v.encode() in data:
            failures.append(f"output holds the {k} secret")
    olt, orecs = L.read_pcap(fout)
    if olt != lt:
        failures.append(f"output link type {olt}, input {lt}")
    if not orecs:
        failures.append("no packet out")
    if v4 in b"".join(b[26:34] for _, _, _, b in orecs[:200]):
        failures.append("the address the name-resolution block names is in the output in clear")
    if r is not None:
        t = subprocess.run(["tshark", "-r", fout, "-V", "-N", "n"], capture_output=True, text=True)
        for k, v in SECRETS.items():
            if v in t.stdout:
                failures.append(f"tshark shows the {k} secret in the output")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print(f"ok: {len(orecs)} packets out of a pcapng with metadata in every slot; none of it in the output")


if __name__ == "__main__":
    main()
