#!/usr/bin/env python3
"""End to end: several `amon pcap` boxes share one z-anonymity view through
a NATS JetStream server started here on a loopback port.

One capture of TCP flows (clients in 10.0.0.0/8, `ip.server : zanon(z=3,
dt=60s, fallback=prefix(24))`) is split by client over K boxes. The truth
is one box seeing every flow: a brute-force model over (time, client,
server). Checked:

* first runs, one box after the other: no box ever releases a server the
  truth hides at that flow (a box knows a subset of what happened);
* second runs (each box restarted: it replays the stream's last dt before
  its ports start): every decision of every box equals the truth's, for
  K = 2 and K = 3, and servers released before the restart are released
  again with no new users;
* the loopback traffic (captured by tcpdump during the runs), read as the
  NATS protocol it is: the stream's messages hold only records of keyed
  hashes and packet times, and nothing else (protocol lines, headers, API
  replies) holds a capture's address in binary or text; no message holds
  one as text;
* with the server down: the box runs, decides on its own counts (never
  earlier than the truth), and reports the outage in --stats-json.

usage: test_zanon_share.py AMON"""

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

S = 1_000_000_000
Z, DT = 3, 60 * S


def reference(flows):
    """Released iff >= Z distinct clients in (t - DT, t], the flow's own
    included. flows: [(t, client, server)] in time order."""
    out = []
    for i, (t, c, s) in enumerate(flows):
        users = {c2 for (t2, c2, s2) in flows[:i + 1] if s2 == s and t - DT < t2 <= t}
        out.append(len(users) >= Z)
    return out


def prefix24(a):
    return ".".join(a.split(".")[:3] + ["0"])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class Server:
    """nats-server -js on a loopback port with its own store directory."""

    def __init__(self, d, port):
        self.d, self.port, self.p = d, port, None

    def start(self):
        self.p = subprocess.Popen(["nats-server", "-js", "-a", "127.0.0.1", "-p", str(self.port),
                                   "-sd", os.path.join(self.d, "js")],
                                  stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.d, "nats.log"), "a"))
        if not wait_port(self.port):
            raise RuntimeError("nats-server did not start")

    def stop(self):
        if self.p and self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.p = None


def build_flows(rng):
    """[(t_ns, client, server)]: 40 clients, 25 servers with few to many
    users, times distinct and 20 ms apart at least, over 10 minutes."""
    clients = [f"10.0.{i // 200}.{i % 200 + 1}" for i in range(40)]
    servers = [f"198.51.{100 + i // 50}.{i % 50 + 10}" for i in range(25)]
    flows, t = [], 5 * S
    for _ in range(400):
        t += rng.randrange(20_000_000, 3 * S)
        srv = servers[min(int(rng.paretovariate(1.2)) - 1, len(servers) - 1)]
        flows.append((t, rng.choice(clients), srv))
    return flows


def frames_of(flows):
    frames, owner = [], []
    for fi, (t, cl, srv) in enumerate(flows):
        for ts, fr, from_client in L.tcp_flow(t, cl, srv, 40000 + fi % 20000):
            frames.append((ts, fr))
            owner.append((fi, from_client))
    order = sorted(range(len(frames)), key=lambda i: frames[i][0])
    return [frames[i] for i in order], [owner[i] for i in order]


def decisions(out_path, flows, owner_in_box):
    """Per flow index of this box: True if the server went out in clear."""
    _, recs = L.read_pcap(out_path)
    if len(recs) != len(owner_in_box):
        raise RuntimeError(f"{out_path}: {len(recs)} packets out, {len(owner_in_box)} in")
    got = {}
    for (fi, from_client), rec in zip(owner_in_box, recs):
        src, dst = L.ipv4_addrs(rec[3])
        srv = dst if from_client else src
        rel = srv == flows[fi][2]
        if not rel and srv != prefix24(flows[fi][2]):
            raise RuntimeError(f"flow {fi}: server {srv} is neither {flows[fi][2]} nor its /24")
        if fi in got and got[fi] != rel:
            raise RuntimeError(f"flow {fi}: packets of one flow decided differently")
        got[fi] = rel
    return got


def run_box(amon, d, name, inp, policy, share_cfg):
    out = os.path.join(d, name + ".out.pcap")
    st = os.path.join(d, name + ".stats.json")
    r = subprocess.run([amon, "pcap", "--read", inp, "--consumer", f"c={policy}:{out}", "--quiet",
                        "--stats-json", st, "--share-config", share_cfg],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"amon {name} failed ({r.returncode}):\n{r.stderr}")
    with open(st) as f:
        return out, json.load(f), r.stderr


