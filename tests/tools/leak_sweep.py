#!/usr/bin/env python3
"""Independent leak sweep: runs amon over captures with the given policies and
searches every output frame, whole and raw, for the input's protected values.

The protected set is extracted from the input with tshark, not with amon's own
parsers or its audit, so a field amon does not know is still searched:

  addresses  every IPv4/IPv6 address amon rewrote in some IP header (found by
             pairing input and output frames on their timestamps and lengths;
             a prefix truncation, zanon's fallback, is not a pseudonym), and,
             for policies that z-anonymize servers, every address seen with
             fewer distinct peers than the policy's z (it can never be
             released). Searched as dotted/colon text, as reversed in-addr.arpa
             labels, and as 4/16 bytes.
  MACs       every unicast Ethernet, ARP, DHCP and 802.11 address (all four
             shipped policies hide MACs): 6 bytes and text with ':' '-' '.'
             and no separator.
  names      DNS, TLS SNI (TCP and QUIC) and HTTP Host names the policy hides:
             all of them where the payload is snapped, those with fewer users
             than z (and longer than their registrable domain) where a name
             rule is zanon; text (dotted) and DNS wire labels, caseless.
  secrets    cookie, Set-Cookie and authorization values, DHCP host names,
             NetBIOS names (also first-level encoded), user agents where the
             policy hides them.

Zero-valued identifiers, group MACs and multicast/broadcast/loopback/"this
network" (0/8) addresses identify no one and are left out. Binary IPv4 matches inside frames
whose bytes look random (entropy) are chance matches of 4 bytes: they are
reported as `chance4` with the expected number and do not fail the sweep.

Exit status: 0 when no protected value is found in any output, 1 otherwise
(2 on a usage or tool error). `--plant` writes protected values into an
output before searching it and exits 0 only if every planted value is found:
the sweep's own check that it can fail.
"""

import argparse
import gzip
import hashlib
import ipaddress
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import e2e_lib  # noqa: E402  (classic pcap reader shared by the tests)

FIELDS = [
    "frame.time_epoch", "frame.len",
    "ip.src", "ip.dst", "ipv6.src", "ipv6.dst",
    "arp.src.proto_ipv4", "arp.dst.proto_ipv4", "dhcp.ip.your", "dhcp.ip.client",
    "dns.a", "dns.aaaa", "dns.opt.client.addr4",
    "eth.src", "eth.dst", "arp.src.hw_mac", "arp.dst.hw_mac", "dhcp.hw.mac_addr",
    "wlan.sa", "wlan.da", "wlan.bssid", "wlan.ra", "wlan.ta",
    "dns.qry.name", "dns.resp.name", "dns.cname", "dns.ptr.domain_name", "dns.ns",
    "tls.handshake.extensions_server_name", "http.host",
    "http.cookie", "http.set_cookie", "http.authorization", "http.proxy_authorization",
    "http.user_agent", "dhcp.option.hostname", "nbns.name",
    "nbdgm.source_name", "nbdgm.destination_name",
]
NAME_FIELDS = ["dns.qry.name", "dns.resp.name", "dns.cname", "dns.ptr.domain_name", "dns.ns",
               "tls.handshake.extensions_server_name", "http.host"]
DNS_FIELDS = NAME_FIELDS[:5]
ADDR_FIELDS = ["ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "arp.src.proto_ipv4",
               "arp.dst.proto_ipv4", "dhcp.ip.your", "dhcp.ip.client", "dns.a", "dns.aaaa",
               "dns.opt.client.addr4"]
MAC_FIELDS = ["eth.src", "eth.dst", "arp.src.hw_mac", "arp.dst.hw_mac", "dhcp.hw.mac_addr",
              "wlan.sa", "wlan.da", "wlan.bssid", "wlan.ra", "wlan.ta"]
AGG = "\x1f"


