#!/usr/bin/env python3
"""Plain IPv4 and IPv6 fragments: amon makes each datagram whole for the
decisions that need it (ports, the flow's roles, application fields) and
writes it back as the same fragments carrying the anonymized content.

With the shipped IDS policy (real captures, skipped without them):
- every input fragment leaves (identification, offset, more-fragments and
  length as they came), but those the policy itself cuts (a payload it
  cuts: the fragments past the datagram's new end are left out, counted);
- tshark, reassembling, finds each datagram valid (no malformed frame, no
  bad IP checksum) and finds in the output what it found in the input
  (the HTTP request, the NFS calls, the mDNS messages);
- the protected fields are rewritten in every fragment: no client address
  of the input in any output header, one pseudonym per address in all of a
  datagram's fragments, no piece of a cookie the policy redacts anywhere;
- one address, one treatment: over the whole output, the addresses left in
  clear and the addresses pseudonymized are two disjoint sets.

A PPTP client's GRE outer address is treated as in its control
connection (TCP 1723).

A policy that cuts every payload (`payload : cut()`) emits no invalid
fragment: tshark flags no frame and no non-final fragment is empty.

A UDP datagram whose length stops short of the IP payload's end (mDNS
responders send such datagrams; here crafted, whole and in two fragments
with the bytes past the UDP length and some it covers in the second): a
payload rewrite in place (zero(), redact(), on the header path and on the
general one, and the DNS rewrite of a query's name and of the bytes after
its last record) leaves a right UDP checksum, the bytes past the UDP
length rewritten too; a snap's recomputed checksum covers the UDP length.

usage: test_ip_frag.py AMON"""

import json
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

NODEFRAG = ["-o", "ip.defragment:FALSE", "-o", "ipv6.defragment:FALSE"]
FRAG_FIELDS = ["ip.id", "ip.frag_offset", "ip.flags.mf", "ip.len",
               "ipv6.fraghdr.ident", "ipv6.fraghdr.offset", "ipv6.fraghdr.more", "ipv6.plen"]
FRAG_FILTER = "ip.flags.mf == 1 || ip.frag_offset > 0 || ipv6.fraghdr"


def frag_rows(path):
    """One tuple per fragment, in frame order: what identifies and sizes it."""
    return [tuple(",".join(c) for c in r[1:]) for r in L.tshark_fields(path, FRAG_FIELDS, FRAG_FILTER, NODEFRAG)]


def outer_ip(frame):
    """(family, src, dst, pairing key) of a frame's outermost IP header over
    Ethernet (802.1Q tags skipped); None when it has none."""
    off, et = 12, None
    while off + 2 <= len(frame):
        et = struct.unpack("!H", frame[off:off + 2])[0]
        if et in (0x8100, 0x88A8):
            off += 4
            continue
        off += 2
        break
    if et == 0x0800 and off + 20 <= len(frame):
        h = frame[off:off + 20]
        return 4, h[12:16], h[16:20], ("4", h[4:6], h[6:8], h[2:4], h[9])
    if et == 0x86DD and off + 40 <= len(frame):
        h = frame[off:off + 40]
        fid = frame[off + 40:off + 48] if h[6] == 44 else b""
        return 6, h[8:24], h[24:40], ("6", fid, h[4:6], h[6])
    return None


def treatments(inp, out):
    """(addresses left in clear, addresses pseudonymized) over an output,
    as an audit sees them: frames paired with their original by time and
    the IP header's identification, offset and length; an address is in
    clear where its position is unchanged (or where it shows up in any
    output header at all), pseudonymized where it changed."""
    _, rin = L.read_pcap(inp)
    _, rout = L.read_pcap(out)
    orig = {}
    inputs = set()
    for ts, _, _, b in rin:
        x = outer_ip(b)
        if x:
            orig.setdefault((ts,) + x[3], (x[1], x[2]))
            inputs.update((x[1], x[2]))
    clear, pseud = set(), set()
    for ts, _, _, b in rout:
        x = outer_ip(b)
        if not x:
            continue
        for a in (x[1], x[2]):
            if a in inputs:
                clear.add(a)
        o = orig.get((ts,) + x[3])
        if o:
            for was, now in zip(o, (x[1], x[2])):
                (clear if was == now else pseud).add(was)
    return clear, pseud


def sample_key(d, name):
    """The Crypto-PAn reference sample key (no address of these captures is
    one of its fixed points), under the name the shipped policy reads."""
    kd = os.path.join(d, "keys")
    os.makedirs(kd, exist_ok=True)
    p = os.path.join(kd, name)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(b"boojahyoo3vaeToong0Eijee7Ahz3yee".hex() + "\n")
    return p


