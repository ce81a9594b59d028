// amon whatif: what a z-anonymity policy would hide on a given capture, for
// several z and Δt at once, so they can be chosen with evidence rather than
// guessed. The capture's name occurrences are read once and replayed through
// the real store, one store per (z, Δt) as a policy with that rule would
// have it; nothing is written but the report.
#include "whatif.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <pcap/pcap.h>
#include <sys/random.h>

#include <arpa/inet.h>

#include "audit.h"
#include "config.h"
#include "l2l4.h"
#include "pcap_port.h"
#include "pcapio.h"
#include "protocol.h"
#include "registry.h"
#include "sld.h"
#include "values.h"
#include "zanon.h"

namespace amon {

namespace {

const char* kUsage =
    "usage: amon whatif --read IN.pcap --out DIR [options]\n"
    "  Replays the capture's names through the z-anonymity store for every z and dt\n"
    "  given and reports what each setting would hide. Writes nothing but the report.\n"
    "  --field LIST     name fields a zanon rule may decide (default dns.qname,tls.sni,\n"
    "                   http.host; any field `amon fields` lists as a domain name)\n"
    "  --z LIST         values of z, 1..64 (default 2,5,10,20,50)\n"
    "  --dt LIST        windows, e.g. 10m,1h,1d (default 10m,1h,1d)\n"
    "  --fallback F     sld (default): a hidden name may show its registrable domain\n"
    "                   when that passes its own test; none: hidden is hidden\n"
    "  --boxes K        also replay with the users split over K boxes (by a hash of the\n"
    "                   address), each with its own store, against one shared store;\n"
    "                   adds the per-box columns to whatif.csv and draws boxes.png\n"
    "  --quiet          no progress line\n"
    "  Occurrences: the names the protocol plugins read in what a client sends\n"
    "  (DNS queries, TLS ClientHello SNIs, HTTP request Hosts), one packet at a time\n"
    "  (a name split over TCP segments is not read); one user = the address that\n"
    "  sent the name. IN may have any link type amon pcap reads (802.11 with\n"
    "  radiotap or PPI too): names are read from the frames the engine sees.\n"
    "  DIR gets whatif.csv, hidden.png, flows.png (gnuplot), boxes.png with --boxes, and summary.txt.\n";

int usage(const std::string& msg) {
  std::fprintf(stderr, "amon whatif: %s\n(run 'amon whatif --help' for usage)\n", msg.c_str());
  return 2;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

// One name as the policy would meet it: who sent it, when, in which flow.
struct Occurrence {
  uint64_t t_ns;
  uint64_t user;
  uint32_t value;  // index into names
  uint32_t flow;
};

struct Capture {
  std::vector<Occurrence> occ;
  std::vector<std::string> names;  // distinct values, lowercased
  std::vector<int32_t> sld;        // names[i]'s registrable domain (index into names), -1 when none shorter
  std::vector<int32_t> flow_service;  // per flow: the registrable domain (or name) of its first name
  uint64_t packets = 0, bytes = 0;
  size_t users = 0;
};

class Progress {
 public:
  Progress(bool on, uint64_t file_bytes) : on_(on), total_(file_bytes), t0_(now()) {}
  void read(uint64_t pos, uint64_t packets) {
    if (!on_) return;
    const double t = now();
    if (t - last_ < 0.25) return;
    last_ = t;
    const double el = t - t0_;
    const double pct = total_ ? 100.0 * double(pos) / double(total_) : 0;
    const double eta = pos ? el * (double(total_) - double(pos)) / double(pos) : 0;
    std::fprintf(stderr, "\rwhatif: reading %llu packets, %.1f MB/s, %.0f %%, ETA %.0f s   ",
                 (unsigned long long)packets, el > 0 ? double(pos) / el / 1e6 : 0, pct, eta);
  }
  void replay(size_t i, size_t n) {
    if (on_) std::fprintf(stderr, "\rwhatif: replaying setting %zu of %zu%30s", i, n, "");
  }
  void done() {
    if (on_) std::fprintf(stderr, "\r%78s\r", "");
  }

 private:
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  bool on_;
  uint64_t total_;
  double t0_, last_ = 0;
};

// A name as the store meets it: lowercased, without a trailing dot; empty
// for an address literal (a Host header's [v6] or dotted quad), no name.
std::string name_of(std::string_view v) {
  std::string h(v);
  while (!h.empty() && h.back() == '.') h.pop_back();
  for (char& c : h) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (h.empty() || h.front() == '[') return {};
  uint8_t a[16];
  if (inet_pton(AF_INET, h.c_str(), a) == 1 || inet_pton(AF_INET6, h.c_str(), a) == 1) return {};
  return h;
}

int read_capture(const std::string& path, const std::vector<bool>& fields, bool progress, Capture& cap,
                 std::string& err) {
  std::unique_ptr<pcapio::Capture> p;
  try {
    p = std::make_unique<pcapio::Capture>(path);
  } catch (const pcapio::BadInput& e) {
    err = e.what();
    return 2;
  }
  if (!link_type_supported(p->linktype())) {
    err = "link type " + link_type_name(p->linktype()) + " is not supported";
    return 1;
  }
  Progress prog(progress, p->file_bytes());

  // Users are keyed hashes of addresses, as the engine hands them to the store.
  uint8_t ukey[16];
  if (getrandom(ukey, sizeof ukey, 0) != ssize_t(sizeof ukey)) {
    err = "getrandom failed";
    return 1;
  }
  std::unordered_map<std::string, uint32_t> name_ix;
  std::unordered_map<std::string, uint32_t> flow_ix;
  std::unordered_map<uint64_t, uint32_t> users;
  // A datagram is read by the plugins that recognise it (ports, probes),
  // as the engine's detection would have it.
  PayloadValues reader(PayloadValues::Datagrams::Recognised);
  char sld_buf[256];

  auto intern = [&](std::string_view n) {
    auto [it, fresh] = name_ix.emplace(std::string(n), uint32_t(cap.names.size()));
    if (fresh) cap.names.emplace_back(n);
    return it->second;
  };

  pcapio::Record rec;
  audit::Frame frame;
  uint64_t left_out = 0;
  while (p->next(rec) == 1) {
    if (!link_type_supported(rec.linktype)) {  // a pcapng's other interfaces
      ++left_out;
      continue;
    }
    ++cap.packets;
    cap.bytes += rec.caplen;
    if ((cap.packets & 1023) == 0) prog.read(p->bytes_read(), cap.packets);
    // Another link type than Ethernet is read as the engine reads it
    // (802.11's data frames reach their IP packet behind LLC/SNAP).
    const uint8_t* data = rec.data;
    uint32_t caplen = rec.caplen, wire = rec.len;
    if (rec.linktype != DLT_EN10MB) {
      frame = audit::as_engine_sees(rec);
      data = frame.bytes.data(), caplen = uint32_t(frame.bytes.size()), wire = frame.wire;
    }
    Decoded d;
    decode(data, caplen, wire, d);
    if (d.status != DecodeStatus::Ok || !d.has_ip() || (d.flags & (kFlagTunnel | kFlagLaterFragment))) continue;
    if (d.l4_proto != kProtoUdp && d.l4_proto != kProtoTcp) continue;
    const uint32_t end = std::min<uint32_t>(caplen, d.payload_off + d.payload_len);
    if (d.payload_off >= end) continue;
    const uint8_t* pl = data + d.payload_off;
    const size_t plen = end - d.payload_off;

    // The sender is the client: what it sends, read as a flow's
    // initiator does; a value repeating its exchange's first (a DNS
    // response's question) is no observation of its own.
    std::vector<std::string> found;
    reader.read(d.l4_proto, pl, uint32_t(plen), d.sport, d.dport, true, [&](const ProtocolPlugin&, const ProtoOcc& o) {
      if (o.kind != OccKind::Name || o.repeat || o.role || o.field >= fields.size() || !fields[o.field]) return;
      std::string n = name_of(o.text);
      if (!n.empty()) found.push_back(std::move(n));
    });
    if (found.empty()) continue;

    // The sender of the name is the client; the flow is its 5-tuple.
    const uint32_t alen = d.addr_len();
    const uint64_t user = zanon::siphash128(ukey, 0, data + d.src_off(), alen).lo;
    users.emplace(user, 0);
    std::string fk(reinterpret_cast<const char*>(data + d.src_off()), alen);
    fk.append(reinterpret_cast<const char*>(data + d.dst_off()), alen);
    fk.push_back(char(d.l4_proto));
    fk.append(reinterpret_cast<const char*>(&d.sport), 2);
    fk.append(reinterpret_cast<const char*>(&d.dport), 2);
    auto [fit, new_flow] = flow_ix.emplace(fk, uint32_t(cap.flow_service.size()));
    if (new_flow) cap.flow_service.push_back(-1);
    const uint64_t t = rec.ts_ns;
    for (const std::string& n : found) {
      const uint32_t v = intern(n);
      if (cap.flow_service[fit->second] < 0) {
        const std::string_view reg = zanon::registrable_domain(n, sld_buf);
        cap.flow_service[fit->second] = int32_t(reg.empty() ? v : intern(reg));
      }
      cap.occ.push_back({t, user, v, fit->second});
    }
  }
  err = p->error();
  prog.done();
  if (left_out)
    std::fprintf(stderr, "amon whatif: %llu packets of link types amon does not read were left out\n",
                 (unsigned long long)left_out);
  if (!err.empty()) return 1;

  cap.users = users.size();
  cap.sld.assign(cap.names.size(), -1);
  for (size_t i = 0; i < cap.sld.size(); ++i) {
    const std::string n = cap.names[i];  // intern() may grow names
    const std::string_view reg = zanon::registrable_domain(n, sld_buf);
    if (!reg.empty() && reg.size() < n.size()) cap.sld[i] = int32_t(intern(reg));
  }
  cap.sld.resize(cap.names.size(), -1);
  return 0;
}

struct Setting {
  uint32_t z;
  uint64_t dt_ns;
  std::string dt_label;
  // Occurrences and distinct values by outcome: 0 hidden, 1 registrable domain, 2 released.
  uint64_t occ[3] = {0, 0, 0};
  uint64_t val[3] = {0, 0, 0};
  uint64_t values = 0, flows = 0, flows_named = 0;
  uint64_t store_bytes = 0, tracked = 0, evictions = 0;
  // --boxes K: occurrences and distinct values hidden when each of K boxes
  // counts only its own users (outcome 0 as above).
  uint64_t box_occ_hidden = 0, box_val_hidden = 0;
};

// One store for (z, dt), sized so the capture's values are never evicted:
// twice the room they need, so the decisions are the definition's.
zanon::Config store_config(const Capture& cap, const Setting& s) {
  zanon::Config zc;
  zc.zmax = s.z;
  zc.max_dt_ns = s.dt_ns;
  zc.max_values = 2 * cap.names.size() + 64;
  return zc;
}

// The name (or with the fallback its registrable domain) an occurrence
// shows: 2 released, 1 at its registrable domain, 0 hidden; `shown` the
// index of what the output keeps (-1 hidden).
uint8_t decide(zanon::Store& store, const zanon::Scope& sc, const Capture& cap, bool sld_fallback,
               const Occurrence& o, const zanon::ZParams& zp, int32_t& shown) {
  shown = -1;
  if (store.observe(store.key(sc, cap.names[o.value]), o.user, o.t_ns, zp)) {
    shown = int32_t(o.value);
    return 2;
  }
  if (sld_fallback && cap.sld[o.value] >= 0) {
    const int32_t r = cap.sld[o.value];
    if (store.observe(store.key(sc, cap.names[size_t(r)]), o.user, o.t_ns, zp)) {
      shown = r;
      return 1;
    }
  }
  return 0;
}

// The same occurrences with the users split over `boxes` stores by their
// (keyed, uniform) hash, as a load balancer spreading subscribers would:
// each box counts only its own users.
void replay_boxes(const Capture& cap, bool sld_fallback, unsigned boxes, Setting& s) {
  std::vector<std::unique_ptr<zanon::Store>> st;
  std::vector<zanon::Scope> sc;
  for (unsigned b = 0; b < boxes; ++b) {
    st.push_back(std::make_unique<zanon::Store>(store_config(cap, s)));
    sc.push_back({st[b]->class_id("name"), st[b]->kind_id("ip.client")});
  }
  const zanon::ZParams zp{s.z, s.dt_ns};
  std::vector<uint8_t> best(cap.names.size(), 0), seen(cap.names.size(), 0);
  for (const Occurrence& o : cap.occ) {
    const unsigned b = unsigned(o.user % boxes);
    int32_t shown;
    const uint8_t out = decide(*st[b], sc[b], cap, sld_fallback, o, zp, shown);
    s.box_occ_hidden += out == 0;
    seen[o.value] = 1;
    best[o.value] = std::max(best[o.value], out);
  }
  for (size_t i = 0; i < seen.size(); ++i) s.box_val_hidden += seen[i] && best[i] == 0;
}

void replay(const Capture& cap, bool sld_fallback, Setting& s) {
  // The memory reported is what the values tracked occupy.
  zanon::Store store(store_config(cap, s));
  const zanon::Scope sc{store.class_id("name"), store.kind_id("ip.client")};
  const zanon::ZParams zp{s.z, s.dt_ns};
  std::vector<uint8_t> best(cap.names.size(), 0);
  std::vector<uint8_t> seen(cap.names.size(), 0);
  std::vector<uint8_t> named(cap.flow_service.size(), 0);
  for (const Occurrence& o : cap.occ) {
    int32_t shown;  // the name, or registrable domain, the output keeps
    const uint8_t out = decide(store, sc, cap, sld_fallback, o, zp, shown);
    ++s.occ[out];
    seen[o.value] = 1;
    best[o.value] = std::max(best[o.value], out);
    // A meter names the flow's service when the output shows it: the name
    // released, or masked down to that registrable domain.
    if (shown >= 0) {
      const int32_t svc = cap.flow_service[o.flow];
      if (shown == svc || (out == 2 && cap.sld[o.value] == svc)) named[o.flow] = 1;
    }
  }
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i]) ++s.values, ++s.val[best[i]];
  s.flows = cap.flow_service.size();
  for (uint8_t f : named) s.flows_named += f;
  const zanon::Stats st = store.stats();
  s.store_bytes = st.bytes_per_entry * st.values_tracked;
  s.tracked = st.values_tracked;
  s.evictions = st.evictions;
}

double pct(uint64_t a, uint64_t b) { return b ? 100.0 * double(a) / double(b) : 0.0; }

std::string human_bytes(uint64_t b) {
  char buf[32];
  if (b >= (1ULL << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", double(b) / double(1ULL << 30));
  else if (b >= (1ULL << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1ULL << 20));
  else std::snprintf(buf, sizeof buf, "%.0f KiB", double(b) / 1024.0);
  return buf;
}

bool write_file(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok;
}

// The seed's Fig. 4 shape: a share against z, one line per Δt (boxes: two
// per Δt, one shared store and K stores). The tried z values are the x
// tics (a log axis alone labels only 1, 10, 100), and each curve has its
// own dash and marker, so equal curves do not hide each other.
std::string gnuplot_script(const std::vector<Setting>& set, const std::string& fig, unsigned boxes) {
  std::vector<std::string> labels;
  for (const Setting& s : set)
    if (std::find(labels.begin(), labels.end(), s.dt_label) == labels.end()) labels.push_back(s.dt_label);
  std::string dts, titles;
  for (const std::string& l : labels) {
    for (const Setting& s : set)
      if (s.dt_label == l) {
        dts += std::to_string(s.dt_ns / 1000000000.0) + " ";
        break;
      }
    titles += "Δt=" + l + " ";
  }
  const bool hidden = fig != "flows";
  std::vector<uint32_t> zs;
  for (const Setting& s : set)
    if (std::find(zs.begin(), zs.end(), s.z) == zs.end()) zs.push_back(s.z);
  std::string tics;
  for (uint32_t z : zs) tics += (tics.empty() ? "" : ", ") + std::to_string(z);
  std::string g;
  g += "set terminal pngcairo size 800,500 enhanced font 'sans,11'\n";
  g += "set output '" + fig + ".png'\n";
  g += "set datafile separator ','\n";
  g += "set key outside right top\nset grid\nset logscale x\n";
  g += "set xtics (" + tics + ")\n";
  if (zs.size() == 1) g += "set xrange [" + std::to_string(zs[0] / 2.0) + ":" + std::to_string(zs[0] * 2.0) + "]\n";
  g += "set xlabel 'z (distinct users needed to release a value)'\n";
  if (fig == "boxes")
    g += "set ylabel 'occurrences hidden (%)'\nset title 'Names hidden: one shared store against " +
         std::to_string(boxes) + " boxes, each with its own'\n";
  else
    g += hidden ? "set ylabel 'occurrences hidden (%)'\nset title 'Names hidden by z-anonymity'\n"
                : "set ylabel 'flows whose service a meter can name (%)'\nset title 'Flows still attributable to their service'\n";
  g += "set yrange [0:100]\n";
  g += "dts = '" + dts + "'\ntitles = '" + titles + "'\n";
  // Columns: 1 z, 2 dt_s; share columns as written by csv().
  const std::string col = hidden ? "$16" : "$22";
  const std::string sel = "using 1:(abs($2 - real(word(dts, i))) < 1e-3 ? ";
  g += "plot for [i=1:words(dts)] 'whatif.csv' " + sel + col +
       " : 1/0) with linespoints lw 2 lc i dt i pt int(3 + i) ps 1.3 title word(titles, i)." +
       (fig == "boxes" ? "' one store'" : "''");
  if (fig == "boxes")
    g += ", \\\n  for [i=1:words(dts)] 'whatif.csv' " + sel +
         "$25 : 1/0) with linespoints lw 2 lc i dt int(i + 1) pt int(3 + i + words(dts)) ps 1.3 title word(titles, i).' " +
         std::to_string(boxes) + " boxes'";
  g += "\n";
  return g;
}

std::string csv(const std::vector<Setting>& set, unsigned boxes) {
  std::string o =
      "z,dt_s,dt,occurrences,occ_hidden,occ_released,occ_sld,values,values_hidden,values_released,values_sld,"
      "flows,flows_named,store_bytes,values_tracked,share_occ_hidden,share_occ_released,share_occ_sld,"
      "share_values_hidden,share_values_released,share_values_sld,share_flows_named";
  // Per-box columns after the others: a reader of the columns above is unchanged.
  o += boxes > 1 ? ",boxes,occ_hidden_boxes,share_occ_hidden_boxes,values_hidden_boxes,share_values_hidden_boxes\n" : "\n";
  char buf[512];
  for (const Setting& s : set) {
    const uint64_t n = s.occ[0] + s.occ[1] + s.occ[2];
    std::snprintf(buf, sizeof buf,
                  "%u,%.9g,%s,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%.4f,%.4f,%.4f,%.4f,%.4f,"
                  "%.4f,%.4f\n",
                  s.z, double(s.dt_ns) / 1e9, s.dt_label.c_str(), (unsigned long long)n,
                  (unsigned long long)s.occ[0], (unsigned long long)s.occ[2], (unsigned long long)s.occ[1],
                  (unsigned long long)s.values, (unsigned long long)s.val[0], (unsigned long long)s.val[2],
                  (unsigned long long)s.val[1], (unsigned long long)s.flows, (unsigned long long)s.flows_named,
                  (unsigned long long)s.store_bytes, (unsigned long long)s.tracked, pct(s.occ[0], n),
                  pct(s.occ[2], n), pct(s.occ[1], n), pct(s.val[0], s.values), pct(s.val[2], s.values),
                  pct(s.val[1], s.values), pct(s.flows_named, s.flows));
    o += buf;
    if (boxes > 1) {
      o.pop_back();  // the line goes on
      std::snprintf(buf, sizeof buf, ",%u,%llu,%.4f,%llu,%.4f\n", boxes, (unsigned long long)s.box_occ_hidden,
                    pct(s.box_occ_hidden, n), (unsigned long long)s.box_val_hidden, pct(s.box_val_hidden, s.values));
      o += buf;
    }
  }
  return o;
}

// Runs gnuplot on a script in dir; false (with a reason) when it cannot.
bool run_gnuplot(const std::string& dir, const std::string& script_name, std::string& why) {
  const pid_t pid = fork();
  if (pid < 0) {
    why = std::strerror(errno);
    return false;
  }
  if (pid == 0) {
    if (chdir(dir.c_str()) != 0) _exit(126);
    execlp("gnuplot", "gnuplot", script_name.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  why = WIFEXITED(status) && WEXITSTATUS(status) == 127 ? "gnuplot not found (Debian: gnuplot-nox)"
                                                         : "gnuplot failed";
  return false;
}

}  // namespace

int whatif_main(int argc, char** argv) {
  std::string read, out, field_list = "dns.qname,tls.sni,http.host", z_list = "2,5,10,20,50",
                         dt_list = "10m,1h,1d", fallback = "sld", boxes_arg = "1";
  bool quiet = false;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&](std::string& dst) {
      if (i + 1 >= argc) return false;
      dst = argv[++i];
      return true;
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--quiet") quiet = true;
    else if (a == "--read" ? val(read) : a == "--out" ? val(out) : a == "--field" ? val(field_list)
             : a == "--z" ? val(z_list) : a == "--dt" ? val(dt_list) : a == "--fallback" ? val(fallback)
             : a == "--boxes" ? val(boxes_arg) : false) {
    } else return usage("unknown or incomplete option '" + a + "'");
  }
  if (read.empty()) return usage("--read IN.pcap is required");
  if (out.empty()) return usage("--out DIR is required");
  // Name fields with a z-anonymity value class: what a zanon rule decides.
  const Registry& reg = Registry::instance();
  std::vector<bool> fields(reg.fields().size());
  bool any = false;
  for (const std::string& f : split(field_list)) {
    const FieldDesc* fd = reg.field(f);
    if (!fd || fd->type != ValueType::Name || fd->value_class.empty()) {
      std::string names;
      for (const FieldDesc& d : reg.fields())
        if (d.type == ValueType::Name && !d.value_class.empty()) names += (names.empty() ? "" : ", ") + d.name;
      return usage("--field: '" + f + "' is not a name field (" + names + ")");
    }
    fields[fd->id] = any = true;
  }
  if (!any) return usage("--field: no field");
  if (fallback != "sld" && fallback != "none") return usage("--fallback takes sld or none");
  char* bend;
  const unsigned long boxes = std::strtoul(boxes_arg.c_str(), &bend, 10);
  if (*bend || boxes < 1 || boxes > 1024) return usage("--boxes takes a count in 1..1024");
  std::vector<Setting> set;
  std::vector<uint32_t> zs;
  for (const std::string& z : split(z_list)) {
    char* end;
    const unsigned long v = std::strtoul(z.c_str(), &end, 10);
    if (*end || v < 1 || v > zanon::Store::kMaxZ) return usage("--z: '" + z + "' is not an integer in 1..64");
    zs.push_back(uint32_t(v));
  }
  std::vector<std::pair<uint64_t, std::string>> dts;
  for (const std::string& d : split(dt_list)) {
    uint64_t ns;
    if (d == "1d") ns = 86400ULL * 1000000000ULL;
    else if (!parse_duration(d, ns) || ns == 0) return usage("--dt: '" + d + "' is not a duration like 10m, 1h, 1d");
    dts.push_back({ns, d});
  }
  if (zs.empty() || dts.empty()) return usage("--z and --dt need at least one value each");
  std::sort(zs.begin(), zs.end());
  zs.erase(std::unique(zs.begin(), zs.end()), zs.end());
  for (const auto& [ns, label] : dts)
    for (uint32_t z : zs) set.push_back(Setting{z, ns, label});

  if (mkdir(out.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "amon whatif: %s: %s\n", out.c_str(), std::strerror(errno));
    return 1;
  }
  const bool progress = !quiet && isatty(STDERR_FILENO);
  Capture cap;
  std::string err;
  if (int rc = read_capture(read, fields, progress, cap, err)) {
    // What came from the capture itself already names it.
    std::fprintf(stderr, "amon whatif: %s\n", err.rfind(read, 0) == 0 ? err.c_str() : (read + ": " + err).c_str());
    return rc;
  }
  Progress prog(progress, 0);
  for (size_t i = 0; i < set.size(); ++i) {
    prog.replay(i + 1, set.size());
    replay(cap, fallback == "sld", set[i]);
    if (boxes > 1) replay_boxes(cap, fallback == "sld", unsigned(boxes), set[i]);
  }
  prog.done();

  std::string sum;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "amon whatif %s: %llu packets, %zu name occurrences (%s), %zu distinct names, %zu users, %zu "
                "flows with a name; fallback %s\n",
                read.c_str(), (unsigned long long)cap.packets, cap.occ.size(), field_list.c_str(),
                set.empty() ? size_t(0) : size_t(set[0].values), cap.users, cap.flow_service.size(),
                fallback.c_str());
  sum += buf;
  sum += "  z    dt     occurrences: hidden  released  at sld | names: hidden  released  at sld | flows named | store\n";
  for (const Setting& s : set) {
    const uint64_t n = s.occ[0] + s.occ[1] + s.occ[2];
    std::snprintf(buf, sizeof buf,
                  "  %-4u %-6s %19.1f %% %7.1f %% %6.1f %% | %11.1f %% %7.1f %% %6.1f %% | %9.1f %% | %s\n", s.z,
                  s.dt_label.c_str(), pct(s.occ[0], n), pct(s.occ[2], n), pct(s.occ[1], n), pct(s.val[0], s.values),
                  pct(s.val[2], s.values), pct(s.val[1], s.values), pct(s.flows_named, s.flows),
                  human_bytes(s.store_bytes).c_str());
    sum += buf;
  }
  if (boxes > 1) {
    std::snprintf(buf, sizeof buf, "  with the users split over %lu boxes, each with its own store:\n"
                                   "  z    dt     occurrences hidden: one store  %lu boxes | names hidden: one store  %lu boxes\n",
                  boxes, boxes, boxes);
    sum += buf;
    for (const Setting& s : set) {
      const uint64_t n = s.occ[0] + s.occ[1] + s.occ[2];
      std::snprintf(buf, sizeof buf, "  %-4u %-6s %29.1f %% %8.1f %% | %22.1f %% %8.1f %%\n", s.z, s.dt_label.c_str(),
                    pct(s.occ[0], n), pct(s.box_occ_hidden, n), pct(s.val[0], s.values), pct(s.box_val_hidden, s.values));
      sum += buf;
    }
  }
  for (const Setting& s : set)
    if (s.evictions) {
      std::snprintf(buf, sizeof buf, "  warning: z=%u dt=%s evicted %llu values: its shares hide more than the definition\n",
                    s.z, s.dt_label.c_str(), (unsigned long long)s.evictions);
      sum += buf;
    }
  std::fputs(sum.c_str(), stdout);

  const std::string dir = out + "/";
  if (!write_file(dir + "whatif.csv", csv(set, unsigned(boxes))) || !write_file(dir + "summary.txt", sum) ||
      !write_file(dir + "hidden.gp", gnuplot_script(set, "hidden", 1)) ||
      !write_file(dir + "flows.gp", gnuplot_script(set, "flows", 1)) ||
      (boxes > 1 && !write_file(dir + "boxes.gp", gnuplot_script(set, "boxes", unsigned(boxes))))) {
    std::fprintf(stderr, "amon whatif: cannot write into %s: %s\n", out.c_str(), std::strerror(errno));
    return 1;
  }
  std::string why;
  if (!run_gnuplot(out, "hidden.gp", why) || !run_gnuplot(out, "flows.gp", why) ||
      (boxes > 1 && !run_gnuplot(out, "boxes.gp", why))) {
    std::fprintf(stderr, "amon whatif: plots not drawn: %s (whatif.csv and the .gp scripts are in %s)\n",
                 why.c_str(), out.c_str());
    return 1;
  }
  return 0;
}

}  // namespace amon
