// The 802.11 link layer on its own: the capture header reduced (vendor
// namespaces, TSFT, GPS and the FCS gone; rate, channel, signal kept), the
// frame walked (addresses by role, SSIDs and SSID lists, identifying
// elements, LLC/SNAP to IP, protected bodies opaque), and what cannot be
// read ending the walk where it starts.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "amon_wlan.hpp"
#include "registry.h"

using namespace amon;
using Bytes = std::vector<uint8_t>;

namespace {

Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes o;
  for (const auto& p : parts) o.insert(o.end(), p.begin(), p.end());
  return o;
}
Bytes str(const std::string& s) { return Bytes(s.begin(), s.end()); }
Bytes ie(uint8_t id, const Bytes& d) { return cat({{id, uint8_t(d.size())}, d}); }
const Bytes kAp = {0xa4, 0xb1, 0xc2, 0xd3, 0xe4, 0xf5}, kSta = {0x3c, 0x22, 0xfb, 0x12, 0x34, 0x56};
const Bytes kBcast(6, 0xff);

// Radiotap: TSFT, flags (FCS), rate, channel, dBm signal, then a vendor
// namespace holding a serial number.
Bytes radiotap(const Bytes& frame) {
  Bytes h = {0, 0, 0, 0, 0x2f, 0, 0, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0};
  Bytes tsft = {1, 2, 3, 4, 5, 6, 7, 8};
  Bytes rest = {0x10, 108, 0x85, 0x09, 0xa0, 0x00, uint8_t(-42), 0};
  Bytes vendor = cat({{0x00, 0x10, 0x18, 0x01, 8, 0}, str("SERIAL99")});
  Bytes all = cat({h, tsft, rest, vendor});
  all[2] = uint8_t(all.size());
  return cat({all, frame, {0xde, 0xad, 0xbe, 0xef}});
}

Bytes beacon() {
  Bytes hdr = cat({{0x80, 0, 0, 0}, kBcast, kAp, kAp, {0x10, 0}});
  Bytes fixed(12, 0);
  return cat({hdr, fixed, ie(0, str("HomeNet")), ie(1, {0x82, 0x84}),
              ie(84, cat({ie(0, str("Cafe")), ie(0, str("Gare"))})), ie(221, cat({{0x00, 0x50, 0xf2, 0x04}, str("WPSNAME")}))});
}

// Located text points into the frame: the frame lives as long as the result.
struct Located {
  Bytes pkt;
  LinkDecode r;
  LinkOccs occs;
};

Located walk(int dlt, const Bytes& rec) {
  static const bool once = (register_builtin_plugins(), true);
  (void)once;
  Located l;
  Bytes& pkt = l.pkt;
  pkt.resize(14 + rec.size() + 64);
  link_stand_in(dlt, pkt.data());
  uint32_t wire = 0;
  const uint32_t n = wlan::normalize(dlt, rec.data(), uint32_t(rec.size()), uint32_t(rec.size()), pkt.data() + 14, wire);
  pkt.resize(14 + n);
  link_layer()->decode(dlt, pkt.data(), uint32_t(pkt.size()), 14, l.r);
  link_layer()->locate(dlt, pkt.data(), uint32_t(pkt.size()), 14, l.occs);
  return l;
}

std::string name_of(FieldId f) { return Registry::instance().field(f).name; }

}  // namespace

