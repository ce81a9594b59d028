#!/usr/bin/env python3
"""Integration tests of the real `amon` binary on the real captures in
../shared/pcaps, with tshark as the independent oracle.

    pcap_suite.py --amon BIN --pcaps DIR --work DIR captures --shard I/N
    pcap_suite.py --amon BIN --pcaps DIR --work DIR run-vdev
    pcap_suite.py --amon BIN --pcaps DIR --work DIR workers

Exit status: 0 pass, 1 a check failed, 77 skipped (ctest SKIP_RETURN_CODE):
the captures folder or tshark is absent.  Every failing check prints a line
starting with FAIL naming the capture, consumer and frame.

Python 3 standard library only: the pcap reader and the L2/L3 walk below are
written from the formats, not from amon's code, so they can disagree with it.
"""

import argparse
import ipaddress
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import e2e_lib  # noqa: E402  (tshark's output on the shared captures, kept by content)

SKIP = 77

# ---------------------------------------------------------------------------
# pcap reader


class Rec:
    __slots__ = ("ts_ns", "caplen", "wirelen", "data")

    def __init__(self, ts_ns, caplen, wirelen, data):
        self.ts_ns, self.caplen, self.wirelen, self.data = ts_ns, caplen, wirelen, data


class Pcap:
    def __init__(self):
        self.recs = []
        self.linktype = None
        self.nanos = False
        self.error = None  # file-level corruption: records before it are in recs


# libpcap refuses records above this (its largest per-DLT snaplen); a reader
# that trusts a record header further would allocate whatever a corrupt file says.
MAX_CAPLEN = 262144


def read_pcap(path):
    p = Pcap()
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 24:
        p.error = "file header cut short"
        return p
    magic_le = struct.unpack("<I", buf[:4])[0]
    magics = {0xA1B2C3D4: ("<", False), 0xA1B23C4D: ("<", True)}
    swapped = {0xD4C3B2A1: (">", False), 0x4D3CB2A1: (">", True)}
    if magic_le in magics:
        end, p.nanos = magics[magic_le]
    elif magic_le in swapped:
        end, p.nanos = swapped[magic_le]
    else:
        raise ValueError("%s: not a classic pcap file (magic %08x)" % (path, magic_le))
    _, _, _, _, _snap, p.linktype = struct.unpack(end + "HHiIII", buf[4:24])
    hdr = struct.Struct(end + "IIII")
    off = 24
    while off < len(buf):
        if off + 16 > len(buf):
            p.error = "record header cut short at byte %d" % off
            break
        sec, frac, incl, orig = hdr.unpack_from(buf, off)
        if incl > MAX_CAPLEN:
            p.error = "record at byte %d claims caplen %d" % (off, incl)
            break
        if off + 16 + incl > len(buf):
            p.error = "record at byte %d cut short (%d of %d bytes)" % (off, len(buf) - off - 16, incl)
            break
        data = buf[off + 16: off + 16 + incl]
        ts = sec * 1000000000 + (frac if p.nanos else frac * 1000)
        p.recs.append(Rec(ts, incl, orig, data))
        off += 16 + incl
    return p


# ---------------------------------------------------------------------------
# L2/L3 walk: where the outermost IP header sits (Ethernet, 802.1Q/802.1ad,
# MPLS, PPPoE session), its addresses and its L4 header.


class L3:
    __slots__ = ("off", "ver", "alen", "src", "dst", "l4", "proto", "first_frag", "frag", "pppoe")


def be16(b, o):
    return b[o] << 8 | b[o + 1]


def outer_ip(d):
    if len(d) < 14:
        return None
    return ip_at(d, 14, be16(d, 12))


def ip_at(d, off, et):
    """The IP header after an EtherType `et` ending at `off` (VLAN tags,
    PPPoE, MPLS followed), as amon's decoder finds it."""
    n = len(d)
    tags = 0
    while et in (0x8100, 0x88A8, 0x9100):
        if off + 4 > n or tags == 4:
            return None
        et, off, tags = be16(d, off + 2), off + 4, tags + 1
    pppoe = None
    if et == 0x8864:
        if off + 8 > n:
            return None
        ppp = be16(d, off + 6)
        pppoe, off = off, off + 8
        et = {0x0021: 0x0800, 0x0057: 0x86DD}.get(ppp)
    elif et in (0x8847, 0x8848):
        for _ in range(8):
            if off + 4 > n:
                return None
            bos = d[off + 2] & 1
            off += 4
            if bos:
                break
        else:
            return None
        if off >= n:
            return None
        et = {4: 0x0800, 6: 0x86DD}.get(d[off] >> 4)
    r = L3()
    r.off, r.pppoe = off, pppoe
    if et == 0x0800:
        r.ver, r.alen = 4, 4
        if off + 20 > n:
            return None
        r.src, r.dst = off + 12, off + 16
        ihl = (d[off] & 15) * 4
        r.proto = d[off + 9]
        r.first_frag = (be16(d, off + 6) & 0x1FFF) == 0
        r.frag = (be16(d, off + 6) & 0x3FFF) != 0
        r.l4 = off + ihl if ihl >= 20 else None
    elif et == 0x86DD:
        r.ver, r.alen = 6, 16
        if off + 40 > n:
            return None
        r.src, r.dst = off + 8, off + 24
        nh, o, r.first_frag, r.frag = d[off + 6], off + 40, True, False
        for _ in range(8):
            if nh not in (0, 43, 44, 60, 51):
                break
            if o + 8 > n:
                o = None
                break
            if nh == 44:
                r.frag = True
                r.first_frag = r.first_frag and (be16(d, o + 2) & 0xFFF8) == 0
                ln = 8
            elif nh == 51:
                ln = (d[o + 1] + 2) * 4
            else:
                ln = (d[o + 1] + 1) * 8
            nh, o = d[o], o + ln
        r.proto, r.l4 = nh, o
    else:
        return None
    return r


MAX_ENCAP = 4


