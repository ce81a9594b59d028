#!/usr/bin/env python3
"""A flood mixed into normal traffic, live: the consumers lose nothing and
the decisions stay safe.

In a network namespace this test makes: `amon run` with two workers reads
one end of a veth pair (net_af_packet, a kernel ring of 4096 frames);
tcpreplay sends a generated trace into the other end at a fixed rate that
one worker takes with a wide margin on a loaded two-core machine. Two
consumers write pcap files: `names` (Crypto-PAn clients, servers to their
/24, `dns.qname : zanon(z=10, dt=1h, fallback=sld)`) and `l2l4` (the same
addresses, payload cut). The flow table and the z-anonymity store are small,
so that the flood fills them within seconds. Traces (amon-gen):

- dns-rsub: normal DNS lookups, half of the packets a random-subdomain flood
  (a new 12-letter label under one domain per query, spoofed sources);
- syn: normal TCP connections, half of the packets SYNs from spoofed
  sources.

Asserted for each: nothing lost anywhere (kernel ring, dispatch, output
queues, tx; the veth dropped nothing; received = sent); each consumer wrote
every packet received, in input order, each record the input's packet at
its position (its transport ports, and for DNS its message id), so every
packet of the normal traffic is there; no random label of the flood appears
anywhere in an output, while the normal trace's most popular name (asked by
far more than z users) and the attacked domain's popular name are released;
the counters say a flood was absorbed (flow table full; for the names, the
store refused or evicted values), in telemetry while it runs and in the exit
report, and one rate-limited log line says so.

usage: live_flood.py AMON AMON_GEN [PPS [PACKETS]]   (default 3000 pps, 18000
packets a trace; prints the CPU amon used while the replay ran)
"""
import os
import re
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_lib import (Amon, Checks, Netns, Skip, Stop, cpu_seconds, finish, pcap_frames, workdir,  # noqa: E402
                      write_key_policy)

amon, amon_gen = sys.argv[1], sys.argv[2]
PPS = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
PACKETS = int(sys.argv[4]) if len(sys.argv) > 4 else 18000
FLOOD_DOMAIN = "victim-shop.com"
check = Checks()
work = workdir("flood")
cleanups = []
skipped = None


def dissect(frame):
    """(source address bytes, protocol, source port, destination port, L4 payload) or None."""
    off, etype = 14, struct.unpack("!H", frame[12:14])[0]
    while etype in (0x8100, 0x88a8) and len(frame) >= off + 4:
        etype = struct.unpack("!H", frame[off + 2:off + 4])[0]
        off += 4
    if etype == 0x0800 and len(frame) >= off + 20:
        proto, src = frame[off + 9], frame[off + 12:off + 16]
        off += (frame[off] & 15) * 4
    elif etype == 0x86DD and len(frame) >= off + 40:
        proto, src = frame[off + 6], frame[off + 8:off + 24]
        off += 40
    else:
        return None
    if proto not in (6, 17) or len(frame) < off + 4:
        return (src, proto, 0, 0, b"")
    sport, dport = struct.unpack("!HH", frame[off:off + 4])
    hl = 8 if proto == 17 else (frame[off + 12] >> 4) * 4 if len(frame) > off + 12 else 20
    return (src, proto, sport, dport, frame[off + hl:])


def dns_query(payload):
    """(message id, is a response, query name) of a DNS message, or None."""
    if len(payload) < 13:
        return None
    mid, flags = struct.unpack("!HH", payload[:4])
    labels, i = [], 12
    while i < len(payload) and payload[i] and payload[i] < 64:
        labels.append(payload[i + 1:i + 1 + payload[i]].decode("latin-1"))
        i += 1 + payload[i]
    return mid, bool(flags & 0x8000), ".".join(labels).lower()


def key(frame, with_dns):
    d = dissect(frame)
    if d is None:
        return None
    k = (d[1], d[2], d[3])
    if with_dns and d[1] == 17 and 53 in (d[2], d[3]):
        q = dns_query(d[4])
        k += (q[0], q[1]) if q else ()
    return k