def run(amon, inp, pol, out):
    sj = out + ".json"
    L.run_amon(amon, inp, [("c", pol, out)], extra=["--stats-json", sj])
    with open(sj) as f:
        return json.load(f)


def count(path, flt):
    return len(L.tshark_fields(path, [], flt, ["-o", "ip.check_checksum:TRUE"]))


# capture -> (display filter of what tshark must find as often in the output, clients in the input)
CAPTURES = {
    "http-ipv4-fragmented-request.pcap": ("http.request.method == \"GET\"", ["172.16.133.54"]),
    "ipv4-fragments.pcap": ("rpc.msgtyp == 0", ["10.118.213.212", "10.118.213.211"]),
    "ipv6-fragments.pcap": ("mdns", ["fe80::21f:f3ff:fecd:f617", "fe80::2c23:b96c:78d:e116"]),
}


def ids_case(amon, pdir, d, fails):
    sample_key(d, "ids.key")
    pol = os.path.join(d, "ids.amon")
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "rules", "ids.amon"), pol)
    for cap, (flt, clients) in CAPTURES.items():
        inp = os.path.join(pdir, cap)
        out = os.path.join(d, "ids-" + cap)
        st = run(amon, inp, pol, out)
        of, c = st["outer_fragments"], st["consumers"][0]
        fin, fout = frag_rows(inp), frag_rows(out)
        # The fragments the policy's cut left out are counted; none other is lost.
        if len(fout) + of["cut"] != len(fin) or c["dropped"] != of["cut"] or of["failed"]:
            fails.append(f"{cap}: {len(fout)} of {len(fin)} fragments out, {of}, dropped={c['dropped']}")
        odd = [r for r in fout if r not in fin]
        if len(odd) > of["cut"]:
            fails.append(f"{cap}: output fragments that are none of the input's: {odd[:3]}")
        if L.bad_frames(out):
            fails.append(f"{cap}: tshark flags frames {sorted(L.bad_frames(out))[:5]} (reassembled)")
        nin, nout = count(inp, flt), count(out, flt)
        if nin == 0 or nout != nin:
            fails.append(f"{cap}: tshark finds '{flt}' {nout} times in the output, {nin} in the input")
        if count(out, "ip.checksum.status == 0"):
            fails.append(f"{cap}: bad IP header checksums in the output")
        # The clients in no header (a client's address as data, such as an
        # mDNS known answer, is the application's field, not the fragment's).
        heads = {a for r in L.tshark_fields(out, ["ip.src", "ip.dst", "ipv6.src", "ipv6.dst"], None, NODEFRAG)
                 for col in r[1:] for a in col}
        for a in clients:
            if a in heads:
                fails.append(f"{cap}: client {a} in clear in the output")
        raw = open(out, "rb").read()
        # One pseudonym per source in all of a datagram's fragments.
        srcs = {}
        for r in L.tshark_fields(out, ["ip.id", "ipv6.fraghdr.ident", "ip.src", "ipv6.src"], FRAG_FILTER, NODEFRAG):
            srcs.setdefault((tuple(r[1]), tuple(r[2])), set()).add(tuple(r[3] + r[4]))
        split = [k for k, v in srcs.items() if len(v) > 1]
        if split:
            fails.append(f"{cap}: datagrams whose fragments carry different sources: {split[:3]}")
        for r in L.tshark_fields(inp, ["http.cookie"]):
            for v in r[1]:
                for i in range(0, len(v) - 12, 12):
                    if v[i:i + 12].encode() in raw:
                        fails.append(f"{cap}: the cookie's bytes {v[i:i + 12]!r} in the output")
                        break
        clear, pseud = treatments(inp, out)
        if clear & pseud or not pseud:
            fails.append(f"{cap}: addresses both in clear and pseudonymized: {sorted(clear & pseud)[:3]} "
                         f"({len(pseud)} pseudonymized)")


def cut_case(amon, pdir, d, fails):
    sample_key(d, "k.key")
    pol = L.write_policy(d, "cut.amon", 'key k = file("keys/k.key")\n'
                         "clients = { 10.0.0.0/8, fe80::/10 }\n"
                         "ip.client : cryptopan(key=k)\n"
                         "ip.server : keep()\n"
                         "payload : cut()\n")
    for cap in ("ipv6-fragments.pcap", "ipv4-fragments.pcap"):
        inp = os.path.join(pdir, cap)
        out = os.path.join(d, "cut-" + cap)
        run(amon, inp, pol, out)
        bad = L.bad_frames(out)
        if bad:
            fails.append(f"cut {cap}: tshark flags {len(bad)} frames: {sorted(bad)[:5]}")
        empty = [r for r in L.tshark_fields(out, ["ip.flags.mf", "ip.len", "ip.hdr_len", "ipv6.fraghdr.more", "ipv6.plen"],
                                             FRAG_FILTER, NODEFRAG)
                 if (r[1] == ["1"] and int(r[2][0]) <= int(r[3][0])) or (r[4] == ["1"] and int(r[5][0]) <= 8)]
        if empty:
            fails.append(f"cut {cap}: non-final fragments without data: frames {[r[0] for r in empty][:5]}")
        if not L.read_pcap(out)[1]:
            fails.append(f"cut {cap}: nothing out")


