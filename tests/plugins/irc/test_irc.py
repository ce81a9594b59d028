#!/usr/bin/env python3
"""End to end: IRC with CTCP DCC requests through `amon pcap` with the
shipped IDS policy (rules/ids.amon: payload kept, users pseudonymized), on
a session built here: a client inside `clients` registers, sends two DCC
SEND requests (its own address as a decimal number, then another user's,
also inside `clients`), a DCC CHAT naming itself as a dotted quad, and a
third DCC SEND split over two segments inside its number; the server
welcomes it naming its address (RPL_WELCOME's nick!user@host) and relays
another user's DCC CHAT whose prefix names that user by address. The
session runs on IRC's port (6667) and again on another (8000, where
freenode also listened): there the stream is IRC by how it starts.

Checks:
  - every IRC segment is kept at its length (nothing cut: IRC is no
    `addr_carrier` now), every line still there;
  - each DCC request still reads as one, its address in its own form and
    length: the client's own address as the pseudonym its IP header got in
    the same frame (the split one too), the other user's as a pseudonym
    (not its address, not zero);
  - neither user's address is in clear anywhere in the output, in any
    form (decimal, dotted, binary);
  - tshark flags no frame the input did not, checksums stay right;
  - `amon audit` finds no leak; and on a planted copy whose headers hide
    the client but whose first DCC SEND names it as it came (a decimal
    number), it reports the client's address there.

usage: test_irc.py AMON"""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e"))
import e2e_lib as L  # noqa: E402

# The client's dotted quad is 15 characters: any pseudonym's text fits in
# it (a shorter one would become the zero address where the pseudonym's
# text is longer); both decimal numbers have 10 digits, as any fits in.
CLIENT, PEER, SERVER = "192.168.100.105", "192.168.1.77", "198.51.100.10"


def dec(a):
    return str(int.from_bytes(L.ip4(a), "big"))


def ctcp(target, body, prefix=""):
    return (prefix + "PRIVMSG " + target + " :\x01" + body + "\x01\r\n").encode()


def trace(port):
    t, ms = 1_700_000_000_000_000_000, 1_000_000
    cport, c_seq, s_seq = 50123, 1000, 5000
    frames = [(t, L.tcp4_frame(CLIENT, SERVER, cport, port, c_seq, 0, L.SYN)),
              (t + ms, L.tcp4_frame(SERVER, CLIENT, port, cport, s_seq, c_seq + 1, L.SYN | L.ACK)),
              (t + 2 * ms, L.tcp4_frame(CLIENT, SERVER, cport, port, c_seq + 1, s_seq + 1, L.ACK))]
    c_seq, s_seq = c_seq + 1, s_seq + 1
    split = ctcp("alice", "DCC SEND big.iso " + dec(CLIENT) + " 5002 99")
    cut = split.index(dec(CLIENT).encode()) + 5
    segs = [
        (True, b"NICK bob\r\nUSER bob 0 * :Bob\r\n"),
        (False, (":irc.example 001 bob :Welcome to the network bob!bob@" + CLIENT + "\r\n").encode()),
        (True, ctcp("alice", "DCC SEND report.pdf " + dec(CLIENT) + " 5000 123456")),
        (True, ctcp("alice", "DCC SEND notes.txt " + dec(PEER) + " 5001 42")),
        (True, ctcp("alice", "DCC CHAT chat " + CLIENT + " 6001")),
        (True, split[:cut]),
        (True, split[cut:]),
        (False, ctcp("bob", "DCC CHAT chat " + dec(PEER) + " 6000", ":alice!alice@" + PEER + " ")),
    ]
    at = t + 3 * ms
    for from_client, pl in segs:
        if from_client:
            frames.append((at, L.tcp4_frame(CLIENT, SERVER, cport, port, c_seq, s_seq, L.ACK | L.PSH, pl)))
            c_seq += len(pl)
        else:
            frames.append((at, L.tcp4_frame(SERVER, CLIENT, port, cport, s_seq, c_seq, L.ACK | L.PSH, pl)))
            s_seq += len(pl)
        at += ms
    return frames, segs


DCC = re.compile(rb"\x01DCC (SEND|CHAT) (\S+) (\S+) (\d+)")


def payload(frame):
    ihl = (frame[14] & 15) * 4
    off = 14 + ihl + (frame[14 + ihl + 12] >> 4) * 4
    return frame[off:]


def addr_of(text):
    """The address a DCC request's address text names."""
    s = text.decode()
    if s.isdigit():
        return L.ip4str(int(s).to_bytes(4, "big"))
    if not re.fullmatch(r"\d{1,3}(\.\d{1,3}){3}", s):
        return None
    return ".".join(str(int(x)) for x in s.split("."))


