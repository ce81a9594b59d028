#!/usr/bin/env python3
"""What a consumer's monitor still sees: real monitors run on the original
capture and on amon's output for a shipped policy, and their views compared.

The monitors are Debian packages used as oracles, never product dependencies:
  - nfpcapd + nfdump (nfdump's flow exporter and collector): flows, packets
    and octets per flow, octets counted from the IP length as NetFlow/IPFIX
    probes count them;
  - nDPI's ndpiReader: the application protocol of every flow;
  - tshark -z io,stat: frames and bytes in total.
Flows are matched across the two captures by what the policies keep (IP
protocol, ports, first-seen time), not by address, since addresses change.

usage: monitors.py AMON check   [--pcaps DIR]            the suite's assertions
       monitors.py AMON table   [--pcaps DIR] [--all]    a Markdown table (doc/monitors.md)
Exit status: 0 all held, 1 a check failed, 77 an oracle or the captures are missing."""

import argparse
import csv
import glob
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
from compare_outputs import fixed_keys  # noqa: E402  (same fixed keys as the byte-identity check)

FIXRAND_ENV = "AMON_FIXRAND"

# The checks the suite runs: (capture, policy, what must hold).
#   flows-equal: every flow of the original is in the output with the same
#                packets and octets (nfpcapd), and the totals agree (tshark);
#   ndpi-same:   every matched flow gets the same application protocol, but
#                flows whose server name the policy hides (counted apart).
CHECKS = [
    ("mixed-browsing-example.pcap", "flows", "flows-equal"),
    ("mixed-browsing-example.pcap", "meter", "flows-equal"),
    ("mixed-browsing-example.pcap", "research", "flows-equal"),
    ("mixed-tls-http-nbns.pcap", "flows", "flows-equal"),
    ("mixed-tls-http-nbns.pcap", "meter", "flows-equal"),
    ("http-requests-4k.pcap", "flows", "flows-equal"),
    ("dns-udp-many-queries.pcap", "meter", "flows-equal"),
    ("mixed-browsing-example.pcap", "ids", "ndpi-same"),
    ("mixed-tls-http-nbns.pcap", "ids", "ndpi-same"),
    ("tls13-quic-sites.pcap", "ids", "ndpi-same"),
]

# Captures for the published table (a cut of the shared set: one per kind of
# traffic; --all takes every capture).
TABLE_CAPTURES = [
    "mixed-browsing-example.pcap", "mixed-capture2.pcap", "mixed-tls-http-nbns.pcap",
    "http-requests-4k.pcap", "http-ipv6-1000-requests.pcap", "dns-udp-many-queries.pcap",
    "tls13-quic-sites.pcap", "quic-chromium.pcap", "tls-top100-fingerprints.pcap",
    "ipv4-fragments.pcap", "ipv6-fragments.pcap", "tunnel-vxlan-http.pcap",
]


def need(tool):
    if shutil.which(tool) is None:
        print(f"monitors: {tool} is not installed (Debian: "
              f"{ {'ndpiReader': 'libndpi-bin', 'nfpcapd': 'nfdump', 'nfdump': 'nfdump', 'tshark': 'tshark'}[tool] })")
        sys.exit(77)


