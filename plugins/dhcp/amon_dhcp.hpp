// DHCPv4 (RFC 2131/2132, BOOTP RFC 951) and DHCPv6 (RFC 8415) parser that
// locates the values naming a client, and the length-preserving rewriters
// for them. Byte spans only: no allocation, no exceptions, every read
// bounds-checked. See README.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "amon_names.hpp"

namespace amon {
class KeyedHash;
class Registry;
struct ProtocolPlugin;
}  // namespace amon

namespace amon::dhcp {

enum class Status : uint8_t { Ok, Truncated, Malformed };

enum class Error : uint8_t {
  None,
  Short,          // shorter than the fixed header (Truncated)
  BadHeader,      // op not 1/2, hlen > 16, magic cookie wrong
  OptionPastEnd,  // an option's length byte or value runs past its area
  SubOption,      // relay-agent sub-option, vendor-class item or IA field past its option
  BadName,        // FQDN: label > 63, compression, name > 255, bytes after the root label
  Repeated,       // an option that cannot be split (RFC 3396) appears twice
  Overload,       // option 52 with a value other than 1..3, or itself inside sname/file
  Depth,          // relay / encapsulation nesting deeper than kMaxDepth
  Capacity,       // a fixed-capacity table of Result is full
};
const char* error_name(Error e);

enum class Version : uint8_t { None, V4, V6 };

// Which DHCP a UDP datagram carries: V4 when either port is 67 or 68, V6
// when either is 546 or 547 (clients, servers and relays all use these).
Version version_for_ports(uint16_t sport, uint16_t dport);

// Content probe for DHCPv4 on other ports (test beds, containers, relays
// configured off-standard): a BOOTP op, a plausible hardware address length
// and RFC 1048's magic cookie at offset 236. V4 or None; DHCPv6 has no
// signature strong enough to probe for.
Version probe(const uint8_t* buf, size_t len);

// What an occurrence means for a policy; one registry field each (fields.cpp).
enum class Field : uint8_t {
  Hostname,     // dhcp.hostname: v4 option 12, v4 option 81 and v6 option 39 names
  ClientId,     // dhcp.client_id: v4 option 61, 97 (machine UUID), TR-111 serial numbers (125); v6 option 1
                //   (client DUID), TR-124 serial number (17)
  Chaddr,       // dhcp.chaddr: BOOTP chaddr, v6 option 79 (client link-layer address)
  Addr,         // dhcp.addr: ciaddr, yiaddr, option 50, v6 IAADDR, IAPREFIX, relay peer-address
  VendorClass,  // dhcp.vendor_class: v4 option 60, 124 items, TR-111 product classes; v6 option 16 items,
                //   TR-124 product class
  RelayId,      // dhcp.relay_id: option 82 circuit/remote/subscriber ids, v6 options 18, 37, 38
  ServerId,     // dhcp.server_id: v6 option 2 (server DUID)
};
const char* field_name(Field f);  // "dhcp.hostname", ...
inline constexpr unsigned kNumFields = 7;

// How the bytes of an occurrence are encoded; picks the rewriter.
enum class Kind : uint8_t {
  Mac,       // 6 bytes
  Addr4,     // 4 bytes
  Addr6,     // 16 bytes
  Prefix6,   // 16 bytes, only the first `prefix_len` bits meaningful (IA_PD)
  NameText,  // host name as text (option 12, option 81 without the E flag)
  NameWire,  // DNS wire labels (option 81 with E, v6 option 39), no compression
  Bytes,     // opaque identifier; the first `tag_len` bytes are its type, not the identifier
  Text,      // printable text (vendor class)
};

struct Span { uint16_t off = 0, len = 0; };

struct Occurrence {
  Field field;
  Kind kind;
  uint8_t depth;        // relay / encapsulation nesting (0: the outer message)
  uint8_t tag_len;      // Bytes: leading type bytes kept by hash_identifier
  uint8_t prefix_len;   // Prefix6
  uint8_t area;         // v4: 0 options, 1 file, 2 sname (overload), 3 fixed header
  uint16_t option;      // option code it came from (0: fixed header of the message)
  uint16_t off, len;    // value bytes within the buffer given to parse()
  uint16_t mac_off;     // Bytes holding an Ethernet MAC (client id type 1, DUID-LL/LLT): its offset, else 0
  uint16_t first_label, n_labels;  // NameWire: into Result::labels
  uint16_t text_off, text_len;     // names: lowercased dotted text in Result::text (no trailing dot)
};

// An address of the network rather than of the message's client: the
// server's and relays' own addresses and those a server hands out for
// routers and services. No field of its own: it takes the rule of the role
// the address has under the policy (plugin.cpp, ProtoOcc::role).
struct RoleAddr {
  uint16_t off;
  uint8_t len;      // 4 or 16
  uint16_t option;  // option code (0: the fixed header or a relay header)
};

struct Result {
  static constexpr unsigned kMaxOcc = 256, kMaxLabels = 512, kMaxText = 4096, kMaxDepth = 16, kMaxRole = 256;
  Status status;
  Error error;
  uint16_t error_off;    // where parsing stopped
  Version version;
  uint8_t msg_type;      // v4: option 53 (0 if absent, BOOTP); v6: outer msg-type
  uint8_t overload;      // v4 option 52 value (1 file, 2 sname, 3 both)
  bool bootp;            // v4 without the magic cookie (no options)
  bool missing_end;      // a v4 option area ended without an End option (accepted: areas are bounded)
  uint16_t n_occ, n_labels, text_len, n_role;
  Occurrence occ[kMaxOcc];
  // siaddr, giaddr; v4 options 3 (routers), 4-11, 41, 42, 44, 45, 48, 49,
  // 65, 68-76, 150 (address lists; a list that is no whole number of
  // addresses is Malformed, but for option 150, which Cisco phones are
  // also given as text), 16, 28, 32, 54 (server identifier);
  // v6 relay link-address, options 12 (server unicast), 22, 23, 27, 28, 31
  // (address lists).
  RoleAddr role[kMaxRole];
  Span labels[kMaxLabels];  // label content bytes (the length byte is at off-1)
  char text[kMaxText];

