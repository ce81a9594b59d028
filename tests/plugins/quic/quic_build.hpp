// Builders for protected QUIC Initial packets (tests, fuzz corpus, bench).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "amon_quic.hpp"

namespace amon::quictest {

using Bytes = std::vector<uint8_t>;

inline Bytes hex(const std::string& s) {
  Bytes b;
  for (size_t i = 0; i + 1 < s.size(); i += 2) b.push_back(uint8_t(std::stoi(s.substr(i, 2), nullptr, 16)));
  return b;
}

inline void varint(Bytes& b, uint64_t v) {
  if (v < 64) b.push_back(uint8_t(v));
  else if (v < 16384) b.push_back(uint8_t(0x40 | v >> 8)), b.push_back(uint8_t(v));
  else for (int i = 3; i >= 0; --i) b.push_back(uint8_t((i == 3 ? 0x80 : 0) | uint8_t(v >> (8 * i))));
}

inline Bytes crypto_frame(uint64_t off, const Bytes& data, size_t from, size_t n) {
  Bytes f{0x06};
  varint(f, off);
  varint(f, n);
  f.insert(f.end(), data.begin() + long(from), data.begin() + long(from + n));
  return f;
}

// A client Initial (packet number length 4) with `frames` padded to `pad_to`
// payload bytes, protected as RFC 9001 5 says. Returns the whole packet.
inline Bytes initial(quic::Crypto& c, uint32_t version, const Bytes& dcid, uint32_t pn, Bytes frames,
                     size_t pad_to = 0, const Bytes& scid = {}, const Bytes* key_dcid = nullptr) {
  const quic::VersionInfo* vi = quic::version_info(version);
  quic::Keys k{};
  const Bytes& kd = key_dcid ? *key_dcid : dcid;  // after the server's first Initial: its CID, first keys
  c.initial_keys(*vi, kd.data(), kd.size(), false, k);
  if (frames.size() < pad_to) frames.resize(pad_to, 0);
  const uint8_t type = vi->v2_types ? 1 : 0;
  Bytes h{uint8_t(0xc0 | type << 4 | 3)};
  for (int i = 3; i >= 0; --i) h.push_back(uint8_t(version >> (8 * i)));
  h.push_back(uint8_t(dcid.size()));
  h.insert(h.end(), dcid.begin(), dcid.end());
  h.push_back(uint8_t(scid.size()));
  h.insert(h.end(), scid.begin(), scid.end());
  h.push_back(0);  // token length
  const size_t len = 4 + frames.size() + 16;
  h.push_back(uint8_t(0x40 | len >> 8));
  h.push_back(uint8_t(len));
  const size_t pn_off = h.size();
  for (int i = 3; i >= 0; --i) h.push_back(uint8_t(pn >> (8 * i)));
  Bytes out(h);
  out.resize(h.size() + frames.size() + 16);
  c.seal(k, pn, h.data(), h.size(), frames.data(), frames.size(), out.data() + h.size());
  uint8_t mask[5];
  c.hp_mask(k.hp, out.data() + pn_off + 4, mask);
  out[0] ^= mask[0] & 0x0f;
  for (int i = 0; i < 4; ++i) out[pn_off + i] ^= mask[1 + i];
  return out;
}

}  // namespace amon::quictest
