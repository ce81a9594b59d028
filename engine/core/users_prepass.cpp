// The offline pre-pass: before the first record is written, the input is
// read once to learn, per consumer whose policy learns users outside
// `clients` (Program::learns_users), every address that takes ip.client's
// rule somewhere in it; per consumer whose policy has no `clients` and
// tells users by who initiates (Program::learns_initiators), every host
// seen initiating a flow anywhere in it. Each program's instances start
// knowing them, so a host pseudonymized as a client late in a capture is
// not kept as a server in its first records (doc/architecture.md, "Users
// outside `clients`", "Roles without `clients`").
//
// The pass takes what the packet path takes to tell roles and nothing
// more: the same reader (link types, pcapng, gzip, merged inputs), decode,
// and a flow table of a worker's size for the initiator; no program runs.
// A standard input or a pipe cannot be read twice: then there is no
// pre-pass, and users are learnt as they come, as live.
//
// The same read fills, per consumer that searches kept payload for what it
// rewrote (Program::echoes) and has identifier fields whose rule decides by
// the value alone (Program::echo_preload_rule), its echo table's preloaded values
// (EchoPreload, echo.h): the addresses of its users seen in IP headers
// (inside `clients`, or learnt here), when its user address rule decides
// by the value and the time alone (Program::echo_preload_addrs); the
// application parse of each packet, as a worker's; a head split over TCP segments that a worker would hold (an
// HTTP request whose Cookie is in its second segment) is followed in
// sequence order (SplitHeads) and parsed whole (analyze_stream), as the
// worker parses what it held; and the names of NBNS messages, which DNS
// decides in its own rewrite with no occurrence to show them: read with
// the DNS plugin's values (PayloadValues). A copy that travels before its
// field is then rewritten as the field is (a cookie in an earlier query
// string, a NetBIOS name in a DNS query or a certificate before the host
// announces it, a user's address in a URL before the user's first packet).
#include <sys/stat.h>

#include <memory>
#include <vector>

#include "engine_parts.h"
#include "flow_table.h"
#include "echo_preload.h"
#include "initiators.h"
#include "l7.h"
#include "mbuf_meta.h"
#include "pcap_port.h"
#include "split_heads.h"
#include "values.h"

