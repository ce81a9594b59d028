#!/usr/bin/env python3
"""End to end: names (DNS, TLS SNI, HTTP Host) through `amon pcap`
on the real captures of ../shared/pcaps, with tshark as the oracle.

  hide  z above the number of users, fallback=redact, on every name field:
        tshark must find none of the input's names in the output (leaks are
        listed with their output frame) nor any server certificate's name
        (TLS 1.2 sends it in clear), and the output must not gain
        malformed/expert-error frames nor turn a Good checksum Bad.
  keep  keep() on every name field: the records are byte-identical.
  zref  mid-range z: the names the output shows in clear are exactly those a
        reference computation (Python, over tshark's fields of the input)
        releases, frame by frame.
  sld   as zref with fallback=sld: a hidden name shows its registrable
        domain (libpsl, via amon-e2e-psl) exactly when the reference
        releases that domain.
  tunnels  the generator's traffic wrapped in each tunnel it makes (GTP-U,
        VXLAN, Geneve, GRE, IP in IP): hide leaks nothing and keeps tshark's
        dissection as clean as the input's, keep is byte-identical, and a
        mid-range z releases exactly the names the same traffic untunnelled
        releases, frame by frame.

usage: test_names.py MODE AMON AMON_GEN PSL_HELPER"""

import ipaddress
import os
import re
import subprocess
import sys

# e2e_lib: the end-to-end tests' shared pcap reader, tshark calls and work files.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e"))
import e2e_lib as L  # noqa: E402

NAME_FIELDS = ["dns.qry.name", "dns.resp.name", "tls.handshake.extensions_server_name", "http.host"]
# tshark's placeholders, not names on the wire.
NOT_NAMES = {"<root>", "<unknown extended label>", ""}
# Files amon reports as broken (exit 1) while still writing what it read.
BROKEN_FILES = {"malformed-cut-short.pcap", "malformed-huge-record-length.pcap"}


def is_ip_literal(n):
    """A Host header holding an address (with or without a port) is an
    address, not a name: the name policy does not cover it."""
    h = n
    if h.startswith("["):
        h = h[1:h.find("]")] if "]" in h else h[1:]
    elif h.count(":") == 1:
        h = h.split(":")[0]
    try:
        ipaddress.ip_address(h)
        return True
    except ValueError:
        return False


def capture_list(pdir):
    """Every capture that can carry DNS/TLS/HTTP names; the ones where
    tshark finds none are dropped by the caller."""
    pats = ("dns-", "tls", "http-", "mixed-", "quic-", "ipv6-", "vlan-", "tunnel-", "mpls-", "malformed-")
    return sorted(f for f in os.listdir(pdir) if f.endswith(".pcap") and f.startswith(pats))


def frame_names(path, extra_filter=None):
    """frame -> set of normalised names tshark shows there."""
    out = {}
    for row in L.tshark_fields(path, NAME_FIELDS, extra_filter):
        s = {L.norm_name(x) for col in row[1:] for x in col}
        s = {x for x in s if x not in NOT_NAMES and not is_ip_literal(x)}
        if s:
            out[row[0]] = s
    return out


def run(amon, inp, pol, out, name):
    try:
        L.run_amon(amon, inp, [(name, pol, out)])
    except RuntimeError as e:
        if os.path.basename(inp) in BROKEN_FILES and os.path.exists(out):
            return
        raise


# ------------------------------------------------------------------ hide / keep

def mode_hide(amon, pdir, d):
    pol = L.write_policy(d, "hide.amon",
                         "dns.qname, dns.answer.name, dns.rdata.name, tls.sni, http.host :"
                         " zanon(z=64, dt=7d, fallback=redact)\n")
    fails, tested = [], 0
    for f in capture_list(pdir):
        inp = os.path.join(pdir, f)
        names_in = frame_names(inp)
        if not names_in:
            continue
        tested += 1
        all_in = set().union(*names_in.values())
        out = os.path.join(d, "hide-" + f)
        run(amon, inp, pol, out, "hide")
        names_out = frame_names(out)
        leaks = [(fr, n) for fr, s in sorted(names_out.items()) for n in sorted(s & all_in)]
        if leaks:
            show = ", ".join(f"frame {fr}: {n}" for fr, n in leaks[:6])
            fails.append(f"{f}: LEAK of {len(leaks)} name occurrence(s) in the output ({show}"
                         f"{', ...' if len(leaks) > 6 else ''})")
        # A TLS 1.2 server's certificate names the server too: with every
        # SNI hidden, no certificate may reach the output.
        certs = [(r[0], n) for r in L.tshark_fields(out, ["x509ce.dNSName"]) for n in r[1]]
        if certs:
            fails.append(f"{f}: LEAK: certificates naming servers in the output "
                         f"({', '.join(f'frame {fr}: {n}' for fr, n in certs[:4])})")
        L.health(inp, out, f, fails)
        print(f"  {f}: {len(all_in)} names in, {len(leaks)} leaked, {len(certs)} certificate names out")
    return fails, tested