def run_amon(amon, cap, pol, out):
    env = dict(os.environ)
    if os.environ.get(FIXRAND_ENV):
        env["LD_PRELOAD"] = os.environ[FIXRAND_ENV]
    r = subprocess.run([amon, "pcap", "--read", cap, "--quiet", "--consumer", f"c={pol}:{out}"],
                       capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0 or not os.path.exists(out):
        raise RuntimeError(f"amon failed on {cap} with {pol}: {r.stderr.strip()[-400:]}")


def nf_flows(cap, work):
    """Flows as nfdump's exporter sees them: {(proto, sport, dport, first-seen ms): [packets, octets]}."""
    d = tempfile.mkdtemp(dir=work)
    subprocess.run(["nfpcapd", "-r", cap, "-l", d], capture_output=True, timeout=600, check=True)
    r = subprocess.run(["nfdump", "-R", d, "-q", "-N", "-o", "fmt:%pr|%sp|%dp|%ts|%pkt|%byt"],
                       capture_output=True, text=True, timeout=600)
    flows = {}
    for line in r.stdout.splitlines():
        f = [x.strip() for x in line.split("|")]
        if len(f) != 6 or not f[4].isdigit():
            continue
        k = (f[0], f[1], f[2], f[3])
        p = flows.setdefault(k, [0, 0])
        p[0] += int(f[4])
        p[1] += int(f[5])
    return flows


def ndpi_flows(cap, work):
    """{(proto, sorted ports, first-seen): (application protocol, server name)} by ndpiReader."""
    out = os.path.join(work, "ndpi.csv")
    if os.path.exists(out):
        os.remove(out)
    subprocess.run(["ndpiReader", "-i", cap, "-C", out, "-q"], capture_output=True, timeout=600)
    flows = {}
    if not os.path.exists(out):
        return flows
    with open(out, newline="") as f:
        rd = csv.reader(f)
        head = next(rd, None)
        if not head:
            return flows
        col = {n.lstrip("#"): i for i, n in enumerate(head)}
        for row in rd:
            try:
                k = (row[col["protocol"]], tuple(sorted((row[col["src_port"]], row[col["dst_port"]]))),
                     row[col["first_seen"]])
                flows[k] = (row[col["ndpi_proto"]], row[col["server_name_sni"]])
            except (IndexError, KeyError):
                continue
    return flows


def io_totals(cap):
    """(frames, bytes) of IP packets by tshark -z io,stat over the whole capture (frames
    that are not IP carry no flow; amon drops what it cannot anonymize there)."""
    r = subprocess.run(["tshark", "-r", cap, "-q", "-z", "io,stat,0,ip or ipv6"], capture_output=True, text=True,
                       timeout=600)
    for line in r.stdout.splitlines():
        m = re.match(r"\|\s*[\d.]+\s*<>\s*(?:Dur|[\d.]+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|", line)
        if m:
            return int(m.group(1)), int(m.group(2))
    return None


def compare_flows(orig, anon):
    """Matched flows, flows with other packets or octets, and the octet error."""
    matched = diff = 0
    err = total = 0
    for k, (p, b) in orig.items():
        total += b
        a = anon.get(k)
        if a is None:
            err += b
            continue
        matched += 1
        if a != [p, b]:
            diff += 1
        err += abs(a[1] - b)
    return matched, diff, (err / total if total else 0.0)


def compare_ndpi(orig, anon):
    """Matched flows, the same protocol, other protocol with the name hidden, other protocol otherwise."""
    matched = same = hidden = other = 0
    others = []
    for k, (proto, name) in orig.items():
        a = anon.get(k)
        if a is None:
            continue
        matched += 1
        if a[0] == proto:
            same += 1
        elif name and a[1] != name:
            hidden += 1
        else:
            other += 1
            others.append(f"{k}: {proto} -> {a[0]}")
    return matched, same, hidden, other, others


def names_visible(orig, anon):
    names = [(k, n) for k, (_, n) in orig.items() if n]
    if not names:
        return None
    vis = sum(1 for k, n in names if anon.get(k, ("", ""))[1] == n)
    return vis / len(names)


def setup_policies(work):
    srcs = sorted(glob.glob(os.path.join(ROOT, "rules", "*.amon")))
    fixed_keys(work, srcs)
    pols = {}
    for s in srcs:
        dst = os.path.join(work, os.path.basename(s))
        shutil.copy(s, dst)
        pols[os.path.basename(s)[:-5]] = dst
    return pols


def check(amon, pcaps, work):
    pols = setup_policies(work)
    os.chdir(work)
    failures = 0
    ran = 0
    for cap_name, pol, what in CHECKS:
        cap = os.path.join(pcaps, cap_name)
        if not os.path.exists(cap):
            print(f"skip {cap_name}: not in {pcaps}")
            continue
        out = os.path.join(work, f"{pol}-{cap_name}")
        run_amon(amon, cap, pols[pol], out)
        ran += 1
        if what == "flows-equal":
            o, a = nf_flows(cap, work), nf_flows(out, work)
            matched, diff, err = compare_flows(o, a)
            to, ta = io_totals(cap), io_totals(out)
            ok = matched == len(o) and diff == 0 and len(a) == len(o) and to == ta
            print(f"{'ok  ' if ok else 'FAIL'} {pol} on {cap_name}: flows {len(o)} -> {len(a)}, matched {matched}, "
                  f"with other packets/octets {diff}, octet error {err:.4%}; io,stat {to} -> {ta}")
        else:
            o, a = ndpi_flows(cap, work), ndpi_flows(out, work)
            matched, same, hidden, other, others = compare_ndpi(o, a)
            ok = matched == len(o) and other == 0 and len(o) > 0
            print(f"{'ok  ' if ok else 'FAIL'} {pol} on {cap_name}: nDPI flows {len(o)} -> {len(a)}, matched {matched}, "
                  f"same protocol {same}, name hidden {hidden}, other {other}")
            for x in others[:10]:
                print(f"     {x}")
        failures += 0 if ok else 1
    print(f"{ran - failures} passed, {failures} failed")
    return 1 if failures else 0


def table(amon, pcaps, work, every):
    pols = setup_policies(work)
    os.chdir(work)
    caps = sorted(glob.glob(os.path.join(pcaps, "*.pcap"))) if every else \
        [os.path.join(pcaps, c) for c in TABLE_CAPTURES if os.path.exists(os.path.join(pcaps, c))]
    print("| policy | captures | flows kept (nfdump) | flows with exact packets and octets | octet error | "
          "nDPI: same protocol | nDPI: name hidden | nDPI: other | server names visible |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for pol in sorted(pols):
        n = fo = fm = fd = 0
        eo = et = 0.0
        nm = ns = nh = nx = 0
        vis = []
        for cap in caps:
            out = os.path.join(work, f"{pol}-{os.path.basename(cap)}")
            try:
                run_amon(amon, cap, pols[pol], out)
            except RuntimeError:
                continue
            n += 1
            o, a = nf_flows(cap, work), nf_flows(out, work)
            matched, diff, err = compare_flows(o, a)
            tot = sum(b for _, b in o.values())
            fo += len(o)
            fm += matched
            fd += matched - diff
            eo += err * tot
            et += tot
            no, na = ndpi_flows(cap, work), ndpi_flows(out, work)
            m, s, h, x, _ = compare_ndpi(no, na)
            nm, ns, nh, nx = nm + m, ns + s, nh + h, nx + x
            v = names_visible(no, na)
            if v is not None:
                vis.append(v)
        pct = lambda a, b: f"{100.0 * a / b:.1f} %" if b else "-"
        print(f"| `{pol}` | {n} | {pct(fm, fo)} | {pct(fd, fo)} | {pct(eo, et) if et else '-'} | {pct(ns, nm)} | "
              f"{pct(nh, nm)} | {pct(nx, nm)} | {pct(sum(vis), len(vis))} |")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("amon")
    ap.add_argument("mode", choices=["check", "table"])
    ap.add_argument("--pcaps", default=os.environ.get("AMON_PCAPS_DIR", os.path.join(ROOT, "..", "shared", "pcaps")))
    ap.add_argument("--work")
    ap.add_argument("--all", action="store_true")
    a = ap.parse_args()
    for t in ("nfpcapd", "nfdump", "ndpiReader", "tshark"):
        need(t)
    if not os.path.isdir(a.pcaps):
        print(f"monitors: no captures at {a.pcaps}")
        return 77
    amon = os.path.abspath(a.amon)
    pcaps = os.path.abspath(a.pcaps)
    work = os.path.abspath(a.work) if a.work else tempfile.mkdtemp(prefix="amon-monitors-")
    os.makedirs(work, exist_ok=True)
    try:
        return check(amon, pcaps, work) if a.mode == "check" else table(amon, pcaps, work, a.all)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
