// amon's own pcap file port. DPDK's pcap PMD stamps output records with the
// wall clock and drops the original length of truncated records; offline
// anonymization must keep both, so files are read here with libpcap at
// nanosecond precision and written in its format (libpcap writes the file
// header; the records go out with writev straight from the mbufs).
#pragma once

#include <pcap/pcap.h>
#include <rte_mbuf.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace amon {

// Link types. The packet path decodes Ethernet frames. A record of another
// link type (Linux cooked v1/v2, raw IPv4/IPv6, BSD NULL/loopback, PPP,
// Cisco HDLC) is read as an Ethernet frame standing in for its link header:
// EtherType from the header's protocol, source address the cooked header's
// link-layer address (so `eth.src` rules protect it), destination zero. The
// header's other bytes ride in the mbuf (mbuf_meta.h, LinkHdr) and the writer
// puts the original header back, with the address as the policy left it, so
// the output has the input's link type and every layer above is anonymized
// exactly as in an Ethernet capture. Values are libpcap's DLT_* numbers.
bool link_type_supported(int dlt);
std::string link_type_name(int dlt);

class PcapReader {
 public:
  // Throws std::runtime_error naming the file when it cannot be opened.
  PcapReader(const std::string& path, rte_mempool* pool);
  ~PcapReader();
  PcapReader(const PcapReader&) = delete;
  PcapReader& operator=(const PcapReader&) = delete;

  // Reads up to n packets. Returns 0 at the end of the file or on a file
  // error (then error() is non-empty; the packets before it were delivered).
  uint16_t read_burst(rte_mbuf** out, uint16_t n);
  bool eof() const { return eof_; }
  const std::string& error() const { return error_; }
  int linktype() const { return linktype_; }
  // The file's own timestamp precision (its magic number), so outputs can
  // keep it: a microsecond input gives microsecond outputs.
  bool nanosecond_file() const { return nano_; }
  int snaplen() const { return p_ ? pcap_snapshot(p_) : 0; }
  uint64_t packets() const { return packets_; }
  // How far into the file the reader is (to its buffer's granularity).
  uint64_t bytes_read() const;
  uint64_t alloc_failures() const { return alloc_fail_; }

 private:
  rte_mbuf* to_mbuf(const pcap_pkthdr* h, const u_char* data);
  // The stdio buffer, ours: glibc ignores setvbuf's size when it allocates
  // the buffer itself (a 4 KiB read() per 4 KiB of capture). Freed after the
  // destructor has closed the FILE.
  std::unique_ptr<char[]> buf_;
  pcap_t* p_ = nullptr;
  rte_mempool* pool_;
  std::string path_, error_;
  bool eof_ = false;
  int linktype_ = 0;
  bool nano_ = false;
  uint64_t packets_ = 0, alloc_fail_ = 0;
  // A packet read while the pool was empty, delivered on the next call.
  const u_char* pending_data_ = nullptr;
  pcap_pkthdr pending_hdr_{};
  std::vector<uint8_t> pending_copy_;
};

class PcapWriter {
 public:
  // Records are written in `linktype`; for a type other than Ethernet each
  // packet's stand-in Ethernet header is replaced by its original link header.
  PcapWriter(const std::string& path, bool nanosecond = true, int snaplen = 262144, int linktype = DLT_EN10MB);
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;
  // Writes one record per mbuf (caplen = pkt_len, len = the wire length)
  // with one writev per IOV_MAX/2 records, and frees nothing. Batches of a
  // few hundred records keep the system calls few.
  void write_burst(rte_mbuf* const* pkts, unsigned n);
  // A write that failed (disk full, EIO), sticky: after it nothing more is
  // written. The message names the file and the failing call's errno.
  bool failed() const;
  std::string failure() const;
  // Flushes and closes the file; "" or why the data did not all reach it.
  // Later calls return the same.
  std::string close();
  uint64_t packets() const { return packets_; }
  uint64_t bytes() const { return bytes_; }

 private:
  // libpcap's record header (pcap_sf_pkthdr), as pcap_dump writes it.
  struct Rec {
    uint32_t sec, frac, caplen, len;
  };
  pcap_t* dead_ = nullptr;
  pcap_dumper_t* d_ = nullptr;  // writes the file header; owns the FILE
  int fd_ = -1;
  int err_ = 0;  // errno of the first failed write, 0 while none has
  // Disk space reserved ahead of the writes (a regular file whose file
  // system takes fallocate): the file offset written up to and reserved to.
  bool reserve_ = false;
  uint64_t end_ = 0, reserved_ = 0;
  void reserve(size_t batch);
  std::string path_, close_error_;
  bool nano_;
  int linktype_;
  std::vector<Rec> recs_;
  std::vector<iovec> iov_;
  std::vector<uint8_t> linear_;
  uint64_t packets_ = 0, bytes_ = 0;
};

// Builds a (possibly chained) mbuf holding `plen` bytes of `prefix` followed
// by `len` bytes of `data`.
rte_mbuf* mbuf_from_bytes(rte_mempool* pool, const uint8_t* data, uint32_t len, const uint8_t* prefix = nullptr,
                          uint32_t plen = 0);

}  // namespace amon
