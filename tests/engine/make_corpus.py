#!/usr/bin/env python3
"""Seeds for fuzz_packet: the first frames of a few shared captures, each
prefixed with the target's one-byte header. Made at configure time from
../shared/pcaps rather than committed (the captures are not ours to copy)."""
import os, struct, sys

src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
n = 0
for f in ["dns-udp-many-queries.pcap", "tls-clienthello-many-sni.pcap", "http-requests-4k.pcap",
          "vlan-qinq-pppoe.pcap", "ipv6-ext-headers-http.pcap", "tunnel-vxlan.pcap", "ipv6-mixed-dns-ssh.pcap",
          "dns-tcp-multirequest.pcap", "ipv4-fragments.pcap", "malformed-fuzz-ndpi-2006.pcap", "quic-chromium.pcap",
          "quic-illustrated.pcap", "tunnel-gtp-fragmented.pcap", "tunnel-geneve-tls-quic.pcap", "tunnel-gre-in-gre.pcap",
          "tunnel-erspan.pcap", "tunnel-6in4.pcap", "tunnel-teredo.pcap", "tunnel-vxlan-http.pcap", "tunnel-gre.pcap",
          "mpls-vlan.pcap", "mptcp-add-addr.pcap"]:
    # Tunnel captures mix plain and tunnelled frames: take every seventh.
    step = 7 if f.startswith("tunnel-") else 1
    path = os.path.join(src, f)
    if not os.path.exists(path):
        continue
    b = open(path, "rb").read()
    e = "<" if b[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    off, k, i = 24, 0, 0
    while off + 16 <= len(b) and k < 6:
        _, _, cl, _ = struct.unpack(e + "IIII", b[off:off + 16])
        d = b[off + 16:off + 16 + cl]
        off += 16 + cl
        i += 1
        if len(d) > 1600 or (i - 1) % step:
            continue
        with open(os.path.join(out, "seed%02d" % n), "wb") as o:
            o.write(bytes([0x80]) + d)
        n += 1
        k += 1
print("fuzz_packet corpus: %d seeds" % n)
