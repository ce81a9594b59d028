#!/usr/bin/env python3
"""End to end: a DNS response takes the z-anonymity decision its
query got (one exchange, one decision), through `amon pcap` on crafted
query/response pairs, with tshark reading the output.

The key cases cross the z threshold between a query and its response:

  A  hidden query, the name becomes popular (z-th user) before the response:
     the response's question and its owner names stay hidden, with the
     query's mask; a CNAME target in the same response is decided at its
     own time (released: popular).
  B  released query, the window moves on before the response: the response
     stays released (at its own time only 2 users are left in the window).
  C  a response whose query was not seen: decided at its own time (released
     for a popular name, hidden for a rare one).
  D  a response with a queried transaction id but another question name:
     not the query's decision, decided at its own time.
  H  a response without its query whose owner is a literal copy of the
     (hidden) question: one decision for the name in the message, so the
     same mask twice.
  F  as A over TCP (length-prefixed messages, query and response in
     separate segments).
  G  fallback=sld: the query released only the registrable domain; by the
     response the full name is popular; the response still shows only the
     registrable domain.

Each case is checked against the behaviour before the change too (noted as
"own time"), so the test fails on an engine that decides each message at its
own time.

usage: test_dns_exchange.py AMON"""

import os
import struct
import sys

# e2e_lib: the end-to-end tests' shared pcap reader, tshark calls and work files.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e"))
import e2e_lib as L  # noqa: E402

S = 1_000_000_000
RESOLVER = "192.0.2.53"


def wire_name(n):
    out = b""
    for lab in n.split("."):
        out += bytes([len(lab)]) + lab.encode()
    return out + b"\0"


def dns_query(txid, qname):
    return struct.pack("!HHHHHH", txid, 0x0100, 1, 0, 0, 0) + wire_name(qname) + struct.pack("!HH", 1, 1)


def dns_response(txid, qname, cname=None, addr="203.0.113.7", compress=True):
    """Answer owners are compression pointers to the question (offset 12),
    or a literal copy of it (compress=False); a CNAME chain's second owner
    points at the CNAME target's rdata."""
    q = wire_name(qname) + struct.pack("!HH", 1, 1)
    body, an = b"", 0
    ptr_q = struct.pack("!H", 0xC000 | 12) if compress else wire_name(qname)
    if cname:
        rdata = wire_name(cname)
        body += ptr_q + struct.pack("!HHIH", 5, 1, 300, len(rdata)) + rdata
        target_off = 12 + len(q) + len(ptr_q) + 10
        body += struct.pack("!H", 0xC000 | target_off) + struct.pack("!HHIH", 1, 1, 300, 4) + L.ip4(addr)
        an = 2
    else:
        body += ptr_q + struct.pack("!HHIH", 1, 1, 300, 4) + L.ip4(addr)
        an = 1
    return struct.pack("!HHHHHH", txid, 0x8180, 1, an, 0, 0) + q + body


class Capture:
    def __init__(self):
        self.frames = []  # (ts_ns, bytes)
        self.marks = {}   # label -> frame number (1-based)

    def add(self, t_s, frame, label=None):
        self.frames.append((int(round(t_s * S)), frame))
        if label:
            self.marks[label] = len(self.frames)

    def query(self, t_s, client, port, txid, name, label=None):
        self.add(t_s, L.udp4_frame(client, RESOLVER, port, 53, dns_query(txid, name)), label)

    def response(self, t_s, client, port, txid, name, label=None, **kw):
        self.add(t_s, L.udp4_frame(RESOLVER, client, 53, port, dns_response(txid, name, **kw)), label)

    def tcp_exchange(self, t_s, client, port, txid, name, t_resp_s, label):
        """SYN, SYN/ACK, ACK, query, ACK at t_s...; the response at t_resp_s."""
        ms = 0.001
        q = dns_query(txid, name)
        q = struct.pack("!H", len(q)) + q
        r = dns_response(txid, name)
        r = struct.pack("!H", len(r)) + r
        ci, si = 1000, 5000
        self.add(t_s, L.tcp4_frame(client, RESOLVER, port, 53, ci, 0, L.SYN))
        self.add(t_s + ms, L.tcp4_frame(RESOLVER, client, 53, port, si, ci + 1, L.SYN | L.ACK))
        self.add(t_s + 2 * ms, L.tcp4_frame(client, RESOLVER, port, 53, ci + 1, si + 1, L.ACK))
        self.add(t_s + 3 * ms, L.tcp4_frame(client, RESOLVER, port, 53, ci + 1, si + 1, L.ACK | L.PSH, q), label + " query")
        self.pending_tcp = (t_resp_s, L.tcp4_frame(RESOLVER, client, 53, port, si + 1, ci + 1 + len(q), L.ACK | L.PSH, r),
                            label + " response")

    def flush_tcp(self):
        t, f, lab = self.pending_tcp
        self.add(t, f, lab)