def tcp_streams(wire):
    """The loopback capture's TCP payload per direction, in sequence order.
    Returns ({(src, sport, dst, dport): bytes}, problems)."""
    lt, recs = L.read_pcap(wire)
    if lt != 1:
        return {}, [f"loopback capture has link type {lt}, not Ethernet"]
    segs, problems = {}, []
    for _, _, _, b in recs:
        if len(b) < 34 or b[12:14] != b"\x08\x00" or b[23] != 6:
            continue
        ihl = (b[14] & 15) * 4
        tot = int.from_bytes(b[16:18], "big")
        t = 14 + ihl
        key = (b[26:30], int.from_bytes(b[t:t + 2], "big"), b[30:34], int.from_bytes(b[t + 2:t + 4], "big"))
        seq = int.from_bytes(b[t + 4:t + 8], "big")
        syn = b[t + 13] & 2
        data = b[t + (b[t + 12] >> 4) * 4:14 + tot]
        segs.setdefault(key, []).append((seq + (1 if syn else 0), data, syn))
    out = {}
    for key, lst in segs.items():
        base = next((s for s, _, syn in lst if syn), None)
        if base is None:
            problems.append(f"{key}: the capture missed the connection's start")
            continue
        buf, nxt = bytearray(), base
        for seq, data, _ in sorted(lst, key=lambda x: (x[0] - base) % (1 << 32)):
            off = (seq - nxt) % (1 << 32)
            if not data:
                continue
            if off > (1 << 31):  # retransmitted bytes already held
                skip = (nxt - seq) % (1 << 32)
                data = data[skip:]
                off = 0
            if off:
                problems.append(f"{key}: {off} bytes missing from the capture")
                break
            buf += data
            nxt = (nxt + len(data)) % (1 << 32)
        out[key] = bytes(buf)
    return out, problems


MAGIC = 0x315A4D41  # the stream's message magic, "AMZ1"


def nats_parts(stream):
    """Splits one direction of a NATS connection into its protocol text
    (lines, headers, bodies that are not the stream's messages) and the
    bodies that are. Returns (text_bytes, [body], problem or None)."""
    text, bodies, i = bytearray(), [], 0
    while i < len(stream):
        j = stream.find(b"\r\n", i)
        if j < 0:
            return bytes(text), bodies, None  # a line cut by the capture's end
        line = stream[i:j]
        text += line + b"\n"
        i = j + 2
        words = line.split()
        op = words[0].upper() if words else b""
        if op in (b"PUB", b"MSG"):
            hlen, tlen = 0, int(words[-1])
        elif op in (b"HPUB", b"HMSG"):
            hlen, tlen = int(words[-2]), int(words[-1])
        else:
            continue
        if i + tlen + 2 > len(stream):
            return bytes(text), bodies, None
        text += stream[i:i + hlen]
        body = stream[i + hlen:i + tlen]
        if len(body) >= 4 and int.from_bytes(body[:4], "little") == MAGIC:
            bodies.append(body)
        else:
            text += body
        if stream[i + tlen:i + tlen + 2] != b"\r\n":
            return bytes(text), bodies, f"payload of {line[:60]!r} not followed by CRLF"
        i += tlen + 2
    return bytes(text), bodies, None


def check_wire(wire, flows, fails):
    """What left the box on the loopback, read as the NATS protocol."""
    streams, problems = tcp_streams(wire)
    fails.extend("wire: " + p for p in problems)
    text, bodies = bytearray(), []
    for key, data in streams.items():
        t, b, problem = nats_parts(data)
        if problem:
            fails.append(f"wire: {key}: {problem}")
        text += t
        bodies += b
    records = 0
    t_lo, t_hi = flows[0][0] - DT, flows[-1][0] + DT
    for body in bodies:
        count = int.from_bytes(body[4:8], "little")
        if len(body) != 16 + 32 * count:
            fails.append(f"wire: a stream message of {len(body)} bytes says {count} records")
            continue
        for r in range(count):
            rec = body[16 + 32 * r:48 + 32 * r]
            words = [int.from_bytes(rec[k:k + 8], "little") for k in range(0, 32, 8)]
            # Keyed hashes fill 64 bits; an address or a small integer does not.
            if any(w >> 32 == 0 for w in words[:3]):
                fails.append(f"wire: a record field is not a 64-bit hash: {rec.hex()}")
            if not t_lo <= words[3] <= t_hi:
                fails.append(f"wire: a record's time {words[3]} is not a packet time of the capture")
            records += 1
    if not records:
        fails.append("the loopback capture holds no message of the stream: the wire check would say nothing")
    addrs = {c for _, c, _ in flows} | {s for _, _, s in flows}
    allb = b"".join(bodies)
    for a in sorted(addrs):
        for pat in (L.ip4(a), a.encode()):
            if pat in text:
                fails.append(f"{a} appears on the wire outside the stream's records ({pat!r})")
        if a.encode() in allb:
            fails.append(f"{a} appears as text in the stream's records")
    print(f"wire: {len(streams)} directions, {len(text)} bytes of protocol, {len(bodies)} stream messages, "
          f"{records} records, {len(addrs)} addresses searched")


