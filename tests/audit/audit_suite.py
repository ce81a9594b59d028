#!/usr/bin/env python3
"""`amon audit` on the real engine's output.

    audit_suite.py --amon BIN --rules DIR --pcaps DIR --work DIR planted
    audit_suite.py --amon BIN --rules DIR --pcaps DIR --work DIR shipped [--jobs N]

planted: leaks planted into otherwise correct outputs are found (a name
copied back in, an address left in a DHCP option, a DHCP host name copied
back in, a name released with z-1 users, a client address left in clear on
a capture that starts mid-flow, a client restored next to one the key maps
onto itself, which is reported too: the audit reads no key), the sign-off
cases (a user's address in clear in any position, a z-count that allows
nothing the engine hides, no key needed, an output not tied to its input,
zeros, NetBIOS datagrams, BitTorrent LSD, a binary address in an unparsed
payload with its look: chance or not), and the engine's own outputs of the
same inputs pass.

shipped: every shipped policy on every capture of --pcaps, one `amon pcap`
run per capture with all policies as consumers, then `amon audit` per
policy. A pair leaks nothing unless KNOWN_LEAKS lists it with its reason and
the most leaks it may have; "possible" hits (short binary values in opaque
bytes) are allowed where POSSIBLE explains them.

Exit 0 pass, 1 a check failed, 77 skipped (no captures). Python standard
library only, and the openssl tool for AES.
"""

import argparse
import concurrent.futures
import json
import os
import hashlib
import random
import shutil
import struct
import subprocess
import sys
import time

SKIP = 77

# Why a pair still leaks, checked by reading the frames the audit names:
# (capture, policy) -> (most leaks, why). A pair listed here is an engine
# leak the audit is right about, waiting for its fix (the suite says NOTE
# when a pair leaks less than listed: lower it then).
KNOWN_LEAKS = {
}

# "Possible" hits: a protected IPv4 address or a low-entropy MAC as binary
# bytes where the audit knows no address field. By chance they are rare
# (the report gives the expected number, well below 1 here) except for
# values of one repeated byte: the fuzzed captures fill payloads with 0xaa,
# and 170.170.170.170 and aa:aa:aa:aa:aa:aa are among their addresses; the
# same goes for 00:00:00:00:00:01 and 20.0.0.x in sequence numbers and
# timestamps. Some P2P payloads do carry the sender's address in binary:
# real, listed here because the audit parses none of them (the NetBIOS
# datagram service's sender address is located and rewritten: no such hit
# is left on port 138 in the shared captures).
FUZZ_P = ("runs of 0xaa in fuzzed payloads match 170.170.170.170 and aa:aa:aa:aa:aa:aa, as do a kept "
          "170.170.170.170 and the port 0xaaaa after it")
CHANCE = ("low-entropy values (00:00:00:00:00:01, 20.0.0.x, 40.0.0.2 inside the PPTP tunnel) in TCP headers and "
          "payloads, and binary sender "
          "addresses in P2P payloads")
NET_ADDR = ("the network address 10.0.0.0 of the users' /24 (it names no host) as four bytes inside a "
            "rewritten DNS message")
KEPT_SUM = ("a truncated IPv4 header whose source 0.0.1.0 and destination 234.154.214.0 keep their class (this "
            "network, multicast) and whose wrong checksum is kept as evidence: its low byte 0x0a and the source's "
            "first three bytes read as 10.0.0.1")
POSSIBLE = {
    ('dns-udp-many-queries', 'meter'): (1, NET_ADDR),
    ('dns-udp-many-queries', 'research'): (1, NET_ADDR),
    ('malformed-fuzz-ndpi-2006', 'flows'): (61, FUZZ_P),
    ('malformed-fuzz-ndpi-2006', 'ids'): (1437, FUZZ_P),
    ('malformed-fuzz-ndpi-2006', 'meter'): (89, FUZZ_P),
    ('malformed-fuzz-ndpi-2006', 'research'): (60, FUZZ_P),
    ('malformed-fuzz-ndpi-2020', 'flows'): (11, FUZZ_P),
    ('malformed-fuzz-ndpi-2020', 'ids'): (4188, FUZZ_P),
    ('malformed-fuzz-ndpi-2020', 'meter'): (11, FUZZ_P),
    ('malformed-babel-snaplen69', 'flows'): (1, KEPT_SUM),
    ('malformed-babel-snaplen69', 'meter'): (1, KEPT_SUM),
    ('mixed-browsing-example', 'ids'): (2, CHANCE),
    ('mixed-browsing-example', 'meter'): (2, CHANCE),
    ('mixed-capture2', 'flows'): (3, CHANCE),
    ('mixed-capture2', 'ids'): (2, CHANCE + "; and, real, the Ares P2P client's handshake (tcp/4264) ending with "
                                   "its LAN address 192.168.1.2 after its name \"Ares\" (no plugin parses Ares: "
                                   "the audit says it is not chance)"),
    ('mixed-capture2', 'meter'): (8, CHANCE),
    ('mixed-capture2', 'research'): (10, CHANCE),
    ('tunnel-geneve-tls-quic', 'flows'): (2, CHANCE),
    ('tunnel-geneve-tls-quic', 'meter'): (6, CHANCE),
    ('tunnel-geneve-tls-quic', 'research'): (1, CHANCE),
    ('vlan-qinq-pppoe', 'ids'): (3, CHANCE),
    ('vlan-qinq-pppoe', 'meter'): (3, CHANCE),
}

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg, flush=True)


# ---------------------------------------------------------------------------
# pcap files


def read_pcap(path):
    with open(path, "rb") as f:
        buf = f.read()
    magic = struct.unpack("<I", buf[:4])[0]
    end = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    hdr = buf[:24]
    recs, off = [], 24
    while off + 16 <= len(buf):
        sec, frac, incl, orig = struct.unpack_from(end + "IIII", buf, off)
        if off + 16 + incl > len(buf):
            break
        recs.append([sec, frac, orig, bytearray(buf[off + 16:off + 16 + incl])])
        off += 16 + incl
    return hdr, end, recs


def write_pcap(path, hdr, end, recs):
    with open(path, "wb") as f:
        f.write(hdr)
        for sec, frac, orig, data in recs:
            f.write(struct.pack(end + "IIII", sec, frac, len(data), orig))
            f.write(bytes(data))


def pcap_header():
    return struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1), "<"


def ip_csum(b):
    s = 0
    for i in range(0, len(b), 2):
        s += (b[i] << 8) | (b[i + 1] if i + 1 < len(b) else 0)
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def udp4(src, dst, sport, dport, payload, smac=b"\x02\x00\x00\x00\x00\x01", dmac=b"\x02\x00\x00\x00\x00\x02"):
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                               bytes(map(int, src.split("."))), bytes(map(int, dst.split(".")))))
    ip[10:12] = struct.pack("!H", ip_csum(ip))
    return bytearray(dmac + smac + b"\x08\x00" + bytes(ip) + udp)


def dns_query(txid, name):
    q = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\x00"
    return struct.pack("!HHHHHH", txid, 0x0100, 1, 0, 0, 0) + q + struct.pack("!HH", 1, 1)


# ---------------------------------------------------------------------------
# running amon