  std::string_view name_text(const Occurrence& o) const { return {text + o.text_off, o.text_len}; }
};

// Parses one UDP payload as DHCPv4 or DHCPv6. `out` is fully rewritten
// (caller-owned, ~12 KiB; reuse one per worker). A Truncated or Malformed
// result still lists the occurrences found before the problem, but a caller
// protecting any DHCP field must not trust them: fail closed.
Status parse(const uint8_t* buf, size_t len, Version v, Result& out);

// ---- Rewriters: every one keeps every length and every structure byte, so
// the message re-parses to the same occurrences (tests and fuzz target check).

// Masks a name occurrence (NameText or NameWire) label by label with the
// names:: rules: the same seed gives the same mask as the name in DNS, SNI
// and HTTP Host. Other kinds: no-op.
void rewrite_name(uint8_t* buf, const Result& r, const Occurrence& o, const names::Decision& d);

// Replaces an opaque identifier (Bytes, Text) by keyed-hash bytes of the
// same length: equal identifiers stay equal (a client's lease history stays
// joinable), nothing of the original is kept but its type tag (`tag_len`
// leading bytes, e.g. the DUID type), so tshark still decodes the structure.
// Bytes get binary pseudorandom bytes, Text gets letters and digits.
void hash_identifier(KeyedHash& h, uint8_t* buf, const Occurrence& o);

// After an address action rewrote a Prefix6, clears the bits past its
// prefix length (a delegated prefix stays a well-formed prefix).
void fix_prefix(uint8_t* buf, const Occurrence& o);

// Registry declarations of the DHCP fields (names, types, roles, value
// classes, docs); called through the plugin descriptor when it is added.
void register_fields(Registry& r);

// DHCP as a protocol plugin (plugin.cpp): what register_builtin_plugins()
// adds with Registry::add_protocol.
const ProtocolPlugin& protocol_plugin();

}  // namespace amon::dhcp