def encap_next(d, r, force_teredo=False):
    """What the IP layer r carries when it is a tunnel amon opens
    (plugins/l2l4/tunnels.cpp): (the next IP layer or None, the byte offsets
    of this layer's encapsulation headers a rewrite may change: UDP/GRE
    checksum, an inner Ethernet header's MACs). None when r is no tunnel or
    one amon leaves opaque."""
    n = len(d)
    if r is None or r.frag or r.l4 is None:
        return None
    ip_end = r.off + (be16(d, r.off + 2) if r.ver == 4 else 40 + be16(d, r.off + 4))
    end = min(ip_end, n)
    pos = set()
    nxt = None  # ("eth", off) / ("ip", off, ethertype) / ("nibble", off)
    if r.proto == 17:
        u = r.l4
        if u + 8 > end:
            return None
        sp, dp, ul = be16(d, u), be16(d, u + 2), be16(d, u + 4)
        lim = min(ip_end, u + ul)
        end = min(lim, n)
        h = u + 8
        pos.update((u + 6, u + 7))
        ports = (sp, dp)
        if 2152 in ports:
            if h + 8 > end:
                return None
            fl = d[h]
            if (fl >> 5) != 1 or not (fl & 0x10) or d[h + 1] != 0xFF:
                return None
            gend = h + 8 + be16(d, h + 2)
            if gend > end:
                return None
            q = h + 8
            if fl & 7:
                if q + 4 > gend:
                    return None
                nx = d[q + 3]
                q += 4
                i = 0
                while nx:
                    if i == 16 or not (fl & 4) or q + 1 > gend:
                        return None
                    el = d[q] * 4
                    if el == 0 or q + el > gend:
                        return None
                    nx = d[q + el - 1]
                    q += el
                    i += 1
            if q >= gend:
                return None
            nxt = ("nibble", q)
        elif dp == 4789:  # VXLAN, VXLAN-GPE and Geneve: by their destination port
            if h + 8 > end or not (d[h] & 8):
                return None
            nxt = ("eth", h + 8)
        elif dp == 4790:
            if h + 8 > end or not (d[h] & 8) or (d[h] & 0x30):
                return None
            if not (d[h] & 4):
                nxt = ("eth", h + 8)
            else:
                nxt = {1: ("ip", h + 8, 0x0800), 2: ("ip", h + 8, 0x86DD), 3: ("eth", h + 8),
                       5: ("ip", h + 8, 0x8847)}.get(d[h + 3])
        elif dp == 6081:
            if h + 8 > end or (d[h] >> 6):
                return None
            hl = 8 + (d[h] & 0x3F) * 4
            if h + hl > end:
                return None
            et = be16(d, h + 2)
            nxt = ("eth", h + hl) if et == 0x6558 else ("ip", h + hl, et) if et in (0x0800, 0x86DD, 0x8847) else None
        elif 5072 in ports:
            # AYIYA: an 8-byte header, the identity (the sender's inner
            # address, rewritten as that address), the signature, then a
            # forwarded IPv4/IPv6 packet.
            if h + 8 > end:
                return None
            idlen, idtype, op, nh = 1 << (d[h] >> 4), d[h] & 0x0F, d[h + 2] & 0x0F, d[h + 3]
            if (d[h] >> 4) > 8 or idtype > 2 or (d[h + 1] & 0x0F) > 2 or (d[h + 2] >> 4) > 2 or op > 7:
                return None
            q = h + 8 + idlen + (d[h + 1] >> 4) * 4
            if idtype:
                pos.update(range(h + 8, min(h + 8 + idlen, end)))
            if op not in (1, 3) or nh not in (4, 41) or q >= end:
                return (None, pos) if nh == 59 else None
            nxt = ("ip", q, 0x0800 if nh == 4 else 0x86DD)
        elif 3544 in ports or force_teredo or teredo_by_content(d, h, end, lim):
            q = h
            if q + 2 <= end and be16(d, q) == 1:
                if q + 4 > end:
                    return None
                q += 4 + d[q + 2] + d[q + 3] + 9
            if q + 8 <= end and be16(d, q) == 0:
                # The origin indication's address (XORed with all ones)
                # takes the tunnel endpoints' rule; its port is kept.
                pos.update(range(q + 4, q + 8))
                q += 8
            elif q + 2 <= end and be16(d, q) == 0:
                q += 8
            if q + 40 > end or (d[q] >> 4) != 6:
                return None
            nxt = ("ip", q, 0x86DD)
        else:
            return None
    elif r.proto == 47:
        g = r.l4
        if g + 4 > end:
            return None
        fl, proto = be16(d, g), be16(d, g + 2)
        if (fl & 7) == 1:
            # PPTP's enhanced GRE carrying PPP: IPv4/IPv6 frames only.
            if (fl & 0xE000) != 0x2000 or proto != 0x880B or not (fl & 0x1000):
                return None
            q = g + 12 + (4 if fl & 0x0080 else 0)
            if q + 2 <= end and d[q] == 0xFF and d[q + 1] == 0x03:
                q += 2
            if q + 1 > end:
                return None
            if d[q] & 1:
                pp, q = d[q], q + 1
            elif q + 2 <= end:
                pp, q = be16(d, q), q + 2
            else:
                return None
            et = {0x21: 0x0800, 0x57: 0x86DD}.get(pp)
            if et is None:
                return None
            pos.update((g + 4, g + 5))  # the payload length follows a cut
            return ip_at(d, q, et), pos
        if (fl & 0x4000) or (fl & 7):
            return None
        q = g + 4
        if fl & 0x8000:
            pos.update((g + 4, g + 5))
            q += 4
        if fl & 0x2000:
            q += 4
        seq = fl & 0x1000
        if seq:
            q += 4
        if q > end:
            return None
        if proto == 0x88BE:
            if not seq:
                nxt = ("eth", q)
            elif q + 8 <= end and (d[q] >> 4) == 1:
                nxt = ("eth", q + 8)
            else:
                return None
        elif proto == 0x22EB:
            if q + 12 > end or (d[q] >> 4) != 2:
                return None
            ft = (d[q + 10] >> 2) & 0x1F
            hl = 12 + (8 if d[q + 11] & 1 else 0)
            if ft or q + hl > end:
                return None
            nxt = ("eth", q + hl)
        elif proto == 0x6558:
            nxt = ("eth", q)
        elif proto in (0x0800, 0x86DD, 0x8847, 0x8848):
            nxt = ("ip", q, proto)
        else:
            return None
    elif r.proto in (4, 41):
        nxt = ("ip", r.l4, 0x0800 if r.proto == 4 else 0x86DD)
    else:
        return None
    if nxt is None:
        return None
    if nxt[0] == "nibble":
        v = d[nxt[1]] >> 4
        if v not in (4, 6):
            return None
        nxt = ("ip", nxt[1], 0x0800 if v == 4 else 0x86DD)
    if nxt[0] == "eth":
        e = nxt[1]
        if e + 14 > end:
            return None, pos
        pos.update(range(e, e + 12))
        return ip_at(d, e + 14, be16(d, e + 12)), pos
    return ip_at(d, nxt[1], nxt[2]), pos


def content_teredo(d, r):
    """r is a UDP datagram off the tunnel ports that carries Teredo (teredo_by_content)."""
    if r is None or r.frag or r.l4 is None or r.proto != 17 or r.l4 + 8 > len(d):
        return False
    u = r.l4
    if be16(d, u) in TUNNEL_UDP_PORTS or be16(d, u + 2) in TUNNEL_UDP_PORTS:
        return False
    ip_end = r.off + (be16(d, r.off + 2) if r.ver == 4 else 40 + be16(d, r.off + 4))
    lim = min(ip_end, u + be16(d, u + 4))
    return teredo_by_content(d, u + 8, min(lim, len(d)), lim)


def ip_layers(d, like=None):
    """[(IP layer, positions of the encapsulation around the next one)],
    outermost first, as deep as amon opens tunnels. like: the input record
    of an output one: peer-to-peer Teredo found in it by content is opened
    in d too (the anonymized inner addresses no longer look like Teredo's)."""
    forced = set()
    lr, k = outer_ip(like) if like is not None else None, 0
    while lr is not None and k < MAX_ENCAP:
        if content_teredo(like, lr):
            forced.add(k)
        nx = encap_next(like, lr)
        lr, k = (nx[0] if nx else None), k + 1
    r = outer_ip(d)
    out = []
    while r is not None:
        nx = encap_next(d, r, len(out) in forced) if len(out) < MAX_ENCAP else None
        if nx is None:
            out.append((r, set()))
            break
        out.append((r, nx[1]))
        r = nx[0]
    return out


def addrs(d, r):
    """(src, dst) bytes of the outer IP header, or None when not captured in full."""
    if r is None or r.dst + r.alen > len(d):
        return None
    return d[r.src:r.src + r.alen], d[r.dst:r.dst + r.alen]


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def addr_text_spans(d, a):
    """[start, end) of every place d spells address a (bytes, 4 or 16) as
    text standing alone: what `addr_text = map` rewrites."""
    import ipaddress
    if len(a) == 4:
        forms = [".".join(str(x) for x in a).encode()]
    else:
        ip = ipaddress.IPv6Address(a)
        c = ip.compressed
        if "." in c:
            return []
        forms = {c.encode(), c.upper().encode(), ip.exploded.encode()}
    spans = []
    for f in forms:
        at = d.find(f)
        while at >= 0:
            end = at + len(f)
            prev = d[at - 1:at]
            nxt = d[end:end + 1]
            if len(a) == 4:
                ok = not (prev.isdigit() or prev == b".") and not nxt.isdigit() and \
                    not (nxt == b"." and d[end + 1:end + 2].isdigit())
            else:
                hexd = b"0123456789abcdefABCDEF:"
                ok = not (prev and prev in hexd) and not (nxt and nxt in hexd)
            if ok:
                spans.append((at, end))
            at = d.find(f, at + 1)
    return spans


# The `prefix` consumer's `clients` (write_policies): users' addresses.
PREFIX_CLIENTS = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7",
                                                      "fe80::/10")]


def in_prefix_clients(a):
    x = ipaddress.ip_address(bytes(a))
    return any(x.version == n.version and x in n for n in PREFIX_CLIENTS)


def endpoint_expect(x, cp, users):
    """A tunnel endpoint under the `prefix` consumer: a user's (inside
    `clients`, or outside and given ip.client's rule anywhere in the
    output) takes ip.client's Crypto-PAn (protect's mapping), any other
    ip.server's /24 (v6 /48)."""
    if (in_prefix_clients(x) or x in users) and cp.fwd.get(x) is not None:
        return cp.fwd[x]
    return mask(x, 24, 48)


def users_of(inp, xo, xpairs, cp):
    """The input addresses the output shows with ip.client's Crypto-PAn in
    some header: users of the consumer, whom every other position must
    treat alike (one address, one treatment)."""
    users = set()
    for i, k in xpairs:
        a, b = inp.recs[i], xo[k]
        la, lb = ip_layers(a.data), ip_layers(b.data, like=a.data)
        for j in range(min(len(la), len(lb))):
            o_in, o_out = addrs(a.data, la[j][0]), addrs(b.data, lb[j][0])
            if not o_in or not o_out:
                continue
            for x, y in zip(o_in, o_out):
                c = cp.fwd.get(x)
                if c is not None and y == c and c != mask(x, 24, 48):
                    users.add(x)
    return users


def kept_class(a):
    """An address class-preserving Crypto-PAn gives back as it is
    (doc/cryptopan.md): IPv4 0/8, 127/8, 224/4 and 240/4; IPv6 ::, ::1 and
    multicast but solicited-node (whose low 24 bits are a unicast's)."""
    if len(a) == 4:
        return a[0] in (0, 127) or a[0] >= 224
    if a == bytes(16) or a == bytes(15) + b"\x01":
        return True
    return a[0] == 0xff and not (a[:13] == bytes.fromhex("ff0200000000000000000001ff"))


