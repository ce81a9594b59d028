#include "pcap_port.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "mbuf_meta.h"

namespace amon {

rte_mbuf* mbuf_from_bytes(rte_mempool* pool, const uint8_t* data, uint32_t len) {
  rte_mbuf* head = rte_pktmbuf_alloc(pool);
  if (!head) return nullptr;
  rte_mbuf* last = head;
  uint32_t off = 0;
  for (;;) {
    uint16_t room = rte_pktmbuf_tailroom(last);
    uint32_t n = std::min<uint32_t>(room, len - off);
    std::memcpy(rte_pktmbuf_mtod_offset(last, uint8_t*, last->data_len), data + off, n);
    last->data_len = uint16_t(last->data_len + n);
    off += n;
    if (off == len) break;
    // Frames larger than one mbuf are chained, never cut.
    rte_mbuf* seg = rte_pktmbuf_alloc(pool);
    if (!seg) {
      rte_pktmbuf_free(head);
      return nullptr;
    }
    last->next = seg;
    last = seg;
    head->nb_segs++;
  }
  head->pkt_len = len;
  return head;
}

PcapReader::PcapReader(const std::string& path, rte_mempool* pool) : pool_(pool), path_(path) {
  char err[PCAP_ERRBUF_SIZE] = {};
  // Our own FILE with a large buffer: libpcap's default stdio buffer means
  // one read() per 4 KiB of capture.
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(path + ": " + std::strerror(errno));
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
  p_ = pcap_fopen_offline_with_tstamp_precision(f, PCAP_TSTAMP_PRECISION_NANO, err);
  if (!p_) {
    std::fclose(f);
    throw std::runtime_error(path + ": " + err);
  }
  linktype_ = pcap_datalink(p_);
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    uint8_t m[4] = {};
    if (std::fread(m, 1, 4, f) == 4)
      nano_ = (m[0] == 0xa1 && m[1] == 0xb2 && m[2] == 0x3c && m[3] == 0x4d) ||
              (m[0] == 0x4d && m[1] == 0x3c && m[2] == 0xb2 && m[3] == 0xa1);
    std::fclose(f);
  }
}

PcapReader::~PcapReader() {
  if (p_) pcap_close(p_);
}

rte_mbuf* PcapReader::to_mbuf(const pcap_pkthdr* h, const u_char* data) {
  rte_mbuf* m = mbuf_from_bytes(pool_, data, h->caplen);
  if (!m) return nullptr;
  // Nanosecond precision was requested at open: tv_usec holds nanoseconds.
  mbuf_set_ts(m, uint64_t(h->ts.tv_sec) * 1000000000ULL + uint64_t(h->ts.tv_usec));
  mbuf_set_wire_len(m, h->len < h->caplen ? h->caplen : h->len);
  return m;
}

uint16_t PcapReader::read_burst(rte_mbuf** out, uint16_t n) {
  uint16_t got = 0;
  if (pending_data_) {
    rte_mbuf* m = to_mbuf(&pending_hdr_, pending_copy_.data());
    if (!m) return ++alloc_fail_, 0;
    pending_data_ = nullptr;
    out[got++] = m;
  }
  while (got < n && !eof_) {
    pcap_pkthdr* h;
    const u_char* data;
    int rc = pcap_next_ex(p_, &h, &data);
    if (rc == 1) {
      ++packets_;
      rte_mbuf* m = to_mbuf(h, data);
      if (!m) {
        // Pool exhausted (consumers are behind): keep the packet for later.
        ++alloc_fail_;
        pending_hdr_ = *h;
        pending_copy_.assign(data, data + h->caplen);
        pending_data_ = pending_copy_.data();
        break;
      }
      out[got++] = m;
    } else if (rc == PCAP_ERROR_BREAK) {
      eof_ = true;
    } else {
      // A corrupt record (absurd caplen, file cut inside a record): libpcap
      // stops there; everything before it was delivered.
      error_ = path_ + ": " + pcap_geterr(p_);
      eof_ = true;
    }
  }
  return got;
}

PcapWriter::PcapWriter(const std::string& path, bool nanosecond, int snaplen, int linktype)
    : path_(path), nano_(nanosecond) {
  dead_ = pcap_open_dead_with_tstamp_precision(linktype, snaplen,
                                               nanosecond ? PCAP_TSTAMP_PRECISION_NANO : PCAP_TSTAMP_PRECISION_MICRO);
  if (!dead_) throw std::runtime_error(path + ": cannot create pcap handle");
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    pcap_close(dead_);
    throw std::runtime_error(path + ": " + std::strerror(errno));
  }
  std::setvbuf(f, nullptr, _IOFBF, 1 << 20);
  d_ = pcap_dump_fopen(dead_, f);
  if (!d_) {
    std::string e = pcap_geterr(dead_);
    std::fclose(f);
    pcap_close(dead_);
    throw std::runtime_error(path + ": " + e);
  }
}

PcapWriter::~PcapWriter() {
  if (d_) pcap_dump_close(d_);
  if (dead_) pcap_close(dead_);
}

void PcapWriter::write(const rte_mbuf* m) {
  pcap_pkthdr h{};
  uint64_t ts = mbuf_ts(m);
  h.ts.tv_sec = time_t(ts / 1000000000ULL);
  h.ts.tv_usec = suseconds_t(nano_ ? ts % 1000000000ULL : ts % 1000000000ULL / 1000);
  h.caplen = m->pkt_len;
  h.len = mbuf_wire_len(m);
  const uint8_t* data;
  if (m->nb_segs == 1) {
    data = rte_pktmbuf_mtod(m, const uint8_t*);
  } else {
    linear_.resize(m->pkt_len);
    data = static_cast<const uint8_t*>(rte_pktmbuf_read(m, 0, m->pkt_len, linear_.data()));
  }
  pcap_dump(reinterpret_cast<u_char*>(d_), &h, data);
  ++packets_;
  bytes_ += m->pkt_len;
}

void PcapWriter::flush() {
  if (d_) pcap_dump_flush(d_);
}

}  // namespace amon
