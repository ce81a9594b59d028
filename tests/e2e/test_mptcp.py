#!/usr/bin/env python3
"""End to end: the address of a Multipath TCP ADD_ADDR option takes the
treatment the same address takes in IP headers, through `amon pcap`, with
tshark reading the output.

  SHARED  mptcp-add-addr.pcap under the four shipped policies: the option's
          address equals the pseudonym 10.1.2.2 has in the IP headers, never
          10.1.2.2 itself; TCP checksums stay good.
  BUILT   version 1 with port and truncated HMAC (IPv4 and IPv6), version 0,
          an echo: each address equals its header pseudonym (another address
          of the client: the client's; the server's own: its header's; an
          echo: the receiver's); HMACs zeroed; an option of no known length
          has its bytes after the subtype zeroed; bytes past the options
          (after End of Option List, or from an option whose length runs
          past the header) zeroed, the options before them kept; checksums
          good.

usage: test_mptcp.py AMON [PCAPS_DIR]"""

import ipaddress
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FIELDS = ["ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "tcp.options.mptcp.ipv4", "tcp.options.mptcp.ipv6",
          "tcp.options.mptcp.addaddrtrunchmac", "tcp.checksum.status"]


def packed(a):
    return ipaddress.ip_address(a).packed


def tcp_frame(src, dst, sport, dport, flags, opts=b""):
    """Ethernet/IP(v4 or v6)/TCP with options and correct checksums."""
    opts += b"\x01" * (-len(opts) % 4)
    s, d = packed(src), packed(dst)
    tcp = struct.pack("!HHIIHHHH", sport, dport, 1, 1, ((5 + len(opts) // 4) << 12) | flags, 65535, 0, 0) + opts
    ck = L._csum(s + d + (struct.pack("!BBH", 0, 6, len(tcp)) if len(s) == 4 else struct.pack("!IxxxB", len(tcp), 6))
                 + tcp)
    tcp = tcp[:16] + struct.pack("!H", ck) + tcp[18:]
    if len(s) == 4:
        iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0x4000, 64, 6, 0, s, d)
        iph = iph[:10] + struct.pack("!H", L._csum(iph)) + iph[12:]
        return b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00" + iph + tcp
    iph = struct.pack("!IHBB", 0x60000000, len(tcp), 6, 64) + s + d
    return b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x86\xdd" + iph + tcp


def add_addr(addr, v1=True, echo=False, port=None, hmac=None):
    a = packed(addr)
    body = bytes([0]) + a + (struct.pack("!H", port) if port is not None else b"") + (hmac or b"")
    low = (1 if echo else 0) if v1 else (4 if len(a) == 4 else 6)
    return bytes([30, 3 + len(body), 0x30 | low]) + body


SYN, ACK = 0x02, 0x10
C4, C4B, S4 = "10.9.0.1", "10.9.0.2", "198.51.100.7"
C6, C6B, S6 = "fd00::17", "fd00::18", "2001:db8::80"
HMAC = bytes(range(1, 9))


def built():
    """[(frame, expected: (option address as sent, the header address whose
    pseudonym it must equal))]."""
    f = []
    for c, cb, s in ((C4, C4B, S4), (C6, C6B, S6)):
        f.append((tcp_frame(c, s, 40000, 80, SYN), None))
        f.append((tcp_frame(s, c, 80, 40000, SYN | ACK), None))
        # Another address of the client, with port and HMAC (version 1).
        f.append((tcp_frame(c, s, 40000, 80, ACK, add_addr(cb, port=40001, hmac=HMAC)), cb))
        # The server's own address (version 0), and the server's echo of the client's.
        f.append((tcp_frame(s, c, 80, 40000, ACK, add_addr(s, v1=False)), s))
        f.append((tcp_frame(s, c, 80, 40000, ACK, b"\x01\x01" + add_addr(cb, echo=True)), cb))
        # The second subflow, from the other address: its header pseudonym.
        f.append((tcp_frame(cb, s, 40001, 80, SYN), None))
    # Of no known length: 9 bytes of an IPv4 ADD_ADDR.
    f.append((tcp_frame(C4, S4, 40000, 80, ACK, bytes([30, 9, 0x30, 0]) + packed(C4B) + b"\x07"), "bad"))
    # Bytes past the options: after an End of Option List (the client's
    # address and a MAC, as a broken stack or a fuzzer leaves them), and
    # from an option whose length runs past the header.
    f.append((tcp_frame(C4, S4, 40000, 80, ACK, bytes([2, 4, 5, 0xb4, 0]) + packed(C4) + b"\x02\0\0\0\0\x01"),
              ("tail", 5)))
    f.append((tcp_frame(C4, S4, 40000, 80, ACK, bytes([1, 1, 8, 30]) + packed(C4B) + b"\0\0"), ("tail", 2)))
    return f


def pseudonyms(inp, out):
    """Input address -> its output in IP headers, frame by frame."""
    m = {}
    rin = {r[0]: r for r in L.tshark_fields(inp, FIELDS[:4])}
    for r in L.tshark_fields(out, FIELDS[:4]):
        i = rin.get(r[0])
        if i:
            for k in range(1, 5):
                for a, b in zip(i[k], r[k]):
                    m.setdefault(a, set()).add(b)
    return m


def option_addrs(row):
    return row[5] + [str(ipaddress.ip_address(x)) for x in row[6]]


def check_shared(amon, pcaps, work, fails):
    inp = os.path.join(pcaps, "mptcp-add-addr.pcap")
    if not os.path.exists(inp):
        L.skip("mptcp-add-addr.pcap not found")
    n_opts = 0
    for pol in ("ids", "flows", "meter", "research"):
        out = os.path.join(work, f"shared-{pol}.pcap")
        L.run_amon(amon, inp, [(pol, os.path.join(ROOT, "rules", pol + ".amon"), out)])
        m = pseudonyms(inp, out)
        want = m.get("10.1.2.2")
        if not want or want == {"10.1.2.2"}:
            fails.append(f"{pol}: 10.1.2.2 is not rewritten in the IP headers ({want})")
            continue
        rows = L.tshark_fields(out, FIELDS, "tcp.options.mptcp.ipv4 || tcp.options.mptcp.ipv6", L.CHECKS)
        for r in rows:
            for a in option_addrs(r):
                n_opts += 1
                if a not in want:
                    fails.append(f"{pol}: frame {r[0]}: ADD_ADDR {a}, 10.1.2.2 is {sorted(want)} in headers")
            if "0" in r[8]:
                fails.append(f"{pol}: frame {r[0]}: TCP checksum bad")
        if not rows:
            fails.append(f"{pol}: no ADD_ADDR in the output")
    return n_opts


def check_built(amon, work, fails):
    frames = built()
    inp, out = os.path.join(work, "built.pcap"), os.path.join(work, "built-out.pcap")
    L.write_pcap(inp, [(1_700_000_000_000_000_000 + i * 1_000_000, fr) for i, (fr, _) in enumerate(frames)])
    key = L.make_key(work)
    pol = L.write_policy(work, "p.amon", f'key k = file("{key}")\nip.client : cryptopan(key=k)\n'
                                         "ip.server : prefix(16, v6=32)\n")
    L.run_amon(amon, inp, [("p", pol, out)])
    m = pseudonyms(inp, out)
    rows = {r[0]: r for r in L.tshark_fields(out, FIELDS, None, L.CHECKS)}
    outf = L.read_pcap(out)[1]
    for i, (fr, exp) in enumerate(frames):
        r = rows.get(i + 1)
        if r is None:
            fails.append(f"built frame {i + 1} missing")
            continue
        if "0" in r[8]:
            fails.append(f"built frame {i + 1}: TCP checksum bad")
        if exp is None:
            continue
        if isinstance(exp, tuple):
            o = outf[i][3]
            opts = o[14 + 20 + 20:14 + 20 + (o[14 + 20 + 12] >> 4) * 4]
            if any(opts[exp[1]:]) or opts[:exp[1]] != fr[54:54 + exp[1]]:
                fails.append(f"built frame {i + 1}: TCP options {opts.hex()}: the options kept, the rest zero expected")
            continue
        if exp == "bad":
            o = outf[i][3]
            at = o.find(bytes([30, 9, 0x30]))
            if at < 0 or o[at + 3:at + 9] != bytes(6):
                fails.append(f"built frame {i + 1}: an ADD_ADDR of no known length kept its bytes")
            continue
        got = option_addrs(r)
        want = m.get(exp, set())
        if len(got) != 1 or got[0] not in want or got[0] == exp:
            fails.append(f"built frame {i + 1}: ADD_ADDR {got}, {exp} is {sorted(want)} in headers")
        for h in r[7]:
            if int(h, 16 if not h.startswith("0x") else 0) != 0:
                fails.append(f"built frame {i + 1}: HMAC {h} left")


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    pcaps = L.pcaps_dir(sys.argv[2] if len(sys.argv) > 2 else None)
    work = L.tmpdir("mptcp-")
    fails = []
    n = check_shared(amon, pcaps, work, fails)
    check_built(amon, work, fails)
    return L.report(fails, f"ok: {n} ADD_ADDR addresses in the shared capture's outputs equal their header pseudonyms; "
                           "built v0/v1/echo/IPv6 options mapped, HMACs zeroed, a malformed one zeroed, bytes past the options "
                           "zeroed")


if __name__ == "__main__":
    sys.exit(main())
