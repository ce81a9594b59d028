#!/usr/bin/env python3
"""Captures of every supported link type come out in the same link type and
anonymized exactly as the same packets in an Ethernet capture.

Each shared Ethernet capture is rewritten here into Linux cooked v1 and v2
(the Ethernet source address becomes the cooked header's link-layer
address), raw IP (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6), BSD NULL and
loopback, and PPP in HDLC framing. amon then runs one Crypto-PAn + MAC +
keyed-hash policy over each file and over the Ethernet file holding the same
packets; record by record the two outputs must match above the link layer,
the cooked address must be the anonymized Ethernet source, and the rest of
the link header must be the input's. A record cut inside its link header
leaves without its address; a link type amon cannot read is refused by name.

usage: test_linktypes.py AMON"""

import collections
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
import e2e_lib as L

CAPTURES = ["mixed-capture2.pcap", "ipv6-mixed-dns-ssh.pcap", "vlan-8021q.pcap"]

LINKTYPE_NULL, LINKTYPE_PPP, LINKTYPE_RAW, LINKTYPE_LOOP = 0, 9, 101, 108
LINKTYPE_SLL, LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_SLL2 = 113, 228, 229, 276

ET_IPV4, ET_IPV6 = 0x0800, 0x86DD



def kept_class(first_octet):
    """An IPv4 address class-preserving Crypto-PAn keeps as it is: 0/8,
    127/8, 224/4 (multicast) and the limited broadcast (255.255.255.255 is
    the only address of 240/4 it keeps: the first octet alone says
    "maybe")."""
    return first_octet in (0, 127) or first_octet >= 224

def write_pcap(path, linktype, recs):
    """recs: [(ts_ns, bytes, wirelen)] as a nanosecond pcap of `linktype`."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, linktype))
        for ts, b, wire in recs:
            f.write(struct.pack("<IIII", ts // 1_000_000_000, ts % 1_000_000_000, len(b), wire))
            f.write(b)


def link_header(lt, frame, i):
    """The header of link type `lt` for an Ethernet frame, or None when the
    type cannot carry it (raw IP types carry IP only)."""
    et = struct.unpack("!H", frame[12:14])[0]
    src = frame[6:12]
    pkttype = (0, 4, 1)[i % 3]  # to us, outgoing, broadcast: these bytes must come back unchanged
    if lt == LINKTYPE_SLL:
        return struct.pack("!HHH", pkttype, 1, 6) + src + b"\0\0" + struct.pack("!H", et)
    if lt == LINKTYPE_SLL2:
        return struct.pack("!HHIHBB", et, 0, 7 + i % 5, 1, pkttype, 6) + src + b"\0\0"
    if et not in (ET_IPV4, ET_IPV6):
        return None
    v6 = et == ET_IPV6
    if lt == LINKTYPE_RAW:
        return b""
    if lt == LINKTYPE_IPV4:
        return None if v6 else b""
    if lt == LINKTYPE_IPV6:
        return b"" if v6 else None
    if lt == LINKTYPE_NULL:  # host byte order of the capturing machine; macOS numbers AF_INET6 30
        return struct.pack("<I", 30 if v6 else 2)
    if lt == LINKTYPE_LOOP:  # network byte order; OpenBSD numbers AF_INET6 24
        return struct.pack("!I", 24 if v6 else 2)
    if lt == LINKTYPE_PPP:
        return b"\xff\x03" + struct.pack("!H", 0x57 if v6 else 0x21)
    raise ValueError(lt)


def mac_texts(m):
    """A MAC's text forms the echo search reads (doc/language.md, `echoes`)."""
    h = m.hex()
    forms = [":".join(h[i:i + 2] for i in range(0, 12, 2)), "-".join(h[i:i + 2] for i in range(0, 12, 2)),
             h, ".".join(h[i:i + 4] for i in range(0, 12, 4))]
    return {x.encode() for f in forms for x in (f, f.upper())}


