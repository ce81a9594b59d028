#include "wire.hpp"

#include <algorithm>
#include <cstring>

namespace amon::gen {

uint32_t csum_add(const uint8_t* p, size_t n, uint32_t acc) {
  uint64_t s = acc;
  size_t i = 0;
  for (; i + 1 < n; i += 2) s += static_cast<uint32_t>(p[i]) << 8 | p[i + 1];
  if (i < n) s += static_cast<uint32_t>(p[i]) << 8;
  while (s >> 32) s = (s & 0xffffffffULL) + (s >> 32);
  return static_cast<uint32_t>(s);
}

uint16_t csum_fold(uint32_t acc) {
  while (acc >> 16) acc = (acc & 0xffff) + (acc >> 16);
  return static_cast<uint16_t>(acc);
}

static inline void put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
static inline void put32(uint8_t* p, uint32_t v) {
  put16(p, static_cast<uint16_t>(v >> 16));
  put16(p + 2, static_cast<uint16_t>(v));
}

void FlowBuf::sort_by_time() {
  std::stable_sort(pkts.begin(), pkts.end(), [](const PktRef& a, const PktRef& b) { return a.ts < b.ts; });
}

void emit(FlowBuf& fb, uint64_t ts, Path& p, bool c2s, uint8_t proto, const uint8_t* l4, size_t l4len) {
  const size_t l2 = 14 + 4u * p.ntags;
  const size_t l3 = p.v6 ? 40 : 20;
  const size_t len = l2 + l3 + l4len;
  const size_t frame = std::max<size_t>(len, 60);
  const size_t off = fb.bytes.size();
  fb.bytes.resize(off + frame);  // zero-filled: the padding
  uint8_t* f = fb.bytes.data() + off;

  std::memcpy(f, c2s ? p.smac : p.cmac, 6);
  std::memcpy(f + 6, c2s ? p.cmac : p.smac, 6);
  uint8_t* q = f + 12;
  for (unsigned i = 0; i < p.ntags; ++i) {
    put16(q, p.tpid[i]);
    put16(q + 2, p.tci[i]);
    q += 4;
  }
  put16(q, p.v6 ? 0x86dd : 0x0800);
  uint8_t* ip = q + 2;
  const uint8_t* src = c2s ? p.cip : p.sip;
  const uint8_t* dst = c2s ? p.sip : p.cip;
  uint32_t pseudo = 0;
  if (p.v6) {
    put32(ip, 0x60000000u | ((c2s ? p.cflow : p.sflow) & 0xfffff));
    put16(ip + 4, static_cast<uint16_t>(l4len));
    ip[6] = proto;
    ip[7] = c2s ? p.cttl : p.sttl;
    std::memcpy(ip + 8, src, 16);
    std::memcpy(ip + 24, dst, 16);
    pseudo = csum_add(src, 16, 0);
    pseudo = csum_add(dst, 16, pseudo);
    pseudo += static_cast<uint32_t>(l4len) + proto;
  } else {
    ip[0] = 0x45;
    ip[1] = 0;
    put16(ip + 2, static_cast<uint16_t>(20 + l4len));
    put16(ip + 4, c2s ? p.cipid++ : p.sipid++);
    put16(ip + 6, 0x4000);  // DF, as Linux sets on TCP, DNS and ping alike
    ip[8] = c2s ? p.cttl : p.sttl;
    ip[9] = proto;
    std::memcpy(ip + 12, src, 4);
    std::memcpy(ip + 16, dst, 4);
    put16(ip + 10, static_cast<uint16_t>(~csum_fold(csum_add(ip, 20, 0))));
    pseudo = csum_add(src, 4, 0);
    pseudo = csum_add(dst, 4, pseudo);
    pseudo += static_cast<uint32_t>(l4len) + proto;
  }
  uint8_t* l = ip + l3;
  std::memcpy(l, l4, l4len);
  size_t cks_at = proto == kTcp ? 16 : proto == kUdp ? 6 : 2;
  uint32_t acc = proto == kIcmp ? 0 : pseudo;
  uint16_t c = static_cast<uint16_t>(~csum_fold(csum_add(l, l4len, acc)));
  if (proto == kUdp && c == 0) c = 0xffff;  // 0 means "no checksum" in UDP
  put16(l + cks_at, c);
  fb.pkts.push_back({ts, static_cast<uint32_t>(off), static_cast<uint32_t>(frame)});
  if (p.tunnel != Tunnel::None) wrap_tunnel(fb, off, p, c2s);
}

void wrap_tunnel(FlowBuf& fb, size_t off, Path& p, bool c2s) {
  PktRef& pr = fb.pkts.back();
  const uint8_t* f = fb.bytes.data() + off;
  const size_t l2 = 14 + 4u * p.ntags;
  const uint8_t* ip = f + l2;
  const size_t iplen = p.v6 ? 40u + (ip[4] << 8 | ip[5]) : (ip[2] << 8 | ip[3]);
  uint32_t h = 2166136261u;  // FNV-1a of the client's address: its tunnel
  for (int i = 0; i < 16; ++i) h = (h ^ p.cip[i]) * 16777619u;
  const bool l2_inner = p.tunnel == Tunnel::Vxlan || p.tunnel == Tunnel::Geneve;
  // What the tunnel carries: the whole frame (padding and tags included) or the IP packet.
  std::vector<uint8_t> inner(l2_inner ? f : ip, l2_inner ? f + pr.len : ip + iplen);
  std::vector<uint8_t> hdr;  // UDP payload's header, or GRE's
  auto add16 = [&hdr](unsigned v) { hdr.push_back(uint8_t(v >> 8)), hdr.push_back(uint8_t(v)); };
  auto add32 = [&](uint32_t v) { add16(v >> 16), add16(v & 0xffff); };
  uint8_t proto = kUdp;
  uint16_t sport = 0, dport = 0;
  const uint32_t vni = 1000 + h % 4;
  switch (p.tunnel) {
    case Tunnel::GtpU:  // G-PDU; a TEID per direction, as the two ends assign them
      sport = dport = 2152;
      hdr = {0x30, 0xff};
      add16(unsigned(inner.size()));
      add32(c2s ? (h | 1) : (h | 1) ^ 0x80000000u);
      break;
    case Tunnel::Vxlan:
      sport = uint16_t(49152 + (h & 0x3fff)), dport = 4789;
      add32(0x08000000), add32(vni << 8);
      break;
    case Tunnel::Geneve:  // one 4-byte option (class 0x0108, type 1)
      sport = uint16_t(49152 + (h & 0x3fff)), dport = 6081;
      add16(0x0200), add16(0x6558), add32(vni << 8);
      add16(0x0108), add16(0x0101), add32(h);
      break;
    case Tunnel::Gre:
      proto = 47;
      add16(0x2000), add16(p.v6 ? 0x86dd : 0x0800), add32(h);
      break;
    case Tunnel::IpIp: proto = p.v6 ? 41 : 4; break;
    case Tunnel::None: return;
  }
  const size_t udp = proto == kUdp ? 8 : 0;
  const size_t olen = 20 + udp + hdr.size() + inner.size();
  std::vector<uint8_t> out(std::max<size_t>(14 + olen, 60));
  uint8_t* o = out.data();
  std::memcpy(o, f, 12);  // the frame's MACs
  put16(o + 12, 0x0800);
  uint8_t* oip = o + 14;
  const uint8_t access[4] = {100, 64, uint8_t(h >> 8), uint8_t(h)}, core[4] = {100, 127, 0, 1};
  oip[0] = 0x45;
  put16(oip + 2, uint16_t(olen));
  put16(oip + 6, 0x4000);
  oip[8] = 64;
  oip[9] = proto;
  std::memcpy(oip + 12, c2s ? access : core, 4);
  std::memcpy(oip + 16, c2s ? core : access, 4);
  put16(oip + 10, static_cast<uint16_t>(~csum_fold(csum_add(oip, 20, 0))));
  uint8_t* q = oip + 20;
  if (udp) {
    put16(q, sport), put16(q + 2, dport), put16(q + 4, uint16_t(udp + hdr.size() + inner.size()));
  }
  // IP in IP has no tunnel header: an empty vector's data() may be null,
  // which memcpy must not be given even for 0 bytes.
  if (!hdr.empty()) std::memcpy(q + udp, hdr.data(), hdr.size());
  if (!inner.empty()) std::memcpy(q + udp + hdr.size(), inner.data(), inner.size());
  if (udp && p.tunnel_csum) {
    const size_t ul = udp + hdr.size() + inner.size();
    uint32_t acc = csum_add(oip + 12, 8, 0) + static_cast<uint32_t>(ul) + kUdp;
    uint16_t c = static_cast<uint16_t>(~csum_fold(csum_add(q, ul, acc)));
    put16(q + 6, c == 0 ? 0xffff : c);
  }
  fb.bytes.resize(off);
  if (!p.tunnel_mtu || olen <= p.tunnel_mtu) {
    fb.bytes.insert(fb.bytes.end(), out.begin(), out.end());
    pr.len = static_cast<uint32_t>(out.size());
    return;
  }
  // A link MTU below the datagram: the tunnel's ingress router fragments
  // the outer IPv4 datagram (RFC 791), 8-byte aligned pieces, the first
  // carrying the outer UDP/GRE header. Each fragment is a frame of its own,
  // 1 ns apart so their order survives sorting.
  const size_t step = (size_t(p.tunnel_mtu) - 20) & ~size_t(7);
  const uint16_t id = p.tunnel_ipid++;
  const uint64_t ts = pr.ts;
  fb.pkts.pop_back();
  for (size_t at = 0, i = 0; at < olen - 20; at += step, ++i) {
    const size_t n = std::min(step, olen - 20 - at);
    const bool more = at + n < olen - 20;
    const size_t flen = std::max<size_t>(14 + 20 + n, 60);
    const size_t foff = fb.bytes.size();
    fb.bytes.resize(foff + flen, 0);
    uint8_t* fr = fb.bytes.data() + foff;
    std::memcpy(fr, o, 14 + 20);
    uint8_t* fip = fr + 14;
    put16(fip + 2, uint16_t(20 + n));
    put16(fip + 4, id);
    put16(fip + 6, uint16_t((more ? 0x2000 : 0) | (at / 8)));
    put16(fip + 10, 0);
    put16(fip + 10, static_cast<uint16_t>(~csum_fold(csum_add(fip, 20, 0))));
    std::memcpy(fip + 20, oip + 20 + at, n);
    fb.pkts.push_back({ts + i, static_cast<uint32_t>(foff), static_cast<uint32_t>(flen)});
  }
}

Tcp::Tcp(FlowBuf& f, Path& path, Rng& r, uint16_t client_port, uint16_t server_port)
    : fb(f), p(path), cport(client_port), sport(server_port) {
  cnxt = static_cast<uint32_t>(r.next());
  snxt = static_cast<uint32_t>(r.next());
  cwin = static_cast<uint16_t>(r.range(250, 2050));
  swin = static_cast<uint16_t>(r.range(230, 600));
  mss = p.v6 ? 1440 : 1460;
}

void Tcp::seg(uint64_t ts, bool c2s, uint8_t flags, const uint8_t* data, size_t n) {
  uint8_t b[20 + 1500];
  std::memset(b, 0, 20);
  put16(b, c2s ? cport : sport);
  put16(b + 2, c2s ? sport : cport);
  uint32_t& mine = c2s ? cnxt : snxt;
  put32(b + 4, mine);
  put32(b + 8, (flags & kAck) ? (c2s ? snxt : cnxt) : 0);
  b[12] = 5 << 4;
  b[13] = flags;
  put16(b + 14, c2s ? cwin : swin);
  if (n) std::memcpy(b + 20, data, n);  // data may be null for bare segments
  mine += static_cast<uint32_t>(n + ((flags & kFin) ? 1 : 0));
  emit(fb, ts, p, c2s, kTcp, b, 20 + n);
}

void Tcp::syn(uint64_t ts, bool c2s, uint8_t flags) {
  // MSS, window scale and SACK permitted, without timestamps (as Windows stacks
  // send them): later segments then need no options to stay consistent.
  uint8_t b[32]{};
  put16(b, c2s ? cport : sport);
  put16(b + 2, c2s ? sport : cport);
  uint32_t& mine = c2s ? cnxt : snxt;
  put32(b + 4, mine);
  if (flags & kAck) put32(b + 8, cnxt);
  b[12] = 8 << 4;
  b[13] = flags;
  put16(b + 14, c2s ? 64240 : 65160);
  const uint8_t opts[12] = {2, 4, static_cast<uint8_t>(mss >> 8), static_cast<uint8_t>(mss), 1, 3, 3, 8, 1, 1, 4, 2};
  std::memcpy(b + 20, opts, sizeof opts);
  mine += 1;
  emit(fb, ts, p, c2s, kTcp, b, sizeof b);
}

void Tcp::syn_exchange(uint64_t& t, uint64_t rtt, Rng& r) {
  syn(t, true, kSyn);
  t += rtt;
  syn(t, false, kSyn | kAck);
  t += r.range(20000, 120000);
  seg(t, true, kAck);
}

uint64_t Tcp::transfer(uint64_t t, bool c2s, std::span<const uint8_t> data, uint64_t rtt, uint64_t ns_per_kbyte,
                       Rng& r) {
  size_t off = 0;
  unsigned cwnd = 10, unacked = 0;
  uint64_t last = t;
  while (off < data.size()) {
    const uint64_t burst_start = t;
    for (unsigned k = 0; k < cwnd && off < data.size(); ++k) {
      const size_t n = std::min<size_t>(mss, data.size() - off);
      const bool end = off + n == data.size();
      seg(t, c2s, kAck | (end ? kPsh : 0), data.data() + off, n);
      last = std::max(last, t);
      off += n;
      if (++unacked == 2 || end) {
        const uint64_t at = t + r.range(15000, 80000);
        seg(at, !c2s, kAck);
        last = std::max(last, at);
        unacked = 0;
      }
      t += (n + 54) * ns_per_kbyte / 1000 + r.below(2000);
    }
    if (off < data.size()) {
      t = std::max(t, burst_start + rtt);
      cwnd = std::min(cwnd * 2, 256u);
    }
  }
  return last;
}

void Tcp::close(uint64_t& t, uint64_t rtt, Rng& r) {
  const bool client_first = r.chance(0.7);
  seg(t, client_first, kFin | kAck);
  t += rtt / 2 + r.range(10000, 200000);
  seg(t, !client_first, kFin | kAck);
  t += rtt / 2 + r.range(10000, 200000);
  seg(t, client_first, kAck);
}

}  // namespace amon::gen
