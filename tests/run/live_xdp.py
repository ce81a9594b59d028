#!/usr/bin/env python3
"""amon run on net_af_xdp: XDP generic mode, native mode on a veth, a
sustained replay, and the loss of the AF_XDP socket counted.

In a network namespace this test makes: two veth pairs. On the first, a
macvlan (passthru) stacked on amon_rx0 stands for a plain NIC whose driver
has no XDP of its own: the kernel runs the XDP program there in generic
(skb) mode, which DPDK 22.11's net_af_xdp reaches only with a program of
its own (`xdp_prog=`, libxdp's xsk_def_xdp_prog.o); the link must say
`xdpgeneric` while amon runs. On the second, net_af_xdp on the veth end
itself (native XDP, the driver's mode). For each: tcpreplay sends a real
capture; every frame sent is received or counted lost (what amon received
plus the socket's drops, ring full or no free buffer, plus the veth's own
drops equals what was sent) and every one received is written. A sustained
replay in generic mode (60,000 frames, twice the mbuf pool, so each buffer
goes round the fill ring twice) must be received, not stall once the
driver's buffers run out. Then amon is stopped (SIGSTOP) while a capture
is sent, so its socket runs out of buffers: `kernel_ring` and `nic_missed`
must hold the difference exactly.

Exit 77 (skipped) with the reason when namespaces cannot be made or the
kernel refuses to attach the XDP program.

usage: live_xdp.py AMON CAPTURE [--rate]
  --rate: also compares net_af_packet and net_af_xdp at top speed on a
  generated capture of small frames (doc/performance.md).
"""
import glob
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_lib import Amon, Checks, Netns, Skip, Stop, finish, pcap_records, workdir, write_key_policy  # noqa: E402

amon, capture = sys.argv[1], sys.argv[2]
rate = "--rate" in sys.argv[3:]
check = Checks()
work = workdir("xdp")
cleanups = []
skipped = None
SUSTAINED = 60000  # frames of the sustained replay: three seconds at 20 kpps
REFUSED = ("XDP mode not supported", "Failed to configure xdp socket", "Failed to set prog fd", "Operation not permitted",
           "Failed to create xsk socket", "Failed to load custom XDP program")


def start(ns, port, tag, extra_yaml=""):
    for f in ("stats.json", "out.pcap"):
        if os.path.exists(os.path.join(work, f)):
            os.unlink(os.path.join(work, f))
    a = Amon(amon, ns, work,
             "workers: 1\ninputs:\n  - port: \"%s\"\n" % port +
             "consumers:\n  - { name: c, policy: p.amon, output: { pcap: out.pcap } }\n" + extra_yaml,
             "amonxdp%s%d" % (tag, os.getpid()))
    cleanups.insert(0, a.kill)
    # The veths' drop counters run on over the runs of one namespace.
    a.veth_base = {p: ns.link_drops("amon_tx%d" % p) + ns.link_drops("amon_rx%d" % p) for p in (0, 1)}
    a.port = port
    if not a.wait_started():
        log = a.log()
        a.kill()
        if any(r in log for r in REFUSED):
            raise Skip("the kernel refused the XDP program on %s: %s" %
                       (port, [line for line in log.splitlines() if any(r in line for r in REFUSED)][:3]))
        check(False, "amon on %s did not start: %s" % (port, log[-1500:]))
        raise Stop
    return a


def account(ns, a, sent, pair, what, written_or_queue_dropped=False):
    """Stops amon; checks that sent frames are received or counted lost, and received ones written
    (or, written_or_queue_dropped, counted dropped at the output queue: a file writer behind on a
    busy machine)."""
    rc = a.stop()
    st = a.report()
    c = st["consumers"][0]
    # The socket's own loss: its receive ring full (XDP_STATISTICS'
    # rx_ring_full, kernel_ring) or no free buffer on its fill ring (the
    # driver's imissed, nic_missed).
    ring = st["inputs"][0]["kernel_ring_dropped"] + st["inputs"][0]["imissed"]
    veth = ns.link_drops("amon_tx%d" % pair) + ns.link_drops("amon_rx%d" % pair) - a.veth_base[pair]
    n_out, whole = pcap_records(os.path.join(work, "out.pcap"))
    check(rc in (0, 3), "%s: exit status %s" % (what, rc))
    # A socket's drop in native mode is also a drop of the veth's own
    # counter (the redirect failed): counted once.
    below = veth - ring if veth >= ring else veth
    # A packet socket is a tap: it has the frame before the stack drops
    # what no protocol takes (a veth's rx "dropped"), so that is no loss.
    if a.port.startswith("net_af_packet"):
        below = 0
    check(st["rx"] + ring + below == sent,
          "%s: sent %d != received %d + socket %d + veth %d" % (what, sent, st["rx"], ring, below))
    queued_out = c["queue_dropped"] if written_or_queue_dropped else 0
    # One worker's input ring full: dropped at dispatch, counted.
    check(c["in"] + st["loss"]["dispatch"] == st["rx"] and c["written"] + queued_out == c["in"] and
          n_out == c["written"] and whole,
          "%s: received %d, consumer in %d, written %d, queue dropped %d, records %d" %
          (what, st["rx"], c["in"], c["written"], c["queue_dropped"], n_out))
    print("%s: sent %d, received %d, socket drops %d, veth drops %d, dispatch drops %d, output queue drops %d" %
          (what, sent, st["rx"], ring, veth, st["loss"]["dispatch"], c["queue_dropped"]), flush=True)
    return st


