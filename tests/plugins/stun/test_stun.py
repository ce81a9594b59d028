#!/usr/bin/env python3
"""End to end: STUN/TURN through `amon pcap` with the shipped IDS policy
(rules/ids.amon: payload kept, addresses pseudonymized), on a trace built
here (no shared capture holds STUN): a Binding exchange on Google's port
19302 (known by the magic cookie alone), a TURN Allocate response over TCP
on port 8443 (two messages and a ChannelData frame in one segment), and a
classic RFC 3489 response on port 3478.

Checks, read with tshark (its STUN dissector forced on ports 19302 and
8443; classic STUN found by its own heuristics):
  - every STUN message still dissects, none malformed, checksums right;
  - no address the policy protects (the client's, users' inside `clients`)
    is in the output's STUN address fields, XOR-ed or not (tshark undoes
    the XOR); nor is the server's: the Binding exchange on 19302 (no likely
    server port on either end) has uncertain roles, so both its ends take
    ip.client's rule there, and the server is a user of the output
    everywhere (one address, one treatment);
  - the client's mapped address equals, in the output, the pseudonym its
    IP header got in the same frame (one address, one treatment);
  - the FINGERPRINTs verify;
  - `amon audit` finds no leak; and on a planted copy whose IP headers
    hide the client but whose STUN attributes do not (XOR-ed ones only),
    it finds the client's address there.

usage: test_stun.py AMON"""

import os
import struct
import subprocess
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e"))
import e2e_lib as L  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
COOKIE = 0x2112A442
TXID = bytes.fromhex("b7e7a701bc34d686fa87dfae")
# ids.amon keeps server addresses and pseudonymizes users': the client
# (NAT, a user by the flows it starts), the peer and relay addresses, inside
# its `clients`, and SERVER, which took ip.client's rule in the 19302
# exchange (uncertain roles) and so is a user of the output everywhere.
SERVER, NAT, PEER, RELAY, PEER6 = "74.125.200.127", "203.0.113.45", "10.9.9.9", "10.200.0.1", "fc00::5"
PROTECTED = {NAT, PEER, RELAY, PEER6, SERVER}
PORTS = ["-d", "udp.port==19302,stun", "-d", "tcp.port==8443,stun"]


def attr(t, v):
    b = struct.pack("!HH", t, len(v)) + v
    return b + b"\0" * (-len(b) % 4)


def addr(a, port, xor, v6=False):
    raw = bytes(int(x) for x in a.split(".")) if not v6 else __import__("ipaddress").ip_address(a).packed
    key = struct.pack("!I", COOKIE) + TXID
    if xor:
        raw = bytes(x ^ k for x, k in zip(raw, key))
        port ^= 0x2112
    return struct.pack("!BBH", 0, 2 if v6 else 1, port) + raw


def message(mtype, attrs, cookie=True, finger=True):
    a = b"".join(attrs)
    m = struct.pack("!HHI", mtype, len(a) + (8 if finger else 0), COOKIE if cookie else 0x01020304) + TXID + a
    if finger:
        m += attr(0x8028, struct.pack("!I", zlib.crc32(m) ^ 0x5354554E))
    return m


def trace():
    t, ms = 1_700_000_000_000_000_000, 1_000_000
    req = message(0x0001, [attr(0x8022, b"client")])
    resp = message(0x0101, [attr(0x0020, addr(NAT, 40000, True)), attr(0x802B, addr(SERVER, 19302, False)),
                            attr(0x0012, addr(PEER6, 6000, True, True))])
    alloc = message(0x0103, [attr(0x0016, addr(RELAY, 50000, True)), attr(0x0020, addr(NAT, 40001, True))])
    perm = message(0x0108, [attr(0x0012, addr(PEER, 7000, True))])
    chan = struct.pack("!HH", 0x4001, 5) + b"hello" + b"\0" * 3
    classic = message(0x0101, [attr(0x0001, addr(NAT, 40002, False)), attr(0x0005, addr(SERVER, 3479, False))],
                      cookie=False, finger=False)
    fr = [(t, L.udp4_frame(NAT, SERVER, 40000, 19302, req)),
          (t + ms, L.udp4_frame(SERVER, NAT, 19302, 40000, resp))]
    flow = L.tcp_flow(t + 2 * ms, NAT, SERVER, 40001, 8443, data=req)
    fr += [(ts, f) for ts, f, _ in flow]
    fr.append((t + 9 * ms, L.tcp4_frame(SERVER, NAT, 8443, 40001, 5001, 1001 + len(req), L.ACK | L.PSH,
                                         alloc + chan + perm)))
    fr += [(t + 10 * ms, L.udp4_frame(NAT, SERVER, 40002, 3478, message(0x0001, [], cookie=False, finger=False))),
           (t + 11 * ms, L.udp4_frame(SERVER, NAT, 3478, 40002, classic))]
    return fr


