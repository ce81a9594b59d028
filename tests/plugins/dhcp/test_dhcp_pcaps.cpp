// DHCP locations against tshark, the independent oracle: every occurrence the
// parser reports is a field tshark dissects at the same offset and length,
// and every identifying field tshark dissects lies inside one. Then the
// messages are rewritten as a protecting policy would and dissected again:
// same fields at the same places, none of the original values left, no new
// malformed or error reports. Real captures from ../shared/pcaps and crafted
// messages (options tshark has but the captures lack: 81, 82, 97, overload,
// relays, IA_PD, ...) and amon-gen's leases (every client profile).
#include <catch2/catch.hpp>
#include <pcap/pcap.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "amon_dhcp.hpp"
#include "dhcp_samples.hpp"
#include "keyed_hash.h"
#include "pcap_walk.hpp"
#include "scratch.h"

using namespace amon;
using namespace amon::l7test;
using dhcp::Field;
using dhcp::Kind;

namespace {

struct TField {
  std::string name;
  long pos = 0, size = 0;
  std::string show, value;
  int opt = -1;  // the innermost option whose type tshark showed last
  int sub = -1;  // DHCPv6 option 17: the sub-option code tshark showed last
};

struct TPkt {
  uint64_t frame = 0;
  bool v6 = false;
  long base = 0;  // frame offset of the DHCP message
  Bytes payload;
  std::vector<TField> f;
};

std::string attr(const std::string& line, const char* key) {
  const std::string k = std::string(" ") + key + "=\"";
  const size_t a = line.find(k);
  if (a == std::string::npos) return {};
  const size_t s = a + k.size(), e = line.find('"', s);
  return e == std::string::npos ? std::string() : line.substr(s, e - s);
}

Bytes unhex(const std::string& h) {
  Bytes b;
  for (size_t i = 0; i + 1 < h.size(); i += 2) b.push_back(uint8_t(std::stoi(h.substr(i, 2), nullptr, 16)));
  return b;
}

// tshark's PDML of the DHCP packets of a file, one TPkt per DHCP message
// found right at the start of a UDP payload (tunnelled ones included).
std::vector<TPkt> dissect(const std::string& path) {
  std::vector<TPkt> out;
  const auto lines = run_lines("tshark -n -r '" + path + "' -Y 'dhcp || dhcpv6' -T pdml 2>/dev/null");
  uint64_t frame = 0;
  long upos = -1;
  std::string uval;
  TPkt* cur = nullptr;
  int opt = -1, sub = -1;
  for (const std::string& l : lines) {
    if (l.find("<packet>") != std::string::npos) {
      cur = nullptr;
      upos = -1;
      continue;
    }
    const bool proto = l.find("<proto ") != std::string::npos, field = l.find("<field ") != std::string::npos;
    if (!proto && !field) continue;
    const std::string name = attr(l, "name");
    if (field && name == "frame.number") frame = std::stoull(attr(l, "show"));
    if (field && name == "udp.payload") {
      upos = std::stol(attr(l, "pos"));
      uval = attr(l, "value");
      continue;
    }
    if (proto && (name == "dhcp" || name == "dhcpv6") && std::stol(attr(l, "pos")) == upos) {
      out.emplace_back();
      cur = &out.back();
      cur->frame = frame;
      cur->v6 = name == "dhcpv6";
      cur->base = upos;
      cur->payload = unhex(uval);
      opt = -1;
      continue;
    }
    if (!cur || !field || name.rfind("dhcp", 0) != 0) continue;
    TField t;
    t.name = name;
    t.pos = std::stol(attr(l, "pos")) - cur->base;
    t.size = std::stol(attr(l, "size"));
    t.show = attr(l, "show");
    t.value = attr(l, "value");
    if (name == "dhcp.option.type" || name == "dhcpv6.option.type") opt = std::atoi(t.show.c_str());
    // DHCPv6 options open with type_str (the whole option) before their type.
    if (name == "dhcpv6.option.type_str" && t.value.size() >= 4) opt = std::stoi(t.value.substr(0, 4), nullptr, 16);
    t.opt = opt;
    if (name == "dhcpv6.vendoropts.enterprise.option_code") sub = std::atoi(t.show.c_str());
    t.sub = sub;
    cur->f.push_back(std::move(t));
  }
  return out;
}

// tshark fields that carry a client's identity: each must lie inside an occurrence.
bool identifying(const TField& t) {
  static const std::set<std::string> names = {
      "dhcp.hw.mac_addr", "dhcp.ip.client", "dhcp.ip.your", "dhcp.option.requested_ip_address",
      "dhcp.option.hostname", "dhcp.fqdn.name", "dhcp.option.vendor_class_id", "dhcp.client_id.uuid",
      "dhcp.option.agent_information_option.agent_circuit_id",
      "dhcp.option.agent_information_option.agent_remote_id", "dhcpv6.duid.bytes",
      "dhcpv6.duidllt.link_layer_addr", "dhcpv6.duidll.link_layer_addr", "dhcpv6.iaaddr.ip",
      "dhcpv6.iaprefix.pref_addr", "dhcpv6.peeraddr", "dhcpv6.client_domain", "dhcpv6.vendorclass.data",
      "dhcpv6.interface_id", "dhcpv6.remoteid_enterprise_id", "dhcpv6.subscriber_id",
      "dhcp.option.vi.tr111.device_serial_number", "dhcp.option.vi.tr111.gateway_serial_number",
      "dhcp.option.vi.tr111.device_product_class", "dhcp.option.vi.tr111.gateway_product_class",
      "dhcp.option.vi_class.data"};
  if (t.size <= 0) return false;
  return names.count(t.name) || (t.name == "dhcp.option.value" && t.opt == 61) ||
         (t.name == "dhcpv6.vendoropts.enterprise.option_data" && (t.sub == 12 || t.sub == 13));
}

// The tshark field names an occurrence may correspond to, and whether tshark
// shows the value without the occurrence's type tag.
bool matches(const dhcp::Occurrence& o, const TField& t) {
  auto at = [&](long off, long len) { return t.pos == off && t.size == len; };
  const bool exact = at(o.off, o.len), untagged = at(o.off + o.tag_len, o.len - o.tag_len);
  const std::string& n = t.name;
  switch (o.field) {
    case Field::Addr:
      if (o.kind == Kind::Addr4)
        return exact && (o.option == 50 ? n == "dhcp.option.requested_ip_address"
                                        : (n == "dhcp.ip.client" || n == "dhcp.ip.your"));
      if (o.kind == Kind::Prefix6) return exact && n == "dhcpv6.iaprefix.pref_addr";
      return exact && n == (o.option == 5 ? "dhcpv6.iaaddr.ip" : "dhcpv6.peeraddr");
    case Field::Chaddr:
      if (o.option == 79)  // tshark 4.0 shows the option but does not dissect it
        return n == "dhcpv6.option.type_str" && t.opt == 79 && at(o.off - 6, o.len + 6);
      return exact && (n == "dhcp.hw.mac_addr" || n == "dhcp.hw.addr");
    case Field::Hostname:
      return exact && n == (o.option == 12 ? "dhcp.option.hostname"
                            : o.option == 81 ? "dhcp.fqdn.name" : "dhcpv6.client_domain");
    case Field::ClientId:
      if (o.option == 1) return exact && n == "dhcpv6.duid.bytes" && t.opt == 1;
      if (o.option == 125)
        return exact && (n == "dhcp.option.vi.tr111.device_serial_number" ||
                         n == "dhcp.option.vi.tr111.gateway_serial_number");
      if (o.option == 17) return exact && n == "dhcpv6.vendoropts.enterprise.option_data" && t.sub == 12;
      return exact && n == "dhcp.option.value" && t.opt == o.option;
    case Field::ServerId: return exact && n == "dhcpv6.duid.bytes" && t.opt == 2;
    case Field::VendorClass:
      if (o.option == 60) return exact && n == "dhcp.option.vendor_class_id";
      if (o.option == 125)
        return exact && (n == "dhcp.option.vi.tr111.device_product_class" ||
                         n == "dhcp.option.vi.tr111.gateway_product_class");
      if (o.option == 17) return exact && n == "dhcpv6.vendoropts.enterprise.option_data" && t.sub == 13;
      // tshark shows an enterprise's whole vendor-class-data, items with their length bytes.
      if (o.option == 124) return n == "dhcp.option.vi_class.data" && t.pos <= o.off && t.pos + t.size >= o.off + o.len;
      // tshark 4.0 takes the first vendor-class-data item to the option's
      // end (RFC 8415 21.16 has length-prefixed items): its field holds ours.
      return n == "dhcpv6.vendorclass.data" && t.pos <= o.off && t.pos + t.size >= o.off + o.len;
    case Field::RelayId:
      if (o.option == 82)
        return exact && (n == "dhcp.option.agent_information_option.agent_circuit_id" ||
                         n == "dhcp.option.agent_information_option.agent_remote_id");
      if (o.option == 18) return exact && n == "dhcpv6.interface_id";
      if (o.option == 37) return untagged && n == "dhcpv6.remoteid_enterprise_id";
      return exact && n == "dhcpv6.subscriber_id";
  }
  return false;
}

std::map<uint64_t, Bytes> read_frames(const std::string& path) {
  std::map<uint64_t, Bytes> frames;
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* pc = pcap_open_offline(path.c_str(), err);
  if (!pc) return frames;
  pcap_pkthdr* h;
  const u_char* d;
  uint64_t n = 0;
  while (pcap_next_ex(pc, &h, &d) == 1) frames[++n] = Bytes(d, d + h->caplen);
  pcap_close(pc);
  return frames;
}

void protect_all(uint8_t* m, const dhcp::Result& r, KeyedHash& h) {
  for (unsigned i = 0; i < r.n_occ; ++i) {
    const dhcp::Occurrence& o = r.occ[i];
    switch (o.kind) {
      case Kind::NameText:
      case Kind::NameWire: dhcp::rewrite_name(m, r, o, names::Decision::mask(0x5eed)); break;
      case Kind::Bytes:
      case Kind::Text: dhcp::hash_identifier(h, m, o); break;
      case Kind::Mac: h.anon_mac(m + o.off, m + o.off); break;
      default:
        for (unsigned k = 0; k < o.len; ++k) m[o.off + k] = uint8_t(~m[o.off + k]);
        dhcp::fix_prefix(m, o);
    }
  }
}

struct Totals {
  unsigned msgs = 0, ok = 0, failed = 0, occ = 0, matched = 0, exempt = 0, ident = 0, rewritten = 0;
};

// The whole check on one file; `tmp` receives the rewritten capture.
Totals check_file(const std::string& path, const std::string& tmp) {
  Totals t;
  const std::vector<TPkt> pk = dissect(path);
  const auto frames = read_frames(path);
  auto r = std::make_unique<dhcp::Result>();
  KeyedHash h([] {
    std::array<uint8_t, 16> k{};
    k[3] = 0x42;
    return k;
  }());
  std::vector<Bytes> out;
  std::vector<const TPkt*> out_src;
  for (const TPkt& p : pk) {
    CAPTURE(path, p.frame);
    ++t.msgs;
    const dhcp::Version v = p.v6 ? dhcp::Version::V6 : dhcp::Version::V4;
    if (dhcp::parse(p.payload.data(), p.payload.size(), v, *r) != dhcp::Status::Ok) {
      // Fail closed is always allowed; the fuzzed capture has such messages.
      ++t.failed;
      continue;
    }
    ++t.ok;
    // Spans tshark does not dissect (DHCPv4 inside DHCPv6 option 87).
    std::vector<std::pair<long, long>> opaque;
    for (const TField& f : p.f)
      if (f.name == "dhcpv6.option.type_str" && f.opt == 87) opaque.push_back({f.pos + 4, f.pos + f.size});
    for (unsigned i = 0; i < r->n_occ; ++i) {
      const dhcp::Occurrence& o = r->occ[i];
      ++t.occ;
      bool in_opaque = false;
      for (auto [a, e] : opaque) in_opaque |= o.off >= a && o.off + o.len <= e;
      if (in_opaque) {
        ++t.exempt;
        continue;
      }
      const TField* m = nullptr;
      for (const TField& f : p.f)
        if (matches(o, f)) m = &f;
      CAPTURE(i, dhcp::field_name(o.field), int(o.kind), o.option, o.off, o.len);
      CHECK(m != nullptr);
      if (!m) continue;
      ++t.matched;
      // Names: the same text as tshark's (when tshark shows it unescaped).
      if (o.kind == Kind::NameText || o.kind == Kind::NameWire) {
        std::string s = m->show;
        for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
        if (!s.empty() && s.back() == '.') s.pop_back();
        bool plain = s.find('&') == std::string::npos && s.find('\\') == std::string::npos;
        for (unsigned k = 0; k < o.len; ++k) plain &= p.payload[o.off + k] >= 0x20 && p.payload[o.off + k] < 0x7f;
        if (plain && o.kind == Kind::NameText) CHECK(std::string(r->name_text(o)) == s);
        if (plain && o.kind == Kind::NameWire) CHECK(std::string(r->name_text(o)) == s);
      }
    }
    for (const TField& f : p.f) {
      if (!identifying(f)) continue;
      ++t.ident;
      bool inside = false;
      for (unsigned i = 0; i < r->n_occ && !inside; ++i)
        inside = f.pos >= r->occ[i].off && f.pos + f.size <= r->occ[i].off + r->occ[i].len;
      const long gap = f.name == "dhcpv6.vendorclass.data" ? 2 : f.name == "dhcp.option.vi_class.data" ? 1 : 0;
      if (!inside && gap) {
        // tshark's one field over several length-prefixed items (see
        // matches()): every byte is in an item but the items' lengths.
        std::vector<bool> cov(size_t(f.size), false);
        for (unsigned i = 0; i < r->n_occ; ++i)
          for (long k = 0; k < f.size; ++k)
            if (f.pos + k >= r->occ[i].off && f.pos + k < r->occ[i].off + r->occ[i].len) cov[size_t(k)] = true;
        inside = true;
        for (long k = 0; k < f.size;) {
          if (cov[size_t(k)]) { ++k; continue; }
          for (long g = 0; g < gap; ++g) inside &= k + g < f.size && !cov[size_t(k + g)];
          inside &= k + gap < f.size && cov[size_t(k + gap)];
          k += gap;
        }
      }
      CAPTURE(f.name, f.pos, f.size, f.show);
      CHECK(inside);
    }
    auto it = frames.find(p.frame);
    REQUIRE(it != frames.end());
    Bytes fr = it->second;
    REQUIRE(fr.size() >= size_t(p.base) + p.payload.size());
    REQUIRE(std::memcmp(fr.data() + p.base, p.payload.data(), p.payload.size()) == 0);
    protect_all(fr.data() + p.base, *r, h);
    out.push_back(std::move(fr));
    out_src.push_back(&p);
  }
  if (out.empty()) return t;
  // Dissect the rewritten messages again.
  REQUIRE(dhcpb::write_pcap(tmp, out));
  const std::vector<TPkt> pk2 = dissect(tmp);
  REQUIRE(pk2.size() >= out.size());
  size_t j = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const TPkt& a = *out_src[i];
    while (j < pk2.size() && pk2[j].frame != i + 1) ++j;
    REQUIRE(j < pk2.size());
    const TPkt& b = pk2[j];
    CAPTURE(path, a.frame);
    for (const TField& f : a.f) {
      if (!identifying(f)) continue;
      const TField* g = nullptr;
      for (const TField& x : b.f)
        if (x.name == f.name && x.pos == f.pos && x.size == f.size) g = &x;
      CAPTURE(f.name, f.pos, f.show);
      REQUIRE(g != nullptr);
      CHECK(g->value != f.value);
      // Nowhere in the rewritten message's dissection (4 bytes and more, not all zero).
      if (f.value.size() >= 8 && f.value.find_first_not_of('0') != std::string::npos)
        for (const TField& x : b.f)
          if (x.value.find(f.value) != std::string::npos) {
            CAPTURE(x.name, x.pos, x.value);
            CHECK(false);
          }
    }
    ++t.rewritten;
  }
  // No dissection problem the input did not already have: frames tshark
  // calls malformed, and error-level expert infos (severity 0x800000).
  auto problems = [](const std::string& file, const char* filter) {
    unsigned malformed = 0, errors = 0;
    for (const auto& l : run_lines("tshark -n -r '" + file + "' -Y '" + filter +
                                   "' -T fields -e frame.number -e _ws.expert.severity 2>/dev/null")) {
      for (size_t at = l.find("8388608"); at != std::string::npos; at = l.find("8388608", at + 1)) ++errors;
    }
    malformed = unsigned(run_lines("tshark -n -r '" + file + "' -Y '(" + filter + ") && _ws.malformed' 2>/dev/null").size());
    return std::pair{malformed, errors};
  };
  const auto before = problems(path, "dhcp || dhcpv6"), after = problems(tmp, "frame");
  CHECK(after.first <= before.first);
  CHECK(after.second <= before.second);
  return t;
}