class Policy:
    """What a shipped policy hides, read from its rule lines (not from amon)."""

    def __init__(self, path):
        self.path = path
        self.name = os.path.splitext(os.path.basename(path))[0]
        text = open(path).read()
        rules = {}
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            m = re.match(r"^([a-z0-9_.,\s]+?)\s*:\s*(\w+)\((.*)\)\s*(when.*)?$", line)
            if not m or m.group(4):
                continue
            for f in m.group(1).split(","):
                rules.setdefault(f.strip(), (m.group(2), m.group(3)))
        self.rules = rules
        pay = re.findall(r"^payload\s*:\s*(\w+)\(\)\s*(when.*)?$", text, re.M)
        self.payload_gone = any(a in ("snap", "cut", "zero") and not w for a, w in pay)

    def z(self, field):
        act, args = self.rules.get(field, ("keep", ""))
        if act != "zanon":
            return None
        m = re.search(r"z=(\d+)", args)
        return int(m.group(1)) if m else None

    def prefix_fallback(self, field):
        """(v4 bits, v6 bits) of a zanon rule's prefix fallback, or None."""
        act, args = self.rules.get(field, ("keep", ""))
        m = re.search(r"fallback=prefix\((\d+)(?:\s*,\s*v6=(\d+))?\)", args) if act == "zanon" else None
        return (int(m.group(1)), int(m.group(2) or 64)) if m else None

    def hides(self, field):
        """True when the field never leaves in clear; a z number when only
        values below z users are hidden; False when it is kept."""
        act = self.rules.get(field, ("keep", ""))[0]
        if act == "zanon":
            return self.z(field)
        if act != "keep":
            return True
        return self.payload_gone

    def names_hidden(self):
        """z per name source (None = kept, 0 = always hidden)."""
        out = {}
        for src, field in (("dns", "dns.qname"), ("tls", "tls.sni"), ("http", "http.host")):
            h = self.hides(field)
            out[src] = 0 if h is True else (h if h else None)
        # A policy that snaps tls/http payload hides those names whatever their
        # field rule says (research: only DNS is kept).
        m = re.search(r"^payload\s*:\s*snap\(\)\s*when not proto in \{([^}]*)\}", open(self.path).read(), re.M)
        if m:
            kept = {p.strip() for p in m.group(1).split(",")}
            for src in out:
                if src not in kept:
                    out[src] = 0
        return out


# ---------------------------------------------------------------- public suffixes

class Psl:
    def __init__(self, path="/usr/share/publicsuffix/public_suffix_list.dat"):
        self.rules, self.exc, self.wild = set(), set(), set()
        if os.path.exists(path):
            for line in open(path, encoding="utf-8"):
                line = line.strip()
                if not line or line.startswith("//"):
                    continue
                if line.startswith("!"):
                    self.exc.add(line[1:])
                elif line.startswith("*."):
                    self.wild.add(line[2:])
                else:
                    self.rules.add(line)

    def registrable(self, name):
        """The public suffix plus one label; None for a bare suffix."""
        labels = name.lower().rstrip(".").split(".")
        ps = 1  # the default rule "*": the last label
        for i in range(len(labels)):
            suf = ".".join(labels[i:])
            if suf in self.exc:
                ps = len(labels) - i - 1
                break
            if suf in self.rules or ".".join(labels[i + 1:]) in self.wild:
                ps = len(labels) - i
                break
        if len(labels) <= ps:
            return None
        return ".".join(labels[-ps - 1:])


# ---------------------------------------------------------------- extraction

def tshark_rows(path, fields, extra=()):
    cmd = ["-n", "-r", path, "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a",
           "-E", "aggregator=" + AGG, "-E", "quote=n", *extra]
    for f in fields:
        cmd += ["-e", f]
    rows = []
    for line in e2e_lib.tshark_stdout(cmd, timeout=None, errors="replace").splitlines():
        parts = line.split("\t")
        parts += [""] * (len(fields) - len(parts))
        rows.append({f: [v for v in p.split(AGG) if v] for f, p in zip(fields, parts)})
    return rows


