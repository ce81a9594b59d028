// DNS message parser and length-preserving name rewriter over byte spans.
// No allocation, no exceptions; every read is bounds-checked. See README.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "amon_names.hpp"

namespace amon {
struct ProtocolPlugin;
}

namespace amon::dns {

enum class Status : uint8_t { Ok, Truncated, Malformed };

enum class Error : uint8_t {
  None,
  TooLong,           // message > 65535 bytes
  ShortHeader,       // < 12 bytes
  CountsTooLarge,    // section counts cannot fit in the message
  PastEnd,           // data ended inside a name/RR (Truncated)
  LabelType,         // 0x40/0x80 label types (extended/binary labels)
  NameTooLong,       // > 255 octets
  BadPointer,        // loop, forward, out of bounds, or not at a known label
  RdataLength,       // rdata overrun, or a name-bearing rdata of the wrong size
  BadOpt,            // second OPT, OPT owner not root, option overrun, bad ECS, second Owner option
  Capacity,          // a fixed-capacity table of ParseResult is full
  Nbns,              // NBNS: a record of a type or layout RFC 1002 does not give it
};

enum class Section : uint8_t { Question, Answer, Authority, Additional };

enum class NameRole : uint8_t {
  Qname,
  AnswerOwner,
  AuthorityOwner,
  AdditionalOwner,
  Cname,
  Ns,
  Ptr,
  Mx,
  Srv,
  SoaMname,
  SoaRname,
  Dname,
  RdataOther,  // names inside other rdata: RP, AFSDB, RT, KX, MINFO, MB/MD/MF/MG/MR, NAPTR, RRSIG signer, NSEC next
  // A name inside an EDNS option: CHAIN's closest trust point (RFC 7901),
  // Report-Channel's agent domain (RFC 9567). The query's business, so
  // dns.qname's rule.
  EdnsName,
};
const char* role_name(NameRole r);

struct Header {
  uint16_t id, flags, qdcount, ancount, nscount, arcount;
  bool qr() const { return flags & 0x8000; }
  uint8_t opcode() const { return (flags >> 11) & 0xf; }
  uint8_t rcode() const { return flags & 0xf; }
};

// Label content bytes (the length byte sits at off-1). Unique per message:
// a label reached through several compression pointers appears once.
struct LabelSpan { uint16_t off; uint8_t len; };

struct NameRef {
  NameRole role;
  Section section;
  uint16_t rr_type;      // qtype for questions, RR type otherwise
  uint16_t rr_index;     // index into ParseResult::rrs (questions: 0xffff)
  uint16_t off;          // where the name starts (linear encoding)
  uint16_t wire_len;     // linear bytes it occupies there (up to pointer or root)
  uint16_t first_ref;    // label_refs[first_ref .. first_ref+n_labels) -> labels[]
  uint8_t n_labels;      // left to right; 0 for the root
  bool compressed;
  uint16_t text_off, text_len;  // lowercased presentation form in ParseResult::text, no trailing dot; root = ""
};

struct RR {
  Section section;
  uint16_t type, klass;
  uint16_t owner;        // index into names[]
  uint16_t rdata_off, rdata_len;
};

struct AddrRef {
  Section section;
  uint8_t family;        // 4 or 6
  uint16_t rr_index;
  uint16_t off;          // 4 or 16 address bytes at off
};

struct Ecs {
  bool present;
  uint16_t opt_off;      // start of the option (its OPTION-CODE)
  uint16_t opt_len;      // 4 + OPTION-LENGTH
  uint16_t family;       // 1 = IPv4, 2 = IPv6
  uint8_t source_prefix, scope_prefix;
  uint16_t addr_off, addr_len;   // ceil(source_prefix/8) address bytes
  uint16_t opt_rr_rdlen_off;     // OPT RR's RDLENGTH field (for strip)
};

// EDNS0 Owner option (code 4, draft-cheshire-edns0-owner-option), sent by
// mDNS sleep proxy clients: version, sequence, the device's primary MAC, then
// optionally a wake-up MAC and a 4- or 6-byte wake-up password. Lengths
// other than 8/14/18/20 are kept as "unknown layout" (n_macs 0): the caller
// treats every data byte as identifying.
struct Owner {
  bool present;
  uint8_t n_macs;        // 0 (unknown layout), 1 or 2
  uint16_t data_off;     // the option data (after OPTION-CODE and OPTION-LENGTH)
  uint16_t data_len;
  uint16_t mac_off[2];   // 6 bytes each
  uint16_t pw_off, pw_len;  // wake-up password, 0 bytes if none
};

struct ParseResult {
  static constexpr unsigned kMaxNames = 1024, kMaxLabels = 2048, kMaxLabelRefs = 8192,
                            kMaxRRs = 1024, kMaxAddrs = 512, kTextCap = 32768, kMaxTxtMacs = 64,
                            kMaxNbNames = 256, kMaxNbUnits = 8;
  // text[] extends past kTextCap so the parser may store a whole 16-byte
  // vector where a label's text may end anywhere up to kTextCap; text_len
  // never exceeds kTextCap.
  static constexpr unsigned kTextSlack = 16;
  Status status;
  Error error;
  uint16_t error_off;     // where parsing stopped
  uint16_t msg_len;
  uint16_t trailing;      // bytes after the last RR (kept, not interpreted)
  bool overflow;          // a capacity was exceeded (status is Malformed)
  Header hdr;
  uint16_t n_names, n_labels, n_label_refs, n_rrs, n_addrs;
  uint32_t text_len;
  Ecs ecs;
  Owner owner;
  // MACs written as text inside TXT strings (DNS-SD values: waMA=, deviceid=,
  // bluetooth addresses): where each one's 17 characters start
  // (aa:bb:cc:dd:ee:ff or with '-', standing alone between non-hex bytes).
  uint16_t n_txt_macs;
  uint16_t txt_mac[kMaxTxtMacs];
  // NBNS node status answers (NBSTAT, RFC 1002 4.2.18): where each node
  // name's 16 bytes start (15 characters, space-padded, and the type
  // suffix; not encoded), and each answer's unit ID (6 bytes: the adapter's
  // MAC). Empty for DNS.
  uint16_t n_nb_names, n_nb_units;
  uint16_t nb_name[kMaxNbNames];
  uint16_t nb_unit[kMaxNbUnits];
  NameRef names[kMaxNames];
  LabelSpan labels[kMaxLabels];
  uint16_t label_refs[kMaxLabelRefs];
  RR rrs[kMaxRRs];
  AddrRef addrs[kMaxAddrs];
  char text[kTextCap + kTextSlack];