def clients(n):
    return [f"10.0.0.{i + 1}" for i in range(n)]


def build_main():
    c = clients(8)
    cap = Capture()
    A, CDN = "a.example.org", "edge.cdnprov.net"
    # E (inside A): the CNAME target is popular before c1's response.
    cap.query(0.000, c[3], 41004, 0x0E04, CDN)
    cap.query(0.001, c[4], 41005, 0x0E05, CDN)
    cap.query(0.002, c[5], 41006, 0x0E06, CDN)
    # A: c1's query is hidden; c2, c3 follow, c3's is the z-th (released).
    cap.query(0.010, c[0], 40001, 0x1001, A, "A c1 query")
    cap.query(0.020, c[1], 40002, 0x1002, A, "A c2 query")
    cap.query(0.030, c[2], 40003, 0x1003, A, "A c3 query")
    cap.response(0.040, c[2], 40003, 0x1003, A, "A c3 response")
    cap.response(0.050, c[0], 40001, 0x1001, A, "A c1 response", cname=CDN)
    cap.response(0.060, c[1], 40002, 0x1002, A, "A c2 response")
    # B: dt = 60 s; c3's query at 159.9 is released (c1 at 100 still counts),
    # at its response (160.5) c1 has left the window.
    B = "b.example.net"
    cap.query(100.0, c[0], 40011, 0x2001, B, "B c1 query")
    cap.query(101.0, c[1], 40012, 0x2002, B, "B c2 query")
    cap.query(159.9, c[2], 40013, 0x2003, B, "B c3 query")
    cap.response(160.5, c[2], 40013, 0x2003, B, "B c3 response")
    # C: responses without a query.
    C, RARE = "c.example.com", "rare.example.com"
    cap.query(300.0, c[3], 40021, 0x3001, C)
    cap.query(301.0, c[4], 40022, 0x3002, C)
    cap.query(302.0, c[5], 40023, 0x3003, C, "C c6 query")
    cap.response(303.0, c[0], 40024, 0x3333, C, "C unasked popular")
    cap.response(303.5, c[6], 40025, 0x3334, RARE, "C unasked rare")
    # D: c2 asks for a rare name; a response with that id names C.
    cap.query(305.0, c[1], 40026, 0x4444, "e.example.com", "D c2 query")
    cap.response(305.1, c[1], 40026, 0x4444, C, "D mismatching response")
    # H: no query, the owner a literal copy of a hidden question: one name,
    # one decision in the message (the same mask twice).
    cap.response(400.0, c[7], 40027, 0x7777, "h.example.com", "H literal owner", compress=False)
    # F: over TCP, hidden query, popular by the response.
    Fn = "f.example.com"
    cap.tcp_exchange(500.0, c[0], 40031, 0x5001, Fn, 500.3, "F c1")
    cap.query(500.1, c[1], 40032, 0x5002, Fn)
    cap.query(500.2, c[2], 40033, 0x5003, Fn, "F c3 query")
    cap.flush_tcp()
    return cap


def build_sld():
    c = clients(4)
    cap = Capture()
    cap.query(0.0, c[1], 40101, 0x6001, "api.sldcase.com", "G c2 api query")
    cap.query(1.0, c[0], 40102, 0x6002, "www.sldcase.com", "G c1 www query")
    cap.query(2.0, c[2], 40103, 0x6003, "www.sldcase.com", "G c3 www query")
    cap.response(3.0, c[0], 40102, 0x6002, "www.sldcase.com", "G c1 www response")
    return cap


def names_of(path):
    """frame -> (question names, answer owner names, cname targets), as tshark shows them."""
    rows = L.tshark_fields(path, ["dns.qry.name", "dns.resp.name", "dns.cname", "udp.checksum.status",
                                  "tcp.checksum.status"], None, L.CHECKS)
    return {r[0]: (r[1], r[2], r[3], r[4] + r[5]) for r in rows}