def addr(v):
    try:
        return ipaddress.ip_address(v.split("%")[0])
    except ValueError:
        return None


def filler(b):
    """One byte repeated (zeros, 0xff, 0xaa padding): names no one."""
    return len(set(b)) == 1


def identifies(a):
    # "This network" (0/8) is no host's address on any wire: the engine's
    # Crypto-PAn keeps it verbatim, as it keeps loopback and multicast.
    this_net = a.version == 4 and a.packed[0] == 0
    return not (a.is_unspecified or a.is_multicast or a.is_loopback or this_net or filler(a.packed))


def mac_bytes(v):
    try:
        b = bytes(int(x, 16) for x in re.split("[:-]", v))
    except ValueError:
        return None
    if len(b) != 6 or filler(b) or b[0] & 1:
        return None
    return b


def is_truncation(orig, new):
    """new = orig's first bits with the rest zero (a prefix fallback)."""
    if orig.version != new.version:
        return False
    o, n, bits = int(orig), int(new), orig.max_prefixlen
    for p in range(bits, -1, -1):
        mask = ((1 << bits) - 1) ^ ((1 << (bits - p)) - 1)
        if (o & mask) == n:
            return True
    return False


def is_own_prefix(a, fallback):
    bits = fallback[0] if a.version == 4 else fallback[1]
    return int(a) & ((1 << (a.max_prefixlen - bits)) - 1) == 0


class Protected:
    def __init__(self):
        self.values = {}  # key -> (class, [(form, bytes, caseless, boundary)])

    def add(self, cls, key, forms):
        if key not in self.values:
            self.values[key] = (cls, forms)


def addr_forms(a):
    forms = []
    if a.version == 4:
        t = str(a).encode()
        forms.append(("text", t, False, "digit"))
        rev = str(a).split(".")[::-1]
        forms.append(("ptr-text", (".".join(rev) + ".in-addr").encode(), True, "digit"))
        forms.append(("ptr-wire", b"".join(bytes([len(x)]) + x.encode() for x in rev) + b"\x07in-addr", True, None))
        forms.append(("bin4", a.packed, False, None))
    else:
        full = a.exploded
        short = ":".join(g.lstrip("0") or "0" for g in full.split(":"))
        for t in {a.compressed, full, short}:
            forms.append(("text", t.encode(), True, "hex"))
        forms.append(("bin16", a.packed, False, None))
    return forms


def mac_forms(b):
    h = b.hex()
    return [("bin6", b, False, None),
            ("text", ":".join(h[i:i + 2] for i in range(0, 12, 2)).encode(), True, "hex"),
            ("text", "-".join(h[i:i + 2] for i in range(0, 12, 2)).encode(), True, "hex"),
            ("text", ".".join(h[i:i + 4] for i in range(0, 12, 4)).encode(), True, "hex"),
            ("text", h.encode(), True, "hex")]


def name_forms(n):
    n = n.lower().rstrip(".")
    wire = b"".join(bytes([len(x)]) + x.encode("utf-8", "replace") for x in n.split(".") if 0 < len(x) < 64)
    return [("text", n.encode("utf-8", "replace"), True, "name"), ("wire", wire, True, None)]


def nb_encode(name):
    return bytes(x for c in name.encode("latin-1", "replace") for x in (0x41 + (c >> 4), 0x41 + (c & 15)))


def cookie_values(v, set_cookie):
    out = []
    for i, part in enumerate(v.split(";")):
        if set_cookie and i > 0:
            break
        if "=" in part:
            val = part.split("=", 1)[1].strip().strip('"')
            if len(val) >= 8:
                out.append(val)
    return out


# ---------------------------------------------------------------- per capture

