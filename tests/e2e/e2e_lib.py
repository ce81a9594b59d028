"""Shared helpers for the end-to-end tests: a classic-pcap reader/writer,
frame builders, running amon, and tshark field extraction.

Kept to the Python standard library so the tests run wherever the engine
builds (CI images have no scapy)."""

import hashlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile

SKIP = 77  # ctest SKIP_RETURN_CODE


def skip(msg):
    print("SKIPPED: " + msg)
    sys.exit(SKIP)


# ---------------------------------------------------------------- pcap I/O

def read_pcap(path):
    """Returns (linktype, [(ts_ns, caplen, wirelen, bytes)]). Handles both
    byte orders and micro/nanosecond magics; stops at a truncated record."""
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    table = {b"\xd4\xc3\xb2\xa1": ("<", 1000), b"\xa1\xb2\xc3\xd4": (">", 1000),
             b"\x4d\x3c\xb2\xa1": ("<", 1), b"\xa1\xb2\x3c\x4d": (">", 1)}
    if magic not in table:
        raise ValueError(f"{path}: not a classic pcap")
    e, mul = table[magic]
    linktype = struct.unpack(e + "I", data[20:24])[0]
    recs, off = [], 24
    while off + 16 <= len(data):
        sec, frac, cap, wire = struct.unpack(e + "IIII", data[off:off + 16])
        if off + 16 + cap > len(data):
            break
        recs.append((sec * 1_000_000_000 + frac * mul, cap, wire, data[off + 16:off + 16 + cap]))
        off += 16 + cap
    return linktype, recs


def write_pcap(path, frames):
    """frames: [(ts_ns, bytes)], written as nanosecond pcap (amon keeps the
    packet's time, and the tests reason about exact window edges)."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1))
        for ts, b in frames:
            f.write(struct.pack("<IIII", ts // 1_000_000_000, ts % 1_000_000_000, len(b), len(b)))
            f.write(b)


# ---------------------------------------------------------------- frames

def _csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ip4(s):
    return bytes(int(x) for x in s.split("."))


def ip4str(b):
    return ".".join(str(x) for x in b)


def tcp4_frame(src, dst, sport, dport, seq, ack, flags, payload=b"", ipid=1):
    """Ethernet/IPv4/TCP with correct IPv4 and TCP checksums."""
    s, d = ip4(src), ip4(dst)
    off_flags = (5 << 12) | flags
    tcp = struct.pack("!HHIIHHHH", sport, dport, seq, ack, off_flags, 65535, 0, 0) + payload
    ck = _csum(s + d + struct.pack("!BBH", 0, 6, len(tcp)) + tcp)
    tcp = tcp[:16] + struct.pack("!H", ck) + tcp[18:]
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), ipid, 0x4000, 64, 6, 0, s, d)
    iph = iph[:10] + struct.pack("!H", _csum(iph)) + iph[12:]
    eth = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
    return eth + iph + tcp


SYN, ACK, PSH, FIN = 0x02, 0x10, 0x08, 0x01


def tcp_flow(t0_ns, client, server, cport, sport=443, data=b"GET / HTTP/1.0\r\n\r\n"):
    """A short client->server TCP exchange: SYN, SYN/ACK, ACK, data, ACK.
    Returns [(ts_ns, frame, from_client)]."""
    ms = 1_000_000
    c_isn, s_isn = 1000, 5000
    return [
        (t0_ns, tcp4_frame(client, server, cport, sport, c_isn, 0, SYN), True),
        (t0_ns + 1 * ms, tcp4_frame(server, client, sport, cport, s_isn, c_isn + 1, SYN | ACK), False),
        (t0_ns + 2 * ms, tcp4_frame(client, server, cport, sport, c_isn + 1, s_isn + 1, ACK), True),
        (t0_ns + 3 * ms, tcp4_frame(client, server, cport, sport, c_isn + 1, s_isn + 1, ACK | PSH, data), True),
        (t0_ns + 4 * ms, tcp4_frame(server, client, sport, cport, s_isn + 1, c_isn + 1 + len(data), ACK), False),
    ]


def ipv4_addrs(frame):
    """(src, dst) dotted strings of an untagged Ethernet/IPv4 frame, or None."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return None
    return ip4str(frame[26:30]), ip4str(frame[30:34])


def ipv4_checksums_ok(frame):
    """IPv4 header and TCP checksums of a crafted (untagged, no options) frame."""
    ip = frame[14:]
    ihl = (ip[0] & 15) * 4
    if _csum(ip[:ihl]) != 0:
        return False
    tot = struct.unpack("!H", ip[2:4])[0]
    seg = ip[ihl:tot]
    if ip[9] != 6:
        return True
    return _csum(ip[12:16] + ip[16:20] + struct.pack("!BBH", 0, 6, len(seg)) + seg) == 0


