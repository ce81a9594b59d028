#!/usr/bin/env python3
"""Several workers write every output in input time order.

Each worker takes its flows' packets; the outputs are merged by the input
order before they are written. On real captures and on a generated mix
(many flows interleaved, so every burst of one worker overlaps the other's
in time), with 2 and 3 workers: the same records as with one worker, and
no record goes back in time where one worker's output does not either;
live (`amon run` on a port), no record goes back in time.
A packet a worker holds (TCP segments until a split message head is whole,
IP fragments until their datagram is) leaves late, but each output's reorder
buffer keeps the records of later packets until it came: on captures with
held packets, every output is in input time order with 1 and 2 workers, and
counts nothing out of order. Past the buffer's bounds (no buffer, or a
window of capture time shorter than the holds, set in a configuration) held
records leave late again: the exit report counts those records per output
(`out_of_order`, at least every record that goes back in time) and a warning
names the output; an output in order counts none and warns of nothing.
Where one worker's output is in time order (nothing held back), the merged
output is that very record sequence. The policies name the client networks:
roles learnt from traffic are a worker's own, which is not what is tested
here.

usage: test_time_order.py AMON AMON-GEN"""

import collections
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import e2e_lib as L

CAPTURES = ["mixed-browsing-example.pcap", "mixed-capture2.pcap", "http-requests-4k.pcap",
            "dns-udp-many-queries.pcap"]

CLIENTS = "clients = { 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7, 2001:db8::/32 }\n"


def back_in_time(recs):
    return sum(1 for a, b in zip(recs, recs[1:]) if b[0] < a[0])


def behind(recs):
    """Records older than one written before them."""
    n, top = 0, None
    for r in recs:
        if top is not None and r[0] < top:
            n += 1
        else:
            top = r[0]
    return n


# Captures whose packets are held (split HTTP heads; IPv4 datagrams in
# fragments, interleaved with other packets).
HELD = ["http-requests-4k.pcap", "ipv4-fragments.pcap"]


def held_count(stats):
    with open(stats) as f:
        j = json.load(f)
    return j.get("reassembly", {}).get("segments", 0) + j.get("outer_fragments", {}).get("fragments", 0)


def run_counted(amon, inp, work, tag, named, plain, workers, bounds):
    """Runs both consumers (bounds: a `reassembly` YAML mapping, or None for
    `amon pcap`'s defaults); returns {consumer: (records, late, counted,
    warned)} and the packets held."""
    outs = {p: os.path.join(work, f"{tag}.{p}.pcap") for p in ("named", "plain")}
    stats = os.path.join(work, f"{tag}.json")
    if bounds is None:
        r = L.run_amon(amon, inp, [(p, pol, outs[p]) for p, pol in (("named", named), ("plain", plain))],
                       workers=workers, extra=["--stats-json", stats])
        with open(stats) as f:
            j = json.load(f)
    else:
        cfg = os.path.join(work, f"{tag}.yaml")
        with open(cfg, "w") as f:
            f.write(f"workers: {workers}\ninputs:\n  - pcap: {inp}\nreassembly: {bounds}\nconsumers:\n")
            for p, pol in (("named", named), ("plain", plain)):
                f.write(f"  - {{ name: {p}, policy: {pol}, output: {{ pcap: {outs[p]} }} }}\n")
        r, j = L.run_config(amon, cfg, stats)
    counted = {c["name"]: c.get("out_of_order") for c in j["consumers"]}
    res = {}
    for p in ("named", "plain"):
        recs = L.read_pcap(outs[p])[1]
        warned = f"consumer '{p}'" in r.stderr and "records written after" in r.stderr
        res[p] = (recs, behind(recs), counted.get(p), warned)
    return res, held_count(stats)


def check_counted(amon, pdir, work, named, plain, fails):
    for cap in HELD + ["dns-udp-many-queries.pcap"]:
        inp = os.path.join(pdir, cap)
        if not os.path.exists(inp):
            L.skip(f"{inp} missing")
        # Default bounds, then none (held records leave when released), then
        # a window of capture time shorter than the holds.
        runs = [(w, None) for w in (1, 2)]
        if cap in HELD:
            runs += [(1, "{ reorder_records: 0 }"), (1, "{ reorder_window: 1ms }")]
        for workers, bounds in runs:
            tag = f"{cap}.w{workers}.{'default' if bounds is None else bounds.split(':')[0].strip('{ ')}"
            res, held = run_counted(amon, inp, work, tag, named, plain, workers, bounds)
            late_total = 0
            for p, (recs, late, got, warned) in res.items():
                where = f"{cap} {p}, {workers} worker(s), bounds {bounds or 'default'}"
                late_total += late
                if got is None:
                    fails.append(f"{where}: no out_of_order in the stats JSON ({late} records go back in time)")
                    continue
                if got < late or got > len(recs):
                    fails.append(f"{where}: out_of_order={got}, but {late} of {len(recs)} records go back in time")
                if bounds is None and (late or got):
                    fails.append(f"{where}: {late} records go back in time (out_of_order={got}): "
                                 "held packets must leave in input time order")
                if bool(got) != warned:
                    fails.append(f"{where}: out_of_order={got} but warning {'given' if warned else 'missing'}")
                print(f"{where}: {late} records back in time, out_of_order={got}, packets held {held}")
            if cap in HELD and not held:
                fails.append(f"{cap}, {workers} worker(s): nothing held any more; the capture no longer tests this")
            if cap in HELD and bounds is not None and "records" in bounds and not late_total:
                fails.append(f"{cap}, bounds {bounds}: no record went back in time; the bound is not tested")