def lone_case(amon, pdir, d, fails):
    """A datagram that cannot be made whole (a middle fragment lost) times
    out and its fragments leave alone: cut() snaps them (lengths kept)
    rather than emit fragments without data."""
    sample_key(d, "k.key")
    pol = os.path.join(d, "cut.amon")
    _, recs = L.read_pcap(os.path.join(pdir, "ipv6-fragments.pcap"))
    inp = os.path.join(d, "lost-fragment.pcap")
    L.write_pcap(inp, [(ts, b) for i, (ts, _, _, b) in enumerate(recs) if i != 2])
    out = os.path.join(d, "cut-lost.pcap")
    st = run(amon, inp, pol, out)
    if st["outer_fragments"].get("timeout") != 1:
        fails.append(f"lost fragment: {st['outer_fragments']} (one datagram should time out)")
    bad = L.bad_frames(out)
    if bad:
        fails.append(f"lost fragment, cut: tshark flags frames {sorted(bad)[:5]}")
    # The six fragments left of the first datagram all leave, snapped
    # (lengths as they came); the whole ones are cut after reassembly.
    left = [r for r in frag_rows(out) if r[4] == "0x002c5323"]
    if len(left) != 6 or [r for r in left if r not in frag_rows(inp)]:
        fails.append(f"lost fragment, cut: {len(left)} of the datagram's 6 fragments out, as they came: {left[:2]}")


def pptp_case(amon, pdir, d, fails):
    """A PPTP client's GRE outer address takes the treatment of its control
    connection (TCP 1723): never in clear in one and pseudonymized in the
    other (mixed-capture2.pcap: 20.0.0.1 and 20.0.0.2, outside `clients`)."""
    inp = os.path.join(pdir, "mixed-capture2.pcap")
    if not os.path.exists(inp):
        return
    out = os.path.join(d, "ids-pptp.pcap")
    run(amon, inp, os.path.join(d, "ids.amon"), out)
    clear, pseud = treatments(inp, out)
    ends = {L.ip4("20.0.0.1"), L.ip4("20.0.0.2")}
    both = ends & clear & pseud
    if both or not ends & pseud:
        fails.append(f"PPTP: {sorted(L.ip4str(a) for a in both)} both in clear and pseudonymized")


def udp_short(v6, sport, dport, data, extra):
    """IP payload: a UDP datagram carrying `data` (right checksum), then
    `extra` bytes its length does not cover."""
    src = bytes.fromhex("fe800000000000000000000000000001") if v6 else L.ip4("10.0.0.1")
    dst = bytes.fromhex("fe800000000000000000000000000002") if v6 else L.ip4("192.0.2.9")
    udp = struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data
    pseudo = src + dst + (struct.pack("!IxxxB", len(udp), 17) if v6 else struct.pack("!BBH", 0, 17, len(udp)))
    udp = udp[:6] + struct.pack("!H", L._csum(pseudo + udp) or 0xFFFF) + udp[8:]
    return src, dst, udp + extra


def ip_frames(v6, src, dst, pl, cut_at=None, ident=7):
    """The IP payload `pl` over Ethernet, whole (cut_at None) or as two
    fragments split at data offset cut_at (a multiple of 8)."""
    def frame(hdr_and_data):
        return (b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01" +
                (b"\x86\xdd" if v6 else b"\x08\x00") + hdr_and_data)

    def v4(data, off, more):
        h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(data), ident, (0x2000 if more else 0) | off // 8,
                        64, 17, 0, src, dst)
        return h[:10] + struct.pack("!H", L._csum(h)) + h[12:] + data

    def v6f(data, off, more):
        fh = struct.pack("!BBHI", 17, 0, off | (1 if more else 0), ident)
        return struct.pack("!IHBB", 0x60000000, 8 + len(data), 44, 64) + src + dst + fh + data

    if cut_at is None:
        return [frame(struct.pack("!IHBB", 0x60000000, len(pl), 17, 64) + src + dst + pl if v6 else v4(pl, 0, False))]
    mk = v6f if v6 else v4
    return [frame(mk(pl[:cut_at], 0, True)), frame(mk(pl[cut_at:], cut_at, False))]


