#!/usr/bin/env python3
"""A user is a user in every position.

1. With `clients` set and `ip.server : keep()` (rules/ids.amon,
   rules/flows.amon): an address inside `clients` takes ip.client's action
   also as a tunnel endpoint (Teredo: its outer IPv4 header), which has no
   rule of its own. On tunnel-teredo.pcap and mixed-capture2.pcap, no
   address of the input inside `clients` is left in clear in any IP header
   of the output.
2. With no `clients`: a host seen initiating a flow is a user also where
   it accepts connections; ip.server's z-anonymity never releases it,
   however many peers connect to it. A real server connected by as many
   peers is still released (the check is not vacuous).
3. The same with two workers, over which a host's flows are spread: what
   the host initiated (TCP, or only datagrams) is learnt in input order for
   every worker, so none of its incoming flows is released on a worker its
   own flows did not reach. With a server rule that counts nothing
   (prefix), the output is the one worker's, byte for byte, run after run.
4. A Teredo origin indication (the port and IPv4 address of the host a
   relay heard from, XORed with all ones) takes the tunnel endpoints' rule:
   under `tunnel.addr : prefix(16)` every origin address of
   tunnel-teredo.pcap leaves as its /16, its port kept.
5. A Teredo bubble's alternate address trailer (MS-TERD: the client's
   other addresses in clear, its LAN address among them) takes the same
   rule: on mixed-capture2.pcap's bubbles and a crafted one, each leaves
   as its /16 under `tunnel.addr : prefix(16)`, and as the outer source's
   pseudonym under the ids rules; bytes after the bubble that are no known
   trailer are zeroed; the UDP checksum stays right.
6. With `clients` set, an address outside it that is a flow's client (no
   end inside) is a user everywhere in that output, from its first record
   when the input is a file (read twice), from its own flow on when it is
   standard input.
8. A PPTP client outside `clients` whose server is inside it is a server
   on its TCP control connection (the inside end is the client there) and
   takes ip.client's rule on its GRE: read from a file it is a user from
   its first record (the pre-pass saw its GRE), its control connection
   included; from standard input it is kept there until its GRE.

usage: test_clients_everywhere.py AMON"""

import ipaddress
import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import e2e_lib as L

CLIENTS = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]
IDS = ('key k = file("keys/k.hex")\n'
       "clients = { 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 }\n"
       "ip.client : cryptopan(key=k)\n"
       "ip.server : keep()\n")


def header_addrs(path):
    out = set()
    for row in L.tshark_fields(path, ["ip.src", "ip.dst"]):
        out.update(a for col in row[1:] for a in col)
    return out


def inside(a):
    ip = ipaddress.ip_address(a)
    return any(ip in n for n in CLIENTS)


