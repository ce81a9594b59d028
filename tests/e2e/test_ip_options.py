#!/usr/bin/env python3
"""End to end: IPv4 options that record addresses, through `amon pcap` with
the shipped IDS policy (users inside `clients` pseudonymized, servers kept),
on frames built here from a user (10.9.0.1) to a server.

  Record Route   the user's address and a router's inside `clients`
  Timestamp      flag 1 (address and time): the user's address and a
                 server-side router's outside `clients`; flag 0 (times only)
  LSRR           a hop inside `clients`, then the final destination
  Traceroute     the originator (the user)
  unknown (222)  its data; and bytes past End of Option List

Checks: the user's address is in clear nowhere in the output and, where an
option records it, it equals the pseudonym the IP header got; the router
inside `clients` is a pseudonym, the one outside and the server keep theirs
(as in headers); unknown options' data and bytes past the list are zero,
the options' types and lengths kept; tshark reads every header checksum as
good.

usage: test_ip_options.py AMON"""

import ipaddress
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

USER, SERVER, HOP_IN, HOP_OUT = "10.9.0.1", "198.51.100.7", "10.9.0.254", "203.0.113.9"


def packed(a):
    return ipaddress.ip_address(a).packed


def frame(opts):
    opts += b"\x00" * (-len(opts) % 4)
    s, d = packed(USER), packed(SERVER)
    tcp = struct.pack("!HHIIHHHH", 40000, 80, 1, 1, (5 << 12) | 0x18, 65535, 0, 0) + b"hello"
    ck = L._csum(s + d + struct.pack("!BBH", 0, 6, len(tcp)) + tcp)
    tcp = tcp[:16] + struct.pack("!H", ck) + tcp[18:]
    ihl = 5 + len(opts) // 4
    iph = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, ihl * 4 + len(tcp), 1, 0x4000, 64, 6, 0, s, d) + opts
    iph = iph[:10] + struct.pack("!H", L._csum(iph)) + iph[12:]
    return b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00" + iph + tcp


# (options, [(offset in the options, the address written there)], [(from, to) that must be zero])
CASES = [
    (bytes([7, 11, 12]) + packed(USER) + packed(HOP_IN), [(3, USER), (7, HOP_IN)], []),
    (bytes([68, 20, 21, 0x01]) + packed(USER) + b"\0\0\0\1" + packed(HOP_OUT) + b"\0\0\0\2",
     [(4, USER), (12, HOP_OUT)], []),
    (bytes([68, 12, 13, 0x00]) + b"\0\0\0\1\0\0\0\2", [], []),
    (bytes([131, 11, 4]) + packed(HOP_IN) + packed(SERVER), [(3, HOP_IN), (7, SERVER)], []),
    (bytes([82, 12, 0, 1, 0, 3, 0, 0]) + packed(USER), [(8, USER)], []),
    (bytes([1, 222, 6]) + packed(USER) + bytes([0]) + packed(USER) + b"\x02\x00\x00\x00\x00\x01",
     [], [(3, 7), (8, 20)]),
]


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    work = L.tmpdir("ipopt")
    inp, out = os.path.join(work, "in.pcap"), os.path.join(work, "out.pcap")
    L.write_pcap(inp, [(1_700_000_000_000_000_000 + i * 1_000_000, frame(o)) for i, (o, _, _) in enumerate(CASES)])
    pol = L.write_policy(work, "ids.amon", L.shipped_ids(work))
    L.run_amon(amon, inp, [("ids", pol, out)])
    fails = []
    _, rout = L.read_pcap(out)
    if len(rout) != len(CASES):
        fails.append(f"{len(CASES)} frames in, {len(rout)} out")
        return L.report(fails, "")
    user_out = None
    mapped = 0
    for i, ((opts, addrs, zeros), r) in enumerate(zip(CASES, rout)):
        fo = r[3]
        ihl = (fo[14] & 15) * 4
        o = fo[34:14 + ihl]
        src = L.ip4str(fo[26:30])
        user_out = user_out or src
        if src == USER:
            fails.append(f"frame {i + 1}: the user's address in clear in the header")
        if packed(USER) in fo:
            fails.append(f"frame {i + 1}: the user's address in clear: {o.hex()}")
        for at, a in addrs:
            got = L.ip4str(o[at:at + 4])
            want_same = a in (SERVER, HOP_OUT)
            if a == USER and got != src:
                fails.append(f"frame {i + 1}: the option's {a} became {got}, the header's {src}")
            elif want_same and got != a:
                fails.append(f"frame {i + 1}: {a} (no user) became {got}")
            elif not want_same and got in (a, "0.0.0.0"):
                fails.append(f"frame {i + 1}: {a} (inside clients) came out as {got}")
            mapped += 1
        for a, b in zeros:
            if any(o[a:b]):
                fails.append(f"frame {i + 1}: bytes {a}..{b} of the options not zero: {o.hex()}")
        if o[0] != opts[0] or len(o) != len(opts + b"\x00" * (-len(opts) % 4)):
            fails.append(f"frame {i + 1}: options' layout changed: {o.hex()}")
    rows = L.tshark_fields(out, ["ip.checksum.status"], None, L.CHECKS)
    for r in rows:
        if "2" in r[1] or "0" in r[1]:
            fails.append(f"frame {r[0]}: IP header checksum {r[1]}")
    L.health(inp, out, "ip options", fails)
    return L.report(fails, f"ip options: ok ({mapped} recorded addresses as their roles, the user's as its header's "
                           f"pseudonym; unknown option data and padding zeroed)")


if __name__ == "__main__":
    sys.exit(main())