// A private directory for the pcaps written, removed at exit.
const std::string& tmpdir() { return amon_test::scratch_dir(); }

void report(const std::string& name, const Totals& t) {
  std::printf("%s: %u messages, %u parsed (%u fail closed), %u occurrences, %u matched by tshark, %u inside "
              "DHCPv4-over-DHCPv6, %u identifying tshark fields covered, %u rewritten and re-dissected\n",
              name.c_str(), t.msgs, t.ok, t.failed, t.occ, t.matched, t.exempt, t.ident, t.rewritten);
}

}  // namespace

TEST_CASE("dhcp vs tshark: crafted messages") {
  if (!have_tshark()) {
    WARN("tshark not installed");
    return;
  }
  std::vector<Bytes> frames;
  for (const auto& s : dhcpb::samples()) frames.push_back(dhcpb::sample_frame(s));
  const std::string in = tmpdir() + "/crafted.pcap";
  REQUIRE(dhcpb::write_pcap(in, frames));
  const Totals t = check_file(in, tmpdir() + "/crafted-out.pcap");
  report("crafted", t);
  CHECK(t.msgs == frames.size());
  CHECK(t.ok == frames.size());
  CHECK(t.matched + t.exempt == t.occ);
  CHECK(t.exempt > 0);
  CHECK(t.rewritten == frames.size());
}

