#!/usr/bin/env python3
"""End to end: names in headers split over TCP segments (TLS
ClientHello, HTTP request head, DNS over TCP) through `amon pcap`, with
tshark (which reassembles TCP) as the oracle.

Crafted flows, each with its own secret name, cover: in order, the name
across a segment boundary, out of order, a duplicate and a partly
overlapping retransmission while held, a segment that never comes (fail
closed), a flow that goes quiet past the hold timeout, the end of input with
a header held, a retransmission after the header was released, another flow's
packets between the held segments, HTTP request heads after a lost body
segment, and a real capture whose ClientHello is
split in 248-byte segments.

Checks: no label of a secret name appears anywhere in the output file; a
header that could be completed reaches the monitor whole (every segment with
its payload, tshark decodes the reassembled ClientHello/request/query with a
hidden name of the same length, checksums valid, no new malformed frames); a
header that could not be completed leaves without its payload and is
counted; a keep() consumer gets every record byte-identical.

usage: test_reassembly.py AMON"""

import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

MS = 1_000_000
CLIENT, SERVER = "10.1.0.7", "192.0.2.80"


def client_hello(sni):
    """A TLS 1.2-style ClientHello record whose server_name extension sits
    after a long cipher list and a padding extension, so it lands in a later
    segment."""
    suites = b"".join(struct.pack("!H", 0x1301 + i) for i in range(120))
    name = sni.encode()
    sni_ext = struct.pack("!HHHBH", 0, len(name) + 5, len(name) + 3, 0, len(name)) + name
    pad = struct.pack("!HH", 21, 180) + b"\0" * 180
    sv = struct.pack("!HHB", 43, 3, 2) + b"\x03\x04"
    exts = pad + sni_ext + sv
    body = (b"\x03\x03" + bytes(range(32)) + b"\x20" + bytes(32) + struct.pack("!H", len(suites)) + suites +
            b"\x01\x00" + struct.pack("!H", len(exts)) + exts)
    hs = b"\x01" + struct.pack("!I", len(body))[1:] + body
    return b"\x16\x03\x01" + struct.pack("!H", len(hs)) + hs


def http_request(host):
    return (b"GET /index.html HTTP/1.1\r\nUser-Agent: test-agent/1.0\r\nAccept: */*\r\nHost: " + host.encode() +
            b"\r\nConnection: keep-alive\r\n\r\n")


def dns_tcp_query(qname):
    q = b"".join(bytes([len(lab)]) + lab.encode() for lab in qname.split(".")) + b"\0"
    msg = struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + q + struct.pack("!HH", 1, 1)
    return struct.pack("!H", len(msg)) + msg


class Flow:
    def __init__(self, frames, cport, sport):
        self.frames, self.cport, self.sport = frames, cport, sport
        self.cseq, self.sseq = 1001, 5001

    def handshake(self, t):
        c, s = self.cport, self.sport
        self.frames.append((t, L.tcp4_frame(CLIENT, SERVER, c, s, 1000, 0, L.SYN)))
        self.frames.append((t + 1, L.tcp4_frame(SERVER, CLIENT, s, c, 5000, 1001, L.SYN | L.ACK)))
        self.frames.append((t + 2, L.tcp4_frame(CLIENT, SERVER, c, s, 1001, 5001, L.ACK)))

    def data(self, t, off, chunk, flags=L.ACK | L.PSH):
        self.frames.append((t, L.tcp4_frame(CLIENT, SERVER, self.cport, self.sport, self.cseq + off, self.sseq, flags,
                                            chunk)))

    def server_ack(self, t, upto):
        self.frames.append((t, L.tcp4_frame(SERVER, CLIENT, self.sport, self.cport, self.sseq, self.cseq + upto, L.ACK)))


def cuts(data, at):
    out, prev = [], 0
    for a in list(at) + [len(data)]:
        out.append((prev, data[prev:a]))
        prev = a
    return out


