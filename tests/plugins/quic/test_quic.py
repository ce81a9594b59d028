#!/usr/bin/env python3
"""End to end: the SNI of QUIC Initial packets through `amon pcap` on
the real captures of ../shared/pcaps, with tshark (which decrypts Initials)
as the oracle.

  hide  tls.sni hidden (z above the number of users, fallback=redact): tshark
        must find none of the input's SNIs in the output, must still decrypt
        every client Initial amon did not cut (same QUIC frames, frame by
        frame, with a hidden name of the same length where the input had one),
        must flag no new error, and Good checksums stay Good. Each capture must
        have at least a known number of hellos rewritten (not cut).
  keep  keep() on tls.sni: the records are byte-identical.

Besides the files as they are, the Geneve capture is also checked
decapsulated (inner frames, derived here): its QUIC flows are Chrome's
post-quantum ClientHellos spread over two or three Initials with scattered
CRYPTO frames; amon rewrites as many of them inside the tunnel as outside.

usage: test_quic.py MODE AMON"""

import json
import os
import struct
import sys

# e2e_lib: the end-to-end tests' shared pcap reader, tshark calls and work files.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "e2e"))
import e2e_lib as L  # noqa: E402

# capture -> least number of client Initials whose SNI must be rewritten (not
# cut). quic-initials-many-sni-vlan: 14 of its hellos are Google QUIC T051,
# whose Initial keys are not known: those are cut.
CAPTURES = {
    "quic-chromium.pcap": 1,
    "quic-illustrated.pcap": 1,
    "quic-initials-many-sni-vlan.pcap": 382,
    "tls13-quic-sites.pcap": 4,
    "tunnel-geneve-tls-quic.pcap": 22,
    "geneve-inner (derived)": 22,
}
FIELDS = ["tls.handshake.extensions_server_name", "quic.frame_type", "quic.crypto.offset", "_ws.expert.message",
          "udp.length"]


def decap_geneve(frame):
    """The inner frame of an IPv4/UDP/Geneve frame (an Ethernet header is
    made from the outer one when Geneve carries IP directly), else the frame."""
    o = 12
    et = struct.unpack(">H", frame[o:o + 2])[0]
    while et in (0x8100, 0x88a8):
        o += 4
        et = struct.unpack(">H", frame[o:o + 2])[0]
    o += 2
    if et != 0x0800 or len(frame) < o + 20 or frame[o + 9] != 17:
        return frame
    u = o + (frame[o] & 15) * 4
    if len(frame) < u + 16 or struct.unpack(">H", frame[u + 2:u + 4])[0] != 6081:
        return frame
    g = u + 8
    proto = struct.unpack(">H", frame[g + 2:g + 4])[0]
    inner = frame[g + 8 + (frame[g] & 0x3f) * 4:]
    if proto == 0x6558:
        return inner
    if proto in (0x0800, 0x86dd):
        return frame[:12] + struct.pack(">H", proto) + inner
    return frame


def inputs(pdir, d):
    for f in CAPTURES:
        if f.startswith("geneve-inner"):
            _, recs = L.read_pcap(os.path.join(pdir, "tunnel-geneve-tls-quic.pcap"))
            p = os.path.join(d, "geneve-inner.pcap")
            L.write_pcap(p, [(r[0], decap_geneve(r[3])) for r in recs])
            yield f, p
        else:
            yield f, os.path.join(pdir, f)


def quic_rows(path):
    return {r[0]: r for r in L.tshark_fields(path, FIELDS, "quic")}


