#!/usr/bin/env python3
"""Tunnels whose outer IP datagram the link fragmented: amon makes each such
datagram whole, anonymizes the packet inside it and sends it as the same
fragments again.

Generated: the generator's mix in GTP-U and in VXLAN behind a 1000-byte MTU
(`amon-gen --tunnel-mtu`), with a policy that Crypto-PAns clients and
redacts names. Every datagram is made whole (none fails), the output has
exactly the input's fragments (identification, offset, more-fragments,
length, frame by frame), tshark finds no malformed frame or bad checksum
and none of the input's names, and `amon audit` finds no leak.

Shared captures (skipped without them): tunnel-gtp-fragmented.pcap and
tunnel-erspan.pcap with the shipped IDS policy: no tunnel_cut, the datagrams
made whole and given up as counted here (the GTP-U capture holds four
datagrams whose last fragment is missing: those fail closed), every output
fragment is one of the input's unless a rewrite shortened its datagram,
tshark flags nothing the input did not, the payload reaches the IDS, and
the audit of the GTP-U capture is clean.

usage: test_tunnel_frag.py AMON AMON_GEN"""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

NAME_FIELDS = ["dns.qry.name", "dns.resp.name", "tls.handshake.extensions_server_name", "http.host"]
NODEFRAG = ["-o", "ip.defragment:FALSE"]


def frag_rows(path):
    """(ip.id, offset, more, ip.len) of each outer fragment, in frame order."""
    rows = L.tshark_fields(path, ["ip.id", "ip.frag_offset", "ip.flags.mf", "ip.len"],
                           "ip.flags.mf == 1 || ip.frag_offset > 0", NODEFRAG)
    return [(r[1][0], r[2][0], r[3][0], r[4][0]) for r in rows if r[1] and r[2] and r[3] and r[4]]


def names(path):
    out = set()
    for r in L.tshark_fields(path, NAME_FIELDS):
        for col in r[1:]:
            out.update(L.norm_name(n) for n in col)
    return out - {"", "<root>", "<unknown extended label>"}  # tshark's placeholders, not names


def bad_checksums(path):
    return sum(1 for v in L.checksum_status(path).values() for s in v for x in s if x in ("0", "Bad"))


def run(amon, inp, pol, out, d):
    sj = os.path.join(d, os.path.basename(out) + ".json")
    L.run_amon(amon, inp, [("c", pol, out)], extra=["--stats-json", sj])
    with open(sj) as f:
        return json.load(f)


