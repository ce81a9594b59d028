#!/usr/bin/env python3
"""End to end: a user's address, MAC and device names in DNS-format
messages take the policy's rules for users, MACs and names, through
`amon pcap` on crafted messages (no tshark needed: the test builds the
messages and knows every offset).

  users    an A/AAAA record holding an address inside `clients` gets
           ip.client's action (the pseudonym its IP header gets) under a
           policy with no dns.answer.addr rule, and under one with no DNS
           rule at all; a server's address in the same answer stays.

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


def main():
    amon = L.tool_paths(sys.argv)
    d = L.tmpdir("e2e-dns-users-")
    fails = []
    check_users(amon, d, fails)
    return L.report(fails, "dns users: ok")


if __name__ == "__main__":
    sys.exit(main())
