// QUIC Initial: analyze -> rewrite -> analyze again. No crash or over-read;
// a rewrite keeps the datagram's length, the packets it does not touch, and
// a datagram that still decrypts to the same names (same lengths).
//
// Random bytes never pass the AEAD tag, so the input is mostly used as the
// plaintext of Initials this target protects itself:
//   byte 0 odd:  [1] version, [2] DCID length, DCID, [8] flow state, [1] direction, frames
//   byte 0 even: the rest is the datagram as is (header parsing, decryption failures)
#include <cstdlib>
#include <cstring>
#include <vector>

#include "amon_quic.hpp"
#include "quic_build.hpp"

using namespace amon;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto* c = new quic::Crypto();
  static auto* d = new quic::Datagram();
  static auto* d2 = new quic::Datagram();
  if (size < 1) return 0;
  std::vector<uint8_t> dg;
  quic::FlowState st;
  int dir = 0;
  if (data[0] & 1) {
    static const uint32_t versions[] = {quic::kVersion1, quic::kVersion2, 0xff00001d, 0xfaceb002};
    size_t o = 1;
    if (size < o + 2) return 0;
    const uint32_t ver = versions[data[o] & 3];
    const size_t dl = data[o + 1] % 21;
    o += 2;
    if (size < o + dl + 9) return 0;
    quictest::Bytes dcid(data + o, data + o + dl);
    o += dl;
    st.mode = data[o] % 3;
    st.client = data[o + 1] % 3;
    st.a = uint16_t(data[o + 2] << 8 | data[o + 3]);
    st.b = uint16_t(data[o + 4] << 8 | data[o + 5]);
    st.end = uint16_t(data[o + 6] << 8 | data[o + 7]);
    dir = data[o + 8] & 1;
    o += 9;
    quictest::Bytes frames(data + o, data + size);
    dg = quictest::initial(*c, ver, dcid, uint32_t(size), frames, (data[0] & 2) ? 1162 : 0);
  } else {
    dg.assign(data + 1, data + size);
  }
  const quic::FlowState before = st;
  const quic::Status s = quic::analyze(dg.data(), dg.size(), dir, 1, *c, st, *d);
  if (s != quic::Status::Located) return 0;
  if (d->n_names == 0 || d->n_names > quic::Datagram::kMaxNames) std::abort();
  names::Decision dec[quic::Datagram::kMaxNames];
  for (unsigned i = 0; i < d->n_names; ++i) dec[i] = (i & 1) ? names::Decision::redact() : names::Decision::mask(i + 1);
  std::vector<uint8_t> w = dg;
  if (!quic::rewrite(w.data(), w.size(), *d, dec, *c)) std::abort();
  if (w.size() != dg.size()) std::abort();
  // Bytes outside the Initials that were opened are never touched.
  std::vector<bool> inside(dg.size(), false);
  for (unsigned k = 0; k < d->n_pkt; ++k)
    for (uint32_t i = d->pkt[k].off; i < d->pkt[k].off + d->pkt[k].len; ++i) inside[i] = true;
  for (size_t i = 0; i < dg.size(); ++i)
    if (!inside[i] && w[i] != dg[i]) std::abort();
  quic::FlowState st2 = before;
  if (quic::analyze(w.data(), w.size(), dir, 1, *c, st2, *d2) != quic::Status::Located || d2->n_names != d->n_names)
    std::abort();
  for (unsigned i = 0; i < d->n_names; ++i)
    if (d2->names[i].len != d->names[i].len || d2->names[i].stream != d->names[i].stream) std::abort();
  return 0;
}
