#!/usr/bin/env python3
"""pcap outputs of amon run rotate and reopen without losing or splitting a
record:
  - `rotate: {every: 1s}` over 3.5 s of packets gives one part per second,
    named after the period's UTC start; `keep: 2` leaves the newest two;
  - `rotate: {size: 4096}` gives parts of at most 4096 bytes;
  - SIGHUP after the output was moved away: amon writes a new file there.
Every part is a whole pcap; the parts together hold every record once.

usage: test_rotate.py AMON"""

import glob
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import e2e_lib as L

T0 = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z, a whole second


def config(out, rotate, inp="in.pcap"):
    with open("amon.yaml", "w") as f:
        f.write(f"inputs:\n  - pcap: {inp}\nconsumers:\n  - name: c\n    policy: p.amon\n"
                f"    output: {{pcap: {out}" + (f", rotate: {rotate}" if rotate else "") + "}\n")


def run(amon):
    r = subprocess.run([amon, "run", "--config", "amon.yaml", "--quiet", "--", "--file-prefix=amonrot%d" % os.getpid()],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"amon run: exit {r.returncode}: {r.stderr[-600:]}")


def records(paths):
    out = []
    for p in sorted(paths):
        with open(p, "rb") as f:
            data = f.read()
        _, recs = L.read_pcap(p)
        size = 24 + sum(16 + r[1] for r in recs)
        if size != len(data):
            raise RuntimeError(f"{p}: {len(data)} bytes but its records end at {size} (a split record)")
        out += recs
    return out


def main():
    amon = os.path.abspath(sys.argv[1])
    work = L.tmpdir("rotate-")
    L.make_key(work)
    L.write_policy(work, "p.amon", 'key k = file("keys/k.hex")\nip.client : cryptopan(key=k)\n')
    os.chdir(work)
    fr = []
    for i in range(35):  # 3.5 s, a flow every 100 ms
        fr += [(ts, f) for ts, f, _ in L.tcp_flow(T0 + i * 100_000_000, f"10.0.0.{i + 1}", "192.0.2.7", 40000 + i)]
    fr.sort()
    L.write_pcap("in.pcap", fr)
    want = sorted(t for t, _ in fr)
    fails = []

    config("t.pcap", "{every: 1s}")
    run(amon)
    parts = sorted(glob.glob("t-*.pcap"))
    names = [f"t-20231114T2213{20 + k:02d}Z.pcap" for k in range(4)]
    if parts != names:
        fails.append(f"every 1s: parts {parts}, {names} expected")
    else:
        got = [r[0] for r in records(parts)]
        if got != want:
            fails.append(f"every 1s: {len(got)} records over the parts, {len(want)} expected")
        for p in parts:
            sec = int(p[-8:-6])
            if any((r[0] // 10**9) % 60 != sec for r in records([p])):
                fails.append(f"every 1s: {p} holds a record of another second")

    config("k.pcap", "{every: 1s, keep: 2}")
    run(amon)
    if sorted(glob.glob("k-*.pcap")) != [f"k-20231114T2213{22 + k:02d}Z.pcap" for k in range(2)]:
        fails.append(f"keep 2: {sorted(glob.glob('k-*.pcap'))} left")

    config("s.pcap", "{size: 4096}")
    run(amon)
    parts = glob.glob("s-*.pcap")
    if len(parts) < 3 or any(os.path.getsize(p) > 4096 for p in parts):
        fails.append(f"size 4096: parts {[(p, os.path.getsize(p)) for p in parts]}")
    elif sorted(r[0] for r in records(parts)) != want:
        fails.append("size 4096: the parts do not hold every record once")

    # Reopen: the input is a pipe fed in two halves; between them the output
    # is moved away and amon gets SIGHUP.
    os.mkfifo("in.fifo")
    config("r.pcap", None, inp="in.fifo")
    p = subprocess.Popen([amon, "run", "--config", "amon.yaml", "--quiet", "--", "--file-prefix=amonrot%d" % os.getpid()],
                         stderr=subprocess.PIPE)
    with open("in.pcap", "rb") as f:
        data = f.read()
    half = 24 + sum(16 + len(b) for _, b in fr[:len(fr) // 2])
    w = open("in.fifo", "wb")
    w.write(data[:half])
    w.flush()
    # amon holds the newest records until later packets show their flows'
    # order, so the output stops short of the first half: the move waits
    # until records were written and the file has stopped growing.
    deadline, last, still = time.time() + 100, -1, 0
    while time.time() < deadline and still < 6:
        size = os.path.getsize("r.pcap") if os.path.exists("r.pcap") else 0
        still = still + 1 if size > 24 and size == last else 0
        last = size
        time.sleep(0.05)
    os.rename("r.pcap", "r.pcap.1")
    p.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    w.write(data[half:])
    w.close()
    _, err = p.communicate(timeout=60)
    if p.returncode != 0:
        fails.append(f"reopen: exit {p.returncode}: {err.decode(errors='replace')[-400:]}")
    elif not os.path.exists("r.pcap"):
        fails.append("reopen: no new r.pcap after SIGHUP")
    else:
        a, b = records(["r.pcap.1"]), records(["r.pcap"])
        if sorted(r[0] for r in a + b) != want or not a or not b:
            fails.append(f"reopen: {len(a)} + {len(b)} records, {len(want)} expected in both files")
    return L.report(fails, "pcap outputs rotate by time and size, keep the newest, reopen on SIGHUP")


if __name__ == "__main__":
    sys.exit(main())
