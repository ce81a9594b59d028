#!/usr/bin/env python3
"""End to end: offline, a protected value whose first copy travels before
its field is rewritten as the field is (the pre-pass preloads the echo
tables, doc/architecture.md "Echoes before their field").

A crafted capture: request 1 carries a session token in its URI's query
string (a field no rule of rules/ids.amon names: kept payload), request 2,
a second later on another connection, carries the same token in its Cookie
header (redacted). Through `amon pcap --read FILE`:

  - the token is in none of the output's frames;
  - the URI's copy reads as the Cookie field's rewrite of it, under the
    shipped redact() and under hash(key=...) (the keyed hash of the whole
    Cookie value, its parts at their places);
  - the stats say how many values were preloaded;
  - with `http.other_headers : redact()` added, a response's `Vary:
    Accept-Encoding` (a catch-all's value, a common word) does not rewrite
    the earlier request's `Accept-Encoding` header name: only identifier
    fields are preloaded.

The same when request 2's head is split over two TCP segments, its Cookie
in the second: the pre-pass follows the stream as a worker holds it, and
preloads the value (`echo_prepass.split_heads`).

Read from standard input (no pre-pass: an input that cannot be read twice),
the earlier copy stays in clear, as live: nothing is known before the field
is seen. That the same input differs shows the pre-pass made the change.

usage: test_echo_prepass.py AMON"""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

S = 1_000_000_000
USER, SERVER = "192.168.1.10", "93.184.216.34"
TOKEN = b"Zq83hF0a9LmX2kPd7"
URI_HEAD = b"GET /login?sid="
COOKIE_HEAD = b"Cookie: sid="
ACCEPT_ENC = b"Accept-Encoding: gzip"
VARY = b"HTTP/1.1 204 No Content\r\nVary: Accept-Encoding\r\n\r\n"


def request(t, cport, head, response=b""):
    """A request whose head is `head`, or its parts one segment each."""
    c, s = 1000, 5000
    tf = L.tcp4_frame
    parts = head if isinstance(head, list) else [head]
    f = [
        tf(USER, SERVER, cport, 80, c, 0, L.SYN),
        tf(SERVER, USER, 80, cport, s, c + 1, L.SYN | L.ACK),
        tf(USER, SERVER, cport, 80, c + 1, s + 1, L.ACK),
    ]
    seq = c + 1
    for p in parts:
        f.append(tf(USER, SERVER, cport, 80, seq, s + 1, L.ACK | L.PSH, p))
        seq += len(p)
    if response:
        f.append(tf(SERVER, USER, 80, cport, s + 1, seq, L.ACK | L.PSH, response))
    return [(t + i * 1_000_000, fr) for i, fr in enumerate(f)]


def build(d, split=False):
    t = 1_700_000_000 * S
    r1 = URI_HEAD + TOKEN + b"&next=%2Fhome HTTP/1.1\r\nHost: example.com\r\n" + ACCEPT_ENC + b"\r\n\r\n"
    r2 = [b"GET /home HTTP/1.1\r\nHost: example.com\r\n", COOKIE_HEAD + TOKEN + b"; theme=dark\r\n\r\n"]
    frames = request(t, 40000, r1, VARY) + request(t + S, 40001, r2 if split else b"".join(r2))
    path = os.path.join(d, "in-split.pcap" if split else "in.pcap")
    L.write_pcap(path, frames)
    return path


def policy(d, name, cookie_rule=None, extra=""):
    """rules/ids.amon as shipped (or with another rule for http.cookie, and
    `extra` rules), with a fixed key beside it."""
    text = L.shipped_ids(d)
    if cookie_rule:
        text = text.replace("http.cookie, http.set_cookie,", "http.set_cookie,")
        text += "http.cookie : " + cookie_rule + "\n"
    text += extra
    p = os.path.join(d, name + ".amon")
    with open(p, "w") as fh:
        fh.write(text)
    return p