  std::string_view name_text(unsigned i) const { return {text + names[i].text_off, names[i].text_len}; }
  const LabelSpan& name_label(unsigned i, unsigned k) const { return labels[label_refs[names[i].first_ref + k]]; }
};

// Parse one DNS message (a UDP payload, or one TCP message without its
// 2-byte length prefix). Truncated = the data ends inside the structure the
// header announces (e.g. a first IP fragment); counts that cannot fit at all
// are Malformed. Compression pointers must point strictly before the name
// (or run) that uses them and at the start of a label already parsed.
// `nbns`: the message is the NetBIOS name service's (UDP 137, RFC 1002):
// type 33 is NBSTAT, not SRV (its node names and unit ID are located),
// the addresses of NB records are located, and a record of a type or
// layout RFC 1002 does not define is Malformed (its bytes could be an
// address nothing would rewrite).
Status parse(const uint8_t* msg, size_t len, ParseResult& out, bool nbns = false);

// A TCP stream chunk holds length-prefixed messages; several per segment,
// the last possibly partial.
struct TcpMessage { uint32_t off; uint16_t len; };  // off: first byte after the prefix
struct TcpSplit {
  static constexpr unsigned kMax = 256;
  uint16_t n;
  TcpMessage msgs[kMax];
  uint32_t consumed;   // bytes of complete messages (incl. prefixes)
  uint32_t partial_off;  // == consumed when partial
  uint32_t need;       // bytes the partial message needs in total (prefix + body); 0 = unknown (< 2 bytes)
  bool partial;
  bool overflow;
};
// Ok: ends exactly on a boundary. Truncated: a partial message remains
// (consumed/need tell where and how much). Malformed: a length < 12 or
// more than kMax messages (overflow).
Status split_tcp(const uint8_t* data, size_t len, TcpSplit& out);

// ---- rewriting ----
struct NameView {
  unsigned index;      // into ParseResult::names
  NameRole role;
  Section section;
  uint16_t rr_type;
  std::string_view text;
};
using DecideFn = names::Decision (*)(void* ctx, const NameView& name);

// Masks of a message's first name, kept for a later message of the same
// exchange: a response repeats its query's question and, through the
// caller's query memory, the query's decision seed, so its masks are the
// query's. The masks of a name are a function of (seed, labels kept, the
// name's wire bytes) alone (label_seed and mask_label read nothing else), so
// an entry is used only when all three are equal; anything else computes the
// masks as always. Direct-mapped by seed (a fresh random value per exchange):
// an entry lives until another exchange's query lands on its slot.
class FirstNameMasks {
 public:
  static constexpr unsigned kBytes = 59;  // longer first names are not kept
  static constexpr unsigned kSlots = 1024;
  FirstNameMasks();
  ~FirstNameMasks();
  FirstNameMasks(const FirstNameMasks&) = delete;
  FirstNameMasks& operator=(const FirstNameMasks&) = delete;