# ---------------------------------------------------------------- amon

def tool_paths(argv):
    """argv: [script, amon, amon-gen?, ...]. Environment can override."""
    amon = os.environ.get("AMON", argv[1] if len(argv) > 1 else "build-e2e/amon")
    return amon


def make_key(dirpath, name="k"):
    """A fresh 32-byte key file with mode 0600 (the policy loader refuses
    group/other-readable keys)."""
    kd = os.path.join(dirpath, "keys")
    os.makedirs(kd, exist_ok=True)
    p = os.path.join(kd, name + ".hex")
    hexkey = os.urandom(32).hex()
    if shutil.which("openssl"):
        hexkey = subprocess.run(["openssl", "rand", "-hex", "32"], check=True, capture_output=True, text=True).stdout.strip()
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(hexkey + "\n")
    os.chmod(p, 0o600)
    return p


def shipped_ids(dirpath):
    """rules/ids.amon's text as shipped, with a fixed key written where it
    reads it (dirpath/keys/ids.key), so that a test's runs map alike."""
    kd = os.path.join(dirpath, "keys")
    os.makedirs(kd, exist_ok=True)
    fd = os.open(os.path.join(kd, "ids.key"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("6c1f0a9e3b7d52c48e2a91f05d3c7b6a19e8f4d2c0b5a3978e6d1c4b2a0f9e8d\n")
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "rules", "ids.amon")) as fh:
        return fh.read()


def write_policy(dirpath, name, text):
    p = os.path.join(dirpath, name)
    with open(p, "w") as f:
        f.write(text)
    return p


def run_amon(amon, inp, consumers, workers=1, extra=(), timeout=170):
    """consumers: [(name, policy_path, out_path)]. Returns CompletedProcess;
    raises with amon's stderr if it fails (a failure to run is a test failure,
    never a skip)."""
    cmd = [amon, "pcap", "--read", inp, "--workers", str(workers), "--quiet"]
    for n, pol, out in consumers:
        cmd += ["--consumer", f"{n}={pol}:{out}"]
    cmd += list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"amon failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return r


def run_config(amon, cfg, stats, timeout=170):
    """`amon run --config cfg --stats-json stats`: (CompletedProcess, the
    stats JSON); raises with amon's stderr if it fails. A DPDK file prefix
    of its own: amon refuses to start beside another on the same prefix
    (ctest runs tests side by side)."""
    import json
    r = subprocess.run([amon, "run", "--config", cfg, "--quiet", "--stats-json", stats,
                        "--", "--file-prefix=amone2e%d" % os.getpid()],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"amon run failed ({r.returncode}): {cfg}\n{r.stderr}")
    with open(stats) as f:
        return r, json.load(f)


def tmpdir(prefix):
    base = os.environ.get("E2E_TMP")
    if base:
        os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=base)


# ---------------------------------------------------------------- tshark

def need_tshark():
    if not shutil.which("tshark"):
        skip("tshark is not on PATH")


def pcaps_dir(argv_dir=None):
    d = argv_dir or os.environ.get("AMON_PCAPS_DIR")
    if not d or not os.path.isdir(d):
        skip(f"real captures not found ({d!r}; expected ../shared/pcaps)")
    return d


CHECKS = ["-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE"]


def _corpus_dirs():
    d = os.environ.get("AMON_PCAPS_DIR")
    return [os.path.realpath(d) + os.sep] if d and os.path.isdir(d) else []


def _text(raw, errors):
    # As subprocess's text mode reads it (universal newlines).
    return raw.decode("utf-8", errors).replace("\r\n", "\n").replace("\r", "\n")


def tshark_stdout(args, timeout=300, errors="surrogateescape"):
    """tshark's standard output for `args` (which name the capture with -r).

    The shared captures are read by tshark over and over: by many tests, and
    again when the suite reruns under the sanitizers. Their output depends on
    nothing but the capture's bytes, the command and the tshark binary, so it
    is kept on disk under those, in AMON_TSHARK_CACHE (default: a folder in
    the temporary directory). Only captures under AMON_PCAPS_DIR are kept:
    outputs the tests write are new bytes every run."""
    cmd = ["tshark"] + list(args)
    path = args[args.index("-r") + 1] if "-r" in args else None
    corpus = _corpus_dirs()
    if path is None or not any(os.path.realpath(path).startswith(c) for c in corpus):
        r = subprocess.run(cmd, capture_output=True, timeout=timeout)
        return _text(r.stdout, errors)
    h = hashlib.sha256()
    exe = shutil.which("tshark") or "tshark"
    st = os.stat(exe) if os.path.exists(exe) else None
    h.update(repr((exe, st and (st.st_size, st.st_mtime_ns))).encode())
    with open(path, "rb") as f:
        h.update(hashlib.sha256(f.read()).digest())
    h.update(repr([a if a != path else "<capture>" for a in args]).encode())
    cache = os.environ.get("AMON_TSHARK_CACHE") or os.path.join(tempfile.gettempdir(),
                                                                 f"amon-tshark-{os.getuid()}")
    entry = os.path.join(cache, h.hexdigest())
    try:
        with open(entry, "rb") as f:
            return _text(f.read(), errors)
    except OSError:
        pass
    r = subprocess.run(cmd, capture_output=True, timeout=timeout)
    if r.returncode == 0:
        os.makedirs(cache, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache)
        with os.fdopen(fd, "wb") as f:
            f.write(r.stdout)
        os.replace(tmp, entry)
    return _text(r.stdout, errors)


