#!/usr/bin/env python3
"""HTTP bodies (`http.body`) and `snap()`: no body byte reaches the consumer
and no length changes.

    test_http_body.py crafted AMON            pipelined, chunked, multi-segment and until-close bodies
    test_http_body.py gen AMON AMON_GEN RULES amon-gen HTTP traffic through the shipped meter policy
    test_http_body.py real AMON RULES         the shipped meter policy on the real captures with HTTP

Each output is checked against its input with tshark and our own pcap
reader: the same records with the same original lengths and the same
IPv4 total / IPv6 payload lengths, no HTTP body left (tshark http.file_data
empty, or zeros for zero()), no window of an original body anywhere in the
output's bytes, and the heads the policy keeps still there.
"""

import os
import random
import shutil
import struct
import subprocess
import sys

# e2e_lib: the end-to-end tests' shared pcap reader, tshark calls and work files.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e"))
import e2e_lib as L  # noqa: E402

FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL: " + msg)


def lengths(path):
    """Multiset of (time, original length, IPv4 total lengths, IPv6 payload
    lengths) per IP record: the output may order held segments differently;
    lengths per IP record (frame.len is the record's original length). Frames
    without IP (ARP, also inside a tunnel) are on_unknown's business, not
    this test's."""
    rows = L.tshark_fields(path, ["frame.time_epoch", "frame.len", "ip.len", "ipv6.plen", "frame.protocols"])
    return sorted((r[1][0] if r[1] else "", r[2][0] if r[2] else "", tuple(r[3]), tuple(r[4]))
                  for r in rows if (r[3] or r[4]) and ":arp" not in "".join(r[5]))


def file_data(path):
    rows = L.tshark_fields(path, ["http.file_data"], "http")
    return [v for r in rows for v in r[1]]