def special_class(a):
    """An address outside the ordinary unicast space: kept, or its prefix
    kept (link-local, CGN, IETF and documentation IPv6, IPv4 inside IPv6)."""
    if kept_class(a):
        return True
    if len(a) == 4:
        return a[:2] == bytes([169, 254]) or (a[0] == 100 and 64 <= a[1] < 128)
    return (a[0] == 0xfe and a[1] & 0xc0 == 0x80) or a[:4] == bytes.fromhex("20010db8") or \
        (a[:2] == bytes.fromhex("2001") and a[2] < 2) or a[:12] == bytes(10) + b"\xff\xff" or \
        a[:12] == bytes.fromhex("0064ff9b0000000000000000") or a[:8] == bytes.fromhex("0100000000000000")


def fmt_addr(a):
    if len(a) == 4:
        return ".".join(str(x) for x in a)
    return ":".join("%x" % be16(a, i) for i in range(0, 16, 2))


# ---------------------------------------------------------------------------
# reporting


class Checker:
    def __init__(self):
        self.failures = 0
        self.printed = {}

    def fail(self, where, msg):
        self.failures += 1
        # Thousands of identical failures drown the first one; the count still shows.
        key = where.split(" ")[0]
        n = self.printed[key] = self.printed.get(key, 0) + 1
        if n <= 25:
            print("FAIL %s: %s" % (where, msg), flush=True)
        elif n == 26:
            print("FAIL %s: ... (further failures counted, not printed)" % key, flush=True)

    def check(self, cond, where, msg):
        if not cond:
            self.fail(where, msg)
        return cond


# ---------------------------------------------------------------------------
# running amon


def write_key_and_policies(work):
    os.makedirs(work, exist_ok=True)
    key = os.path.join(work, "k.hex")
    # The canonical Crypto-PAn sample key, not a random one: Crypto-PAn has
    # fixed points, and how many depends on the key (a critical branching
    # process: one expected over the IPv4 space, but some keys keep whole
    # subtrees), so "every address changed" is only a fixed fact per key.
    # With this key no address of the shared captures maps to itself.
    with open(key, "w") as f:
        f.write("1522178d33a4cf80130a5b1649907d10d8988f837979652762574c2d2a842202\n")
    os.chmod(key, 0o600)
    pol = {
        # Every address through one key, so this consumer's output is the
        # Crypto-PAn oracle for the `prefix` consumer's client side.
        "protect": 'key k = file("%s")\n'
                   'eth.src, eth.dst     : timestamp()\n'
                   'ip.client, ip.server : cryptopan(key=k)\n'
                   'payload              : keep()\n' % key,
        # `clients` says who the users are, as the shipped policies do: without
        # it a host is learnt as a user by the worker that sees it initiate a
        # flow, so outputs with several workers could differ from one's.
        "prefix": 'key k = file("%s")\n'
                  'clients = { 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7, fe80::/10 }\n'
                  'ip.client : cryptopan(key=k)\n'
                  'ip.server : prefix(24, v6=48)\n'
                  'payload   : cut()\n' % key,
        "ident": 'eth.src, eth.dst : keep()\n'
                 'ip.src, ip.dst   : keep()\n'
                 'payload          : keep()\n',
    }
    paths = {}
    for name, text in pol.items():
        paths[name] = os.path.join(work, name + ".amon")
        with open(paths[name], "w") as f:
            f.write(text)
    return paths


CONSUMERS = ("protect", "prefix", "ident")


def run_amon_pcap(amon, cap, work, tag, policies, workers=1):
    outs = {c: os.path.join(work, "%s.%s.pcap" % (tag, c)) for c in CONSUMERS}
    stats = os.path.join(work, tag + ".stats.json")
    for f in list(outs.values()) + [stats]:
        if os.path.exists(f):
            os.unlink(f)
    cmd = [amon, "pcap", "--read", cap, "--workers", str(workers), "--stats-json", stats, "--quiet"]
    for c in CONSUMERS:
        cmd += ["--consumer", "%s=%s:%s" % (c, policies[c], outs[c])]
    t0 = time.time()
    pr = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=600)
    pr.cmdline = " ".join(cmd)
    return pr, outs, stats, time.time() - t0


def load_stats(path):
    with open(path) as f:
        js = json.load(f)
    return js, {c["name"]: c for c in js["consumers"]}


# ---------------------------------------------------------------------------
# tshark


def tshark_bin():
    return shutil.which("tshark")


def tshark_checksums(path):
    """frame number -> (ip statuses, tcp statuses, udp statuses); 0 Bad, 1 Good."""
    out = e2e_lib.tshark_stdout(
        ["-r", path, "-n", "-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
         "-o", "udp.check_checksum:TRUE", "-T", "fields", "-E", "occurrence=a", "-e", "frame.number",
         "-e", "ip.checksum.status", "-e", "tcp.checksum.status", "-e", "udp.checksum.status"],
        timeout=600, errors="replace")
    res = {}
    for line in out.splitlines():
        f = line.split("\t")
        if len(f) < 4 or not f[0].isdigit():
            continue
        res[int(f[0])] = tuple([x for x in col.split(",") if x] for col in f[1:4])
    return res


def tshark_short_links(path):
    """Frames whose IP datagram runs past the PPPoE payload that carries it:
    tshark checks the L4 checksum over what the PPPoE length holds, amon
    over the IP length, so the two disagree on which segment the checksum
    covers (after a cut both lengths agree again)."""
    out = e2e_lib.tshark_stdout(
        ["-r", path, "-n", "-Y", "pppoe.payload_length && ip.len", "-T", "fields", "-E", "occurrence=l",
         "-e", "frame.number", "-e", "pppoe.payload_length", "-e", "ip.len"],
        timeout=600, errors="replace")
    res = set()
    for line in out.splitlines():
        f = line.split("\t")
        if len(f) == 3 and all(x.isdigit() for x in f) and int(f[2]) + 2 > int(f[1]):
            res.add(int(f[0]))
    return res


def tshark_errors(path):
    """Frame numbers tshark marks malformed or with an error-level expert info
    (default preferences: checksum validation off, so bad checksums are not errors)."""
    out = e2e_lib.tshark_stdout(
        ["-r", path, "-n", "-Y", "_ws.malformed || _ws.expert.severity==error", "-T", "fields",
         "-e", "frame.number"], timeout=600, errors="replace")
    return {int(x) for x in out.split() if x.isdigit()}


# ---------------------------------------------------------------------------
# pairing output records with input records


def similarity(a, b):
    n = min(len(a), len(b), 256)
    return sum(1 for i in range(n) if a[i] == b[i])


TUNNEL_UDP_PORTS = (2152, 4789, 4790, 6081, 3544)


def teredo_by_content(d, h, end, lim):
    """Teredo between peers, any port (as amon's decoder): after the optional
    indicators, an IPv6 header that fits the datagram and names a 2001:0::/32
    address at one end."""
    q = h
    if q + 4 <= end and d[q] == 0 and d[q + 1] == 1:
        q += 4 + d[q + 2] + d[q + 3] + 9
    if q + 2 <= end and d[q] == 0 and d[q + 1] == 0:
        q += 8
    if q + 40 > end or (d[q] >> 4) != 6 or be16(d, q + 4) + 40 > lim - q:
        return False
    return d[q + 8:q + 12] == b"\x20\x01\x00\x00" or d[q + 24:q + 28] == b"\x20\x01\x00\x00"


def tunnel_fragment_times(recs, all_frags=False):
    """{record index: record times of its datagram} for the fragments of
    outer IPv4 datagrams whose first fragment carries a tunnel: amon
    anonymizes such a datagram as one packet once it is whole, so each of
    its fragments carries the datagram's rewrite (timestamp() MACs of the
    time it became whole, inner fields this per-frame check cannot locate
    in a fragment). test_tunnel_frag.py checks those datagrams. all_frags:
    every fragmented datagram, IPv6 ones too (amon makes them all whole),
    an IPv6 one grouped by its address pair."""
    groups, tunnel = {}, set()
    for i, rec in enumerate(recs):
        d = rec.data
        r = outer_ip(d)
        if r is None or not r.frag or (r.ver != 4 and not all_frags) or r.off + (20 if r.ver == 4 else 40) > len(d):
            continue
        key = (bytes(d[r.src:r.src + 8]), be16(d, r.off + 4), r.proto) if r.ver == 4 else (bytes(d[r.src:r.src + 32]),)
        groups.setdefault(key, []).append(i)
        if all_frags:
            tunnel.add(key)
        if r.first_frag and (r.proto in (4, 41, 47) or (r.proto == 17 and r.l4 is not None and r.l4 + 4 <= len(d) and
                                                         (be16(d, r.l4) in TUNNEL_UDP_PORTS or
                                                          be16(d, r.l4 + 2) in TUNNEL_UDP_PORTS))):
            tunnel.add(key)
    out = {}
    for key in tunnel:
        times = {recs[i].ts_ns for i in groups[key]}
        for i in groups[key]:
            out[i] = times
    return out


