// Application-layer fields for the per-consumer programs: protocol
// detection, one parse per packet shared by all consumers, and the rewrite
// of each consumer's copy by offset. DNS still has its parse here; every
// other protocol is a plugin (protocol.h) reached through the registry.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "amon_dns.hpp"
#include "l2l4.h"
#include "protocol.h"

struct hs_database;
typedef struct hs_database hs_database_t;
struct hs_scratch;
typedef struct hs_scratch hs_scratch_t;

namespace amon {

// The applications the runtime parses itself (DNS); values 3 to 5
// belonged to protocols now plugins and stay unused.
enum class App : uint8_t { Unknown = 0, Dns = 1, DnsTcp = 2, Other = 6 };
// Protocol plugins (Registry::protocols(), protocol.h) are applications
// kFirstPluginApp + their index: App values past the enumerators, so a
// policy's 32-bit mask of protected applications covers them.
inline constexpr uint8_t kFirstPluginApp = 8;
inline const ProtocolPlugin* plugin_of(uint8_t app) {
  const auto& v = Registry::instance().protocols();
  return app >= kFirstPluginApp && size_t(app - kFirstPluginApp) < v.size() ? v[app - kFirstPluginApp] : nullptr;
}
// The application of the plugin named `name`, or 0 when none is.
inline uint8_t plugin_app(std::string_view name) {
  const auto& v = Registry::instance().protocols();
  for (size_t i = 0; i < v.size(); ++i)
    if (name == v[i]->name) return uint8_t(kFirstPluginApp + i);
  return 0;
}
// The index of the plugin whose name plugin i's packets go by: its own, or
// the one it carries the fields of (ProtocolPlugin::carries).
inline unsigned plugin_proto(unsigned i) {
  const auto& v = Registry::instance().protocols();
  if (!v[i]->carries) return i;
  for (unsigned k = 0; k < v.size(); ++k)
    if (std::string_view(v[i]->carries) == v[k]->name) return k;
  return i;  // Registry::add_protocol refuses an unregistered `carries`
}
// The applications of the plugins whose fields carry FieldDesc::protocol
// `protocol` (a bit per application), or 0 when no plugin declares it.
inline uint32_t plugin_apps(std::string_view protocol) {
  const auto& v = Registry::instance().protocols();
  uint32_t a = 0;
  for (unsigned i = 0; i < v.size(); ++i)
    if (protocol == v[plugin_proto(i)]->name) a |= 1u << (kFirstPluginApp + i);
  return a;
}

// Registry ids of the application fields, resolved once.
struct L7Fields {
  FieldId dns_qname, dns_answer_name, dns_rdata_name, dns_answer_addr, dns_ecs;
  // By plugin index: its ProtocolPlugin::payload_field (kNoField: none).
  FieldId payload[16];
  static const L7Fields& get();
  // The payload field of application `app` (kNoField: none).
  FieldId payload_of(uint8_t app) const {
    const unsigned i = unsigned(app) - kFirstPluginApp;
    return i < 16 ? payload[i] : kNoField;
  }
  // Fields are registered L2-L4 first: every later one is parsed out of the payload.
  bool is_l7(FieldId f) const { return f >= first && f <= last; }
  FieldId first, last;
};

// Content probes for TCP payloads: one Hyperscan block-mode database of
// anchored patterns (SSH, and those the protocol plugins contribute), built once and shared; each worker scans
// with its own scratch.
class ContentProbes {
 public:
  ContentProbes();
  ~ContentProbes();
  ContentProbes(const ContentProbes&) = delete;
  ContentProbes& operator=(const ContentProbes&) = delete;
  // The application the first bytes of a stream announce, or Unknown.
  App classify(const uint8_t* p, uint32_t n, hs_scratch_t* scratch) const;
  const hs_database_t* db() const { return db_; }

 private:
  hs_database_t* db_ = nullptr;
  std::vector<App> app_;  // by pattern id
};
const ContentProbes& content_probes();

// DNS, mDNS, LLMNR.
inline bool is_dns_port(uint16_t p) { return p == 53 || p == 5353 || p == 5355; }

// Guesses the application protocol of a packet from ports and the first
// payload bytes. `from_client`: the packet travels client -> server.
App detect_app(const uint8_t* p, const Decoded& d, bool from_client, hs_scratch_t* probe_scratch);

// Per-worker parse state. Parsed lazily, once per packet, on the original
// bytes; every consumer then rewrites its own copy at the same offsets.
struct L7Parse {
  L7Parse();
  ~L7Parse();
  void reset(uint64_t packet_id) {
    if (packet_id != packet)
      packet = packet_id, dns_msg = -1, hold_hint = false;
  }
  uint64_t packet = ~0ULL;
  // Some consumer protects DNS fields: UDP on other ports is probed for DNS
  // content (DNS runs on any port a resolver or a tunnel chooses).
  bool probe_dns = false;
  std::unique_ptr<dns::ParseResult> dns;
  std::unique_ptr<dns::TcpSplit> split;
  int dns_msg = -1;  // which message of the packet `dns` holds (-1: none)
  uint32_t dns_flows = 0;  // FlowState::dns_flow numbers handed out by this worker
  // The payload ends inside a header that more bytes of this direction
  // would complete (the engine may hold the segment until they come).
  bool hold_hint = false;
  hs_scratch_t* probe_scratch = nullptr;  // ContentProbes
  // Protocol plugins: each one's per-worker state (by plugin index), the
  // occurrences of this packet's parse, and the plugin applications whose
  // content probe runs (some consumer protects their fields).
  std::vector<void*> proto_state;
  // Makes the states of plugins registered after this parse state was
  // (once each: tests build one before registering the plugins).
  void* state_of(uint8_t app) {
    const auto& v = Registry::instance().protocols();
    while (proto_state.size() < v.size()) proto_state.push_back(v[proto_state.size()]->make_state());
    return proto_state[app - kFirstPluginApp];
  }
  std::unique_ptr<ProtoOccs> occs = std::make_unique<ProtoOccs>();
  uint32_t probe_apps = 0;
};

}  // namespace amon
