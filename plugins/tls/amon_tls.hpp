// TLS ClientHello parser (record stream prefix) and SNI rewriter.
// No allocation, no exceptions; every length checked. See README.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "amon_names.hpp"

namespace amon {
struct ProtocolPlugin;
}

namespace amon::tls {

enum class Status : uint8_t { Ok, Truncated, Malformed };

enum class Error : uint8_t {
  None,
  NotHandshake,     // record content type != 22 (or SSLv2 framing)
  RecordVersion,    // record version not 3.0..3.4
  RecordLength,     // 0 or > 2^14
  NotClientHello,   // handshake type != 1
  HelloTooLarge,    // handshake length > kMaxHello
  NeedMore,         // Truncated: see ClientHello::need
  VectorLength,     // a vector overruns its container (or leaves bytes)
  DuplicateExtension,
  SniList,          // malformed server_name list
  Capacity,         // a fixed table is full
};

// Buffer coordinates: off is the physical offset of the first byte in the
// caller's buffer. A field that straddles a record boundary (handshake
// fragmented over several records) has contiguous == false; use the
// rewrite helper, which scatters over the fragments.
struct Span { uint32_t off = 0, len = 0; bool contiguous = true; };

struct Extension { uint16_t type; bool grease; Span body; };

struct ServerName {
  uint8_t name_type;   // 0 = host_name (the only one defined)
  Span span;           // the HostName bytes
  uint16_t text_off, text_len;  // lowercased copy in ClientHello::text
};

struct ClientHello {
  static constexpr unsigned kMaxExt = 64, kMaxSni = 8, kMaxFrags = 64, kTextCap = 4096,
                            kMaxHello = 65536;
  Status status;
  Error error;
  uint32_t need;        // Truncated: total bytes the buffer must hold (a lower
                        // bound when further records are still unannounced)
  uint32_t consumed;    // Ok: bytes of the records that carry the ClientHello
  uint16_t record_version, legacy_version;
  uint16_t max_supported_version;  // highest non-GREASE in supported_versions (0 = absent)
  uint32_t hs_len;      // handshake body length
  uint8_t n_records;
  bool overflow, has_grease, has_ech, has_esni;
  uint8_t ech_type;     // 0 outer, 1 inner (when has_ech)
  Span random, session_id, cipher_suites, compression_methods, extensions;
  Span ech, esni;       // extension bodies
  uint16_t n_ext;
  uint8_t n_sni;
  uint32_t text_len;
  Extension ext[kMaxExt];
  ServerName sni[kMaxSni];
  char text[kTextCap];
  // Record fragments of the handshake message (physical, logical, length),
  // and a contiguous copy used only when there is more than one fragment.
  struct Frag { uint32_t phys, logical, len; };
  uint8_t n_frags;
  Frag frags[kMaxFrags];
  uint8_t scratch[kMaxHello + 4];

  std::string_view sni_text(unsigned i) const { return {text + sni[i].text_off, sni[i].text_len}; }
};

constexpr bool is_grease(uint16_t v) { return (v & 0x0f0f) == 0x0a0a && (v >> 8) == (v & 0xff); }

// Parse the ClientHello at the start of a TLS record stream (client to
// server direction, possibly reassembled across TCP segments).
Status parse_client_hello(const uint8_t* buf, size_t len, ClientHello& out);

// The same for a bare handshake message (no record layer: buf starts at the
// 4-byte handshake header), as QUIC carries it in CRYPTO frames. Spans are
// offsets in buf; record_version and n_records stay 0. Truncated when buf
// ends before the message does (need = 4 + hs_len).
Status parse_client_hello_message(const uint8_t* buf, size_t len, ClientHello& out);

// For a ClientHello that continues in later TCP segments: walks the prefix
// held in one handshake record as far as it goes and reports the SNI
// host_names that lie complete inside it (offsets relative to buf). Returns
// true only when the server_name extension was found whole; false when it
// was not reached, is cut by the buffer's end, or anything is inconsistent.
struct PrefixSni {
  static constexpr unsigned kMax = 4;
  unsigned n = 0;
  Span span[kMax];
  char text[kMax][256];
  uint16_t text_len[kMax];
};
bool find_sni_in_prefix(const uint8_t* buf, size_t len, PrefixSni& out);

// Apply a name decision to SNI host_name i in place (length-preserving).
// Returns false if i is out of range or status != Ok.
bool rewrite_sni(uint8_t* buf, size_t len, const ClientHello& ch, unsigned i, const names::Decision& d);

// The protocol version a ServerHello handshake message (type, 24-bit
// length, body; `len` bytes) selects: supported_versions when present
// (TLS 1.3), else legacy_version. 0 when the message is not a whole,
// well-formed ServerHello.
uint16_t server_hello_version(const uint8_t* msg, size_t len);

// TLS as a protocol plugin (plugin.cpp): what register_builtin_plugins()
// adds with Registry::add_protocol.
const ProtocolPlugin& protocol_plugin();

}  // namespace amon::tls
