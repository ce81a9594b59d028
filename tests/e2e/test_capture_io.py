#!/usr/bin/env python3
"""Captures in and out the way people hand them over: pipes, gzip, pcapng,
nanosecond clocks, folders.

  inputs  a capture read from a file, from a .gz (recognised by its magic,
          whatever its name), from standard input (plain and gzip) gives the
          same output bytes; amon audit and amon whatif read .gz too; a
          directory, an empty file, a text file, gzip'ed text and a missing
          file are bad input (exit 2, a message naming the file)
  nano    timestamps kept exactly: a nanosecond pcap and a pcapng with
          nanosecond resolution give nanosecond pcap with the same times; a
          microsecond input stays microsecond
  stdout  --write - and --write /dev/stdout put the capture, and only it, on
          standard output (tcpdump reads it from the pipe), the summary on
          standard error
  merge   several --read and folders are one stream in time order through
          one z-store (a name two users send, one per file, is released as
          z=2 says; file by file it never is); --write FOLDER/ mirrors the
          inputs; --glob picks names; files that are not captures are
          reported and counted
  ifaces  a pcapng with an Ethernet and a raw-IP interface: every packet is
          read, each written in its own link type (out.pcap and
          out.raw.pcap)
  ifaces_ng  the same into out.pcapng: one file, an interface block per link
          type, every packet on its own type's interface; the input's
          comments and interface names are not carried over

usage: test_capture_io.py MODE AMON"""

import gzip
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import e2e_lib as L

POLICY = ('key k = file("keys/k.hex")\n'
          "eth.src, eth.dst : zero()\n"
          "ip.client : cryptopan(key=k)\n"
          "ip.server : cryptopan(key=k)\n")


def frames(t0=1_700_000_000_123_456_789, n=4):
    out = []
    for i in range(n):
        out += [(ts + i * 7_000_001, f) for ts, f, _ in
                L.tcp_flow(t0, f"10.0.{i}.1", "192.0.2.7", 40000 + i, data=b"GET / HTTP/1.0\r\n\r\n")]
    return sorted(out, key=lambda x: x[0])


