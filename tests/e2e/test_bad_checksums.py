#!/usr/bin/env python3
"""End to end: an IPv4 header checksum that was wrong in the input is wrong
in the output (updated for what the rewrite changed, RFC 1624, never
recomputed), and a right one stays right: an IDS behind amon still sees
evasion attempts, an offloaded capture stays recognisable.

Inputs: crafted TCP and UDP frames, every other one with a wrong header
checksum, and shared captures that carry wrong ones (QUIC, TLS). Policies: the shipped ids (general path, application
fields), flows (header kernels, the payload cut: lengths change) and meter
(z-anonymity, snap). Oracle: tshark's IPv4 checksum check: as many headers
are wrong in the output as in the input (holding reorders records across
flows, so the counts are compared, not the frames).

usage: test_bad_checksums.py AMON RULES_DIR"""

import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

SHARED = ["quic-illustrated.pcap", "tls13-quic-sites.pcap"]


def spoil(frame, l3=14):
    """The same frame with its IPv4 header checksum off by 0x1234."""
    ck = struct.unpack("!H", frame[l3 + 10:l3 + 12])[0]
    return frame[:l3 + 10] + struct.pack("!H", (ck + 0x1234) & 0xFFFF) + frame[l3 + 12:]


def crafted(path):
    frames, t = [], 1_000_000_000
    for i in range(8):
        c, s = "10.2.0.%d" % (i + 1), "198.51.100.%d" % (i + 1)
        tcp = L.tcp4_frame(c, s, 40000 + i, 80, 1000, 0, L.ACK | L.PSH,
                           b"GET / HTTP/1.1\r\nHost: example.org\r\nCookie: a=b\r\n\r\n")
        udp = L.udp4_frame(c, s, 50000 + i, 53 if i % 2 else 9999, b"\x12\x34\x01\x00\x00\x01" + bytes(6) +
                           b"\x07example\x03org\x00\x00\x01\x00\x01")
        for f in (tcp, udp):
            frames.append((t, spoil(f) if i % 2 else f))
            t += 1_000_000
    L.write_pcap(path, frames)


def statuses(path):
    """Counts of tshark's IPv4 checksum status (innermost and outer headers
    alike): {'0': bad, '1': good, '2': unverified}."""
    out = subprocess.run(["tshark", "-r", path, "-n", "-o", "ip.check_checksum:TRUE", "-T", "fields",
                          "-E", "occurrence=a", "-E", "aggregator=,", "-e", "ip.checksum.status"],
                         capture_output=True, text=True, check=True).stdout
    counts = {}
    for line in out.splitlines():
        for v in line.split(","):
            if v:
                counts[v] = counts.get(v, 0) + 1
    return counts


def main():
    amon = L.tool_paths(sys.argv)
    rules = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "../../rules")
    L.need_tshark()
    tmp = L.tmpdir("badck-")
    inputs = [os.path.join(tmp, "crafted.pcap")]
    crafted(inputs[0])
    pcaps = os.environ.get("AMON_PCAPS_DIR")
    if pcaps and os.path.isdir(pcaps):
        inputs += [os.path.join(pcaps, p) for p in SHARED if os.path.exists(os.path.join(pcaps, p))]
    errors = []
    for inp in inputs:
        want = statuses(inp)
        for pol in ("ids", "flows", "meter"):
            out = os.path.join(tmp, f"{os.path.basename(inp)}.{pol}.pcap")
            L.run_amon(amon, inp, [(pol, os.path.join(rules, pol + ".amon"), out)])
            got = statuses(out)
            print(f"{os.path.basename(inp)} {pol}: in {want} out {got}")
            if got.get("0", 0) != want.get("0", 0):
                errors.append(f"{os.path.basename(inp)} {pol}: {want.get('0', 0)} bad IPv4 header checksums in, "
                              f"{got.get('0', 0)} out")
    for e in errors:
        print("FAIL: " + e)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
