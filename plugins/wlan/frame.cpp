// The 802.11 frame (IEEE 802.11-2020, 9.2-9.4): its addresses by role, a
// data frame's LLC/SNAP header, a management frame's fixed fields and
// elements. Bounds-checked, no allocation; what cannot be read ends the
// walk there (good_until), so the runtime cuts what follows when a policy
// protects anything.
#include <algorithm>

#include "amon_wlan.hpp"

namespace amon::wlan {

namespace {

uint16_t le16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }

// Elements whose contents name no device and no person: rates, channels,
// regulatory and capability elements a monitor reads. Any other element
// (vendor-specific ones carry WPS device names, models, serial numbers and
// UUIDs; interworking, mesh IDs, neighbour reports, unknown ones) is a
// wlan.ie value.
bool plain_element(uint8_t id, const uint8_t* data, uint32_t len, bool request) {
  switch (id) {
    case 1: case 3: case 5: case 6: case 7: case 11: case 32: case 33: case 35: case 36: case 37: case 42:
    case 45: case 46: case 50: case 59: case 61: case 62: case 70: case 74: case 127: case 191: case 192:
    case 195: case 199:
      return true;
    case 48:  // RSN: a station's (re)association request may list PMKIDs, which link its sessions
      return !request;
    case 255:  // extension: HE capabilities and operation, 6 GHz band capabilities
      return len >= 1 && (data[0] == 35 || data[0] == 36 || data[0] == 59);
    default:
      return false;
  }
}

struct Walk {
  const uint8_t* p;
  uint32_t cap;
  LinkDecode& r;
  LinkOccs* out;
  const FieldId* ids;
  unsigned n = 0;