def write_pcap_us(path, fr):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        for ts, b in fr:
            f.write(struct.pack("<IIII", ts // 1_000_000_000, ts % 1_000_000_000 // 1000, len(b), len(b)))
            f.write(b)


def block(btype, body):
    body += b"\0" * ((4 - len(body) % 4) % 4)
    n = 12 + len(body)
    return struct.pack("<II", btype, n) + body + struct.pack("<I", n)


def write_pcapng(path, fr, tsresol=9, linktypes=(1,), which=None):
    """One interface per link type; packet i on interface which(i) (0)."""
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    for lt in linktypes:
        opts = struct.pack("<HHB", 9, 1, tsresol) + b"\0\0\0" + struct.pack("<HH", 0, 0)
        out += block(1, struct.pack("<HHI", lt, 0, 262144) + opts)
    for i, (ts, b) in enumerate(fr):
        units = ts // 10 ** (9 - tsresol)
        iface = which(i) if which else 0
        out += block(6, struct.pack("<IIIII", iface, units >> 32, units & 0xFFFFFFFF, len(b), len(b)) + b)
    with open(path, "wb") as f:
        f.write(out)


def magic(path):
    with open(path, "rb") as f:
        return f.read(4)


NS_MAGIC, US_MAGIC = b"\x4d\x3c\xb2\xa1", b"\xd4\xc3\xb2\xa1"


def pcap(amon, inp, out, stdin=None, extra=(), quiet=True):
    cmd = [amon, "pcap", "--read", inp, "--policy", "p.amon", "--write", out] + (["--quiet"] if quiet else []) + list(extra)
    return subprocess.run(cmd, stdin=stdin, capture_output=True, timeout=120)


def ok(r, fails, what):
    if r.returncode != 0:
        fails.append(f"{what}: exit {r.returncode}: {r.stderr.decode(errors='replace')[-400:]}")
        return False
    return True


def same(a, b):
    with open(a, "rb") as f, open(b, "rb") as g:
        return f.read() == g.read()


def mode_inputs(amon, fails):
    fr = frames()
    L.write_pcap("in.pcap", fr)
    with open("in.pcap", "rb") as f, gzip.open("in.pcap.gz", "wb") as g:
        g.write(f.read())
    shutil.copy("in.pcap.gz", "compressed.cap")  # the name says nothing
    if not ok(pcap(amon, "in.pcap", "plain.pcap"), fails, "plain"):
        return
    for name, inp, stdin in [("gzip", "in.pcap.gz", None), ("gzip named .cap", "compressed.cap", None),
                             ("stdin", "-", "in.pcap"), ("gzip on stdin", "-", "in.pcap.gz")]:
        with open(stdin, "rb") if stdin else open(os.devnull, "rb") as s:
            r = pcap(amon, inp, "o.pcap", stdin=s)
        if ok(r, fails, name) and not same("plain.pcap", "o.pcap"):
            fails.append(f"{name}: the output differs from the plain file's")
    r = subprocess.run([amon, "audit", "--policy", "p.amon", "--original", "in.pcap.gz", "--anonymized", "plain.pcap"],
                       capture_output=True, timeout=120)
    ok(r, fails, "amon audit of a .gz original")
    r = subprocess.run([amon, "whatif", "--read", "in.pcap.gz", "--out", "wi", "--z", "2", "--dt", "1h", "--quiet"],
                       capture_output=True, timeout=120)
    ok(r, fails, "amon whatif of a .gz capture")

    os.makedirs("adir", exist_ok=True)
    open("empty.pcap", "wb").close()
    with open("text.pcap", "w") as f:
        f.write("this is no capture\n")
    with gzip.open("text.pcap.gz", "wt") as f:
        f.write("this is no capture either\n")
    for inp, word in [("adir", "directory"), ("empty.pcap", "empty"), ("text.pcap", "not a capture"),
                      ("text.pcap.gz", "not a capture"), ("missing.pcap", "No such file")]:
        for cmd in ([amon, "pcap", "--read", inp, "--policy", "p.amon", "--write", "bad.pcap"],
                    [amon, "audit", "--policy", "p.amon", "--original", inp, "--anonymized", "plain.pcap"]):
            r = subprocess.run(cmd, capture_output=True, timeout=60)
            err = r.stderr.decode(errors="replace")
            if r.returncode != 2 or inp not in err or word not in err:
                fails.append(f"{' '.join(cmd[1:3])} {inp}: exit {r.returncode} (2 expected), message {err.strip()!r} "
                             f"(should name the file and say {word!r})")
    with open("text.pcap", "rb") as s:
        r = pcap(amon, "-", "bad.pcap", stdin=s)
    if r.returncode != 2:
        fails.append(f"text on standard input: exit {r.returncode}, 2 expected")


def mode_nano(amon, fails):
    fr = frames()
    want_ns = [ts for ts, _ in fr]
    L.write_pcap("ns.pcap", fr)
    write_pcapng("ns.pcapng", fr, tsresol=9)
    write_pcap_us("us.pcap", fr)
    write_pcapng("us.pcapng", fr, tsresol=6)
    with open("ns.pcap", "rb") as f, gzip.open("ns.pcap.gz", "wb") as g:
        g.write(f.read())
    cases = [("nanosecond pcap", "ns.pcap", None, NS_MAGIC, want_ns),
             ("nanosecond pcapng", "ns.pcapng", None, NS_MAGIC, want_ns),
             ("nanosecond pcap.gz on stdin", "-", "ns.pcap.gz", NS_MAGIC, want_ns),
             ("microsecond pcap", "us.pcap", None, US_MAGIC, [t // 1000 * 1000 for t in want_ns]),
             ("microsecond pcapng", "us.pcapng", None, US_MAGIC, [t // 1000 * 1000 for t in want_ns])]
    for name, inp, stdin, mg, want in cases:
        with open(stdin, "rb") if stdin else open(os.devnull, "rb") as s:
            r = pcap(amon, inp, "o.pcap", stdin=s)
        if not ok(r, fails, name):
            continue
        if magic("o.pcap") != mg:
            fails.append(f"{name}: output magic {magic('o.pcap').hex()}, {mg.hex()} expected")
            continue
        _, recs = L.read_pcap("o.pcap")
        got = [t for t, *_ in recs]
        if got != want:
            fails.append(f"{name}: timestamps {got[:3]}..., {want[:3]}... expected")


def mode_stdout(amon, fails):
    fr = frames()
    L.write_pcap("in.pcap", fr)
    if not ok(pcap(amon, "in.pcap", "file.pcap"), fails, "to a file"):
        return
    for target in ["-", "/dev/stdout"]:
        # Not --quiet: the summary must go elsewhere by itself.
        r = pcap(amon, "in.pcap", target, quiet=False)
        if not ok(r, fails, f"--write {target}"):
            continue
        with open("file.pcap", "rb") as f:
            if r.stdout != f.read():
                fails.append(f"--write {target}: standard output is not exactly the capture "
                             f"({len(r.stdout)} bytes, starts {r.stdout[:40]!r})")
        if b"packets" not in r.stderr:
            fails.append(f"--write {target}: no summary on standard error")
    if shutil.which("tcpdump"):
        p = subprocess.Popen([amon, "pcap", "--read", "in.pcap", "--policy", "p.amon", "--write", "-"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        t = subprocess.run(["tcpdump", "-n", "-r", "-"], stdin=p.stdout, capture_output=True, timeout=60)
        p.stdout.close()
        p.wait(timeout=60)
        lines = [x for x in t.stdout.decode().splitlines() if x.strip()]
        if t.returncode != 0 or len(lines) != len(fr) or p.returncode != 0:
            fails.append(f"tcpdump -r - on the pipe: exit {t.returncode}, {len(lines)} packets of {len(fr)}; "
                         f"{t.stderr.decode(errors='replace').strip()[-200:]}")


HOST_POLICY = ('key k = file("keys/k.hex")\n'
               "ip.client : cryptopan(key=k)\n"
               "http.host : zanon(z=2, dt=1h)\n")


def host_flows(t0, client, cport):
    return [(ts, f) for ts, f, _ in L.tcp_flow(t0, client, "192.0.2.80", cport, sport=80,
                                                  data=b"GET / HTTP/1.1\r\nHost: shared-name.example\r\n\r\n")]


def mode_merge(amon, fails):
    L.write_policy(".", "h.amon", HOST_POLICY)
    t0 = 1_700_000_000_000_000_000
    os.makedirs("set/sub", exist_ok=True)
    a = host_flows(t0, "10.0.0.1", 40001) + host_flows(t0 + 20_000_000, "10.0.0.3", 40003)
    b = host_flows(t0 + 10_000_000, "10.0.0.2", 40002)
    L.write_pcap("set/a.pcap", sorted(a))
    L.write_pcap("set/sub/b.pcap", sorted(b))
    with open("set/notes.txt", "w") as f:
        f.write("not a capture\n")
    cmd = [amon, "pcap", "--policy", "h.amon", "--quiet"]
    r = subprocess.run(cmd + ["--read", "set/a.pcap", "--read", "set/sub/b.pcap", "--write", "m.pcap"],
                       capture_output=True, timeout=120)
    if ok(r, fails, "two --read"):
        _, recs = L.read_pcap("m.pcap")
        ts = [t for t, *_ in recs]
        if len(recs) != len(a) + len(b) or ts != sorted(ts):
            fails.append(f"two --read: {len(recs)} records of {len(a) + len(b)}, in time order: {ts == sorted(ts)}")
        hosts = sum(rec[3].count(b"shared-name.example") for rec in recs)
        # Three users send the name in time order 1, 2, 3: the second and third are released.
        if hosts != 2:
            fails.append(f"two --read: the name released {hosts} times, 2 expected (one z-store over the set)")
    r = subprocess.run(cmd + ["--read", "set", "--write", "mirror/"], capture_output=True, timeout=120)
    err = r.stderr.decode(errors="replace")
    if ok(r, fails, "a folder mirrored"):
        for f, n in [("mirror/a.pcap", len(a)), ("mirror/sub/b.pcap", len(b))]:
            got = len(L.read_pcap(f)[1]) if os.path.exists(f) else None
            if got != n:
                fails.append(f"a folder mirrored: {f} has {got} records, {n} expected")
        if "notes.txt" not in err or "1 files skipped" not in err:
            fails.append(f"a folder with a text file: not reported and counted ({err.strip()!r})")
    r = subprocess.run(cmd + ["--read", "set", "--glob", "b.*", "--write", "g.pcap"], capture_output=True, timeout=120)
    if ok(r, fails, "--glob") and len(L.read_pcap("g.pcap")[1]) != len(b):
        fails.append("--glob b.*: not only b.pcap read")


def mode_ifaces(amon, fails):
    fr = frames(n=2)
    raw = [(ts + 1000, f[14:]) for ts, f in fr]  # the same packets as raw IPv4
    both = sorted(fr + raw)
    eth_ts = {ts for ts, _ in fr}
    write_pcapng("two.pcapng", both, tsresol=9, linktypes=(1, 101), which=lambda i: 0 if both[i][0] in eth_ts else 1)
    r = pcap(amon, "two.pcapng", "out.pcap")
    if not ok(r, fails, "pcapng with two link types"):
        return
    for f, lt, n in [("out.pcap", 1, len(fr)), ("out.raw.pcap", 101, len(raw))]:
        if not os.path.exists(f):
            fails.append(f"{f} missing")
            continue
        got_lt, recs = L.read_pcap(f)
        if got_lt != lt or len(recs) != n:
            fails.append(f"{f}: link type {got_lt} ({lt} expected), {len(recs)} records ({n} expected)")
        elif lt == 101 and any(rec[3][0] >> 4 != 4 for rec in recs):
            fails.append(f"{f}: records do not start with an IPv4 header")


def read_blocks(path):
    """[(type, body)] of a little-endian pcapng."""
    d, out, off = open(path, "rb").read(), [], 0
    while off + 12 <= len(d):
        t, n = struct.unpack("<II", d[off:off + 8])
        if n < 12 or off + n > len(d) or struct.unpack("<I", d[off + n - 4:off + n])[0] != n:
            raise ValueError(f"{path}: bad block at {off}")
        out.append((t, d[off + 8:off + n - 4]))
        off += n
    if off != len(d):
        raise ValueError(f"{path}: {len(d) - off} bytes after the last block")
    return out


def options(body):
    """Option codes of a block's options part."""
    codes, off = [], 0
    while off + 4 <= len(body):
        c, n = struct.unpack("<HH", body[off:off + 4])
        if c == 0:
            break
        codes.append(c)
        off += 4 + n + (4 - n % 4) % 4
    return codes


def mode_ifaces_ng(amon, fails):
    fr = frames(n=2)
    raw = [(ts + 1000, f[14:]) for ts, f in fr]
    both = sorted(fr + raw)
    eth_ts = {ts for ts, _ in fr}
    write_pcapng("two.pcapng", both, tsresol=9, linktypes=(1, 101), which=lambda i: 0 if both[i][0] in eth_ts else 1)
    # The input's metadata: a comment on the section, a name on each interface.
    data = open("two.pcapng", "rb").read()
    comment = b"capture at alice-laptop\0"
    shb = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + struct.pack("<HH", 1, len(comment)) +
                comment + b"\0" * ((4 - len(comment) % 4) % 4) + struct.pack("<HH", 0, 0))
    open("two.pcapng", "wb").write(shb + data[28:])
    r = pcap(amon, "two.pcapng", "out.pcapng")
    if not ok(r, fails, "pcapng output of a pcapng with two link types"):
        return
    if os.path.exists("out.raw.pcapng") or os.path.exists("out.raw.pcap"):
        fails.append("a second file for the second link type")
    try:
        blocks = read_blocks("out.pcapng")
    except ValueError as e:
        fails.append(str(e))
        return
    types = [t for t, _ in blocks]
    if types[0] != 0x0A0D0D0A or any(t not in (0x0A0D0D0A, 1, 6) for t in types):
        fails.append(f"blocks other than a section header, interfaces and packets: {sorted(set(types))}")
    if any(t == 0x0A0D0D0A and len(b) != 16 for t, b in blocks):
        fails.append("the section header carries options (the input's comment)")
    ifaces = [b for t, b in blocks if t == 1]
    lts = [struct.unpack("<H", b[:2])[0] for b in ifaces]
    if sorted(lts) != [1, 101]:
        fails.append(f"interface link types {lts}, expected one Ethernet and one raw IPv4")
    if any(set(options(b[8:])) - {9} for b in ifaces):
        fails.append("an interface block carries options other than its time resolution")
    pkts = [struct.unpack("<IIIII", b[:20]) + (b[20:],) for t, b in blocks if t == 6]
    if len(pkts) != len(both):
        fails.append(f"{len(pkts)} packets written, {len(both)} read")
        return
    for (iface, hi, lo, cap, wire, body), (ts, f) in zip(pkts, both):
        lt = lts[iface] if iface < len(lts) else None
        want = 1 if ts in eth_ts else 101
        if lt != want or (hi << 32 | lo) != ts or cap != len(f):
            fails.append(f"packet at {ts}: interface of link type {lt} ({want} expected), time {hi << 32 | lo}, "
                         f"{cap} bytes ({len(f)})")
            break
        if lt == 101 and body[0] >> 4 != 4:
            fails.append("a raw-IP packet does not start with an IPv4 header")
            break
    if shutil.which("tshark"):
        t = subprocess.run(["tshark", "-r", "out.pcapng", "-T", "fields", "-e", "frame.interface_id"],
                           capture_output=True, text=True)
        if t.returncode != 0 or len(t.stdout.split()) != len(both):
            fails.append(f"tshark reads {len(t.stdout.split())} packets (exit {t.returncode}): {t.stderr[-300:]}")


def main():
    mode, amon = sys.argv[1], os.path.abspath(sys.argv[2])
    work = L.tmpdir("capio-")
    L.make_key(work)
    L.write_policy(work, "p.amon", POLICY)
    os.chdir(work)
    fails = []
    {"inputs": mode_inputs, "nano": mode_nano, "stdout": mode_stdout, "merge": mode_merge, "ifaces_ng": mode_ifaces_ng,
     "ifaces": mode_ifaces}[mode](amon, fails)
    return L.report(fails, f"capture_io {mode}: ok")


if __name__ == "__main__":
    sys.exit(main())
