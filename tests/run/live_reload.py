#!/usr/bin/env python3
"""amon run on live traffic, reloaded many times while it runs.

A veth pair inside a network namespace this test creates (and removes):
tcpreplay --loop sends a real capture into one end, `amon run` reads the
other end through DPDK's net_af_packet vdev, two consumers write pcap
files. Meanwhile SIGHUPs alternate two valid policy versions (ip.server
prefix(24) and prefix(16): distinguishable in every output packet) with a
broken version between them (a syntax error; a key file readable by others),
both of which would, if they took effect, leave the server in clear.

Asserted: every packet amon received is in each output (counters and the
files' records, no drop of any kind); every output packet is exactly one of
the two valid versions; the broken versions never took effect and were each
logged with file:line:col; the generation and reloads_failed counters; DPDK
telemetry answers /amon/consumers (growing) and /amon/policies (the
generation); sd_notify messages on a notification socket as systemd gives
one (READY=1, RELOADING=1 and READY=1 per reload with the generation,
STOPPING=1) and log lines with syslog priorities; exit status 0 and
complete output files.

Traffic only ever goes between the two ends of the veth pair, inside the
namespace. Exit 77 (skipped) only when namespaces cannot be created.

usage: live_reload.py AMON CAPTURE [HUPS]   (AMON_SOAK=1: 1000 SIGHUPs)
"""
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

amon, capture = sys.argv[1], sys.argv[2]
hups = int(sys.argv[3]) if len(sys.argv) > 3 else 200
if os.environ.get("AMON_SOAK") == "1":
    hups = 1000
ns = "amonlive%d" % os.getpid()
prefix = "amonlive%d" % os.getpid()
work = tempfile.mkdtemp(prefix="amon-live-")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, flush=True)


def sh(*args, **kw):
    return subprocess.run(list(args), check=True, capture_output=True, text=True, **kw)


def read_pcap(path):
    """(records, complete): the IPv4 address pairs of every record, and
    whether the file ends exactly after its last record."""
    data = open(path, "rb").read()
    if len(data) < 24:
        return [], False
    magic = struct.unpack("<I", data[:4])[0]
    if magic not in (0xA1B2C3D4, 0xA1B23C4D):
        return [], False
    off, recs = 24, []
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack("<IIII", data[off:off + 16])
        off += 16
        if off + incl > len(data):
            return recs, False
        pkt = data[off:off + incl]
        off += incl
        addrs = None
        if len(pkt) >= 34 and pkt[12:14] == b"\x08\x00" and pkt[14] >> 4 == 4:
            addrs = (bytes(pkt[26:30]), bytes(pkt[30:34]))
        recs.append(addrs)
    return recs, off == len(data)


# Server addresses of the capture (the policy's clients are 10.0.0.0/8):
# their /24 and /16 forms are what the two valid versions write.
clients = ipaddress.ip_network("10.0.0.0/8")
servers = set()
for a in read_pcap(capture)[0]:
    if a:
        for x in a:
            if ipaddress.ip_address(x) not in clients:
                servers.add(x)
form_a = {s[:3] + b"\0" for s in servers if s[2] != 0}
form_b = {s[:2] + b"\0\0" for s in servers if s[2] != 0}
assert form_a and form_b, "the capture needs servers whose third byte is not 0"

# Namespace and veth pair; skip only if the kernel or our rights forbid it.
try:
    sh("ip", "netns", "add", ns)
except (subprocess.CalledProcessError, FileNotFoundError) as e:
    print("SKIP: cannot create a network namespace:", getattr(e, "stderr", e))
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(77)

