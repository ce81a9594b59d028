#include "amon_dhcp.hpp"

#include <cstring>

#include "keyed_hash.h"
#include "bytes.h"

namespace amon::dhcp {

const char* error_name(Error e) {
  switch (e) {
    case Error::None: return "none";
    case Error::Short: return "short";
    case Error::BadHeader: return "bad header";
    case Error::OptionPastEnd: return "option past end";
    case Error::SubOption: return "sub-option";
    case Error::BadName: return "bad name";
    case Error::Repeated: return "repeated option";
    case Error::Overload: return "overload";
    case Error::Depth: return "depth";
    case Error::Capacity: return "capacity";
  }
  return "?";
}

const char* field_name(Field f) {
  switch (f) {
    case Field::Hostname: return "dhcp.hostname";
    case Field::ClientId: return "dhcp.client_id";
    case Field::Chaddr: return "dhcp.chaddr";
    case Field::Addr: return "dhcp.addr";
    case Field::VendorClass: return "dhcp.vendor_class";
    case Field::RelayId: return "dhcp.relay_id";
    case Field::ServerId: return "dhcp.server_id";
  }
  return "?";
}

Version version_for_ports(uint16_t sport, uint16_t dport) {
  auto v4 = [](uint16_t p) { return p == 67 || p == 68; };
  auto v6 = [](uint16_t p) { return p == 546 || p == 547; };
  // Either port: servers answer DHCPINFORM and leasequery requestors on the
  // port they came from, and ports below 1024 are never ephemeral, so a
  // datagram to or from 67/68 or 546/547 is DHCP or fails closed as such.
  if (v4(sport) || v4(dport)) return Version::V4;
  if (v6(sport) || v6(dport)) return Version::V6;
  return Version::None;
}

namespace {
constexpr uint8_t kCookie[4] = {99, 130, 83, 99};
constexpr uint32_t kFixed = 236;  // BOOTP header without the magic cookie
}  // namespace

Version probe(const uint8_t* buf, size_t len) {
  if (len < kFixed + 4 || (buf[0] != 1 && buf[0] != 2) || buf[2] > 16) return Version::None;
  return std::memcmp(buf + kFixed, kCookie, 4) == 0 ? Version::V4 : Version::None;
}

namespace {

inline char lower(char c) { return c >= 'A' && c <= 'Z' ? char(c + 32) : c; }

// One parse: the buffer, the result being filled, and the first error.
struct Parser {
  const uint8_t* b;
  uint32_t len;
  Result& r;

  bool fail(Status s, Error e, uint32_t at) {
    if (r.status == Status::Ok) {
      r.status = s;
      r.error = e;
      r.error_off = uint16_t(at > 0xffff ? 0xffff : at);
    }
    return false;
  }

  // n addresses of `size` bytes each at off (a list option must hold a
  // whole number of them: anything else cannot be located, fail closed).
  bool role(uint32_t off, uint32_t n, uint32_t size, uint16_t option) {
    if (n % size) return fail(Status::Malformed, Error::SubOption, off);
    for (uint32_t p = off; p < off + n; p += size) {
      if (r.n_role >= Result::kMaxRole) return fail(Status::Malformed, Error::Capacity, p);
      r.role[r.n_role++] = {uint16_t(p), uint8_t(size), option};
    }
    return true;
  }

  Occurrence* add(Field f, Kind k, uint32_t off, uint32_t n, uint16_t option, uint8_t depth, uint8_t area) {
    if (r.n_occ >= Result::kMaxOcc) {
      fail(Status::Malformed, Error::Capacity, off);
      return nullptr;
    }
    Occurrence& o = r.occ[r.n_occ++];
    o = {};
    o.field = f;
    o.kind = k;
    o.depth = depth;
    o.area = area;
    o.option = option;
    o.off = uint16_t(off);
    o.len = uint16_t(n);
    return &o;
  }