def pcap_env(args):
    """The environment for `amon pcap`: with --fixrand, every per-run secret
    (hidden names' random letters, the store's keys) is the same on every
    run, as the key files are, so a chance match (the letters of a hidden
    name spelling a protected address as four bytes) is there on every run
    or on none."""
    env = dict(os.environ)
    if args.fixrand:
        env["LD_PRELOAD"] = args.fixrand
        # An ASan build's runtime would refuse a library preloaded before it.
        env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "verify_asan_link_order=0"]))
    return env


def run_pcap(args, cap, consumers, cwd):
    """`amon pcap` on cap for (name, policy, output) consumers."""
    cmd = [args.amon, "pcap", "--read", cap, "--quiet"]
    for name, pol, out in consumers:
        cmd += ["--consumer", "%s=%s:%s" % (name, pol, out)]
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=600, cwd=cwd,
                          env=pcap_env(args))


def amon_pcap(args, cap, consumers, cwd):
    pr = run_pcap(args, cap, consumers, cwd)
    if pr.returncode != 0:
        fail("%s: amon pcap exit %d: %s" % (os.path.basename(cap), pr.returncode, pr.stderr.strip()[:300]))
    return pr.returncode == 0


def audit(args, pol, orig, anon, cwd, max_listed=20):
    pr = subprocess.run([args.amon, "audit", "--policy", pol, "--original", orig, "--anonymized", anon,
                         "--format", "json", "--max-listed", str(max_listed)],
                        capture_output=True, text=True, errors="replace", timeout=600, cwd=cwd)
    if pr.returncode not in (0, 1):
        fail("audit %s %s: exit %d: %s" % (os.path.basename(orig), pol, pr.returncode, pr.stderr.strip()[:300]))
        return None
    js = json.loads(pr.stdout)
    if (pr.returncode == 1) != (js["leaks"] > 0):
        fail("audit %s %s: exit %d with %d leaks" % (os.path.basename(orig), pol, pr.returncode, js["leaks"]))
    return js


def setup_policies(args, work):
    """The shipped policies with fresh keys of their own in work/."""
    os.makedirs(os.path.join(work, "keys"), exist_ok=True)
    os.chmod(os.path.join(work, "keys"), 0o700)
    pols = []
    for fn in sorted(os.listdir(args.rules)):
        if not fn.endswith(".amon"):
            continue
        shutil.copy(os.path.join(args.rules, fn), os.path.join(work, fn))
        pols.append(fn)
        for line in open(os.path.join(work, fn)):
            if 'file("keys/' in line:
                k = line.split('file("keys/')[1].split('"')[0]
                kp = os.path.join(work, "keys", k)
                if not os.path.exists(kp):
                    # Fixed keys: the same output bytes on every run, so chance
                    # matches in checksums (see POSSIBLE) stay put.
                    with open(kp, "w") as f:
                        f.write(hashlib.sha256(k.encode()).hexdigest() + "\n")
                    os.chmod(kp, 0o600)
    return pols


# ---------------------------------------------------------------------------
# planted leaks