def audit(amon, pol, inp, out):
    r = subprocess.run([amon, "audit", "--policy", pol, "--original", inp, "--anonymized", out],
                       capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout.strip().split("\n")[-1] if r.stdout else r.stderr


def sample_key(path):
    """The Crypto-PAn reference sample key, not a fresh one: `amon audit`
    reads no key, so an address a key maps onto itself (a fixed point) is
    reported as an address in clear, and a fresh key would have one among
    the clients now and then (doc/cryptopan.md, "Fixed points")."""
    with open(path, "w") as f:
        f.write(b"boojahyoo3vaeToong0Eijee7Ahz3yee".hex() + "\n")
    return path


def generated(amon, gen, d, fails):
    sample_key(L.make_key(d, "k"))
    pol = L.write_policy(d, "frag.amon", 'key k = file("keys/k.hex")\n'
                         "clients = { 10.0.0.0/8, 2001:db8:1::/48 }\n"
                         "eth.src, eth.dst : timestamp()\n"
                         "ip.client, dns.answer.addr, dns.ecs : cryptopan(key=k)\n"
                         "dns.qname, dns.answer.name, dns.rdata.name, tls.sni, http.host, http.referer, http.uri : redact()\n"
                         "http.cookie, http.set_cookie, http.authorization, http.xff : redact()\n"
                         "http.proxy_authorization, http.x_real_ip : redact()\n")
    for t in ("gtpu", "vxlan"):
        inp = os.path.join(d, f"gen-{t}.pcap")
        subprocess.run([gen, "--out", inp, "--seed", "11", "--packets", "3000", "--bulk", "0", "--tunnel", t, "--tunnel-mtu", "1000",
                        "--quiet"], check=True, timeout=120)
        fin = frag_rows(inp)
        if len(fin) < 100:
            fails.append(f"{t}: only {len(fin)} fragments generated: the case does not test reassembly")
            continue
        out = os.path.join(d, f"out-{t}.pcap")
        st = run(amon, inp, pol, out, d)
        of = st["outer_fragments"]
        if of["datagrams"] == 0 or of["failed"] or of["cut"] or of["fragments"] != len(fin):
            fails.append(f"{t}: outer fragments {of}, {len(fin)} in the input")
        c = st["consumers"][0]
        if c.get("tunnel_cut", 0):
            fails.append(f"{t}: tunnel_cut={c['tunnel_cut']}")
        fout = frag_rows(out)
        if fout != fin:
            diff = [(i, a, b) for i, (a, b) in enumerate(zip(fin, fout)) if a != b][:3]
            fails.append(f"{t}: fragments differ ({len(fin)} in, {len(fout)} out; first: {diff})")
        if L.bad_frames(out) - L.bad_frames(inp):
            fails.append(f"{t}: tshark flags frames {sorted(L.bad_frames(out) - L.bad_frames(inp))[:5]}")
        if bad_checksums(out) > bad_checksums(inp):
            fails.append(f"{t}: bad checksums {bad_checksums(out)} (input {bad_checksums(inp)})")
        nin = names(inp)
        leaked = names(out) & nin
        if len(nin) < 20 or leaked:
            fails.append(f"{t}: {len(nin)} names in, leaked {sorted(leaked)[:4]}")
        rc, last = audit(amon, pol, inp, out)
        if rc != 0:
            fails.append(f"{t}: audit: {last}")


# capture -> (datagrams made whole, datagrams given up)
CAPTURES = {"tunnel-gtp-fragmented.pcap": (36, 4), "tunnel-erspan.pcap": (16, 0)}


def captures(amon, pdir, d, fails):
    kd = os.path.join(d, "keys")
    os.makedirs(kd, exist_ok=True)
    shutil.copy(sample_key(L.make_key(d, "ids")), os.path.join(kd, "ids.key"))
    rules = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "rules", "ids.amon")
    pol = os.path.join(d, "ids.amon")
    shutil.copy(rules, pol)
    for cap, (whole, failed) in CAPTURES.items():
        inp = os.path.join(pdir, cap)
        out = os.path.join(d, "ids-" + cap)
        st = run(amon, inp, pol, out, d)
        of = st["outer_fragments"]
        c = st["consumers"][0]
        if c.get("tunnel_cut", 0) or of["datagrams"] != whole or of["failed"] != failed:
            fails.append(f"{cap}: tunnel_cut={c.get('tunnel_cut')} outer fragments {of}, expected {whole} whole, "
                         f"{failed} failed")
        fin = set(frag_rows(inp))
        odd = [f for f in frag_rows(out) if f not in fin]
        if len(odd) > whole:
            fails.append(f"{cap}: {len(odd)} output fragments are none of the input's: {odd[:3]}")
        if L.bad_frames(out) and len(L.bad_frames(out)) > len(L.bad_frames(inp)):
            fails.append(f"{cap}: tshark flags {len(L.bad_frames(out))} frames (input {len(L.bad_frames(inp))})")
        if bad_checksums(out) > bad_checksums(inp):
            fails.append(f"{cap}: bad checksums {bad_checksums(out)} (input {bad_checksums(inp)})")
        # The IDS sees the payload: TCP bytes inside the tunnels, as tshark
        # reassembles them, at least 80 % of the input's (a header split
        # beyond a datagram is cut, fail closed).
        def tcp_bytes(p):
            return sum(int(x) for r in L.tshark_fields(p, ["tcp.len"]) for x in r[1])
        tin, tout = tcp_bytes(inp), tcp_bytes(out)
        if tin == 0 or tout < 0.8 * tin:
            fails.append(f"{cap}: inner TCP payload {tout} of {tin} bytes reaches the IDS")
        if cap == "tunnel-gtp-fragmented.pcap":
            rc, last = audit(amon, pol, inp, out)
            if rc != 0:
                fails.append(f"{cap}: audit: {last}")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    amon, gen = sys.argv[1], sys.argv[2]
    L.need_tshark()
    d = L.tmpdir("tunfrag-")
    fails = []
    generated(amon, gen, d, fails)
    pdir = os.environ.get("AMON_PCAPS_DIR")
    have = pdir and all(os.path.exists(os.path.join(pdir, c)) for c in CAPTURES)
    if have:
        captures(amon, pdir, d, fails)
    for f in fails:
        print("FAIL", f)
    if fails:
        return 1
    print("ok" + ("" if have else " (shared captures not found: generated traffic only)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
