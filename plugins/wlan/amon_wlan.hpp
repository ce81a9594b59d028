// 802.11 (Wi-Fi) captures: frames with a radiotap header (link type 127),
// a PPI header (192) or none (105). The capture header is reduced to what a
// monitor needs (rate, channel, signal, flags); the 802.11 header's
// addresses, the SSIDs of management frames and the contents of elements
// that may name a device are located for their rules; an unprotected data
// frame's LLC/SNAP payload is handed on as an EtherType, so the IP packet
// inside is decoded and anonymized as over Ethernet.
#pragma once

#include <cstdint>

#include "l2l4.h"

namespace amon::wlan {

inline constexpr int kDltIeee80211 = 105, kDltRadiotap = 127, kDltPpi = 192;

// The fields' ids, in the order the locator names them (plugin.cpp fills them).
enum Slot : uint8_t { kSrc, kDst, kBssid, kRa, kTa, kSsid, kIe, kSlots };

// The capture header reduced: radiotap keeps flags (the FCS flag cleared),
// rate, channel, antenna signal and noise in dBm, MCS and VHT (its group
// and partial AID zeroed), in one presence word; PPI keeps its 802.11
// common field (the TSF zeroed). The frame check sequence is removed (it
// would no longer match a rewritten frame). A capture header that cannot be
// read gives an empty one and no frame (nothing unread leaves). `out` has
// room for cap + 64 bytes. Returns the bytes written.
uint32_t normalize(int dlt, const uint8_t* in, uint32_t cap, uint32_t wire, uint8_t* out, uint32_t& out_wire);

// The 802.11 frame after the capture header at `off`: what it carries and,
// when `occs` is given, its values (Mac, Name, Bytes occurrences, field ids
// from `ids`).
void walk(int dlt, const uint8_t* p, uint32_t cap, uint32_t off, LinkDecode& r, LinkOccs* occs,
          const FieldId* ids);

// The link layer Registry users see (plugin.cpp): its fields registered,
// the layer set for the decoder and the capture reader.
void register_plugin(Registry& r);

}  // namespace amon::wlan
