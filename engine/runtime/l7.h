// Application-layer fields for the per-consumer programs: protocol
// detection, one parse per packet shared by all consumers, and the rewrite
// of each consumer's copy by offset. Every protocol is a plugin
// (protocol.h) reached through the registry.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "l2l4.h"
#include "protocol.h"
#include "stream.h"

struct hs_database;
typedef struct hs_database hs_database_t;
struct hs_scratch;
typedef struct hs_scratch hs_scratch_t;

namespace amon {

// No application is parsed by the runtime itself; values 1 to 5 belonged to
// protocols now plugins and stay unused.
enum class App : uint8_t { Unknown = 0, Other = 6 };
// Protocol plugins (Registry::protocols(), protocol.h) are applications
// kFirstPluginApp + their index: App values past the enumerators, so a
// policy's 32-bit mask of protected applications covers them.
inline constexpr uint8_t kFirstPluginApp = 8;
static_assert(kFirstPluginApp + Registry::kMaxProtocolPlugins <= 32, "a plugin's application is a bit of a 32-bit mask");
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

// The plugin that declares ProtocolPlugin::shortcut (a datagram on its
// ports is its message), resolved once the plugins are registered.
struct Shortcut {
  const ProtocolPlugin* pp = nullptr;
  // Copied from pp, read per datagram: its parse_datagram and numbered, and
  // whether a parse must empty the occurrence table (a plugin without
  // `value` has conditions read it; with `value` nothing reads it).
  bool (*parse_datagram)(void* state, const uint8_t* payload, uint32_t len) = nullptr;
  bool numbered = false, clear_occs = false;
  uint8_t app = 0;  // 0: no plugin declares one
  uint8_t n_ports = 0;
  uint16_t ports[8] = {};
  bool port(uint16_t sport, uint16_t dport) const {
    for (unsigned i = 0; i < n_ports; ++i)
      if (ports[i] == sport || ports[i] == dport) return true;
    return false;
  }
  // Inline: the packet path asks for it per packet.
  static const Shortcut& get() {
    static const Shortcut s = make();
    return s;
  }
  static Shortcut make();
};

// Registry ids of the application fields, resolved once.
struct L7Fields {
  // By plugin index: its ProtocolPlugin::payload_field (kNoField: none).
  FieldId payload[Registry::kMaxProtocolPlugins];
  static const L7Fields& get();
  // The payload field of application `app` (kNoField: none).
  FieldId payload_of(uint8_t app) const {
    const unsigned i = unsigned(app) - kFirstPluginApp;
    return i < Registry::kMaxProtocolPlugins ? payload[i] : kNoField;
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

// Guesses the application protocol of a packet from ports and the first
// payload bytes. `from_client`: the packet travels client -> server.
App detect_app(const uint8_t* p, const Decoded& d, bool from_client, hs_scratch_t* probe_scratch);
// A packet whose whole IP payload a plugin parses (an IP protocol without
// ports: ProtocolPlugin::l4_proto, ip_message_proto).
bool ip_message_app(const Decoded& d);

// Per-worker parse state. Parsed lazily, once per packet, on the original
// bytes; every consumer then rewrites its own copy at the same offsets.
struct L7Parse {
  L7Parse();
  ~L7Parse();
  void reset(uint64_t packet_id) {
    if (packet_id != packet)
      packet = packet_id, hold_hint = false;
  }
  uint64_t packet = ~0ULL;
  uint32_t flow_numbers = 0;  // FlowState::flow_no numbers handed out by this worker (ProtocolPlugin::numbered)
  // The payload ends inside a header that more bytes of this direction
  // would complete (the engine may hold the segment until they come).
  bool hold_hint = false;
  StreamGapStats gaps;  // this worker's TCP streams' gaps (stream.h)
  hs_scratch_t* probe_scratch = nullptr;  // ContentProbes
  // Protocol plugins: each one's per-worker state (by plugin index), the
  // occurrences of this packet's parse, and the plugin applications whose
  // content probe runs (some consumer protects their fields).
  std::vector<void*> proto_state;
  // Makes the states of plugins registered after this parse state was
  // (once each: tests build one before registering the plugins).
  __attribute__((always_inline)) void* state_of(uint8_t app) {
    const size_t i = app - kFirstPluginApp;
    if (i < proto_state.size()) [[likely]]
      return proto_state[i];
    return grow_states(i);
  }
  void* grow_states(size_t i);
  std::unique_ptr<ProtoOccs> occs = std::make_unique<ProtoOccs>();
  uint32_t probe_apps = 0;
  // Shortcut::get() and its plugin's state, taken at construction: the
  // datagram shortcut reads them per packet.
  const Shortcut shortcut = Shortcut::get();
  void* shortcut_state = nullptr;
};

}  // namespace amon
