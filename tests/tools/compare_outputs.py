#!/usr/bin/env python3
"""Runs two amon binaries over the same captures and policies, with their
per-run secrets fixed (libfixrand.so, tests/bench/fixrand.c), and reports every output that differs.
A change meant to keep behaviour (a refactoring, a new fast path) must show
no difference here.

usage: compare_outputs.py --fixrand build/libfixrand.so
                          --base OLD/amon --new NEW/amon
                          [--pcaps DIR] [--gen build/amon-gen]
                          [--policy P.amon ...] [--work DIR] [--workers 1]

Captures: every *.pcap / *.pcapng in --pcaps (default: the folder of test
captures beside the checkout, as the build's AMON_PCAPS_DIR), plus two generated traces
(amon-gen --seed 1: a mixed one and a small-packet one) when --gen is given.
Policies: rules/*.amon, tests/tools/policies/*.amon and tests/bench/*.amon
unless --policy is given; each is copied into the work folder next to a
keys/ folder of fixed keys, so the key files a policy names exist and are
the same for both binaries. A policy the base binary refuses is reported
and skipped. Outputs are compared by SHA-256, and so is amon's exit status.
Exit status: 0 when every output is identical, 1 otherwise."""

import argparse
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def sha(path):
    if not os.path.exists(path):
        return "missing"
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fixed_keys(work, policies):
    """Every key file a policy names (file("keys/NAME")), 32 fixed bytes in hex,
    mode 0600 (the loader refuses keys others can read)."""
    kd = os.path.join(work, "keys")
    os.makedirs(kd, exist_ok=True)
    names = set()
    for p in policies:
        with open(p) as f:
            names.update(re.findall(r'file\("keys/([^"]+)"\)', f.read()))
    for i, n in enumerate(sorted(names)):
        path = os.path.join(kd, n)
        data = bytes((0x3c + 7 * i + 11 * j) & 0xff for j in range(32)).hex()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(data + "\n")
        os.chmod(path, 0o600)


def run(amon, fixrand, inp, pol, out, workers):
    env = dict(os.environ, LD_PRELOAD=os.path.abspath(fixrand))
    cmd = [amon, "pcap", "--read", inp, "--workers", str(workers), "--quiet", "--consumer", f"c={pol}:{out}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    return r.returncode, r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--fixrand", required=True)
    ap.add_argument("--pcaps", default=os.path.join(ROOT, "..", "shared", "pcaps"))
    ap.add_argument("--gen")
    ap.add_argument("--policy", action="append")
    ap.add_argument("--work", default="/tmp/amon-compare")
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    a.base, a.new, a.fixrand = (os.path.abspath(x) for x in (a.base, a.new, a.fixrand))
    if a.gen:
        a.gen = os.path.abspath(a.gen)

    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    srcs = a.policy or sorted(glob.glob(os.path.join(ROOT, "rules", "*.amon")) +
                              glob.glob(os.path.join(ROOT, "tests", "tools", "policies", "*.amon")) +
                              glob.glob(os.path.join(ROOT, "tests", "bench", "*.amon")))
    fixed_keys(work, srcs)
    policies = []
    for s in srcs:
        dst = os.path.join(work, os.path.basename(s))
        shutil.copy(s, dst)
        policies.append(dst)

    caps = sorted(glob.glob(os.path.join(a.pcaps, "*.pcap")) + glob.glob(os.path.join(a.pcaps, "*.pcapng")))
    if a.gen:
        for name, extra in (("gen-mix.pcap", []), ("gen-small.pcap", ["--small"])):
            out = os.path.join(work, name)
            subprocess.run([a.gen, "--out", out, "--seed", "1", "--packets", "50000"] + extra, check=True,
                           capture_output=True)
            caps.append(out)

    os.chdir(work)
    diffs, same, refused = [], 0, []
    for pol in policies:
        pname = os.path.basename(pol)
        for cap in caps:
            cname = os.path.basename(cap)
            ob = os.path.join(work, "base.out.pcap")
            on = os.path.join(work, "new.out.pcap")
            for o in (ob, on):
                if os.path.exists(o):
                    os.remove(o)
            rb, eb = run(a.base, a.fixrand, cap, pol, ob, a.workers)
            if rb != 0 and cap == caps[0] and not os.path.exists(ob):
                refused.append(f"{pname}: {eb.strip().splitlines()[-1] if eb.strip() else rb}")
                break
            rn, en = run(a.new, a.fixrand, cap, pol, on, a.workers)
            hb, hn = (rb, sha(ob)), (rn, sha(on))
            if hb != hn:
                diffs.append(f"{pname} on {cname}: base exit {rb} {hb[1][:16]}, new exit {rn} {hn[1][:16]}"
                             + (f"\n    new stderr: {en.strip()[-300:]}" if rn != rb else ""))
            else:
                same += 1
    for r in refused:
        print(f"skipped (the base binary refuses it): {r}")
    print(f"{same} identical, {len(diffs)} different ({len(caps)} captures x {len(policies) - len(refused)} policies)")
    for d in diffs:
        print("DIFF " + d)
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
