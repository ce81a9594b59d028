#include "l7.h"

#include <hs/hs.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>

namespace amon {

const L7Fields& L7Fields::get() {
  static const L7Fields f = [] {
    L7Fields x;
    auto& r = Registry::instance();
    auto id = [&](const char* n) { return r.field(n)->id; };
    const auto& v = r.protocols();
    for (unsigned i = 0; i < Registry::kMaxProtocolPlugins; ++i)
      x.payload[i] = i < v.size() && v[i]->payload_field ? id(v[i]->payload_field) : kNoField;
    // Registered after the L2-L4 fields: from the first plugin's field on,
    // every one is parsed out of the payload.
    x.first = FieldId(r.fields().size());
    for (const FieldDesc& f : r.fields())
      if (plugin_apps(f.protocol)) {
        x.first = f.id;
        break;
      }
    x.last = FieldId(r.fields().size() - 1);
    return x;
  }();
  return f;
}

Shortcut Shortcut::make() {
  Shortcut x;
  {
    const auto& v = Registry::instance().protocols();
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i]->shortcut) continue;
      x.pp = v[i], x.app = uint8_t(kFirstPluginApp + i);
      x.parse_datagram = v[i]->parse_datagram, x.numbered = v[i]->numbered, x.clear_occs = !v[i]->value;
      for (uint16_t p : v[i]->ports)
        if (p) x.ports[x.n_ports++] = p;
        else break;
      break;
    }
  }
  return x;
}

L7Parse::L7Parse() {
  if (hs_alloc_scratch(content_probes().db(), &probe_scratch) != HS_SUCCESS)
    throw std::runtime_error("content probes: hs_alloc_scratch failed");
  for (const ProtocolPlugin* pp : Registry::instance().protocols()) proto_state.push_back(pp->make_state());
  if (shortcut.app) shortcut_state = state_of(shortcut.app);
}
void* L7Parse::grow_states(size_t i) {
  const auto& v = Registry::instance().protocols();
  while (proto_state.size() < v.size()) proto_state.push_back(v[proto_state.size()]->make_state());
  return proto_state[i];
}

L7Parse::~L7Parse() {
  hs_free_scratch(probe_scratch);
  const auto& v = Registry::instance().protocols();
  for (size_t i = 0; i < proto_state.size(); ++i) v[i]->free_state(proto_state[i]);
}

namespace {

// What the first payload bytes of a TCP stream say, anchored at its start.
// The protocol plugins add their own (ProtocolPlugin::patterns).
struct Probe {
  const char* re;
  App app;
};
const Probe kProbes[] = {
    // Recognised, and carrying no field of ours: later segments skip probing.
    {"^SSH-[12]\\.[0-9]", App::Other},
};

}  // namespace

ContentProbes::ContentProbes() {
  std::vector<const char*> res;
  for (const Probe& p : kProbes) res.push_back(p.re), app_.push_back(p.app);
  const auto& v = Registry::instance().protocols();
  for (size_t i = 0; i < v.size(); ++i)
    for (const char* const* re = v[i]->patterns; v[i]->l4_proto == kProtoTcp && re && *re; ++re)
      res.push_back(*re), app_.push_back(App(kFirstPluginApp + i));
  std::vector<unsigned> flags(res.size(), HS_FLAG_SINGLEMATCH | HS_FLAG_DOTALL), ids(res.size());
  for (unsigned i = 0; i < ids.size(); ++i) ids[i] = i;
  hs_compile_error_t* err = nullptr;
  if (hs_compile_multi(res.data(), flags.data(), ids.data(), unsigned(res.size()), HS_MODE_BLOCK, nullptr, &db_, &err) !=
      HS_SUCCESS) {
    std::string msg = err ? err->message : "hs_compile_multi failed";
    hs_free_compile_error(err);
    throw std::runtime_error("content probes: " + msg);
  }
}

ContentProbes::~ContentProbes() { hs_free_database(db_); }