def pair_records(inp, out, dropped):
    """[(in_index, out_index)]; None when an output record has no input record.
    Records the engine holds (TCP segments of a split head, IP fragments
    until their datagram is whole) may leave after later ones: when the
    records are not in input order, each output record is matched to the
    most similar input record with its timestamp not matched yet."""
    pairs = pair_in_order(inp, out, dropped)
    if pairs is not None:
        return pairs
    by_ts = {}
    for i, r in enumerate(inp):
        by_ts.setdefault(r.ts_ns, []).append(i)
    pairs = []
    for k, b in enumerate(out):
        cands = by_ts.get(b.ts_ns)
        if not cands:
            return None
        best = max(cands, key=lambda i: (similarity(inp[i].data, b.data), -i))
        cands.remove(best)
        pairs.append((best, k))
    return pairs


def pair_in_order(inp, out, dropped):
    """[(in_index, out_index)]; None when an output record has no input record.
    With --workers 1 the output keeps input order; dropped frames leave gaps.
    Output records are taken in runs of equal timestamps and matched, in
    order, to the next run of input records with that timestamp; when the
    consumer dropped some of the run, the most similar input record that
    still leaves enough for the rest of the run is taken."""
    if dropped == 0:
        if len(inp) != len(out) or any(a.ts_ns != b.ts_ns for a, b in zip(inp, out)):
            return None
        return [(i, i) for i in range(len(out))]
    pairs, j, k = [], 0, 0
    while k < len(out):
        t = out[k].ts_ns
        n = 1
        while k + n < len(out) and out[k + n].ts_ns == t:
            n += 1
        i0 = j
        while i0 < len(inp) and inp[i0].ts_ns != t:
            i0 += 1
        m = 0
        while i0 + m < len(inp) and inp[i0 + m].ts_ns == t:
            m += 1
        if m < n:
            return None
        prev = i0 - 1
        for r in range(n):
            lo, hi = prev + 1, i0 + m - (n - r)
            best = max(range(lo, hi + 1), key=lambda i: (similarity(inp[i].data, out[k + r].data), -i))
            pairs.append((best, k + r))
            prev = best
        j, k = prev + 1, k + n
    return pairs


# ---------------------------------------------------------------------------
# per-capture checks


def mac48(b):
    return int.from_bytes(b, "big")


def allowed_diff_positions(d, r):
    """Byte offsets a payload-keeping rewrite may change: MACs, the outer IP
    addresses, the IPv4 header checksum, the L4 checksum."""
    pos = set(range(12))
    if r is None:
        return pos
    pos.update(range(r.src, r.src + r.alen))
    pos.update(range(r.dst, r.dst + r.alen))
    if r.ver == 4:
        pos.update((r.off + 10, r.off + 11))
        # IPv4 options record addresses (mapped) and unknown options' data
        # and padding are zeroed: e2e_ip_options checks them.
        pos.update(range(r.off + 20, r.off + (d[r.off] & 15) * 4))
    if r.l4 is not None and r.first_frag:
        co = {6: 16, 17: 6, 1: 2, 58: 2}.get(r.proto)
        if co is not None:
            pos.update((r.l4 + co, r.l4 + co + 1))
        # TCP option bytes past the option list (after End of Option List,
        # or from an option whose length cannot be) are zeroed (e2e_mptcp).
        if r.proto == 6 and len(d) >= r.l4 + 20:
            o, end = r.l4 + 20, r.l4 + (d[r.l4 + 12] >> 4) * 4
            i = o
            while i < min(end, len(d)):
                if d[i] == 0:
                    i += 1
                    break
                if d[i] == 1:
                    i += 1
                    continue
                if i + 1 >= end or i + 1 >= len(d) or d[i + 1] < 2 or d[i + 1] > end - i:
                    break
                i += d[i + 1]
            if i < end:
                pos.update(range(i, end))
        # An ICMP error quotes a datagram whose addresses get the same
        # rewrite (or are zeroed): its addresses, its IPv4 header checksum
        # and a quoted UDP checksum may change too.
        if len(d) > r.l4 + 8:
            t = d[r.l4]
            err = (r.proto == 1 and t in (3, 4, 5, 11, 12)) or (r.proto == 58 and t < 128)
            q = r.l4 + 8
            if err and len(d) > q:
                v = d[q] >> 4
                if v == 4 and len(d) >= q + 20:
                    ihl = (d[q] & 15) * 4
                    pos.update(range(q + 10, q + 12))
                    pos.update(range(q + 12, q + 20))
                    if d[q + 9] in (6, 17):
                        co = 6 if d[q + 9] == 17 else 16
                        pos.update((q + ihl + co, q + ihl + co + 1))
                elif v == 6 and len(d) >= q + 40:
                    pos.update(range(q + 8, q + 40))
                    if d[q + 6] in (6, 17):
                        co = 6 if d[q + 6] == 17 else 16
                        pos.update((q + 40 + co, q + 40 + co + 1))
            # Neighbour discovery, RIPng and RIP bodies name addresses and
            # MACs (targets, link-layer options, prefixes, routes): they take
            # the packet's mapping; unknown options and RIP passwords are zeroed.
            nd = r.proto == 58 and 133 <= t <= 137
            rip = r.proto == 17 and d[r.l4:r.l4 + 2] in (b"\x02\x09", b"\x02\x08") and \
                d[r.l4 + 2:r.l4 + 4] == d[r.l4:r.l4 + 2]
            if nd or rip:
                pos.update(range(r.l4 + 8, len(d)))
    return pos


def copied_addresses_allowed(cp, a, b, diff, allowed):
    """The changed bytes diff of output record b (input a) that remain
    unexplained. An address of a header copied into a body amon parses (an
    MPTCP ADD_ADDR, a DNS answer in a later fragment of its datagram) is
    rewritten as that header's address: the mapping seen in the headers,
    nothing else. A reverse-DNS name spells an address: it is rewritten or
    redacted (x) as one, in the labels before its suffix."""
    allowed = set(allowed)
    for x, y in cp.fwd.items():
        at = a.data.find(x)
        while at >= 0:
            if b.data[at:at + len(x)] == y:
                allowed |= set(range(at, at + len(x)))
            at = a.data.find(x, at + 1)
    # Teredo's origin indication: the address XOR-ed with all ones.
    for x, y in cp.fwd.items():
        ox, oy = bytes(v ^ 0xFF for v in x), bytes(v ^ 0xFF for v in y)
        at = a.data.find(ox)
        while at >= 0:
            if b.data[at:at + len(x)] == oy:
                allowed |= set(range(at, at + len(x)))
            at = a.data.find(ox, at + 1)
    # A MAC of the frame's Ethernet header written as text (an mDNS TXT
    # value) takes that MAC's rule: its text may change, its form stays.
    for mac in (a.data[0:6], a.data[6:12]):
        for sep in (":", "-"):
            for txt in (sep.join("%02x" % v for v in mac), sep.join("%02X" % v for v in mac)):
                t = txt.encode()
                at = a.data.find(t)
                while at >= 0:
                    allowed |= {q for q in range(at, at + len(t)) if b.data[q] in b"0123456789abcdefABCDEF:-"}
                    at = a.data.find(t, at + 1)
    # A MAC of the Ethernet header in binary elsewhere (an EDNS Owner
    # option) takes that MAC's rule.
    for mac in (a.data[0:6], a.data[6:12]):
        at = a.data.find(mac, 12)
        while at >= 0:
            allowed |= set(range(at, at + 6))
            at = a.data.find(mac, at + 1)
    # Any MAC written as text (aa:bb:cc:dd:ee:ff) stays MAC-shaped text.
    for m in re.finditer(rb"[0-9A-Fa-f]{2}([:-])[0-9A-Fa-f]{2}(?:\1[0-9A-Fa-f]{2}){4}", a.data):
        allowed |= {q for q in range(m.start(), m.end()) if b.data[q] in b"0123456789abcdefABCDEF:-"}
    # (the suffix's "arpa" may be a compression pointer)
    for suf in (b"\x07in-addr", b"\x03ip6"):
        at = a.data.find(suf)
        while at >= 0:
            allowed |= {q for q in range(max(0, at - 64), at) if b.data[q] < 64 or b.data[q] in b"x0123456789abcdef"}
            at = a.data.find(suf, at + 1)
    return [x for x in diff if x not in allowed]


