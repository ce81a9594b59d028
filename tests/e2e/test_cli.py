#!/usr/bin/env python3
"""The command line answers: every command takes --help (exit 0, its usage
on stdout), refuses an unknown option (exit 2, never ignored), and prints
its tables as JSON with --format json; amon version names the git commit,
the DPDK version and the drivers linked in.

usage: test_cli.py AMON"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import e2e_lib as L

COMMANDS = ["pcap", "audit", "check", "run", "lint", "whatif", "fields", "actions", "version"]


def run(amon, *args):
    return subprocess.run([amon, *args], capture_output=True, text=True, timeout=60)


def main():
    amon = os.path.abspath(sys.argv[1])
    fails = []
    for c in COMMANDS:
        r = run(amon, c, "--help")
        if r.returncode != 0 or "usage" not in r.stdout.lower() or c not in r.stdout:
            fails.append(f"amon {c} --help: exit {r.returncode}, stdout {r.stdout[:80]!r}")
        r = run(amon, c, "--no-such-option")
        if r.returncode != 2 or "--no-such-option" not in r.stderr:
            fails.append(f"amon {c} --no-such-option: exit {r.returncode} (2 expected), stderr {r.stderr[:120]!r}")
    for c, key in [("fields", "name"), ("actions", "applies_to")]:
        r = run(amon, c, "--format", "json")
        try:
            rows = json.loads(r.stdout)
            if not rows or key not in rows[0]:
                fails.append(f"amon {c} --format json: no {key!r} in {rows[:1]}")
        except ValueError as e:
            fails.append(f"amon {c} --format json: not JSON ({e}): {r.stdout[:80]!r}")
    r = run(amon, "version", "--format", "json")
    try:
        v = json.loads(r.stdout)
        for k in ["version", "git", "dpdk", "drivers"]:
            if k not in v:
                fails.append(f"amon version --format json: no {k!r}")
        if not v.get("dpdk", "").startswith("DPDK "):
            fails.append(f"amon version: DPDK version {v.get('dpdk')!r}")
        if not v.get("git") or v.get("git") == "unknown" and os.path.isdir(os.path.join(os.path.dirname(__file__), "../../.git")):
            fails.append(f"amon version: git commit {v.get('git')!r}")
    except ValueError as e:
        fails.append(f"amon version --format json: not JSON ({e}): {r.stdout[:80]!r}")
    r = run(amon, "version")
    if r.returncode != 0 or "dpdk" not in r.stdout.lower() or "git" not in r.stdout:
        fails.append(f"amon version: {r.stdout!r}")
    return L.report(fails, "cli: every command answers --help, refuses unknown options, prints JSON")


if __name__ == "__main__":
    sys.exit(main())