def mode_keep(amon, pdir, d):
    pol = L.write_policy(d, "keep.amon", "dns.qname, dns.answer.name, dns.rdata.name, tls.sni, http.host : keep()\n")
    fails, tested = [], 0
    for f in capture_list(pdir):
        inp = os.path.join(pdir, f)
        out = os.path.join(d, "keep-" + f)
        run(amon, inp, pol, out, "keep")
        tested += 1
        _, a = L.read_pcap(inp)
        _, b = L.read_pcap(out)
        if len(a) != len(b):
            fails.append(f"{f}: {len(b)} records out, {len(a)} in")
            continue
        diff = [i + 1 for i, (x, y) in enumerate(zip(a, b)) if x != y]
        if diff:
            fails.append(f"{f}: records differ under keep(): frames {diff[:10]}")
    return fails, tested


# ------------------------------------------------------------------ reference

class Ref:
    """Brute-force z-anonymity: per value, every (user, time) event."""

    def __init__(self, z, dt_ns):
        self.z, self.dt, self.ev = z, dt_ns, {}

    def observe(self, value, user, t):
        lst = self.ev.setdefault(value, {})
        lst[user] = max(lst.get(user, t), t)
        return sum(1 for u, tu in lst.items() if t - self.dt < tu <= t) >= self.z


def client_of(row, clients, initiators):
    """The user of a frame as amon sees it: the end inside `clients`, else the
    flow's initiator (SYN sender, or the first packet's source)."""
    src = (row[1] or row[2] or [None])[0]
    dst = (row[3] or row[4] or [None])[0]
    if src is None:
        return None
    sin = any(ipaddress.ip_address(src) in c for c in clients)
    din = any(ipaddress.ip_address(dst) in c for c in clients)
    if sin != din:
        return src if sin else dst
    sp = (row[5] or row[7] or ["0"])[0]
    dp = (row[6] or row[8] or ["0"])[0]
    key = frozenset([(src, sp), (dst, dp)])
    if key not in initiators:
        synack = row[9] and row[9][0] in ("0x0012", "0x012")
        initiators[key] = dst if synack else src
    return initiators[key]


ADDR = ["ip.src", "ipv6.src", "ip.dst", "ipv6.dst", "tcp.srcport", "tcp.dstport", "udp.srcport", "udp.dstport",
        "tcp.flags"]
QFIELDS = ["dns.qry.name", "tls.handshake.extensions_server_name", "http.host"]


def got_of(orow, col, k):
    return orow[col - 9][k] if orow and k < len(orow[col - 9]) else None