  bool text_room(uint32_t n) {
    if (r.text_len + n > Result::kMaxText) return fail(Status::Malformed, Error::Capacity, 0);
    return true;
  }

  // Host name carried as text: the text is the bytes lowercased, without a
  // trailing dot (the form the DNS parser gives names, so z-anonymity
  // counts a host's name as one value whichever protocol carried it).
  bool name_text(uint32_t off, uint32_t n, uint16_t option, uint8_t depth, uint8_t area) {
    Occurrence* o = add(Field::Hostname, Kind::NameText, off, n, option, depth, area);
    if (!o) return false;
    uint32_t t = n;
    if (t && b[off + t - 1] == '.') --t;
    if (!text_room(t)) return false;
    o->text_off = r.text_len;
    o->text_len = uint16_t(t);
    for (uint32_t i = 0; i < t; ++i) r.text[r.text_len++] = lower(char(b[off + i]));
    return true;
  }

  // RFC 4702 / 4704 domain name: DNS wire labels without compression, either
  // fully qualified (ends with the root label) or partial (ends with the
  // option). Anything after the root label, a label longer than 63 (which
  // includes 0xc0 compression pointers) or a name over 255 octets is refused.
  bool name_wire(uint32_t off, uint32_t n, uint16_t option, uint8_t depth, uint8_t area) {
    const uint32_t end = off + n;
    if (n > 255) return fail(Status::Malformed, Error::BadName, off);
    Occurrence* o = add(Field::Hostname, Kind::NameWire, off, n, option, depth, area);
    if (!o) return false;
    o->first_label = r.n_labels;
    o->text_off = r.text_len;
    uint32_t p = off;
    while (p < end) {
      const uint8_t l = b[p];
      if (l == 0) {
        if (p + 1 != end) return fail(Status::Malformed, Error::BadName, p);
        break;
      }
      if (l > 63 || p + 1 + l > end) return fail(Status::Malformed, Error::BadName, p);
      if (r.n_labels >= Result::kMaxLabels) return fail(Status::Malformed, Error::Capacity, p);
      if (!text_room(l + 1u)) return false;
      r.labels[r.n_labels++] = {uint16_t(p + 1), l};
      if (o->n_labels++) r.text[r.text_len++] = '.';
      for (uint32_t i = 0; i < l; ++i) r.text[r.text_len++] = lower(char(b[p + 1 + i]));
      p += 1 + l;
    }
    o->text_len = uint16_t(r.text_len - o->text_off);
    return true;
  }

  // DUID (RFC 8415 11): the type, and for link-layer types the hardware
  // type, are structure; the rest identifies. An Ethernet MAC inside
  // (DUID-LLT, DUID-LL) is pointed at so it can take chaddr's mapping.
  bool duid(Field f, uint32_t v, uint32_t l, uint16_t option, uint8_t depth) {
    if (l == 0) return true;
    Occurrence* o = add(f, Kind::Bytes, v, l, option, depth, 0);
    if (!o) return false;
    uint32_t tag = 2;
    if (l >= 2) {
      const uint16_t type = rd16(b + v);
      if (type == 1 || type == 3) tag = 4;
      if (type == 2) tag = 6;
      if (l >= 4 && rd16(b + v + 2) == 1) {
        if (type == 1 && l == 14) o->mac_off = uint16_t(v + 8);
        if (type == 3 && l == 10) o->mac_off = uint16_t(v + 4);
      }
    }
    o->tag_len = uint8_t(tag < l ? tag : l);
    return true;
  }

  // ---- DHCPv4