def echo_equal(o, r, macs):
    """The bytes above the link layer of a record from a link type without
    MACs (o) against the Ethernet file's (r): equal, but where the Ethernet
    file's MAC, protected in its header, is found again in the payload (a
    DHCP chaddr; as text, a Cisco phone's host name SEP + its MAC) and
    rewritten as its field was; without that header the consumer protects
    no MAC, and o keeps it (and the transport checksum that covers it)."""
    if o == r:
        return True
    if len(o) != len(r) or not o:
        return False
    sums = set()
    if o[0] >> 4 in (4, 6):
        l4 = (o[0] & 15) * 4 if o[0] >> 4 == 4 else 40
        proto = o[9] if o[0] >> 4 == 4 else o[6]
        at = l4 + {6: 16, 17: 6}.get(proto, -l4 - 2)
        if at >= 0:
            sums = {at, at + 1}
    texts = set().union(*(mac_texts(m) for m in macs)) if macs else set()
    i, echoes = 0, 0
    while i < len(o):
        if o[i] == r[i] or i in sums:
            i += 1
            continue
        for n, forms in ((6, macs), (17, texts), (14, texts), (12, texts)):
            at = next((s for s in range(max(0, i - n + 1), i + 1) if o[s:s + n] in forms), None)
            if at is not None:
                i = at + n
                echoes += 1
                break
        else:
            return False
    return echoes > 0


def check_type(amon, pol, work, cap, recs, lt, failures, workers=1):
    conv, eth, macs = [], [], set()
    for i, (ts, caplen, wire, b) in enumerate(recs):
        if caplen < 14:
            continue
        h = link_header(lt, b, i)
        if h is None:
            continue
        # The policy drops what it cannot protect (unknown EtherTypes) in
        # both files; a time unique to each record tells which one an output
        # record is (the shared captures have microsecond times).
        ts = ts - ts % 1000 + i % 1000
        conv.append((ts, h + b[14:], wire - 14 + len(h)))
        eth.append((ts, b, wire, i))
        macs.update((b[0:6], b[6:12]))
    tag = f"{cap} as link type {lt}"
    if not conv:
        return 0
    fin, fref = os.path.join(work, f"{cap}.{lt}.in.pcap"), os.path.join(work, f"{cap}.{lt}.eth.pcap")
    write_pcap(fin, lt, conv)
    write_pcap(fref, 1, [e[:3] for e in eth])
    out, ref = os.path.join(work, f"{cap}.{lt}.out.pcap"), os.path.join(work, f"{cap}.{lt}.ref.pcap")
    L.run_amon(amon, fin, [("c", pol, out)], workers=workers)
    L.run_amon(amon, fref, [("c", pol, ref)], workers=workers)
    olt, orecs = L.read_pcap(out)
    _, rrecs = L.read_pcap(ref)
    if olt != lt:
        failures.append(f"{tag}: output has link type {olt}")
    if len(orecs) != len(rrecs) or not orecs:
        failures.append(f"{tag}: {len(orecs)} records out, {len(rrecs)} from the Ethernet file")
        return
    if workers > 1:
        # Workers interleave: compare as multisets of (time, bytes above the link layer).
        hl = len(link_header(lt, eth[0][1], 0))
        a = sorted((t, b[hl:]) for t, _, _, b in orecs if lt not in (LINKTYPE_SLL, LINKTYPE_SLL2))
        r = sorted((t, b[14:]) for t, _, _, b in rrecs if lt not in (LINKTYPE_SLL, LINKTYPE_SLL2))
        if len(a) != len(r) or any(x[0] != y[0] or not echo_equal(x[1], y[1], macs) for x, y in zip(a, r)):
            failures.append(f"{tag}, {workers} workers: other records than the Ethernet file's")
        print(f"{tag}, {workers} workers: {len(orecs)} records")
        return len(orecs)
    by_ts = {c[0]: k for k, c in enumerate(conv)}
    if len(by_ts) != len(conv):
        failures.append(f"{tag}: record times are not unique")
        return
    changed_ip = changed_mac = ip_seen = 0
    for n, ((ots, ocap, owire, ob), (rts, rcap, rwire, rb)) in enumerate(zip(orecs, rrecs)):
        if ots != rts or ots not in by_ts:
            failures.append(f"{tag}: record {n} has time {ots}, the Ethernet file's {rts}")
            return
        i = by_ts[ots]
        ib = conv[i][1]
        hin = link_header(lt, eth[i][1], eth[i][3])
        hl = len(hin)
        if not echo_equal(ob[hl:], rb[14:], macs if lt not in (LINKTYPE_SLL, LINKTYPE_SLL2) else set()):
            failures.append(f"{tag}: record {n} differs above the link layer from the Ethernet file's")
            return
        if owire - hl != rwire - 14 or ocap - hl != rcap - 14:
            failures.append(f"{tag}: record {n} lengths {ocap}/{owire}, Ethernet file's {rcap}/{rwire}")
            return
        if lt == LINKTYPE_SLL:
            exp = ob[:6] == hin[:6] and ob[6:12] == rb[6:12] and ob[12:16] == hin[12:16]
            changed_mac += ob[6:12] != hin[6:12]
        elif lt == LINKTYPE_SLL2:
            exp = ob[:12] == hin[:12] and ob[12:18] == rb[6:12] and ob[18:20] == hin[18:20]
            changed_mac += ob[12:18] != hin[12:18]
        else:
            exp = ob[:hl] == hin
        if not exp:
            failures.append(f"{tag}: record {n} link header {ob[:hl].hex()}, input {hin.hex()}")
            return
        et = struct.unpack("!H", eth[i][1][12:14])[0]
        # Class-preserving Crypto-PAn keeps addresses of special-purpose
        # classes (unspecified, loopback, multicast, reserved, broadcast):
        # a header between two of them keeps both (doc/cryptopan.md).
        if et == ET_IPV4 and len(ib) >= hl + 20 and not (kept_class(ib[hl + 12]) and kept_class(ib[hl + 16])):
            ip_seen += 1
            changed_ip += ob[hl + 12:hl + 20] != ib[hl + 12:hl + 20]
    if ip_seen and changed_ip < ip_seen * 0.9:
        failures.append(f"{tag}: only {changed_ip} of {ip_seen} IPv4 headers have other addresses")
    if lt in (LINKTYPE_SLL, LINKTYPE_SLL2) and changed_mac < len(orecs) * 0.9:
        failures.append(f"{tag}: only {changed_mac} of {len(orecs)} link-layer addresses anonymized")
    print(f"{tag}: {len(orecs)} of {len(conv)} records out, as from the Ethernet file "
          f"({changed_ip}/{ip_seen} IPv4 address pairs changed)")
    return len(orecs)