def main():
    amon = sys.argv[1]
    L.need_tshark()
    d = L.tmpdir("e2e-dns-exchange-")
    fails = []

    def check(cond, msg):
        if not cond:
            fails.append(msg)

    # -------- main run: fallback = mask (the default)
    cap = build_main()
    # Frames are added in time order (the marks are their positions).
    assert all(cap.frames[i][0] <= cap.frames[i + 1][0] for i in range(len(cap.frames) - 1))
    inp = os.path.join(d, "exchange.pcap")
    L.write_pcap(inp, cap.frames)
    pol = L.write_policy(d, "z3.amon", "clients = { 10.0.0.0/8 }\n"
                         "dns.qname, dns.answer.name, dns.rdata.name : zanon(z=3, dt=60s)\n")
    out = os.path.join(d, "exchange-out.pcap")
    L.run_amon(amon, inp, [("z", pol, out)])
    got = names_of(out)
    M = cap.marks

    def q(label):
        return got.get(M[label], ([], [], [], []))

    def clear(label, name):
        qs, owners, _, _ = q(label)
        check(qs == [name], f"{label}: question {qs}, expected {name!r} in clear")

    def hidden(label, name):
        qs, owners, _, _ = q(label)
        check(len(qs) == 1 and qs[0] != name and len(qs[0]) == len(name),
              f"{label}: question {qs}, expected {name!r} hidden (masked, same length)")

    A = "a.example.org"
    hidden("A c1 query", A)
    hidden("A c2 query", A)
    clear("A c3 query", A)
    clear("A c3 response", A)
    # The key case: at its own time the c1 response would be released (3 users).
    hidden("A c1 response", A)
    hidden("A c2 response", A)
    qs1, _, _, _ = q("A c1 query")
    qs2, own2, cn2, _ = q("A c1 response")
    check(qs1 == qs2[:1], f"A: response question {qs2} differs from its query's mask {qs1}")
    check(len(own2) == 2 and own2[0] == (qs2[0] if qs2 else None),
          f"A c1 response: owner names {own2}, expected the question's mask first")
    check(cn2 == ["edge.cdnprov.net"] and own2[1:] == ["edge.cdnprov.net"],
          f"A c1 response: CNAME target {cn2} / owner {own2[1:]}, expected edge.cdnprov.net in clear (own time)")
    _, own_c3, _, _ = q("A c3 response")
    check(own_c3 == [A], f"A c3 response: owner {own_c3}, expected {A!r} in clear")

    B = "b.example.net"
    hidden("B c1 query", B)
    hidden("B c2 query", B)
    clear("B c3 query", B)
    clear("B c3 response", B)  # own time: 2 users in (100.5, 160.5]

    clear("C unasked popular", "c.example.com")
    hidden("C unasked rare", "rare.example.com")
    hidden("D c2 query", "e.example.com")
    clear("D mismatching response", "c.example.com")

    hidden("H literal owner", "h.example.com")
    qh, oh, _, _ = q("H literal owner")
    check(oh == qh, f"H: literal owner {oh} differs from the question's mask {qh} (one decision per name per message)")

    Fn = "f.example.com"
    hidden("F c1 query", Fn)
    clear("F c3 query", Fn)
    hidden("F c1 response", Fn)
    check(q("F c1 query")[0] == q("F c1 response")[0],
          f"F: TCP response question {q('F c1 response')[0]} differs from its query's {q('F c1 query')[0]}")

    bad = [fr for fr, r in got.items() if "0" in r[3]]
    check(not bad, f"checksums turned Bad in frames {bad}")

    # -------- fallback = sld
    cap = build_sld()
    inp = os.path.join(d, "sld.pcap")
    L.write_pcap(inp, cap.frames)
    pol = L.write_policy(d, "sld.amon", "clients = { 10.0.0.0/8 }\n"
                         "dns.qname, dns.answer.name : zanon(z=2, dt=60s, fallback=sld)\n")
    out = os.path.join(d, "sld-out.pcap")
    L.run_amon(amon, inp, [("z", pol, out)])
    got = names_of(out)
    M = cap.marks

    def sld_only(label, name, reg):
        qs = got.get(M[label], ([], [], [], []))[0]
        check(len(qs) == 1 and qs[0] != name and qs[0].endswith("." + reg) and len(qs[0]) == len(name),
              f"{label}: question {qs}, expected {name!r} masked left of {reg!r}")

    qs = got.get(M["G c2 api query"], ([],))[0]
    check(len(qs) == 1 and not qs[0].endswith("sldcase.com"), f"G c2 api query: {qs}, expected hidden entirely")
    sld_only("G c1 www query", "www.sldcase.com", "sldcase.com")
    qs = got.get(M["G c3 www query"], ([],))[0]
    check(qs == ["www.sldcase.com"], f"G c3 www query: {qs}, expected in clear (2 users)")
    # Own time would release it (c1, c3): the query released only the domain.
    sld_only("G c1 www response", "www.sldcase.com", "sldcase.com")
    check(got[M["G c1 www query"]][0] == got[M["G c1 www response"]][0],
          "G: the response's masked question differs from its query's")

    for f in fails:
        print("FAIL:", f)
    print(f"dns exchange: {len(fails)} failure(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
