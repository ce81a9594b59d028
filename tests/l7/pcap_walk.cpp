#include "pcap_walk.hpp"

#include <pcap/pcap.h>

#include <cstdio>
#include <cstring>

namespace amon::l7test {

static uint16_t be16(const uint8_t* p) { return uint16_t(p[0] << 8 | p[1]); }
static uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

bool walk(const std::string& path, const std::function<void(const Pkt&)>& fn) {
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* pc = pcap_open_offline(path.c_str(), err);
  if (!pc) return false;
  pcap_pkthdr* h;
  const u_char* d;
  uint64_t frame = 0;
  int rc;
  while ((rc = pcap_next_ex(pc, &h, &d)) == 1) {
    ++frame;
    const uint8_t* p = d;
    uint32_t cap = h->caplen;
    if (cap < 14) continue;
    uint16_t et = be16(p + 12);
    uint32_t off = 14;
    while ((et == 0x8100 || et == 0x88a8 || et == 0x9100) && cap >= off + 4) {
      et = be16(p + off + 2);
      off += 4;
    }
    Pkt k{};
    k.frame = frame;
    uint8_t proto;
    uint32_t l4, l4_end;  // l4_end per IP length, before caplen clipping
    if (et == 0x0800) {
      if (cap < off + 20) continue;
      const uint8_t* ip = p + off;
      const uint32_t ihl = (ip[0] & 0xf) * 4u, tot = be16(ip + 2);
      if ((ip[0] >> 4) != 4 || ihl < 20 || tot < ihl || cap < off + ihl) continue;
      const uint16_t fo = be16(ip + 6);
      if (fo & 0x3fff) continue;  // any fragment: payload incomplete
      proto = ip[9];
      k.src.assign(reinterpret_cast<const char*>(ip + 12), 4);
      k.dst.assign(reinterpret_cast<const char*>(ip + 16), 4);
      l4 = off + ihl;
      l4_end = off + tot;
    } else if (et == 0x86dd) {
      if (cap < off + 40) continue;
      const uint8_t* ip = p + off;
      k.src.assign(reinterpret_cast<const char*>(ip + 8), 16);
      k.dst.assign(reinterpret_cast<const char*>(ip + 24), 16);
      proto = ip[6];
      l4 = off + 40;
      l4_end = l4 + be16(ip + 4);
      bool frag = false;
      while ((proto == 0 || proto == 43 || proto == 60 || proto == 44) && cap >= l4 + 8) {
        if (proto == 44) {
          if (be16(p + l4 + 2) & 0xfff9) frag = true;  // offset != 0 or M set
          proto = p[l4];
          l4 += 8;
        } else {
          const uint32_t n = (p[l4 + 1] + 1u) * 8;
          proto = p[l4];
          l4 += n;
        }
      }
      if (frag) continue;
    } else {
      continue;
    }
    const bool cut = cap < l4_end;
    const uint32_t avail_end = cut ? cap : l4_end;
    if (proto == 17) {
      if (avail_end < l4 + 8) continue;
      k.tcp = false;
      k.sport = be16(p + l4);
      k.dport = be16(p + l4 + 2);
      const uint32_t ulen = be16(p + l4 + 4);
      k.payload = p + l4 + 8;
      k.ip_payload_after_udp = avail_end - l4 - 8;
      uint32_t n = ulen >= 8 ? ulen - 8 : 0;
      if (l4 + 8 + n > avail_end) n = avail_end - l4 - 8;
      k.len = n;
      k.truncated = cut;
    } else if (proto == 6) {
      if (avail_end < l4 + 20) continue;
      k.tcp = true;
      k.sport = be16(p + l4);
      k.dport = be16(p + l4 + 2);
      k.seq = be32(p + l4 + 4);
      k.tcp_flags = p[l4 + 13];
      const uint32_t doff = (p[l4 + 12] >> 4) * 4u;
      if (doff < 20 || avail_end < l4 + doff) continue;
      k.payload = p + l4 + doff;
      k.len = avail_end - l4 - doff;
      k.truncated = cut;
    } else {
      continue;
    }
    fn(k);
  }
  pcap_close(pc);
  return true;
}

std::map<std::string, Stream> tcp_streams(const std::string& path, size_t cap) {
  std::map<std::string, Stream> out;
  walk(path, [&](const Pkt& k) {
    if (!k.tcp || k.truncated) return;
    char ports[32];
    std::snprintf(ports, sizeof ports, ":%u>%u", k.sport, k.dport);
    std::string key;
    for (char c : k.src) { char b[3]; std::snprintf(b, 3, "%02x", uint8_t(c)); key += b; }
    key += '-';
    for (char c : k.dst) { char b[3]; std::snprintf(b, 3, "%02x", uint8_t(c)); key += b; }
    key += ports;
    Stream& s = out[key];
    s.sport = k.sport;
    s.dport = k.dport;
    if (k.tcp_flags & 0x02) {  // SYN
      s.have_isn = true;
      s.next = k.seq + 1;
      s.data.clear();
      s.pending.clear();
      return;
    }
    if (k.len == 0) return;
    if (!s.have_isn) {
      s.have_isn = true;
      s.next = k.seq;
      s.first_frame = k.frame;
    }
    if (!s.first_frame) s.first_frame = k.frame;
    s.pending.emplace(k.seq, std::vector<uint8_t>(k.payload, k.payload + k.len));
    for (;;) {
      bool progressed = false;
      for (auto it = s.pending.begin(); it != s.pending.end();) {
        const int32_t rel = int32_t(it->first - s.next);
        const int32_t n = int32_t(it->second.size());
        if (rel <= 0 && rel + n > 0) {
          if (s.data.size() < cap) s.data.insert(s.data.end(), it->second.begin() - rel, it->second.end());
          s.next += uint32_t(rel + n);
          it = s.pending.erase(it);
          progressed = true;
        } else if (rel + n <= 0) {
          it = s.pending.erase(it);  // retransmit
        } else {
          ++it;
        }
      }
      if (!progressed) break;
    }
  });
  return out;
}

std::vector<std::string> run_lines(const std::string& cmd) {
  std::vector<std::string> lines;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return lines;
  std::string cur;
  int c;
  while ((c = std::fgetc(f)) != EOF) {
    if (c == '\n') { lines.push_back(cur); cur.clear(); }
    else cur += char(c);
  }
  if (!cur.empty()) lines.push_back(cur);
  pclose(f);
  return lines;
}

bool have_tshark() {
  static const bool ok = std::system("tshark --version >/dev/null 2>&1") == 0;
  return ok;
}

std::string pcap_path(const std::string& name) { return std::string(AMON_L7_PCAPS_DIR) + "/" + name; }

}  // namespace amon::l7test
