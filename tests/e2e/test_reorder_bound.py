#!/usr/bin/env python3
"""End to end: the reorder buffer's bound in records.

A crafted capture: an HTTP request whose head is split over two TCP
segments, so that the engine holds the first until the second comes, with N
packets of other flows in between. Each output's reorder buffer keeps the
records after the held one until it leaves (reassembly.reorder_records,
here 64, of which a reader's look-ahead of 32 records is kept free). Within
the bound (N = 20) every output is in input time order,
counts nothing out_of_order and warns of nothing. Past it (N = 300) the
oldest records leave anyway: every record is still written (the same
records as with the default bound, none lost), the ones that go back in
time are the held flow's alone (the records that left the buffer stay in
order), the exit report counts them (`out_of_order`) and a warning names
the output. With 1 and 2 workers.

usage: test_reorder_bound.py AMON"""

import collections
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

MS = 1_000_000
CLIENT, SERVER, CPORT = "10.1.0.9", "192.0.2.81", 41001
HEAD = (b"GET /account HTTP/1.1\r\nHost: www.example.org\r\nUser-Agent: bound-test/1.0\r\n"
        b"Cookie: session=bound-secret\r\nAccept: */*\r\n\r\n")
SPLIT = 30  # inside the Host line


def capture(path, n):
    """The held flow's handshake, the head's first part, n other packets,
    the head's rest; one millisecond apart."""
    fs = [L.tcp4_frame(CLIENT, SERVER, CPORT, 80, 1000, 0, L.SYN),
          L.tcp4_frame(SERVER, CLIENT, 80, CPORT, 5000, 1001, L.SYN | L.ACK),
          L.tcp4_frame(CLIENT, SERVER, CPORT, 80, 1001, 5001, L.ACK),
          L.tcp4_frame(CLIENT, SERVER, CPORT, 80, 1001, 5001, L.ACK | L.PSH, HEAD[:SPLIT])]
    for i in range(n):
        fs.append(L.udp4_frame("10.2.%d.%d" % (i // 200, i % 200 + 1), "198.51.100.%d" % (i % 250 + 1),
                               50000 + i, 9999, b"filler %05d" % i))
    fs.append(L.tcp4_frame(CLIENT, SERVER, CPORT, 80, 1001 + SPLIT, 5001, L.ACK | L.PSH, HEAD[SPLIT:]))
    fs.append(L.tcp4_frame(SERVER, CLIENT, 80, CPORT, 5001, 1001 + len(HEAD), L.ACK))
    L.write_pcap(path, [(1_000_000_000 + i * MS, f) for i, f in enumerate(fs)])
    return len(fs)


def held_flow(frame):
    """A record of the flow whose head is held (its client port, either way)."""
    return len(frame) >= 38 and frame[23] == 6 and CPORT in (int.from_bytes(frame[34:36], "big"),
                                                            int.from_bytes(frame[36:38], "big"))


def run(amon, work, inp, policy, tag, workers, records):
    out, stats, cfg = (os.path.join(work, f"{tag}.{x}") for x in ("pcap", "json", "yaml"))
    with open(cfg, "w") as f:
        f.write(f"workers: {workers}\ninputs:\n  - pcap: {inp}\n")
        if records is not None:
            f.write(f"reassembly: {{ reorder_records: {records} }}\n")
        f.write(f"consumers:\n  - {{ name: web, policy: {policy}, output: {{ pcap: {out} }} }}\n")
    r, j = L.run_config(amon, cfg, stats, timeout=120)
    counted = {c["name"]: c.get("out_of_order") for c in j["consumers"]}["web"]
    held = j.get("reassembly", {}).get("segments", 0)
    warned = "consumer 'web'" in r.stderr and "records written after" in r.stderr
    return L.read_pcap(out)[1], counted, held, warned


def late_records(recs):
    """The records older than one written before them."""
    late, top = [], None
    for r in recs:
        if top is not None and r[0] < top:
            late.append(r)
        else:
            top = r[0]
    return late


def main():
    amon = os.path.abspath(L.tool_paths(sys.argv))
    work = L.tmpdir("bound-")
    L.make_key(work)
    policy = L.write_policy(work, "web.amon", 'key k = file("keys/k.hex")\n'
                            "clients = { 10.0.0.0/8 }\n"
                            "ip.client : cryptopan(key=k)\n"
                            "http.host : hash(key=k)\n"
                            "http.cookie, http.user_agent : redact()\n")
    os.chdir(work)
    fails = []
    for n, past in ((20, False), (300, True)):
        inp = os.path.join(work, f"split-{n}.pcap")
        packets = capture(inp, n)
        for workers in (1, 2):
            where = f"{n} packets during the hold, {workers} worker(s)"
            ref, ref_counted, _, _ = run(amon, work, inp, policy, f"n{n}.w{workers}.default", workers, None)
            recs, counted, held, warned = run(amon, work, inp, policy, f"n{n}.w{workers}.64", workers, 64)
            late = late_records(recs)
            print(f"{where}: {len(recs)} of {packets} records, {len(late)} back in time, out_of_order={counted}, "
                  f"segments held {held}, warned {warned}")
            if not held:
                fails.append(f"{where}: nothing held; the capture no longer tests the bound")
            if ref_counted or late_records(ref):
                fails.append(f"{where}, default bound: out_of_order={ref_counted}, "
                             f"{len(late_records(ref))} records back in time")
            if len(recs) != packets or collections.Counter(recs) != collections.Counter(ref):
                fails.append(f"{where}: {len(recs)} records for {packets} packets, "
                             "not the records written with the default bound")
            if any(b"bound-secret" in r[3] for r in recs):
                fails.append(f"{where}: the Cookie left")
            if not past:
                if late or counted or warned:
                    fails.append(f"{where}: within the bound, {len(late)} records back in time, "
                                 f"out_of_order={counted}, warning {warned}")
                continue
            if not late:
                fails.append(f"{where}: past the bound, no record went back in time; the bound is not tested")
            if any(not held_flow(r[3]) for r in late):
                fails.append(f"{where}: records of other flows went back in time")
            if counted is None or counted < len(late) or not warned:
                fails.append(f"{where}: {len(late)} records back in time, out_of_order={counted}, warning {warned}")
    sys.exit(L.report(fails, "past the reorder bound held records leave late, all written, counted and warned of"))


if __name__ == "__main__":
    main()