def main():
    amon = L.tool_paths(sys.argv)
    for tool in ("nats-server", "tcpdump"):
        if not shutil.which(tool):
            L.skip(f"{tool} is not on PATH (scripts/setup installs it)")
    d = L.tmpdir("e2e-zshare-")
    rng = random.Random(int(os.environ.get("AMON_SHARE_SEED", "7")))
    flows = build_flows(rng)
    truth = reference(flows)
    frames, owner = frames_of(flows)
    policy = L.write_policy(d, "z.amon", "clients = { 10.0.0.0/8 }\n"
                            f"ip.server : zanon(z={Z}, dt=60s, fallback=prefix(24))\n")
    key = L.make_key(d, "share")
    fails = []
    print(f"{len(flows)} flows, {sum(truth)} released by one box")
    if not (len(flows) // 10 < sum(truth) < len(flows) - len(flows) // 10):
        fails.append("TEST BUG: the truth should release some flows and hide others")

    port = free_port()
    srv = Server(d, port)
    srv.start()
    wire = os.path.join(d, "wire.pcap")
    dump = subprocess.Popen(["tcpdump", "-i", "lo", "-U", "-w", wire, "-s", "0", f"tcp port {port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    try:
        for K in (2, 3):
            cfg = os.path.join(d, f"share{K}.yaml")
            with open(cfg, "w") as f:
                f.write(f"url: nats://127.0.0.1:{port}\nstream: AMON_K{K}\nkey: {key}\n")
            split = {fi: zlib.crc32(f"{flows[fi][1]}/{K}".encode()) % K for fi in range(len(flows))}
            boxes = []
            for b in range(K):
                idx = [i for i in range(len(frames)) if split[owner[i][0]] == b]
                inp = os.path.join(d, f"k{K}-box{b}.pcap")
                L.write_pcap(inp, [frames[i] for i in idx])
                boxes.append((inp, [owner[i] for i in idx]))
            for run in (1, 2):
                for b, (inp, own) in enumerate(boxes):
                    out, stats, err = run_box(amon, d, f"k{K}-box{b}-run{run}", inp, policy, cfg)
                    got = decisions(out, flows, own)
                    sh = stats.get("zanon_share", {})
                    if not sh.get("connected") or not sh.get("replayed"):
                        fails.append(f"K={K} box {b} run {run}: share state {sh}")
                    for fi, rel in got.items():
                        if run == 1 and rel and not truth[fi]:
                            fails.append(f"K={K} box {b} run 1: flow {fi} released earlier than one box would")
                        if run == 2 and rel != truth[fi]:
                            fails.append(f"K={K} box {b} run 2 (after the replay): flow {fi} "
                                         f"{'released' if rel else 'hidden'}, one box: "
                                         f"{'released' if truth[fi] else 'hidden'}")
                    print(f"K={K} box {b} run {run}: {len(got)} flows, {sum(got.values())} released, "
                          f"published {sh.get('published')}, received {sh.get('received')}")
    finally:
        time.sleep(0.5)
        dump.send_signal(signal.SIGINT)
        dump.wait(10)

    # Nothing in clear on the wire: not a client's or a server's address,
    # in 4 bytes or in text. The capture must hold the stream's messages;
    # their records are keyed hashes, whose bytes match any 4-byte pattern
    # by chance, so they are checked by their form instead.
    check_wire(wire, flows, fails)

    # The server down: the box runs on its own counts, safe, and says so.
    srv.stop()
    cfg = os.path.join(d, "down.yaml")
    with open(cfg, "w") as f:
        f.write(f"url: nats://127.0.0.1:{port}\nstream: AMON_DOWN\nkey: {key}\nreplay_timeout: 1s\n")
    inp = os.path.join(d, "all.pcap")
    L.write_pcap(inp, frames)
    out, stats, err = run_box(amon, d, "down", inp, policy, cfg)
    got = decisions(out, flows, owner)
    sh = stats.get("zanon_share", {})
    if sh.get("connected") or sh.get("outages", 0) < 1:
        fails.append(f"server down: the outage is not reported: {sh}")
    if "unreachable" not in err:
        fails.append(f"server down: nothing logged: {err!r}")
    if got != {i: truth[i] for i in range(len(flows))}:
        fails.append("server down: one box with all the traffic should decide as the truth")

    for f in fails[:40]:
        print("FAIL:", f)
    print(f"{len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
