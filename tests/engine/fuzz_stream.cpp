// libFuzzer target for TCP stream holding (engine/core/worker_path.cpp):
// the real WorkerPath on DPDK mbufs (EAL with --no-huge, no devices) with
// small holding bounds, fed one TCP connection whose segments the input
// describes: direction, flags, sequence offset (in order, out of order,
// overlapping, before the stream), payload. Two consumers: one hides every
// name (so headers are held), one keeps everything.
//
// Checks what holding promises on any input: no crash or out-of-bounds access
// (ASan), every packet reaches the keep() consumer exactly once and
// unchanged, the hiding consumer never gets a frame longer than its input,
// and once the input ends nothing is held and no mbuf is lost.
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "eal_env.h"
#include "flow_table.h"
#include "mbuf_meta.h"
#include "policy.h"
#include "registry.h"
#include "worker_path.h"
#include "zanon.h"

using namespace amon;

namespace {

struct Seen {
  std::vector<std::vector<uint8_t>> keep, hide;
};

void sink(void* ctx, unsigned consumer, rte_mbuf* m) {
  auto* s = static_cast<Seen*>(ctx);
  const uint8_t* p = rte_pktmbuf_mtod(m, const uint8_t*);
  (consumer == 0 ? s->keep : s->hide).emplace_back(p, p + rte_pktmbuf_data_len(m));
  rte_pktmbuf_free(m);
}

struct World {
  rte_mempool* pool = nullptr;
  std::unique_ptr<zanon::Store> store;
  SharedServices svc;
  std::vector<std::unique_ptr<Program>> progs;
  unsigned avail0 = 0;

  World() {
    pool = amon_test::start_eal("fuzz_stream", 4095, "256");
    zanon::Config zc;
    zc.max_values = 1024;
    zc.zmax = 2;
    zc.max_dt_ns = 3600ULL * 1000000000ULL;
    store = std::make_unique<zanon::Store>(zc);
    svc.zstore = store.get();
    const char* texts[] = {
        "tls.sni, http.host : keep()\n",
        "tls.sni, http.host, dns.qname, dns.answer.name, dns.rdata.name : zanon(z=2, dt=1h, fallback=sld)\n"
        "http.user_agent, http.cookie, http.uri : redact()\n",
    };
    for (int i = 0; i < 2; ++i) {
      dsl::Diagnostics d;
      auto pol = dsl::compile_string(texts[i], "fuzz.amon", d);
      if (!pol) std::abort();
      progs.push_back(std::make_unique<Program>(pol, i, &svc));
    }
    avail0 = rte_mempool_avail_count(pool);
  }
};

World& world() {
  static World w;
  return w;
}

uint16_t csum(const uint8_t* p, size_t n, uint32_t s = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) s += uint32_t(p[i] << 8 | p[i + 1]);
  if (n & 1) s += uint32_t(p[n - 1] << 8);
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return uint16_t(~s);
}