def main():
    amon = os.path.abspath(L.tool_paths(sys.argv))
    L.need_tshark()
    pdir = L.pcaps_dir()
    work = L.tmpdir("clients-")
    L.make_key(work)
    os.chdir(work)
    fails = []
    pol = L.write_policy(work, "ids.amon", IDS)
    for cap in ("tunnel-teredo.pcap", "mixed-capture2.pcap"):
        inp = os.path.join(pdir, cap)
        if not os.path.exists(inp):
            L.skip(f"{inp} missing")
        out = os.path.join(work, cap + ".out.pcap")
        L.run_amon(amon, inp, [("ids", pol, out)])
        users = {a for a in header_addrs(inp) if inside(a)}
        clear = sorted(users & header_addrs(out))
        if clear:
            fails.append(f"{cap}: {len(clear)} of {len(users)} client addresses in clear in IP headers: {clear[:5]}")
        print(f"{cap}: {len(users)} client addresses in the input's IP headers, {len(clear)} in clear")

    # 2: no clients; U initiates one flow, then 5 peers connect to it; S
    # (a real server) gets 5 peers too.
    pol2 = L.write_policy(work, "meter.amon",
                          'key k = file("keys/k.hex")\n'
                          "ip.client : cryptopan(key=k)\n"
                          "ip.server : zanon(z=2, dt=1h, fallback=prefix(24))\n")
    U, S = "10.9.8.7", "93.184.216.34"
    frames = []
    t = 1_700_000_000 * 10**9
    frames += L.tcp_flow(t, U, "203.0.113.80", 40000)
    for i in range(5):
        t += 10**9
        frames += L.tcp_flow(t, f"198.51.100.{10 + i}", U, 50000 + i, sport=6881)
        t += 10**9
        frames += L.tcp_flow(t, f"198.51.100.{20 + i}", S, 51000 + i, sport=443)
    inp = os.path.join(work, "p2p.pcap")
    L.write_pcap(inp, [(ts, f) for ts, f, _ in frames])
    out = os.path.join(work, "p2p.out.pcap")
    L.run_amon(amon, inp, [("m", pol2, out)])
    _, recs = L.read_pcap(out)
    seen = {a for r in recs for a in (L.ipv4_addrs(r[3]) or ())}
    if U in seen:
        fails.append(f"p2p: {U}, which initiated a flow, released in clear as a server")
    if S not in seen:
        fails.append(f"p2p: the real server {S} was not released (the check proves nothing)")
    print(f"p2p: user in clear: {U in seen}; server released: {S in seen}")
    pol3 = L.write_policy(work, "prefix.amon",
                          'key k = file("keys/k.hex")\n'
                          "ip.client : cryptopan(key=k)\n"
                          "ip.server : prefix(24)\n")
    spread_workers(amon, work, pol2, pol3, fails)
    initiates_later(amon, work, pol3, fails)

    # 4: Teredo origin indications.
    inp = os.path.join(pdir, "tunnel-teredo.pcap")
    pol4 = L.write_policy(work, "teredo.amon", "tunnel.addr : prefix(16)\n")
    out = os.path.join(work, "teredo-origin.out.pcap")
    L.run_amon(amon, inp, [("t", pol4, out)])
    fields = ["teredo.orig.addr", "teredo.orig.port"]
    before = {r[0]: r[1:] for r in L.tshark_fields(inp, fields) if r[1]}
    after = {r[0]: r[1:] for r in L.tshark_fields(out, fields) if r[1]}
    if not before:
        fails.append("teredo: no origin indication in the input (the check proves nothing)")
    for frame, (addr, port) in sorted(before.items()):
        want = str(ipaddress.ip_network(addr[0] + "/16", strict=False).network_address)
        got = after.get(frame)
        if not got or got[0] != [want] or got[1] != port:
            fails.append(f"teredo frame {frame}: origin {addr[0]}:{port[0]} left as {got}, expected {want}:{port[0]}")
    print(f"teredo: {len(before)} origin indications, each as its /16")
    teredo_trailers(amon, work, pdir, pol, pol4, fails)
    outside_users(amon, work, pol, fails)
    pptp_client(amon, work, pol, fails)
    sys.exit(L.report(fails, "ok"))


def bubble_trailers(fr):
    """(offset of the trailers, [offsets of alternate IPv4 addresses]) of a
    Teredo bubble over Ethernet/IPv4 (UDP 3544 at either end), or None."""
    if fr[12:14] != b"\x08\x00" or fr[23] != 17:
        return None
    u = 14 + (fr[14] & 0xF) * 4
    sp, dp, ulen = struct.unpack("!HHH", fr[u:u + 6])
    if 3544 not in (sp, dp) or len(fr) < u + 48 or fr[u + 8] >> 4 != 6 or fr[u + 14] != 59:
        return None
    at, end = u + 48 + struct.unpack("!H", fr[u + 12:u + 14])[0], min(len(fr), u + ulen)
    start, addrs = at, []
    while at + 2 <= end and fr[at] in (1, 3, 4, 5):
        if fr[at] == 3:
            addrs += range(at + 4, at + 2 + fr[at + 1], 6)
        at += 2 + fr[at + 1]
    return (start, addrs) if start < end else None