def zref_case(amon, psl, d, label, inp, clients, z, dt_s, fallback, fails, must_discriminate=True):
    cl = [ipaddress.ip_network(c) for c in clients]
    pol = L.write_policy(d, f"zref-{label}.amon",
                         f"clients = {{ {', '.join(clients)} }}\n"
                         f"dns.qname, tls.sni, http.host : zanon(z={z}, dt={dt_s}s, fallback={fallback})\n")
    out = os.path.join(d, f"zref-{label}.pcap")
    L.run_amon(amon, inp, [("z", pol, out)])
    _, recs = L.read_pcap(inp)
    # TCP ClientHellos/HTTP requests, QUIC client Initials and DNS messages
    # are name occurrences for amon. The captures here hold no tunnel (the
    # users below are the outer addresses tshark lists first) and no
    # retransmitted Initial, which amon counts as an occurrence and tshark
    # does not show.
    flt = "dns || (tcp && (tls.handshake.type == 1 || http.request)) || (quic && tls.handshake.type == 1)"
    rows = {r[0]: r for r in L.tshark_fields(inp, ADDR + QFIELDS + ["tls.handshake.extension.type", "dns.id",
                                                                    "dns.flags.response"], flt)}
    orows = {r[0]: r for r in L.tshark_fields(out, QFIELDS, flt)}
    all_names = sorted({L.norm_name(x) for r in rows.values() for c in r[10:13] for x in c})
    reg = L.registrable(psl, all_names) if fallback == "sld" else {}
    ref = Ref(z, dt_s * 1_000_000_000)
    initiators = {}
    # A DNS response's first question takes its query's decision (same flow,
    # direction, transaction id and name, within 60 s) without a new
    # observation; a response without its query is decided at its own time.
    asked = {}
    n_occ = n_rel = n_sld = mism = n_dup = n_recall = 0
    for fr in sorted(rows):
        r = rows[fr]
        user = client_of(r, cl, initiators)
        ts = recs[fr - 1][0]  # exact ns from the file, not tshark's float
        orow = orows.get(fr)
        for col in (10, 11, 12):
            for k, raw in enumerate(r[col]):
                n = L.norm_name(raw)
                if n in NOT_NAMES or (col == 12 and is_ip_literal(n)):
                    continue
                n_occ += 1
                if col == 11 and len(r[13]) != len(set(r[13])):
                    # RFC 8446 4.2: a repeated extension type makes the
                    # ClientHello invalid; amon fails closed (cuts it) and
                    # counts no user for its name.
                    if got_of(orow, col, k) is not None:
                        fails.append(f"{label} frame {fr}: ClientHello with a repeated extension type passed with "
                                     f"SNI {got_of(orow, col, k)!r}")
                    n_dup += 1
                    continue
                exch = None
                if col == 10 and k == 0 and r[14]:
                    src = (r[1] or r[2])[0], (r[5] or r[7] or ["0"])[0]
                    dst = (r[3] or r[4])[0], (r[6] or r[8] or ["0"])[0]
                    response = r[15] and r[15][0] in ("1", "True", "true")
                    exch = (frozenset([src, dst]), dst if response else src, r[14][0], n)
                    prev = asked.get(exch) if response else None
                    if prev and 0 <= ts - prev[0] <= 60 * 1_000_000_000:
                        outcome = prev[1]
                        n_recall += 1
                        exch = None
                    else:
                        outcome = None
                        if response:
                            exch = None
                else:
                    outcome = None
                if outcome is None:
                    rel = ref.observe(n, user, ts)
                    outcome = "rel"
                    if not rel:
                        if fallback == "sld" and reg.get(n) and reg[n] != n and ref.observe(reg[n], user, ts):
                            outcome = "sld"
                        else:
                            outcome = "hid"
                    if exch:
                        asked[exch] = (ts, outcome)
                want = raw
                if outcome == "sld":
                    want = ("sld", reg[n])
                    n_sld += 1
                elif outcome == "hid":
                    want = None
                else:
                    n_rel += 1
                got = got_of(orow, col, k)
                g = L.norm_name(got) if got is not None else None
                if want == raw:
                    ok = got == raw
                elif want is None:
                    rg = reg.get(n)
                    ok = g is not None and g != n and not (fallback == "sld" and rg and g.endswith("." + rg))
                else:
                    ok = g is not None and g != n and g.endswith("." + want[1])
                if not ok:
                    mism += 1
                    if mism <= 8:
                        exp = "clear" if want == raw else ("hidden" if want is None else f"sld {want[1]}")
                        fails.append(f"{label} frame {fr} t={ts / 1e9:.6f} user {user}: {raw!r} expected {exp}, "
                                     f"output shows {got!r}")
    if mism > 8:
        fails.append(f"{label}: {mism} mismatching occurrences in all")
    if must_discriminate and (n_rel == 0 or n_rel == n_occ):
        fails.append(f"{label}: reference released {n_rel} of {n_occ}: the case does not discriminate")
    L.health(inp, out, label, fails)
    print(f"  {label}: z={z} dt={dt_s}s fallback={fallback}: {n_occ} occurrences, reference releases {n_rel}"
          f"{f', sld {n_sld}' if fallback == 'sld' else ''}; {n_recall} DNS responses with their query's decision; "
          f"{n_dup} invalid ClientHellos cut; {mism} mismatches")


def mode_zref(amon, gen, psl, pdir, d, fallback):
    fails = []
    g = os.path.join(d, "gen50.pcap")
    # Two hours of traffic from 50 users, judged with a 10-minute window, so
    # the window edge matters and is not the whole file.
    subprocess.run([gen, "--out", g, "--seed", "7", "--packets", "40000", "--clients", "50", "--names", "400",
                    "--duration", "7200", "--quiet"], check=True)
    zref_case(amon, psl, d, "gen50", g, ["10.0.0.0/8", "2001:db8:1::/48"], 3, 600, fallback, fails)
    if pdir and fallback == "redact":
        # Real captures hold one or two users whose visits do not overlap in
        # time: nothing may be released (checked), nothing discriminates.
        zref_case(amon, psl, d, "tls-clienthello-many-sni", os.path.join(pdir, "tls-clienthello-many-sni.pcap"),
                  ["192.168.0.0/16", "2601:647::/32"], 2, 3600, fallback, fails, False)
        zref_case(amon, psl, d, "tls13-quic-sites", os.path.join(pdir, "tls13-quic-sites.pcap"),
                  ["192.168.0.0/16", "2001:b07::/32"], 2, 3600, fallback, fails, False)
    return fails, 3 if pdir and fallback == "redact" else 1


TUNNELS = ("gtpu", "vxlan", "geneve", "gre", "ipip")