# The addresses as tshark reads them: XOR-ed ones already undone.
FIELDS = ["stun.att.ipv4", "stun.att.ipv6", "classicstun.att.ipv4", "ip.dst", "stun.att.crc32.status"]


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    work = L.tmpdir("stun")
    inp, out = os.path.join(work, "stun.pcap"), os.path.join(work, "stun-ids.pcap")
    L.write_pcap(inp, trace())
    pol = os.path.join(ROOT, "rules", "ids.amon")
    L.run_amon(amon, inp, [("ids", pol, out)])
    fails = []
    rin = {r[0]: r for r in L.tshark_fields(inp, FIELDS, "stun || classicstun", PORTS)}
    rout = {r[0]: r for r in L.tshark_fields(out, FIELDS, "stun || classicstun", PORTS)}
    if len(rin) != 6 or set(rout) != set(rin):
        fails.append(f"STUN frames: {sorted(rin)} in the input, {sorted(rout)} in the output (6 expected in both)")
    given = {a for r in rin.values() for f in r[1:4] for a in f}
    if not PROTECTED | {SERVER} <= given:
        fails.append(f"the input's STUN addresses as tshark reads them: {sorted(given)}")
    n_same = 0
    for fno, r in rout.items():
        got = [a for f in r[1:4] for a in f]
        for a in got:
            if a in PROTECTED:
                fails.append(f"frame {fno}: {a} in clear in a STUN address attribute")
        # Where the input named the client, the output names it as the
        # client's own header does in that frame.
        had = [a for f in rin[fno][1:4] for a in f]
        if len(had) != len(got):
            fails.append(f"frame {fno}: {len(had)} STUN addresses in the input, {len(got)} in the output")
            continue
        for a, b in zip(had, got):
            if a == NAT and rin[fno][4] == [NAT]:
                n_same += 1
                if [b] != r[4]:
                    fails.append(f"frame {fno}: the client's mapped address became {b}, its header {r[4]}")
        for st in r[5]:
            if st != "1":
                fails.append(f"frame {fno}: FINGERPRINT does not verify (status {st})")
    if SERVER in {a for row in L.tshark_fields(out, ["ip.src", "ip.dst"]) for col in row[1:] for a in col}:
        fails.append(f"{SERVER}, pseudonymized in the 19302 exchange, in clear in an IP header of the output")
    if n_same < 3:
        fails.append(f"only {n_same} mapped addresses checked against their header's (3 expected)")
    L.health(inp, out, "stun", fails)
    a = subprocess.run([amon, "audit", "--policy", pol, "--original", inp, "--anonymized", out],
                       capture_output=True, text=True, timeout=120)
    if a.returncode != 0:
        fails.append(f"amon audit: exit {a.returncode}: {a.stdout[-800:]}{a.stderr[-400:]}")
    # Planted: the client hidden in every IP header (MACs zeroed), its XOR-MAPPED-ADDRESS
    # left as it came (the classic response, whose MAPPED-ADDRESS is plain,
    # left out): only the audit's reading of XOR-ed values can see it.
    planted = os.path.join(work, "planted.pcap")
    nat, other = L.ip4(NAT), L.ip4("203.0.113.99")
    _, recs = L.read_pcap(inp)
    frames = []
    for ts, _, _, b in recs[:8]:
        b = bytearray(b)
        b[0:12] = bytes(12)  # MACs zeroed: zeros name no one
        for at in (26, 30):
            if b[at:at + 4] == nat:
                b[at:at + 4] = other
        frames.append((ts, bytes(b)))
    L.write_pcap(planted, frames)
    a = subprocess.run([amon, "audit", "--policy", pol, "--original", inp, "--anonymized", planted, "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    if a.returncode != 1 or NAT not in a.stdout:
        fails.append(f"amon audit on the planted copy: exit {a.returncode} (1 expected, naming {NAT}): "
                     f"{a.stdout[-600:]}{a.stderr[-300:]}")
    return L.report(fails, f"stun: ok ({len(rout)} STUN frames, {n_same} mapped addresses as their headers, "
                           "audit clean)")


if __name__ == "__main__":
    sys.exit(main())