  // Options in [a, e): pad, end, code-length-value. area: 0 options field,
  // 1 file, 2 sname. Areas are bounded, so an area without End is accepted
  // (noted), but an option that does not fit in its area is not.
  bool options4(uint32_t a, uint32_t e, uint8_t area, uint8_t depth, unsigned& seen81, unsigned& seen52) {
    uint32_t p = a;
    bool ended = false;
    while (p < e) {
      const uint8_t code = b[p];
      if (code == 0) { ++p; continue; }
      if (code == 255) { ended = true; break; }
      if (p + 2 > e) return fail(Status::Malformed, Error::OptionPastEnd, p);
      const uint32_t l = b[p + 1], v = p + 2;
      if (v + l > e) return fail(Status::Malformed, Error::OptionPastEnd, p);
      if (!option4(code, v, l, area, depth, seen81, seen52)) return false;
      p = v + l;
    }
    if (!ended) r.missing_end = true;
    return true;
  }

  bool option4(uint8_t code, uint32_t v, uint32_t l, uint8_t area, uint8_t depth, unsigned& seen81,
               unsigned& seen52) {
    switch (code) {
      case 12:  // host name
        return l == 0 || name_text(v, l, code, depth, area);
      case 50:  // requested IP address
        if (l != 4) return fail(Status::Malformed, Error::SubOption, v);
        return add(Field::Addr, Kind::Addr4, v, 4, code, depth, area) != nullptr;
      case 92:  // associated IP (leasequery, RFC 4388): the queried client's other leases
        if (l == 0 || l % 4) return fail(Status::Malformed, Error::SubOption, v);
        for (uint32_t i = 0; i < l; i += 4)
          if (!add(Field::Addr, Kind::Addr4, v + i, 4, code, depth, area)) return false;
        return true;
      case 52:  // option overload: only meaningful in the options field, once
        if (area != 0 || l != 1 || b[v] < 1 || b[v] > 3) return fail(Status::Malformed, Error::Overload, v);
        if (seen52++) return fail(Status::Malformed, Error::Repeated, v);
        r.overload = b[v];
        return true;
      case 53:
        if (l >= 1 && depth == 0) r.msg_type = b[v];
        return true;
      case 60:  // vendor class identifier
        return l == 0 || add(Field::VendorClass, Kind::Text, v, l, code, depth, area) != nullptr;
      case 61: {  // client identifier: type byte, then the identifier
        if (l == 0) return true;
        Occurrence* o = add(Field::ClientId, Kind::Bytes, v, l, code, depth, area);
        if (!o) return false;
        o->tag_len = 1;
        if (b[v] == 1 && l == 7) o->mac_off = uint16_t(v + 1);
        return true;
      }
      case 3: case 4: case 5: case 6: case 7: case 8: case 9: case 10: case 11:  // routers, servers
      case 41: case 42: case 44: case 45: case 48: case 49: case 65:              // NIS, NTP, NetBIOS, X
      case 68: case 69: case 70: case 71: case 72: case 73: case 74: case 75: case 76:  // mobile IP, mail, web...
      case 150:  // TFTP servers; Cisco's phones also take the address as text (as option 66), left as text
        return l % 4 ? true : role(v, l, 4, code);
      case 16: case 28: case 32: case 54:  // swap server, broadcast, router solicitation, server identifier
        return role(v, l, 4, code);
      case 97: {  // client machine identifier (PXE UUID): type byte, then the UUID
        if (l == 0) return true;
        Occurrence* o = add(Field::ClientId, Kind::Bytes, v, l, code, depth, area);
        if (o) o->tag_len = 1;
        return o != nullptr;
      }
      case 81: {  // client FQDN (RFC 4702): flags, two rcodes, the name
        // RFC 3396 would concatenate a split option 81; a name split across
        // instances cannot be masked label by label, so refuse it.
        if (seen81++) return fail(Status::Malformed, Error::Repeated, v);
        if (l < 3) return fail(Status::Malformed, Error::BadName, v);
        if (l == 3) return true;
        if (b[v] & 0x04) return name_wire(v + 3, l - 3, code, depth, area);
        return name_text(v + 3, l - 3, code, depth, area);
      }
      case 82: {  // relay agent information (RFC 3046): sub-options
        const uint32_t e = v + l;
        for (uint32_t p = v; p < e;) {
          if (p + 2 > e) return fail(Status::Malformed, Error::SubOption, p);
          const uint8_t sc = b[p];
          const uint32_t sl = b[p + 1], sv = p + 2;
          if (sv + sl > e) return fail(Status::Malformed, Error::SubOption, p);
          // 1 circuit ID, 2 remote ID (RFC 3046), 6 subscriber ID (RFC 3993)
          if ((sc == 1 || sc == 2 || sc == 6) && sl > 0 && !add(Field::RelayId, Kind::Bytes, sv, sl, code, depth, area))
            return false;
          p = sv + sl;
        }
        return true;
      }
      case 124: {  // V-I vendor class (RFC 3925): per enterprise, length-prefixed items
        const uint32_t e = v + l;
        for (uint32_t p = v; p < e;) {
          if (p + 5 > e) return fail(Status::Malformed, Error::SubOption, p);
          const uint32_t dl = b[p + 4], de = p + 5 + dl;
          if (de > e) return fail(Status::Malformed, Error::SubOption, p);
          for (uint32_t q = p + 5; q < de;) {
            const uint32_t il = b[q];
            if (q + 1 + il > de) return fail(Status::Malformed, Error::SubOption, q);
            if (il && !add(Field::VendorClass, Kind::Text, q + 1, il, code, depth, area)) return false;
            q += 1 + il;
          }
          p = de;
        }
        return true;
      }
      case 125: {  // V-I vendor-specific information (RFC 3925): per enterprise, sub-options
        const uint32_t e = v + l;
        for (uint32_t p = v; p < e;) {
          if (p + 5 > e) return fail(Status::Malformed, Error::SubOption, p);
          const uint32_t ent = uint32_t(rd16(b + p)) << 16 | rd16(b + p + 2);
          const uint32_t dl = b[p + 4], de = p + 5 + dl;
          if (de > e) return fail(Status::Malformed, Error::SubOption, p);
          // Other enterprises' data is theirs to define: not read, not refused.
          for (uint32_t q = p + 5; ent == 3561 && q < de;) {
            if (q + 2 > de) return fail(Status::Malformed, Error::SubOption, q);
            const uint8_t sc = b[q];
            const uint32_t sl = b[q + 1];
            if (q + 2 + sl > de) return fail(Status::Malformed, Error::SubOption, q);
            // Broadband Forum TR-111 (enterprise 3561): serial numbers (2
            // device, 5 gateway) name one box; product classes (3, 6) are
            // its model. The manufacturer OUIs (1, 4) are left.
            if (sl) {
              if ((sc == 2 || sc == 5) && !add(Field::ClientId, Kind::Text, q + 2, sl, code, depth, area)) return false;
              if ((sc == 3 || sc == 6) && !add(Field::VendorClass, Kind::Text, q + 2, sl, code, depth, area))
                return false;
            }
            q += 2 + sl;
          }
          p = de;
        }
        return true;
      }
      default:
        return true;
    }
  }

