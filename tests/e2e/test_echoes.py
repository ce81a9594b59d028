#!/usr/bin/env python3
"""End to end: values the policy rewrote in their fields, found again in
payload it keeps, leave as their field did (`echoes = map`, the default),
through `amon pcap` with the shipped rules/ids.amon on crafted frames:

  - a Set-Cookie value echoed into a later segment of the same HTTP
    response's body;
  - another host's MAC (seen in an earlier frame's Ethernet header)
    written as text, in both cases and with colons or dashes, and in
    binary, in an agent's UDP payload; and as the start of a serial
    number (its dash groups, a dash and a digit, as a Sonos player's);
  - another host's address (a user's, pseudonymized in its own flow)
    written as text in that payload (IPv4 in binary is not searched: four
    given bytes turn up by chance);
  - a DHCP host name (hashed in DHCP) repeated in that payload, in
    another case;
  - the source MAC of a frame inside VXLAN, named in binary and in
    Cisco's dotted form by that frame's own payload (a router's hello).

Each is in the input and in none of the output's frames; lengths stay and
checksums are good; the `echoes` counter counts them. With `echoes = keep`
they all stay in clear (the setting turns the search off).

usage: test_echoes.py AMON"""

import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

S = 1_000_000_000
USER, SERVER = "192.168.1.10", "93.184.216.34"
AGENT, COLLECTOR = "192.168.1.20", "198.51.100.7"
USER_MAC = bytes.fromhex("001b213a4f5d")
AGENT_MAC = bytes.fromhex("0050569a0b0c")
GW_MAC = bytes.fromhex("00005e000101")
COOKIE = b"Zq83hF0a9LmX2kPd7"
HOST = b"anna-laptop"
MAC_TEXTS = [b"00:1b:21:3a:4f:5d", b"00:1B:21:3A:4F:5D", b"00-1b-21-3a-4f-5d"]
SERIAL = b"00-1B-21-3A-4F-5D-7"
INNER_MAC = bytes.fromhex("000a4143d080")
INNER_MAC_TEXT = b"000a.4143.d080"


def eth(dst, src):
    return dst + src + b"\x08\x00"


def with_eth(frame, dst, src):
    """An e2e_lib frame (fixed MACs) with the given MACs."""
    return eth(dst, src) + frame[14:]


def http_flow(t):
    c, s = 1000, 5000
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nSet-Cookie: SESSIONID=" + COOKIE +
            b"; Path=/; HttpOnly\r\nContent-Length: 120\r\n\r\n<html><body>")
    body = b"<script>var sid='" + COOKIE + b"';</script></body></html>"
    body += b" " * (120 - len(b"<html><body>") - len(body))
    req = b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"
    tf = L.tcp4_frame
    up, down = (USER_MAC, GW_MAC), (GW_MAC, USER_MAC)
    f = [
        (tf(USER, SERVER, 40000, 80, c, 0, L.SYN), up),
        (tf(SERVER, USER, 80, 40000, s, c + 1, L.SYN | L.ACK), down),
        (tf(USER, SERVER, 40000, 80, c + 1, s + 1, L.ACK), up),
        (tf(USER, SERVER, 40000, 80, c + 1, s + 1, L.ACK | L.PSH, req), up),
        (tf(SERVER, USER, 80, 40000, s + 1, c + 1 + len(req), L.ACK | L.PSH, head), down),
        (tf(SERVER, USER, 80, 40000, s + 1 + len(head), c + 1 + len(req), L.ACK | L.PSH, body), down),
    ]
    return [(t + i * 1_000_000, with_eth(fr, src, dst)) for i, (fr, (src, dst)) in enumerate(f)]


def dhcp_request(t):
    """A DHCPREQUEST from the user's MAC naming its host."""
    bootp = struct.pack("!BBBBIHH4s4s4s4s", 1, 1, 6, 0, 0x3903F326, 0, 0x8000, b"\0" * 4, b"\0" * 4,
                        b"\0" * 4, b"\0" * 4)
    bootp += USER_MAC + b"\0" * 10 + b"\0" * 64 + b"\0" * 128 + bytes.fromhex("63825363")
    bootp += b"\x35\x01\x03" + b"\x0c" + bytes([len(HOST)]) + HOST + b"\xff"
    fr = L.udp4_frame("0.0.0.0", "255.255.255.255", 68, 67, bootp)
    return t, with_eth(fr, b"\xff" * 6, USER_MAC)