def teredo_trailers(amon, work, pdir, pol_ids, pol16, fails):
    T = "10.7.7.7"
    bubble = struct.pack("!IHBB", 0x60000000, 0, 59, 255) + ipaddress.ip_address("fe80::8000:f227:62c7:9547").packed \
        + ipaddress.ip_address("2001:0:9d38:90d7:4d2:26a2:bc03:7cc1").packed
    kept = [bytes([1, 4, 1, 2, 3, 4]), bytes([4, 4, 1, 0, 0, 0]), bytes([5, 2, 0x7a, 0x96])]  # nonce, ND, port
    trailers = kept[0] + bytes([3, 8, 0, 0]) + L.ip4(T) + bytes([0x30, 0x39]) + kept[1] + kept[2]
    junk = bytes([9, 4]) + L.ip4("10.7.7.8")
    crafted = os.path.join(work, "bubble.pcap")
    L.write_pcap(crafted, [(1_700_000_000 * 10**9, L.udp4_frame(T, "157.56.144.215", 49999, 3544,
                                                                   bubble + trailers + junk))])
    n = 0
    for inp in (os.path.join(pdir, "mixed-capture2.pcap"), crafted):
        recs_in = L.read_pcap(inp)[1]
        for name, pol in (("ids", pol_ids), ("p16", pol16)):
            out = os.path.join(work, os.path.basename(inp) + "." + name + ".pcap")
            L.run_amon(amon, inp, [("t", pol, out)])
            recs_out = L.read_pcap(out)[1]
            by_ts = {r[0]: r[3] for r in recs_out}
            for r in recs_in:
                fr, bt = r[3], bubble_trailers(r[3])
                if not bt or r[0] not in by_ts:
                    continue
                o, (start, addrs) = by_ts[r[0]], bt
                n += name == "ids"
                for a in addrs:
                    v = ipaddress.ip_address(fr[a:a + 4])
                    want = L.ip4(str(ipaddress.ip_network(f"{v}/16", strict=False).network_address)) \
                        if name == "p16" else (o[26:30] if fr[a:a + 4] == fr[26:30] else None)
                    if o[a:a + 4] == fr[a:a + 4] or (want and o[a:a + 4] != want) or o[a + 4:a + 6] != fr[a + 4:a + 6]:
                        fails.append(f"{os.path.basename(inp)} {name}: alternate address {v} left as "
                                     f"{ipaddress.ip_address(o[a:a + 4])}, port {o[a + 4:a + 6].hex()}")
                if inp == crafted and L.ip4("10.7.7.8") in o:
                    fails.append(f"bubble {name}: bytes after the known trailers kept")
                if inp == crafted and not all(k in o[start:] for k in kept):
                    fails.append(f"bubble {name}: the nonce, neighbour discovery or random port trailer changed")
            bad = [row[0] for row in L.tshark_fields(out, ["udp.checksum.status"], "udp.port == 3544", L.CHECKS)
                   if row[1] != ["1"]]
            if bad:
                fails.append(f"{os.path.basename(inp)} {name}: UDP checksum not right in frames {bad[:5]}")
    if n < 3:
        fails.append(f"teredo: {n} bubbles with trailers (the check proves nothing)")
    print(f"teredo: {n} bubbles with trailers, alternate addresses rewritten")


def flow_addrs(out, n):
    """The IPv4 addresses of each of the output's n five-packet flows."""
    _, recs = L.read_pcap(out)
    return [{a for rec in recs[i * 5:(i + 1) * 5] for a in (L.ipv4_addrs(rec[3]) or ())} for i in range(n)]


def from_stdin(amon, inp, pol, out, n, label, fails):
    """amon reading inp from standard input (no pre-pass): flow_addrs of
    its output, or None after noting the failure."""
    with open(inp, "rb") as f:
        r = subprocess.run([amon, "pcap", "--read", "-", "--quiet", "--consumer", f"c={pol}:{out}"], stdin=f,
                           capture_output=True, text=True, timeout=170)
    if r.returncode != 0:
        fails.append(f"{label} from stdin: amon exit {r.returncode}: {r.stderr}")
        return None
    return flow_addrs(out, n)