  // A DHCPv4 message in [a, a+n). Nested (inside DHCPv6 option 87) a short
  // message is malformed rather than truncated: its length is declared.
  bool message4(uint32_t a, uint32_t n, uint8_t depth) {
    if (n < kFixed) return fail(depth ? Status::Malformed : Status::Truncated, Error::Short, a + n);
    const uint8_t* m = b + a;
    if ((m[0] != 1 && m[0] != 2) || m[2] > 16) return fail(Status::Malformed, Error::BadHeader, a);
    const uint8_t fixed = 3;
    if (!add(Field::Addr, Kind::Addr4, a + 12, 4, 0, depth, fixed)) return false;  // ciaddr
    if (!add(Field::Addr, Kind::Addr4, a + 16, 4, 0, depth, fixed)) return false;  // yiaddr
    if (!role(a + 20, 8, 4, 0)) return false;                                        // siaddr, giaddr
    const uint8_t hlen = m[2];
    if (hlen == 6) {
      if (!add(Field::Chaddr, Kind::Mac, a + 28, 6, 0, depth, fixed)) return false;
    } else if (hlen > 0) {
      if (!add(Field::Chaddr, Kind::Bytes, a + 28, hlen, 0, depth, fixed)) return false;
    }
    if (n == kFixed) {
      if (depth == 0) r.bootp = true;
      return true;
    }
    // RFC 951's vendor area without RFC 1048's cookie is opaque: nothing
    // in it can be located, so it cannot be shown safe.
    if (n < kFixed + 4) return fail(depth ? Status::Malformed : Status::Truncated, Error::Short, a + n);
    if (std::memcmp(m + kFixed, kCookie, 4) != 0) return fail(Status::Malformed, Error::BadHeader, a + kFixed);
    unsigned seen81 = 0, seen52 = 0;
    const uint8_t overload_before = r.overload;
    r.overload = 0;
    if (!options4(a + kFixed + 4, a + n, 0, depth, seen81, seen52)) return false;
    const uint8_t ov = r.overload;
    // RFC 2131 4.1: the options field first, then file, then sname.
    if ((ov & 1) && !options4(a + 108, a + 236, 1, depth, seen81, seen52)) return false;
    if ((ov & 2) && !options4(a + 44, a + 108, 2, depth, seen81, seen52)) return false;
    // sname not overloaded: the server's host name as text, which is a
    // user's device where that device shares its connection (a Mac's
    // Internet Sharing answers with its own name): a host name. Only when
    // the options ended with End: a cut message may not have shown the
    // overload option that makes sname options instead.
    if (!(ov & 2) && m[44] && !r.missing_end) {
      uint32_t l = 0;
      while (l < 64 && m[44 + l]) ++l;
      if (!name_text(a + 44, l, 0, depth, fixed)) return false;
    }
    if (depth) r.overload = overload_before;
    return true;
  }

