#!/usr/bin/env bash
# End-to-end checks of amon-gen.
#   gen_test.sh determinism GEN OUTDIR   same arguments => byte-identical files
#   gen_test.sh tshark GEN OUTDIR        tshark reads the output cleanly and finds
#                                        the names (exit 77 = skipped, no tshark)
set -euo pipefail
mode=$1 gen=$2 out=$3
mkdir -p "$out"
cd "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }

if [[ $mode == determinism ]]; then
  # (--micro last: the magic check below reads its c.pcap)
  for args in "--packets 20000" "--flows 500 --v6 0.5 --vlan 0.3" "--small --packets 5000" \
              "--packets 5000 --dhcp 0.5 --v6 0.4" "--micro --packets 3000"; do
    # shellcheck disable=SC2086
    "$gen" --out a.pcap --seed 7 $args --names-out a.names --quiet
    # shellcheck disable=SC2086
    "$gen" --out b.pcap --seed 7 $args --names-out b.names --quiet
    cmp a.pcap b.pcap || fail "same seed, different pcap ($args)"
    cmp a.names b.names || fail "same seed, different name table ($args)"
    # shellcheck disable=SC2086
    "$gen" --out c.pcap --seed 8 $args --quiet
    cmp -s a.pcap c.pcap && fail "seeds 7 and 8 gave the same file ($args)"
    echo "ok: byte-identical for seed 7, different for seed 8 ($args)"
  done
  # --flows is exact (a visit skips its DNS lookup when one flow is left).
  "$gen" --out f.pcap --seed 3 --flows 321 2>summary.txt
  grep -q " 321 flows " summary.txt || fail "--flows 321 not honoured: $(cat summary.txt)"
  magic=$(od -An -tx4 -N4 f.pcap | tr -d ' ')
  [[ $magic == a1b23c4d ]] || fail "nanosecond pcap magic expected, got $magic"
  magic=$(od -An -tx4 -N4 c.pcap | tr -d ' ')
  [[ $magic == a1b2c3d4 ]] || fail "--micro should write microsecond pcap, got $magic"
  echo "PASS determinism"
  exit 0
fi

[[ $mode == tshark ]] || fail "unknown mode $mode"
if ! command -v tshark >/dev/null 2>&1; then
  echo "SKIP: tshark not on PATH; install tshark to check checksums and dissection of amon-gen output"
  exit 77
fi

"$gen" --out mix.pcap --seed 11 --packets 20000 --v6 0.4 --vlan 0.3 --qinq 0.3 --names-out mix.names --quiet
"$gen" --out small.pcap --seed 12 --packets 5000 --small --vlan 0.2 --names-out small.names --quiet
"$gen" --out dhcp.pcap --seed 13 --packets 5000 --dhcp 1 --v6 0.4 --vlan 0.2 --quiet
ck=(-o ip.check_checksum:TRUE -o tcp.check_checksum:TRUE -o udp.check_checksum:TRUE)

for f in mix small dhcp; do
  n=$(tshark -r $f.pcap "${ck[@]}" -Y '_ws.malformed || _ws.expert.severity==error' 2>/dev/null | wc -l)
  [[ $n == 0 ]] || fail "$f.pcap: $n malformed or error-level frames"
  n=$(tshark -r $f.pcap "${ck[@]}" -Y 'ip.checksum.status==0 || tcp.checksum.status==0 || udp.checksum.status==0 || icmp.checksum.status==0 || icmpv6.checksum.status==0' 2>/dev/null | wc -l)
  [[ $n == 0 ]] || fail "$f.pcap: $n frames with a bad checksum"
  echo "ok: $f.pcap has no malformed frames and no bad checksums"
done