class AddrMap:
    """Crypto-PAn as observed: input address -> output address, per family."""

    def __init__(self, ck, where):
        self.fwd, self.rev, self.ck, self.where = {}, {}, ck, where

    def add(self, a, b, frame):
        old = self.fwd.get(a)
        if old is None:
            self.fwd[a] = b
            prev = self.rev.setdefault(b, a)
            self.ck.check(prev == a, self.where, "frame %d: %s and %s both map to %s (not a permutation)"
                          % (frame, fmt_addr(prev), fmt_addr(a), fmt_addr(b)))
        else:
            self.ck.check(old == b, self.where, "frame %d: %s mapped to %s, earlier to %s"
                          % (frame, fmt_addr(a), fmt_addr(b), fmt_addr(old)))

    def check_prefix_preserving(self):
        """Common-prefix length is kept for every pair iff, at every prefix
        length k, the k-bit prefix of the output is a one-to-one function of
        the k-bit prefix of the input: O(N * bits) instead of O(N^2)."""
        # Class-preserving Crypto-PAn (doc/cryptopan.md) keeps the special
        # classes and walks an ordinary address whose standard pseudonym is
        # special: ordinary addresses sharing at least the longest prefix
        # that decides a class (/16 for IPv4, /64 for IPv6) walk alike and
        # keep their common prefix; shorter common prefixes are the plain
        # Crypto-PAn's, tested with the reference vectors (tests/crypto).
        for alen in (4, 16):
            items = [(int.from_bytes(a, "big"), int.from_bytes(b, "big")) for a, b in self.fwd.items()
                     if len(a) == alen and not special_class(a)]
            bits = alen * 8
            for k in range(16 if alen == 4 else 64, bits + 1):
                f, g = {}, {}
                sh = bits - k
                for a, b in items:
                    pa, pb = a >> sh, b >> sh
                    if f.setdefault(pa, pb) != pb or g.setdefault(pb, pa) != pa:
                        self.ck.fail(self.where, "Crypto-PAn is not prefix-preserving at /%d (%d addresses, v%d)"
                                     % (k, len(items), 4 if alen == 4 else 6))
                        return
        return


def well_formed(rec, r):
    """TCP/UDP first fragment or whole datagram whose lengths are possible.
    A fuzzed length makes the ports unusable for amon's flow lookup, so such
    a packet may legitimately land in another flow (and take other roles).
    A first fragment's UDP length covers the whole datagram: not checked."""
    d = rec.data
    if r is None or r.l4 is None or r.proto not in (6, 17) or not r.first_frag or r.l4 + 8 > rec.caplen:
        return False
    if r.ver == 4:
        tot, ihl = be16(d, r.off + 2), (d[r.off] & 15) * 4
        if ihl < 20 or tot < ihl or r.off + tot > rec.wirelen:
            return False
        pay = tot - ihl
    else:
        pay = be16(d, r.off + 4) + 40 - (r.l4 - r.off)
        if r.off + 40 + be16(d, r.off + 4) > rec.wirelen:
            return False
    if r.proto == 17 and not r.frag:
        ulen = be16(d, r.l4 + 4)
        return 8 <= ulen <= pay
    return r.proto == 6 and len(d) > r.l4 + 12 and (d[r.l4 + 12] >> 4) >= 5 or r.proto == 17


def mask(a, v4bits, v6bits):
    bits = v4bits if len(a) == 4 else v6bits
    x = int.from_bytes(a, "big")
    w = len(a) * 8
    x &= ((1 << w) - 1) ^ ((1 << (w - bits)) - 1)
    return x.to_bytes(len(a), "big")