proc = replay = None
try:
    nsx = ["ip", "netns", "exec", ns]
    sh(*nsx, "ip", "link", "add", "amon_tx", "type", "veth", "peer", "name", "amon_rx")
    sh(*nsx, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
    for dev in ("amon_tx", "amon_rx", "lo"):
        sh(*nsx, "ip", "link", "set", dev, "up")

    key = os.path.join(work, "k.key")
    with open(key, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    os.chmod(key, 0o600)
    head = 'key k = file("k.key")\nclients = { 10.0.0.0/8 }\nip.client : cryptopan(key=k)\n'
    versions = {
        "A": head + "ip.server : prefix(24)\n",
        "B": head + "ip.server : prefix(16)\n",
        "keep": head + "ip.server : keep()\n",
    }
    pols = [os.path.join(work, "p%d.amon" % i) for i in (1, 2)]

    def write_policies(v1, v2):
        for p, v in zip(pols, (v1, v2)):
            with open(p + ".tmp", "w") as f:
                f.write(v)
            os.replace(p + ".tmp", p)

    write_policies(versions["A"], versions["A"])
    outs = [os.path.join(work, "out%d.pcap" % i) for i in (1, 2)]
    with open(os.path.join(work, "amon.yaml"), "w") as f:
        f.write("workers: 1\n"
                "inputs:\n  - port: net_af_packet0,iface=amon_rx\n"
                "consumers:\n"
                "  - { name: c1, policy: p1.amon, output: { pcap: out1.pcap } }\n"
                "  - { name: c2, policy: p2.amon, output: { pcap: out2.pcap } }\n"
                "stats: { interval: 1s, json: lines.json }\n")
    # systemd's notification socket, as a Type=notify unit gives it.
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify_path = os.path.join(work, "notify")
    notify.bind(notify_path)
    notify.setblocking(False)
    env = dict(os.environ, NOTIFY_SOCKET=notify_path)
    msgs = []

    def drain_notify():
        # Read as systemd does: a full queue would block amon's sd_notify.
        while True:
            try:
                msgs.append(notify.recv(4096).decode())
            except BlockingIOError:
                return
    errlog = os.path.join(work, "err")
    with open(errlog, "w") as ef:
        proc = subprocess.Popen(nsx + ["env", "NOTIFY_SOCKET=" + notify_path, amon, "run", "--config", os.path.join(work, "amon.yaml"), "--stats-json",
                                       os.path.join(work, "stats.json"), "--quiet", "--", "--file-prefix=" + prefix],
                                stderr=ef, env=env)

    def log():
        return open(errlog, errors="replace").read()

    def wait_for(pred, what, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            drain_notify()
            if pred():
                return True
            if proc.poll() is not None:
                break
            time.sleep(0.005)
        check(False, "timed out waiting for " + what)
        print(log()[-3000:])
        return False

    if not wait_for(lambda: "amon: started" in log(), "amon to start"):
        raise SystemExit(1)
    replay = subprocess.Popen(nsx + ["tcpreplay", "-q", "--loop=0", "--pps=3000", "-i", "amon_tx", capture],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def telemetry(cmd):
        r = subprocess.run(["dpdk-telemetry.py", "-f", prefix], input=cmd + "\n", capture_output=True, text=True,
                           timeout=20)
        m = re.search(r"\{.*\}", r.stdout)
        return json.loads(m.group(0))[cmd] if m else None

    time.sleep(1)
    c_before = telemetry("/amon/consumers")

    done = lambda: len(re.findall(r"amon: (reload: generation|reload refused)", log()))
    expect_gen, expect_failed = 1, 0
    # A reload that changes no policy keeps the running generation.
    running = "A"
    broken_logged = 0
    for i in range(hups):
        step = i % 4
        if step == 0:
            write_policies(versions["A"], versions["A"])
        elif step == 2:
            write_policies(versions["B"], versions["B"])
        elif step == 1:
            # All or nothing: p1 alone would be valid, and leave servers in clear.
            write_policies(versions["keep"], versions["keep"] + "ip.server : prefix(\n")
        else:
            write_policies(versions["keep"], versions["keep"])
            os.chmod(key, 0o644)
        before = done()
        proc.send_signal(signal.SIGHUP)
        if not wait_for(lambda: done() > before, "reload %d" % i):
            break
        if step == 3:
            os.chmod(key, 0o600)
        if step in (1, 3):
            expect_failed += 1
        else:
            wrote = "A" if step == 0 else "B"
            expect_gen += wrote != running
            running = wrote
        if i == 2:
            pol = telemetry("/amon/policies")
            check(pol is not None and pol["generation"] == expect_gen,
                  "/amon/policies after a reload: %s, expected generation %d" % (pol, expect_gen))
            check(pol is not None and pol["last_result"] == "ok", "/amon/policies last_result: %s" % pol)
        if i == 3:
            pol = telemetry("/amon/policies")
            check(pol is not None and re.search(r"p[12]\.amon:\d+:\d+: error", pol.get("last_error", "")),
                  "/amon/policies last_error after a refused reload: %s" % pol)
    # A topology change needs a restart: refused as a whole, even with valid policies.
    yaml_path = os.path.join(work, "amon.yaml")
    yaml_text = open(yaml_path).read()
    with open(yaml_path, "w") as f:
        f.write(yaml_text.replace("workers: 1", "workers: 2"))
    write_policies(versions["keep"], versions["keep"])
    before = done()
    proc.send_signal(signal.SIGHUP)
    if wait_for(lambda: done() > before, "the topology reload"):
        expect_failed += 1
        check(re.search(r"changes to workers need a restart", log()), "a workers change was not refused as such")
    with open(yaml_path, "w") as f:
        f.write(yaml_text)
    write_policies(versions["A"], versions["A"])
    before = done()
    proc.send_signal(signal.SIGHUP)
    if wait_for(lambda: done() > before, "the last reload"):
        expect_gen += running != "A"
    # Then let the last packets arrive.
    time.sleep(1)
    c_after = telemetry("/amon/consumers")
    pol = telemetry("/amon/policies")
    check(c_before is not None and c_after is not None and c_after["c1"]["in"] > c_before["c1"]["in"] and
          c_after["c2"]["out"] > c_before["c2"]["out"], "/amon/consumers counters did not grow: %s -> %s" %
          (c_before, c_after))
    check(pol is not None and pol["generation"] == expect_gen and pol["reloads_failed"] == expect_failed,
          "/amon/policies: %s, expected generation %d, reloads_failed %d" % (pol, expect_gen, expect_failed))
    replay.send_signal(signal.SIGINT)
    replay.wait(timeout=10)
    replay = None
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    end = time.time() + 30
    while proc.poll() is None and time.time() < end:
        drain_notify()
        time.sleep(0.01)
    rc = proc.wait(timeout=1)
    proc = None
    text = log()
    check(rc == 0, "exit status %d" % rc)
    drain_notify()
    ready = [m for m in msgs if "READY=1" in m]
    check(msgs and "READY=1" in msgs[0], "sd_notify: the first message is not READY=1: %s" % msgs[:2])
    check(sum("RELOADING=1" in m for m in msgs) == hups + 2, "sd_notify: RELOADING=1 %d times, %d reloads" %
          (sum("RELOADING=1" in m for m in msgs), hups + 2))
    check(len(ready) == hups + 3 and "STATUS=generation %d running" % expect_gen in ready[-1],
          "sd_notify: READY=1 messages %d, last %s" % (len(ready), ready[-1:] ))
    check(msgs and "STOPPING=1" in msgs[-1], "sd_notify: no STOPPING=1 at the end")
    # Under systemd, lines carry syslog priorities: <6> for information, <3> for a refused reload.
    check(re.search(r"^<6>amon: started", text, re.M) and re.search(r"^<3>amon: reload refused", text, re.M),
          "log lines without syslog priorities under systemd")
    syntax = len(re.findall(r"p2\.amon:\d+:\d+: error", text))
    keyerr = len(re.findall(r"p[12]\.amon:\d+:\d+: error: .*k\.key", text))
    check(syntax >= (hups + 2) // 4, "syntax errors logged with file:line:col: %d" % syntax)
    check(keyerr >= hups // 4, "key file errors logged with file:line:col: %d" % keyerr)
    check(len(re.findall(r"amon: reload refused", text)) == expect_failed, "refused reloads logged")

    st = json.load(open(os.path.join(work, "stats.json")))
    check(st["generation"] == expect_gen, "generation %d, expected %d" % (st["generation"], expect_gen))
    check(st["reloads_failed"] == expect_failed, "reloads_failed %d, expected %d" % (st["reloads_failed"], expect_failed))
    check(st["rx"] > 0, "nothing received")
    check(st["rx_dispatch_drops"] == 0, "dispatch drops: %d" % st["rx_dispatch_drops"])
    counts = {"A": 0, "B": 0}
    for c, out in zip(st["consumers"], outs):
        check(c["in"] == st["rx"], "%s: in %d != rx %d" % (c["name"], c["in"], st["rx"]))
        check(c["out"] == c["in"] and c["dropped"] == 0 and c["filtered"] == 0 and c["written"] == c["out"] and
              c["tx_dropped"] == 0, "%s: counters do not add up: %s" % (c["name"], c))
        recs, complete = read_pcap(out)
        check(complete, "%s is cut short" % out)
        check(len(recs) == c["written"], "%s: %d records, %d written" % (out, len(recs), c["written"]))
        for n, a in enumerate(recs):
            if not a:
                continue
            va = any(x in form_a for x in a)
            vb = any(x in form_b for x in a)
            clear = any(x in servers for x in a)
            if clear or va == vb:
                check(False, "%s record %d: %s matches %s" % (out, n + 1, [ipaddress.ip_address(x) for x in a],
                                                                 "the server in clear" if clear else "no single version"))
                break
            counts["A" if va else "B"] += 1
    lines = open(os.path.join(work, "lines.json")).read().splitlines()
    check(len(lines) >= 1 and all(json.loads(x)["totals"]["rx"] >= 0 for x in lines), "stats lines")
    check(counts["A"] > 0 and counts["B"] > 0, "both versions seen: %s" % counts)
    print("live_reload: %d SIGHUPs, generation %d, %d refused, rx %d, per version %s" %
          (hups, expect_gen, expect_failed, st["rx"], counts))
finally:
    if replay:
        replay.kill()
    if proc:
        proc.kill()
        proc.wait()
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    if failures:
        print("work dir kept:", work)
    else:
        shutil.rmtree(work, ignore_errors=True)
sys.exit(1 if failures else 0)