def scenario(ns, kind, normal):
    """One live run of a trace with the `kind` flood mixed into `normal` traffic."""
    trace = os.path.join(work, kind + ".pcap")
    subprocess.run([amon_gen, "--quiet", "--out", trace, "--seed", "7", "--only", normal, "--names", "300",
                    "--clients", "500", "--flood", kind, "--flood-share", "0.5", "--packets", str(PACKETS),
                    "--rate", "2000"], check=True)
    frames = pcap_frames(trace)
    flood_labels, users = set(), {}
    for f in frames:
        d = dissect(f)
        q = dns_query(d[4]) if d and d[1] == 17 and d[3] == 53 else None
        if not q:
            continue
        if q[2].endswith("." + FLOOD_DOMAIN) and q[2] != "www." + FLOOD_DOMAIN:
            flood_labels.add(q[2].split(".")[0].encode())
        else:
            users.setdefault(q[2], set()).add(d[0])
    popular = max(users, key=lambda n: len(users[n])) if users else None
    if kind == "dns-rsub":
        check(len(flood_labels) > PACKETS // 4 and popular and len(users[popular]) >= 30,
              "%s: the trace has %d flood labels, its most popular name %d users" %
              (kind, len(flood_labels), len(users.get(popular, ()))))

    out = {c: os.path.join(work, "%s-%s.pcap" % (kind, c)) for c in ("names", "l2l4")}
    for p in list(out.values()) + [os.path.join(work, "stats.json")]:
        if os.path.exists(p):
            os.unlink(p)
    a = Amon(amon, ns, work,
             "workers: 2\n"
             "inputs:\n  - port: net_af_packet0,iface=amon_rx0,framecnt=4096\n"
             "consumers:\n"
             "  - { name: names, policy: names.amon, output: { pcap: %s } }\n"
             "  - { name: l2l4, policy: l2l4.amon, output: { pcap: %s } }\n"
             "flows: { max_per_worker: 1024 }\n"
             "zanon: { max_values: 2048 }\n" % (out["names"], out["l2l4"]),
             "amonflood%d" % os.getpid())
    cleanups.insert(0, a.kill)
    if not check(a.wait_started(), "%s: amon did not start: %s" % (kind, a.log()[-2000:])):
        raise Stop
    c0, t0 = cpu_seconds(a.proc.pid), time.time()
    sent = ns.replay("amon_tx0", trace, "--pps=%d" % PPS)
    c1, t1 = cpu_seconds(a.proc.pid), time.time()
    for _ in range(50):  # what is still in the kernel ring or a worker
        tel = a.telemetry("/amon/stats")
        if tel and tel.get("rx", 0) >= sent:
            break
        time.sleep(0.1)
    # While it runs, telemetry shows the pressure an operator would look for.
    tel_flows, tel_z = a.telemetry("/amon/flows"), a.telemetry("/amon/zanon")
    check(tel_flows and tel_flows.get("table_full", 0) > 0, "%s: /amon/flows: %s" % (kind, tel_flows))
    if kind == "dns-rsub":
        check(tel_z and tel_z.get("refused", 0) + tel_z.get("evictions", 0) > 0, "%s: /amon/zanon: %s" % (kind, tel_z))
    rc = a.stop()
    a.kill()
    cleanups.remove(a.kill)
    st = a.report()
    loss = st["loss"]
    # Below the socket: what the sending end could not pass on (the other
    # end's own drops are the stack's, after the tap, of frames it has no
    # handler for: QinQ-tagged ones).
    veth = ns.link_drops("amon_tx0")
    print("%s: %d packets at %d pps in %.1f s, amon CPU %.2f s (%.0f%% of one core), rx %d, lost %d %s" %
          (kind, sent, PPS, t1 - t0, c1 - c0, 100 * (c1 - c0) / (t1 - t0), st["rx"], loss["lost"],
           {k: loss[k] for k in ("kernel_ring", "dispatch", "output_queues", "tx")}), flush=True)
    check(rc == 0, "%s: exit status %s: %s" % (kind, rc, a.log()[-1500:]))
    check(sent == len(frames), "%s: tcpreplay sent %d of %d" % (kind, sent, len(frames)))
    check(veth == 0, "%s: the veth pair dropped %d" % (kind, veth))
    check(st["rx"] == sent and st["rx_dispatch_drops"] == 0 and loss["lost"] == 0 and
          all(loss[k] == 0 for k in ("kernel_ring", "nic_missed", "no_mbuf", "dispatch", "output_queues", "tx")),
          "%s: sent %d, received %d, loss %s" % (kind, sent, st["rx"], loss))
    check("amon: lost" not in a.log(), "%s: loss line at exit: %s" % (kind, a.log()[-1500:]))

    for c in st["consumers"]:
        name = c["name"]
        check(c["in"] == st["rx"] and c["written"] == st["rx"] and c["queue_dropped"] == 0 and
              c["tx_dropped"] == 0 and c["out_of_order"] == 0,
              "%s/%s: rx %d, in %d, written %d, queue_dropped %d, tx_dropped %d, out_of_order %d" %
              (kind, name, st["rx"], c["in"], c["written"], c["queue_dropped"], c["tx_dropped"], c["out_of_order"]))
        got = pcap_frames(out[name])
        # The records in input order: each the input's packet at its position.
        with_dns = name == "names"
        bad = [i for i in range(min(len(got), len(frames))) if key(got[i], with_dns) != key(frames[i], with_dns)]
        check(len(got) == len(frames) and not bad,
              "%s/%s: %d records for %d packets; %d differ in ports or DNS id (first at %s)" %
              (kind, name, len(got), len(frames), len(bad), bad[:1]))
        blob = b"".join(got)
        leaked = flood_labels & set(m.group(1) for m in re.finditer(rb"(?=([a-z]{12}))", blob))
        check(not leaked, "%s/%s: %d random flood labels in clear, e.g. %s" % (kind, name, len(leaked),
                                                                              sorted(leaked)[:3]))
        if with_dns and kind == "dns-rsub":
            names = set()
            for g in got:
                d = dissect(g)
                q = dns_query(d[4]) if d and d[1] == 17 and 53 in (d[2], d[3]) else None
                if q:
                    names.add(q[2])
            check(popular in names and "www." + FLOOD_DOMAIN in names,
                  "%s/%s: popular names not released: %s %s" % (kind, name, popular, "www." + FLOOD_DOMAIN))

    fl, z = st["flows"], st.get("zanon", {})
    check(fl["table_full"] > 0, "%s: the flow table was never full: %s" % (kind, fl))
    if kind == "dns-rsub":
        check(z.get("refused", 0) + z.get("evictions", 0) > 0, "%s: the z-store refused nothing: %s" % (kind, z))
    lines = [ln for ln in a.log().splitlines() if "absorbing a flood" in ln]
    check(len(lines) == 1, "%s: %d 'absorbing a flood' lines (one a minute): %s" % (kind, len(lines), lines))
    print("%s: flows %s; z-store refused %s, evictions %s; %s" %
          (kind, {k: fl[k] for k in ("created", "table_full", "evicted", "evicted_answered")}, z.get("refused"),
           z.get("evictions"), lines[0] if lines else "no pressure line"), flush=True)


try:
    write_key_policy(work, "ip.client : cryptopan(key=k)\nip.server : prefix(24, v6=48)\n"
                           "dns.qname : zanon(z=10, dt=1h, fallback=sld)\n")
    os.rename(os.path.join(work, "p.amon"), os.path.join(work, "names.amon"))
    with open(os.path.join(work, "l2l4.amon"), "w") as f:
        f.write('key k = file("k.key")\nip.client : cryptopan(key=k)\nip.server : prefix(24, v6=48)\n'
                "payload : cut()\n")
    ns = Netns("flood")
    cleanups.append(ns.remove)
    scenario(ns, "dns-rsub", "dns")
    scenario(ns, "syn", "tcp")
except Stop:
    pass
except Skip as e:
    skipped = str(e)
finish(check, work, cleanups, skipped)
