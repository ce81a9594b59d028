#!/usr/bin/env python3
"""End to end: a packet's own address written as text in a payload the
policy keeps (a syslog line, an HTTP Host naming its server by address, an
FTP PORT) leaves as the text of the address's mapping, at the same length,
through `amon pcap` on crafted frames; tshark checks the checksums.

Two policies run the same frames: header rules only (the header kernels)
and the same with an application rule (the general path). In both:
  - no text form of a user's address stays (dotted quad; IPv6 in RFC 5952
    form, upper case, fully expanded);
  - each is the text of the address in the frame's IP header (Crypto-PAn),
    its octets or groups padded with zeros to the original's length, or the
    zero address where the pseudonym's text is longer (counted apart);
  - a server's address (kept) and a longer number that contains a user's
    address as a substring are left alone;
  - lengths are unchanged and every checksum is good;
  - a policy that keeps the users' addresses changes nothing;
  - `addr_text = keep` (with `echoes = keep`, whose search would find the
    mapped addresses too) maps the headers and leaves every payload byte;
  - consumers run together (client, server, both or neither mapped) each
    write what their policy writes alone.

usage: test_addr_text.py AMON"""

import ipaddress
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402
import test_payload_addrs as P  # noqa: E402

S = 1_000_000_000
C4, SRV4 = "192.168.7.7", "198.51.100.9"
C6, SRV6 = "fd00::17", "2001:db8::80"
C6_UP = "FD00::17"
C6_FULL = "fd00:0000:0000:0000:0000:0000:0000:0017"


def eth(et):
    return bytes.fromhex("00005e000101") + bytes.fromhex("001b213a4f5d") + struct.pack("!H", et)


udp4, udp6 = P.udp4, P.udp6


SYSLOG = (b"<13>Nov 24 10:00:00 gw sshd: login from " + C4.encode() + b" port 4022; peer " + SRV4.encode() +
          b"; not 10." + C4.encode() + b" nor " + C4.encode() + b"0; again " + C4.encode() + b"\n")
HTTP = b"GET / HTTP/1.1\r\nHost: " + C4.encode() + b"\r\n\r\n"
V6 = (b"client " + C6.encode() + b" CLIENT " + C6_UP.encode() + b" full " + C6_FULL.encode() +
      b" server " + SRV6.encode() + b" longer fd00::170\n")


def build(d):
    t = 1_700_000_000 * S
    f = [
        (t, eth(0x0800) + udp4(C4, SRV4, 40000, 514, SYSLOG)),
        # The user's server side: its address in the destination and a Host.
        (t + 1000, eth(0x0800) + udp4(SRV4, C4, 8080, 40001, HTTP)),
        (t + 2000, eth(0x86DD) + udp6(C6, SRV6, 40002, 514, V6)),
    ]
    path = os.path.join(d, "in.pcap")
    L.write_pcap(path, f)
    return path


def v4_text_of(b, n):
    """The address a dotted quad at b[n:] spells, zero-padded octets read as decimal."""
    return ".".join(str(int(x)) for x in b[n:].split(b".")) if b else None