  // False when the table is full: the walk ends before the value.
  bool add(Slot s, OccKind k, uint32_t off, uint32_t len) {
    if (n == LinkOccs::kMax) return false;
    if (out) {
      ProtoOcc& o = out->occ[out->n++];
      o = ProtoOcc{};
      o.field = ids ? ids[s] : kNoField, o.kind = k, o.off = off, o.len = len;
      if (k == OccKind::Name) o.text = std::string_view(reinterpret_cast<const char*>(p + off), len);
    }
    ++n;
    return true;
  }
  // The addresses at f + 4, 10, 16 (and 24) with their roles; false when
  // the capture ends inside them (good_until before the first one missing).
  bool addresses(uint32_t f, const Slot* roles, int count) {
    for (int i = 0; i < count; ++i) {
      const uint32_t at = f + (i < 3 ? 4 + 6 * uint32_t(i) : 24);
      if (at + 6 > cap) return stop(DecodeStatus::Truncated, at);
      if (!add(roles[i], OccKind::Mac, at, 6)) return stop(DecodeStatus::Malformed, at);
      r.good_until = at + 6;
    }
    return true;
  }
  bool stop(DecodeStatus s, uint32_t at) {
    r.status = s;
    r.good_until = std::min(r.good_until, at);
    return false;
  }
  void body(LinkBody b, uint32_t at) {
    r.status = DecodeStatus::NotIp;
    r.body = b;
    r.off = at;
  }
  void elements(uint32_t o, bool request);
  void management(uint32_t f, uint8_t fc1, unsigned sub);
  void data(uint32_t f, uint8_t fc1, unsigned sub);
  void control(uint32_t f, unsigned sub);
};

// Elements from o to the end of the capture: SSIDs (also inside an SSID
// list) are wlan.ssid values, elements not known to be plain wlan.ie values.
void Walk::elements(uint32_t o, bool request) {
  const DecodeStatus cut_short = DecodeStatus::Truncated;
  while (o < cap) {
    if (o + 2 > cap || o + 2 + p[o + 1] > cap) return (void)stop(cut_short, o);
    const uint8_t id = p[o], len = p[o + 1];
    const uint32_t v = o + 2;
    bool ok = true;
    if (id == 0) {
      if (len) ok = add(kSsid, OccKind::Name, v, len);
    } else if (id == 84) {  // SSID list: SSID elements, the networks a station looks for
      uint32_t i = v;
      while (i + 2 <= v + len && p[i] == 0 && i + 2 + p[i + 1] <= v + len) i += 2 + p[i + 1];
      if (i != v + len) {
        ok = add(kIe, OccKind::Bytes, v, len);  // not a list of SSIDs: its bytes, whatever they are
      } else {
        for (uint32_t j = v; ok && j < v + len; j += 2 + p[j + 1])
          if (p[j + 1]) ok = add(kSsid, OccKind::Name, j + 2, p[j + 1]);
      }
    } else if (len && !plain_element(id, p + v, len, request)) {
      ok = add(kIe, OccKind::Bytes, v, len);
    }
    if (!ok) return (void)stop(DecodeStatus::Malformed, o);
    o = v + len;
    r.good_until = o;
  }
}

void Walk::management(uint32_t f, uint8_t fc1, unsigned sub) {
  static constexpr Slot kRoles[3] = {kDst, kSrc, kBssid};
  if (!addresses(f, kRoles, 3)) return;
  uint32_t h = f + 24 + (fc1 & 0x80 ? 4 : 0);  // HT control with the Order bit
  if (h > cap) return (void)stop(DecodeStatus::Truncated, f + 22);
  r.good_until = h;
  if (fc1 & 0x40) return body(LinkBody::Opaque, h);  // a protected (robust) management frame
  // Fixed fields before the elements, by subtype; -1: no elements follow.
  static constexpr int kFixed[16] = {4, 6, 10, 6, 0, 12, 10, -1, 12, -1, 2, 6, 2, -1, -1, -1};
  const int fixed = kFixed[sub];
  if (sub == 2 && h + 10 <= cap) {  // reassociation request: the station's current AP
    if (!add(kBssid, OccKind::Mac, h + 4, 6)) return (void)stop(DecodeStatus::Malformed, h);
  }
  if (fixed < 0) {
    // ATIM (empty) and action frames, whose contents the element table
    // does not describe (neighbour reports, fine timing measurements with
    // locations): their bytes are one wlan.ie value.
    if (cap > h && !add(kIe, OccKind::Bytes, h, cap - h)) return (void)stop(DecodeStatus::Malformed, h);
    r.good_until = cap;
    return body(LinkBody::Located, cap);
  }
  if (h + uint32_t(fixed) > cap) return (void)stop(DecodeStatus::Truncated, h);
  r.good_until = h + uint32_t(fixed);
  // Authentication: SAE and FT carry fields, not elements, after the fixed ones.
  if (sub == 11 && cap > r.good_until) {
    if (!add(kIe, OccKind::Bytes, r.good_until, cap - r.good_until)) return (void)stop(DecodeStatus::Malformed, h);
    r.good_until = cap;
  }
  r.status = DecodeStatus::NotIp;
  elements(r.good_until, sub == 0 || sub == 2);
  if (r.status == DecodeStatus::NotIp) body(LinkBody::Located, cap);
}

void Walk::data(uint32_t f, uint8_t fc1, unsigned sub) {
  const bool to_ds = fc1 & 1, from_ds = fc1 & 2;
  static constexpr Slot kRoles[4][4] = {
      {kDst, kSrc, kBssid, kSrc},  // within a BSS (or IBSS)
      {kBssid, kSrc, kDst, kSrc},  // to the AP
      {kDst, kBssid, kSrc, kSrc},  // from the AP
      {kRa, kTa, kDst, kSrc},      // between APs (WDS, mesh)
  };
  if (!addresses(f, kRoles[to_ds | from_ds << 1], to_ds && from_ds ? 4 : 3)) return;
  uint32_t h = f + (to_ds && from_ds ? 30 : 24);
  const bool qos = sub & 8;
  bool amsdu = false;
  if (qos) {
    if (h + 2 > cap) return (void)stop(DecodeStatus::Truncated, h);
    amsdu = p[h] & 0x80;
    h += 2 + (fc1 & 0x80 ? 4 : 0);
  }
  if (h > cap) return (void)stop(DecodeStatus::Truncated, r.good_until);
  r.good_until = h;
  if (sub & 4) return body(LinkBody::Located, h);       // no data (null function)
  // LLC/SNAP: RFC 1042 (OUI 0) or 802.1H bridge tunnel (00-00-F8), then an EtherType.
  auto snap_at = [&](uint32_t o) {
    const uint8_t* s = p + o;
    return o + 8 <= cap && s[0] == 0xaa && s[1] == 0xaa && s[2] == 0x03 && s[3] == 0 && s[4] == 0 &&
           (s[5] == 0 || s[5] == 0xf8);
  };
  if (fc1 & 0x40) {
    // Encrypted (WEP, TKIP, CCMP, GCMP), unless its body is in clear: a
    // capture decrypted where it was taken (in the adapter, or by a tool)
    // keeps the Protected bit, with the cipher's header or without it.
    // LLC/SNAP right after a cipher header of the kind its key id byte
    // says (ExtIV: 8 bytes, else WEP's 4), or in its place, is six given
    // bytes no key stream writes but by chance (2^-48).
    const uint32_t iv = h + 4 <= cap && (p[h + 3] & 0x20) ? 8 : 4;
    if (snap_at(h + iv)) h += iv, r.good_until = h;
    else if (!snap_at(h)) return body(LinkBody::Opaque, h);
  }
  if (amsdu) return body(LinkBody::Unknown, h);         // subframes with their own addresses: not read
  if (h + 8 > cap) return (void)stop(DecodeStatus::Truncated, h);
  const uint8_t* s = p + h;
  if (snap_at(h)) {
    r.status = DecodeStatus::Ok;
    r.ethertype = uint16_t(s[6] << 8 | s[7]);
    r.off = r.good_until = h + 8;
    return;
  }
  body(LinkBody::Unknown, h);
}

void Walk::control(uint32_t f, unsigned sub) {
  // Receiver only: CTS, ACK; receiver and transmitter: beamforming report
  // poll, NDP announcement, block ack (request), PS-Poll, RTS, CF-End.
  int count;
  switch (sub) {
    case 12: case 13: count = 1; break;
    case 4: case 5: case 8: case 9: case 10: case 11: case 14: case 15: count = 2; break;
    default: count = 0; break;  // control wrapper and extensions: not read
  }
  static constexpr Slot kRoles[2] = {kRa, kTa};
  if (!count) {
    r.good_until = f + 2;
    return body(LinkBody::Unknown, f + 2);
  }
  if (!addresses(f, kRoles, count)) return;
  // What the subtype holds after its addresses, no more: bytes beyond it
  // are no part of the frame and are cut (when anything is protected).
  uint32_t rest = 0;
  switch (sub) {
    case 4: rest = 1; break;      // sounding dialog token
    case 5: rest = 1; break;      // sounding dialog token (the STA info list is cut)
    case 8: rest = 4; break;      // BAR control, starting sequence
    case 9: rest = 12; break;     // BA control, starting sequence, compressed bitmap
    default: rest = 0; break;
  }
  const uint32_t end = std::min(cap, f + 4 + 6 * uint32_t(count) + rest);
  r.good_until = end;
  body(LinkBody::Located, end);
}

}  // namespace