def main():
    amon = os.path.abspath(L.tool_paths(sys.argv))
    pdir = L.pcaps_dir()
    work = L.tmpdir("linktypes-")
    L.make_key(work)
    pol = L.write_policy(work, "p.amon",
                         'key k = file("keys/k.hex")\n'
                         "eth.src, eth.dst : hash(key=k)\n"
                         "ip.src, ip.dst : cryptopan(key=k)\n"
                         "tls.sni, http.host, dns.qname : hash(key=k)\n")
    os.chdir(work)
    failures = []
    tested = collections.Counter()
    types = [LINKTYPE_SLL, LINKTYPE_SLL2, LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_NULL, LINKTYPE_LOOP,
             LINKTYPE_PPP]
    for cap in CAPTURES:
        inp = os.path.join(pdir, cap)
        if not os.path.exists(inp):
            L.skip(f"{inp} missing")
        lt, recs = L.read_pcap(inp)
        if lt != 1:
            failures.append(f"{cap}: expected an Ethernet capture, link type {lt}")
            continue
        for t in types:
            tested[t] += check_type(amon, pol, work, cap, recs, t, failures) or 0
    for t in types:
        if not tested[t]:
            failures.append(f"link type {t}: no capture gave it a packet")
    _, recs = L.read_pcap(os.path.join(pdir, CAPTURES[0]))
    check_type(amon, pol, work, CAPTURES[0], recs, LINKTYPE_RAW, failures, workers=2)

    # A cooked record cut inside its header: the address bytes it holds never leave in clear.
    short = struct.pack("!HHH", 0, 1, 6) + bytes.fromhex("0a0b0c0d")
    fin, fout = os.path.join(work, "short.in.pcap"), os.path.join(work, "short.out.pcap")
    write_pcap(fin, LINKTYPE_SLL, [(1_000_000_000, short, 60)])
    L.run_amon(amon, fin, [("c", pol, fout)])
    olt, orecs = L.read_pcap(fout)
    # Dropped (nothing above the link layer to protect it by), or out without the address.
    if olt != LINKTYPE_SLL or len(orecs) > 1 or (orecs and (orecs[0][3][:6] != short[:6] or orecs[0][3][6:] != b"\0" * 4)):
        failures.append(f"cut cooked header: link type {olt}, records {[r[3].hex() for r in orecs]}")

    # A link type amon does not read (802.11 with an AVS header) is refused by name.
    fin = os.path.join(work, "avs.pcap")
    write_pcap(fin, 163, [(1_000_000_000, b"\0" * 40, 40)])
    r = subprocess.run([amon, "pcap", "--read", fin, "--policy", pol, "--write", os.path.join(work, "x.pcap"),
                        "--quiet"], capture_output=True, text=True, timeout=60)
    if r.returncode != 1 or "link type 163" not in r.stderr or "not supported" not in r.stderr:
        failures.append(f"AVS input: exit {r.returncode}, stderr {r.stderr.strip()!r}")

    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