namespace amon::engine {

namespace {

// Sized for a large capture: 2^16 sets, 256 Ki users before sets saturate
// (a saturated set makes more servers users, never fewer), 2 MiB a consumer.
constexpr unsigned kPrepassSetsLog2 = 16;

bool rereadable(const PortSpec& in) {
  if (in.kind != PortSpec::Kind::PcapFile) return false;
  const std::vector<std::string> paths = in.files.empty() ? std::vector<std::string>{in.spec} : in.files;
  for (const std::string& p : paths) {
    struct stat st;
    if (p == "-" || ::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  }
  return true;
}

// A PPTP client's GRE packets take ip.client's rule at its end (the one
// that did not accept the control connection on TCP 1723), which makes it
// a user outside `clients` (Program::pptp_user): learnt here too, so its
// records before its first GRE packet, and that packet's on another
// worker, treat it as one.
void learn_pptp_clients(Engine& E, const std::vector<size_t>& which, std::vector<std::shared_ptr<UserTable>>& tables,
                        const std::vector<EchoCollector*>& user_addrs, const FlowTable& flows, const uint8_t* data,
                        const Decoded& d) {
  flows.pptp_clients(data, d, [&](const uint8_t* client, unsigned al, bool) {
    for (size_t k = 0; k < which.size(); ++k)
      if (E.programs[which[k]]->pptp_user(client, al == 4 ? 4 : 6)) {
        tables[k]->add(client, al);
        if (EchoCollector* c = user_addrs[which[k]]) c->user_addr(client, al);
      }
  });
}

// Heads split over TCP segments, for the echo tables: a segment whose
// parse a worker would hold (Incomplete with hold_hint, of a plugin that
// holds and whose fields a preloading consumer protects) starts one; the
// segments of its direction that follow are kept in sequence order and
// the head parsed again until it parses, or is read as far as it was whole
// (ProtoPacket::ends) when its direction ends, a bound is reached or it
// goes quiet: the values of its complete lines are the ones a worker
// rewrites. A followed segment is not parsed alone, as a held one is not.
class PrepassHeads {
 public:
  PrepassHeads(L7Parse& l7, std::vector<std::unique_ptr<EchoCollector>>& collectors, uint32_t apps)
      : l7_(l7), collectors_(collectors), apps_(apps) {}

  // The packet's segment if it belongs to a followed head (true: taken,
  // not to be parsed alone); before analyze_l7.
  bool before(const uint8_t* data, const Decoded& d, const PacketMeta& meta) {
    if (!tcp(d, meta) || !heads_.size()) return false;
    const std::string k = key(data, d);
    SplitHeads::Head* h = heads_.find(k);
    if (!h) return false;
    const bool ends = d.tcp_flags & (kTcpFin | kTcpRst);
    switch (heads_.add(*h, tcp_seq(data, d), data + d.payload_off, d.payload_len, meta.ts_ns)) {
      case SplitHeads::Add::Grew: {
        const L7State st =
            analyze_stream(h->bytes.data(), h->contiguous, app(*h), from_init(*h), meta.flow, l7_);
        if (st != L7State::Incomplete || !l7_.hold_hint) {
          if (st == L7State::Parsed) collect(*h);
          heads_.end(k, st == L7State::Parsed);
        } else if (ends) {
          leave(k, *h, meta.flow);
        }
        return true;
      }
      case SplitHeads::Add::Waiting:
        if (ends) leave(k, *h, meta.flow);
        return d.payload_len != 0;
      case SplitHeads::Add::Outside:
        leave(k, *h, meta.flow);
        return false;
    }
    return false;
  }
  // After analyze_l7 of a segment not taken: a head a worker would hold starts here.
  void after(const uint8_t* data, const Decoded& d, const PacketMeta& meta) {
    if (meta.l7 != L7State::Incomplete || !l7_.hold_hint || !tcp(d, meta) || !d.payload_len ||
        (d.tcp_flags & (kTcpFin | kTcpRst)) || !(apps_ >> meta.app & 1))
      return;
    if (heads_.full()) expire(meta.ts_ns);
    if (SplitHeads::Head* h = heads_.start(key(data, d), tcp_seq(data, d), data + d.payload_off, d.payload_len,
                                           meta.ts_ns))
      h->tag = meta.app | (meta.initiator_is_src ? 0x100u : 0u);
  }
  void expire(uint64_t now) {
    heads_.expire(now, [&](const std::string&, const SplitHeads::Head& h) { cut(h, nullptr); });
  }
  void flush() {
    heads_.flush([&](const std::string&, const SplitHeads::Head& h) { cut(h, nullptr); });
  }
  const SplitHeads::Stats& stats() const { return heads_.stats(); }

 private:
  static bool tcp(const Decoded& d, const PacketMeta& meta) {
    return meta.flow && d.status == DecodeStatus::Ok && d.l4_proto == kProtoTcp && d.l4_hdr_len &&
           !(d.flags & (kFlagFragment | kFlagTunnel)) && d.payload_off + d.payload_len <= d.cap_len;
  }
  static std::string key(const uint8_t* data, const Decoded& d) {
    return SplitHeads::key(data + d.src_off(), data + d.dst_off(), d.addr_len(), d.sport, d.dport);
  }
  static uint8_t app(const SplitHeads::Head& h) { return uint8_t(h.tag); }
  static bool from_init(const SplitHeads::Head& h) { return h.tag & 0x100; }
  void collect(const SplitHeads::Head& h) {
    for (auto& c : collectors_) c->occurrences(*l7_.occs, h.bytes.data(), h.contiguous);
  }
  // What was whole of a head that will not complete, read as the stream cut it.
  void cut(const SplitHeads::Head& h, FlowState* fs) {
    if (analyze_stream(h.bytes.data(), h.contiguous, app(h), from_init(h), fs, l7_, true) == L7State::Parsed)
      collect(h);
  }
  void leave(const std::string& k, SplitHeads::Head& h, FlowState* fs) {
    cut(h, fs);
    heads_.end(k, false);
  }

  L7Parse& l7_;
  std::vector<std::unique_ptr<EchoCollector>>& collectors_;
  const uint32_t apps_;  // the plugin applications whose heads are followed
  SplitHeads heads_;
};

}  // namespace

void learn_users_offline(Engine& E) {
  if (!E.cfg.offline || E.cfg.inputs.empty()) return;
  std::vector<size_t> which;
  for (size_t i = 0; i < E.programs.size(); ++i)
    if (E.programs[i]->learns_users() || E.programs[i]->learns_initiators()) which.push_back(i);
  // Consumers whose echo tables are preloaded, and their collectors.
  std::vector<size_t> echoing;
  std::vector<std::unique_ptr<EchoCollector>> collectors;
  uint32_t probe_apps = 0;
  for (size_t i = 0; i < E.programs.size(); ++i) {
    if (!E.programs[i]->echoes()) continue;
    auto c = std::make_unique<EchoCollector>(*E.programs[i]);
    if (!c->wants()) continue;
    echoing.push_back(i);
    if (c->wants_values()) probe_apps |= E.programs[i]->protected_apps() & ~((1u << kFirstPluginApp) - 1);
    collectors.push_back(std::move(c));
  }
  // By program: the collector that takes its users' addresses, null when
  // none does (Program::echo_preload_addrs).
  std::vector<EchoCollector*> user_addrs(E.programs.size(), nullptr);
  bool values = false;
  for (size_t k = 0; k < echoing.size(); ++k) {
    if (collectors[k]->wants_addrs()) user_addrs[echoing[k]] = collectors[k].get();
    values = values || collectors[k]->wants_values();
  }
  if (which.empty() && echoing.empty()) return;
  for (const auto& in : E.cfg.inputs)
    if (!rereadable(in)) {
      log_line(kInfo, "pre-pass: %s cannot be read twice, users and echoed values are learnt as they come",
               in.spec.c_str());
      return;
    }
  const uint64_t t0 = wall_ns();
  std::vector<std::shared_ptr<UserTable>> tables;
  for (size_t k = 0; k < which.size(); ++k) tables.push_back(std::make_shared<UserTable>(kPrepassSetsLog2));
  // Who initiates, learnt as the run learns it (in input order), for the
  // policies without `clients`; made only when one needs it (1 MiB).
  std::unique_ptr<InitiatorLog> initiators;
  for (size_t i : which)
    if (E.programs[i]->learns_initiators()) initiators = std::make_unique<InitiatorLog>();
  std::unique_ptr<L7Parse> l7;
  std::unique_ptr<PrepassHeads> split;
  std::unique_ptr<PayloadValues> nbns;
  if (values) {
    l7 = std::make_unique<L7Parse>(), l7->probe_apps = probe_apps;
    nbns = std::make_unique<PayloadValues>(PayloadValues::Datagrams::Recognised);
    uint32_t holding = 0;
    for (unsigned a = kFirstPluginApp; a < 32; ++a)
      if ((probe_apps >> a & 1) && plugin_of(uint8_t(a)) && plugin_of(uint8_t(a))->holds) holding |= 1u << a;
    if (holding) split = std::make_unique<PrepassHeads>(*l7, collectors, holding);
  }
  uint64_t packet_id = 0;
  FlowTable flows("users_prepass", E.sizes.flows_per_worker, E.cfg.flow_timeouts, int(rte_socket_id()),
                  /*commit=*/false);
  constexpr uint16_t kBurst = 64;
  rte_mbuf* pkts[kBurst];
  uint64_t packets = 0;
  for (const auto& in : E.cfg.inputs) {
    PcapReader rd(in, E.pool);
    while (uint16_t n = rd.read_burst(pkts, kBurst)) {
      const uint64_t last_ts = mbuf_ts(pkts[n - 1]);
      for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        // Chained mbufs (records past a segment) are rare: their first
        // segment holds the headers the roles need.
        const uint8_t* data = rte_pktmbuf_mtod(m, const uint8_t*);
        const uint32_t cap = m->data_len;
        Decoded d;
        decode(data, cap, mbuf_wire_len(m), d);
        PacketMeta meta;
        meta.ts_ns = mbuf_ts(m);
        if (d.has_ip() && d.dst_off() + d.addr_len() <= cap && d.src_off() + d.addr_len() <= cap) {
          flows.lookup(data, d, meta.ts_ns, meta);
          if (d.status != DecodeStatus::Ok) meta.roles_uncertain = true;
          const uint8_t initiating = initiators ? initiators->observe(data, cap, d) : 0;
          for (size_t k = 0; k < which.size(); ++k)
            if (const uint8_t ends = E.programs[which[k]]->learns_initiators()
                                         ? initiating
                                         : E.programs[which[k]]->outside_clients(data, cap, d, meta)) {
              EchoCollector* c = user_addrs[which[k]];
              if (ends & 1) tables[k]->add(data + d.src_off(), d.addr_len());
              if (ends & 2) tables[k]->add(data + d.dst_off(), d.addr_len());
              if (c && (ends & 1)) c->user_addr(data + d.src_off(), d.addr_len());
              if (c && (ends & 2)) c->user_addr(data + d.dst_off(), d.addr_len());
            }
          if (d.flags & (kFlagTunnel | kFlagEncap)) learn_pptp_clients(E, which, tables, user_addrs, flows, data, d);
          // A user's address inside `clients`: its rule rewrites it in
          // every record, so a copy written before its first packet is
          // rewritten too.
          const uint8_t fam = d.addr_len() == 4 ? 4 : 6;
          for (size_t k = 0; k < echoing.size(); ++k)
            if (EchoCollector* c = user_addrs[echoing[k]]; c)
              for (const uint32_t off : {d.src_off(), d.dst_off()})
                if (E.programs[echoing[k]]->in_clients(data + off, fam)) c->user_addr(data + off, d.addr_len());
        }
        if (l7 && m->nb_segs == 1 && !(split && split->before(data, d, meta))) {
          l7->reset(++packet_id);
          meta.orig = data;
          analyze_l7(data, d, meta, *l7);
          if (meta.l7 == L7State::Parsed && d.payload_off < cap)
            for (auto& c : collectors) c->occurrences(*l7->occs, data + d.payload_off, cap - d.payload_off);
          if (split) split->after(data, d, meta);
          if (d.status == DecodeStatus::Ok && d.l4_proto == kProtoUdp && d.has_l4_header() &&
              (d.sport == 137 || d.dport == 137) && d.payload_off < cap) {
            const uint32_t len = std::min<uint32_t>(cap, d.payload_off + d.payload_len) - d.payload_off;
            nbns->read(kProtoUdp, data + d.payload_off, len, d.sport, d.dport, true,
                       // Only a name occurrence is taken (nbns_name): on port 137
                       // that is a name of the NBNS message, whichever plugin read it.
                       [&](const ProtocolPlugin&, const ProtoOcc& o) {
                         for (auto& c : collectors) c->nbns_name(o);
                       });
          }
        }
        rte_pktmbuf_free(m);
      }
      packets += n;
      if ((packets & 0xffff) < kBurst) {
        flows.expire(last_ts, 4096);
        if (split) split->expire(last_ts);
      }
    }
    // An input that stops early (cut short, corrupt) is reported by the
    // run itself, which writes the records before the fault: learnt so far.
  }
  if (split) split->flush();
  // What was learnt is a figure of the run, not news: --quiet keeps stderr
  // for what an operator must act on.
  for (size_t k = 0; k < echoing.size(); ++k) {
    std::shared_ptr<EchoPreload> p = collectors[k]->take();
    if (split) {
      const SplitHeads::Stats& hs = split->stats();
      p->split_whole = hs.completed, p->split_unfinished = hs.unfinished, p->split_refused = hs.refused;
    }
    if (!E.cfg.quiet)
      log_line(kInfo,
               "consumer %s: %zu values its fields rewrite (%lu of them users' addresses) preloaded into its echo "
               "table (%lu past the cap of %u)",
               E.cfg.consumers[echoing[k]].name.c_str(), p->size(), (unsigned long)p->addrs, (unsigned long)p->over,
               EchoPreload::kMax);
    E.programs[echoing[k]]->set_echo_preload(std::move(p));
  }
  for (size_t k = 0; k < which.size(); ++k) {
    if (!E.cfg.quiet)
      log_line(kInfo, "consumer %s: %zu %s learnt before the first record (%lu sets saturated)",
               E.cfg.consumers[which[k]].name.c_str(), tables[k]->size(),
               E.programs[which[k]]->learns_initiators() ? "hosts initiating flows" : "users outside clients",
               (unsigned long)tables[k]->saturated());
    E.programs[which[k]]->set_known_users(std::move(tables[k]));
  }
  if (!E.cfg.quiet)
    log_line(kInfo, "pre-pass: %lu packets in %.3f s", (unsigned long)packets, double(wall_ns() - t0) / 1e9);
}

}  // namespace amon::engine