def check(name, d, amon, inp, policy, want_mapped):
    out = os.path.join(d, name + ".pcap")
    sj = os.path.join(d, name + ".json")
    L.run_amon(amon, inp, [("c", policy, out)], extra=["--stats-json", sj])
    with open(sj) as fh:
        st = json.load(fh)["consumers"][0]
    _, rin = L.read_pcap(inp)
    _, rout = L.read_pcap(out)
    fails = []
    if [len(r[3]) for r in rout] != [len(r[3]) for r in rin]:
        return [f"{name}: frame lengths changed"]
    bad = L.bad_frames(out)
    if bad:
        fails.append(f"{name}: tshark flags frames {bad}")
    for fno, (ip, _, udp) in sorted(L.checksum_status(out).items()):
        if any(x != "1" for x in ip + udp) or not udp:
            fails.append(f"{name}: frame {fno}: checksum status ip {ip} udp {udp}")
    p1, p2, p3 = (r[3] for r in rout)
    if want_mapped == "headers only":
        # `addr_text = keep`: the headers mapped, every payload byte as it came.
        if [r[3][42:] for r in rout[:2]] != [r[3][42:] for r in rin[:2]] or p3[62:] != rin[2][3][62:]:
            fails.append(f"{name}: addr_text = keep changed payload bytes")
        if L.ip4str(p1[26:30]) == C4:
            fails.append(f"{name}: the IP header was not mapped")
        if st.get("addr_text", 0) or st.get("addr_text_zeroed", 0):
            fails.append(f"{name}: addr_text counted {st.get('addr_text')} {st.get('addr_text_zeroed')}")
        return fails
    if not want_mapped:
        if [r[3] for r in rout] != [r[3] for r in rin]:
            fails.append(f"{name}: a policy keeping the users' addresses changed bytes")
        if st.get("addr_text", 0) or st.get("addr_text_zeroed", 0):
            fails.append(f"{name}: addr_text counted {st.get('addr_text')} {st.get('addr_text_zeroed')}")
        return fails
    ps4 = L.ip4str(p1[26:30])
    ps6 = str(ipaddress.IPv6Address(p3[22:38]))
    if ps4 == C4 or ps6 == C6:
        return [f"{name}: IP headers not mapped ({ps4}, {ps6})"]
    for n, frame in ((1, p1), (2, p2), (3, p3)):
        frame = frame.replace(b"10." + C4.encode(), b"")  # a longer number, left alone on purpose
        for secret in (C4.encode() + b" ", C4.encode() + b"\r", C4.encode() + b"\n", C6.encode() + b" ",
                       C6_UP.encode(), C6_FULL.encode()):
            if secret in frame:
                fails.append(f"{name}: frame {n} still has {secret!r}")
    zeroed = 0

    def expect4(frame, start, label):
        nonlocal zeroed
        txt = frame[start:start + len(C4)]
        got = v4_text_of(txt, 0)
        if got == "0.0.0.0":
            zeroed += 1
        elif got != ps4:
            fails.append(f"{name}: {label}: {txt!r} is not {ps4} (the header's pseudonym)")

    pl1 = 42  # Ethernet 14 + IPv4 20 + UDP 8
    i = SYSLOG.index(b"from ") + 5
    expect4(p1, pl1 + i, "syslog 'from'")
    i = SYSLOG.rindex(b"again ") + 6
    expect4(p1, pl1 + i, "syslog 'again'")
    for keep in (b"peer " + SRV4.encode(), b"10." + C4.encode(), C4.encode() + b"0;"):
        if keep not in p1:
            fails.append(f"{name}: {keep!r} changed (a server's address, or a longer number)")
    i = HTTP.index(b"Host: ") + 6
    expect4(p2, pl1 + i, "HTTP Host")
    if p2[pl1:] == rin[1][3][pl1:]:
        fails.append(f"{name}: HTTP payload unchanged")

    pl3 = 62  # Ethernet 14 + IPv6 40 + UDP 8
    for label, at, ln in (("v6 compressed", V6.index(b"client ") + 7, len(C6)),
                          ("v6 upper case", V6.index(b"CLIENT ") + 7, len(C6_UP)),
                          ("v6 expanded", V6.index(b"full ") + 5, len(C6_FULL))):
        txt = p3[pl3 + at:pl3 + at + ln].decode(errors="replace")
        try:
            got = str(ipaddress.IPv6Address(txt))
        except ValueError:
            fails.append(f"{name}: {label}: {txt!r} is not an IPv6 address")
            continue
        if got == "::":
            zeroed += 1
        elif got != ps6:
            fails.append(f"{name}: {label}: {txt!r} is not {ps6}")
    for keep in (b"server " + SRV6.encode(), b"longer fd00::170"):
        if keep not in p3:
            fails.append(f"{name}: {keep!r} changed")
    if st.get("addr_text", 0) + st.get("addr_text_zeroed", 0) != 6 or st.get("addr_text_zeroed", 0) != zeroed:
        fails.append(f"{name}: counters addr_text {st.get('addr_text')} addr_text_zeroed "
                     f"{st.get('addr_text_zeroed')}, want 6 in all, {zeroed} zeroed")
    return fails


def together(d, amon, inp, policies):
    """Every consumer of one run writes what its policy writes alone. The
    consumers' header paths share one scan of each payload for the
    addresses' text (each only writes its own mapping), so this runs
    consumers that map the client, the server, both, neither, and one on
    the general path, side by side."""
    fails = []
    outs = [(name, pol, os.path.join(d, f"together-{name}.pcap")) for name, pol in policies]
    L.run_amon(amon, inp, outs)
    for name, pol, out in outs:
        alone = os.path.join(d, f"alone-{name}.pcap")
        L.run_amon(amon, inp, [(name, pol, alone)])
        with open(out, "rb") as a, open(alone, "rb") as b:
            if a.read() != b.read():
                fails.append(f"together: consumer {name} wrote other bytes than its policy alone")
    return fails


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    d = L.tmpdir("addr-text-")
    # A fixed key: a random one maps a given address to itself once in 2^32
    # runs (Crypto-PAn has fixed points), which would read as "not mapped".
    kd = os.path.join(d, "keys")
    os.makedirs(kd, exist_ok=True)
    fd = os.open(os.path.join(kd, "k.hex"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("6c1f0a9e3b7d52c48e2a91f05d3c7b6a19e8f4d2c0b5a3978e6d1c4b2a0f9e8d\n")
    head = ('key k = file("keys/k.hex")\n'
            "clients = { 192.168.0.0/16, fd00::/8 }\n"
            "ip.server : keep()\n"
            "payload : keep()\n")
    kernel = L.write_policy(d, "kernel.amon", head + "ip.client : cryptopan(key=k)\n")
    general = L.write_policy(d, "general.amon", head + "ip.client : cryptopan(key=k)\ndns.qname : redact()\n")
    keep = L.write_policy(d, "keep.amon", head + "ip.client : keep()\n")
    text_keep = L.write_policy(d, "text-keep.amon", head + "addr_text = keep\nechoes = keep\n"
                                  "ip.client : cryptopan(key=k)\n")
    server = L.write_policy(d, "server.amon", head.replace("ip.server : keep()", "ip.server : cryptopan(key=k2)") +
                            'key k2 = file("keys/k.hex")\nip.client : keep()\n')
    both = L.write_policy(d, "both.amon", 'key k = file("keys/k.hex")\nip.src, ip.dst : cryptopan(key=k)\n')
    inp = build(d)
    fails = []
    fails += check("kernel", d, amon, inp, kernel, True)
    fails += check("general", d, amon, inp, general, True)
    fails += check("keep", d, amon, inp, keep, False)
    fails += check("text-keep", d, amon, inp, text_keep, "headers only")
    fails += together(d, amon, inp, [("client", kernel), ("server", server), ("both", both), ("keep", keep),
                                     ("general", general), ("text-keep", text_keep)])
    return L.report(fails, "addresses as text: mapped at the same length on both paths")


if __name__ == "__main__":
    sys.exit(main())
