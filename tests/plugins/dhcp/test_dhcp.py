#!/usr/bin/env python3
"""End to end: DHCPv4 and DHCPv6 through `amon pcap` with the shipped IDS
policy (rules/ids.amon: payload kept), tshark reading input and output.

Inputs: the real DHCP exchanges of mixed-capture2.pcap (Cisco phones: MACs
in chaddr, client ids and host names like SEPA8B1D41F4EC9), and a generated
trace whose clients all lease their address (DHCPv4 or DHCPv6) before they
browse from it (amon-gen --dhcp 1).

Checks, per input:
  - every DHCP message still decodes as one (none dropped or cut);
  - no client address (ciaddr, yiaddr, requested address, DHCPv6 IA
    addresses and prefixes), MAC (chaddr, MACs inside client ids and DUIDs)
    or host name (option 12, client FQDN) of the input is in the output's
    DHCP fields;
  - each lease address equals, in the output, the pseudonym the same address
    got in the IP headers of the traffic (frames matched by timestamp):
    a lease and the traffic that follows stay linkable. So does each
    server, router, relay and DNS server address (server identifier,
    siaddr, giaddr, options 3 and 6, DHCPv6 DNS servers and relay
    link-address), and none that is a client's is left in clear. At least a known
    number of such pairs must be checked, so the test cannot pass vacuously.

A malformed DHCP message (an option running past the end) fails closed:
its payload is cut, so its MAC and host name never leave.

And `proto in { dhcp }` (a protocol plugin's name in a condition): with
`payload : zero() when proto in { dhcp }`, exactly the DHCP datagrams of
the generated trace have their payload zeroed; every other frame leaves
byte for byte as it came.

usage: test_dhcp.py AMON AMON-GEN"""

import collections
import ipaddress
import os
import shutil
import subprocess
import sys

# e2e_lib: the end-to-end tests' shared pcap reader, tshark calls and work files.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e"))
import e2e_lib as L  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

ADDR = ["dhcp.ip.client", "dhcp.ip.your", "dhcp.option.requested_ip_address", "dhcpv6.iaaddr.ip",
        "dhcpv6.iaprefix.pref_addr"]
MAC = ["dhcp.hw.mac_addr", "dhcp.client_id.link_layer_address", "dhcpv6.duidllt.link_layer_addr",
       "dhcpv6.duidll.link_layer_addr"]
NAME = ["dhcp.option.hostname", "dhcp.fqdn.name", "dhcpv6.client_domain"]
# The server's, relays' and services' addresses: each must leave as the same
# address leaves in IP headers (the server identifier 10.10.0.2 of
# mixed-capture2 lies inside ids.amon's clients, so its pseudonym there).
INFRA = ["dhcp.option.dhcp_server_id", "dhcp.option.router", "dhcp.ip.server", "dhcp.ip.relay",
         "dhcp.option.domain_name_server", "dhcpv6.dns_server", "dhcpv6.linkaddr"]
FIELDS = ADDR + MAC + NAME + INFRA
IDS_CLIENTS = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                                                  "fc00::/7", "fe80::/10")]
UNSET = {"0.0.0.0", "::", "00:00:00:00:00:00"}

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def policy_dir(work):
    """rules/ids.amon next to a fresh keys/ids.key (mode 0600)."""
    shutil.copy(os.path.join(ROOT, "rules", "ids.amon"), os.path.join(work, "ids.amon"))
    kd = os.path.join(work, "keys")
    os.makedirs(kd, exist_ok=True)
    p = os.path.join(kd, "ids.key")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    return os.path.join(work, "ids.amon")