def check_capture(args, ck, cap, policies, have_tshark):
    name = os.path.basename(cap)
    work = os.path.join(args.work, os.path.splitext(name)[0])
    os.makedirs(work, exist_ok=True)
    inp = read_pcap(cap)
    pr, outs, stats_path, secs = run_amon_pcap(args.amon, cap, work, "w1", policies)
    where = name
    print("-- %s: %d records%s, amon %.1fs exit %d" % (name, len(inp.recs),
          " (file error: %s)" % inp.error if inp.error else "", secs, pr.returncode), flush=True)
    print("   " + pr.cmdline, flush=True)
    if pr.returncode < 0 or pr.returncode > 2 or "AddressSanitizer" in pr.stderr or "runtime error" in pr.stderr:
        ck.fail(where, "amon crashed (exit %d): %s" % (pr.returncode, pr.stderr[-2000:]))
        return
    if inp.error:
        # A corrupt file: the records before the corruption are processed,
        # the run ends with a message that names the file.
        ck.check(pr.returncode in (0, 1), where, "exit %d on a corrupt file (0 or 1 expected): %s"
                 % (pr.returncode, pr.stderr[-500:]))
        ck.check(cap in pr.stderr or name in pr.stderr, where,
                 "no error naming the file on stderr for a corrupt file (%s); stderr: %r"
                 % (inp.error, pr.stderr[-500:]))
    elif not ck.check(pr.returncode == 0, where, "exit %d: %s" % (pr.returncode, pr.stderr[-1500:])):
        return
    if not ck.check(os.path.exists(stats_path), where, "no --stats-json file written"):
        return
    js, st = load_stats(stats_path)
    nin = len(inp.recs)
    out = {}
    for c in CONSUMERS:
        w = "%s [%s]" % (name, c)
        s = st.get(c)
        if not ck.check(s is not None, w, "consumer missing from stats JSON"):
            return
        ck.check(s["in"] == nin, w, "stats in=%d, the file holds %d readable records" % (s["in"], nin))
        ck.check(s["in"] == s["out"] + s["dropped"], w, "in=%d != out=%d + dropped=%d"
                 % (s["in"], s["out"], s["dropped"]))
        ck.check(s.get("filtered", 0) == 0 and s.get("tx_dropped", 0) == 0, w,
                 "filtered=%s tx_dropped=%s with no select and a file output" % (s.get("filtered"), s.get("tx_dropped")))
        ck.check(s["written"] == s["out"], w, "written=%d != out=%d" % (s["written"], s["out"]))
        if not ck.check(os.path.exists(outs[c]), w, "output file missing"):
            return
        o = read_pcap(outs[c])
        ck.check(o.error is None, w, "output file is corrupt: %s" % o.error)
        ck.check(o.linktype == 1, w, "output link type %s, not Ethernet" % o.linktype)
        ck.check(len(o.recs) == s["out"], w, "output holds %d records, stats say out=%d" % (len(o.recs), s["out"]))
        out[c] = o

    # ident: byte-identical, record by record, and delivered without a copy.
    w = name + " [ident]"
    s = st["ident"]
    ck.check(s["dropped"] == 0, w, "a keep-only policy dropped %d frames" % s["dropped"])
    ck.check(s["shared"] == s["in"] and s["copied"] == 0, w,
             "identity consumer got copies (shared=%d copied=%d in=%d)" % (s["shared"], s["copied"], s["in"]))
    oi = out["ident"].recs
    if ck.check(len(oi) == nin, w, "%d records out of %d" % (len(oi), nin)):
        bad = 0
        for i, (a, b) in enumerate(zip(inp.recs, oi)):
            if (a.ts_ns, a.caplen, a.wirelen, a.data) != (b.ts_ns, b.caplen, b.wirelen, b.data):
                bad += 1
                if bad <= 3:
                    ck.fail(w, "frame %d differs: in ts=%d caplen=%d len=%d, out ts=%d caplen=%d len=%d%s"
                            % (i + 1, a.ts_ns, a.caplen, a.wirelen, b.ts_ns, b.caplen, b.wirelen,
                               "" if a.data[:b.caplen] == b.data[:a.caplen] else ", bytes differ"))
        ck.check(bad == 0, w, "%d of %d frames not byte-identical" % (bad, nin))

    # protect: pair, then per frame.
    w = name + " [protect]"
    po = out["protect"].recs
    ppairs = pair_records(inp.recs, po, st["protect"]["dropped"])
    tfrag = tunnel_fragment_times(inp.recs)
    afrag = tunnel_fragment_times(inp.recs, all_frags=True)
    cp = AddrMap(ck, w)
    copied = []
    sp = st["protect"]
    # Cuts the policy asks for (tunnel payloads, ICMP quotes, undecodable
    # frames) legitimately shorten frames, jumbo ones included.
    policy_cuts = sum(sp.get(x, 0) for x in ("tunnel_cut", "icmp_quote_cut", "error_cut", "unknown_cut"))
    if ck.check(ppairs is not None, w, "output records cannot be matched to input records by order and timestamp"):
        same_addr = 0
        for i, k in ppairs:
            a, b = inp.recs[i], po[k]
            fr = "frame %d (out %d)" % (i + 1, k + 1)
            ck.check(a.ts_ns == b.ts_ns, w, "%s: record time %d -> %d" % (fr, a.ts_ns, b.ts_ns))
            ck.check(b.caplen <= a.caplen, w, "%s: caplen grew %d -> %d" % (fr, a.caplen, b.caplen))
            if b.caplen == a.caplen:
                ck.check(b.wirelen == a.wirelen, w, "%s: record length %d -> %d (caplen %d kept)"
                         % (fr, a.wirelen, b.wirelen, a.caplen))
            if a.caplen > 9000 and not policy_cuts:
                ck.check(b.caplen == a.caplen, w, "%s: jumbo frame of %d bytes came out with %d"
                         % (fr, a.caplen, b.caplen))
            if b.caplen >= 12:
                secs, ns = b.ts_ns // 1000000000, b.ts_ns % 1000000000
                mt = mac48(b.data[0:6]) * 1000000000 + mac48(b.data[6:12])
                ok = mt in afrag[i] if i in afrag else (mac48(b.data[0:6]) == secs and mac48(b.data[6:12]) == ns)
                ck.check(ok, w, "%s: timestamp() MACs %s/%s, record time %d.%09d"
                         % (fr, b.data[0:6].hex(), b.data[6:12].hex(), secs, ns))
            ra = outer_ip(a.data)
            # Every IP layer of a tunnelled frame: the outer ones take
            # ip.server's action by default (here the same Crypto-PAn).
            la, lb = ip_layers(a.data), ip_layers(b.data, like=a.data)
            for j, (rj, _) in enumerate(la):
                ad_in = addrs(a.data, rj)
                ad_out = addrs(b.data, lb[j][0]) if j < len(lb) else None
                if ad_in and ad_out:
                    for pos, x, y in (("src", ad_in[0], ad_out[0]), ("dst", ad_in[1], ad_out[1])):
                        if x == y and not kept_class(x):
                            same_addr += 1
                            if same_addr <= 3:
                                ck.fail(w, "%s: ip.%s %s (layer %d) left in clear" % (fr, pos, fmt_addr(x), j + 1))
                        cp.add(x, y, i + 1)
                elif ad_in and b.caplen > rj.src:
                    ck.fail(w, "%s: input has IPv%d addresses (layer %d), output frame (caplen %d) has none where "
                            "they were" % (fr, rj.ver, j + 1, b.caplen))
            if b.caplen == a.caplen and i not in tfrag:
                allowed = set()
                for rj, extra in la:
                    allowed |= allowed_diff_positions(a.data, rj) | extra
                if not la:
                    allowed = allowed_diff_positions(a.data, ra)
                # The packet's own addresses spelled as text in its payload
                # (addr_text = map): the text of the mapped address there.
                if la:
                    rj = la[-1][0]
                    ad_in, ad_out = addrs(a.data, rj), addrs(b.data, rj)
                    for x, y in zip(ad_in or (), ad_out or ()):
                        if x == y:
                            continue
                        for s0, s1 in addr_text_spans(a.data, x):
                            if s0 < rj.dst + rj.alen:
                                continue
                            allowed |= set(range(s0, s1))
                            txt = b.data[s0:s1].decode("ascii", "replace")
                            try:
                                import ipaddress
                                if len(x) == 4:
                                    got = bytes(int(o) for o in txt.split("."))
                                else:
                                    got = ipaddress.IPv6Address(txt).packed
                            except ValueError:
                                got = None
                            ck.check(got in (y, bytes(len(y))), w, "%s: %s as text at %d became %r, not %s"
                                     % (fr, fmt_addr(x), s0, txt, fmt_addr(y)))
                diff = [x for x in range(a.caplen) if a.data[x] != b.data[x] and x not in allowed]
                # A later fragment carries its share of the rewritten
                # datagram (fields this per-frame check cannot locate):
                # e2e_ip_frag checks fragments whole.
                oa = outer_ip(a.data)
                # DNS-format messages (DNS, mDNS, LLMNR, NBNS) and DHCP: amon
                # parses them and rewrites the addresses and MACs of their
                # answers and options; their plugins' tests check those bytes.
                rl = la[-1][0] if la else None
                if (rl is not None and rl.proto == 17 and rl.l4 is not None and rl.l4 + 4 <= a.caplen and
                        {be16(a.data, rl.l4), be16(a.data, rl.l4 + 2)} & {53, 5353, 5355, 137, 67, 68, 546, 547}):
                    diff = [x for x in diff if x < rl.l4 + 8]
                if oa is not None and oa.frag and not oa.first_frag:
                    diff = [x for x in diff if x < oa.off + (20 if oa.ver == 4 else 40)]
                if diff:
                    # Judged once every header's mapping is known (below).
                    copied.append((fr, a, b, diff, allowed))
        ck.check(same_addr == 0, w, "%d addresses left in clear" % same_addr)
        for fr, a, b, diff, allowed in copied:
            diff = copied_addresses_allowed(cp, a, b, diff, allowed)
            ck.check(not diff, w, "%s: bytes changed outside MACs/addresses/checksums at offsets %s" % (fr, diff[:8]))
        cp.check_prefix_preserving()

    # prefix: client = Crypto-PAn (same key as protect), server = /24 (v6 /48),
    # payload cut with every length fixed.
    w = name + " [prefix]"
    xo = out["prefix"].recs
    xpairs = pair_records(inp.recs, xo, st["prefix"]["dropped"])
    if ck.check(xpairs is not None, w, "output records cannot be matched to input records by order and timestamp"):
        roles = {}
        users = users_of(inp, xo, xpairs, cp)
        for i, k in xpairs:
            a, b = inp.recs[i], xo[k]
            fr = "frame %d (out %d)" % (i + 1, k + 1)
            ck.check(a.ts_ns == b.ts_ns, w, "%s: record time %d -> %d" % (fr, a.ts_ns, b.ts_ns))
            # Only a record left as it was may still miss bytes (its Ethernet
            # padding, when the headers end exactly at the snaplen).
            # A fragment whose datagram could not be made whole is snapped,
            # not cut (a fragment without its data would be invalid):
            # lengths kept, the record ends at the payload.
            oa = outer_ip(a.data)
            snapped_frag = oa is not None and oa.frag and b.wirelen == a.wirelen
            ck.check(b.caplen == b.wirelen or (b.caplen, b.wirelen) == (a.caplen, a.wirelen) or snapped_frag, w,
                     "%s: after payload cut caplen %d != len %d (input %d/%d)"
                     % (fr, b.caplen, b.wirelen, a.caplen, a.wirelen))
            if i in tfrag:
                # A fragment of a tunnel datagram: its outer addresses are
                # the tunnel's endpoints (/24); the rest is checked whole by
                # test_tunnel_frag.py.
                r0, r1 = outer_ip(a.data), outer_ip(b.data)
                o_in, o_out = addrs(a.data, r0), addrs(b.data, r1)
                ck.check(o_in is None or o_out == (endpoint_expect(o_in[0], cp, users), endpoint_expect(o_in[1], cp, users)), w,
                         "%s: fragment of a tunnel datagram: endpoints %s became %s; expected /24, or a user's Crypto-PAn"
                         % (fr, o_in and [fmt_addr(x) for x in o_in], o_out and [fmt_addr(x) for x in o_out]))
                continue
            la, lb = ip_layers(a.data), ip_layers(b.data, like=a.data)
            ra, rb = (la[-1][0] if la else None), (lb[len(la) - 1][0] if la and len(lb) >= len(la) else None)
            # The tunnel around the packet: its endpoints take ip.server's
            # action (/24) when the policy protects addresses, a user's
            # endpoint ip.client's.
            tunnel = []
            for j in range(len(la) - 1):
                o_in = addrs(a.data, la[j][0])
                o_out = addrs(b.data, lb[j][0]) if j < len(lb) else None
                if o_in and o_out:
                    tunnel += list(o_in)
                    exp = (endpoint_expect(o_in[0], cp, users), endpoint_expect(o_in[1], cp, users))
                    # PPTP's enhanced GRE: its ends take the roles of their
                    # TCP 1723 control connection, the client's Crypto-PAn.
                    rj = la[j][0]
                    if rj.proto == 47 and rj.l4 is not None and rj.l4 + 2 <= len(a.data) and (a.data[rj.l4 + 1] & 7) == 1:
                        alts = [exp, (cp.fwd.get(o_in[0]), exp[1]), (exp[0], cp.fwd.get(o_in[1]))]
                        if o_out in alts:
                            exp = o_out
                    ck.check(o_out == exp, w,
                             "%s: tunnel endpoints %s > %s (layer %d) became %s > %s; expected /24, or a user's Crypto-PAn"
                             % (fr, fmt_addr(o_in[0]), fmt_addr(o_in[1]), j + 1, fmt_addr(o_out[0]),
                                fmt_addr(o_out[1])))
            ad_in, ad_out = addrs(a.data, ra), addrs(b.data, rb)
            if ad_in and ad_out:
                s, d = ad_in
                cs, cd = cp.fwd.get(s), cp.fwd.get(d)
                ms, md = mask(s, 24, 48), mask(d, 24, 48)
                opts = []
                if cs is not None:
                    opts.append(((cs, md), "src"))
                if cd is not None:
                    opts.append(((ms, cd), "dst"))
                # A flow whose roles are uncertain (no SYN, no single likely
                # server port, undecodable) gives both ends the client's rule.
                if cs is not None and cd is not None:
                    opts.append(((cs, cd), "both"))
                # A user (one that takes ip.client's rule anywhere) is never
                # the /24 of a server elsewhere.
                opts = [(t, r) for t, r in opts if not (r == "dst" and s in users) and not (r == "src" and d in users)]
                hit = [r for t, r in opts if t == ad_out]
                if opts:
                    ck.check(hit, w, "%s: %s > %s became %s > %s; expected client Crypto-PAn (as in protect) "
                             "and server /24, or both Crypto-PAn" % (fr, fmt_addr(s), fmt_addr(d),
                                                                    fmt_addr(ad_out[0]), fmt_addr(ad_out[1])))
                if hit and well_formed(a, ra):
                    sp, dp = be16(a.data, ra.l4), be16(a.data, ra.l4 + 2)
                    key = (ra.proto,) + tuple(sorted(((s, sp), (d, dp)))) + tuple(sorted(tunnel))
                    client = s if hit[0] == "src" else d if hit[0] == "dst" else None
                    # ambiguous when both choices give the same bytes (client == server /24)
                    # (a packet that does not decode takes "both" inside a decided flow)
                    if len(hit) == 1 and client is not None:
                        prev = roles.setdefault(key, client)
                        ck.check(prev == client, w, "%s: client of flow %s:%d <-> %s:%d switched from %s to %s"
                                 % (fr, fmt_addr(s), sp, fmt_addr(d), dp, fmt_addr(prev), fmt_addr(client)))
            for li, (rb, _) in enumerate(lb):
                if rb is None or b.caplen < rb.off + (20 if rb.ver == 4 else 40):
                    continue
                l3len = b.caplen - rb.off
                if snapped_frag:
                    pass
                elif rb.ver == 4:
                    ck.check(be16(b.data, rb.off + 2) == l3len, w, "%s: IPv4 total length %d, %d bytes follow"
                             % (fr, be16(b.data, rb.off + 2), l3len))
                    ihl = (b.data[rb.off] & 15) * 4
                    # A header checksum wrong in the input stays wrong
                    # (updated, not recomputed): only a right one must
                    # stay right.
                    r_in = la[li][0] if li < len(la) else None
                    was_right = (r_in is None or r_in.ver != 4 or r_in.off + ihl > a.caplen
                                 or csum(a.data[r_in.off:r_in.off + ihl]) == 0xFFFF)
                    if ihl >= 20 and rb.off + ihl <= b.caplen and was_right:
                        ck.check(csum(b.data[rb.off:rb.off + ihl]) == 0xFFFF, w, "%s: IPv4 header checksum wrong"
                                 % fr)
                else:
                    ck.check(be16(b.data, rb.off + 4) == l3len - 40, w, "%s: IPv6 payload length %d, %d bytes follow"
                             % (fr, be16(b.data, rb.off + 4), l3len - 40))
                if not snapped_frag and rb.proto == 17 and rb.first_frag and rb.l4 is not None and rb.l4 + 8 <= b.caplen:
                    ck.check(be16(b.data, rb.l4 + 4) == b.caplen - rb.l4, w, "%s: UDP length %d, %d bytes follow"
                             % (fr, be16(b.data, rb.l4 + 4), b.caplen - rb.l4))
                if rb.pppoe is not None and not snapped_frag:
                    ck.check(be16(b.data, rb.pppoe + 4) == b.caplen - rb.pppoe - 6, w, "%s: PPPoE length %d, %d "
                             "bytes follow" % (fr, be16(b.data, rb.pppoe + 4), b.caplen - rb.pppoe - 6))

    # truncated (snaplen) records keep their wire length in ident and protect:
    # covered above (ident byte/len identity; protect len kept when caplen is).

    if not have_tshark:
        return
    if inp.error:
        # tshark reads a corrupt file its own way (it shows the record header
        # garbage as a frame): no frame-by-frame comparison is meaningful.
        print("NOTE %s: tshark comparison not run on a corrupt file" % name)
        return
    tin_ck = tshark_checksums(cap)
    tin_err = tshark_errors(cap)
    tin_short = tshark_short_links(cap)
    for c, pairs in (("protect", ppairs), ("prefix", xpairs)):
        if pairs is None:
            continue
        w = "%s [%s] tshark" % (name, c)
        tout_ck = tshark_checksums(outs[c])
        tout_err = tshark_errors(outs[c]) if c == "protect" else set()
        bad_ck = made_good = 0
        for i, k in pairs:
            fin, fout = tin_ck.get(i + 1), tout_ck.get(k + 1)
            if fin is None or fout is None:
                continue
            for proto, li, lo in zip(("ip", "tcp", "udp"), fin, fout):
                for layer, (x, y) in enumerate(zip(li, lo)):
                    if x == "1" and y == "0":
                        bad_ck += 1
                        if bad_ck <= 5:
                            ck.fail(w, "frame %d (out %d): %s checksum (layer %d) Good in the input, Bad in the output"
                                    % (i + 1, k + 1, proto, layer + 1))
                    # Evidence stays evidence: a checksum wrong in the input
                    # is wrong in the output (updated, or recomputed with
                    # the input's error carried over).
                    if x == "0" and y == "1" and not (proto != "ip" and i + 1 in tin_short):
                        made_good += 1
                        if made_good <= 5:
                            ck.fail(w, "frame %d (out %d): %s checksum (layer %d) Bad in the input, Good in the output"
                                    % (i + 1, k + 1, proto, layer + 1))
        ck.check(bad_ck == 0, w, "%d checksums went from Good to Bad" % bad_ck)
        ck.check(made_good == 0, w, "%d checksums went from Bad to Good" % made_good)
        if c == "protect":
            # Payload is kept: the dissection must be as clean as the input's.
            new_err = [(i + 1, k + 1) for i, k in pairs if (k + 1) in tout_err and (i + 1) not in tin_err]
            if new_err or len(tout_err) > len(tin_err):
                # tshark 4.0 is not deterministic on some captures: the same
                # file (malformed-fuzz-ndpi-2020.pcap's RADIUS/EAP frames)
                # gets an expert error in about one run of five. A frame
                # counts only when every output run flags it and no input
                # run does.
                for _ in range(2):
                    tin_err |= tshark_errors(cap)
                    tout_err &= tshark_errors(outs[c])
                new_err = [(i + 1, k + 1) for i, k in pairs if (k + 1) in tout_err and (i + 1) not in tin_err]
            # Records the engine held leave after later ones: tshark then
            # reassembles overlapping fragments in another order and may
            # flag another frame of them; the count must still not grow.
            reordered = any(b[0] < a[0] for a, b in zip(pairs, pairs[1:]))
            ck.check(not new_err or reordered, w, "%d frames malformed/expert error in the output but not in the "
                     "input (input frame, output frame): %s" % (len(new_err), new_err[:8]))
            ck.check(len(tout_err) <= len(tin_err), w, "malformed/error frames grew %d -> %d"
                     % (len(tin_err), len(tout_err)))