def input_facts(inp):
    rows = tshark_rows(inp, FIELDS + SHAPE)
    facts = {"rows": rows, "peers": defaultdict(set), "name_users": defaultdict(set),
             "name_src": defaultdict(set), "ua_users": defaultdict(set)}
    for r in rows:
        src = r["ip.src"] + r["ipv6.src"]
        dst = r["ip.dst"] + r["ipv6.dst"]
        for s, d in zip(r["ip.src"], r["ip.dst"]):
            facts["peers"][s].add(d)
            facts["peers"][d].add(s)
        for s, d in zip(r["ipv6.src"], r["ipv6.dst"]):
            facts["peers"][s].add(d)
            facts["peers"][d].add(s)
        users = set(src) | set(dst)
        for f in NAME_FIELDS:
            for n in r[f]:
                n = n.lower().rstrip(".")
                if len(n) < 4 or "<" in n:
                    continue
                facts["name_users"][n] |= users
                facts["name_src"][n].add("dns" if f in DNS_FIELDS else
                                         "tls" if f.startswith("tls") else "http")
        for ua in r["http.user_agent"]:
            facts["ua_users"][ua] |= users
    return facts


def frame_key(r):
    return round(float(r["frame.time_epoch"][0]), 6) if r["frame.time_epoch"] else None


# What no shipped policy rewrites and every output keeps: tells apart frames
# of one timestamp when amon dropped one of them (a frame that is not IP, a
# fragment whose first never came).
SHAPE = ["ip.proto", "ipv6.nxt", "ip.id", "ip.ttl", "tcp.srcport", "tcp.dstport", "udp.srcport", "udp.dstport"]
HDR_ADDR = ("ip.src", "ip.dst", "ipv6.src", "ipv6.dst")


def same_shape(r, o):
    """o may be r's output: as many addresses of each kind in its headers."""
    return all(len(o[f]) == len(r[f]) for f in HDR_ADDR)


def kinship(r, o):
    return sum(1 for f in SHAPE if r.get(f) and r[f] == o.get(f))


def output_headers(out):
    """Outer-to-inner IP addresses per output frame, keyed by (time, length)."""
    idx = defaultdict(list)
    frames = []
    for r in tshark_rows(out, ["frame.time_epoch", "frame.len", *HDR_ADDR, *SHAPE]):
        idx[frame_key(r)].append(r)
        frames.append({str(a) for f in ("ip.src", "ip.dst", "ipv6.src", "ipv6.dst") for a in map(addr, r[f]) if a})
    return idx, frames


def pair_frames(rows, out_idx):
    """(input row, output row) of each frame amon wrote. The output keeps
    the input's order, less the frames it dropped (not IP, a fragment whose
    first never came, a malformed one), so the frames of one timestamp are
    aligned in order, each output frame with one input frame of the same
    headers: most alike first (length, protocol, ports, IP id, TTL), an
    input frame left out where it has no output. Pairing each with the next
    frame of its time instead shifted every later pair by one after a
    dropped frame (many frames of a fuzzed capture share one timestamp) and
    took a neighbour's pseudonym for a kept address."""
    groups = defaultdict(list)
    for r in rows:
        groups[frame_key(r)].append(r)
    for key, ins in groups.items():
        outs = out_idx.get(key, [])
        if not outs:
            continue
        if len(ins) == 1 and len(outs) == 1:
            if same_shape(ins[0], outs[0]):
                yield ins[0], outs[0]
            continue
        yield from align(ins, outs)