def planted(args):
    work = args.work
    setup_policies(args, work)

    # 1. A released name that had z-1 users. Policy: names only, z=3.
    zpol = os.path.join(work, "z3.amon")
    with open(zpol, "w") as f:
        f.write("dns.qname : zanon(z=3, dt=1h)\n")
    recs = []
    t = 1700000000
    plan = [("10.0.0.1", "rare.example.net"), ("10.0.0.2", "rare.example.net"),
            ("10.0.0.1", "popular.example.com"), ("10.0.0.2", "popular.example.com"),
            ("10.0.0.3", "popular.example.com"), ("10.0.0.4", "popular.example.com")]
    for i, (cl, name) in enumerate(plan):
        recs.append([t + i, 0, 0, udp4(cl, "192.0.2.53", 40000 + i, 53, dns_query(0x1000 + i, name))])
    for r in recs:
        r[2] = len(r[3])
    hdr, end = pcap_header()
    zin = os.path.join(work, "z3-in.pcap")
    write_pcap(zin, hdr, end, recs)
    js = audit(args, zpol, zin, zin, work)  # the input as its own "anonymized" output: nothing hidden
    if js:
        frames = sorted(h["frame"] for h in js["leak_list"] if h["class"] == "dns.qname")
        # rare: 1 and 2 users; popular: 1, 2 users (hidden), then 3 and 4 (released)
        if frames != [1, 2, 3, 4]:
            fail("planted z-1: expected a DNS wire leak in each of frames 1-4 only, got frames %s" % frames)
        if js["allowed"] < 2:
            fail("planted z-1: the released frames 5 and 6 should count as allowed matches, got %d" % js["allowed"])
    zout = os.path.join(work, "z3-out.pcap")
    if amon_pcap(args, zin, [("z", zpol, zout)], work):
        js = audit(args, zpol, zin, zout, work)
        if js and js["leaks"]:
            fail("planted z-1: the engine's output should pass, audit found %d leaks: %s" % (js["leaks"], js["leak_list"][:3]))

    # 1b. A protected name inside a released one: "_sip" (one user) is the
    # first label of a name z-anonymity releases from its third user on.
    # There its bytes are the released name's, not a leak; alone, or inside
    # the name while that is still hidden, they are.
    plan = [("10.0.0.1", "_sip"), ("10.0.0.1", "_sip.popular.example.com"), ("10.0.0.2", "_sip.popular.example.com"),
            ("10.0.0.3", "_sip.popular.example.com"), ("10.0.0.4", "_sip.popular.example.com")]
    recs = [[t + i, 0, 0, udp4(cl, "192.0.2.53", 41000 + i, 53, dns_query(0x2000 + i, name))]
            for i, (cl, name) in enumerate(plan)]
    for r in recs:
        r[2] = len(r[3])
    sin = os.path.join(work, "inside-in.pcap")
    write_pcap(sin, hdr, end, recs)
    js = audit(args, zpol, sin, sin, work)
    if js:
        frames = sorted(set(h["frame"] for h in js["leak_list"] if h["class"] == "dns.qname"))
        if frames != [1, 2, 3]:
            fail("planted inside: expected leaks in frames 1-3 only (\"_sip\" alone, then inside a hidden name), "
                 "got frames %s" % frames)
        if js.get("inside_allowed", 0) < 2:
            fail("planted inside: \"_sip\" inside the released name of frames 4 and 5 should count as allowed, got %s"
                 % js.get("inside_allowed"))

    # 2. A name copied back in: the meter's output of a DNS capture, with one
    # hidden question name restored from the original.
    cap = os.path.join(args.pcaps, "dns-udp-many-queries.pcap")
    out = os.path.join(work, "dns-meter.pcap")
    if os.path.exists(cap) and amon_pcap(args, cap, [("m", "meter.amon", out)], work):
        js = audit(args, "meter.amon", cap, out, work)
        if js and js["leaks"]:
            fail("planted name: the engine's meter output should pass, %d leaks: %s" % (js["leaks"], js["leak_list"][:3]))
        hi, ei, orig = read_pcap(cap)
        ho, eo, anon = read_pcap(out)
        done = None
        for i, (a, b) in enumerate(zip(orig, anon)):
            oa, ob = a[3], b[3]
            if len(oa) != len(ob) or len(oa) < 60:
                continue
            # question name: after the 14+20+8+12 bytes of headers (no VLAN, no options here)
            qo = 14 + 20 + 8 + 12
            if oa[23] != 17 or oa[qo:qo + 20] == ob[qo:qo + 20]:
                continue
            n = 0
            while qo + n < len(oa) and oa[qo + n] != 0:
                n += oa[qo + n] + 1
            ob[qo:qo + n] = oa[qo:qo + n]
            done = (i + 1, qo)
            break
        if not done:
            fail("planted name: no hidden question name found to copy back")
        else:
            planted_out = os.path.join(work, "dns-meter-planted.pcap")
            write_pcap(planted_out, ho, eo, anon)
            js = audit(args, "meter.amon", cap, planted_out, work)
            if js and not any(h["frame"] == done[0] and h["class"] == "dns.qname" for h in js["leak_list"]):
                fail("planted name: the name copied back into frame %d was not reported: %s" % (done[0], js["leak_list"][:3]))

    # 3. An address left in a DHCP option: a renewal whose IP header was
    # anonymized but whose requested-address option (50) was not.
    def dhcp(client, mac):
        m = bytes([1, 1, 6, 0]) + struct.pack("!IHH", 0x1234, 0, 0) + bytes(map(int, client.split("."))) + bytes(12)
        m += mac + bytes(10) + bytes(192) + b"\x63\x82\x53\x63"
        m += bytes([53, 1, 3, 50, 4]) + bytes(map(int, client.split("."))) + bytes([255])
        return m
    mac = b"\x00\x1b\x21\x3a\x4f\x5d"
    din = os.path.join(work, "dhcp-in.pcap")
    write_pcap(din, hdr, end, [[t, 0, 0, udp4("192.168.7.77", "192.168.7.1", 68, 67, dhcp("192.168.7.77", mac), smac=mac)]])
    _, _, drec = read_pcap(din)
    drec[0][2] = len(drec[0][3])
    write_pcap(din, hdr, end, drec)
    dout = os.path.join(work, "dhcp-planted.pcap")
    p = udp4("10.9.8.7", "192.168.7.1", 68, 67, dhcp("10.9.8.7", b"\x02" + bytes(5)), smac=b"\x02" + bytes(5))
    p[-7:-3] = bytes([192, 168, 7, 77])  # option 50 left as it was
    write_pcap(dout, hdr, end, [[t, 0, len(p), p]])
    js = audit(args, "ids.amon", din, dout, work)
    if js and not any(h["value"] == "192.168.7.77" and "port 67" in h["context"] for h in js["leak_list"]):
        fail("planted DHCP: the client address left in option 50 was not reported: %s" % js["leak_list"][:3])

    # 4. A host name copied back into a DHCP option: a value only the DHCP
    # plugin locates, collected through the plugins' interface like any
    # other field (nothing in the audit names DHCP).
    host = b"alice-laptop-7"
    m = bytes([1, 1, 6, 0]) + struct.pack("!IHH", 0x4321, 0, 0) + bytes(16) + mac + bytes(10) + bytes(192)
    m += b"\x63\x82\x53\x63" + bytes([53, 1, 1, 12, len(host)]) + host + bytes([255])
    hin = os.path.join(work, "dhcp-host-in.pcap")
    hout = os.path.join(work, "dhcp-host-ids.pcap")
    write_pcap(hin, hdr, end, [[t, 0, 0, udp4("0.0.0.0", "255.255.255.255", 68, 67, m, smac=mac,
                                              dmac=b"\xff" * 6)]])
    _, _, hrec = read_pcap(hin)
    hrec[0][2] = len(hrec[0][3])
    write_pcap(hin, hdr, end, hrec)
    if amon_pcap(args, hin, [("i", "ids.amon", hout)], work):
        js = audit(args, "ids.amon", hin, hout, work)
        if js and js["leaks"]:
            fail("planted DHCP host name: the engine's IDS output should pass, %d leaks: %s" % (js["leaks"], js["leak_list"][:3]))
        if js and not any(c.get("class") == "dhcp.hostname" and c.get("protected", 0) > 0 for c in js["classes"]):
            fail("planted DHCP host name: the audit did not collect option 12: %s" % js["classes"])
        ho, eo, hanon = read_pcap(hout)
        off = bytes(hrec[0][3]).find(host)
        if len(hanon) != 1 or off < 0 or bytes(hanon[0][3][off:off + len(host)]) == host:
            fail("planted DHCP host name: the IDS output should carry option 12 rewritten in place")
        else:
            hanon[0][3][off:off + len(host)] = host
            planted_out = os.path.join(work, "dhcp-host-planted.pcap")
            write_pcap(planted_out, ho, eo, hanon)
            js = audit(args, "ids.amon", hin, planted_out, work)
            if js and not any(h["class"] == "dhcp.hostname" and h["frame"] == 1 for h in js["leak_list"]):
                fail("planted DHCP host name: the name copied back was not reported: %s" % js["leak_list"][:3])

    # 5. Roles: a capture that starts mid-flow keeps its client protected.
    cap = os.path.join(args.pcaps, "tls-clienthello-many-sni.pcap")
    if os.path.exists(cap):
        h, e, recs = read_pcap(cap)
        mid = os.path.join(work, "mid-flow.pcap")
        write_pcap(mid, h, e, recs[3:])
        js = audit(args, "ids.amon", mid, mid, work)
        if js and not any(x["value"] == "192.168.0.17" or x["class"] == "ip.client" for x in js["leak_list"]):
            fail("planted roles: the input as its own output should leak the client, audit says %s" % js["leak_list"][:3])
        pols = ("ids", "flows", "meter", "research")
        outs = {p: os.path.join(work, "mid-flow-%s.pcap" % p) for p in pols}
        if amon_pcap(args, mid, [(p, p + ".amon", outs[p]) for p in pols], work):
            for p in pols:
                js = audit(args, p + ".amon", mid, outs[p], work)
                if js and js["leaks"]:
                    fail("roles: mid-flow capture with %s.amon leaks %d: %s" % (p, js["leaks"], js["leak_list"][:3]))

    # 6. Crypto-PAn maps some addresses onto themselves: its one-time pad
    # repeats a bit wherever the address agrees with the pad, so the address
    # equal to the pad's first 32 bits gets a pad of one repeated bit, all
    # zeros (a fixed point) or all ones, by the key. A key with a fixed point
    # (AES by the openssl tool: standard library only here): the engine
    # writes that client back as it was, and the audit must call it the
    # policy's own output; another client restored in the output is a leak.
    def aes(k16, block):
        return subprocess.run(["openssl", "enc", "-aes-128-ecb", "-nopad", "-K", k16.hex()], input=block,
                              capture_output=True, check=True, timeout=60).stdout
    fixed = None
    for _ in range(256):
        key = os.urandom(32)
        pad = aes(key[:16], key[16:])
        if aes(key[:16], pad)[0] & 0x80 == 0 and 0 < pad[0] < 224 and pad[0] != 127 and pad[3] != 255:
            fixed = ".".join(str(b) for b in pad[:4])
            break
    if not fixed:
        fail("planted fixed point: no key with a fixed point in 256 tries")
    else:
        kp = os.path.join(work, "keys", "fixed.hex")
        with open(kp, "w") as f:
            f.write(key.hex() + "\n")
        os.chmod(kp, 0o600)
        other = "198.51.100.7"
        fpol = os.path.join(work, "fixed.amon")
        with open(fpol, "w") as f:
            f.write('key k = file("keys/fixed.hex")\nclients = { %s/32, %s/32 }\nip.client : cryptopan(key=k)\n'
                    % (fixed, other))
        fin = os.path.join(work, "fixed-in.pcap")
        recs = [[t, 0, 0, udp4(fixed, "192.0.2.53", 40001, 53, b"fixed point")],
                [t + 1, 0, 0, udp4(other, "192.0.2.53", 40002, 53, b"other client")]]
        for r in recs:
            r[2] = len(r[3])
        write_pcap(fin, hdr, end, recs)
        fout = os.path.join(work, "fixed-out.pcap")
        if amon_pcap(args, fin, [("f", fpol, fout)], work):
            ho, eo, frec = read_pcap(fout)
            src = [".".join(str(b) for b in r[3][26:30]) for r in frec]
            if len(src) != 2 or src[0] != fixed or src[1] == other:
                fail("planted fixed point: the engine should write %s back as it was and change %s, wrote %s"
                     % (fixed, other, src))
            # The audit reads no key: the address the key gives back is an
            # address in clear, reported where cryptopan() applies.
            js = audit(args, fpol, fin, fout, work)
            if js and [(h["frame"], h["value"]) for h in js["leak_list"]] != [(1, fixed)]:
                fail("planted fixed point: %s written back as it was should be reported in frame 1 alone, got %s"
                     % (fixed, js["leak_list"][:3]))
            elif js and "cryptopan() applies" not in js["leak_list"][0]["context"]:
                fail("planted fixed point: the report should say cryptopan() applies there: %s" % js["leak_list"][0])
            if len(frec) == 2:
                frec[1][3][26:30] = bytes(map(int, other.split(".")))
                planted_out = os.path.join(work, "fixed-planted.pcap")
                write_pcap(planted_out, ho, eo, frec)
                js = audit(args, fpol, fin, planted_out, work)
                if js and sorted(h["value"] for h in js["leak_list"] if h["class"] == "ip.client") != sorted([fixed, other]):
                    fail("planted fixed point: %s and the restored %s should leak, got %s"
                         % (fixed, other, js["leak_list"][:3]))

    signoff(args, work)


