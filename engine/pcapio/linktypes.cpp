// Link types other than Ethernet as the packet path reads them: a stand-in
// Ethernet header, and back (linktypes.h).
#include "linktypes.h"

#include <pcap/pcap.h>

#include <algorithm>
#include <cstring>

namespace amon::pcapio {

namespace {

constexpr uint16_t kEtIpv4 = 0x0800, kEtIpv6 = 0x86dd, kEtPpp = 0x880b;
constexpr uint32_t kEthLen = kStandInLen;

uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }


uint16_t ethertype_of_version(const uint8_t* p, uint32_t cap) {
  if (cap == 0) return 0;
  return (p[0] >> 4) == 4 ? kEtIpv4 : (p[0] >> 4) == 6 ? kEtIpv6 : 0;
}

uint16_t ethertype_of_ppp(uint16_t proto) {
  return proto == 0x0021 ? kEtIpv4 : proto == 0x0057 ? kEtIpv6 : kEtPpp;
}

}  // namespace

uint32_t link_to_ethernet(int dlt, const uint8_t* p, uint32_t cap, uint8_t* eth, LinkHeader& lh) {
  std::memset(eth, 0, kEthLen);
  std::memset(&lh, 0, sizeof lh);
  uint16_t et = 0;
  uint32_t hl = 0;
  auto keep = [&](const uint8_t* from, uint32_t n) {
    std::memcpy(lh.bytes + lh.len, from, n);
    lh.len = uint8_t(lh.len + n);
  };
  switch (dlt) {
    case DLT_LINUX_SLL:  // pkttype(2) hatype(2) addrlen(2) addr(8) protocol(2)
      hl = 16;
      if (cap < hl) break;
      keep(p, 6);
      keep(p + 14, 2);
      std::memcpy(eth + 6, p + 6, 6);
      et = rd16(p + 14);
      break;
    case DLT_LINUX_SLL2:  // protocol(2) reserved(2) ifindex(4) hatype(2) pkttype(1) addrlen(1) addr(8)
      hl = 20;
      if (cap < hl) break;
      keep(p, 12);
      std::memcpy(eth + 6, p + 12, 6);
      et = rd16(p);
      break;
    case DLT_RAW:
      et = ethertype_of_version(p, cap);
      break;
    case DLT_IPV4:
      et = kEtIpv4;
      break;
    case DLT_IPV6:
      et = kEtIpv6;
      break;
    case DLT_NULL:
    case DLT_LOOP: {  // address family: host byte order of the capturing machine (NULL), or big-endian (LOOP)
      hl = 4;
      if (cap < hl) break;
      keep(p, 4);
      uint32_t le = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
      uint32_t be = uint32_t(p[3]) | uint32_t(p[2]) << 8 | uint32_t(p[1]) << 16 | uint32_t(p[0]) << 24;
      uint32_t af = dlt == DLT_LOOP ? be : (le <= 0xffff ? le : be);
      // AF_INET is 2 everywhere; AF_INET6 is 10 (Linux), 24 (NetBSD, OpenBSD), 28 (FreeBSD), 30 (macOS).
      et = af == 2 ? kEtIpv4 : (af == 10 || af == 24 || af == 28 || af == 30) ? kEtIpv6 : 0;
      break;
    }
    case DLT_PPP:
    case DLT_PPP_SERIAL: {  // [ff 03] protocol (1 byte when compressed, else 2)
      uint32_t o = cap >= 2 && p[0] == 0xff && p[1] == 0x03 ? 2 : 0;
      if (o < cap && (p[o] & 1)) hl = o + 1, et = cap >= hl ? ethertype_of_ppp(p[o]) : 0;
      else hl = o + 2, et = cap >= hl ? ethertype_of_ppp(rd16(p + o)) : 0;
      if (cap < hl) break;
      keep(p, hl);
      break;
    }
    case DLT_C_HDLC:  // address(1) control(1) EtherType(2)
      hl = 4;
      if (cap < hl) break;
      keep(p, 4);
      et = rd16(p + 2);
      break;
    default:
      break;
  }
  if (cap < hl) {
    // A record cut inside its link header: nothing above it to decode. Its
    // bytes go back out, less any link-layer address in them.
    hl = cap;
    lh.len = 0;
    if (dlt != DLT_LINUX_SLL && dlt != DLT_LINUX_SLL2) {
      keep(p, cap);
    } else {
      // The bytes before the address (SLL: type, hardware type, length;
      // SLL2: protocol, interface, hardware type, type, length) stay.
      const uint32_t before = dlt == DLT_LINUX_SLL ? 6 : 12;
      std::memset(lh.bytes, 0, sizeof lh.bytes);
      std::memcpy(lh.bytes, p, std::min(cap, before));
      lh.len = uint8_t(std::min<uint32_t>(cap, sizeof lh.bytes));
    }
    lh.len |= kLinkRaw;
    et = 0;
  }
  eth[12] = uint8_t(et >> 8);
  eth[13] = uint8_t(et);
  return hl;
}

uint32_t ethernet_to_link(int dlt, const uint8_t* eth, const LinkHeader& lh, uint8_t* out) {
  auto put_addr = [&](uint8_t* dst, uint8_t addrlen) {
    // The address as the policy left it in eth.src; bytes beyond six (rare
    // hardware types) are not carried and leave as zeros, never in clear.
    std::memset(dst, 0, 8);
    std::memcpy(dst, eth + 6, std::min<uint8_t>(addrlen, 6));
  };
  if (lh.len & kLinkRaw) {
    const uint32_t n = lh.len & ~kLinkRaw;
    std::memcpy(out, lh.bytes, n);
    return n;
  }
  if (dlt == DLT_LINUX_SLL && lh.len == 8) {
    std::memcpy(out, lh.bytes, 6);
    put_addr(out + 6, lh.bytes[5]);
    std::memcpy(out + 14, lh.bytes + 6, 2);
    return 16;
  }
  if (dlt == DLT_LINUX_SLL2 && lh.len == 12) {
    std::memcpy(out, lh.bytes, 12);
    put_addr(out + 12, lh.bytes[11]);
    return 20;
  }
  std::memcpy(out, lh.bytes, lh.len);
  return lh.len;
}

}  // namespace amon::pcapio