def windows(bodies, n=24, limit=3000, seed=1):
    """Distinctive windows of the original bodies (printable, varied)."""
    rnd = random.Random(seed)
    out = set()
    for b in bodies:
        if "\ufffd" in b or len(b) < n:
            continue
        for _ in range(min(8, len(b) // n)):
            i = rnd.randrange(0, len(b) - n + 1)
            w = b[i:i + n]
            if len(set(w)) >= 8 and "\\" not in w:
                out.add(w.encode("utf-8", "surrogateescape"))
    out = sorted(out)
    rnd.shuffle(out)
    return out[:limit]


def same_lengths(inp, out, what):
    a, b = lengths(inp), lengths(out)
    check(len(a) == len(b), f"{what}: {len(b)} IP records out of {len(a)}")
    # A record snapped inside a header (on_error = snap) shows fewer layers,
    # tshark may show more of a fragment it reassembled: the lengths both
    # show are the same.
    def same(x, y):
        n4, n6 = min(len(x[2]), len(y[2])), min(len(x[3]), len(y[3]))
        return x[:2] == y[:2] and x[2][:n4] == y[2][:n4] and x[3][:n6] == y[3][:n6] and (n4 or n6)
    diff = [(x, y) for x, y in zip(a, b) if not same(x, y)]
    check(not diff, f"{what}: {len(diff)} records with other lengths, first {diff[:1]}")


def no_body(inp, out, what, zeros_ok=False):
    bodies = file_data(inp)
    left = file_data(out)
    if zeros_ok:
        left = [v for v in left if v.strip("\\0").strip("\x00")]
    check(not left, f"{what}: http.file_data left in {len(left)} messages, first {left[:1]!r:.120}")
    with open(out, "rb") as f:
        data = f.read()
    ws = windows(bodies)
    found = [w for w in ws if w in data]
    check(not found, f"{what}: {len(found)} of {len(ws)} body windows in the output, first {found[:1]!r}")
    return len(bodies), len(ws)


# ---------------------------------------------------------------- crafted

def tcp_frames(client, server, cport, sport, segs, t0):
    """segs: [(from_client, payload)]: a TCP flow with these segments, then
    FINs. Sequence numbers follow the bytes; every checksum is right."""
    ms = 1_000_000
    cs, ss = 1000, 5000
    out = [(t0, L.tcp4_frame(client, server, cport, sport, cs, 0, L.SYN)),
           (t0 + ms, L.tcp4_frame(server, client, sport, cport, ss, cs + 1, L.SYN | L.ACK)),
           (t0 + 2 * ms, L.tcp4_frame(client, server, cport, sport, cs + 1, ss + 1, L.ACK))]
    cs, ss = cs + 1, ss + 1
    t = t0 + 3 * ms
    for from_client, p in segs:
        if from_client:
            out.append((t, L.tcp4_frame(client, server, cport, sport, cs, ss, L.ACK | L.PSH, p)))
            cs += len(p)
        else:
            out.append((t, L.tcp4_frame(server, client, sport, cport, ss, cs, L.ACK | L.PSH, p)))
            ss += len(p)
        t += ms
    out.append((t, L.tcp4_frame(server, client, sport, cport, ss, cs, L.ACK | L.FIN)))
    out.append((t + ms, L.tcp4_frame(client, server, cport, sport, cs, ss + 1, L.ACK | L.FIN)))
    return out


def secret(tag, n):
    s = (f"SECRET-{tag}-" * (n // 8 + 2)).encode()
    return s[:n]


def crafted_flows():
    heads = []

    def h(s):
        heads.append(s.encode())
        return s.encode()

    post = secret("POST", 40)
    b30, c16, c8 = secret("CL30", 30), secret("CHUNK16", 16), secret("CHUNK8", 8)
    big = secret("MULTI", 3000)
    segs = [
        # Pipelined requests, the last with a body split over two segments.
        (True, h("GET /a HTTP/1.1\r\nHost: a.example\r\n\r\n") + h("GET /b HTTP/1.1\r\nHost: a.example\r\n\r\n") +
         h("POST /c HTTP/1.1\r\nHost: a.example\r\nContent-Length: 40\r\n\r\n") + post[:20]),
        (True, post[20:]),
        # A Content-Length body, then a chunked response's head and first
        # chunk in the same segment; its next chunks and the last chunk in
        # the next one.
        (False, h("HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n") + b30 +
         h("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n") + b"10\r\n" + c16 + b"\r\n"),
        (False, b"8\r\n" + c8 + b"\r\n0\r\n\r\n"),
        # A body over three segments.
        (False, h("HTTP/1.1 200 OK\r\nContent-Length: 3000\r\n\r\n") + big[:500]),
        (False, big[500:1900]),
        (False, big[1900:]),
    ]
    t0 = 1_700_000_000 * 1_000_000_000
    frames = tcp_frames("10.1.0.1", "192.0.2.80", 40000, 80, segs, t0)
    # HTTP/1.0 without a length: the body runs until the connection closes.
    until = secret("UNTIL", 2000)
    segs2 = [(True, h("GET /d HTTP/1.0\r\nHost: b.example\r\n\r\n")),
             (False, h("HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n") + until[:1000]),
             (False, until[1000:])]
    frames += tcp_frames("10.1.0.2", "192.0.2.81", 40001, 80, segs2, t0 + 100_000_000)
    return [(t, f) for t, f in frames], heads


def crafted(amon):
    L.need_tshark()
    d = L.tmpdir("http_body_")
    frames, heads = crafted_flows()
    inp = os.path.join(d, "in.pcap")
    L.write_pcap(inp, frames)
    for action in ("zero()", "snap()"):
        pol = L.write_policy(d, "p.amon", f"http.body : {action}\n")
        out = os.path.join(d, "out.pcap")
        L.run_amon(amon, inp, [("c", pol, out)])
        what = f"crafted http.body : {action}"
        same_lengths(inp, out, what)
        _, recs = L.read_pcap(out)
        data = b"".join(r[3] for r in recs)
        check(b"SECRET" not in data, f"{what}: a body byte left")
        for hd in heads:
            check(hd in data, f"{what}: head {hd[:40]!r} changed")
        snapped = sum(1 for r in recs if r[1] < r[2])
        if action == "zero()":
            check(snapped == 0, f"{what}: {snapped} records shortened")
            full = [r[3] for r in recs]
            check(all(L.ipv4_checksums_ok(f) for f in full), f"{what}: a wrong IPv4 or TCP checksum")
            check(not L.bad_frames(out) - L.bad_frames(inp), f"{what}: tshark flags frames the input did not have")
        else:
            # Every segment that holds body bytes up to its end is snapped.
            check(snapped >= 7, f"{what}: {snapped} records snapped, expected at least 7")
    return d


# ---------------------------------------------------------------- meter

def meter_policy(d, rules):
    L.make_key(d, "meter")
    with open(os.path.join(rules, "meter.amon")) as f:
        text = f.read().replace('file("keys/meter.key")', 'file("keys/meter.hex")')
    return L.write_policy(d, "meter.amon", text)


def gen(amon, amon_gen, rules):
    L.need_tshark()
    d = L.tmpdir("http_body_gen_")
    pol = meter_policy(d, rules)
    inp = os.path.join(d, "gen.pcap")
    subprocess.run([amon_gen, "--out", inp, "--seed", "11", "--packets", "6000", "--bulk", "0.05", "--quiet"],
                   check=True, timeout=120)
    out = os.path.join(d, "out.pcap")
    L.run_amon(amon, inp, [("m", pol, out)])
    same_lengths(inp, out, "amon-gen meter")
    n, w = no_body(inp, out, "amon-gen meter")
    check(n >= 10, f"amon-gen: only {n} HTTP bodies in the input")
    print(f"amon-gen: {n} bodies, {w} windows checked")


REAL = ["mixed-browsing-example", "http-requests-4k", "http-ipv6-1000-requests", "tunnel-vxlan-http",
        "ipv6-ext-headers-http", "http-ipv4-fragmented-request", "http-many-user-agents", "tunnel-erspan",
        "tunnel-6in4"]


def real(amon, rules):
    L.need_tshark()
    pdir = L.pcaps_dir()
    d = L.tmpdir("http_body_real_")
    pol = meter_policy(d, rules)
    ran = 0
    for name in REAL:
        inp = os.path.join(pdir, name + ".pcap")
        if not os.path.exists(inp):
            continue
        out = os.path.join(d, name + ".out.pcap")
        L.run_amon(amon, inp, [("m", pol, out)])
        same_lengths(inp, out, name)
        n, w = no_body(inp, out, name)
        print(f"{name}: {n} bodies, {w} windows checked")
        ran += 1
    if not ran:
        L.skip("none of the HTTP captures is there")


def main():
    what = sys.argv[1]
    if what == "crafted":
        crafted(sys.argv[2])
    elif what == "gen":
        gen(sys.argv[2], sys.argv[3], sys.argv[4])
    elif what == "real":
        real(sys.argv[2], sys.argv[3])
    else:
        sys.exit(2)
    if FAILS:
        print(f"{len(FAILS)} checks failed")
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
