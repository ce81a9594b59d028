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
    return L.report(fails, "ok")


if __name__ == "__main__":
    sys.exit(main())