void walk(int dlt, const uint8_t* p, uint32_t cap, uint32_t off, LinkDecode& r, LinkOccs* occs, const FieldId* ids) {
  r = LinkDecode{};
  r.good_until = off;
  if (occs) occs->n = 0;
  uint32_t f = off;
  if (dlt != kDltIeee80211) {
    // The capture header normalize() wrote: kept whole.
    if (off + 4 > cap) return (void)(r.status = DecodeStatus::Truncated);
    const uint32_t hl = le16(p + off + 2);
    if (hl < 8 || off + hl > cap) return (void)(r.status = DecodeStatus::Malformed);
    f = off + hl;
  }
  r.good_until = f;
  Walk w{p, cap, r, occs, ids};
  if (f + 4 > cap) {
    // Frame control and duration: kept; anything less is no frame.
    if (f == cap) return w.body(LinkBody::Located, f);  // the capture header alone
    return (void)(r.status = DecodeStatus::Truncated);
  }
  r.good_until = f + 4;
  const uint8_t fc0 = p[f], fc1 = p[f + 1];
  const unsigned type = fc0 >> 2 & 3, sub = fc0 >> 4;
  if (fc0 & 3) return w.body(LinkBody::Unknown, f + 4);  // a protocol version other than 0
  switch (type) {
    case 0: return w.management(f, fc1, sub);
    case 1: return w.control(f, sub);
    case 2: return w.data(f, fc1, sub);
    default: return w.body(LinkBody::Unknown, f + 4);  // extension frames
  }
}

}  // namespace amon::wlan