def align(ins, outs):
    n, m = len(ins), len(outs)
    if n * m > 4_000_000:  # one timestamp for a whole large capture: in order
        for r, o in zip(ins, outs):
            if same_shape(r, o):
                yield r, o
        return

    def score(r, o):
        if not same_shape(r, o):
            return None
        return 10 + kinship(r, o) + (2 if r["frame.len"] == o["frame.len"] else 0)

    NEG = float("-inf")
    # f[i][j]: best score of inputs [0, i) against outputs [0, j); an input
    # may go without output (0), an output without input costs 5.
    f = [[NEG] * (m + 1) for _ in range(n + 1)]
    how = [[0] * (m + 1) for _ in range(n + 1)]
    f[0][0] = 0
    for i in range(n + 1):
        for j in range(m + 1):
            if i == 0 and j == 0:
                continue
            best, h = NEG, 0
            if i and f[i - 1][j] > best:
                best, h = f[i - 1][j], 1
            if j and f[i][j - 1] - 5 > best:
                best, h = f[i][j - 1] - 5, 2
            if i and j:
                sc = score(ins[i - 1], outs[j - 1])
                if sc is not None and f[i - 1][j - 1] + sc > best:
                    best, h = f[i - 1][j - 1] + sc, 3
            f[i][j], how[i][j] = best, h
    pairs, i, j = [], n, m
    while i or j:
        h = how[i][j]
        if h == 3:
            pairs.append((ins[i - 1], outs[j - 1]))
        i, j = (i - 1 if h in (1, 3) else i), (j - 1 if h in (2, 3) else j)
    yield from reversed(pairs)


def protected_set(pol, facts, out_idx, psl):
    prot = Protected()
    rows = facts["rows"]
    # Addresses: any one rewritten (not truncated) in some header of this output.
    rewritten = set()
    for r, o in pair_frames(rows, out_idx):
        for f in HDR_ADDR:
            for a, b in zip(r[f], o[f]):
                ia, ib = addr(a), addr(b)
                if ia and ib and ia != ib and not is_truncation(ia, ib):
                    rewritten.add(a)
    zs = [z for z in (pol.z("ip.server"), pol.z("dns.answer.addr")) if z]
    z_addr = min(zs) if zs else None
    fallbacks = [pol.prefix_fallback(f) for f in ("ip.server", "dns.answer.addr") if pol.z(f)]
    every = set()
    for r in rows:
        for f in ADDR_FIELDS:
            every.update(r[f])
    for v in sorted(every):
        a = addr(v)
        if not a or not identifies(a):
            continue
        few = z_addr is not None and len(facts["peers"].get(v, ())) < z_addr
        # An address whose host bits are zero is its own prefix: the
        # fallback writes the same bytes for every host of that prefix, so
        # seeing them tells no more than the prefix (54.239.29.0 as
        # 54.239.29.0/24). Only a rewrite elsewhere makes it protected.
        if few and all(fb and is_own_prefix(a, fb) for fb in fallbacks):
            few = False
        if v in rewritten or few or (pol.payload_gone and False):
            prot.add("addr", "addr " + str(a), addr_forms(a))
    # MACs: hidden by all four shipped policies (eth and wlan rules).
    if pol.rules.get("eth.src", ("keep",))[0] != "keep":
        for r in rows:
            for f in MAC_FIELDS:
                for v in r[f]:
                    b = mac_bytes(v)
                    if b:
                        prot.add("mac", "mac " + b.hex(":"), mac_forms(b))
    # Names.
    hid = pol.names_hidden()
    released = set()
    hidden = set()
    for n, srcs in facts["name_src"].items():
        users = len(facts["name_users"][n])
        reg = psl.registrable(n)
        keep = False
        for s in srcs:
            z = hid[s]
            if z is None or (z and users >= z):
                keep = True
            if z and reg:
                released.add(reg)
        if keep:
            released.add(n)
        else:
            hidden.add(n)
    for n in sorted(hidden - released):
        if any(r.endswith("." + n) for r in released):
            continue  # its text is part of a released name's
        prot.add("name", "name " + n, name_forms(n))
    # Secrets.
    for r in rows:
        if pol.hides("http.cookie"):
            for v in r["http.cookie"]:
                for c in cookie_values(v, False):
                    prot.add("cookie", "cookie " + c, [("text", c.encode(), False, None)])
        if pol.hides("http.set_cookie"):
            for v in r["http.set_cookie"]:
                for c in cookie_values(v, True):
                    prot.add("cookie", "cookie " + c, [("text", c.encode(), False, None)])
        if pol.hides("http.authorization"):
            for v in r["http.authorization"] + r["http.proxy_authorization"]:
                tok = v.split(" ", 1)[-1].strip()
                if len(tok) >= 8:
                    prot.add("auth", "auth " + tok, [("text", tok.encode(), False, None)])
        if pol.hides("dhcp.hostname"):
            for v in r["dhcp.option.hostname"]:
                if len(v) >= 4:
                    prot.add("hostname", "hostname " + v, [("text", v.lower().encode(), True, "name")])
        if pol.hides("netbios.name"):
            for v in r["nbns.name"] + r["nbdgm.source_name"] + r["nbdgm.destination_name"]:
                n = re.sub(r"<[0-9a-fA-F]{2}>$", "", v).strip()
                # A dotted one is a DNS name asked over NBNS (a resolver's
                # fallback), not a device's: the DNS rules decide it.
                if len(n) >= 4 and not n.startswith("__") and "." not in n and n.upper() != "WORKGROUP":
                    prot.add("hostname", "netbios " + n, [("text", n.lower().encode(), True, "name"),
                                                          ("nb-enc", nb_encode(n.upper()), False, None)])
    ua_hide = pol.hides("http.user_agent")
    if ua_hide:
        for ua, users in facts["ua_users"].items():
            if len(ua) >= 10 and (ua_hide is True or len(users) < ua_hide):
                prot.add("ua", "ua " + ua, [("text", ua.encode("utf-8", "replace"), False, None)])
    return prot