  struct Entry {
    uint64_t seed;
    uint8_t keep, len;  // len 0: free
    uint8_t orig[kBytes], masked[kBytes];
  };
  static_assert(sizeof(Entry) == 128);
  // What rewrite_names does with it: a query's masks are stored (its seed
  // is new), a response's looked up (its seed is its query's).
  bool reuse = false;
  // The masked bytes for `wire` (len bytes of a linear name), or null.
  const uint8_t* find(uint64_t seed, uint8_t keep, const uint8_t* wire, unsigned len) const;
  Entry* slot(uint64_t seed) { return &slots_[(seed >> 40) % kSlots]; }

 private:
  Entry* slots_;
};

// One decision per label span per message: each name's decision is expanded
// to its labels; a span shared by several names (compression) gets the most
// protective action (Redact > Mask > Keep; MaskLeftOf counts as Mask for the
// labels it masks). Mask seeds are per label, chained from the right
// (names::label_seed) over the ORIGINAL bytes, so two names sharing a suffix
// with the same Decision::seed agree on it by construction; if their seeds
// differ, the first name in message order sets the span's seed.
// Returns the number of label spans rewritten, or -1 if pr.status != Ok.
// msg must be the buffer pr was parsed from (same length).
// sums (optional): the rewritten spans' bytes before ([0]) and after ([1])
// are added to these accumulators as big-endian 16-bit words, a byte at an
// even offset from msg being the high half (fold with csum_fold): an
// incremental checksum update over the changed bytes only (RFC 1624).
// roles: bit (1 << NameRole) set for the roles fn decides; the names of
// other roles are kept without asking fn (a caller with no rule for them).
// first (optional): with first->reuse, the first name's masks are taken from
// it when it holds them for this seed, keep count and bytes; without, they are
// computed and stored in it.
int rewrite_names(uint8_t* msg, size_t len, const ParseResult& pr, DecideFn fn, void* ctx, uint64_t* sums = nullptr,
                  uint32_t roles = ~0u, FirstNameMasks* first = nullptr);

template <class F>
int rewrite_names(uint8_t* msg, size_t len, const ParseResult& pr, F&& f) {
  using FT = std::remove_reference_t<F>;
  return rewrite_names(
      msg, len, pr,
      [](void* c, const NameView& v) -> names::Decision { return (*static_cast<FT*>(c))(v); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

// A reverse-DNS name (RFC 1035 in-addr.arpa, RFC 3596 ip6.arpa) names an
// address: the run of address labels right before the suffix (up to 4
// decimal octets, or up to 32 hex nibbles), read into addr (missing low
// bytes zero) and family 4/6. Labels left of the run (RFC 2317 classless
// names, service prefixes) are not part of it. Returns the number of address
// labels (0: not a reverse name). `text` is the lowercased presentation form
// (ParseResult::name_text).
unsigned reverse_address(std::string_view text, uint8_t& family, uint8_t addr[16]);

// ECS: zero the address bytes, keeping every length. The prefix lengths stay:
// RFC 7871 ties the address length to SOURCE PREFIX-LENGTH, so zeroing the
// prefix too would make the message invalid (use ecs_strip to drop it).
// Returns false if there is no ECS option.
bool ecs_zero(uint8_t* msg, size_t len, const ParseResult& pr);
// Remove the ECS option, shrinking the OPT RR and the message (UDP only: the
// caller fixes IP/UDP lengths). Refused (returns 0) when any parsed label lies
// after the option, since pointers to it would move. Returns the new length.
size_t ecs_strip(uint8_t* msg, size_t len, const ParseResult& pr);

// DNS as protocol plugins (plugin.cpp): over UDP ("dns", the runtime's
// datagram shortcut), over TCP ("dns-tcp", carrying dns's fields), and the
// NetBIOS name service ("nbns", UDP 137, carrying dns's fields).
const ProtocolPlugin& protocol_plugin();
const ProtocolPlugin& tcp_protocol_plugin();
const ProtocolPlugin& nbns_protocol_plugin();

}  // namespace amon::dns