def outside_users(amon, work, pol, fails):
    """6: with `clients` set, A (outside) is first a server (C connects to
    it), then the client of a flow to B (no end inside: its initiator is
    the client), then a server of an inside host. Read from a file, A is
    pseudonymized in all three (the pre-pass learnt it before the first
    record), with one worker or two; C too; B, a pure server, stays in
    clear (the check is not vacuous). From standard input there is no
    pre-pass: A is kept in its first flow, a user from its own on."""
    A, B, C, U = "203.0.113.5", "192.0.2.9", "198.51.100.7", "10.1.1.1"
    t = 1_700_000_000 * 10**9
    flows = [L.tcp_flow(t, C, A, 40000), L.tcp_flow(t + 10**9, A, B, 40001, sport=80),
             L.tcp_flow(t + 2 * 10**9, U, A, 40002)]
    inp = os.path.join(work, "outside.pcap")
    L.write_pcap(inp, [(ts, f) for fl in flows for ts, f, _ in fl])
    for workers in (1, 2):
        out = os.path.join(work, f"outside-{workers}.out.pcap")
        stats = os.path.join(work, f"outside-{workers}.json")
        L.run_amon(amon, inp, [("ids", pol, out)], workers=workers, extra=("--stats-json", stats))
        _, recs = L.read_pcap(out)
        seen = {a for r in recs for a in (L.ipv4_addrs(r[3]) or ())}
        with open(stats) as f:
            users = json.load(f)["consumers"][0].get("users")
        # A and C, each learnt by the pre-pass and again by the one worker.
        want = {"learnt": 2, "sets_saturated": 0, "prepass_learnt": 2, "prepass_sets_saturated": 0}
        if workers == 1 and (not users or any(users.get(k) != v for k, v in want.items())):
            fails.append(f"outside users: --stats-json says {users}, expected {want}")
        for who, a in (("A (client of one flow)", A), ("C (client)", C), ("U (inside clients)", U)):
            if a in seen:
                fails.append(f"outside users, {workers} worker(s): {who} {a} in clear")
        if B not in seen:
            fails.append(f"outside users, {workers} worker(s): the pure server {B} not kept (the check proves nothing)")
        print(f"outside users, {workers} worker(s): A in clear {A in seen}, B kept {B in seen}")
    per_flow = from_stdin(amon, inp, pol, os.path.join(work, "outside-stdin.out.pcap"), 3, "outside users", fails)
    if per_flow is None:
        return
    got = [A in s for s in per_flow]
    if got != [True, False, False]:
        fails.append(f"outside users from stdin: A in clear per flow {got}, expected [True, False, False] "
                     "(kept until its own flow, a user from then on)")
    print(f"outside users from stdin: A in clear per flow {got}")


def gre_v1_frame(src, dst, call_id, seq, inner_ip):
    """Ethernet/IPv4/PPTP enhanced GRE (key and sequence number) carrying
    PPP (address, control, protocol IPv4) around `inner_ip`."""
    ppp = b"\xff\x03\x00\x21" + inner_ip
    gre = struct.pack("!HHHHI", 0x3001, 0x880B, len(ppp), call_id, seq) + ppp
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(gre), 1, 0x4000, 64, 47, 0, L.ip4(src), L.ip4(dst))
    iph = iph[:10] + struct.pack("!H", L._csum(iph)) + iph[12:]
    return b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00" + iph + gre