# ---------------------------------------------------------------- search

WORD = {"digit": re.compile(rb"[0-9]"), "hex": re.compile(rb"[0-9a-fA-F]"),
        "name": re.compile(rb"[0-9A-Za-z_-]")}


def entropy(b):
    if len(b) < 64:
        return 0.0
    counts = [0] * 256
    for x in b:
        counts[x] += 1
    n = len(b)
    return -sum(c / n * math.log2(c / n) for c in counts if c)


def search(frames, prot, hdrs=None):
    """frames: [bytes]; hdrs: per frame, the addresses tshark parses in its
    IP headers. Returns (leaks, chance4, expected4)."""
    blob = b"".join(frames)
    low = blob.lower()
    starts, off = [], 0
    for f in frames:
        starts.append(off)
        off += len(f)
    import bisect
    ent_cache = {}
    leaks, chance = [], []
    for key, (cls, forms) in prot.values.items():
        for form, pat, caseless, boundary in forms:
            hay = low if caseless else blob
            p = pat.lower() if caseless else pat
            if len(p) < 4:
                continue
            i = hay.find(p)
            while i >= 0:
                fi = bisect.bisect_right(starts, i) - 1
                fs, fe = starts[fi], starts[fi] + len(frames[fi])
                ok = i + len(p) <= fe
                if ok and boundary:
                    rx = WORD[boundary]
                    if (i > fs and rx.match(hay, i - 1)) or (i + len(p) < fe and rx.match(hay, i + len(p))):
                        ok = False
                if ok and form == "ptr-text" and i > fs and hay[i - 1:i] == b".":
                    ok = False
                if ok:
                    hit = (key, cls, form, fi + 1, i - fs)
                    if form == "bin4" and not (hdrs and fi < len(hdrs) and key[5:] in hdrs[fi]):
                        if fi not in ent_cache:
                            ent_cache[fi] = entropy(frames[fi][42:])
                        # Two zero octets (10.0.0.1) are as common as the
                        # zero words of headers around a checksum byte.
                        weak = pat.count(0) >= 2
                        (chance if weak or ent_cache[fi] > 6.0 else leaks).append(hit)
                    else:
                        leaks.append(hit)
                i = hay.find(p, i + 1)
    n4 = sum(1 for c, _ in prot.values.values() if c == "addr" for f in _ if f[0] == "bin4")
    expected = n4 * sum(max(0, len(f) - 3) for f in frames) / 2 ** 32
    return leaks, chance, expected


