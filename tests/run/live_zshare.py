#!/usr/bin/env python3
"""Two live `amon run` boxes share one z-anonymity view through a local
nats-server -js.

In a network namespace this test makes: two veth pairs, and nats-server
with JetStream on the namespace's loopback (its store in the test's
folder). The flows of test_zanon_share's trace (clients in 10.0.0.0/8,
`ip.server : zanon(z=3, dt=1h, fallback=prefix(24))`) are split by client
over the two boxes; box A reads amon_rx0, box B amon_rx1 (net_af_packet),
tcpreplay sends each its share. Arrival time is the live clock, so the
trace is sent twice: after the first pass and the sync, every observation
is within dt, and one box fed with both shares releases a server's flows in
the second pass exactly when the trace has at least z distinct clients of
it. Asserted: every second-pass decision of both boxes equals that; some
servers need the other box's users to be released (without sharing they
would stay hidden); both boxes report the sync connected with observations
received. All processes and the namespace are removed.

usage: live_zshare.py AMON
"""
import os
import shutil
import subprocess
import sys
import time
import zlib

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "e2e"))
import e2e_lib as L  # noqa: E402
from live_lib import Amon, Checks, Netns, Skip, Stop, finish, workdir  # noqa: E402
from test_zanon_share import build_flows, frames_of, prefix24  # noqa: E402

import random  # noqa: E402

amon = sys.argv[1]
check = Checks()
work = workdir("zshare")
cleanups = []
skipped = None
Z = 3
try:
    if not shutil.which("nats-server"):
        raise Skip("nats-server is not on PATH (scripts/setup installs it)")
    flows = build_flows(random.Random(7))[:160]
    frames, owner = frames_of(flows)
    # The second pass as new connections (other client ports): a flow keeps
    # the decision it took at its first packet.
    again = []
    for fi, (t, cl, srv) in enumerate(flows):
        for ts, fr, from_client in L.tcp_flow(t, cl, srv, 50000 + fi % 10000):
            again.append((ts, fr, fi, from_client))
    again.sort(key=lambda x: x[0])
    clients_of = {}
    for _, c, s in flows:
        clients_of.setdefault(s, set()).add(c)
    truth = {s: len(cs) >= Z for s, cs in clients_of.items()}
    box_of = {fi: zlib.crc32(flows[fi][1].encode()) % 2 for fi in range(len(flows))}
    alone = [{s: len({c for fi, (_, c, s2) in enumerate(flows) if s2 == s and box_of[fi] == b}) >= Z
              for s in clients_of} for b in (0, 1)]
    need_both = [s for s in truth if truth[s] and not alone[0][s] and not alone[1][s]]
    check(need_both, "TEST BUG: no server needs both boxes' users")
    key = L.make_key(work, "share")
    with open(os.path.join(work, "z.amon"), "w") as f:
        f.write("clients = { 10.0.0.0/8 }\nip.server : zanon(z=%d, dt=1h, fallback=prefix(24))\n" % Z)

    ns = Netns("zsh", pairs=2)
    cleanups.append(ns.remove)
    nats = ns.popen(["nats-server", "-js", "-a", "127.0.0.1", "-p", "4222", "-sd", os.path.join(work, "js")],
                    stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "nats.log"), "w"))

    def stop_nats():
        nats.terminate()
        try:
            nats.wait(10)
        except subprocess.TimeoutExpired:
            nats.kill()
            nats.wait()
    cleanups.append(stop_nats)
    time.sleep(1)

    boxes = []
    for b in (0, 1):
        idx = [i for i in range(len(frames)) if box_of[owner[i][0]] == b]
        inp = os.path.join(work, "box%d.pcap" % b)
        L.write_pcap(inp, [frames[i] for i in idx])
        sec = [x for x in again if box_of[x[2]] == b]
        L.write_pcap(os.path.join(work, "box%d-again.pcap" % b), [(x[0], x[1]) for x in sec])
        bdir = os.path.join(work, "b%d" % b)
        os.mkdir(bdir)
        shutil.copy(os.path.join(work, "z.amon"), bdir)
        a = Amon(amon, ns, bdir,
                 "workers: 1\ninputs:\n  - port: \"net_af_packet%d,iface=amon_rx%d,framecnt=4096\"\n" % (b, b) +
                 "consumers:\n  - { name: c, policy: z.amon, output: { pcap: out.pcap } }\n"
                 "zanon: { share: { url: \"nats://127.0.0.1:4222\", stream: AMON_LIVE, key: %s } }\n" % key,
                 "amonzsh%d_%d" % (b, os.getpid()))
        cleanups.insert(0, a.kill)
        boxes.append((a, inp, [(x[2], x[3]) for x in sec]))
    for a, _, _ in boxes:
        if not check(a.wait_started(), "amon did not start: " + a.log()[-1500:]):
            raise Stop
    sent = [0, 0]
    for rnd in (1, 2):
        for b, (a, inp, _) in enumerate(boxes):
            sent[b] += ns.replay("amon_tx%d" % b, inp if rnd == 1 else inp.replace(".pcap", "-again.pcap"),
                                 "--pps=2000")
        time.sleep(2)  # the sync: each box's observations reach the other
    states = []
    for b, (a, inp, own) in enumerate(boxes):
        rc = a.stop()
        st = a.report()
        states.append(st.get("zanon_share", {}))
        check(rc == 0, "box %d: exit status %s: %s" % (b, rc, a.log()[-800:]))
        check(st["rx"] == sent[b] and st["loss"]["lost"] == 0, "box %d: sent %d, received %d, lost %s" %
              (b, sent[b], st["rx"], st["loss"]))
        _, recs = L.read_pcap(os.path.join(a.work, "out.pcap"))
        second = recs[len(recs) - len(own):]
        check(len(recs) == 2 * len(own), "box %d: %d records for %d frames sent twice" % (b, len(recs), len(own)))
        wrong, early = 0, 0
        for (fi, from_client), rec in zip(own, second):
            src, dst = L.ipv4_addrs(rec[3])
            srv = dst if from_client else src
            released = srv == flows[fi][2]
            if not released and srv != prefix24(flows[fi][2]):
                check(False, "box %d flow %d: server %s is neither its address nor its /24" % (b, fi, srv))
            if released != truth[flows[fi][2]]:
                wrong += 1
                early += released
        check(wrong == 0, "box %d: %d second-pass packets decided unlike one box fed with both (%d released "
                          "earlier)" % (b, wrong, early))
        print("box %d: %d frames twice, sync %s" % (b, len(own), states[-1]), flush=True)
    for b, sh in enumerate(states):
        check(sh.get("connected") and sh.get("received", 0) > 0 and sh.get("published", 0) > 0,
              "box %d: sync state %s" % (b, sh))
    print("%d servers, %d released by one box with both shares, %d of them only through sharing" %
          (len(truth), sum(truth.values()), len(need_both)))
except Stop:
    pass
except Skip as e:
    skipped = str(e)
finish(check, work, cleanups, skipped)