def headers(path):
    """(frame time, n-th frame of that time) -> (src, dst) of its IP header.
    amon keeps timestamps and order; a frame it drops (a non-IP frame under
    on_unknown = drop) only shifts frame numbers, not these keys."""
    rows = L.tshark_fields(path, ["frame.time_epoch", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst", "arp"])
    seen = collections.Counter()
    out = {}
    for r in rows:
        if not r[1] or r[6]:
            continue  # ARP: dropped by the policy, not counted on either side
        t = r[1][0]
        src = (r[2] or r[4] or [None])[0]  # the outer header when tunnelled: first occurrence
        dst = (r[3] or r[5] or [None])[0]
        out[(t, seen[t])] = (src, dst)
        seen[t] += 1
    return out


def dhcp_frames(path):
    """DHCP frames keyed like headers(): (time, n-th frame of that time)."""
    rows = L.tshark_fields(path, ["frame.time_epoch", "arp", "udp.srcport", "eth.src"] + FIELDS)
    seen = collections.Counter()
    out = {}
    for r in rows:
        if not r[1] or r[2]:
            continue
        t = r[1][0]
        key = (t, seen[t])
        seen[t] += 1
        vals = dict(zip(FIELDS, r[5:]))
        if any(vals.values()) or set(r[3]) & {"67", "68", "546", "547"}:
            out[key] = (r[0], r[3], r[4], vals)
    return out


def check(amon, name, inp, work, min_linked, min_infra=0):
    pol = policy_dir(work)
    out = os.path.join(work, name + "-ids.pcap")
    L.run_amon(amon, inp, [("ids", pol, out)])
    fin, fout = dhcp_frames(inp), dhcp_frames(out)
    if not fin:
        fail(f"{name}: no DHCP message in the input")
        return
    n_msgs = len(L.tshark_fields(inp, [], "dhcp || dhcpv6"))
    if len(L.tshark_fields(out, [], "dhcp || dhcpv6")) != n_msgs:
        fail(f"{name}: {n_msgs} DHCP messages in, not as many decode in the output")
    # Secrets of the input, by kind: none may be found in the output. The
    # servers' own MACs (their DUIDs, sent from 547) too: ids.amon protects
    # eth.src, and a DUID's MAC follows the MAC rule.
    server_macs = {m for (_, sport, smac, _) in fin.values() if set(sport) & {"67", "547"} for m in smac}
    secret = {k: set() for k in ("addr", "mac", "name")}
    for (_, _, _, vals) in fin.values():
        for f in ADDR:
            secret["addr"].update(v for v in vals[f] if v not in UNSET)
        for f in MAC:
            secret["mac"].update(v for v in vals[f] if v not in UNSET)
    # One client MAC, one pseudonym in every field that carries it (chaddr,
    # client id, DUID), and that pseudonym a locally administered unicast MAC.
    mac_map = collections.defaultdict(set)
    for k, (num, _, _, vals) in fin.items():
        if k not in fout:
            continue
        for f in MAC:
            for a, b in zip(vals[f], fout[k][3][f]):
                if a not in UNSET and a not in server_macs:
                    mac_map[a].add(b)
    for a, outs in mac_map.items():
        if len(outs) != 1:
            fail(f"{name}: client MAC {a} has {len(outs)} pseudonyms across chaddr, client id and DUID: {sorted(outs)}")
        for b in outs:
            o0 = int(b.split(":")[0], 16)
            if o0 & 1 or not o0 & 2:
                fail(f"{name}: client MAC {a} became {b}, not a locally administered unicast MAC")
    if not mac_map:
        fail(f"{name}: no client MAC to follow (test input changed?)")
        for f in NAME:
            secret["name"].update(v.lower() for v in vals[f] if v)
    n_in = {k: len(v) for k, v in secret.items()}
    for (num, _, _, vals) in fout.values():
        for kind, fields in (("addr", ADDR), ("mac", MAC), ("name", NAME)):
            for f in fields:
                for v in vals[f]:
                    if (v.lower() if kind == "name" else v) in secret[kind]:
                        fail(f"{name}: output frame {num}: {f} = {v} left in clear")
    # Linkability: address pseudonyms from the IP headers of the same frames,
    # then the lease addresses.
    hin, hout = headers(inp), headers(out)
    pseudo = {}
    for k, (s, d) in hin.items():
        if k not in hout:
            continue
        for a, b in zip((s, d), hout[k]):
            if a and b and a != b and a not in UNSET:
                pseudo[a] = b
    linked = 0
    for k, (num, _, _, vals) in fin.items():
        if k not in fout:
            fail(f"{name}: input frame {num} (DHCP) has no output frame")
            continue
        ovals = fout[k][3]
        for f in ADDR:
            if f == "dhcpv6.iaprefix.pref_addr":
                continue
            for a, b in zip(vals[f], ovals[f]):
                if a in pseudo:
                    linked += 1
                    if b != pseudo[a]:
                        fail(f"{name}: input frame {num}: {f} {a} became {b}, its pseudonym in IP headers is {pseudo[a]}")
    # Infrastructure addresses: the IP headers' pseudonym where the address
    # travels in one, never in clear when it is a client's.
    infra = 0
    for k, (num, _, _, vals) in fin.items():
        if k not in fout:
            continue
        ovals = fout[k][3]
        for f in INFRA:
            for a, b in zip(vals[f], ovals[f]):
                if a in UNSET:
                    continue
                if a in pseudo:
                    infra += 1
                    if b != pseudo[a]:
                        fail(f"{name}: input frame {num}: {f} {a} became {b}, its pseudonym in IP headers is {pseudo[a]}")
                elif any(ipaddress.ip_address(a) in n for n in IDS_CLIENTS if n.version == ipaddress.ip_address(a).version) and a == b:
                    fail(f"{name}: input frame {num}: {f} {a}, a client address, left in clear")
    print(f"{name}: {len(fin)} DHCP messages; secrets in: {n_in['addr']} addresses, {n_in['mac']} MACs, "
          f"{n_in['name']} names; {linked} lease addresses and {infra} server/router addresses checked against "
          f"their IP-header pseudonym")
    if infra < min_infra:
        fail(f"{name}: only {infra} server/router addresses could be matched to traffic (want >= {min_infra})")
    if n_in["mac"] == 0 or n_in["addr"] == 0:
        fail(f"{name}: the input has no DHCP MAC or address to protect (test input changed?)")
    if linked < min_linked:
        fail(f"{name}: only {linked} lease addresses could be matched to traffic (want >= {min_linked})")


def udp_payload(frame):
    """(sport, dport, payload offset) of an Ethernet/IPv4 or IPv6/UDP frame, else None."""
    o, et = 14, int.from_bytes(frame[12:14], "big")
    while et in (0x8100, 0x88a8):
        et, o = int.from_bytes(frame[o + 2:o + 4], "big"), o + 4
    if et == 0x0800 and len(frame) >= o + 20 and frame[o + 9] == 17:
        u = o + (frame[o] & 15) * 4
    elif et == 0x86DD and len(frame) >= o + 40 and frame[o + 6] == 17:
        u = o + 40
    else:
        return None
    if len(frame) < u + 8:
        return None
    return int.from_bytes(frame[u:u + 2], "big"), int.from_bytes(frame[u + 2:u + 4], "big"), u + 8


def check_proto_condition(amon, inp, work):
    pol = L.write_policy(work, "proto.amon", "payload : zero() when proto in { dhcp }\n")
    out = os.path.join(work, "proto-dhcp.pcap")
    L.run_amon(amon, inp, [("p", pol, out)])
    _, fin = L.read_pcap(inp)
    _, fout = L.read_pcap(out)
    if len(fin) != len(fout):
        fail(f"proto in {{ dhcp }}: {len(fin)} frames in, {len(fout)} out")
        return
    zeroed = 0
    for i, (a, b) in enumerate(zip(fin, fout)):
        u = udp_payload(a[3])
        if u and ({u[0], u[1]} & {67, 68, 546, 547}):
            if b[3][u[2]:] != bytes(len(a[3]) - u[2]):
                fail(f"proto in {{ dhcp }}: frame {i + 1} (DHCP) kept its payload")
            zeroed += 1
        elif a[3] != b[3]:
            fail(f"proto in {{ dhcp }}: frame {i + 1} (not DHCP) changed")
    print(f"proto in {{ dhcp }}: {zeroed} DHCP datagrams zeroed, {len(fin) - zeroed} other frames unchanged")
    if zeroed == 0:
        fail("proto in { dhcp }: no DHCP datagram in the generated trace")


def check_malformed(amon, work):
    mac = bytes.fromhex("001b213a4f5d")
    m = bytes([1, 1, 6, 0]) + bytes(8) + bytes(16) + mac + bytes(10) + bytes(192) + b"\x63\x82\x53\x63"
    m += bytes([53, 1, 3, 12, 9]) + b"secrethost" + bytes([81, 200, 0])  # option 81 claims 200 bytes
    inp = os.path.join(work, "malformed.pcap")
    L.write_pcap(inp, [(1_700_000_000 * 10**9, L.udp4_frame("192.168.7.77", "192.168.7.1", 68, 67, m))])
    out = os.path.join(work, "malformed-ids.pcap")
    L.run_amon(amon, inp, [("ids", policy_dir(work), out)])
    _, recs = L.read_pcap(out)
    if len(recs) != 1:
        fail(f"malformed: {len(recs)} frames out, want 1 (cut, not dropped)")
        return
    f = recs[0][3]
    if mac in f or b"secrethost" in f:
        fail("malformed: the MAC or host name of a malformed DHCP message left in clear")
    if len(f) != 14 + 20 + 8:
        fail(f"malformed: {len(f)} bytes out, want the headers only (payload cut)")
    print("malformed: payload cut, nothing of the client left")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    amon, gen = sys.argv[1], sys.argv[2]
    L.need_tshark()
    work = L.tmpdir("dhcp-")
    g = os.path.join(work, "gen-dhcp.pcap")
    subprocess.run([gen, "--out", g, "--seed", "7", "--packets", "4000", "--clients", "60", "--dhcp", "1",
                    "--v6", "0.4", "--vlan", "0", "--quiet"], check=True, timeout=120)
    check(amon, "generated", g, work, min_linked=20)
    check_proto_condition(amon, g, work)
    check_malformed(amon, work)
    pcaps = os.environ.get("AMON_PCAPS_DIR")
    cap = os.path.join(pcaps, "mixed-capture2.pcap") if pcaps else None
    if cap and os.path.exists(cap):
        check(amon, "mixed-capture2", cap, work, min_linked=5, min_infra=100)
    else:
        print("mixed-capture2.pcap not found: real capture not checked")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("ok")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
