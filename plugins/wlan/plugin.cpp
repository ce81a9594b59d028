// 802.11 as a link layer (l2l4.h, LinkLayer): its fields declared, and the
// capture reader's, the decoder's and the runtime's entry points. Without a
// rule a wlan address takes eth.src's rule (else eth.dst's), SSIDs and
// element contents are hidden when the policy protects anything: the
// runtime's link step says so beside its code.
#include "amon_names.hpp"
#include "amon_wlan.hpp"

namespace amon::wlan {

namespace {

FieldId g_ids[kSlots] = {kNoField, kNoField, kNoField, kNoField, kNoField, kNoField, kNoField};

void decode(int dlt, const uint8_t* p, uint32_t cap, uint32_t off, LinkDecode& r) {
  walk(dlt, p, cap, off, r, nullptr, nullptr);
}

void locate(int dlt, const uint8_t* p, uint32_t cap, uint32_t off, LinkOccs& out) {
  LinkDecode r;
  walk(dlt, p, cap, off, r, &out, g_ids);
}

// An SSID is any 0-32 bytes; a decision masks it as a one-label name
// (its dots too: SSIDs are not domain names).
void rewrite_name(uint8_t* p, const ProtoOcc& o, const names::Decision& d) {
  names::Decision flat = d;
  flat.flat = true;
  names::apply_to_text(reinterpret_cast<char*>(p + o.off), o.len, flat);
}

const LinkLayer kLayer = {
    .name = "wlan",
    .dlts = {kDltIeee80211, kDltRadiotap, kDltPpi, 0},
    .normalize = normalize,
    .decode = decode,
    .locate = locate,
    .rewrite_name = rewrite_name,
};

}  // namespace

void register_plugin(Registry& r) {
  // Without a rule none of them is kept (link.cpp in the runtime says what they get).
  auto add = [&](FieldDesc d) {
    d.hidden_without_rule = true;
    return r.add_field(std::move(d));
  };
  auto mac = [&](const std::string& name, const std::string& doc) {
    std::vector<std::string> others;
    for (const char* o : {"wlan.src", "wlan.dst", "wlan.bssid", "wlan.ra", "wlan.ta"})
      if (name != o) others.push_back(o);
    return add({name, ValueType::Mac, "wlan", FieldRole::Identifier, "", doc, others, kNoField, 0,
                /*trailing=*/false, /*header=*/true});
  };
  constexpr const char* kNoRule =
      " No rule: eth.src's rule (else eth.dst's); without either, zeroed when the policy protects anything. "
      "Group addresses (broadcast, multicast) stay as they are";
  const std::string no_rule = kNoRule;
  g_ids[kSrc] = mac("wlan.src", "802.11 source address: the station a frame comes from (SA)." + no_rule);
  g_ids[kDst] = mac("wlan.dst", "802.11 destination address (DA)." + no_rule);
  g_ids[kBssid] = mac("wlan.bssid",
                      "802.11 BSSID: the access point's address in every frame of its network, and the current AP "
                      "of a reassociation request; it locates the network." + no_rule);
  g_ids[kRa] = mac("wlan.ra",
                   "802.11 receiver address of control frames and of frames between access points (WDS, mesh)." +
                       no_rule);
  g_ids[kTa] = mac("wlan.ta",
                   "802.11 transmitter address of control frames and of frames between access points (WDS, mesh)." +
                       no_rule);
  g_ids[kSsid] = add(
      {"wlan.ssid", ValueType::Name, "wlan", FieldRole::QuasiIdentifier, "ssid",
       "802.11 network name (SSID) in beacons, probe requests and responses, (re)association requests and "
       "SSID lists: a station's probe requests name the networks it has joined, the places its owner has been. "
       "Decided as one label (dots masked too). No rule: zeroed (a hidden SSID, length kept) when the policy "
       "protects anything",
       {"wlan.src"}, kNoField, 0, /*trailing=*/false, /*header=*/true});
  g_ids[kIe] = add(
      {"wlan.ie", ValueType::Bytes, "wlan", FieldRole::Identifier, "",
       "contents of 802.11 management elements not known to be free of identifiers (vendor-specific ones carry "
       "WPS device names, models, serial numbers, UUIDs; interworking, mesh IDs, neighbour reports, PMKIDs of "
       "requests, unknown elements) and the bodies of action and authentication frames; lengths kept. No rule: "
       "zeroed when the policy protects anything",
       {"wlan.ssid"}, kNoField, 0, /*trailing=*/false, /*header=*/true});
  set_link_layer(&kLayer);
  // `proto == wlan`: every record read from an 802.11 link type (the
  // decoder marks its frames kFlagLink), the IP packets in its data frames
  // included.
  r.add_proto_name(kLayer.name);
}

}  // namespace amon::wlan