def agent_report(t):
    """Another host's agent reports what it saw, as text and in binary."""
    text = (b"neighbour " + USER.encode() + b" mac " + b", ".join(MAC_TEXTS) + b" host " +
            HOST.upper() + b" cookie " + COOKIE + b" urn:sonos:serial:" + SERIAL + b"\n")
    binary = b"BIN" + L.ip4(USER) + USER_MAC + b"END"
    fr = L.udp4_frame(AGENT, COLLECTOR, 41000, 9999, text + binary)
    return t, with_eth(fr, GW_MAC, AGENT_MAC)


def tunnelled_report(t):
    """A router's hello inside VXLAN (as HSRPv2 inside ERSPAN): its payload
    names the inner frame's source MAC, in binary and as text."""
    inner = L.udp4_frame("10.20.0.2", "224.0.0.102", 1985, 1985,
                         b"HELLO id " + INNER_MAC + b" mac " + INNER_MAC_TEXT + b"\n")
    inner = with_eth(inner, bytes.fromhex("01005e000066"), INNER_MAC)
    vxlan = b"\x08\x00\x00\x00" + (42).to_bytes(3, "big") + b"\x00"
    fr = L.udp4_frame("192.0.2.1", "192.0.2.2", 50000, 4789, vxlan + inner)
    return t, with_eth(fr, GW_MAC, AGENT_MAC)


def build(d):
    t = 1_700_000_000 * S
    frames = [dhcp_request(t)] + http_flow(t + S) + [agent_report(t + 2 * S), tunnelled_report(t + 3 * S)]
    path = os.path.join(d, "in.pcap")
    L.write_pcap(path, frames)
    return path


def secrets():
    return [COOKIE, HOST, HOST.upper(), USER_MAC, USER.encode() + b" ", INNER_MAC, INNER_MAC_TEXT, SERIAL] + MAC_TEXTS


def policy(d, extra=""):
    """rules/ids.amon as shipped, with a fixed key beside it."""
    p = os.path.join(d, "ids-echoes-" + ("keep" if extra else "map") + ".amon")
    with open(p, "w") as fh:
        fh.write(L.shipped_ids(d) + (extra or "echoes = map\n"))
    return p


def run(d, amon, inp, pol, name):
    out = os.path.join(d, name + ".pcap")
    sj = os.path.join(d, name + ".json")
    L.run_amon(amon, inp, [("ids", pol, out)], extra=["--stats-json", sj])
    with open(sj) as fh:
        st = json.load(fh)["consumers"][0]
    _, rout = L.read_pcap(out)
    return out, [r[3] for r in rout], st


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    d = L.tmpdir("echoes-")
    inp = build(d)
    _, rin = L.read_pcap(inp)
    fin = [r[3] for r in rin]
    fails = []
    whole_in = b"".join(fin)
    for s in secrets():
        if s not in whole_in:
            fails.append(f"input lacks {s!r} (the test's own frames are wrong)")

    out, fout, st = run(d, amon, inp, policy(d), "map")
    if [len(f) for f in fout] != [len(f) for f in fin]:
        fails.append("frame lengths changed")
    for i, f in enumerate(fout):
        for s in secrets():
            if s in f:
                fails.append(f"frame {i + 1}: {s!r} left in clear")
    body = fout[6]
    if b"var sid='" not in body or b"</script>" not in body:
        fails.append("the HTTP body around the cookie changed")
    if fout[1][26:30] == L.ip4(USER):
        fails.append("the user's address was not pseudonymized in its own flow")
    L.health(inp, out, "ids", fails)
    if st.get("echoes", 0) + st.get("echoes_filled", 0) < 9:
        fails.append(f"echoes counted {st.get('echoes')} + {st.get('echoes_filled')}, want at least 9")

    # The setting turns the search off: every copy stays (this is also what
    # the policy wrote before the search existed).
    _, fkeep, stk = run(d, amon, inp, policy(d, "echoes = keep\n"), "keep")
    agent = fkeep[-2]
    for s in (COOKIE, HOST.upper(), MAC_TEXTS[0], USER.encode() + b" ", SERIAL):
        if s not in agent:
            fails.append(f"echoes = keep: {s!r} no longer in the agent's payload")
    if COOKIE not in fkeep[6]:
        fails.append("echoes = keep: the cookie's echo in the body changed")
    if stk.get("echoes", 0) or stk.get("echoes_filled", 0):
        fails.append(f"echoes = keep: counted {stk.get('echoes')} {stk.get('echoes_filled')}")
    return L.report(fails, "ok: protected values echoed in kept payload leave as their fields do")


if __name__ == "__main__":
    sys.exit(main())
