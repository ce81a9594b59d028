#!/usr/bin/env python3
"""amon whatif against a brute-force computation of the same shares.

A generator trace goes through `amon whatif` for several z and dt, with
and without the sld fallback. Independently, tshark lists the trace's name
occurrences (DNS queries over UDP, TLS ClientHello SNIs, HTTP request
Hosts, one TCP segment each, as whatif reads them) and this script applies
the definition by brute force: an occurrence is released when at least z
distinct senders used the name within (t - dt, t], counting every
occurrence already read; a hidden name's registrable domain (libpsl, via
amon-e2e-psl) is then counted and tested the same way. Every count in
whatif.csv must equal the reference's, and the plots must be PNG files.

usage: test_whatif.py AMON AMON_GEN PSL_HELPER"""

import csv
import ipaddress
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_lib as L  # noqa: E402

ZS = [2, 3, 5, 10]
DTS = [("5s", 5), ("1m", 60), ("10m", 600)]
FIELDS = ["ip.src", "ipv6.src", "ip.dst", "ipv6.dst", "udp.srcport", "udp.dstport", "tcp.srcport",
          "tcp.dstport", "dns.qry.name", "tls.handshake.extensions_server_name", "http.host"]


def host_name(h):
    if h.startswith("["):
        return ""
    h = L.norm_name(h.split(":")[0])
    try:
        ipaddress.ip_address(h)
        return ""
    except ValueError:
        return h


def occurrences(inp):
    """[(t_ns, user, flow, name)] in file order, as tshark reads the trace."""
    _, recs = L.read_pcap(inp)
    flt = ("(udp.dstport == 53 && dns.flags.response == 0) || "
           "(tcp && (tls.handshake.type == 1 || http.request))")
    # Reassembly off: whatif reads a name from the segment that carries it.
    rows = L.tshark_fields(inp, FIELDS, flt, ["-o", "tcp.desegment_tcp_streams:FALSE"])
    out = []
    for r in rows:
        src = (r[1] or r[2] or [""])[0]
        dst = (r[3] or r[4] or [""])[0]
        ports = tuple((c or [""])[0] for c in r[5:9])
        names = [L.norm_name(n) for n in r[9]] + [L.norm_name(n) for n in r[10]] + [host_name(h) for h in r[11]]
        for n in names:
            if n and n not in ("<root>",):
                out.append((recs[r[0] - 1][0], src, (src, dst) + ports, n))
    return out