def main():
    amon = os.path.abspath(L.tool_paths(sys.argv))
    gen = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else None
    pdir = L.pcaps_dir()
    work = L.tmpdir("order-")
    L.make_key(work)
    named = L.write_policy(work, "named.amon",
                           'key k = file("keys/k.hex")\n'
                           + CLIENTS +
                           "ip.client : cryptopan(key=k)\n"
                           "tls.sni, http.host, dns.qname : hash(key=k)\n"
                           "http.user_agent, http.cookie : redact()\n"
                           # Each worker remembers the values it rewrote: which
                           # copies in kept payload are found depends on the
                           # worker that saw the value, so the records compared
                           # across worker counts leave that search out.
                           "echoes = keep\n")
    plain = L.write_policy(work, "plain.amon",
                           'key k = file("keys/k.hex")\n'
                           + CLIENTS +
                           "ip.client : cryptopan(key=k)\n")
    os.chdir(work)
    inputs = [os.path.join(pdir, c) for c in CAPTURES]
    for i in inputs:
        if not os.path.exists(i):
            L.skip(f"{i} missing")
    if gen:
        mix = os.path.join(work, "mix.pcap")
        subprocess.run([gen, "--packets", "30000", "--out", mix], check=True, capture_output=True)
        inputs.append(mix)
    fails = []
    check_counted(amon, pdir, work, named, plain, fails)
    for inp in inputs:
        name = os.path.basename(inp)
        outs = {}
        for workers in (1, 2, 3):
            o1, o2 = (os.path.join(work, f"{name}.{p}.w{workers}.pcap") for p in ("named", "plain"))
            L.run_amon(amon, inp, [("named", named, o1), ("plain", plain, o2)], workers=workers)
            outs[workers] = (L.read_pcap(o1)[1], L.read_pcap(o2)[1])
        ref_named, ref_plain = outs[1]
        if not ref_plain:
            fails.append(f"{name}: no output")
            continue
        for workers in (2, 3):
            got_named, got_plain = outs[workers]
            for label, ref, got in (("named", ref_named, got_named), ("plain", ref_plain, got_plain)):
                if collections.Counter(got) != collections.Counter(ref):
                    fails.append(f"{name} {label}, {workers} workers: other records than with one worker")
                back, back1 = back_in_time(got), back_in_time(ref)
                if back > back1:
                    fails.append(f"{name} {label}, {workers} workers: {back} records go back in time "
                                 f"(one worker: {back1})")
            # One worker's output in time order (nothing held back): the
            # merged output is that very sequence.
            if back_in_time(ref_plain) == 0 and got_plain != ref_plain:
                fails.append(f"{name} plain, {workers} workers: not the record sequence of one worker")
        print(f"{name}: {len(ref_plain)} records, back in time with 1 worker: "
              f"{back_in_time(ref_named)} (named), {back_in_time(ref_plain)} (plain)")
    # Live: a port (DPDK's pcap vdev reading the mix) stamped at arrival;
    # the dispatcher may drop what the workers cannot take, so only the
    # order is checked.
    if gen:
        with open(os.path.join(work, "live.yaml"), "w") as f:
            f.write("workers: 2\ninputs:\n  - port: net_pcap0,rx_pcap=%s\n"
                    "consumers:\n  - { name: c, policy: %s, output: { pcap: %s } }\n"
                    % (mix, named, os.path.join(work, "live.pcap")))
        r = subprocess.run([amon, "run", "--config", os.path.join(work, "live.yaml"), "--until-idle=1s", "--quiet",
                            "--", "--file-prefix=amonorder%d" % os.getpid()],
                           capture_output=True, text=True, timeout=120)
        recs = L.read_pcap(os.path.join(work, "live.pcap"))[1] if r.returncode == 0 else []
        if r.returncode != 0 or not recs:
            fails.append(f"amon run, 2 workers: exit {r.returncode}, {len(recs)} records\n{r.stderr[-2000:]}")
        elif back_in_time(recs):
            fails.append(f"amon run, 2 workers: {back_in_time(recs)} of {len(recs)} records go back in time")
        print(f"amon run, 2 workers: {len(recs)} records")
    sys.exit(L.report(fails, "every output in input time order with 2 and 3 workers"))


if __name__ == "__main__":
    main()