// Ethernet/IPv4/TCP between 10.0.0.1:40000 (client) and 10.0.0.2:port.
std::vector<uint8_t> frame(bool from_client, uint16_t port, uint32_t seq, uint8_t flags, const uint8_t* pl, size_t n) {
  std::vector<uint8_t> f(14 + 20 + 20 + n);
  f[12] = 0x08;
  uint8_t* ip = f.data() + 14;
  ip[0] = 0x45;
  const uint16_t tot = uint16_t(40 + n);
  ip[2] = uint8_t(tot >> 8), ip[3] = uint8_t(tot);
  ip[8] = 64, ip[9] = 6;
  const uint8_t c[4] = {10, 0, 0, 1}, s[4] = {10, 0, 0, 2};
  std::memcpy(ip + 12, from_client ? c : s, 4);
  std::memcpy(ip + 16, from_client ? s : c, 4);
  const uint16_t ck = csum(ip, 20);
  ip[10] = uint8_t(ck >> 8), ip[11] = uint8_t(ck);
  uint8_t* t = ip + 20;
  const uint16_t sp = from_client ? 40000 : port, dp = from_client ? port : 40000;
  t[0] = uint8_t(sp >> 8), t[1] = uint8_t(sp), t[2] = uint8_t(dp >> 8), t[3] = uint8_t(dp);
  t[4] = uint8_t(seq >> 24), t[5] = uint8_t(seq >> 16), t[6] = uint8_t(seq >> 8), t[7] = uint8_t(seq);
  t[12] = 0x50, t[13] = flags, t[14] = 0xff, t[15] = 0xff;
  if (n) std::memcpy(t + 20, pl, n);
  uint8_t ph[12] = {};
  std::memcpy(ph, ip + 12, 8);
  ph[9] = 6, ph[10] = uint8_t((20 + n) >> 8), ph[11] = uint8_t(20 + n);
  uint32_t sum = 0;
  for (int i = 0; i < 12; i += 2) sum += uint32_t(ph[i] << 8 | ph[i + 1]);
  const uint16_t tc = csum(t, 20 + n, sum);
  t[16] = uint8_t(tc >> 8), t[17] = uint8_t(tc);
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& W = world();
  if (size < 1) return 0;
  HoldLimits hl;
  hl.streams = 2;
  hl.bytes = 3000;
  hl.segments = 24;
  hl.stream_segments = 12;
  hl.timeout_ns = 1000000000ULL;
  static unsigned table_no = 0;
  WorkerPath path(W.progs, W.pool,
                  std::make_unique<FlowTable>("fuzz_flows" + std::to_string(table_no++), 64, FlowTimeouts{}, 0), hl);
  // Byte 0: the server port (what the application guess starts from).
  static const uint16_t kPorts[] = {443, 80, 53, 8443};
  const uint16_t port = kPorts[data[0] & 3];
  Seen seen;
  std::vector<std::vector<uint8_t>> sent;
  uint64_t ts = 1000000000ULL;
  // Then segments: [dir|flags][offset hi][offset lo][len][payload...]; the
  // offset is from the client's (or server's) initial sequence number.
  size_t i = 1;
  rte_mbuf* burst[8];
  unsigned nb = 0;
  auto flush = [&] {
    if (nb) path.process_burst(burst, nb, sink, &seen);
    nb = 0;
  };
  while (i + 4 <= size && sent.size() < 64) {
    const uint8_t hdr = data[i];
    const bool from_client = !(hdr & 0x80);
    const uint8_t flags = uint8_t(0x10 | (hdr & 0x0f));  // ACK plus FIN/SYN/RST/PSH as given
    const uint32_t off = uint32_t(data[i + 1]) << 8 | data[i + 2];
    size_t n = std::min<size_t>(data[i + 3], size - (i + 4));
    if (hdr & 0x40) n = std::min<size_t>(n * 4, size - (i + 4));  // longer segments
    const uint32_t seq = (from_client ? 1000u : 5000u) + off - ((hdr & 0x20) ? 300u : 0u);  // some before the start
    auto f = frame(from_client, port, seq, flags, data + i + 4, n);
    i += 4 + n;
    rte_mbuf* m = rte_pktmbuf_alloc(W.pool);
    if (!m) std::abort();
    std::memcpy(rte_pktmbuf_append(m, uint16_t(f.size())), f.data(), f.size());
    mbuf_set_ts(m, ts);
    mbuf_set_wire_len(m, uint32_t(f.size()));
    mbuf_set_seq(m, 0);  // a recycled mbuf's number (and what it says of initiators) is gone, as in the engine
    ts += (hdr & 0x10) ? 2000000000ULL : 1000;  // sometimes past the hold timeout
    sent.push_back(std::move(f));
    burst[nb++] = m;
    if (nb == 8 || (hdr & 0x08)) flush();
  }
  flush();
  path.flush_held(sink, &seen);
  if (path.held_segments() != 0) std::abort();
  // keep(): every packet once, unchanged (order may differ across flows, not
  // here: one connection, but held segments leave after the other side's).
  if (seen.keep.size() != sent.size()) std::abort();
  std::vector<std::vector<uint8_t>> a = sent, b = seen.keep;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a != b) std::abort();
  if (seen.hide.size() > sent.size()) std::abort();
  size_t max_in = 0;
  for (auto& f : sent) max_in = std::max(max_in, f.size());
  for (auto& f : seen.hide)
    if (f.size() > max_in) std::abort();
  if (rte_mempool_avail_count(W.pool) != W.avail0) std::abort();
  return 0;
}