def build(tmp):
    frames = []
    cases = {}  # name -> (kind, complete?)
    gap_cases = {}  # HTTP heads after a lost segment: name -> client port
    t = 1_000_000_000

    def tls_flow(t, port, name, complete):
        """A new client flow (handshake done) that will send a ClientHello
        naming `name`: returns the flow, the record and the name's offset."""
        rec = client_hello(name)
        f = Flow(frames, port, 443)
        f.handshake(t)
        cases[name] = ("tls", complete)
        return f, rec, rec.index(name.encode())

    # 1. in order, the name across a segment boundary
    name = "inorder-secret-alpha.example.com"
    f, rec, p = tls_flow(t, 40001, name, True)
    for i, (off, ch) in enumerate(cuts(rec, [200, 400, p + 9])):
        f.data(t + 10 + i, off, ch)
    f.server_ack(t + 20, len(rec))

    # 2. out of order: 1, 3, 4, 2
    t += 100 * MS
    name = "outoforder-secret-bravo.example.net"
    f, rec, p = tls_flow(t, 40002, name, True)
    segs = cuts(rec, [250, p + 4, p + 20])
    for i, k in enumerate([0, 2, 3, 1]):
        f.data(t + 10 + i, *segs[k])

    # 3. duplicate and partly overlapping retransmissions while held
    t += 100 * MS
    name = "retrans-secret-charlie.example.org"
    f, rec, p = tls_flow(t, 40003, name, True)
    f.data(t + 10, 0, rec[:300])
    f.data(t + 11, 0, rec[:300])                       # duplicate
    f.data(t + 12, 200, rec[200:p + 6])                # overlaps the first, carries part of the name
    f.data(t + 13, p + 6, rec[p + 6:])

    # 4. a segment never comes: fail closed
    t += 100 * MS
    name = "gap-secret-delta.example.com"
    f, rec, p = tls_flow(t, 40004, name, False)
    f.data(t + 10, 0, rec[:p + 3])
    f.data(t + 11, p + 10, rec[p + 10:])               # the middle of the name is missing
    f.data(t + 12, len(rec), b"", L.ACK | L.FIN)

    # 5. retransmission after release: the copy cannot carry the name
    t += 100 * MS
    name = "late-secret-echo.example.com"
    f, rec, p = tls_flow(t, 40005, name, True)
    f.data(t + 10, 0, rec[:p + 5])
    f.data(t + 11, p + 5, rec[p + 5:])
    f.data(t + 200 * MS, p + 5, rec[p + 5:])           # retransmitted long after

    # 6. HTTP head in three segments, Host split; another flow in between
    t += 300 * MS
    host = "httpsplit-secret-foxtrot.example.com"
    req = http_request(host)
    hp = req.index(host.encode())
    f = Flow(frames, 40006, 80)
    f.handshake(t)
    f.data(t + 10, 0, req[:20])
    g = Flow(frames, 40016, 80)
    g.handshake(t + 11)
    g.data(t + 14, 0, http_request("other-secret-golf.example.com"))
    cases["other-secret-golf.example.com"] = ("http", True)
    f.data(t + 15, 20, req[20:hp + 7])
    f.data(t + 16, hp + 7, req[hp + 7:])
    cases[host] = ("http", True)

    # 7. DNS over TCP, the length prefix and the qname split
    t += 100 * MS
    q = "dnssplit-secret-hotel.example.com"
    msg = dns_tcp_query(q)
    f = Flow(frames, 40007, 53)
    f.handshake(t)
    f.data(t + 10, 0, msg[:1])
    f.data(t + 11, 1, msg[1:20])
    f.data(t + 12, 20, msg[20:])
    cases[q] = ("dns", True)

    # 8. the rest never comes and the flow goes quiet: held past the hold
    #    timeout (1 s of packet time), then released fail-closed
    t += 100 * MS
    name = "timeout-secret-india.example.com"
    f, rec, p = tls_flow(t, 40008, name, False)
    f.data(t + 10, 0, rec[:p + 8])
    g = Flow(frames, 40018, 80)
    g.handshake(t + 3000 * MS)

    # 9. the capture ends while a header is held: released fail-closed
    t += 4000 * MS
    name = "endofinput-secret-juliet.example.com"
    f, rec, p = tls_flow(t, 40009, name, False)
    f.data(t + 10, 0, rec[:p + 8])

    # 10. HTTP after a lost segment: a POST whose body loses a segment, then
    #     a request head. Counting the body's bytes would take the head for
    #     body; the direction waits for a segment that starts with a request
    #     line (40010: taken up again, its Host hidden) and cuts what does not
    #     (40011: the head starts inside the segment, after the body's tail).
    t += 100 * MS
    post = b"POST /upload HTTP/1.1\r\nHost: upload.example.com\r\nContent-Length: 600\r\n\r\n"
    for port, lead, host in ((40010, b"", "aftergap-secret-kilo.example.com"),
                             (40011, b"x" * 20, "midgap-secret-lima.example.com")):
        f = Flow(frames, port, 80)
        f.handshake(t)
        f.data(t + 10, 0, post + b"a" * 100)
        # the next 500 - len(lead) body bytes are lost
        f.data(t + 12, len(post) + 600 - len(lead), lead + http_request(host))
        gap_cases[host] = port
    t += 100 * MS

    frames.sort(key=lambda x: x[0])
    path = os.path.join(tmp, "split.pcap")
    L.write_pcap(path, frames)
    return path, cases, gap_cases