def dns_query(name):
    q = b"".join(bytes([len(x)]) + x.encode() for x in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + q + struct.pack("!HH", 1, 1)


def udp_sum_right(frame):
    """Whether an unfragmented frame's UDP checksum is right over its UDP
    length, the bytes a snap removed taken as zeros."""
    v6 = frame[12:14] == b"\x86\xdd"
    ip = frame[14:]
    if v6:
        src, dst, udp = ip[8:24], ip[24:40], ip[40:]
    else:
        src, dst, udp = ip[12:16], ip[16:20], ip[(ip[0] & 15) * 4:]
    n = struct.unpack("!H", udp[4:6])[0]
    udp = (udp + bytes(n))[:n]
    pseudo = src + dst + (struct.pack("!IxxxB", n, 17) if v6 else struct.pack("!BBH", 0, 17, n))
    return L._csum(pseudo + udp) == 0


def short_udp_case(amon, d, fails):
    sample_key(d, "k.key")
    head = 'key k = file("keys/k.key")\nclients = { 10.0.0.0/8, fe80::/10 }\n'
    pols = {
        "zero": head + "ip.client : cryptopan(key=k)\nip.server : keep()\npayload : zero()\n",
        "redact": head + "ip.client : keep()\nip.server : keep()\npayload : redact()\n",
        # A name rule takes the packet off the header path.
        "zero-general": head + "ip.client : cryptopan(key=k)\ndns.qname : redact()\npayload : zero()\n",
        "dns": head + "dns.qname : redact()\npayload : keep()\n",
        "snap": head + "ip.client : cryptopan(key=k)\nip.server : keep()\npayload : snap()\n",
    }
    extra = b"\x04_udp\x03sip\x09cybercity\x02dk\x00"
    for v6 in (False, True):
        fam = "IPv6" if v6 else "IPv4"
        datagrams = [udp_short(v6, 41000, 42000, bytes(range(65, 65 + 27)), extra),
                     udp_short(v6, 40001, 53, dns_query("www.example.org"), extra)]
        for pname, text in pols.items():
            pol = L.write_policy(d, f"short-{pname}.amon", text)
            frames = []
            for i, (src, dst, pl) in enumerate(datagrams):
                frames += ip_frames(v6, src, dst, pl)
                frames += ip_frames(v6, src, dst, pl, cut_at=24, ident=100 + i)
            inp = os.path.join(d, f"short-{fam}-{pname}.pcap")
            L.write_pcap(inp, [(1_000_000_000 + i * 1000, f) for i, f in enumerate(frames)])
            out = os.path.join(d, f"short-{fam}-{pname}-out.pcap")
            run(amon, inp, pol, out)
            recs = L.read_pcap(out)[1]
            if len(recs) != len(frames):
                fails.append(f"short UDP {fam} {pname}: {len(recs)} of {len(frames)} frames out")
                continue
            if pname == "snap":
                # Unfragmented records only: a snapped fragment's data is gone.
                for n in (0, 3):
                    if not udp_sum_right(recs[n][3]):
                        fails.append(f"short UDP {fam} snap: frame {n + 1}'s checksum is not over its UDP length")
                continue
            st = L.checksum_status(out)
            udp = {f: s[2] for f, s in st.items() if s[2]}
            bad = sorted(f for f, s in udp.items() if s != ("1",))
            # Four datagrams: each whole, and each as two fragments tshark reassembles.
            if bad or len(udp) != 4:
                fails.append(f"short UDP {fam} {pname}: UDP checksum status {udp} (bad: {bad})")
            # The DNS policy keeps the other datagram's payload.
            raw = b"".join(r[3] for r in (recs[3:] if pname == "dns" else recs))
            if b"cybercity" in raw:
                fails.append(f"short UDP {fam} {pname}: the bytes past the UDP length kept")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    amon = sys.argv[1]
    L.need_tshark()
    pdir = L.pcaps_dir()
    if not all(os.path.exists(os.path.join(pdir, c)) for c in CAPTURES):
        L.skip("the fragment captures are not in " + pdir)
    d = L.tmpdir("ipfrag-")
    fails = []
    ids_case(amon, pdir, d, fails)
    pptp_case(amon, pdir, d, fails)
    cut_case(amon, pdir, d, fails)
    lone_case(amon, pdir, d, fails)
    short_udp_case(amon, d, fails)
    return L.report(fails, "ok")


if __name__ == "__main__":
    sys.exit(main())
