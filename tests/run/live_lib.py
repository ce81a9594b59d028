"""Pieces the live `amon run` tests share: a network namespace with veth
pairs (made by the test, removed by it, traffic never leaves it), tcpreplay
into one end, an amon process reading the other end, DPDK telemetry.

A test that cannot make a namespace (or, for XDP, attach a program) exits
77 (skipped) with the reason.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def sh(*args, **kw):
    return subprocess.run(list(args), check=True, capture_output=True, text=True, **kw)


class Stop(Exception):
    """Nothing more to test (the failure is recorded)."""


class Skip(Exception):
    """The test cannot run here (exit 77), for the reason given."""


class Checks:
    def __init__(self):
        self.failures = []

    def __call__(self, cond, msg):
        if not cond:
            self.failures.append(msg)
            print("FAIL:", msg, flush=True)
        return bool(cond)


class Netns:
    """A namespace of its own with `pairs` veth pairs amon_tx<i> / amon_rx<i>, up,
    without IPv6 (no router solicitations of its own on the links)."""

    def __init__(self, tag, pairs=1):
        self.name = "amon%s%d" % (tag, os.getpid())
        self.nsx = ["ip", "netns", "exec", self.name]
        try:
            sh("ip", "netns", "add", self.name)
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            raise Skip("cannot create a network namespace: %s" % getattr(e, "stderr", e))
        try:
            self.run("sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
            self.run("sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1")
            for i in range(pairs):
                self.run("ip", "link", "add", "amon_tx%d" % i, "type", "veth", "peer", "name", "amon_rx%d" % i)
                for dev in ("amon_tx%d" % i, "amon_rx%d" % i):
                    self.run("ip", "link", "set", dev, "up")
            self.run("ip", "link", "set", "lo", "up")
        except BaseException:
            self.remove()
            raise

    def run(self, *args, **kw):
        return sh(*(self.nsx + list(args)), **kw)

    def popen(self, args, **kw):
        return subprocess.Popen(self.nsx + list(args), **kw)

    def replay(self, iface, capture, *opts):
        """tcpreplay into iface; the packets it sent."""
        r = self.run("tcpreplay", "--no-flow-stats", *opts, "-i", iface, capture)
        m = re.search(r"Successful packets:\s+(\d+)", r.stdout)
        return int(m.group(1)) if m else 0

    def link_drops(self, dev):
        """What the kernel dropped on a veth end (both directions): loss below any socket."""
        st = json.loads(self.run("ip", "-s", "-j", "link", "show", dev).stdout)[0]["stats64"]
        return st["rx"]["dropped"] + st["tx"]["dropped"]

    def remove(self):
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


class Amon:
    """`amon run` inside the namespace with its own work folder and DPDK file prefix."""

    def __init__(self, amon, ns, work, yaml_text, prefix, extra=(), eal=()):
        self.work, self.prefix = work, prefix
        self.yaml = os.path.join(work, "amon.yaml")
        with open(self.yaml, "w") as f:
            f.write(yaml_text)
        self.stats = os.path.join(work, "stats.json")
        self.errlog = os.path.join(work, "err")
        self.outlog = os.path.join(work, "out")
        with open(self.errlog, "w") as ef, open(self.outlog, "w") as of:
            self.proc = ns.popen([amon, "run", "--config", self.yaml, "--stats-json", self.stats] + list(extra) +
                                 ["--", "--file-prefix=" + prefix] + list(eal), stdout=of, stderr=ef)

    def log(self):
        return open(self.errlog, errors="replace").read()

    def out(self):
        return open(self.outlog, errors="replace").read()

    def wait_started(self, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            if "amon: started" in self.log():
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.01)
        return False

    def telemetry(self, cmd):
        r = subprocess.run(["dpdk-telemetry.py", "-f", self.prefix], input=cmd + "\n", capture_output=True,
                           text=True, timeout=20)
        m = re.search(r"\{.*\}", r.stdout)
        return json.loads(m.group(0))[cmd] if m else None

    def stop(self, timeout=30):
        """SIGTERM; the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def wait(self, timeout=60):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return self.stop()

    def report(self):
        return json.load(open(self.stats))

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def workdir(tag):
    return tempfile.mkdtemp(prefix="amon-%s-" % tag)


def write_key_policy(work, body):
    """p.amon beside a fresh key k.key (0600)."""
    key = os.path.join(work, "k.key")
    with open(key, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    os.chmod(key, 0o600)
    with open(os.path.join(work, "p.amon"), "w") as f:
        f.write('key k = file("k.key")\n' + body)


def pcap_records(path):
    """How many records a classic pcap holds, and whether it ends after the last one."""
    import struct
    data = open(path, "rb").read()
    if len(data) < 24:
        return 0, False
    off, n = 24, 0
    while off + 16 <= len(data):
        incl = struct.unpack("<I", data[off + 8:off + 12])[0]
        off += 16 + incl
        if off > len(data):
            return n, False
        n += 1
    return n, off == len(data)


def pcap_frames(path):
    """The frames of a classic pcap (either byte order, micro- or nanoseconds)."""
    import struct
    data = open(path, "rb").read()
    end = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    off, out = 24, []
    while off + 16 <= len(data):
        incl = struct.unpack(end + "I", data[off + 8:off + 12])[0]
        out.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return out


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far."""
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def runtime_dir(prefix):
    """Where DPDK keeps a file prefix's runtime files (root: /var/run/dpdk/PREFIX)."""
    base = os.environ.get("XDG_RUNTIME_DIR", "/tmp") if os.geteuid() else "/var/run"
    return os.path.join(base, "dpdk", prefix)


def finish(checks, work, cleanups, skipped=None):
    for c in cleanups:
        try:
            c()
        except Exception as e:  # cleanup goes on whatever failed before
            print("cleanup:", e)
    if checks.failures:
        print("work dir kept:", work)
    else:
        shutil.rmtree(work, ignore_errors=True)
    if skipped and not checks.failures:
        print("SKIP:", skipped)
        sys.exit(77)
    sys.exit(1 if checks.failures else 0)


def probe_frame(seq):
    """Ethernet/IPv4/UDP from 10.1.2.3 to 192.0.2.1; the UDP source port carries the sequence number."""
    import struct
    payload = b"amon-probe"
    udp = struct.pack("!HHHH", 20000 + seq, 9, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), seq, 0, 64, 17, 0, bytes([10, 1, 2, 3]),
                     bytes([192, 0, 2, 1]))
    s = sum(struct.unpack("!10H", ip))
    s = (s & 0xffff) + (s >> 16)
    ip = ip[:10] + struct.pack("!H", ~(s + (s >> 16)) & 0xffff) + ip[12:]
    return b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00" + ip + udp


def probe(send_if, recv_if, n, quiet):
    """Inside the namespace: n probes into send_if, each after `quiet` seconds,
    and the delay (us) until each came out of recv_if; prints one per line."""
    import socket
    import struct
    rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
    rx.bind((recv_if, 0))
    rx.settimeout(0.5)
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    tx.bind((send_if, 0))
    for seq in range(n):
        time.sleep(quiet)
        frame = probe_frame(seq)
        t0 = time.perf_counter_ns()
        tx.send(frame)
        try:
            while True:
                got = rx.recv(2048)
                if len(got) >= 36 and got[23] == 17 and struct.unpack("!H", got[34:36])[0] == 20000 + seq:
                    print((time.perf_counter_ns() - t0) // 1000, flush=True)
                    break
        except socket.timeout:
            pass


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "probe":
    probe(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