# Every name tshark finds must come from the catalogue amon-gen wrote.
cut -f2 mix.names | grep -v '^name$' | grep -v '^#' | sort -u >catalogue.txt
check_names() {
  local what=$1 file=$2 min=$3
  sort -u "$file" | grep -v '^$' >"$file.u" || true
  local n; n=$(wc -l <"$file.u")
  (( n >= min )) || fail "tshark found only $n $what (want >= $min)"
  local stray; stray=$(comm -23 "$file.u" catalogue.txt | head -3)
  [[ -z $stray ]] || fail "$what not in the catalogue: $stray"
  echo "ok: tshark decodes $n distinct $what, all from the catalogue"
}
tshark -r mix.pcap -Y 'tls.handshake.type==1' -T fields -e tls.handshake.extensions_server_name 2>/dev/null >sni.txt
check_names "TLS SNIs" sni.txt 20
tshark -r mix.pcap -Y 'dns.flags.response==0' -T fields -e dns.qry.name 2>/dev/null >qname.txt
check_names "DNS query names" qname.txt 20
tshark -r mix.pcap -Y 'http.request' -T fields -e http.host 2>/dev/null >host.txt
check_names "HTTP hosts" host.txt 10

count() { tshark -r "$1" -Y "$2" 2>/dev/null | wc -l; }
(( $(count mix.pcap ipv6) > 0 )) || fail "no IPv6"
(( $(count mix.pcap 'vlan && eth.type==0x8100') > 0 )) || fail "no 802.1Q"
(( $(count mix.pcap 'eth.type==0x88a8') > 0 )) || fail "no QinQ"
(( $(count mix.pcap 'tls.handshake.extensions.supported_version==0x0304') > 0 )) || fail "no TLS 1.3 offers"
(( $(count mix.pcap 'dns.cname') > 0 )) || fail "no CNAME chains"
(( $(count mix.pcap 'http.user_agent && http.cookie') > 0 )) || fail "no cookies"
(( $(count mix.pcap 'frame.len>=1514') > 100 )) || fail "no full-size segments"
(( $(count mix.pcap 'icmp || icmpv6') > 0 )) || fail "no ICMP echo"
big=$(count small.pcap 'frame.len>200')
(( big == 0 )) || fail "--small wrote $big frames over 200 bytes"
(( $(count mix.pcap 'dhcp || dhcpv6') == 0 )) || fail "DHCP without --dhcp"

# --dhcp: every leased address (DHCPv4 ACK yiaddr, DHCPv6 Reply IA address)
# is the address its client then sends from, and every lease is complete.
tshark -r dhcp.pcap -Y 'dhcp.option.dhcp==5' -T fields -e dhcp.ip.your 2>/dev/null | sort -u >lease4.txt
tshark -r dhcp.pcap -Y 'dhcpv6.msgtype==7' -T fields -e dhcpv6.iaaddr.ip 2>/dev/null | sort -u >lease6.txt
tshark -r dhcp.pcap -Y 'ip && !dhcp' -T fields -e ip.src 2>/dev/null | sort -u >src4.txt
tshark -r dhcp.pcap -Y 'ipv6 && !dhcpv6' -T fields -e ipv6.src 2>/dev/null | sort -u >src6.txt
n4=$(wc -l <lease4.txt) n6=$(wc -l <lease6.txt)
(( n4 >= 10 && n6 >= 5 )) || fail "too few leases: $n4 DHCPv4, $n6 DHCPv6"
[[ -z $(comm -23 lease4.txt src4.txt) ]] || fail "DHCPv4 leases never used: $(comm -23 lease4.txt src4.txt | head -3)"
[[ -z $(comm -23 lease6.txt src6.txt) ]] || fail "DHCPv6 leases never used: $(comm -23 lease6.txt src6.txt | head -3)"
for m in 1 2 3 5; do
  (( $(count dhcp.pcap "dhcp.option.dhcp==$m") == n4 )) || fail "DHCPv4 message type $m not once per lease"
done
for m in 1 2 3 7; do
  (( $(count dhcp.pcap "dhcpv6.msgtype==$m") == n6 )) || fail "DHCPv6 message type $m not once per lease"
done
(( $(count dhcp.pcap 'dhcp.option.hostname && dhcp.fqdn.name && dhcp.option.vendor_class_id') == n4 )) ||
  fail "DHCPv4 Requests without host name, FQDN or vendor class"
echo "ok: dhcp.pcap: $n4 DHCPv4 and $n6 DHCPv6 leases, each address then used by its client"
echo "PASS tshark"