def gen_file(gen, d, tunnel=None):
    p = os.path.join(d, "gen-%s.pcap" % (tunnel or "plain"))
    # Few names among few users over 15 minutes: a 10-minute window with
    # z = 3 releases some and hides others.
    subprocess.run([gen, "--out", p, "--seed", "11", "--packets", "5000", "--clients", "20", "--names", "40",
                    "--duration", "900", "--quiet"] + (["--tunnel", tunnel] if tunnel else []), check=True)
    return p


def released(inp, out):
    """frame -> tuple of (field, name shown in clear) for every name tshark
    finds in the input, in order: what a policy released there."""
    a = {r[0]: r for r in L.tshark_fields(inp, QFIELDS)}
    b = {r[0]: r for r in L.tshark_fields(out, QFIELDS)}
    res = {}
    for fr, r in a.items():
        o = b.get(fr)
        row = []
        for col in range(1, len(QFIELDS) + 1):
            for k, raw in enumerate(r[col]):
                got = o[col][k] if o and k < len(o[col]) else None
                row.append((col, raw, got == raw))
        if row:
            res[fr] = tuple(row)
    return res


def mode_tunnels(amon, gen, d):
    fails = []
    hide = L.write_policy(d, "hide.amon", "dns.qname, dns.answer.name, dns.rdata.name, tls.sni, http.host :"
                          " zanon(z=64, dt=7d, fallback=redact)\n")
    keep = L.write_policy(d, "keep.amon", "dns.qname, dns.answer.name, dns.rdata.name, tls.sni, http.host : keep()\n")
    zpol = L.write_policy(d, "ztun.amon", "clients = { 10.0.0.0/8, 2001:db8:1::/48 }\n"
                          "dns.qname, tls.sni, http.host : zanon(z=3, dt=600s, fallback=redact)\n")
    plain = gen_file(gen, d)
    zplain = os.path.join(d, "z-plain.pcap")
    L.run_amon(amon, plain, [("z", zpol, zplain)])
    ref = released(plain, zplain)
    n_rel = sum(1 for row in ref.values() for x in row if x[2])
    n_occ = sum(len(row) for row in ref.values())
    if n_rel == 0 or n_rel == n_occ:
        fails.append(f"plain: {n_rel} of {n_occ} names released: the case does not discriminate")
    for t in TUNNELS:
        inp = gen_file(gen, d, t)
        names_in = frame_names(inp)
        if not names_in:
            fails.append(f"{t}: tshark finds no names in the tunnelled traffic")
            continue
        all_in = set().union(*names_in.values())
        out = os.path.join(d, f"hide-{t}.pcap")
        L.run_amon(amon, inp, [("hide", hide, out)])
        leaks = [(fr, n) for fr, s in sorted(frame_names(out).items()) for n in sorted(s & all_in)]
        if leaks:
            fails.append(f"{t}: LEAK of {len(leaks)} name occurrence(s) ({leaks[:4]})")
        L.health(inp, out, f"{t} hide", fails)
        kout = os.path.join(d, f"keep-{t}.pcap")
        L.run_amon(amon, inp, [("keep", keep, kout)])
        _, a = L.read_pcap(inp)
        _, b = L.read_pcap(kout)
        if a != b:
            fails.append(f"{t}: keep() output is not byte-identical")
        zout = os.path.join(d, f"z-{t}.pcap")
        L.run_amon(amon, inp, [("z", zpol, zout)])
        got = released(inp, zout)
        diff = [fr for fr in sorted(set(ref) | set(got)) if ref.get(fr) != got.get(fr)]
        if diff:
            fails.append(f"{t}: z decisions differ from the untunnelled run in {len(diff)} frames, first "
                         f"{diff[:5]}: {ref.get(diff[0])} vs {got.get(diff[0])}")
        print(f"  {t}: {len(all_in)} names in, {len(leaks)} leaked; z released {n_rel} of {n_occ} untunnelled, "
              f"{len(diff)} frames decided differently")
    return fails, 1 + len(TUNNELS)


def main():
    mode = sys.argv[1]
    amon, gen, psl = sys.argv[2], sys.argv[3], sys.argv[4]
    L.need_tshark()
    d = L.tmpdir(f"e2e-names-{mode}-")
    if mode == "tunnels":
        fails, n = mode_tunnels(amon, gen, d)
    elif mode in ("hide", "keep"):
        pdir = L.pcaps_dir()
        fails, n = (mode_hide if mode == "hide" else mode_keep)(amon, pdir, d)
    else:
        pdir = os.environ.get("AMON_PCAPS_DIR")
        pdir = pdir if pdir and os.path.isdir(pdir) else None
        if not pdir:
            print("note: ../shared/pcaps missing: only the generated capture is checked")
        fails, n = mode_zref(amon, gen, psl, pdir, d, "sld" if mode == "sld" else "redact")
    for f in fails:
        print("FAIL:", f)
    print(f"{mode}: {n} capture(s) checked, {len(fails)} failure(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