def copies(fin, fout):
    """The output's bytes where the input has the token after `sid=` in the
    URI (request 1) and in the Cookie header (request 2)."""
    if len(fin) != len(fout):
        return None, None
    got = []
    for head in (URI_HEAD, COOKIE_HEAD):
        at = [(k, f.index(head + TOKEN) + len(head)) for k, f in enumerate(fin) if head + TOKEN in f]
        if len(at) != 1:
            return None, None
        k, i = at[0]
        got.append(fout[k][i:i + len(TOKEN)])
    return got[0], got[1]


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    d = L.tmpdir("echo-prepass-")
    inp = build(d)
    _, rin = L.read_pcap(inp)
    fin = [r[3] for r in rin]
    fails = []
    if sum(TOKEN in f for f in fin) != 2:
        fails.append("the input should carry the token twice (the test's own frames are wrong)")

    for name, rule, extra in (("ids", None, ""), ("ids-hash", "hash(key=ids)", ""),
                              ("ids-other", None, "http.other_headers : redact()\n")):
        pol = policy(d, name, rule, extra)
        out = os.path.join(d, name + ".pcap")
        sj = os.path.join(d, name + ".json")
        L.run_amon(amon, inp, [("ids", pol, out)], extra=["--stats-json", sj])
        with open(sj) as fh:
            st = json.load(fh)["consumers"][0]
        fout = [r[3] for r in L.read_pcap(out)[1]]
        if [len(f) for f in fout] != [len(f) for f in fin]:
            fails.append(f"{name}: frame lengths changed")
        for i, f in enumerate(fout):
            if TOKEN in f:
                fails.append(f"{name}: frame {i + 1}: the token left in clear")
        u, c = copies(fin, fout)
        if u is None:
            fails.append(f"{name}: the requests' heads are not in the output")
        elif u != c:
            fails.append(f"{name}: the URI's copy {u!r} is not the Cookie field's rewrite {c!r}")
        pre = st.get("echo_prepass", {})
        if pre.get("preloaded", 0) < 2 or pre.get("over_cap") != 0:
            fails.append(f"{name}: echo_prepass {pre}, want the Cookie value and its part preloaded")
        # A catch-all's values are common words (a Vary header's field
        # name): not preloaded, the earlier request's header name stays.
        if sum(b"\r\nAccept-Encoding: " in f for f in fout) != 1:
            fails.append(f"{name}: the first request's Accept-Encoding header name was rewritten")
        L.health(inp, out, name, fails)

    # Request 2's head in two segments, the Cookie in the second: the
    # pre-pass reads the head whole, as a worker holds it.
    sinp = build(d, split=True)
    sfin = [r[3] for r in L.read_pcap(sinp)[1]]
    pol = policy(d, "ids", None)
    out = os.path.join(d, "split.pcap")
    sj = os.path.join(d, "split.json")
    L.run_amon(amon, sinp, [("ids", pol, out)], extra=["--stats-json", sj])
    with open(sj) as fh:
        pre = json.load(fh)["consumers"][0].get("echo_prepass", {})
    fout = [r[3] for r in L.read_pcap(out)[1]]
    for i, f in enumerate(fout):
        if TOKEN in f:
            fails.append(f"split head: frame {i + 1}: the token left in clear")
    u, c = copies(sfin, fout)
    if u is None:
        fails.append("split head: the requests' heads are not in the output")
    elif u != c:
        fails.append(f"split head: the URI's copy {u!r} is not the Cookie field's rewrite {c!r}")
    if pre.get("preloaded", 0) < 2 or pre.get("split_heads", {}).get("whole") != 1:
        fails.append(f"split head: echo_prepass {pre}, want the Cookie value preloaded from one head read whole")
    L.health(sinp, out, "split head", fails)

    # Standard input cannot be read twice: no pre-pass, the copy before its
    # field stays, as live.
    pol = policy(d, "ids", None)
    out = os.path.join(d, "stdin.pcap")
    with open(inp, "rb") as fh:
        r = subprocess.run([amon, "pcap", "--read", "-", "--workers", "1", "--quiet", "--consumer",
                            f"ids={pol}:{out}"], stdin=fh, capture_output=True, timeout=170)
    if r.returncode != 0:
        fails.append(f"amon on standard input failed: {r.stderr.decode(errors='replace')}")
    else:
        u, c = copies(fin, [r[3] for r in L.read_pcap(out)[1]])
        if u != TOKEN:
            fails.append(f"standard input: the URI's copy reads {u!r}; with no pre-pass it stays as it came")
        if c == TOKEN:
            fails.append("standard input: the Cookie field itself left in clear")
    shutil.rmtree(d, ignore_errors=True)
    return L.report(fails, "ok: a protected value's copy before its field is rewritten as the field is, offline")


if __name__ == "__main__":
    sys.exit(main())