try:
    progs = sorted(glob.glob("/usr/lib/*/bpf/xsk_def_xdp_prog.o"))
    if not progs:
        raise Skip("libxdp's xsk_def_xdp_prog.o is not installed (Debian: libxdp1)")
    write_key_policy(work, "clients = { 10.0.0.0/8 }\neth.src, eth.dst : zero()\nip.client : cryptopan(key=k)\n"
                           "ip.server : prefix(24)\npayload : snap()\n")
    ns = Netns("xdp", pairs=2)
    cleanups.append(ns.remove)
    ns.run("ip", "link", "add", "link", "amon_rx0", "name", "amon_xg0", "type", "macvlan", "mode", "passthru")
    ns.run("ip", "link", "set", "amon_xg0", "up")

    # 1. Generic mode: the macvlan, with libxdp's program.
    a = start(ns, "net_af_xdp0,iface=amon_xg0,xdp_prog=" + progs[0], "g")
    link = ns.run("ip", "link", "show", "amon_xg0").stdout
    check("xdpgeneric" in link, "amon_xg0 is not in XDP generic mode: " + link)
    sent = ns.replay("amon_tx0", capture, "--pps=20000")
    time.sleep(0.5)
    account(ns, a, sent, 0, "generic")

    # 1b. Sustained: more frames than the pool has mbufs, so each one is
    # handed to the fill ring more than once. A pool the driver's UMEM
    # does not cover lost a buffer at each turn and the port stopped
    # receiving after ~15,000-23,000 frames (every later one missed).
    gen = os.path.join(work, "sustained.pcap")
    subprocess.run([os.path.join(os.path.dirname(amon), "amon-gen"), "--out", gen, "--small", "--packets",
                    str(SUSTAINED), "--quiet"], check=True)
    a = start(ns, "net_af_xdp0,iface=amon_xg0,xdp_prog=" + progs[0], "l")
    sent = ns.replay("amon_tx0", gen, "--pps=20000")
    time.sleep(0.5)
    st = account(ns, a, sent, 0, "sustained generic", written_or_queue_dropped=True)
    check(sent >= SUSTAINED and st["rx"] >= 0.6 * sent,
          "sustained generic: received %d of %d sent: the input stalled" % (st["rx"], sent))

    # 2. Native mode on the veth end, the driver's default program.
    a = start(ns, "net_af_xdp1,iface=amon_rx1", "n")
    link = ns.run("ip", "link", "show", "amon_rx1").stdout
    check(" xdp " in link or "xdpdrv" in link or "prog/xdp" in link, "amon_rx1 has no XDP program: " + link)
    sent = ns.replay("amon_tx1", capture, "--pps=20000")
    time.sleep(0.5)
    account(ns, a, sent, 1, "native")

    # 3. The socket's buffers run out while amon is stopped: counted.
    a = start(ns, "net_af_xdp0,iface=amon_xg0,xdp_prog=" + progs[0], "s", "loss: { warn: 0% }\n")
    time.sleep(0.3)
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        sent = ns.replay("amon_tx0", capture, "--topspeed")
        sent += ns.replay("amon_tx0", capture, "--topspeed")
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    time.sleep(1)
    st = account(ns, a, sent, 0, "stopped reader")
    check(st["loss"]["kernel_ring"] + st["loss"]["nic_missed"] > 0,
          "no socket drop counted while amon was stopped: %s" % st["loss"])
    check("amon: lost %d of" % st["loss"]["lost"] in a.log(), "no loss line at exit")

    if rate:
        gen = os.path.join(work, "small.pcap")
        subprocess.run([os.path.join(os.path.dirname(amon), "amon-gen"), "--out", gen, "--small", "--packets",
                        "200000", "--quiet"], check=True)
        for what, port, pair in (("net_af_packet", "net_af_packet1,iface=amon_rx1", 1),
                                 ("net_af_packet, framecnt=4096", "net_af_packet1,iface=amon_rx1,framecnt=4096", 1),
                                 ("net_af_xdp native", "net_af_xdp1,iface=amon_rx1", 1),
                                 ("net_af_xdp generic", "net_af_xdp0,iface=amon_xg0,xdp_prog=" + progs[0], 0)):
            a = start(ns, port, "r")
            t0 = time.time()
            r = ns.run("tcpreplay", "--topspeed", "-i", "amon_tx%d" % pair, gen)
            secs = time.time() - t0
            sent = int([x for x in r.stdout.split("\n") if "Successful" in x][0].split()[-1])
            time.sleep(0.5)
            st = account(ns, a, sent, pair, what, written_or_queue_dropped=True)
            print("RATE %s: offered %.0f kpps, received %.0f kpps, lost %.1f %%" %
                  (what, sent / secs / 1e3, st["rx"] / secs / 1e3, 100.0 * (sent - st["rx"]) / sent), flush=True)
except Stop:
    pass
except Skip as e:
    skipped = str(e)
finish(check, work, cleanups, skipped)
