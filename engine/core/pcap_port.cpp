#include "pcap_port.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include "mbuf_meta.h"
#include "bytes.h"
#include "l2l4.h"

namespace amon {

rte_mbuf* mbuf_from_bytes(rte_mempool* pool, const uint8_t* data, uint32_t len, const uint8_t* prefix,
                          uint32_t plen) {
  rte_mbuf* head = rte_pktmbuf_alloc(pool);
  if (!head) return nullptr;
  // The prefix (a stand-in link header) always fits the first segment.
  if (plen) {
    std::memcpy(rte_pktmbuf_mtod(head, uint8_t*), prefix, plen);
    head->data_len = uint16_t(plen);
  }
  rte_mbuf* last = head;
  uint32_t off = 0;
  while (off < len) {
    uint16_t room = rte_pktmbuf_tailroom(last);
    if (room == 0) {
      // Frames larger than one mbuf are chained, never cut.
      rte_mbuf* seg = rte_pktmbuf_alloc(pool);
      if (!seg) {
        rte_pktmbuf_free(head);
        return nullptr;
      }
      last->next = seg;
      last = seg;
      head->nb_segs++;
      continue;
    }
    uint32_t n = std::min<uint32_t>(room, len - off);
    std::memcpy(rte_pktmbuf_mtod_offset(last, uint8_t*, last->data_len), data + off, n);
    last->data_len = uint16_t(last->data_len + n);
    off += n;
  }
  head->pkt_len = plen + len;
  return head;
}

namespace {

constexpr uint32_t kEthLen = pcapio::kStandInLen;
using pcapio::ethernet_to_link;
using pcapio::link_to_ethernet;

}  // namespace

bool link_type_supported(int dlt) {
  switch (dlt) {
    case DLT_EN10MB: case DLT_LINUX_SLL: case DLT_LINUX_SLL2: case DLT_RAW: case DLT_IPV4: case DLT_IPV6:
    case DLT_NULL: case DLT_LOOP: case DLT_PPP: case DLT_PPP_SERIAL: case DLT_C_HDLC:
      return true;
    default:
      return link_layer_for(dlt) != nullptr;
  }
}

std::string link_type_name(int dlt) {
  const char* n = pcap_datalink_val_to_name(dlt);
  return std::to_string(dlt) + (n ? std::string(" (") + n + ")" : std::string());
}

PcapReader::PcapReader(const PortSpec& in, rte_mempool* pool) : pool_(pool) {
  in_ = std::make_unique<pcapio::Merge>(in.files.empty() ? std::vector<std::string>{in.spec} : in.files);
  warned_.assign(in_->size(), false);
}

PcapReader::~PcapReader() {
  if (unsupported_)
    std::fprintf(stderr, "amon: %llu packets of link types amon does not read were left out\n",
                 (unsigned long long)unsupported_);
}

rte_mbuf* PcapReader::to_mbuf(const pcapio::Record& r, size_t input) {
  rte_mbuf* m;
  uint32_t wire = r.len < r.caplen ? r.caplen : r.len;
  if (r.linktype == DLT_EN10MB) {
    m = mbuf_from_bytes(pool_, r.data, r.caplen);
    if (!m) return nullptr;
    mbuf_link_hdr(m)->len = 0;
  } else if (const LinkLayer* L = link_layer_for(r.linktype)) {
    // A link layer with fields of its own (802.11): its frame, as the layer
    // reduces it, rides whole behind the stand-in and goes out without it.
    uint8_t eth[kEthLen];
    link_stand_in(r.linktype, eth);
    norm_.resize(size_t(r.caplen) + 64);
    uint32_t nw = 0;
    const uint32_t n = L->normalize(r.linktype, r.data, r.caplen, wire, norm_.data(), nw);
    m = mbuf_from_bytes(pool_, norm_.data(), n, eth, kEthLen);
    if (!m) return nullptr;
    mbuf_link_hdr(m)->len = 0;
    wire = nw + kEthLen;
  } else {
    uint8_t eth[kEthLen];
    LinkHdr lh;
    uint32_t hl = link_to_ethernet(r.linktype, r.data, r.caplen, eth, lh);
    m = mbuf_from_bytes(pool_, r.data + hl, r.caplen - hl, eth, kEthLen);
    if (!m) return nullptr;
    *mbuf_link_hdr(m) = lh;
    wire = wire - hl + kEthLen;
  }
  mbuf_set_ts(m, r.ts_ns);
  mbuf_set_wire_len(m, wire);
  mbuf_set_origin(m, uint16_t(input), uint16_t(r.linktype));
  return m;
}

uint16_t PcapReader::read_burst(rte_mbuf** out, uint16_t n) {
  uint16_t got = 0;
  if (pending_) {
    rte_mbuf* m = to_mbuf(pending_rec_, pending_input_);
    if (!m) return ++alloc_fail_, 0;
    pending_ = false;
    out[got++] = m;
  }
  while (got < n && !eof_) {
    pcapio::Record r;
    size_t input = 0;
    if (in_->next(r, input) != 1) {
      // A corrupt record or a file cut inside one stops the input there;
      // everything before it was delivered.
      error_ = in_->error();
      eof_ = true;
      break;
    }
    if (!link_type_supported(r.linktype) || r.linktype > 0xffff) {
      if (!warned_[input] && (warned_[input] = true))
        std::fprintf(stderr, "amon: %s: link type %s is not supported; its packets are left out\n",
                     in_->path(input).c_str(), link_type_name(r.linktype).c_str());
      ++unsupported_;
      continue;
    }
    ++packets_;
    rte_mbuf* m = to_mbuf(r, input);
    if (!m) {
      // Pool exhausted (consumers are behind): keep the packet for later.
      ++alloc_fail_;
      pending_copy_.assign(r.data, r.data + r.caplen);
      pending_rec_ = r;
      pending_rec_.data = pending_copy_.data();
      pending_input_ = input;
      pending_ = true;
      break;
    }
    out[got++] = m;
  }
  return got;
}

namespace {

// Reopen requests (SIGHUP): each writer compares it with the last it saw.
std::atomic<unsigned> g_reopen{0};

// What an output of link type `dlt` other than the run's is named: the
// type's name before the extension (out.pcap -> out.linux_sll.pcap).
std::string split_name(const std::string& path, int dlt) {
  const char* n = pcap_datalink_val_to_name(dlt);
  std::string tag = n ? n : "dlt" + std::to_string(dlt);
  for (char& c : tag) c = char(std::tolower(static_cast<unsigned char>(c)));
  const auto sl = path.rfind('/'), dot = path.rfind('.');
  if (dot == std::string::npos || (sl != std::string::npos && dot < sl)) return path + "." + tag;
  return path.substr(0, dot) + "." + tag + path.substr(dot);
}

// An input's name below its folder as an output's: a compressed or pcapng
// input gives a plain pcap.
std::string mirror_name(std::string rel) {
  auto ends = [&](const char* x) {
    const size_t n = std::strlen(x);
    return rel.size() > n && rel.compare(rel.size() - n, n, x) == 0;
  };
  if (ends(".gz")) rel.resize(rel.size() - 3);
  if (ends(".pcapng")) rel.resize(rel.size() - 2);
  return rel;
}

void make_parents(const std::string& path) {
  for (size_t i = path.find('/', 1); i != std::string::npos; i = path.find('/', i + 1))
    ::mkdir(path.substr(0, i).c_str(), 0777);
}

}  // namespace

PcapWriter::PcapWriter(const std::string& path, bool nanosecond, int snaplen, int linktype)
    : PcapWriter(PortSpec{PortSpec::Kind::PcapFile, path, {}}, nanosecond, snaplen, linktype) {}

std::vector<std::string> pcap_output_paths(const PortSpec& out) {
  std::vector<std::string> p;
  if (out.files.empty()) p.push_back(out.spec);
  for (const auto& rel : out.files) p.push_back(out.spec + "/" + mirror_name(rel));
  return p;
}

PcapWriter::PcapWriter(const PortSpec& out, bool nanosecond, int snaplen, int linktype)
    : rot_size_(out.rotate_size), rot_every_(out.rotate_every_ns), rot_keep_(out.rotate_keep),
      reopen_seen_(g_reopen.load(std::memory_order_relaxed)), nano_(nanosecond), snaplen_(snaplen),
      linktype_(linktype), paths_(pcap_output_paths(out)) {
  const std::string& p = out.spec;
  pcapng_ = out.files.empty() && p.size() >= 7 && strcasecmp(p.c_str() + p.size() - 7, ".pcapng") == 0;
  // Each input's output in the run's link type exists from the start, so a
  // wrong path fails before anything is read (and an empty input still has
  // its output).
  for (size_t i = 0; i < paths_.size(); ++i) {
    if (!out.files.empty()) make_parents(paths_[i]);
    Sink& s = sink(uint16_t(i), linktype_);
    if (s.err) {
      const std::string e = s.path + ": " + std::strerror(s.err);
      close();  // a constructor that throws runs no destructor
      throw std::runtime_error(e);
    }
  }
}

PcapWriter::~PcapWriter() { close(); }

PcapWriter::Sink& PcapWriter::sink(uint16_t input, int dlt) {
  if (pcapng_) dlt = linktype_;  // one file, an interface block per link type
  const uint32_t key = uint32_t(input) << 16 | uint32_t(dlt & 0xffff);
  if (last_ && last_key_ == key) return *last_;
  auto it = by_key_.find(key);
  if (it == by_key_.end()) {
    auto s = std::make_unique<Sink>();
    s->linktype = dlt;
    s->path = s->base = dlt == linktype_ ? paths_[input] : split_name(paths_[input], dlt);
    // A rotating output's first part is named after its first record.
    if (rotating()) s->fresh = true;
    else open_sink(*s);
    it = by_key_.emplace(key, s.get()).first;
    sinks_.push_back(std::move(s));
  }
  last_key_ = key;
  last_ = it->second;
  return *last_;
}

int PcapWriter::dlt_of(const rte_mbuf* m) const {
  uint16_t input = 0, dlt = uint16_t(linktype_);
  if (!mbuf_origin(m, input, dlt) || !link_type_supported(dlt)) return linktype_;
  return dlt;
}

uint32_t PcapWriter::iface_of(Sink& s, int dlt) {
  for (size_t i = 0; i < s.ifaces.size(); ++i)
    if (s.ifaces[i] == dlt) return uint32_t(i);
  s.ifaces.push_back(dlt);
  pcapng::interface(blocks_, dlt, uint32_t(snaplen_), nano_);
  return uint32_t(s.ifaces.size() - 1);
}

PcapWriter::Sink& PcapWriter::sink_of(const rte_mbuf* m) {
  uint16_t input = 0, dlt = uint16_t(linktype_);
  // Packets that came from no capture file (a live port) carry no origin.
  if (mbuf_origin(m, input, dlt) && (input >= paths_.size() || !link_type_supported(dlt))) input = 0, dlt = uint16_t(linktype_);
  return sink(paths_.size() > 1 ? input : 0, dlt);
}

void PcapWriter::open_sink(Sink& s, bool append) {
  if (pcapng_) {
    // A file appended to (a reopen) gets a new section: a section header
    // and its interface blocks again, as pcapng allows.
    s.fd = ::open(s.path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
    if (s.fd < 0) {
      s.err = errno;
      return;
    }
    std::vector<uint8_t> shb;
    pcapng::section_header(shb);
    if (::write(s.fd, shb.data(), shb.size()) != ssize_t(shb.size())) s.err = errno ? errno : EIO;
    s.ifaces.clear();
    struct stat st;
    s.reserve = fstat(s.fd, &st) == 0 && S_ISREG(st.st_mode);
    const off_t at = lseek(s.fd, 0, SEEK_CUR);
    s.end = s.reserved = at > 0 ? uint64_t(at) : 0;
    s.head = s.end;
    return;
  }
  if (!s.dead)
    s.dead = pcap_open_dead_with_tstamp_precision(s.linktype, snaplen_,
                                                  nano_ ? PCAP_TSTAMP_PRECISION_NANO : PCAP_TSTAMP_PRECISION_MICRO);
  if (!s.dead) {
    s.err = ENOMEM;
    return;
  }
  if (append) {
    // libpcap writes the file header when the file is new or empty, and
    // checks that an existing one has this link type and precision.
    s.d = pcap_dump_open_append(s.dead, s.path.c_str());
    if (!s.d) {
      s.err = errno ? errno : EIO;
      return;
    }
  } else {
    FILE* f = std::fopen(s.path.c_str(), "wb");
    if (!f) {
      s.err = errno;
      return;
    }
    s.d = pcap_dump_fopen(s.dead, f);
    if (!s.d) {
      std::fclose(f);
      s.err = EIO;
      return;
    }
  }
  FILE* f = pcap_dump_file(s.d);
  // libpcap wrote the file header through stdio; records go straight to the
  // descriptor after it.
  s.fd = fileno(f);
  if (std::fflush(f) != 0) s.err = errno;
  struct stat st;
  s.reserve = fstat(s.fd, &st) == 0 && S_ISREG(st.st_mode);
  const off_t at = lseek(s.fd, 0, SEEK_CUR);
  s.end = s.reserved = at > 0 ? uint64_t(at) : 0;
  s.head = 24;
}

bool PcapWriter::failed() const {
  for (const auto& s : sinks_)
    if (s->err) return true;
  return false;
}

std::string PcapWriter::failure() const {
  for (const auto& s : sinks_)
    if (s->err) return s->path + ": " + std::strerror(s->err);
  return "";
}

void PcapWriter::close_sink(Sink& s) {
  if (pcapng_ && s.fd >= 0) {
    if (s.reserved > s.end && ftruncate(s.fd, off_t(s.end)) != 0 && s.err == 0) s.err = errno;
    if (::close(s.fd) != 0 && s.err == 0) s.err = errno;
    s.fd = -1;
    s.reserve = false;
    s.end = s.reserved = 0;
    return;
  }
  if (!s.d) return;
  FILE* f = pcap_dump_file(s.d);
  // pcap_dump_close() reports nothing, so the stream is flushed here
  // where its error can be seen.
  if (s.err == 0 && (std::ferror(f) || std::fflush(f) != 0)) s.err = errno ? errno : EIO;
  // Space reserved past the last record goes back: a truncate to the
  // same size frees the blocks past the end of file (ext4 and tmpfs,
  // checked with du; ext4 ignores a hole punched there).
  if (s.reserved > s.end && ftruncate(s.fd, off_t(s.end)) != 0 && s.err == 0) s.err = errno;
  pcap_dump_close(s.d);
  s.d = nullptr;
  s.fd = -1;
  s.reserve = false;
  s.end = s.reserved = 0;
}

std::string PcapWriter::close() {
  if (closed_) return close_error_;
  closed_ = true;
  for (auto& sp : sinks_) {
    Sink& s = *sp;
    close_sink(s);
    if (s.dead) pcap_close(s.dead);
    s.dead = nullptr;
    if (s.err && close_error_.empty()) close_error_ = s.path + ": " + std::strerror(s.err);
  }
  return close_error_;
}

// ext4 with delayed allocation reserves and maps each 4 KiB block as a
// write first reaches it (ext4_da_get_block_prep); blocks reserved ahead as
// one unwritten extent skip that: a 184 MB file writes in 30 ms instead of
// 41 ms here. The window grows with the file (a small file reserves
// little) up to 16 MiB. Only a hint: where it fails (a pipe, a file
// system without fallocate, a disk too full for the window) the writes go
// on without it and report what is really wrong.
void PcapWriter::reserve(Sink& s, size_t batch) {
  if (!s.reserve || s.end + batch <= s.reserved) return;
  constexpr uint64_t kMin = 1 << 20, kMax = 16 << 20;
  const uint64_t len = std::max<uint64_t>(batch, std::clamp<uint64_t>(s.end, kMin, kMax));
  const uint64_t from = std::max(s.end, s.reserved);
  if (fallocate(s.fd, FALLOC_FL_KEEP_SIZE, off_t(from), off_t(len)) == 0)
    s.reserved = from + len;
  else
    s.reserve = false;
}

void pcap_request_reopen() { g_reopen.fetch_add(1, std::memory_order_relaxed); }

void PcapWriter::reopen_all() {
  for (auto& sp : sinks_) {
    Sink& s = *sp;
    if (s.err) continue;
    if (rotating()) {
      s.fresh = true;  // the next record starts a part under a new name
      continue;
    }
    close_sink(s);
    open_sink(s, true);
  }
}

// An upper bound of a record's bytes in the file (its header, and a link
// header that may be longer than the stand-in Ethernet one).
// (pcapng: its block's head and trailer, padding, and an interface block.)
uint64_t PcapWriter::record_bound(const rte_mbuf* m) const {
  return pcapng_ ? 28 + 8 + uint64_t(m->pkt_len) + 32 + 32 : 16 + uint64_t(m->pkt_len) + 32;
}

bool PcapWriter::part_ends(const Sink& s, const rte_mbuf* m, uint64_t end) const {
  if (!rotating()) return false;
  if (s.fresh || s.fd < 0) return true;
  if (rot_every_ && mbuf_ts(m) >= s.period_end) return true;
  // A part holds at least one record, whatever its size.
  return rot_size_ && end > s.head && end + record_bound(m) > rot_size_;
}

void PcapWriter::new_part(Sink& s, uint64_t ts) {
  close_sink(s);
  const uint64_t start = rot_every_ ? ts / rot_every_ * rot_every_ : ts;
  s.period_end = rot_every_ ? start + rot_every_ : UINT64_MAX;
  const time_t secs = time_t(start / 1000000000ULL);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char when[32];
  std::strftime(when, sizeof when, "%Y%m%dT%H%M%SZ", &tm);
  const auto sl = s.base.rfind('/'), dot = s.base.rfind('.');
  const bool ext = dot != std::string::npos && (sl == std::string::npos || dot > sl);
  const std::string stem = ext ? s.base.substr(0, dot) : s.base, tail = ext ? s.base.substr(dot) : "";
  std::string name = stem + "-" + when + tail;
  for (int k = 2; std::find(s.parts.begin(), s.parts.end(), name) != s.parts.end(); ++k)
    name = stem + "-" + when + "-" + std::to_string(k) + tail;
  s.path = name;
  s.fresh = false;
  open_sink(s);
  s.parts.push_back(name);
  while (rot_keep_ && s.parts.size() > rot_keep_) {
    ::unlink(s.parts.front().c_str());
    s.parts.erase(s.parts.begin());
  }
}

void PcapWriter::write_burst(rte_mbuf* const* pkts, unsigned n) {
  if (closed_) return;
  if (const unsigned g = g_reopen.load(std::memory_order_relaxed); g != reopen_seen_) {
    reopen_seen_ = g;
    reopen_all();
  }
  // Runs of packets for one file (all of them, but for a capture of several
  // link types, an output per input, or a part that ends) go out with one
  // writev each; a part ends between two records, never inside one.
  for (unsigned i = 0; i < n;) {
    Sink& s = sink_of(pkts[i]);
    if (part_ends(s, pkts[i], s.end) && !s.err) new_part(s, mbuf_ts(pkts[i]));
    uint64_t end = s.end + record_bound(pkts[i]);
    unsigned j = i + 1;
    while (j < n && &sink_of(pkts[j]) == &s && !part_ends(s, pkts[j], end)) end += record_bound(pkts[j++]);
    if (!s.err && s.fd >= 0) write_run(s, pkts + i, j - i);
    i = j;
  }
}

void PcapWriter::write_run(Sink& s, rte_mbuf* const* pkts, unsigned n) {
  recs_.resize(n);
  iov_.clear();
  iov_.reserve(size_t(3) * n + 1);
  if (pcapng_) {
    epbs_.resize(n);
    trailers_.resize(n);
    blocks_.clear();
  }
  // Records of another link type, and chained mbufs, are made whole in
  // linear_: sized first, so the pointers into it stay valid.
  size_t need = 0;
  for (unsigned i = 0; i < n; ++i)
    if ((pcapng_ ? dlt_of(pkts[i]) : s.linktype) != DLT_EN10MB || pkts[i]->nb_segs != 1) need += pkts[i]->pkt_len + 32;
  linear_.resize(need);
  size_t used = 0;
  const uint64_t bytes_before = bytes_;
  for (unsigned i = 0; i < n; ++i) {
    const rte_mbuf* m = pkts[i];
    const int lt = pcapng_ ? dlt_of(m) : s.linktype;
    const uint64_t ts = mbuf_ts(m);
    Rec& r = recs_[i];
    // libpcap's record header: 32-bit seconds and fraction, host order.
    r.sec = uint32_t(ts / 1000000000ULL);
    r.frac = uint32_t(nano_ ? ts % 1000000000ULL : ts % 1000000000ULL / 1000);
    r.caplen = m->pkt_len;
    r.len = mbuf_wire_len(m);
    const uint8_t* data;
    if (lt != DLT_EN10MB && m->pkt_len >= kEthLen) {
      // The original link header in place of the stand-in Ethernet header.
      uint8_t eth[kEthLen], hdr[32];
      const uint8_t* e = static_cast<const uint8_t*>(rte_pktmbuf_read(m, 0, kEthLen, eth));
      const uint32_t hl = ethernet_to_link(lt, e, *mbuf_link_hdr(m), hdr);
      uint8_t* out = linear_.data() + used;
      std::memcpy(out, hdr, hl);
      if (m->pkt_len > kEthLen) {
        uint8_t* dst = out + hl;
        // rte_pktmbuf_read copies only when the bytes span segments.
        const void* src = rte_pktmbuf_read(m, kEthLen, m->pkt_len - kEthLen, dst);
        if (src != dst) std::memcpy(dst, src, m->pkt_len - kEthLen);
      }
      r.caplen = hl + m->pkt_len - kEthLen;
      r.len = r.len - kEthLen + hl;
      data = out;
      used += r.caplen;
    } else if (m->nb_segs == 1) {
      data = rte_pktmbuf_mtod(m, const uint8_t*);
    } else {
      uint8_t* out = linear_.data() + used;
      const void* src = rte_pktmbuf_read(m, 0, m->pkt_len, out);
      if (src != out) std::memcpy(out, src, m->pkt_len);
      data = out;
      used += m->pkt_len;
    }
    if (pcapng_) {
      pcapng::Trailer& t = trailers_[i];
      const unsigned tl = pcapng::packet(epbs_[i], t, iface_of(s, lt), nano_ ? ts : ts / 1000, r.caplen, r.len);
      iov_.push_back({&epbs_[i], sizeof(pcapng::EpbHead)});
      iov_.push_back({const_cast<uint8_t*>(data), r.caplen});
      iov_.push_back({reinterpret_cast<uint8_t*>(&t) + 8 - tl, tl});
      bytes_ += r.caplen;
      continue;
    }
    iov_.push_back({&r, sizeof r});
    iov_.push_back({const_cast<uint8_t*>(data), r.caplen});
    bytes_ += r.caplen;
  }
  // New interface blocks go before the records (blocks_ is not touched
  // again until the writes are done).
  if (!blocks_.empty()) iov_.insert(iov_.begin(), {blocks_.data(), blocks_.size()});
  packets_ += n;
  reserve(s, size_t(n) * sizeof(Rec) + (bytes_ - bytes_before));
  // The records go out from the mbufs themselves: the kernel's copy into
  // the page cache is the only one (through stdio there were two).
  iovec* v = iov_.data();
  size_t left = iov_.size();
  while (left) {
    const int cnt = int(std::min<size_t>(left, IOV_MAX));
    const ssize_t w = ::writev(s.fd, v, cnt);
    if (w < 0) {
      if (errno == EINTR) continue;
      s.err = errno;
      return;
    }
    if (w == 0) {  // nothing taken and no error: it would loop forever
      s.err = EIO;
      return;
    }
    s.end += uint64_t(w);
    // A short write (a signal, a file size limit): go on after its last byte.
    size_t done = size_t(w);
    while (left && done >= v->iov_len) {
      done -= v->iov_len;
      ++v;
      --left;
    }
    if (left) {
      v->iov_base = static_cast<uint8_t*>(v->iov_base) + done;
      v->iov_len -= done;
    }
  }
}

}  // namespace amon