  // ---- DHCPv6

  bool message6(uint32_t a, uint32_t e, uint8_t depth) {
    if (depth > Result::kMaxDepth) return fail(Status::Malformed, Error::Depth, a);
    const Status short_status = depth ? Status::Malformed : Status::Truncated;
    if (a >= e) return fail(short_status, Error::Short, a);
    const uint8_t type = b[a];
    if (depth == 0) r.msg_type = type;
    if (type == 12 || type == 13) {  // RELAY-FORW / RELAY-REPL
      if (e - a < 34) return fail(short_status, Error::Short, e);
      // peer-address: the client's (or the previous relay's) address on the
      // client's link; link-address is the relay's own and is left alone.
      if (!add(Field::Addr, Kind::Addr6, a + 18, 16, 0, depth, 0)) return false;
      if (!role(a + 2, 16, 16, 0)) return false;
      return options6(a + 34, e, depth);
    }
    if (e - a < 4) return fail(short_status, Error::Short, e);
    return options6(a + 4, e, depth);
  }

  bool options6(uint32_t a, uint32_t e, uint8_t depth) {
    if (depth > Result::kMaxDepth) return fail(Status::Malformed, Error::Depth, a);
    for (uint32_t p = a; p < e;) {
      if (p + 4 > e) return fail(Status::Malformed, Error::OptionPastEnd, p);
      const uint16_t code = rd16(b + p);
      const uint32_t l = rd16(b + p + 2), v = p + 4;
      if (v + l > e) return fail(Status::Malformed, Error::OptionPastEnd, p);
      if (!option6(code, v, l, depth)) return false;
      p = v + l;
    }
    return true;
  }

