#!/usr/bin/env python3
"""End to end: a user's address, MAC and device names in DNS-format
messages take the policy's rules for users, MACs and names, through
`amon pcap` on crafted messages (no tshark needed: the test builds the
messages and knows every offset).

  users    an A/AAAA record holding an address inside `clients` gets
           ip.client's action (the pseudonym its IP header gets) under a
           policy with no dns.answer.addr rule, and under one with no DNS
           rule at all; a server's address in the same answer stays.

  devices  mDNS (5353): a MAC written in a DNS-SD TXT value (waMA=, deviceid=)
           takes eth.src's rule, in its own format; the device's name
           (the instance and host labels, not `_ipp._tcp.local`) takes
           dhcp.hostname's rule under a policy with no DNS name rule, and
           so does the DHCP server host name (sname) that carries it.
  edns     a name in an EDNS CHAIN option takes dns.qname's rule.

usage: test_dns_users.py AMON"""

import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e"))
import e2e_lib as L  # noqa: E402

S = 1_000_000_000
USER, USER6, SERVER, RESOLVER = "10.1.2.3", bytes.fromhex("fd000000000000000000000000000005"), "203.0.113.7", "192.0.2.53"


def wire_name(n):
    out = b""
    for lab in n.split("."):
        out += bytes([len(lab)]) + lab.encode()
    return out + b"\0"


def rr(owner, rtype, rdata, klass=1):
    return owner + struct.pack("!HHIH", rtype, klass, 120, len(rdata)) + rdata


def message(txid, flags, questions, answers, additional=()):
    m = struct.pack("!HHHHHH", txid, flags, len(questions), len(answers), 0, len(additional))
    for q in questions:
        m += wire_name(q) + struct.pack("!HH", 1, 1)
    for a in answers:
        m += a
    for a in additional:
        m += a
    return m


def payload(frame):
    """UDP payload of an Ethernet/IPv4/UDP frame."""
    ihl = (frame[14] & 0xF) * 4
    return frame[14 + ihl + 8:]


def check_users(amon, d, fails):
    key = L.make_key(d)
    q = message(7, 0x0100, ["nas.example"], [])
    r = message(7, 0x8180, ["nas.example"], [
        rr(b"\xc0\x0c", 1, L.ip4(USER)),
        rr(b"\xc0\x0c", 1, L.ip4(SERVER)),
        rr(b"\xc0\x0c", 28, USER6),
    ])
    frames = [(1 * S, L.udp4_frame(USER, RESOLVER, 40000, 53, q)),
              (1 * S + 1000, L.udp4_frame(RESOLVER, USER, 53, 40000, r))]
    inp = os.path.join(d, "users.pcap")
    L.write_pcap(inp, frames)
    pols = {
        # The shipped ids policy's shape: DNS protected (ECS) but no rule for answers.
        "ecs": "dns.ecs : cryptopan(key=k)\n",
        # No DNS rule at all: the answers still carry users.
        "none": "",
    }
    for name, extra in pols.items():
        pol = L.write_policy(d, name + ".amon", 'key k = file("%s")\nclients = { 10.0.0.0/8, fc00::/7 }\n'
                             "ip.client : cryptopan(key=k)\nip.server : keep()\n%s" % (key, extra))
        out = os.path.join(d, name + ".out.pcap")
        L.run_amon(amon, inp, [(name, pol, out)])
        _, recs = L.read_pcap(out)
        if len(recs) != 2:
            fails.append(f"users/{name}: {len(recs)} frames out, 2 in")
            continue
        q_out, r_out = recs[0][3], recs[1][3]
        pseudo = q_out[26:30]  # the query's source: the user's pseudonym in its header
        pl = payload(r_out)
        base = 12 + len(wire_name("nas.example")) + 4
        a1, a2, a6 = base + 12, base + 16 + 12, base + 32 + 12
        if pseudo == L.ip4(USER):
            fails.append(f"users/{name}: the user's header address was not rewritten")
        if pl[a1:a1 + 4] != pseudo:
            fails.append(f"users/{name}: A record of the user holds {L.ip4str(pl[a1:a1 + 4])}, "
                         f"not its header pseudonym {L.ip4str(pseudo)}")
        if pl[a2:a2 + 4] != L.ip4(SERVER):
            fails.append(f"users/{name}: the server's A record changed to {L.ip4str(pl[a2:a2 + 4])}")
        if pl[a6:a6 + 16] == USER6:
            fails.append(f"users/{name}: AAAA record of a user (fd00::5) left in clear")
        if L.ip4(USER) in pl:
            fails.append(f"users/{name}: the user's address in clear in the response's payload")
        if shutil.which("tshark"):
            L.health(inp, out, f"users/{name}", fails)


