#!/usr/bin/env python3
"""Live loss is counted where it happens, and a file is never dropped.

1. net_af_packet on a veth pair in a namespace this test makes, with a
   small kernel ring (framecnt=32) and tcpreplay at top speed into the
   other end: the ring overflows. Asserted: what tcpreplay sent equals what
   amon received plus the kernel ring's drops (PACKET_STATISTICS) plus what
   the veth itself dropped, exactly; telemetry /amon/stats shows the ring's
   loss while the run goes on; the exit report (text and JSON) shows it; the
   run warns at exit and, with `loss: { fail: 1% }`, exits 3.
2. net_pcap reading a capture (rx_pcap=): a file has no line rate, so
   nothing is dropped at dispatch or at the outputs: every packet of the
   file is in the output, the exit is 0 and silent about loss.
3. `loss` settings out of range are configuration errors.

usage: live_loss.py AMON AMON_GEN CAPTURE
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_lib import Amon, Checks, Netns, Skip, Stop, finish, pcap_records, workdir, write_key_policy  # noqa: E402

amon, amon_gen, capture = sys.argv[1:4]
check = Checks()
work = workdir("loss")
cleanups = []
skipped = None
try:
    write_key_policy(work, "clients = { 10.0.0.0/8 }\neth.src, eth.dst : zero()\nip.client : cryptopan(key=k)\n"
                           "ip.server : prefix(24)\n"
                           "payload : snap()\n")

    # 3. Settings.
    base = ("workers: 1\ninputs:\n  - port: net_null0\nconsumers:\n"
            "  - { name: c, policy: p.amon, output: { pcap: o.pcap } }\n")
    for bad, why in (("loss: { warn: 150% }\n", "loss warn takes a share"),
                     ("loss: { fail: x }\n", "loss fail takes a share"),
                     ("loss: { wran: 1% }\n", "did you mean 'warn'")):
        y = os.path.join(work, "bad.yaml")
        with open(y, "w") as f:
            f.write(base + bad)
        r = subprocess.run([amon, "check", "--config", y], capture_output=True, text=True)
        check(r.returncode == 2 and why in r.stderr, "amon check on %r: %d %s" % (bad, r.returncode, r.stderr))

    ns = Netns("loss")
    cleanups.append(ns.remove)

    # 1. The kernel ring of net_af_packet.
    a = Amon(amon, ns, work,
             "workers: 1\n"
             "inputs:\n  - port: net_af_packet0,iface=amon_rx0,framecnt=32\n"
             "consumers:\n  - { name: c, policy: p.amon, output: { pcap: out.pcap } }\n"
             "loss: { warn: 0.5%, fail: 1% }\n", "amonloss%d" % os.getpid())
    cleanups.insert(0, a.kill)
    if not check(a.wait_started(), "amon did not start: " + a.log()[-2000:]):
        raise Stop
    sent, tel = 0, None
    for _ in range(5):  # a ring of 32 frames overflows at once at top speed; tries again if it did not
        sent += ns.replay("amon_tx0", capture, "--topspeed")
        time.sleep(0.3)
        tel = a.telemetry("/amon/stats")
        if tel and tel.get("lost_kernel_ring", 0) > 0:
            break
    check(tel is not None and tel.get("lost_kernel_ring", 0) > 0 and tel["lost"] >= tel["lost_kernel_ring"] and
          tel["offered"] > tel["lost"], "/amon/stats while running: %s" % tel)
    time.sleep(0.5)
    rc = a.stop()
    veth = ns.link_drops("amon_tx0") + ns.link_drops("amon_rx0")
    st = a.report()
    loss = st["loss"]
    ring = st["inputs"][0]["kernel_ring_dropped"]
    check(ring > 0 and loss["kernel_ring"] == ring, "kernel ring drops not reported: %s" % st["inputs"])
    check(st["rx"] + ring + veth == sent,
          "sent %d != received %d + kernel ring %d + veth %d" % (sent, st["rx"], ring, veth))
    c = st["consumers"][0]
    check(loss["lost"] == ring + loss["dispatch"] + c["queue_dropped"] + c["tx_dropped"] and
          loss["offered"] == st["rx"] + ring, "loss totals: %s" % loss)
    check(abs(loss["share"] - loss["lost"] / loss["offered"]) < 1e-5, "loss share: %s" % loss)
    check(rc == 3, "exit status %s with loss above loss.fail (expected 3)" % rc)
    check("amon: lost %d of %d packets" % (loss["lost"], loss["offered"]) in a.log() and "above loss.fail" in a.log(),
          "no loss line at exit: " + a.log()[-1500:])
    check("lost: %d of %d" % (loss["lost"], loss["offered"]) in a.out() and "kernel_ring=%d" % ring in a.out(),
          "exit report without the loss: " + a.out()[:1500])
    print("af_packet: sent %d, received %d, kernel ring %d, veth %d, exit %s" % (sent, st["rx"], ring, veth, rc))

    # 2. A file-backed vdev: back-pressure, not loss.
    gen = os.path.join(work, "gen.pcap")
    subprocess.run([amon_gen, "--out", gen, "--packets", "30000", "--quiet"], check=True)
    n_in, _ = pcap_records(gen)
    for f in ("stats.json", "out.pcap"):
        if os.path.exists(os.path.join(work, f)):
            os.unlink(os.path.join(work, f))
    b = Amon(amon, ns, work,
             "workers: 1\n"
             "inputs:\n  - port: net_pcap0,rx_pcap=" + gen + "\n"
             "consumers:\n  - { name: c, policy: p.amon, output: { pcap: out.pcap } }\n",
             "amonlossf%d" % os.getpid(), extra=["--until-idle=1s"])
    cleanups.insert(0, b.kill)
    rc = b.wait(timeout=120)
    st = b.report()
    c = st["consumers"][0]
    n_out, whole = pcap_records(os.path.join(work, "out.pcap"))
    check(rc == 0, "file vdev: exit status %s: %s" % (rc, b.log()[-1500:]))
    check(st["rx"] == n_in and st["rx_dispatch_drops"] == 0 and c["in"] == n_in and c["queue_dropped"] == 0,
          "file vdev: %d packets in the file, rx %d, dispatch drops %d, consumer in %d, queue drops %d" %
          (n_in, st["rx"], st["rx_dispatch_drops"], c["in"], c["queue_dropped"]))
    check(n_out == n_in and whole and c["written"] == n_in, "file vdev: %d of %d packets written" % (n_out, n_in))
    check(st["loss"]["lost"] == 0 and "amon: lost" not in b.log(), "file vdev: loss reported: %s" % st["loss"])
    print("file vdev: %d packets in, %d out" % (n_in, n_out))
except Stop:
    pass
except Skip as e:
    skipped = str(e)
finish(check, work, cleanups, skipped)
