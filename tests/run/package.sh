#!/usr/bin/env bash
# The Debian package: cpack builds it from this build tree, it unpacks into
# a scratch root (dpkg -x), its amon runs, and its systemd unit passes
# `systemd-analyze verify` (with the unpacked binary in ExecStart, since
# nothing is installed on this machine); the man pages render.
set -euo pipefail
build=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$build" && cpack -G DEB -B "$work/pkg" > "$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/pkg/amon_*.deb)
dpkg-deb --info "$deb" | grep -q 'Depends:.*librte-eal' || { echo "FAIL: no DPDK dependency"; exit 1; }
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
