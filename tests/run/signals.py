#!/usr/bin/env python3
"""amon run answers its signals: SIGUSR1 writes the statistics line even
with no `stats:` setting (to stderr, where the log goes); SIGHUP with no
policy changed keeps the running generation and its per-rule counters,
with one changed starts the next; SIGTERM logs that amon is stopping and
ends the run with exit 0. Traffic: net_null's endless frames.

usage: signals.py AMON"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

amon = sys.argv[1]
work = tempfile.mkdtemp(prefix="amon-signals-")
prefix = "amonsig%d" % os.getpid()
fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("FAIL: " + msg)


policy = os.path.join(work, "p.amon")
with open(policy, "w") as f:
    f.write("eth.src, eth.dst : timestamp()\n")
with open(os.path.join(work, "amon.yaml"), "w") as f:
    f.write("workers: 1\n"
            "inputs:\n  - port: net_null0\n"
            "consumers:\n  - { name: c, policy: p.amon, output: { port: net_null1 } }\n")
errlog = os.path.join(work, "err")
ef = open(errlog, "w")
proc = subprocess.Popen([amon, "run", "--config", os.path.join(work, "amon.yaml"), "--quiet", "--",
                         "--file-prefix=" + prefix], stderr=ef)


def log():
    return open(errlog, errors="replace").read()


def wait_for(pattern, what, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        if re.search(pattern, log()):
            return True
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    check(False, "timed out waiting for " + what)
    print(log()[-3000:])
    return False


def stats_line():
    """SIGUSR1's line: (generation, hits of the policy's rule)."""
    n = len(re.findall(r"amon: stats \{", log()))
    proc.send_signal(signal.SIGUSR1)
    if not wait_for(r"(?s)(amon: stats \{.*){%d}" % (n + 1), "the statistics line on SIGUSR1"):
        return None, None
    t = json.loads(re.findall(r"amon: stats (\{.*\})", log())[-1])["totals"]
    return t["generation"], t["consumers"][0]["rules"][0]["hits"]


try:
    if not wait_for(r"amon: started", "amon to start"):
        raise SystemExit(1)
    time.sleep(1)
    # No stats: setting, yet the line comes.
    g1, h1 = stats_line()
    check(h1 is not None and h1 > 0, "no statistics line, or no rule hit in it")
    proc.send_signal(signal.SIGHUP)
    wait_for(r"reload: generation 1 unchanged", "the reload that changes nothing")
    g2, h2 = stats_line()
    check(g2 == 1, "a reload that changed nothing made generation %s" % g2)
    check(h1 is not None and h2 is not None and h2 >= h1,
          "the rule's hits went from %s to %s over a reload that changed nothing" % (h1, h2))

    with open(policy, "w") as f:
        f.write("eth.src, eth.dst : timestamp()\nip.client : prefix(16)\n")
    proc.send_signal(signal.SIGHUP)
    wait_for(r"reload: generation 2;", "the reload of a changed policy")
    g3, _ = stats_line()
    check(g3 == 2, "a changed policy made generation %s, not 2" % g3)

    proc.send_signal(signal.SIGTERM)
    wait_for(r"stopping on SIGTERM", "the stopping line")
    rc = proc.wait(timeout=30)
    check(rc == 0, "exit status %d after SIGTERM" % rc)
finally:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    ef.close()

if fails:
    print(log()[-3000:])
    sys.exit(1)
print("signals: SIGUSR1 line, unchanged reload (hits %d -> %d), changed reload, SIGTERM logged" % (h1, h2))
