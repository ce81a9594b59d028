#!/usr/bin/env bash
# The Debian package: cpack builds it from this build tree, it unpacks into
# a scratch root (dpkg -x), its amon runs, and its systemd unit passes
# `systemd-analyze verify` (with the unpacked binary in ExecStart, since
# nothing is installed on this machine); the man pages render.
set -euo pipefail
build=$1
dpdk_static=${2:-OFF}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$build" && cpack -G DEB -B "$work/pkg" > "$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/pkg/amon_*.deb)
# Read whole before matching: under pipefail, `dpkg-deb | grep -q` fails
# whenever grep stops reading before dpkg-deb has written everything.
info=$(dpkg-deb --info "$deb")
# A static DPDK is inside the binary (AmonDpdk.cmake): no librte package, but
# the system libraries its drivers and EAL use; a shared one is a dependency.
if [[ $dpdk_static == ON ]]; then
  ! grep -q 'Depends:.*librte-' <<<"$info" || { echo "FAIL: static DPDK, yet a librte dependency"; exit 1; }
  grep -q 'Depends:.*libnuma' <<<"$info" || { echo "FAIL: no libnuma dependency"; exit 1; }
  grep -q 'Depends:.*libpcap' <<<"$info" || { echo "FAIL: no libpcap dependency"; exit 1; }
else
  grep -q 'Depends:.*librte-eal' <<<"$info" || { echo "FAIL: no DPDK dependency"; exit 1; }
fi
dpkg -x "$deb" "$work/root"
r=$work/root
for f in usr/bin/amon usr/lib/systemd/system/amon.service usr/share/man/man8/amon.8 usr/share/man/man5/amon.policy.5 \
         usr/share/amon/amon.yaml usr/share/amon/rules/ids.amon usr/share/amon/rules/meter.amon; do
  [[ -e $r/$f ]] || { echo "FAIL: $f not in the package"; exit 1; }
done
v=$("$r/usr/bin/amon" version)
[[ $v == "amon "* ]] || { echo "FAIL: amon version said '$v'"; exit 1; }
grep -q '^ExecStart=/usr/bin/amon run' "$r/usr/lib/systemd/system/amon.service" || { echo "FAIL: ExecStart"; exit 1; }
sed "s|/usr/bin/amon|$r/usr/bin/amon|g" "$r/usr/lib/systemd/system/amon.service" > "$work/amon.service"
systemd-analyze verify --man=no "$work/amon.service"
# Rendering warnings would mean broken troff.
for m in usr/share/man/man8/amon.8 usr/share/man/man5/amon.policy.5; do
  out=$(MANWIDTH=80 man --warnings -l "$r/$m" 2>&1 >/dev/null || true)
  [[ -z $out ]] || { echo "FAIL: $m: $out"; exit 1; }
done
echo "package: $(basename "$deb") unpacks, $v, unit verified"