# ---------------------------------------------------------------- driver

def as_pcap(path, work):
    """A classic pcap copy of the input (gunzipped, pcapng converted)."""
    data = open(path, "rb").read(4)
    src = path
    if data[:2] == b"\x1f\x8b":
        src = os.path.join(work, os.path.basename(path)[:-3])
        with gzip.open(path, "rb") as g, open(src, "wb") as o:
            shutil.copyfileobj(g, o)
        data = open(src, "rb").read(4)
    if data == b"\x0a\x0d\x0d\x0a":
        dst = src + ".classic.pcap"
        subprocess.run(["editcap", "-F", "pcap", src, dst], check=True)
        src = dst
    return src


def policy_copies(paths, work):
    """The policies copied into work/ with keys of their own there (a
    checkout has no rules/keys): a fixed key per name, so runs repeat."""
    os.makedirs(os.path.join(work, "keys"), mode=0o700, exist_ok=True)
    out = []
    for p in paths:
        dst = os.path.join(work, os.path.basename(p))
        shutil.copy(p, dst)
        for k in re.findall(r'file\("keys/([^"]+)"\)', open(dst).read()):
            kp = os.path.join(work, "keys", k)
            if not os.path.exists(kp):
                with open(kp, "w") as f:
                    f.write(hashlib.sha256(("leak-sweep " + k).encode()).hexdigest() + "\n")
                os.chmod(kp, 0o600)
        out.append(dst)
    return out


def plant(out, prot, found):
    """Writes one value of each class not found yet into the output's last
    frames (the sweep's self-check: every planted value must be reported)."""
    lt, recs = e2e_lib.read_pcap(out)
    planted = []
    by_cls = {}
    for key, (cls, forms) in prot.values.items():
        if key not in found:
            by_cls.setdefault(cls, (key, forms))
    frames = [(ts, bytearray(b)) for ts, _, _, b in recs]
    for n, (cls, (key, forms)) in enumerate(sorted(by_cls.items())):
        form = next(f for f in forms if f[0] in ("text", "bin16", "bin6"))
        pad = b"\x00" * 70 + b" " + form[1] + b" "
        ts, b = frames[-1 - (n % len(frames))]
        frames[-1 - (n % len(frames))] = (ts, b + pad)
        planted.append(key)
    e2e_lib.write_pcap(out, [(ts, bytes(b)) for ts, b in frames])
    return planted


