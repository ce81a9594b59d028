#!/usr/bin/env python3
"""End to end: offline, a user's address written as text before any packet
of that user is rewritten as the user's own headers are later (the
pre-pass preloads the users' addresses into the echo table,
doc/language.md `echoes`).

A crafted capture: a request from one user carries, in its URI (a field no
rule of rules/ids.amon names: kept payload), the text of another user's
address (inside `clients`) and of a server's; a second later that other
user opens a connection of its own to that server. Through
`amon pcap --read FILE`:

  - the user's address is in none of the output's payloads, and its copy
    reads as the address its own headers became (Crypto-PAn);
  - the server's address, which ip.server's keep() leaves in clear in its
    headers, stays in clear in the text;
  - with ip.client's key rotated daily and the user's first packet a day
    after the copy, the copy is the rewrite the user's address gets on the
    copy's day (read from a capture of the user's packet on that day), not
    on the day of its first packet;
  - the stats say how many addresses were preloaded.

Read from standard input (no pre-pass: an input that cannot be read twice),
the earlier copy stays in clear, as live: nothing is known before the user
is seen. That the same input differs shows the pre-pass made the change.

usage: test_echo_prepass_addr.py AMON"""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

S = 1_000_000_000
DAY = 86400 * S
T0 = 1_700_000_000 * S - (1_700_000_000 * S) % DAY + 3600 * S  # an hour into a day
USER, SERVER = "192.168.1.10", "93.184.216.34"
# Fifteen characters: any rewrite fits in its text, octets padded with zeros.
LATE, OTHER = "192.168.100.177", "203.0.113.200"
HEAD = b"GET /fetch?u=ldap://"
MID = b":1389/a&s=http://"
URI = HEAD + LATE.encode() + MID + OTHER.encode() + b":8080/ HTTP/1.1\r\nHost: example.com\r\n\r\n"


def build(d, name, late_at, copy=True):
    frames = []
    if copy:
        frames += [(t, f) for t, f, _ in L.tcp_flow(T0, USER, SERVER, 40000, 80, URI)]
    frames += [(t, f) for t, f, _ in L.tcp_flow(late_at, LATE, OTHER, 40001, 8080, b"GET / HTTP/1.1\r\n\r\n")]
    path = os.path.join(d, name + ".pcap")
    L.write_pcap(path, frames)
    return path


def policy(d, name, rotate=False):
    text = L.shipped_ids(d)
    if rotate:
        text = text.replace("ip.client          : cryptopan(key=ids)", "ip.client          : cryptopan(key=ids, rotate=24h)")
        if "rotate=24h" not in text:
            raise RuntimeError("rules/ids.amon's ip.client rule is not where the test looks for it")
    p = os.path.join(d, name + ".amon")
    with open(p, "w") as fh:
        fh.write(text)
    return p


def copies(out):
    """The output's text where the input wrote LATE and OTHER, and LATE's
    own source address in its headers."""
    frames = [r[3] for r in L.read_pcap(out)[1]]
    late_copy = other_copy = own = None
    for f in frames:
        if HEAD in f:
            i = f.index(HEAD) + len(HEAD)
            late_copy = f[i:i + len(LATE)].decode(errors="replace")
            j = i + len(LATE) + len(MID)
            other_copy = f[j:j + len(OTHER)].decode(errors="replace")
        a = L.ipv4_addrs(f)
        if a and f.endswith(b"GET / HTTP/1.1\r\n\r\n"):
            own = a[0]
    return frames, late_copy, other_copy, own


def quad(text):
    """A dotted quad padded with zeros, as its shortest text; None if it is not one."""
    try:
        parts = [int(x, 10) for x in (text or "").split(".")]
    except ValueError:
        return None
    return ".".join(map(str, parts)) if len(parts) == 4 and all(0 <= x < 256 for x in parts) else None


def main():
    amon = L.tool_paths(sys.argv)
    d = L.tmpdir("echo-prepass-addr-")
    fails = []
    inp = build(d, "in", T0 + S)
    pol = policy(d, "ids")
    out = os.path.join(d, "out.pcap")
    sj = os.path.join(d, "out.json")
    L.run_amon(amon, inp, [("ids", pol, out)], extra=["--stats-json", sj])
    frames, late_copy, other_copy, own = copies(out)
    for i, f in enumerate(frames):
        if LATE.encode() in f:
            fails.append(f"frame {i + 1}: the user's address left in clear")
    if own is None or own == LATE:
        fails.append(f"the user's own header reads {own}: its rule should rewrite it")
    elif quad(late_copy) != own:
        fails.append(f"the URI's copy of the user's address reads {late_copy!r}, its headers {own}")
    if other_copy != OTHER:
        fails.append(f"the server's address in the URI reads {other_copy!r}: a kept server stays in clear")
    with open(sj) as fh:
        pre = json.load(fh)["consumers"][0].get("echo_prepass", {})
    if pre.get("preloaded", 0) < 2 or pre.get("over_cap") != 0:
        fails.append(f"echo_prepass {pre}: want both users' addresses preloaded")
    L.health(inp, out, "file", fails)

    # A key rotated daily, the user's first packet a day after the copy:
    # the copy takes the copy's day's rewrite, which the user's packet on
    # that day (another capture) shows.
    rpol = policy(d, "ids-rotate", rotate=True)
    rin = build(d, "in-rotate", T0 + DAY)
    rout = os.path.join(d, "rotate.pcap")
    L.run_amon(amon, rin, [("ids", rpol, rout)])
    _, late_copy, _, later = copies(rout)
    day0 = os.path.join(d, "day0.pcap")
    L.run_amon(amon, build(d, "in-day0", T0 + S, copy=False), [("ids", rpol, day0)])
    _, _, _, first = copies(day0)
    if not first or not later or first == later:
        fails.append(f"rotation: the user's address reads {first} on the first day and {later} on the next: "
                     "the key should have rotated")
    elif quad(late_copy) != first:
        fails.append(f"rotation: the copy reads {late_copy!r}; the copy's day rewrites the user as {first} "
                     f"(the next day as {later})")

    # Standard input cannot be read twice: no pre-pass, the copy before the
    # user's first packet stays, as live.
    out = os.path.join(d, "stdin.pcap")
    with open(inp, "rb") as fh:
        r = subprocess.run([amon, "pcap", "--read", "-", "--workers", "1", "--quiet", "--consumer",
                            f"ids={pol}:{out}"], stdin=fh, capture_output=True, timeout=170)
    if r.returncode != 0:
        fails.append(f"amon on standard input failed: {r.stderr.decode(errors='replace')}")
    else:
        _, late_copy, _, own = copies(out)
        if late_copy != LATE:
            fails.append(f"standard input: the URI's copy reads {late_copy!r}; with no pre-pass it stays as it came")
        if own in (None, LATE):
            fails.append(f"standard input: the user's own header reads {own}")
    shutil.rmtree(d, ignore_errors=True)
    return L.report(fails, "ok: a user's address written before the user's first packet is rewritten, offline")


if __name__ == "__main__":
    sys.exit(main())
