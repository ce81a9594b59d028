// libFuzzer target for one encapsulation's decoder (AMON_FUZZ_ENCAP picks
// it: the build makes one target per encapsulation). The input follows a
// fixed outer Ethernet/IPv4 header and, for UDP encapsulations, a UDP header
// on the encapsulation's port, so every run reaches that decoder; its first
// byte cuts the captured length. Checks: no crash or out-of-bounds access
// (ASan), every offset within the captured bytes, the layers in order, the
// fast decoder equal to the full one, and the outer length/checksum fix-up
// staying within the frame after a cut.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "l2l4.h"

using namespace amon;

namespace {

enum Kind { kGtpu, kVxlan, kVxlanGpe, kGeneve, kGre, kIpIp, kTeredo, kAyiya, kPim };

#ifndef AMON_FUZZ_ENCAP
#define AMON_FUZZ_ENCAP kGtpu
#endif

#define check(ok)                                           \
  do {                                                      \
    if (!(ok)) {                                            \
      std::fprintf(stderr, "check failed: %s\n", #ok);   \
      std::abort();                                         \
    }                                                       \
  } while (0)

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 4000) return 0;
  const Kind k = AMON_FUZZ_ENCAP;
  const bool udp = k != kGre && k != kIpIp && k != kPim;
  std::vector<uint8_t> f(14 + 20 + (udp ? 8 : 0));
  f.insert(f.end(), data + 1, data + size);
  f[12] = 0x08, f[13] = 0x00;
  uint8_t* ip = f.data() + 14;
  ip[0] = 0x45;
  ip[8] = 64;
  ip[9] = udp ? 17 : k == kGre ? 47 : k == kPim ? 103 : (data[0] & 1) ? 41 : 4;
  const uint8_t src[4] = {192, 0, 2, 1}, dst[4] = {198, 51, 100, 2};
  std::memcpy(ip + 12, src, 4), std::memcpy(ip + 16, dst, 4);
  const uint32_t len = uint32_t(f.size());
  ip[2] = uint8_t((len - 14) >> 8), ip[3] = uint8_t(len - 14);
  if (udp) {
    static const uint16_t port[] = {2152, 4789, 4790, 6081, 0, 0, 3544, 5072, 0};
    uint8_t* u = ip + 20;
    u[0] = 0xc0, u[1] = 0x01;
    u[2] = uint8_t(port[k] >> 8), u[3] = uint8_t(port[k]);
    u[4] = uint8_t((len - 34) >> 8), u[5] = uint8_t(len - 34);
    u[6] = 0x12, u[7] = 0x34;  // a checksum in use: encap_fix follows it
  }
  // The first byte's high bits cut the capture (snaplen) a quarter of the time.
  uint32_t cap = len;
  if ((data[0] >> 6) == 0 && len > 40) cap = 34 + (uint32_t(data[0]) * 7) % (len - 34);

  Decoded a, b;
  decode(f.data(), cap, len, a);
  decode_full(f.data(), cap, len, b);
  check(a == b);
  check(a.good_until <= cap);
  check(a.n_encap <= kMaxEncap);
  uint32_t prev = 0;
  for (int i = 0; i < a.n_encap; ++i) {
    const EncapLayer& L = a.encap[i];
    check(L.l3_off >= prev && L.l3_off + L.l3_hdr_len <= cap);
    check(L.inner_off > L.l3_off && L.inner_off <= cap);
    if (L.udp_off) check(L.udp_off + 8u <= cap);
    uint32_t at, n;  // AYIYA's identity: within its header
    if (ayiya_identity(f.data(), cap, L, at, n)) check(at > L.udp_off && at + n <= L.inner_off);
    if (uint32_t end; teredo_trailers(f.data(), cap, L, at, end)) {  // Teredo's trailers: after the packet, captured
      check(at > L.inner_off && end <= cap);
      check(each_teredo_alt_addr(f.data(), at, end, [&](uint32_t a) { check(a >= at && a + 6 <= end); }) <= end);
    }
    prev = L.inner_off;
  }
  if (a.n_encap) {
    check((a.flags & kFlagEncap) && a.tun_ctx != 0);
    if (a.ip_version) check(a.l3_off >= prev);
    if (a.status == DecodeStatus::Ok && a.has_ip()) check(a.payload_off <= a.l3_off + a.l3_len);
  }
  if (a.status == DecodeStatus::Ok && a.has_ip()) check(a.l3_off + a.l3_hdr_len <= cap);

  // The outer fix-up after the inner packet lost its tail, and after a
  // rewrite of one inner byte.
  if (a.n_encap) {
    std::vector<uint8_t> g(f.begin(), f.begin() + cap);
    EncapSums s;
    encap_sums(g.data(), cap, a, s);
    uint8_t old[kMaxEncap][32] = {};
    for (int i = 0; i < a.n_encap; ++i) {
      const EncapLayer& L = a.encap[i];
      const uint32_t al = L.ip_version == 4 ? 8 : 32;
      std::memcpy(old[i], g.data() + L.l3_off + (L.ip_version == 4 ? 12 : 8), al);
    }
    const uint32_t last = a.encap[a.n_encap - 1].inner_off;
    if (last < cap) g[last] ^= 0x55;
    encap_fix(g.data(), cap, false, a, s, old, 0);
    const uint32_t cut = last + (cap > last ? (data[0] % (cap - last + 1)) : 0);
    if (cut <= cap) {
      std::vector<uint8_t> h(g.begin(), g.begin() + cut);
      h.reserve(1);
      encap_fix(h.data(), cut, true, a, s, old, uint8_t((1u << a.n_encap) - 1));
    }
  }
  return 0;
}