def main():
    amon = L.tool_paths(sys.argv)
    L.need_tshark()
    work = L.tmpdir("irc")
    pol = L.write_policy(work, "ids.amon", L.shipped_ids(work))
    fails, said = [], []
    for port in (6667, 8000):
        n = len(fails)
        summary = session(amon, work, pol, port, fails)
        said.append(f"port {port}: " + (summary if len(fails) == n else "failed"))
        fails[n:] = [f"port {port}: {f}" for f in fails[n:]]
    return L.report(fails, "irc: ok; " + "; ".join(said))


def session(amon, work, pol, port, fails):
    inp, out = os.path.join(work, f"irc-{port}.pcap"), os.path.join(work, f"irc-{port}-ids.pcap")
    frames, segs = trace(port)
    L.write_pcap(inp, frames)
    L.run_amon(amon, inp, [("ids", pol, out)])
    _, rin = L.read_pcap(inp)
    _, rout = L.read_pcap(out)
    if len(rout) != len(rin):
        fails.append(f"{len(rin)} frames in, {len(rout)} out")
        return ""
    own, other, n_split = 0, 0, 0
    stream = b""
    for i, (a, b) in enumerate(zip(rin, rout)):
        fi, fo = a[3], b[3]
        pi, po = payload(fi), payload(fo)
        if len(pi) != len(po):
            fails.append(f"frame {i + 1}: payload of {len(pi)} bytes became {len(po)}")
            continue
        if not pi:
            continue
        if pi.count(b"\r\n") != po.count(b"\r\n") or po.count(b"\x00") > pi.count(b"\x00"):
            fails.append(f"frame {i + 1}: lines not kept: {po[:80]!r}")
        src_out = L.ipv4_addrs(fo)[0]
        for m in DCC.finditer(po):
            got = addr_of(m.group(3))
            orig = DCC.search(pi[m.start():])
            was = addr_of(orig.group(3)) if orig else None
            if len(orig.group(3)) != len(m.group(3)):
                fails.append(f"frame {i + 1}: {orig.group(3)!r} became {m.group(3)!r}, another length")
            if was == CLIENT and L.ipv4_addrs(fi)[0] == CLIENT:
                own += 1
                if got != src_out:
                    fails.append(f"frame {i + 1}: the client's DCC address became {got}, its header {src_out}")
            elif was == PEER:
                other += 1
                if got in (PEER, None, "0.0.0.0"):
                    fails.append(f"frame {i + 1}: the other user's DCC address came out as {got}")
        stream += po if L.ipv4_addrs(fi)[0] == CLIENT else b""
    # The split request, read across its two segments.
    m = re.search(rb"DCC SEND big\.iso (\d+) 5002", stream)
    if not m:
        fails.append("the DCC request split over two segments is not in the output's client stream")
    else:
        n_split = 1
        if len(m.group(1)) != len(dec(CLIENT)) or addr_of(m.group(1)) != L.ipv4_addrs(rout[-2][3])[0]:
            fails.append(f"the split request's address came out as {m.group(1)!r}")
    if own < 2 or other < 2:
        fails.append(f"DCC requests read in the output: {own} naming the client (2+ expected), "
                     f"{other} naming the other user (2 expected)")
    for i, (_, _, _, fo) in enumerate(rout):
        for a in (CLIENT, PEER):
            for form in (a.encode(), dec(a).encode(), L.ip4(a)):
                if form in fo:
                    fails.append(f"frame {i + 1}: {a} in clear ({form!r})")
    L.health(inp, out, "irc", fails)
    r = subprocess.run([amon, "audit", "--policy", pol, "--original", inp, "--anonymized", out],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fails.append(f"amon audit: exit {r.returncode}: {r.stdout[-800:]}{r.stderr[-400:]}")
    # Planted: the client's first DCC SEND left as it came (its decimal
    # number) in a copy of the output whose headers hide the client: only
    # the audit's reading of DCC numbers can see it there.
    planted = os.path.join(work, f"planted-{port}.pcap")
    num, frames = dec(CLIENT).encode(), []
    for (ts, _, _, fi), (_, _, _, fo) in zip(rin, rout):
        if b"report.pdf " + num in fi:
            at = fi.index(num)
            fo = fo[:at] + num + fo[at + len(num):]
        frames.append((ts, fo))
    L.write_pcap(planted, frames)
    r = subprocess.run([amon, "audit", "--policy", pol, "--original", inp, "--anonymized", planted, "--format", "json"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 1 or CLIENT not in r.stdout or "decimal number" not in r.stdout:
        fails.append(f"amon audit on the planted copy: exit {r.returncode} (1 expected, naming {CLIENT} as a decimal "
                     f"number): {r.stdout[-600:]}{r.stderr[-300:]}")
    return (f"{own} DCC addresses as their headers, {other} of another user rewritten, {n_split} split request, "
            f"audit clean; the planted DCC number reported")


if __name__ == "__main__":
    sys.exit(main())