def labels(name):
    return [lab for lab in name.split(".") if len(lab) >= 5 and lab not in ("example",)]


def check_no_leak(path, cases, errors, what):
    data = open(path, "rb").read()
    for name in cases:
        for lab in labels(name):
            if lab.encode() in data:
                errors.append(f"{what}: label '{lab}' of {name} is in the output")


# tshark leaves out-of-order segments unreassembled unless asked.
OOO = ["-o", "tcp.reassemble_out_of_order:TRUE"]


def payload_lens(path):
    rows = L.tshark_fields(path, ["tcp.srcport", "tcp.dstport", "tcp.seq_raw", "tcp.len"], "tcp")
    return [(r[1][0], r[2][0], r[3][0], int(r[4][0])) for r in rows]


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    tmp = L.tmpdir("reasm-")
    errors = []
    inp, cases, gap_cases = build(tmp)
    hide = L.write_policy(tmp, "hide.amon",
                          "tls.sni : redact()\nhttp.host : redact()\ndns.qname, dns.answer.name, dns.rdata.name : redact()\n")
    keep = L.write_policy(tmp, "keep.amon", "tls.sni : keep()\nhttp.host : keep()\n")
    out_h, out_k = os.path.join(tmp, "hide.pcap"), os.path.join(tmp, "keep.pcap")
    stats = os.path.join(tmp, "stats.json")
    L.run_amon(amon, inp, [("hide", hide, out_h), ("keep", keep, out_k)], extra=["--stats-json", stats])

    # Nothing of a secret name, anywhere.
    check_no_leak(out_h, cases, errors, "hide")
    check_no_leak(out_h, gap_cases, errors, "hide (HTTP after a gap)")

    # keep(): the same records (holding may reorder, never change).
    _, rin = L.read_pcap(inp)
    _, rk = L.read_pcap(out_k)
    if sorted(r[3] for r in rin) != sorted(r[3] for r in rk):
        errors.append("keep: records differ from the input")

    # Completed headers arrive whole, with a hidden name of the same length.
    lin, lout = payload_lens(inp), payload_lens(out_h)
    if len(lin) != len(lout):
        errors.append(f"hide: {len(lin)} TCP packets in, {len(lout)} out")
    snis = [n for r in L.tshark_fields(out_h, ["tls.handshake.extensions_server_name"], "tls.handshake.type == 1", OOO)
            for n in r[1]]
    hosts = [n for r in L.tshark_fields(out_h, ["http.host"], "http.request", OOO) for n in r[1]]
    qnames = [n for r in L.tshark_fields(out_h, ["dns.qry.name"], "dns", OOO) for n in r[1]]
    got = {"tls": snis, "http": hosts, "dns": qnames}
    for name, (kind, complete) in cases.items():
        if not complete:
            continue
        same_len = [g for g in got[kind] if len(g) == len(name) and g != name]
        if not same_len:
            errors.append(f"hide: no reassembled {kind} header with a hidden name for {name} (tshark saw {got[kind]})")
    # The held segments of headers never completed left without payload:
    # a gap, a timeout, the end of input.
    for port in ("40004", "40008", "40009"):
        in_gap = [r for r in lin if r[0] == port and r[3] > 0]
        out_gap = [r for r in lout if r[0] == port and r[3] > 0]
        if not in_gap or out_gap:
            errors.append(f"hide: flow {port}: the incomplete hello's segments kept payload: {out_gap}")
    # After the gap: the head that starts its segment keeps its payload (the
    # parse took it up again), the one inside a segment leaves without.
    for host, port in gap_cases.items():
        segs = [r for r in lout if r[0] == str(port) and int(r[2]) != 1000 and r[3] > 0]
        want = 2 if port == 40010 else 1
        if len(segs) != want:
            errors.append(f"hide: flow {port} after a gap: {len(segs)} data segments with payload out, expected {want}")
    # The late retransmission (flow 40005, third data segment) left without payload.
    late_in = [r for r in lin if r[0] == "40005" and r[3] > 0]
    late_out = [r for r in lout if r[0] == "40005" and r[3] > 0]
    if len(late_in) != 3 or len(late_out) != 2:
        errors.append(f"hide: late retransmission: {len(late_in)} data segments in, {len(late_out)} with payload out")

    bad_in, bad_out = L.bad_frames(inp), L.bad_frames(out_h)
    if len(bad_out) > len(bad_in):
        errors.append(f"hide: malformed/expert-error frames {sorted(bad_out)} (input: {sorted(bad_in)})")
    for fr, (ip, tcp, udp) in L.checksum_status(out_h).items():
        if "Bad" in ip or "Bad" in tcp:
            errors.append(f"hide: frame {fr} has a bad checksum {ip} {tcp}")

    st = json.load(open(stats))
    ra = st.get("reassembly", {})
    complete = sum(1 for k, c in cases.values() if c)
    failed = sum(1 for k, c in cases.values() if not c)
    if ra.get("completed", 0) != complete - 1 or ra.get("failed", 0) != failed:
        # (the other-golf request comes in one segment and is never held)
        errors.append(f"stats: reassembly {ra} (expected {complete - 1} completed, {failed} failed)")
    hide_c = [c for c in st["consumers"] if c["name"] == "hide"][0]
    print(f"reassembly stats: {ra}; hide consumer l7_cut={hide_c.get('l7_cut')}")

    # A real capture: a ClientHello in 248-byte segments.
    d = os.environ.get("AMON_PCAPS_DIR")
    real = os.path.join(d, "tls-clienthello-fragmented-mtu300.pcap") if d else None
    if real and os.path.exists(real):
        out_r = os.path.join(tmp, "real.pcap")
        L.run_amon(amon, real, [("hide", hide, out_r)])
        names_in = {n for r in L.tshark_fields(real, ["tls.handshake.extensions_server_name"]) for n in r[1]}
        names_out = [n for r in L.tshark_fields(out_r, ["tls.handshake.extensions_server_name"]) for n in r[1]]
        if not names_in or len(names_out) != len(names_in) or set(names_out) & names_in:
            errors.append(f"real: SNI in {sorted(names_in)}, out {names_out}")
        # Only what the client sent: the server's certificate names the
        # server too, and no policy field covers it.
        _, recs = L.read_pcap(out_r)
        client = [r[3] for r in recs if len(r[3]) >= 34 and r[3][12:14] == b"\x08\x00" and r[3][47] & 0x02 == 0x02
                  and r[3][47] & 0x10 == 0]
        csrc = client[0][26:30] if client else None
        blob = b"".join(r[3] for r in recs if csrc and r[3][26:30] == csrc)
        for n in names_in:
            for lab in labels(n) + [x for x in n.split(".") if len(x) >= 4 and x != "www"]:
                if lab.encode() in blob:
                    errors.append(f"real: label '{lab}' of {n} in what the client sent")
    else:
        print("note: ../shared/pcaps not found; the real-capture case was not run")

    for e in errors:
        print("FAIL:", e)
    print(f"{len(cases)} crafted flows; {'FAILED' if errors else 'ok'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
