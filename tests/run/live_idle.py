#!/usr/bin/env python3
"""Quiet live ports cost no core; one amon per DPDK file prefix and per
pinned CPU; no DPDK runtime folder left behind.

In a network namespace this test makes, with two veth pairs: amon reads
amon_rx0 (net_af_packet) and forwards to amon_rx1 (net_af_packet). While
no packet comes, its main and worker lcores must sleep (voluntary context
switches: a polling thread makes none, whatever else loads the machine; its
CPU share is printed); probes sent into amon_tx0
after 20 ms of quiet must still come out of amon_tx1 (their delay is
printed: the latency the backoff costs). A second amon with the same file
prefix refuses to start, naming the first one's pid; one whose pinned
lcores share a CPU with a pinned amon refuses too. After each run the
prefix's folder under /var/run/dpdk is gone, and `amon pcap` in a mount
namespace of its own leaves that folder empty.

usage: live_idle.py AMON CAPTURE [--measure]
  --measure: also runs with idle.max_sleep 0 (always polling) and 1ms, and
  prints CPU and probe delays for each (doc/performance.md, Idle ports).
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_lib import (Amon, Checks, Netns, Skip, Stop, cpu_seconds, finish, runtime_dir, workdir,  # noqa: E402
                      write_key_policy)

amon, capture = sys.argv[1], sys.argv[2]
measure = "--measure" in sys.argv[3:]
check = Checks()
work = workdir("idle")
cleanups = []
skipped = None


def lcore_sleeps(pid):
    """Voluntary context switches of the main lcore and each worker lcore: a
    thread that sleeps makes them, one that polls makes none (however loaded
    the machine, unlike its CPU time)."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        comm = open("/proc/%d/task/%s/comm" % (pid, tid)).read().strip()
        if int(tid) == pid or comm.startswith("rte-worker"):
            for line in open("/proc/%d/task/%s/status" % (pid, tid)):
                if line.startswith("voluntary_ctxt_switches"):
                    out[comm] = int(line.split()[1])
    return out


def idle_profile(pid, secs=2.0):
    """(CPU share of one core, {lcore thread: voluntary switches per second}) over secs."""
    c0, s0, t0 = cpu_seconds(pid), lcore_sleeps(pid), time.time()
    time.sleep(secs)
    c1, s1, t1 = cpu_seconds(pid), lcore_sleeps(pid), time.time()
    return (c1 - c0) / (t1 - t0), {k: (s1[k] - s0.get(k, 0)) / (t1 - t0) for k in s1}


def probes(ns, n=40, quiet=0.02):
    """Delays (us) of n probes through amon, each after `quiet` seconds without traffic."""
    r = ns.run("python3", os.path.join(os.path.dirname(os.path.abspath(__file__)), "live_lib.py"), "probe",
               "amon_tx0", "amon_tx1", str(n), str(quiet), timeout=60)
    return [int(x) for x in r.stdout.split()]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else -1


try:
    write_key_policy(work, "clients = { 10.0.0.0/8 }\neth.src, eth.dst : keep()\nip.client : cryptopan(key=k)\n"
                           "ip.server : keep()\n")
    ns = Netns("idle", pairs=2)
    cleanups.append(ns.remove)
    body = ("workers: 1\n"
            "inputs:\n  - port: net_af_packet0,iface=amon_rx0\n"
            "consumers:\n  - { name: c, policy: p.amon, output: { port: \"net_af_packet1,iface=amon_rx1\" } }\n")
    prefix = "amonidle%d" % os.getpid()

    settings = [("default", "")]
    if measure:
        settings += [("always polling", "idle: { max_sleep: 0s }\n"), ("1ms", "idle: { max_sleep: 1ms }\n")]
    for label, extra in settings:
        a = Amon(amon, ns, work, body + extra, prefix)
        cleanups.insert(0, a.kill)
        if not check(a.wait_started(), "amon did not start: " + a.log()[-2000:]):
            raise Stop
        time.sleep(0.5)
        share, sleeps = idle_profile(a.proc.pid)
        delays = probes(ns)
        print("%s: idle CPU %.1f%% of a core, lcore sleeps/s %s; probe delay after 20 ms quiet: median %d us, "
              "p90 %d us, max %d us (%d/40 through)" %
              (label, 100 * share, {k: int(v) for k, v in sorted(sleeps.items())}, pct(delays, 0.5),
               pct(delays, 0.9), max(delays or [-1]), len(delays)), flush=True)
        if label == "default":
            check(len(sleeps) == 2 and all(v > 500 for v in sleeps.values()),
                  "idle lcores do not sleep (voluntary switches per second): %s" % sleeps)
            check(len(delays) >= 36, "only %d of 40 probes came through amon" % len(delays))
            # 2. The same prefix again: refused, naming the holder.
            b = Amon(amon, ns, work, body.replace("amon_rx1", "amon_rx1x"), prefix)
            rc = b.wait(timeout=30)
            check(rc == 2 and ("another amon (pid %d) runs with the DPDK file prefix '%s'" % (a.proc.pid, prefix))
                  in b.log(), "a second amon with the same prefix: exit %s, %s" % (rc, b.log()[-800:]))
            check(os.path.isdir(runtime_dir(prefix)), "the refused amon removed the running one's folder")
        rc = a.stop()
        check(rc == 0, "%s: exit status %s: %s" % (label, rc, a.log()[-800:]))
        check(not os.path.exists(runtime_dir(prefix)), "%s left behind" % runtime_dir(prefix))

    # 3. Pinned lcores: a second amon on a CPU the first one pinned.
    ncpu = os.cpu_count()
    p1, p2 = prefix + "a", prefix + "b"
    a = Amon(amon, ns, work, body, p1, eal=["--lcores=0@%d,1@%d" % (ncpu - 1, ncpu - 1)])
    cleanups.insert(0, a.kill)
    if check(a.wait_started(), "pinned amon did not start: " + a.log()[-2000:]):
        b = Amon(amon, ns, work, body.replace("amon_rx1", "amon_rx1x"), p2,
                 eal=["--lcores=0@%d,1@0" % (ncpu - 1)])
        rc = b.wait(timeout=30)
        check(rc == 2 and ("the lcores run on CPUs %d, which amon (pid %d, file prefix '%s')" % (ncpu - 1, a.proc.pid, p1))
              in b.log(), "an amon on a pinned CPU of another: exit %s, %s" % (rc, b.log()[-800:]))
        check(not os.path.exists(runtime_dir(p2)), "the refused amon left %s" % runtime_dir(p2))
    a.stop()
    check(not os.path.exists(runtime_dir(p1)), "%s left behind" % runtime_dir(p1))

    # 4. amon pcap, with a /run/dpdk of its own.
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                        'mount -t tmpfs amon-test /run/dpdk && "$0" pcap --read "$1" --policy "$2" --write "$3" '
                        '--quiet && ls -A /run/dpdk', amon, capture, os.path.join(work, "p.amon"),
                        os.path.join(work, "o.pcap")], capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.strip() == "",
          "amon pcap left in /run/dpdk: %r (exit %d, %s)" % (r.stdout, r.returncode, r.stderr[-500:]))
except Stop:
    pass
except Skip as e:
    skipped = str(e)
finish(check, work, cleanups, skipped)