App ContentProbes::classify(const uint8_t* p, uint32_t n, hs_scratch_t* s) const {
  if (!s || !n) return App::Unknown;
  struct Hit {
    unsigned id = ~0u;
  } hit;
  auto cb = [](unsigned id, unsigned long long, unsigned long long, unsigned, void* ctx) -> int {
    static_cast<Hit*>(ctx)->id = id;
    return 1;  // anchored patterns: the first match decides
  };
  // Request lines longer than this are not worth a parse.
  hs_scan(db_, reinterpret_cast<const char*>(p), std::min<uint32_t>(n, 8192), 0, s, cb, &hit);
  return hit.id < app_.size() ? app_[hit.id] : App::Unknown;
}

const ContentProbes& content_probes() {
  static const ContentProbes c;
  return c;
}

namespace {

// A protocol plugin whose ports this packet uses, or whose probe_always
// recognises it: its application, or Unknown.
App plugin_by_ports(const Decoded& d) {
  const auto& v = Registry::instance().protocols();
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i]->l4_proto != d.l4_proto) continue;
    for (uint16_t port : v[i]->ports) {
      if (!port) break;
      if (port == d.sport || port == d.dport) return App(kFirstPluginApp + i);
    }
  }
  return App::Unknown;
}
App plugin_by_probe_always(const uint8_t* pl, uint32_t avail, const Decoded& d) {
  const auto& v = Registry::instance().protocols();
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i]->probe_always && v[i]->l4_proto == d.l4_proto && v[i]->probe(pl, avail, d.sport, d.dport))
      return App(kFirstPluginApp + i);
  return App::Unknown;
}
// A plugin whose server port the stream's server uses (no content probe
// recognised it).
App plugin_by_server_port(uint16_t server_port, uint8_t l4) {
  const auto& v = Registry::instance().protocols();
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i]->l4_proto != l4) continue;
    for (uint16_t port : v[i]->server_ports) {
      if (!port) break;
      if (port == server_port) return App(kFirstPluginApp + i);
    }
  }
  return App::Unknown;
}

// The plugin that parses IP protocol `proto`'s payload whole
// (ProtocolPlugin::l4_proto, ip_message_proto), or Unknown: a table made
// once, so a packet of any other protocol asks one byte.
App plugin_by_ip_proto(uint8_t proto) {
  static const std::array<uint8_t, 256> apps = [] {
    std::array<uint8_t, 256> a{};
    const auto& v = Registry::instance().protocols();
    for (size_t i = 0; i < v.size(); ++i)
      if (ip_message_proto(v[i]->l4_proto)) a[v[i]->l4_proto] = uint8_t(kFirstPluginApp + i);
    return a;
  }();
  return App(apps[proto]);
}

}  // namespace

bool ip_message_app(const Decoded& d) {
  return d.status == DecodeStatus::Ok && !d.l4_hdr_len && !(d.flags & kFlagLaterFragment) &&
         plugin_by_ip_proto(d.l4_proto) != App::Unknown;
}

App detect_app(const uint8_t* p, const Decoded& d, bool from_client, hs_scratch_t* probe_scratch) {
  if (d.status != DecodeStatus::Ok || (d.flags & kFlagLaterFragment)) return App::Unknown;
  if (!d.l4_hdr_len) return plugin_by_ip_proto(d.l4_proto);
  if (App a = plugin_by_ports(d); a != App::Unknown) return a;
  const uint32_t avail = d.payload_off < d.cap_len ? std::min(d.cap_len, d.payload_off + d.payload_len) - d.payload_off : 0;
  const uint8_t* pl = p + d.payload_off;
  if (d.l4_proto == kProtoUdp) {
    if (App a = plugin_by_probe_always(pl, avail, d); a != App::Unknown) return a;
    return App::Other;
  }
  if (d.l4_proto != kProtoTcp) return App::Other;
  if (App a = plugin_by_probe_always(pl, avail, d); a != App::Unknown) return a;
  App by_content = content_probes().classify(pl, avail, probe_scratch);
  if (by_content != App::Unknown) return by_content;
  uint16_t sp = from_client ? d.dport : d.sport;
  if (App a = plugin_by_server_port(sp, kProtoTcp); a != App::Unknown) return a;
  return App::Other;
}

}  // namespace amon