def tshark_fields(path, fields, display_filter=None, extra=()):
    """One list per frame: [frame.number, field1, field2, ...], each field a
    list of its occurrences (tshark -E occurrence=a, separator \\x1f)."""
    cmd = ["-r", path, "-n", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=\x1f",
           "-E", "separator=\t", "-e", "frame.number"]
    for f in fields:
        cmd += ["-e", f]
    if display_filter:
        cmd += ["-Y", display_filter]
    cmd += list(extra)
    rows = []
    for line in tshark_stdout(cmd).split("\n"):
        if not line:
            continue
        parts = line.split("\t")
        parts += [""] * (len(fields) + 1 - len(parts))
        rows.append([int(parts[0])] + [[x for x in p.split("\x1f") if x != ""] for p in parts[1:len(fields) + 1]])
    return rows


def registrable(psl, names):
    """Registrable domain of each name per libpsl (amon-e2e-psl), as a dict."""
    r = subprocess.run([psl], input="\n".join(names) + "\n", capture_output=True, text=True, check=True)
    out = {}
    for line in r.stdout.split("\n"):
        if "\t" in line:
            n, reg = line.split("\t", 1)
            out[n] = reg
    return out


def norm_name(n):
    n = n.strip().lower()
    while n.endswith("."):
        n = n[:-1]
    return n


def bad_frames(path):
    """Frame numbers tshark flags as malformed or with an expert error."""
    rows = tshark_fields(path, [], "_ws.malformed || _ws.expert.severity==error", CHECKS)
    return {r[0] for r in rows}


def checksum_status(path):
    """frame -> tuple of (ip, tcp, udp) checksum status strings."""
    rows = tshark_fields(path, ["ip.checksum.status", "tcp.checksum.status", "udp.checksum.status"], None, CHECKS)
    return {r[0]: (tuple(r[1]), tuple(r[2]), tuple(r[3])) for r in rows}


def report(fails, ok):
    """Prints each failure (or `ok` when there is none); the exit code."""
    for f in fails:
        print("FAIL: " + f)
    if not fails:
        print(ok)
    return 1 if fails else 0


def udp4_frame(src, dst, sport, dport, payload):
    """An Ethernet/IPv4/UDP frame with correct checksums."""
    s, d = ip4(src), ip4(dst)
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ck = _csum(s + d + struct.pack("!BBH", 0, 17, len(udp)) + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", ck) + udp[8:]
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0x4000, 64, 17, 0, s, d)
    iph = iph[:10] + struct.pack("!H", _csum(iph)) + iph[12:]
    eth = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
    return eth + iph + udp


def health(inp, out, label, fails):
    """No new malformed/expert-error frames; Good checksums stay Good."""
    _, rin = read_pcap(inp)
    _, rout = read_pcap(out)
    bi, bo = bad_frames(inp), bad_frames(out)
    if len(rin) == len(rout):
        new = sorted(bo - bi)
        if new:
            fails.append(f"{label}: tshark flags frames {new[:10]} malformed/error in the output, not in the input")
        ci, co = checksum_status(inp), checksum_status(out)
        turned = []
        for fr, (ip, tcp, udp) in ci.items():
            o = co.get(fr)
            if not o:
                continue
            for a, b, what in ((ip, o[0], "ip"), (tcp, o[1], "tcp"), (udp, o[2], "udp")):
                # status 1 = Good, 0 = Bad (tshark's enum)
                if "1" in a and "0" in b and a.count("1") > b.count("1"):
                    turned.append(f"{fr}/{what}")
        if turned:
            fails.append(f"{label}: Good checksums turned Bad in frames {turned[:10]}")
    elif len(bo) > len(bi):
        fails.append(f"{label}: {len(bo)} malformed/error frames in the output vs {len(bi)} in the input")