def known_key(cap, pol, value):
    return f"{os.path.basename(cap)}:{pol.name}:{value}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--amon", required=True)
    ap.add_argument("--policy", action="append", required=True)
    ap.add_argument("--work", default=None)
    ap.add_argument("--plant", action="store_true")
    ap.add_argument("--known", action="append", default=[],
                    help="CAPTURE:POLICY:VALUE (e.g. x.pcap:ids:addr 10.1.2.3): a leak known and not yet fixed, "
                         "reported as KNOWN; it fails the sweep once it is gone, so the list stays true")
    ap.add_argument("--keep-going", action="store_true",
                    help="a capture amon cannot read is noted and skipped (corpora hold broken files), "
                         "not the end of the sweep")
    ap.add_argument("--verbose", "-v", action="store_true")
    ap.add_argument("captures", nargs="+")
    args = ap.parse_args()
    if not shutil.which("tshark"):
        print("SKIPPED: no tshark")
        return e2e_lib.SKIP
    missing = [c for c in args.captures if not os.path.exists(c)]
    if missing:
        print("SKIPPED: no capture " + ", ".join(missing))
        return e2e_lib.SKIP
    work = args.work or tempfile.mkdtemp(prefix="leak-sweep-")
    os.makedirs(work, exist_ok=True)
    psl = Psl()
    pols = [Policy(p) for p in policy_copies(args.policy, work)]
    total, total_chance, missed = 0, 0, 0
    known, seen_known = set(args.known), set()
    for cap in args.captures:
        try:
            inp = as_pcap(cap, work)
            facts = input_facts(inp)
        except (subprocess.CalledProcessError, OSError, EOFError, ValueError) as e:
            if not args.keep_going:
                raise
            print(f"note {os.path.basename(cap)}: not read: {e}")
            continue
        for pol in pols:
            out = os.path.join(work, f"{os.path.basename(inp)}.{pol.name}.out.pcap")
            res = subprocess.run([args.amon, "pcap", "--read", inp, "--policy", pol.path, "--write", out],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                # A capture cut short still has its records up to the cut
                # written: those are searched like any other output.
                print(f"note {os.path.basename(cap)} {pol.name}: amon exit {res.returncode}: "
                      f"{res.stderr.strip().splitlines()[-1] if res.stderr.strip() else ''}")
                if not os.path.exists(out) or os.path.getsize(out) < 24:
                    if args.keep_going:
                        continue
                    return 2
            out_idx, out_hdrs = output_headers(out)
            prot = protected_set(pol, facts, out_idx, psl)
            _, recs = e2e_lib.read_pcap(out)
            leaks, chance, expected = search([r[3] for r in recs], prot, out_hdrs)
            planted = []
            if args.plant:
                planted = plant(out, prot, {h[0] for h in leaks})
                _, recs = e2e_lib.read_pcap(out)
                leaks, chance, expected = search([r[3] for r in recs], prot, out_hdrs)
            found = {h[0] for h in leaks}
            if args.plant:
                miss = [k for k in planted if k not in found]
                missed += len(miss)
                print(f"{os.path.basename(cap)} {pol.name}: planted {len(planted)}, found "
                      f"{len(planted) - len(miss)}" + (f", missed {miss}" if miss else ""))
                continue
            # An address in clear in an IP header of the output while the
            # same output pseudonymizes it elsewhere: two treatments (roles
            # decided flow by flow), told apart from payload leaks.
            per = defaultdict(int)
            for h in leaks:
                hdr = h[1] == "addr" and h[3] - 1 < len(out_hdrs) and h[0][5:] in out_hdrs[h[3] - 1]
                per[h[1] + ("(hdr)" if hdr else "")] += 1
            counts = {c: 0 for c in ("addr", "mac", "name", "cookie", "auth", "hostname", "ua")}
            for c, _ in prot.values.values():
                counts[c] += 1
            print(f"{os.path.basename(cap)} {pol.name}: protected "
                  + " ".join(f"{c}={n}" for c, n in counts.items() if n)
                  + f" | leaks {len(leaks)} ({len(found)} values)"
                  + (" " + " ".join(f"{c}={n}" for c, n in sorted(per.items())) if per else "")
                  + f" | chance4 {len(chance)} (expected {expected:.2f})")
            shown = set()
            for key, cls, form, fno, off in leaks:
                if args.verbose or (key, form) not in shown:
                    print(f"  LEAK {key} as {form} in frame {fno} at byte {off}")
                    shown.add((key, form))
            for key, cls, form, fno, off in chance[:5] if args.verbose else []:
                print(f"  chance4 {key} in frame {fno} at byte {off}")
            total += sum(1 for h in leaks if known_key(cap, pol, h[0]) not in known)
            for k in [k for k in known if k.startswith(f"{os.path.basename(cap)}:{pol.name}:")]:
                if k in seen_known:
                    continue
                seen_known.add(k)
                if k.split(":", 2)[2] in found:
                    print(f"  KNOWN {k}")
                else:
                    print(f"  GONE (known leak no longer found; take it off the list) {k}")
                    total += 1
            total_chance += len(chance)
    if args.plant:
        print(f"planted values missed: {missed}")
        return 1 if missed else 0
    print(f"total leaks: {total} (chance4 {total_chance})")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