TEST_CASE("radiotap keeps rate, channel, signal and flags; drops TSFT, vendor data and the FCS") {
  const Bytes frame = beacon();
  const Bytes rec = radiotap(frame);
  Bytes out(rec.size() + 64);
  uint32_t wire = 0;
  const uint32_t n = wlan::normalize(wlan::kDltRadiotap, rec.data(), uint32_t(rec.size()), uint32_t(rec.size()),
                                     out.data(), wire);
  out.resize(n);
  // Header 8 + flags, rate, channel (aligned to 2), signal = 15, then the frame without its FCS.
  REQUIRE(n == 15 + frame.size());
  CHECK(wire == n);
  CHECK(out[2] == 15);
  CHECK((out[4] | out[5] << 8 | out[6] << 16 | uint32_t(out[7]) << 24) == (1u << 1 | 1u << 2 | 1u << 3 | 1u << 5));
  CHECK(out[8] == 0);      // the FCS flag cleared
  CHECK(out[9] == 108);    // rate
  CHECK(out[10] == 0x85);  // 2437 MHz
  CHECK(out[14] == uint8_t(-42));
  CHECK(Bytes(out.begin() + 15, out.end()) == frame);
  const std::string s(out.begin(), out.end());
  CHECK(s.find("SERIAL99") == std::string::npos);
}

TEST_CASE("a radiotap header longer than its record leaves an empty header and no frame") {
  Bytes rec = radiotap(beacon());
  rec[2] = 0xff;
  rec[3] = 0x01;
  Bytes out(rec.size() + 64);
  uint32_t wire = 0;
  CHECK(wlan::normalize(wlan::kDltRadiotap, rec.data(), uint32_t(rec.size()), uint32_t(rec.size()), out.data(), wire) == 8);
  CHECK(wire == 8);
}

TEST_CASE("a beacon's addresses, SSIDs (also in an SSID list) and vendor element are located") {
  const Located l = walk(wlan::kDltRadiotap, radiotap(beacon()));
  CHECK(l.r.status == DecodeStatus::NotIp);
  CHECK(l.r.body == LinkBody::Located);
  std::vector<std::string> names;
  for (uint32_t i = 0; i < l.occs.n; ++i) names.push_back(name_of(l.occs.occ[i].field));
  CHECK(names == std::vector<std::string>{"wlan.dst", "wlan.src", "wlan.bssid", "wlan.ssid", "wlan.ssid", "wlan.ssid",
                                          "wlan.ie"});
  CHECK(l.occs.occ[3].text == "HomeNet");
  CHECK(l.occs.occ[5].text == "Gare");
}

TEST_CASE("a data frame to the AP hands its LLC/SNAP EtherType on; a protected one is opaque") {
  const Bytes snap = {0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00};
  const Bytes hdr = cat({{0x88, 0x01, 0, 0}, kAp, kSta, kBcast, {0, 0}, {0, 0}});
  Located l = walk(wlan::kDltIeee80211, cat({hdr, snap, Bytes(20, 0x45)}));
  CHECK(l.r.status == DecodeStatus::Ok);
  CHECK(l.r.ethertype == 0x0800);
  CHECK(l.r.off == 14 + hdr.size() + 8);
  REQUIRE(l.occs.n == 3);
  CHECK(name_of(l.occs.occ[0].field) == "wlan.bssid");
  CHECK(name_of(l.occs.occ[1].field) == "wlan.src");
  CHECK(name_of(l.occs.occ[2].field) == "wlan.dst");
  Bytes prot = cat({hdr, Bytes(30, 0x77)});
  prot[1] |= 0x40;
  l = walk(wlan::kDltIeee80211, prot);
  CHECK(l.r.status == DecodeStatus::NotIp);
  CHECK(l.r.body == LinkBody::Opaque);
  CHECK(l.r.off == 14 + hdr.size());
}

TEST_CASE("a frame cut inside its addresses or an element ends the walk before them") {
  const Bytes b = beacon();
  Located l = walk(wlan::kDltIeee80211, Bytes(b.begin(), b.begin() + 13));
  CHECK(l.r.status == DecodeStatus::Truncated);
  CHECK(l.r.good_until == 14 + 10);  // after the first address
  CHECK(l.occs.n == 1);
  l = walk(wlan::kDltIeee80211, Bytes(b.begin(), b.end() - 3));
  CHECK(l.r.status == DecodeStatus::Truncated);
  CHECK(l.r.good_until < 14 + b.size() - 3);
}