def shard_of(files, i, n):
    """Greedy by estimated cost, so shards take about the same time;
    deterministic. A capture costs ~2 s of fixed start-up (EAL, five tshark
    runs) plus roughly 1 s per MB."""
    cost = {f: 2.0 + os.path.getsize(f) / 1e6 for f in files}
    bins = [[0.0, []] for _ in range(n)]
    for f in sorted(files, key=lambda f: (-cost[f], f)):
        b = min(bins, key=lambda x: x[0])
        b[0] += cost[f]
        b[1].append(f)
    return sorted(bins[i - 1][1])


def captures_of(pcaps):
    return sorted(os.path.join(pcaps, f) for f in os.listdir(pcaps) if f.endswith((".pcap", ".cap")))


def mode_captures(args, ck, have_tshark):
    i, n = (int(x) for x in args.shard.split("/"))
    files = shard_of(captures_of(args.pcaps), i, n)
    policies = write_key_and_policies(args.work)
    print("shard %d/%d: %s" % (i, n, " ".join(os.path.basename(f) for f in files)), flush=True)
    for f in files:
        before, t0 = ck.failures, time.time()
        check_capture(args, ck, f, policies, have_tshark)
        print("%s %s (%.1fs)" % ("PASS" if ck.failures == before else "FAILED", os.path.basename(f), time.time() - t0),
              flush=True)


# ---------------------------------------------------------------------------
# --workers 2 against --workers 1


def rec_key(r):
    return (r.ts_ns, r.caplen, r.wirelen, r.data)