def dns_answer(txid, name, addr):
    q = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\x00"
    return (struct.pack("!HHHHHH", txid, 0x8180, 1, 1, 0, 0) + q + struct.pack("!HH", 1, 1) +
            b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + bytes(map(int, addr.split("."))))


def one_capture_file(work, name, recs):
    hdr, end = pcap_header()
    for r in recs:
        r[2] = len(r[3])
    path = os.path.join(work, name)
    write_pcap(path, hdr, end, recs)
    return path


def signoff(args, work):
    """What makes the audit a sign-off tool: users are users in every
    position, its z-count never allows what the engine hides, it needs no
    key, an output that is not the input's is an error, zeros identify no
    one, and it reads a datagram as the engine does."""
    t = 1700000000

    # 7. A user's address in clear anywhere is a leak unless ip.client keeps
    # it: 10.0.0.5 travels only as a DNS answer (no rule: kept), and is
    # inside `clients`.
    cpol = os.path.join(work, "clients.amon")
    with open(cpol, "w") as f:
        f.write('key k = file("keys/ids.key")\nclients = { 10.0.0.0/8 }\nip.client : cryptopan(key=k)\n')
    cin = one_capture_file(work, "clients-in.pcap", [
        [t, 0, 0, udp4("192.0.2.53", "198.51.100.9", 53, 40000, dns_answer(0x77, "printer.example.org", "10.0.0.5"))]])
    js = audit(args, cpol, cin, cin, work)
    if js and not any(h["value"] == "10.0.0.5" and h["class"] == "ip.client" for h in js["leak_list"]):
        fail("planted client in an answer: 10.0.0.5 (inside clients) in clear was not reported: %s" % js["leak_list"][:3])
    kpol = os.path.join(work, "clients-kept.amon")
    with open(kpol, "w") as f:
        f.write('clients = { 10.0.0.0/8 }\nip.client : keep()\nip.server : zero()\n')
    js = audit(args, kpol, cin, cin, work)
    if js and any(h["value"] == "10.0.0.5" for h in js["leak_list"]):
        fail("planted client kept: with ip.client : keep() 10.0.0.5 is the policy's to show: %s" % js["leak_list"][:3])

    # 8. The audit's z-count never allows what the engine hides: two users,
    # z = 10, the input as its own output: every SNI is a leak (75), each one
    # listed even behind the thousands of server addresses.
    cap = os.path.join(args.pcaps, "mixed-tls-http-nbns.pcap")
    if os.path.exists(cap):
        zpol = os.path.join(work, "z10.amon")
        with open(zpol, "w") as f:
            f.write("ip.server : zanon(z=10, dt=1h, fallback=prefix(24))\ntls.sni : zanon(z=10, dt=1h, fallback=sld)\n")
        js = audit(args, zpol, cap, cap, work, max_listed=100)
        if js:
            sni = [c["leaks"] for c in js["classes"] if c["class"] == "tls.sni"]
            listed = sum(1 for h in js["leak_list"] if h["class"] == "tls.sni")
            if sni != [75] or listed != 75:
                fail("planted z=10 with two users: expected 75 SNI leaks, all listed; got %s counted, %d listed"
                     % (sni, listed))
        # The meter's own output passes; one hidden SNI put back in clear is found.
        out = os.path.join(work, "nbns-meter.pcap")
        if amon_pcap(args, cap, [("m", "meter.amon", out)], work):
            js = audit(args, "meter.amon", cap, out, work)
            if js and js["leaks"]:
                fail("planted meter SNI: the engine's meter output should pass, %d leaks: %s" % (js["leaks"], js["leak_list"][:3]))
            _, _, orig = read_pcap(cap)
            ho, eo, anon = read_pcap(out)
            by_ts = {(r[0], r[1]): r[3] for r in orig}
            done = None
            for i, r in enumerate(anon):
                ob = by_ts.get((r[0], r[1]))
                at = ob.find(b"www.bing.com") if ob else -1
                if at > 0 and len(ob) == len(r[3]) and r[3][at:at + 12] != b"www.bing.com":
                    r[3][at:at + 12] = b"www.bing.com"
                    done = i + 1
                    break
            if not done:
                fail("planted meter SNI: no hidden www.bing.com in the meter output")
            else:
                planted_out = os.path.join(work, "nbns-meter-planted.pcap")
                write_pcap(planted_out, ho, eo, anon)
                js = audit(args, "meter.amon", cap, planted_out, work)
                if js and not any(h["frame"] == done and h["value"] == "www.bing.com" for h in js["leak_list"]):
                    fail("planted meter SNI: www.bing.com put back into frame %d was not found: %s" % (done, js["leak_list"][:3]))

    # 8a. One exchange is one user: a DNS query and its answer between two
    # ephemeral ports (roles uncertain) under z = 2 are both hidden by the
    # engine (one client); counting each packet's sender would release the
    # answer as a second user's.
    ypol = os.path.join(work, "z2.amon")
    with open(ypol, "w") as f:
        f.write("dns.qname, dns.answer.name : zanon(z=2, dt=1h)\n")
    yin = one_capture_file(work, "exchange-in.pcap", [
        [t, 0, 0, udp4("198.51.100.1", "198.51.100.2", 40000, 40001, dns_query(0x55, "rare.example.net"))],
        [t + 1, 0, 0, udp4("198.51.100.2", "198.51.100.1", 40001, 40000, dns_answer(0x55, "rare.example.net", "192.0.2.9"))]])
    js = audit(args, ypol, yin, yin, work)
    if js and sorted(set(h["frame"] for h in js["leak_list"] if h["value"] == "rare.example.net")) != [1, 2]:
        fail("planted exchange: the name of one user's query and answer should leak in both frames, got %s" % js["leak_list"][:4])

    # 8b. A hidden SNI whose length byte reads as a letter (82 bytes: 'R')
    # put back into the meter's output: found like any other.
    cap = os.path.join(args.pcaps, "tls-clienthello-many-sni.pcap")
    out = os.path.join(work, "sni-meter.pcap")
    if os.path.exists(cap) and amon_pcap(args, cap, [("m", "meter.amon", out)], work):
        _, _, orig = read_pcap(cap)
        ho, eo, anon = read_pcap(out)
        by_ts = {(r[0], r[1]): r[3] for r in orig}
        done = None
        for i, r in enumerate(anon):
            ob = by_ts.get((r[0], r[1]))
            at = ob.find(b"\x00\x00") if ob and len(ob) == len(r[3]) else -1
            while 0 <= at and at + 9 < len(ob):
                n = struct.unpack("!H", ob[at + 7:at + 9])[0]
                if (struct.unpack("!HH", ob[at + 2:at + 6]) == (n + 5, n + 3) and ob[at + 6] == 0 and
                        chr(n).isalnum() and r[3][at + 9:at + 9 + n] != ob[at + 9:at + 9 + n]):
                    r[3][at + 9:at + 9 + n] = ob[at + 9:at + 9 + n]
                    done = (i + 1, bytes(ob[at + 9:at + 9 + n]).decode())
                    break
                at = ob.find(b"\x00\x00", at + 1)
            if done:
                break
        if not done:
            fail("planted SNI after a letter: no hidden SNI of such a length in the meter output")
        else:
            planted_out = os.path.join(work, "sni-meter-planted.pcap")
            write_pcap(planted_out, ho, eo, anon)
            js = audit(args, "meter.amon", cap, planted_out, work)
            if js and not any(h["frame"] == done[0] and h["value"] == done[1] for h in js["leak_list"]):
                fail("planted SNI after a letter: %s put back into frame %d was not found: %s" % (done[1], done[0], js["leak_list"][:3]))

    cap = os.path.join(args.pcaps, "mixed-tls-http-nbns.pcap")
    if os.path.exists(cap):
        # 9. NBNS (137) is DNS's message format: with DNS names protected the
        # engine rewrites its NetBIOS names, and the audit reads them as it
        # does (no name of a 137 datagram in clear). The datagram service
        # (138) carries the same names in a header of its own (netbios.name:
        # the DNS name rules, as on 137, else the device host name's) and in
        # its mailslot data. Under DNS name rules alone, and with the device
        # name protected instead, engine and audit agree nothing of 138 is in
        # clear: names, the header's source address and the mailslot data.
        for tag, rules in (("qname", "dns.qname, dns.answer.name, dns.rdata.name : redact()\n"),
                           ("device", "dhcp.hostname : redact()\nclients = { 0.0.0.0/0 }\nip.client : zero()\n")):
            qpol = os.path.join(work, tag + ".amon")
            with open(qpol, "w") as f:
                f.write(rules)
            qout = os.path.join(work, "nbns-%s.pcap" % tag)
            if not amon_pcap(args, cap, [("q", qpol, qout)], work):
                continue
            js = audit(args, qpol, cap, qout, work, max_listed=1000)
            enc = [h for h in js["leak_list"] if len(h["value"]) == 32 and set(h["value"]) <= set("abcdefghijklmnop")] if js else []
            if any("port 137" in h["context"] for h in enc):
                fail("planted NetBIOS (%s): an NBNS name left in clear on port 137: %s" % (tag, [h for h in enc if "port 137" in h["context"]][:3]))
            if js and any("port 138" in h["context"] for h in js["leak_list"]):
                fail("planted NetBIOS (%s): names, addresses or data of the datagram service left in clear: %s" % (tag, [h for h in js["leak_list"] if "port 138" in h["context"]][:3]))
            _, _, orig = read_pcap(cap)
            _, _, anon = read_pcap(qout)
            n138 = 0
            for o, a in zip(orig, anon):
                if len(o[3]) > 70 and o[3][36:38] == b"\x00\x8a":
                    n138 += 1
                    if bytes(a[3]) == bytes(o[3]):
                        fail("planted NetBIOS (%s): a datagram (138) left as it came" % tag)
                        break
                if b"USER-PC" in bytes(a[3]):
                    fail("planted NetBIOS (%s): the host name USER-PC in clear in the output" % tag)
                    break
            if not n138:
                fail("planted NetBIOS (%s): no datagram (138) in the capture: the check proves nothing" % tag)

    # 10. No secret: a policy whose key file is absent, or readable by
    # others, is audited all the same (the audit reproduces no pseudonym).
    npol = os.path.join(work, "nokey.amon")
    with open(npol, "w") as f:
        f.write('key gone = file("keys/not-here.key")\nclients = { 10.0.0.0/8 }\nip.client : cryptopan(key=gone)\n')
    js = audit(args, npol, cin, cin, work)
    if js is not None and not any(h["value"] == "198.51.100.9" or h["value"] == "10.0.0.5" for h in js["leak_list"]):
        fail("no secret: the audit without the key file should still find the client in clear: %s" % js["leak_list"][:3])

    # 11. An output none of whose frames is the input's (another capture):
    # an error (exit 2), not "clean".
    other = one_capture_file(work, "other.pcap", [[t + 999, 0, 0, udp4("10.9.9.9", "10.9.9.8", 1, 2, b"x" * 20)]])
    pr = subprocess.run([args.amon, "audit", "--policy", cpol, "--original", cin, "--anonymized", other],
                        capture_output=True, text=True, timeout=120, cwd=work)
    if pr.returncode != 2:
        fail("untied output: exit %d, expected 2 (%s)" % (pr.returncode, pr.stdout.strip()[-200:]))

    # 12. Zeros identify no one: a DHCP discover with an empty chaddr from
    # 0.0.0.0, its own output under ids: nothing to report of them.
    def discover(mac):
        m = bytes([1, 1, 6, 0]) + struct.pack("!IHH", 0x99, 0, 0) + bytes(16) + mac + bytes(10) + bytes(192)
        return m + b"\x63\x82\x53\x63" + bytes([53, 1, 1, 255])
    zin = one_capture_file(work, "zeros-in.pcap", [
        [t, 0, 0, udp4("0.0.0.0", "255.255.255.255", 68, 67, discover(bytes(6)), smac=b"\x02\x11\x22\x33\x44\x55",
                       dmac=b"\xff" * 6)]])
    js = audit(args, "ids.amon", zin, zin, work)
    if js and any(h["value"] in ("00:00:00:00:00:00", "0.0.0.0") for h in js["leak_list"] + js["possible_list"]):
        fail("zeros: an all-zero chaddr or 0.0.0.0 reported as an identifier: %s" % js["leak_list"][:3])

    # 13. BitTorrent Local Service Discovery (HTTP-like over UDP 6771): the
    # engine rewrites its cookie as HTTP's, and the audit agrees.
    lsd = (b"BT-SEARCH * HTTP/1.1\r\nHost: 239.192.152.143:6771\r\nPort: 6881\r\n"
           b"Infohash: 0123456789abcdef0123456789abcdef01234567\r\ncookie: lsd-cookie-5f3a9c\r\n\r\n\r\n")
    lin = one_capture_file(work, "lsd-in.pcap", [[t, 0, 0, udp4("192.168.5.5", "239.192.152.143", 6771, 6771, lsd)]])
    lpol = os.path.join(work, "cookie.amon")
    with open(lpol, "w") as f:
        f.write("http.cookie : redact()\n")
    lout = os.path.join(work, "lsd-out.pcap")
    if amon_pcap(args, lin, [("l", lpol, lout)], work):
        _, _, lrec = read_pcap(lout)
        if not lrec or b"lsd-cookie-5f3a9c" in bytes(lrec[0][3]):
            fail("LSD: the engine left the cookie of a BT-SEARCH datagram in clear")
        js = audit(args, lpol, lin, lout, work)
        if js and js["leaks"]:
            fail("LSD: the engine's output should pass, %d leaks: %s" % (js["leaks"], js["leak_list"][:3]))
        js = audit(args, lpol, lin, lin, work)
        if js and not any(h["class"] == "http.cookie" for h in js["leak_list"]):
            fail("LSD: the cookie in clear was not reported: %s" % js["leak_list"][:3])

        # A part of the cookie alone in a later datagram's kept payload (an
        # id a query string repeats): the engine's echo search rewrites it,
        # and the audit searches the same parts (value_parts.h).
        pin = one_capture_file(work, "part-in.pcap", [
            [t, 0, 0, udp4("192.168.5.5", "239.192.152.143", 6771, 6771, lsd.replace(
                b"lsd-cookie-5f3a9c", b"sid=part7f3a9c51e2; v=1"))],
            [t + 1, 0, 0, udp4("192.168.5.5", "198.51.100.9", 40001, 9999, b"GET /p?id=part7f3a9c51e2&x=1\r\n")]])
        pout = os.path.join(work, "part-out.pcap")
        if amon_pcap(args, pin, [("l", lpol, pout)], work):
            js = audit(args, lpol, pin, pout, work)
            if js and js["leaks"]:
                fail("cookie part: the engine's output should pass, %d leaks: %s" % (js["leaks"], js["leak_list"][:3]))
            _, _, prec = read_pcap(pout)
            plain = one_capture_file(work, "part-plain.pcap", [prec[0], [t + 1, 0, 0, bytes(read_pcap(pin)[2][1][3])]])
            js = audit(args, lpol, pin, plain, work)
            if js and not any(h["value"] == "part7f3a9c51e2" for h in js["leak_list"]):
                fail("cookie part: its id in clear in a later datagram was not reported: %s" % js["leak_list"][:3])

        # Under z-anonymity a part takes its whole value's decision: hidden
        # while one user sends the User-Agent (its id alone later is
        # rewritten, and reported in clear), released in the frame where a
        # second user brings z to 2 (the id inside it there is no leak).
        zpol = os.path.join(work, "zagent.amon")
        with open(zpol, "w") as f:
            f.write("http.user_agent : zanon(z=2, dt=1h, fallback=redact)\n")
        zc = lsd.replace(b"cookie: lsd-cookie-5f3a9c", b"User-Agent: zclient sid=zpart7f3a9c51e2 v1")
        zin = one_capture_file(work, "zpart-in.pcap", [
            [t, 0, 0, udp4("192.168.5.5", "239.192.152.143", 6771, 6771, zc)],
            [t + 1, 0, 0, udp4("192.168.5.5", "198.51.100.9", 40001, 9999, b"GET /p?id=zpart7f3a9c51e2&x=1\r\n")],
            [t + 2, 0, 0, udp4("192.168.5.6", "239.192.152.143", 6771, 6771, zc)]])
        zout = os.path.join(work, "zpart-out.pcap")
        if amon_pcap(args, zin, [("z", zpol, zout)], work):
            _, _, zrec = read_pcap(zout)
            if len(zrec) != 3 or b"zpart7f3a9c51e2" not in bytes(zrec[2][3]) or b"zpart7f3a9c51e2" in bytes(zrec[1][3]):
                fail("z agent part: the engine should rewrite the id alone and release the second user's User-Agent")
            js = audit(args, zpol, zin, zout, work)
            if js and js["leaks"]:
                fail("z agent part: the engine's output should pass, %d leaks: %s" % (js["leaks"], js["leak_list"][:3]))
            zplain = one_capture_file(work, "zpart-plain.pcap", [zrec[0], [t + 1, 0, 0, bytes(read_pcap(zin)[2][1][3])], zrec[2]])
            js = audit(args, zpol, zin, zplain, work)
            if js and not any(h["value"] == "zpart7f3a9c51e2" and h["frame"] == 2 for h in js["leak_list"]):
                fail("z agent part: the hidden User-Agent's id in clear was not reported: %s" % js["leak_list"][:3])
            if js and any(h["frame"] == 3 for h in js["leak_list"]):
                fail("z agent part: the released User-Agent's id reported: %s" % js["leak_list"][:3])

    # 14. Multipath TCP: an ADD_ADDR (version 1, with HMAC) naming a user's
    # other address that no header carries. The engine maps it as
    # ip.client's, the audit reads it and agrees; left in clear, reported.
    def tcp4_opts(src, dst, sport, dport, opts):
        tcp = struct.pack("!HHIIHHHH", sport, dport, 1, 1, ((5 + len(opts) // 4) << 12) | 0x10, 65535, 0, 0) + opts
        ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0, 64, 6, 0,
                                   bytes(map(int, src.split("."))), bytes(map(int, dst.split(".")))))
        ip[10:12] = struct.pack("!H", ip_csum(ip))
        return bytearray(b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00" + bytes(ip) + tcp)
    opt = bytes([30, 16, 0x30, 1, 192, 168, 5, 6]) + bytes(range(1, 9))
    min_ = one_capture_file(work, "mptcp-in.pcap", [[t, 0, 0, tcp4_opts("192.168.5.5", "198.51.100.20", 40000, 443, opt)]])
    mout = os.path.join(work, "mptcp-out.pcap")
    if amon_pcap(args, min_, [("i", "ids.amon", mout)], work):
        js = audit(args, "ids.amon", min_, mout, work)
        if js and js["leaks"]:
            fail("MPTCP: the engine's output should pass, %d leaks: %s" % (js["leaks"], js["leak_list"][:3]))
        js = audit(args, "ids.amon", min_, min_, work)
        if js and not any(h["value"] == "192.168.5.6" for h in js["leak_list"]):
            fail("MPTCP: the ADD_ADDR address in clear was not reported: %s" % js["leak_list"][:3])

    # 15. Carriers over IP without ports and over LISP's UDP 4342: a user's
    # other address in an SCTP INIT address parameter, an OSPF Hello's
    # neighbour list, a PIM Hello's address list and a LISP Map-Request's
    # source EID. The engine maps each as ip.client's, the audit reads the
    # same fields; left in clear, each is reported.
    def ip4(src, dst, proto, body):
        ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), 1, 0, 64, proto, 0,
                                   bytes(map(int, src.split("."))), bytes(map(int, dst.split(".")))))
        ip[10:12] = struct.pack("!H", ip_csum(ip))
        return bytearray(b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00" + bytes(ip) + body)
    a = lambda s: bytes(map(int, s.split(".")))
    sctp = struct.pack("!HHII", 5000, 36412, 1, 0) + struct.pack("!BBH", 1, 0, 28) + bytes(16) + \
        struct.pack("!HH", 5, 8) + a("192.168.7.2")
    ospf = bytes([2, 1, 0, 48]) + a("192.168.7.1") + bytes(16) + a("255.255.255.0") + bytes(8) + bytes(8) + \
        a("192.168.7.3")
    pim = bytes([0x20, 0, 0, 0]) + struct.pack("!HH", 24, 6) + bytes([1, 0]) + a("192.168.7.4")
    lisp = bytes([0x10, 0, 0, 0]) + bytes(8) + struct.pack("!H", 1) + a("192.168.7.5") + struct.pack("!H", 1) + \
        a("192.168.7.1")
    recs = [[t, 0, 0, ip4("192.168.7.1", "198.51.100.40", 132, sctp)],
            [t, 0, 0, ip4("192.168.7.1", "224.0.0.5", 89, ospf)],
            [t, 0, 0, ip4("192.168.7.1", "224.0.0.13", 103, pim)],
            [t, 0, 0, udp4("192.168.7.1", "198.51.100.41", 4342, 4342, lisp)]]
    cin = one_capture_file(work, "carriers-in.pcap", recs)
    cout = os.path.join(work, "carriers-out.pcap")
    ran = amon_pcap(args, cin, [("i", "ids.amon", cout)], work)
    # The engine's output against its input, then the input against itself.
    clean, raw = (audit(args, "ids.amon", cin, cout, work), audit(args, "ids.amon", cin, cin, work)) if ran else (None, None)
    if clean and clean["leaks"]:
        fail("carriers: the engine's output should pass, %d leaks: %s" % (clean["leaks"], clean["leak_list"][:3]))
    got = {h["value"] for h in raw["leak_list"]} if raw else set()
    missing = [v for v in ("192.168.7.2", "192.168.7.3", "192.168.7.4", "192.168.7.5") if raw and v not in got]
    if missing:
        fail("carriers: in clear in message bodies and not reported: %s" % missing)

    # 16. A user's address as four binary bytes in a payload no plugin
    # parses is possible, each with its look: after a client's name (a
    # carrier, as the Ares handshake), not chance; inside random bytes, or
    # a value with two zero bytes (10.0.0.7), chance as leak_sweep.py judges.
    rnd = random.Random(16).randbytes(200)
    recs = [[t, 0, 0, udp4("192.168.9.2", "198.51.100.50", 40000, 40001, b"hello")],
            [t + 1, 0, 0, udp4("10.0.0.7", "198.51.100.50", 40000, 40001, b"hello")],
            [t + 2, 0, 0, udp4("192.168.9.1", "198.51.100.51", 40002, 40003, b"Ares\0" + a("192.168.9.2"))],
            [t + 3, 0, 0, udp4("192.168.9.1", "198.51.100.51", 40002, 40003, rnd[:90] + a("192.168.9.2") + rnd[90:])],
            [t + 4, 0, 0, udp4("192.168.9.1", "198.51.100.51", 40002, 40003, b"count " + a("10.0.0.7") + b" seen")]]
    pin = one_capture_file(work, "possible-in.pcap", recs)
    js = audit(args, "ids.amon", pin, pin, work)
    if js:
        got = sorted((h["frame"], h["value"], h["chance"]) for h in js["possible_list"])
        want = [(3, "192.168.9.2", ""), (4, "192.168.9.2", "random-looking bytes"), (5, "10.0.0.7", "low-entropy value")]
        if got != want or js["possible_chance"] != 2:
            fail("possible hits' look: %s (%d chance), expected %s (2 chance)" % (got, js["possible_chance"], want))

    # 17. HTTP request heads split over TCP segments: the Cookie's value is
    # in a later segment than the request line, in two segments and in
    # three (the third's out of order, behind a retransmitted first). Read
    # packet by packet the values are no field; followed as a stream they
    # are, and the input as its own output leaks each. The engine holds the
    # segments and redacts the values: its output passes.
    def tcp4(src, dst, sport, dport, seq, flags, payload=b""):
        tcp = struct.pack("!HHIIHHHH", sport, dport, seq, 1, (5 << 12) | flags, 65535, 0, 0) + payload
        ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0, 64, 6, 0,
                                   bytes(map(int, src.split("."))), bytes(map(int, dst.split(".")))))
        ip[10:12] = struct.pack("!H", ip_csum(ip))
        return bytearray(b"\x02\0\0\0\0\x02\x02\0\0\0\0\x01\x08\x00" + bytes(ip) + tcp)

    def split_flow(cport, parts, order):
        user, server = "192.168.21.5", "198.51.100.61"
        frames = [tcp4(user, server, cport, 80, 999, 0x02), tcp4(server, user, 80, cport, 4999, 0x12),
                  tcp4(user, server, cport, 80, 1000, 0x10)]
        offs = [1000 + sum(len(p) for p in parts[:i]) for i in range(len(parts))]
        for i in order:
            frames.append(tcp4(user, server, cport, 80, offs[i], 0x18, parts[i]))
        return frames

    tok2, tok3 = b"Qx7Lm2Rp9TvK4sWd", b"Hn5Bz8Yc3JfG6uEa"
    two = [b"GET /cart HTTP/1.1\r\nHost: shop.example.org\r\nAccept: */*\r\n",
           b"Cookie: sid=" + tok2 + b"\r\n\r\n"]
    three = [b"GET /pay HTTP/1.1\r\nHost: shop.example.org\r\n",
             b"Cookie: basket=" + tok3 + b"; lang=en\r\n",
             b"Authorization: Basic YWxpY2U6czNjcmV0Cg==\r\n\r\n"]
    frames = split_flow(40500, two, [0, 1]) + split_flow(40501, three, [0, 2, 0, 1])
    sin = one_capture_file(work, "split-head-in.pcap", [[t + 1, i * 1000, 0, f] for i, f in enumerate(frames)])
    js = audit(args, "ids.amon", sin, sin, work)
    if js:
        got = sorted({(h["value"], h["frame"]) for h in js["leak_list"] if h["class"] in ("http.cookie", "http.authorization")})
        want_values = {tok2.decode(), tok3.decode(), "Basic YWxpY2U6czNjcmV0Cg=="}
        if not want_values <= {v for v, _ in got}:
            fail("split heads: the values of heads split over segments were not reported in clear: %s (want %s)"
                 % (got, sorted(want_values)))
        if any(f not in (5, 10, 12) for _, f in got):
            fail("split heads: reported in frames other than the segments carrying them: %s" % got)
        sh = js.get("split_heads", {})
        if sh.get("whole") != 2 or sh.get("out_of_order", 0) < 1:
            fail("split heads: expected two heads read whole, one segment past a hole: %s" % sh)
    sout = os.path.join(work, "split-head-ids.pcap")
    if amon_pcap(args, sin, [("i", "ids.amon", sout)], work):
        _, _, srec = read_pcap(sout)
        if any(tok in bytes(r[3]) for r in srec for tok in (tok2, tok3)):
            fail("split heads: the engine left a cookie value in clear")
        js = audit(args, "ids.amon", sin, sout, work)
        if js and js["leaks"]:
            fail("split heads: the engine's output should pass, %d leaks: %s" % (js["leaks"], js["leak_list"][:3]))
        if js and js["classes"] and not any(c["class"] == "http.cookie" and c["protected"] >= 2 for c in js["classes"]):
            fail("split heads: the cookie values were not collected: %s" % js["classes"])

    # 18. A Cookie whose value the segment boundary cuts in two: whole in
    # neither frame of the input as its own output, found where the two
    # segments are searched joined; the engine's output passes.
    tok4 = b"Vw4Kp7Nq2Xs9Ld3Fz"
    cut = [b"GET /acct HTTP/1.1\r\nHost: shop.example.org\r\nCookie: id=" + tok4[:7],
           tok4[7:] + b"\r\n\r\n"]
    cin = one_capture_file(work, "split-value-in.pcap",
                           [[t + 2, i * 1000, 0, f] for i, f in enumerate(split_flow(40502, cut, [0, 1]))])
    js = audit(args, "ids.amon", cin, cin, work)
    if js and not any(h["value"] == tok4.decode() and h["frame"] == 5 and "across segments from frame 4" in h["context"]
                      for h in js["leak_list"]):
        fail("split value: a cookie value cut by the segment boundary was not reported across frames 4 and 5: %s"
             % [h for h in js["leak_list"] if h["class"] == "http.cookie"])
    cout = os.path.join(work, "split-value-ids.pcap")
    if amon_pcap(args, cin, [("i", "ids.amon", cout)], work):
        js = audit(args, "ids.amon", cin, cout, work)
        if js and js["leaks"]:
            fail("split value: the engine's output should pass, %d leaks: %s" % (js["leaks"], js["leak_list"][:3]))