  bool option6(uint16_t code, uint32_t v, uint32_t l, uint8_t depth) {
    const uint32_t e = v + l;
    auto need = [&](uint32_t n) { return l >= n || fail(Status::Malformed, Error::SubOption, v); };
    switch (code) {
      case 12:  // server unicast
      case 22: case 23: case 27: case 28: case 31:  // SIP, DNS, NIS, NIS+, SNTP servers
        return role(v, l, 16, code);
      case 1: return duid(Field::ClientId, v, l, code, depth);
      case 2: return duid(Field::ServerId, v, l, code, depth);
      case 3:   // IA_NA: IAID, T1, T2, options
      case 25:  // IA_PD: IAID, T1, T2, options
        return need(12) && options6(v + 12, e, uint8_t(depth + 1));
      case 4:  // IA_TA: IAID, options
        return need(4) && options6(v + 4, e, uint8_t(depth + 1));
      case 5:  // IAADDR: address, lifetimes, options
        return need(24) && add(Field::Addr, Kind::Addr6, v, 16, code, depth, 0) &&
               options6(v + 24, e, uint8_t(depth + 1));
      case 26: {  // IAPREFIX: lifetimes, prefix length, prefix, options
        if (!need(25)) return false;
        if (b[v + 8] > 128) return fail(Status::Malformed, Error::SubOption, v + 8);
        Occurrence* o = add(Field::Addr, Kind::Prefix6, v + 9, 16, code, depth, 0);
        if (!o) return false;
        o->prefix_len = b[v + 8];
        return options6(v + 25, e, uint8_t(depth + 1));
      }
      case 9:  // relay message: a whole message, possibly another relay's
        return message6(v, e, uint8_t(depth + 1));
      case 16:  // vendor class: enterprise number, then length-prefixed items
        if (!need(4)) return false;
        for (uint32_t p = v + 4; p < e;) {
          if (p + 2 > e) return fail(Status::Malformed, Error::SubOption, p);
          const uint32_t il = rd16(b + p);
          if (p + 2 + il > e) return fail(Status::Malformed, Error::SubOption, p);
          if (il && !add(Field::VendorClass, Kind::Text, p + 2, il, code, depth, 0)) return false;
          p += 2 + il;
        }
        return true;
      case 17: {  // vendor-specific information: enterprise number, sub-options
        if (!need(4)) return false;
        if (rd16(b + v) != 0 || rd16(b + v + 2) != 3561) return true;  // other enterprises: theirs to define
        for (uint32_t p = v + 4; p < e;) {
          if (p + 4 > e) return fail(Status::Malformed, Error::SubOption, p);
          const uint16_t sc = rd16(b + p);
          const uint32_t sl = rd16(b + p + 2);
          if (p + 4 + sl > e) return fail(Status::Malformed, Error::SubOption, p);
          // Broadband Forum (enterprise 3561, TR-124): 12 the device's serial
          // number, 13 its product class; 11 (manufacturer OUI) is left.
          if (sl) {
            if (sc == 12 && !add(Field::ClientId, Kind::Text, p + 4, sl, code, depth, 0)) return false;
            if (sc == 13 && !add(Field::VendorClass, Kind::Text, p + 4, sl, code, depth, 0)) return false;
          }
          p += 4 + sl;
        }
        return true;
      }
      case 18:  // interface-id
      case 38:  // subscriber-id (RFC 4580)
        return l == 0 || add(Field::RelayId, Kind::Bytes, v, l, code, depth, 0) != nullptr;
      case 37: {  // remote-id (RFC 4649): enterprise number, then the id
        if (!need(4)) return false;
        if (l == 4) return true;
        Occurrence* o = add(Field::RelayId, Kind::Bytes, v, l, code, depth, 0);
        if (o) o->tag_len = 4;
        return o != nullptr;
      }
      case 39:  // client FQDN (RFC 4704): flags, the name
        if (!need(1)) return false;
        return l == 1 || name_wire(v + 1, l - 1, code, depth, 0);
      case 45:  // client data (leasequery, RFC 5007): options about one client
        return options6(v, e, uint8_t(depth + 1));
      case 79: {  // client link-layer address (RFC 6939): type, address
        if (!need(2)) return false;
        if (l == 2) return true;
        if (rd16(b + v) == 1 && l == 8) return add(Field::Chaddr, Kind::Mac, v + 2, 6, code, depth, 0) != nullptr;
        return add(Field::Chaddr, Kind::Bytes, v + 2, l - 2, code, depth, 0) != nullptr;
      }
      case 87:  // DHCPv4-message (RFC 7341): a whole DHCPv4 message
        if (depth + 1u > Result::kMaxDepth) return fail(Status::Malformed, Error::Depth, v);
        return message4(v, l, uint8_t(depth + 1));
      default:
        return true;
    }
  }
};

}  // namespace

Status parse(const uint8_t* buf, size_t len, Version v, Result& out) {
  out.status = Status::Ok;
  out.error = Error::None;
  out.error_off = 0;
  out.version = v;
  out.msg_type = 0;
  out.overload = 0;
  out.bootp = false;
  out.missing_end = false;
  out.n_occ = out.n_labels = out.text_len = out.n_role = 0;
  Parser p{buf, uint32_t(len), out};
  if (len > 0xffff) {
    p.fail(Status::Malformed, Error::Capacity, 0);
    return out.status;
  }
  if (v == Version::V4) p.message4(0, uint32_t(len), 0);
  else if (v == Version::V6) p.message6(0, uint32_t(len), 0);
  else p.fail(Status::Malformed, Error::BadHeader, 0);
  return out.status;
}

void rewrite_name(uint8_t* buf, const Result& r, const Occurrence& o, const names::Decision& d) {
  if (o.kind == Kind::NameText) {
    names::apply_to_text(reinterpret_cast<char*>(buf + o.off), o.len, d);
  } else if (o.kind == Kind::NameWire) {
    char* labels[128];
    uint8_t lens[128];
    const unsigned n = o.n_labels < 128 ? o.n_labels : 128;  // <= 127 in a 255-octet name
    for (unsigned i = 0; i < n; ++i) {
      const Span& s = r.labels[o.first_label + i];
      labels[i] = reinterpret_cast<char*>(buf + s.off);
      lens[i] = uint8_t(s.len);
    }
    names::apply_to_labels(labels, lens, n, d);
  }
}

void hash_identifier(KeyedHash& h, uint8_t* buf, const Occurrence& o) {
  if (o.tag_len >= o.len) return;
  uint8_t* p = buf + o.off;
  // One hash of the whole value (type tag included: the same bytes under
  // another type are another identifier), expanded in counter mode.
  const uint64_t x = h.hash64({p, o.len});
  if (o.kind == Kind::Text) {
    names::keyed_fill(reinterpret_cast<char*>(p + o.tag_len), o.len - o.tag_len, x);
    return;
  }
  // An embedded Ethernet MAC takes the MAC pseudonym, the same as chaddr and
  // eth.src get from this key, so a lease stays linked to its frames.
  uint8_t mac[6];
  const uint32_t mac_at = o.mac_off ? uint32_t(o.mac_off - o.off) : 0;
  if (o.mac_off) h.anon_mac(p + mac_at, mac);
  uint8_t blk[12];
  std::memcpy(blk, &x, 8);
  for (uint32_t i = o.tag_len, ctr = 0; i < o.len; ++ctr) {
    std::memcpy(blk + 8, &ctr, 4);
    const uint64_t y = h.hash64({blk, sizeof blk});
    for (unsigned k = 0; k < 8 && i < o.len; ++k, ++i) p[i] = uint8_t(y >> (8 * k));
  }
  if (o.mac_off) std::memcpy(p + mac_at, mac, 6);
}

void fix_prefix(uint8_t* buf, const Occurrence& o) {
  if (o.kind != Kind::Prefix6) return;
  uint8_t* a = buf + o.off;
  for (unsigned i = 0; i < 16; ++i) {
    const int keep = int(o.prefix_len) - int(i) * 8;
    if (keep >= 8) continue;
    a[i] = keep <= 0 ? 0 : uint8_t(a[i] & (0xff00 >> keep));
  }
}

}  // namespace amon::dhcp
