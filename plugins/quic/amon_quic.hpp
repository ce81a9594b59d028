// QUIC Initial packets: the client's ClientHello (SNI) read and rewritten
// under the Initial keys anyone can derive from the Destination Connection ID
// (RFC 9001 5.2, RFC 9369 3.3). No allocation per packet, no exceptions;
// every length checked. See README.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "amon_names.hpp"
#include "amon_tls.hpp"

namespace amon {
struct ProtocolPlugin;
}

namespace amon::quic {

inline constexpr uint32_t kVersion1 = 0x00000001;
inline constexpr uint32_t kVersion2 = 0x6b3343cf;

// What one datagram holds for a consumer that protects client names.
enum class Status : uint8_t {
  None,        // no client name can be in it: pass untouched
  Located,     // a ClientHello's server names located (n_names may be 0)
  Incomplete,  // names may be in it but cannot be located here (the hello continues elsewhere)
  Malformed,   // not understood (unknown version, decryption failure, bad framing)
};

enum class Error : uint8_t {
  None,
  Version,     // long header of a version without known Initial keys
  Header,      // long header fields overrun the datagram
  Decrypt,     // an Initial the client keys do not open, not known to come from the server
  Frame,       // frame not allowed in Initial packets, or overrunning
  Overlap,     // CRYPTO frames disagree on the same bytes
  Hello,       // the CRYPTO stream is not a valid ClientHello
  Capacity,    // a fixed table is full, or CRYPTO data past kMaxStream
  NotLocated,  // names may be in this datagram but where is unknown
};

struct VersionInfo {
  uint32_t version;
  const uint8_t* salt;  // 20 bytes
  const char* key_label;
  const char* iv_label;
  const char* hp_label;
  bool v2_types;  // RFC 9369 long packet type numbering
};
// nullptr: no known Initial keys for this version.
const VersionInfo* version_info(uint32_t version);

struct Keys {
  uint8_t key[16], iv[12], hp[16];
};

// Per-worker OpenSSL contexts (HKDF, AES-128-GCM, AES-128-ECB), reused for
// every packet, and a small cache of derived keys. Not thread-safe.
class Crypto {
 public:
  Crypto();
  ~Crypto();
  Crypto(const Crypto&) = delete;
  Crypto& operator=(const Crypto&) = delete;

  // Client (or server) Initial secret -> packet keys (RFC 9001 5.1-5.2).
  bool initial_keys(const VersionInfo& v, const uint8_t* dcid, size_t dcid_len, bool server, Keys& out);
  // As initial_keys(server = false), through the cache.
  const Keys* client_keys(const VersionInfo& v, const uint8_t* dcid, size_t dcid_len);
  // The secret alone (test vectors).
  bool initial_secret(const VersionInfo& v, const uint8_t* dcid, size_t dcid_len, bool server, uint8_t out[32]);
  // Header-protection mask: AES-128-ECB of the 16-byte sample (RFC 9001 5.4.3).
  bool hp_mask(const uint8_t hp[16], const uint8_t* sample, uint8_t mask[5]);
  // AES-128-GCM with nonce iv ^ pn. open: ct_len includes the 16-byte tag,
  // writes ct_len - 16 bytes to pt (may equal ct). seal: writes pt_len + 16.
  bool open(const Keys& k, uint64_t pn, const uint8_t* aad, size_t aad_len, const uint8_t* ct, size_t ct_len,
            uint8_t* pt);
  bool seal(const Keys& k, uint64_t pn, const uint8_t* aad, size_t aad_len, const uint8_t* pt, size_t pt_len,
            uint8_t* ct);

  // The original DCID of a flow's client Initials: after the server's first
  // Initial, the client addresses it by the server's connection ID but keeps
  // the keys of its first DCID (RFC 9001 5.2).
  void remember_dcid(uint64_t flow_key, uint32_t version, const uint8_t* dcid, uint8_t len);
  bool recall_dcid(uint64_t flow_key, uint32_t version, uint8_t* dcid, uint8_t& len) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

// Per-flow progress through a ClientHello spread over several datagrams.
// The caller keeps it per flow (8 bytes) and passes it to every analyze().
struct FlowState {
  uint8_t mode = 0;    // 0 nothing known; 1 walk resumes at a (message ends at end, 0: a is a message start);
                       // 2 the server_name body [a, b) was handled, the message ends at end
  uint8_t client = 0;  // 0 unknown, else 1 + direction of the client's Initials
  uint16_t a = 0, b = 0, end = 0;
};

struct Packet {
  uint32_t off, len;     // in the datagram, header to tag
  uint32_t version;
  uint8_t type;          // v1 numbering: 0 Initial, 1 0-RTT, 2 Handshake, 3 Retry
  uint8_t pn_len;
  bool decrypted;        // client Initial opened; plaintext in Datagram::plain
  uint32_t pn_off;
  uint32_t pay_off, pay_len;  // plaintext frames (after the packet number, before the tag)
  uint64_t pn;
  Keys keys;
};

struct CryptoFrag {
  uint32_t stream, pos, len;  // CRYPTO offset, position in the datagram (plaintext), length
  uint8_t pkt;
};

struct Name {
  uint32_t stream;  // HostName bytes in CRYPTO stream coordinates
  uint16_t len;
  uint16_t text_off, text_len;
  uint8_t name_type;
};

struct Datagram {
  static constexpr unsigned kMaxPackets = 8, kMaxFrags = 128, kMaxNames = 8, kMaxStream = 16384,
                            kMaxDatagram = 65535;
  Status status;
  Error error;
  unsigned n_pkt;
  Packet pkt[kMaxPackets];
  unsigned n_frag;
  CryptoFrag frag[kMaxFrags];
  unsigned n_names;
  Name names[kMaxNames];
  uint32_t text_len;
  char text[kMaxNames * 256];
  unsigned n_cover;
  struct Range { uint32_t a, b; } cover[kMaxFrags];  // merged CRYPTO ranges present in this datagram
  uint8_t plain[kMaxDatagram + 64];   // the datagram with Initial headers unprotected and payloads opened
  uint8_t stream[kMaxStream];         // CRYPTO data placed by offset
  uint8_t scratch[kMaxDatagram + 64]; // a consumer's rewritten plaintext
  tls::ClientHello hello;

  std::string_view name_text(unsigned i) const { return {text + names[i].text_off, names[i].text_len}; }
};

// Parses a UDP payload: coalesced long-header packets; opens the client
// Initials, walks their frames, places CRYPTO data by offset and locates
// the ClientHello's server names, continuing `st` across datagrams.
// dir: 0/1, the datagram's direction in its flow; flow_key: identifies the
// flow and direction for the DCID memory (0: none).
Status analyze(const uint8_t* dgram, size_t len, int dir, uint64_t flow_key, Crypto& c, FlowState& st, Datagram& d);

// Writes the decided names into `dgram` (a copy of the analysed datagram):
// same length, re-encrypted under the same key and nonce with a new tag, the
// header protection re-applied with the new sample. dec[i] for names[i].
// Returns false (dgram unchanged) when the datagram was not Located.
bool rewrite(uint8_t* dgram, size_t len, Datagram& d, const names::Decision* dec, Crypto& c);

// QUIC as a protocol plugin (plugin.cpp): what register_builtin_plugins()
// adds with Registry::add_protocol.
const ProtocolPlugin& protocol_plugin();

}  // namespace amon::quic
