#!/usr/bin/env python3
"""End to end: a field split from a catch-all keeps the catch-all's rule
while no rule names it. With only `http.other_headers : redact()`, no
Origin (nor Referer, User-Agent) header value of a real capture leaves in
clear, although those headers are fields of their own; the headers' names
stay.

usage: test_catch_all.py AMON [PCAPS_DIR]"""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

CAPTURE = "http-requests-4k.pcap"
HEADER = re.compile(rb"\r\n(origin|referer|user-agent):[ \t]*([^\r\n]{8,})", re.I)


def values(frames):
    out = set()
    for rec in frames:
        for m in HEADER.finditer(rec[3]):
            out.add((m.group(1).lower(), m.group(2)))
    return out


def main():
    amon = L.tool_paths(sys.argv)
    inp = os.path.join(L.pcaps_dir(sys.argv[2] if len(sys.argv) > 2 else None), CAPTURE)
    if not os.path.exists(inp):
        L.skip(f"{inp} not found")
    work = L.tmpdir("catch_all_")
    pol = L.write_policy(work, "p.amon", "http.other_headers : redact()\n")
    out = os.path.join(work, "out.pcap")
    L.run_amon(amon, inp, [("c", pol, out)])
    before, after = L.read_pcap(inp)[1], L.read_pcap(out)[1]
    fails = []
    orig = values(before)
    origins = {v for h, v in orig if h == b"origin"}
    if not origins:
        fails.append(f"{CAPTURE} holds no Origin header: the test would prove nothing")
    if len(after) != len(before):
        fails.append(f"{len(before)} frames in, {len(after)} out")
    blob = b"\0".join(r[3] for r in after)
    clear = sorted({(h, v) for h, v in orig if v in blob})
    for h, v in clear[:5]:
        fails.append(f"{h.decode()} value in clear: {v[:60]!r}")
    if len(clear) > 5:
        fails.append(f"... {len(clear)} header values in clear")
    if b"\r\nOrigin:" not in blob and b"\r\norigin:" not in blob:
        fails.append("the Origin header names are gone (only values are redacted)")
    return L.report(fails, f"ok: {len(origins)} Origin values and {len(orig) - len(origins)} other split "
                           f"header values of {CAPTURE} redacted by the catch-all's rule")


if __name__ == "__main__":
    sys.exit(main())