def mode_hide(amon, pdir, d):
    pol = L.write_policy(d, "hide.amon", "tls.sni : zanon(z=64, dt=7d, fallback=redact)\n")
    fails = []
    for f, inp in inputs(pdir, d):
        out = os.path.join(d, "hide-" + os.path.basename(inp))
        st = os.path.join(d, "stats-" + os.path.basename(inp) + ".json")
        L.run_amon(amon, inp, [("hide", pol, out)], extra=["--stats-json", st])
        with open(st) as fh:
            cut = json.load(fh)["consumers"][0]["l7_cut"]
        rin, rout = quic_rows(inp), quic_rows(out)
        names_in = {L.norm_name(n) for r in rin.values() for n in r[1]}
        rewritten = undecrypted = 0
        for fr, r in sorted(rin.items()):
            o = rout.get(fr)
            leaked = sorted({L.norm_name(n) for n in (o[1] if o else [])} & names_in)
            if leaked:
                fails.append(f"{f}: LEAK in frame {fr}: {leaked}")
            if not o or o[5] != r[5]:
                continue  # payload cut (fail closed) or no longer QUIC
            # Not cut: tshark must see the same frames, decrypted.
            if o[2] != r[2] or o[3] != r[3]:
                undecrypted += 1
                if undecrypted <= 5:
                    fails.append(f"{f}: frame {fr}: QUIC frames {r[2]} / CRYPTO offsets {r[3]} in the input, "
                                 f"{o[2]} / {o[3]} in the output")
            new_err = sorted(set(o[4]) - set(r[4]))
            if new_err:
                fails.append(f"{f}: frame {fr}: new expert messages {new_err}")
            for a, b in zip(r[1], o[1]):
                if len(a) != len(b) or a == b:
                    fails.append(f"{f}: frame {fr}: SNI {a!r} became {b!r}")
            if r[1]:
                rewritten += 1
        if rewritten < CAPTURES[f]:
            fails.append(f"{f}: {rewritten} SNIs rewritten in decryptable Initials, expected at least {CAPTURES[f]}")
        L.health(inp, out, f, fails)
        # Two consumers, two workers: the Initials are decrypted once and
        # rewritten per consumer; redact() is deterministic, so the hiding
        # consumer's records equal the single run's, the other's the input.
        out2, keep2 = out + ".2.pcap", out + ".keep.pcap"
        kpol = L.write_policy(d, "keep.amon", "tls.sni : keep()\n")
        L.run_amon(amon, inp, [("hide", pol, out2), ("keep", kpol, keep2)], workers=2)
        for a_path, b_path, what in ((out, out2, "hiding consumer"), (inp, keep2, "keep() consumer")):
            a = sorted(r[3] for r in L.read_pcap(a_path)[1])
            b = sorted(r[3] for r in L.read_pcap(b_path)[1])
            if a != b:
                fails.append(f"{f}: with two consumers and two workers the {what}'s records differ")
        print(f"  {f}: {len(names_in)} QUIC SNIs in, {rewritten} hellos rewritten, {cut} packets cut (l7_cut)")
    return fails


def mode_keep(amon, pdir, d):
    pol = L.write_policy(d, "keep.amon", "tls.sni : keep()\n")
    fails = []
    for f, inp in inputs(pdir, d):
        out = os.path.join(d, "keep-" + os.path.basename(inp))
        L.run_amon(amon, inp, [("keep", pol, out)])
        _, a = L.read_pcap(inp)
        _, b = L.read_pcap(out)
        diff = [i + 1 for i, (x, y) in enumerate(zip(a, b)) if x[3] != y[3]]
        if len(a) != len(b) or diff:
            fails.append(f"{f}: {len(b)} records out, {len(a)} in; differing frames {diff[:10]}")
    return fails


def main():
    mode, amon = sys.argv[1], sys.argv[2]
    L.need_tshark()
    pdir = L.pcaps_dir()
    d = L.tmpdir(f"e2e-quic-{mode}-")
    fails = mode_hide(amon, pdir, d) if mode == "hide" else mode_keep(amon, pdir, d)
    for x in fails:
        print("FAIL:", x)
    print(f"quic {mode}: {len(CAPTURES)} capture(s) checked, {len(fails)} failure(s)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