TEST_CASE("dhcp vs tshark: real captures") {
  if (!have_tshark()) {
    WARN("tshark not installed");
    return;
  }
  struct F {
    const char* name;
    unsigned min_ok;
  };
  // mixed-capture2: phones' DHCP with option overload; ndpi-2006: a fuzzed
  // request and its ACK; erspan: DHCPv6 Solicits inside GRE; teredo: one request.
  for (const F f : {F{"mixed-capture2.pcap", 290}, F{"malformed-fuzz-ndpi-2006.pcap", 1},
                    F{"tunnel-erspan.pcap", 4}, F{"tunnel-teredo.pcap", 1}}) {
    const std::string path = pcap_path(f.name);
    if (access(path.c_str(), R_OK) != 0) {
      WARN("missing capture " << path);
      continue;
    }
    const Totals t = check_file(path, tmpdir() + "/out-" + f.name);
    report(f.name, t);
    CHECK(t.ok >= f.min_ok);
    CHECK(t.matched == t.occ);
    CHECK(t.rewritten == t.ok);
  }
}

TEST_CASE("dhcp vs tshark: amon-gen leases") {
  if (!have_tshark()) {
    WARN("tshark not installed");
    return;
  }
  const std::string in = tmpdir() + "/gen.pcap";
  REQUIRE(std::system((std::string(AMON_GEN_BIN) + " --out " + in +
                       " --seed 21 --packets 3000 --dhcp 1 --v6 0.4 --vlan 0.2 --quiet").c_str()) == 0);
  const Totals t = check_file(in, tmpdir() + "/gen-out.pcap");
  report("amon-gen --dhcp 1", t);
  CHECK(t.msgs >= 100);
  CHECK(t.ok == t.msgs);
  CHECK(t.matched == t.occ);
  CHECK(t.rewritten == t.ok);
}