def pptp_client(amon, work, pol, fails):
    """8: P (outside `clients`) opens a PPTP control connection to V
    (inside: the flow's client by `clients`, P its server), then sends GRE
    to V. Read from a file, P is in clear in no IP header (the pre-pass
    learnt it from its GRE); from standard input its control connection
    keeps it (the check is not vacuous)."""
    P, V = "203.0.113.77", "192.168.7.1"
    t = 1_700_000_000 * 10**9
    ctl = L.tcp_flow(t, P, V, 40000, sport=1723, data=b"\x00\x9c\x00\x01\x1a\x2b\x3c\x4d")
    inner = L.udp4_frame("10.200.0.5", "198.51.100.53", 5353, 53, b"\x12\x34" + b"\0" * 10)[14:]
    gre = [(t + 10**9 + i * 10**6, gre_v1_frame(P, V, 0x1234, i + 1, inner)) for i in range(2)]
    inp = os.path.join(work, "pptp.pcap")
    L.write_pcap(inp, [(ts, f) for ts, f, _ in ctl] + gre)
    out = os.path.join(work, "pptp.out.pcap")
    L.run_amon(amon, inp, [("ids", pol, out)])
    _, recs = L.read_pcap(out)
    clear = [i + 1 for i, r in enumerate(recs) if P in (L.ipv4_addrs(r[3]) or ())]
    if clear:
        fails.append(f"pptp: the client {P} in clear in frames {clear}")
    print(f"pptp: client in clear in frames {clear}")
    with open(inp, "rb") as f:
        r = subprocess.run([amon, "pcap", "--read", "-", "--quiet", "--consumer",
                            f"c={pol}:{os.path.join(work, 'pptp-stdin.out.pcap')}"], stdin=f,
                           capture_output=True, text=True, timeout=170)
    if r.returncode != 0:
        fails.append(f"pptp from stdin: amon exit {r.returncode}: {r.stderr}")
        return
    _, recs = L.read_pcap(os.path.join(work, "pptp-stdin.out.pcap"))
    clear = [i + 1 for i, r in enumerate(recs) if P in (L.ipv4_addrs(r[3]) or ())]
    if not clear or max(clear) > len(ctl):
        fails.append(f"pptp from stdin: client in clear in frames {clear}, expected its control connection's only")
    print(f"pptp from stdin: client in clear in frames {clear}")


def initiates_later(amon, work, pol_prefix, fails):
    """7: no clients; A first accepts a flow (C connects to it), then
    initiates one to B. Read from a file, A takes the client's rule in both
    (the pre-pass saw it initiate), with one worker or two; B, a pure
    server, takes its /24 (the check is not vacuous). From standard input
    there is no pre-pass: A is a server until it initiates."""
    A, B, C = "203.0.113.5", "192.0.2.9", "198.51.100.7"
    t = 1_700_000_000 * 10**9
    flows = [L.tcp_flow(t, C, A, 40000), L.tcp_flow(t + 10**9, A, B, 40001)]
    inp = os.path.join(work, "later.pcap")
    L.write_pcap(inp, [(ts, f) for fl in flows for ts, f, _ in fl])
    a24, b24 = "203.0.113.0", "192.0.2.0"

    for workers in (1, 2):
        out = os.path.join(work, f"later-{workers}.out.pcap")
        stats = os.path.join(work, f"later-{workers}.json")
        L.run_amon(amon, inp, [("p", pol_prefix, out)], workers=workers, extra=("--stats-json", stats))
        per_flow = flow_addrs(out, 2)
        if any(a24 in s or A in s for s in per_flow):
            fails.append(f"initiates later, {workers} worker(s): A as a server's /24 or in clear: {per_flow}")
        if b24 not in per_flow[1]:
            fails.append(f"initiates later, {workers} worker(s): the pure server B did not take its /24: {per_flow}")
        with open(stats) as f:
            users = json.load(f)["consumers"][0].get("users") or {}
        if users.get("prepass_learnt") != 2:  # C and A
            fails.append(f"initiates later, {workers} worker(s): --stats-json users {users}, 2 learnt expected")
        print(f"initiates later, {workers} worker(s): A's /24 per flow {[a24 in s for s in per_flow]}")
    per_flow = from_stdin(amon, inp, pol_prefix, os.path.join(work, "later-stdin.out.pcap"), 2, "initiates later",
                          fails)
    if per_flow is None:
        return
    got = [a24 in s for s in per_flow]
    if got != [True, False]:
        fails.append(f"initiates later from stdin: A's /24 per flow {got}, expected [True, False]")
    print(f"initiates later from stdin: A's /24 per flow {got}")