def txt(*strings):
    return b"".join(bytes([len(x)]) + x for x in strings)


def dhcp_offer(sname):
    b = bytearray(236)
    b[0:4] = bytes([2, 1, 6, 0])
    b[4:8] = b"\x12\x34\x56\x78"
    b[16:20] = L.ip4("10.1.2.9")
    b[28:34] = bytes.fromhex("02aabbccddee")
    b[44:44 + len(sname)] = sname
    return bytes(b) + b"\x63\x82\x53\x63" + bytes([53, 1, 2, 12, 7]) + b"visitor" + bytes([255])


def check_devices(amon, d, fails):
    key = L.make_key(d, "dev")
    inst = wire_name("Yaels-iPhone._ipp._tcp.local")
    host = wire_name("Yaels-iPhone.local")
    values = txt(b"waMA=C4:2C:03:06:49:FE", b"deviceid=02-11-22-33-44-5a", b"model=iPhone", b"id=0A:0B:0C:0D:0E:0F:01")
    mdns = message(0, 0x8400, [], [
        rr(wire_name("_ipp._tcp.local"), 12, inst),
        rr(inst, 16, values, 0x8001),
        rr(host, 1, L.ip4(USER), 0x8001),
    ])
    opt_chain = struct.pack("!HH", 13, len(wire_name("secret.example"))) + wire_name("secret.example")
    q = message(9, 0x0100, ["secret.example"], [], [b"\0" + struct.pack("!HHIH", 41, 1232, 0, len(opt_chain)) + opt_chain])
    frames = [(1 * S, L.udp4_frame(USER, "224.0.0.251", 5353, 5353, mdns)),
              (2 * S, L.udp4_frame(USER, RESOLVER, 40001, 53, q)),
              (3 * S, L.udp4_frame("10.1.2.1", "10.1.2.9", 67, 68, dhcp_offer(b"Yaels-iPhone.local")))]
    inp = os.path.join(d, "devices.pcap")
    L.write_pcap(inp, frames)
    pol = L.write_policy(d, "dev.amon", 'key k = file("%s")\nclients = { 10.0.0.0/8 }\n'
                         "eth.src, eth.dst : zero()\nip.client : cryptopan(key=k)\nip.server : keep()\n"
                         "dhcp.hostname : hash(key=k)\ndns.qname : redact()\n" % key)
    out = os.path.join(d, "dev.out.pcap")
    L.run_amon(amon, inp, [("dev", pol, out)])
    _, recs = L.read_pcap(out)
    if len(recs) != 3:
        fails.append(f"devices: {len(recs)} frames out, 3 in")
        return
    m, qo, dh = payload(recs[0][3]), payload(recs[1][3]), payload(recs[2][3])
    low = m.lower()
    if b"c4:2c:03:06:49:fe" in low or b"02-11-22-33-44-5a" in low:
        fails.append("devices: a MAC in a TXT value left in clear")
    if b"waMA=00:00:00:00:00:00" not in m or b"deviceid=00-00-00-00-00-00" not in m:
        fails.append("devices: a TXT MAC did not take eth.src's zero() in its own format")
    if b"id=0A:0B:0C:0D:0E:0F:01" not in m:
        fails.append("devices: a longer hex run (not a MAC) was changed")
    if b"model=iPhone" not in m:
        fails.append("devices: a TXT value with no MAC changed")
    if b"yaels" in low:
        fails.append("devices: the device name in clear in the mDNS message")
    if wire_name("_ipp._tcp.local") not in m or b"\x04_ipp\x04_tcp\x05local" not in m[m.index(b"\x04_ipp") + 1:]:
        fails.append("devices: the DNS-SD service labels changed")
    if b"secret" in qo.lower():
        fails.append("edns: the CHAIN option's name left in clear under dns.qname : redact()")
    if len(qo) != len(q):
        fails.append("edns: the query's length changed")
    if b"yaels" in dh.lower():
        fails.append("devices: the DHCP server host name (sname) left in clear under dhcp.hostname's rule")
    if shutil.which("tshark"):
        L.health(inp, out, "devices", fails)


def main():
    amon = L.tool_paths(sys.argv)
    d = L.tmpdir("e2e-dns-users-")
    fails = []
    check_users(amon, d, fails)
    check_devices(amon, d, fails)
    return L.report(fails, "dns users: ok")


if __name__ == "__main__":
    sys.exit(main())