# ---------------------------------------------------------------------------
# shipped policies x captures


def one_capture(args, work, pols, cap):
    name = os.path.basename(cap)[:-5]
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    outs = [(p[:-5], os.path.join(work, p), os.path.join(d, p[:-5] + ".pcap")) for p in pols]
    t0 = time.time()
    pr = run_pcap(args, cap, outs, work)
    res = []
    # A capture cut short ends amon's input with exit 1 and everything before
    # the break written out; that much is audited like any other output.
    if pr.returncode != 0 and not (pr.returncode == 1 and "input stopped early" in pr.stderr):
        return name, [("*", None, "amon pcap exit %d: %s" % (pr.returncode, pr.stderr.strip()[:200]))], time.time() - t0
    for pol_name, pol, out in outs:
        js = audit(args, pol, cap, out, work)
        res.append((pol_name, js, None))
    return name, res, time.time() - t0


def shipped(args):
    work = args.work
    pols = setup_policies(args, work)
    caps = sorted(os.path.join(args.pcaps, f) for f in os.listdir(args.pcaps)
                  if f.endswith(".pcap") and (not args.only or f[:-5] in args.only))
    t0 = time.time()
    seen = set()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        for name, res, secs in ex.map(lambda c: one_capture(args, work, pols, c), caps):
            for pol, js, err in res:
                if err:
                    fail("%s: %s" % (name, err))
                    continue
                if js is None:
                    continue
                key = (name, pol)
                seen.add(key)
                lim, why = KNOWN_LEAKS.get(key, (0, ""))
                if js["leaks"] > lim:
                    fail("%s %s: %d leaks%s: %s" % (name, pol, js["leaks"], " (known: %d, %s)" % (lim, why) if lim else "",
                                                   "; ".join("frame %d off %d %s %s (%s) in %s" % (h["frame"], h["offset"], h["class"],
                                                             h["value"], h["encoding"], h["context"]) for h in js["leak_list"][:3])))
                elif lim and js["leaks"] < lim:
                    print("NOTE %s %s: %d leaks, fewer than the %d known: lower KNOWN_LEAKS" % (name, pol, js["leaks"], lim))
                plim, pwhy = POSSIBLE.get(key, (0, ""))
                # Without --fixrand hidden names get fresh random letters per
                # run: chance matches in them may come and go, by a few.
                plim = plim + plim // 4 + 2 if plim else 0
                if js["possible"] > plim:
                    fail("%s %s: %d possible hits (%.2f expected by chance)%s: %s" % (
                        name, pol, js["possible"], js["possible_expected"], " (allowed %d: %s)" % (plim, pwhy) if plim else "",
                        "; ".join("frame %d off %d %s %s in %s" % (h["frame"], h["offset"], h["class"], h["value"], h["context"])
                                  for h in js["possible_list"][:3])))
                print("%-40s %-9s leaks %5d possible %5d (%.2f by chance)" % (name, pol, js["leaks"], js["possible"],
                                                                            js["possible_expected"]), flush=True)
            print("  %s: %.1f s" % (name, secs), flush=True)
    for key in KNOWN_LEAKS:
        if key not in seen and not args.only:
            print("NOTE known leak entry %s not run" % (key,))
    print("shipped: %d captures x %d policies in %.1f s" % (len(caps), len(pols), time.time() - t0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--amon", required=True)
    ap.add_argument("--rules", required=True)
    ap.add_argument("--pcaps", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--fixrand", default=None,
                    help="LD_PRELOAD library fixing amon's per-run secrets (tests/bench/fixrand.c)")
    ap.add_argument("--only", type=lambda v: set(v.split(",")), default=None,
                    help="shipped: only these captures (names without .pcap, comma-separated)")
    ap.add_argument("what", choices=["planted", "shipped"])
    args = ap.parse_args()
    args.amon = os.path.abspath(args.amon)
    if args.fixrand:
        args.fixrand = os.path.abspath(args.fixrand)
    args.rules = os.path.abspath(args.rules)
    args.pcaps = os.path.abspath(args.pcaps)
    args.work = os.path.abspath(args.work)
    if not os.path.isdir(args.pcaps):
        print("skipped: no captures folder %s" % args.pcaps)
        return SKIP
    if os.path.isdir(args.work):
        shutil.rmtree(args.work)
    os.makedirs(args.work)
    planted(args) if args.what == "planted" else shipped(args)
    if failures:
        print("%d checks failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