def spread_workers(amon, work, pol, pol_prefix, fails):
    # H opens one TCP flow, then 12 peers connect to it, then it opens more
    # to several peers; D only ever sends datagrams (DNS queries), then 12
    # peers connect to it; S, a real server, takes 12 peers too. Twelve
    # flows per host land on both of two workers (symmetric hash) all but
    # surely.
    H, D, S = "10.1.2.3", "10.4.5.6", "93.184.216.34"
    frames = []
    t = 1_700_000_000 * 10**9
    frames += L.tcp_flow(t, H, "203.0.113.80", 40000)
    t += 10**9
    frames.append((t, L.udp4_frame(D, "198.51.100.53", 53001, 53, b"\x12\x34\x01\x00\x00\x01" + bytes(6)), True))
    for i in range(12):
        t += 10**9
        frames += L.tcp_flow(t, f"198.51.100.{10 + i}", H, 50000 + i, sport=6881)
        t += 10**9
        frames += L.tcp_flow(t, f"198.51.100.{40 + i}", D, 52000 + i, sport=6882)
        t += 10**9
        frames += L.tcp_flow(t, f"198.51.100.{70 + i}", S, 51000 + i, sport=443)
    for i in range(6):
        t += 10**9
        frames += L.tcp_flow(t, H, f"203.0.113.{100 + i}", 41000 + i)
    inp = os.path.join(work, "spread.pcap")
    L.write_pcap(inp, [(ts, f) for ts, f, _ in frames])
    def addrs(out):
        _, recs = L.read_pcap(out)
        return {a for r in recs for a in (L.ipv4_addrs(r[3]) or ())}

    # z-anonymity: the users are never released. (Which of S's flows
    # reaches z first depends on which worker counts first: not compared.)
    for workers in (1, 2):
        out = os.path.join(work, f"spread.z.w{workers}.pcap")
        L.run_amon(amon, inp, [("m", pol, out)], workers=workers)
        seen = addrs(out)
        for u in (H, D):
            if u in seen:
                fails.append(f"spread, {workers} worker(s): {u}, which initiated flows, released in clear as a server")
        if S not in seen:
            fails.append(f"spread, {workers} worker(s): the real server {S} was not released (the check proves nothing)")
        print(f"spread, {workers} worker(s): users in clear: {sorted({H, D} & seen)}; server released: {S in seen}")
    # A server rule without counts: the users take the client's rule on
    # every worker, the server its prefix, and the runs agree byte for byte.
    outs = {}
    for workers, run in ((1, 0), (2, 0), (2, 1), (2, 2)):
        out = os.path.join(work, f"spread.p.w{workers}.{run}.pcap")
        L.run_amon(amon, inp, [("m", pol_prefix, out)], workers=workers)
        with open(out, "rb") as f:
            outs[(workers, run)] = f.read()
        seen = addrs(out)
        for u in (H, D):
            if u.rsplit(".", 1)[0] + ".0" in seen:
                fails.append(f"spread (prefix), {workers} worker(s): {u}, which initiated flows, took the server's prefix")
        if "93.184.216.0" not in seen:
            fails.append(f"spread (prefix), {workers} worker(s): the real server {S} did not take its prefix")
    for run in (1, 2):
        if outs[(2, run)] != outs[(2, 0)]:
            fails.append(f"spread (prefix): 2-worker run {run} differs from run 0")
    if outs[(1, 0)] != outs[(2, 0)]:
        fails.append("spread (prefix): 1 and 2 workers give different outputs")
    print(f"spread (prefix): 1 worker and 3 runs with 2 workers byte-identical: {len(set(outs.values())) == 1}")


if __name__ == "__main__":
    main()