def reference(occ, reg, z, dt_ns, sld):
    events = {}

    def observe(value, user, t):
        ev = events.setdefault(value, [])
        ev.append((user, t))
        return len({u for u, te in ev if t < dt_ns or te > t - dt_ns}) >= z

    counts = {"hidden": 0, "released": 0, "sld": 0}
    best = {}
    flow_svc, named = {}, set()
    rank = {"hidden": 0, "sld": 1, "released": 2}
    for t, user, flow, name in occ:
        r = reg.get(name, "")
        if flow not in flow_svc:
            flow_svc[flow] = r or name
        out, shown = "hidden", None
        if observe(name, user, t):
            out, shown = "released", name
        elif sld and r and len(r) < len(name) and observe(r, user, t):
            out, shown = "sld", r
        counts[out] += 1
        if rank[out] >= rank[best.get(name, "hidden")]:
            best[name] = out
        svc = flow_svc[flow]
        if shown is not None and (shown == svc or (out == "released" and r == svc)):
            named.add(flow)
    vals = {k: sum(1 for b in best.values() if b == k) for k in rank}
    return {
        "occurrences": len(occ), "occ_hidden": counts["hidden"], "occ_released": counts["released"],
        "occ_sld": counts["sld"], "values": len(best), "values_hidden": vals["hidden"],
        "values_released": vals["released"], "values_sld": vals["sld"], "flows": len(flow_svc),
        "flows_named": len(named),
    }


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    amon, gen, psl = sys.argv[1:4]
    L.need_tshark()
    if not shutil.which("gnuplot"):
        print("FAIL: gnuplot is not installed (scripts/setup installs gnuplot-nox)")
        return 1
    d = L.tmpdir("whatif")
    inp = os.path.join(d, "in.pcap")
    subprocess.run([gen, "--out", inp, "--seed", "11", "--packets", "60000", "--clients", "300", "--names", "400",
                    "--duration", "900"], check=True, capture_output=True)
    occ = occurrences(inp)
    reg = L.registrable(psl, sorted({o[3] for o in occ}))
    fails = 0
    discriminating = 0
    for fallback in ("sld", "none"):
        out = os.path.join(d, "out-" + fallback)
        r = subprocess.run([amon, "whatif", "--read", inp, "--out", out, "--z", ",".join(map(str, ZS)),
                            "--dt", ",".join(l for l, _ in DTS), "--fallback", fallback, "--quiet"],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            print(f"FAIL: amon whatif exited {r.returncode}: {r.stderr}")
            return 1
        print(r.stdout, end="")
        rows = list(csv.DictReader(open(os.path.join(out, "whatif.csv"))))
        if len(rows) != len(ZS) * len(DTS):
            print(f"FAIL: {len(rows)} rows in whatif.csv, want {len(ZS) * len(DTS)}")
            return 1
        for row in rows:
            z, dt_s = int(row["z"]), float(row["dt_s"])
            want = reference(occ, reg, z, int(dt_s * 1e9), fallback == "sld")
            got = {k: int(row[k]) for k in want}
            if got != want:
                fails += 1
                print(f"FAIL: fallback={fallback} z={z} dt={row['dt']}: whatif {got}, reference {want}")
            if 10 < float(row["share_occ_hidden"]) < 90:
                discriminating += 1
            if fallback == "sld" and z == ZS[0] and int(row["occ_sld"]) == 0:
                print(f"FAIL: no occurrence released at its registrable domain (z={z} dt={row['dt']})")
                fails += 1
        for png in ("hidden.png", "flows.png"):
            with open(os.path.join(out, png), "rb") as f:
                if f.read(8) != b"\x89PNG\r\n\x1a\n":
                    print(f"FAIL: {png} is not a PNG")
                    fails += 1
    # --boxes: the one-store columns as without it; K boxes (users split by
    # a keyed hash, so not reproducible here) never hide less than one
    # store, and on this trace hide more somewhere.
    out = os.path.join(d, "out-boxes")
    r = subprocess.run([amon, "whatif", "--read", inp, "--out", out, "--z", ",".join(map(str, ZS)),
                        "--dt", ",".join(l for l, _ in DTS), "--fallback", "none", "--boxes", "3", "--quiet"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(f"FAIL: amon whatif --boxes 3 exited {r.returncode}: {r.stderr}")
        return 1
    one = {(x["z"], x["dt"]): x for x in csv.DictReader(open(os.path.join(d, "out-none", "whatif.csv")))}
    more = 0
    for row in csv.DictReader(open(os.path.join(out, "whatif.csv"))):
        base = one[(row["z"], row["dt"])]
        if any(row[k] != base[k] for k in base):
            print(f"FAIL: --boxes changed the one-store columns at z={row['z']} dt={row['dt']}")
            fails += 1
        if int(row["boxes"]) != 3 or int(row["occ_hidden_boxes"]) < int(row["occ_hidden"]) or \
                int(row["values_hidden_boxes"]) < int(row["values_hidden"]):
            print(f"FAIL: 3 boxes hide less than one store at z={row['z']} dt={row['dt']}: {row}")
            fails += 1
        more += int(row["occ_hidden_boxes"]) > int(row["occ_hidden"])
    if not more:
        print("FAIL: 3 boxes never hide more than one store on this trace")
        fails += 1
    with open(os.path.join(out, "boxes.png"), "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            print("FAIL: boxes.png is not a PNG")
            fails += 1

    # The trace must make the settings differ, or equality says little.
    if discriminating < 4:
        print(f"FAIL: only {discriminating} settings hide between 10 and 90 % of the occurrences")
        fails += 1
    if len({o[3] for o in occ}) < 50 or len(occ) < 500:
        print(f"FAIL: the trace has too few names ({len(occ)} occurrences)")
        fails += 1
    print(f"whatif: {len(occ)} occurrences, {len(ZS) * len(DTS) * 2} settings against the reference, {fails} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