def mode_workers(args, ck, have_tshark):
    policies = write_key_and_policies(args.work)
    for name in ("tls-clienthello-many-sni.pcap", "mixed-capture2.pcap"):
        cap = os.path.join(args.pcaps, name)
        if not ck.check(os.path.exists(cap), name, "capture missing from the shared folder"):
            continue
        inp = read_pcap(cap)
        res = {}
        for wk in (1, 2):
            pr, outs, stats, secs = run_amon_pcap(args.amon, cap, args.work, "%s.w%d" % (name, wk), policies, wk)
            print("-- %s --workers %d: exit %d in %.1fs" % (name, wk, pr.returncode, secs), flush=True)
            if not ck.check(pr.returncode == 0, "%s w%d" % (name, wk), "exit %d: %s" % (pr.returncode, pr.stderr[-1500:])):
                return
            _, st = load_stats(stats)
            res[wk] = {}
            for c in CONSUMERS:
                w = "%s [%s] --workers %d" % (name, c, wk)
                s = st[c]
                ck.check(s["in"] == len(inp.recs), w, "in=%d, %d records in the file" % (s["in"], len(inp.recs)))
                ck.check(s["in"] == s["out"] + s["dropped"], w, "in=%d != out=%d + dropped=%d"
                         % (s["in"], s["out"], s["dropped"]))
                o = read_pcap(outs[c])
                ck.check(len(o.recs) == s["out"], w, "%d records written, out=%d" % (len(o.recs), s["out"]))
                res[wk][c] = o.recs
        for c in CONSUMERS:
            w = "%s [%s]" % (name, c)
            a = sorted(rec_key(r) for r in res[1][c])
            b = sorted(rec_key(r) for r in res[2][c])
            if a != b:
                sa, sb = set(a), set(b)
                ck.fail(w, "--workers 2 output differs from --workers 1: %d records only in w1, %d only in w2 "
                        "(%d vs %d records)" % (len(sa - sb), len(sb - sa), len(a), len(b)))
            if c == "ident":
                ck.check(b == sorted(rec_key(r) for r in inp.recs), w,
                         "--workers 2 identity output is not the input's set of records")


# ---------------------------------------------------------------------------
# amon run with DPDK vdevs (pcap PMD in and out, null PMD)


def mode_run_vdev(args, ck, have_tshark):
    policies = write_key_and_policies(args.work)
    for name in ("dns-udp-many-queries.pcap", "tls13-ipv6-reddit.pcap", "dns-malformed-badlabel.pcap"):
        cap = os.path.join(args.pcaps, name)
        if not ck.check(os.path.exists(cap), name, "capture missing from the shared folder"):
            continue
        inp = read_pcap(cap)
        work = os.path.join(args.work, "run-" + name)
        os.makedirs(work, exist_ok=True)
        tx = os.path.join(work, "protect.pcap")
        stats = os.path.join(work, "stats.json")
        for f in (tx, stats):
            if os.path.exists(f):
                os.unlink(f)
        yaml = os.path.join(work, "amon.yaml")
        with open(yaml, "w") as f:
            f.write("workers: 1\n"
                    "inputs:\n"
                    "  - port: \"net_pcap0,rx_pcap=%s\"\n"
                    "consumers:\n"
                    "  - name: protect\n"
                    "    policy: %s\n"
                    "    output: {port: \"net_pcap1,tx_pcap=%s\"}\n"
                    "  - name: ident\n"
                    "    policy: %s\n"
                    "    output: {port: net_null0}\n" % (cap, policies["protect"], tx, policies["ident"]))
        t0 = time.time()
        pr = subprocess.run([args.amon, "run", "--config", yaml, "--until-idle=1s", "--stats-json", stats,
                             "--", "--file-prefix=amonsuite%d" % os.getpid()],
                            capture_output=True, text=True, errors="replace", timeout=300)
        t1 = time.time()
        print("-- amon run %s: exit %d in %.1fs" % (name, pr.returncode, t1 - t0), flush=True)
        w = "run " + name
        if not ck.check(pr.returncode == 0, w, "exit %d: %s" % (pr.returncode, pr.stderr[-1500:])):
            continue
        js, st = load_stats(stats)
        for c in ("protect", "ident"):
            s = st[c]
            wc = "%s [%s]" % (w, c)
            # What the pcap PMD hands over is what counts: frames it cannot
            # carry (larger than one mbuf) never reach amon; report them.
            if s["in"] != len(inp.recs):
                print("NOTE %s: the pcap PMD delivered %d of %d frames" % (wc, s["in"], len(inp.recs)), flush=True)
            ck.check(s["in"] == s["out"] + s["dropped"], wc, "in=%d != out=%d + dropped=%d"
                     % (s["in"], s["out"], s["dropped"]))
            ck.check(s["out"] == s["written"] + s.get("tx_dropped", 0), wc, "out=%d written=%d tx_dropped=%d"
                     % (s["out"], s["written"], s.get("tx_dropped", 0)))
        if name == "dns-malformed-badlabel.pcap":
            # A 63 KB frame, larger than one mbuf: it must come out whole or be
            # counted as dropped, never cut silently (the pcap PMD chains
            # segments on rx; what reaches the tx file is what we check).
            o = read_pcap(tx)
            s = st["protect"]
            # DPDK's pcap PMD writes at most 16128 bytes of a frame: such a
            # frame may come out cut only if amon counted it (tx_truncated).
            cut = 0
            for i, b in enumerate(o.recs):
                if b.caplen != inp.recs[i].caplen:
                    cut += 1
                    ck.check(b.wirelen == inp.recs[i].wirelen, w, "frame %d: cut frame lost its length" % (i + 1))
            ck.check(cut == s.get("tx_truncated", 0), w, "%d frames cut by the output port, %d counted as tx_truncated"
                     % (cut, s.get("tx_truncated", 0)))
            continue
        ck.check(st["protect"]["in"] == len(inp.recs), w, "pcap PMD delivered %d of %d frames"
                 % (st["protect"]["in"], len(inp.recs)))
        # The pcap PMD flushes its dumper when the port stops; the file must
        # hold every frame amon handed to it.
        o = read_pcap(tx)
        s = st["protect"]
        ck.check(o.error is None, w, "tx_pcap output corrupt: %s" % o.error)
        ck.check(len(o.recs) == s["written"], w, "tx_pcap holds %d records, written=%d" % (len(o.recs), s["written"]))
        if s["dropped"] == 0 and len(o.recs) == len(inp.recs):
            same = 0
            cp = AddrMap(ck, w)
            for i, (a, b) in enumerate(zip(inp.recs, o.recs)):
                ad_in, ad_out = addrs(a.data, outer_ip(a.data)), addrs(b.data, outer_ip(b.data))
                if ad_in and ad_out:
                    same += sum(x == y and not kept_class(x) for x, y in ((ad_in[0], ad_out[0]), (ad_in[1], ad_out[1])))
                    cp.add(ad_in[0], ad_out[0], i + 1)
                    cp.add(ad_in[1], ad_out[1], i + 1)
                # On an ethdev the packet's time is its arrival (the pcap PMD
                # does not pass the file's times on): the MACs carry a time
                # inside this run.
                mt = mac48(b.data[0:6]) + mac48(b.data[6:12]) / 1e9
                ck.check(t0 - 1 <= mt <= t1 + 1, w, "frame %d: timestamp() MACs say %.3f, the run was %.3f..%.3f"
                         % (i + 1, mt, t0, t1))
                ck.check(b.caplen == a.caplen, w, "frame %d: caplen %d -> %d" % (i + 1, a.caplen, b.caplen))
            ck.check(same == 0, w, "%d addresses left in clear" % same)
            cp.check_prefix_preserving()
        else:
            ck.fail(w, "cannot pair frames: dropped=%d, %d records in, %d out"
                    % (s["dropped"], len(inp.recs), len(o.recs)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--amon", required=True)
    ap.add_argument("--pcaps", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("mode", choices=("captures", "run-vdev", "workers"))
    ap.add_argument("--shard", default="1/1")
    args = ap.parse_args()
    if not os.path.isdir(args.pcaps) or not captures_of(args.pcaps):
        print("SKIPPED: captures folder %s is absent or empty (CI has ../shared/pcaps)" % args.pcaps)
        return SKIP
    have_tshark = tshark_bin() is not None
    if not have_tshark:
        print("NOTE: tshark not found: the tshark oracle checks are SKIPPED, the others run")
    os.makedirs(args.work, exist_ok=True)
    ck = Checker()
    t0 = time.time()
    {"captures": mode_captures, "run-vdev": mode_run_vdev, "workers": mode_workers}[args.mode](args, ck, have_tshark)
    print("%s: %d failed checks in %.1fs" % (args.mode, ck.failures, time.time() - t0))
    if ck.failures:
        return 1
    if not have_tshark:
        print("SKIPPED: tshark absent (install tshark to run the oracle checks)")
        return SKIP
    return 0


if __name__ == "__main__":
    sys.exit(main())
