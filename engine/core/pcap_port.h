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
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine.h"
#include "pcapio.h"
#include "pcapng_out.h"

namespace amon {

// Link types. The packet path decodes Ethernet frames. A record of another
// link type (Linux cooked v1/v2, raw IPv4/IPv6, BSD NULL/loopback, PPP,
// Cisco HDLC) is read as an Ethernet frame standing in for its link header:
// EtherType from the header's protocol, source address the cooked header's
// link-layer address (so `eth.src` rules protect it), destination zero. The
// header's other bytes ride in the mbuf (mbuf_meta.h, LinkHdr) and the writer
// puts the original header back, with the address as the policy left it, so
// the output has the input's link type and every layer above is anonymized
// exactly as in an Ethernet capture. A link layer with fields of its own
// (802.11 with radiotap, PPI or nothing: l2l4.h, LinkLayer) keeps its whole
// frame, reduced by the layer, behind a stand-in that names the link type;
// the writer drops the stand-in. Values are libpcap's DLT_* numbers.
bool link_type_supported(int dlt);
std::string link_type_name(int dlt);

class PcapReader {
 public:
  // Reads the capture(s) of `in` (in.files, else in.spec; "-" is standard
  // input) as one stream in time order (pcapio.h). Throws pcapio::BadInput
  // for an input that is no capture, std::runtime_error for the rest.
  PcapReader(const PortSpec& in, rte_mempool* pool);
  ~PcapReader();
  PcapReader(const PcapReader&) = delete;
  PcapReader& operator=(const PcapReader&) = delete;

  // Reads up to n packets. Returns 0 at the end of the input or on an input
  // error (then error() is non-empty; the packets before it were delivered).
  uint16_t read_burst(rte_mbuf** out, uint16_t n);
  bool eof() const { return eof_; }
  const std::string& error() const { return error_; }
  // The first interface's link type: the one outputs are written in (other
  // link types go to files of their own, PcapWriter).
  int linktype() const { return in_->linktype(); }
  // Whether any input stamps finer than a microsecond, so that outputs keep
  // it: a microsecond input gives microsecond outputs.
  bool nanosecond_file() const { return in_->nanosecond(); }
  int snaplen() const { return int(in_->snaplen()); }
  uint64_t packets() const { return packets_; }
  // How far into the inputs the reader is (to its buffer's granularity).
  uint64_t bytes_read() const { return in_->bytes_read(); }
  uint64_t alloc_failures() const { return alloc_fail_; }

 private:
  rte_mbuf* to_mbuf(const pcapio::Record& r, size_t input);
  std::unique_ptr<pcapio::Merge> in_;
  rte_mempool* pool_;
  std::string error_;
  bool eof_ = false;
  uint64_t packets_ = 0, alloc_fail_ = 0;
  // Records of link types the packet path cannot read, left out (counted
  // and reported, never passed on undecoded).
  uint64_t unsupported_ = 0;
  std::vector<bool> warned_;
  // A record read while the pool was empty, delivered on the next call.
  bool pending_ = false;
  pcapio::Record pending_rec_{};
  size_t pending_input_ = 0;
  std::vector<uint8_t> pending_copy_;
  std::vector<uint8_t> norm_;  // a link layer's record as it reduced it (to_mbuf)
};

class PcapWriter {
 public:
  // Records are written in `linktype`; for a type other than Ethernet each
  // packet's stand-in Ethernet header is replaced by its original link header.
  PcapWriter(const std::string& path, bool nanosecond = true, int snaplen = 262144, int linktype = DLT_EN10MB);
  // `out.spec` is the file; or, with out.files (the inputs' names below
  // their folders), the folder in which each input's packets go to a file
  // of the input's name (.gz and pcapng inputs give .pcap names). Packets of
  // a link type other than `linktype` (a pcapng with interfaces of several
  // types, or inputs of several types) go to a file of their own named
  // after the type: out.pcap -> out.linux_sll.pcap; a file named .pcapng
  // is written as pcapng and keeps every link type itself.
  // With out.rotate_size or out.rotate_every_ns, each file is a part:
  // out.pcap is written as out-20261126T040000Z.pcap (the UTC start of the
  // period, or for size alone the first record's second; -2, -3 ... on a
  // clash), a new part begins between two records when the size would be
  // passed or the packet time enters a new period, and only the newest
  // rotate_keep parts are kept.
  PcapWriter(const PortSpec& out, bool nanosecond, int snaplen, int linktype);
  ~PcapWriter();
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;
  // Writes one record per mbuf (caplen = pkt_len, len = the wire length)
  // with one writev per IOV_MAX/2 records, and frees nothing. Batches of a
  // few hundred records keep the system calls few.
  void write_burst(rte_mbuf* const* pkts, unsigned n);
  // A write that failed (disk full, EIO), sticky: after it nothing more is
  // written to that file. The message names the file and the failing call's errno.
  bool failed() const;
  std::string failure() const;
  // Flushes and closes the files; "" or why the data did not all reach them.
  // Later calls return the same.
  std::string close();
  uint64_t packets() const { return packets_; }
  uint64_t bytes() const { return bytes_; }

 private:
  // libpcap's record header (pcap_sf_pkthdr), as pcap_dump writes it.
  struct Rec {
    uint32_t sec, frac, caplen, len;
  };
  // One output file.
  struct Sink {
    std::string path;
    int linktype = 0;
    pcap_t* dead = nullptr;
    pcap_dumper_t* d = nullptr;  // writes the file header; owns the FILE
    int fd = -1;  // open while >= 0
    uint64_t head = 24;  // the file header's bytes (records come after)
    std::vector<int> ifaces;  // pcapng: the link type of each interface block written
    int err = 0;  // errno of the first failed open or write, 0 while none has
    // Disk space reserved ahead of the writes (a regular file whose file
    // system takes fallocate): the file offset written up to and reserved to.
    bool reserve = false;
    uint64_t end = 0, reserved = 0;
    // Rotation: the name the parts are made from, when the current part's
    // period ends (packet time), whether the next record starts a part,
    // and the parts written, oldest first.
    std::string base;
    uint64_t period_end = 0;
    bool fresh = false;
    std::vector<std::string> parts;
  };
  bool rotating() const { return rot_size_ || rot_every_; }
  bool part_ends(const Sink& s, const rte_mbuf* m, uint64_t end) const;
  void new_part(Sink& s, uint64_t ts_ns);
  void close_sink(Sink& s);
  void reopen_all();
  uint64_t rot_size_ = 0, rot_every_ = 0;
  unsigned rot_keep_ = 0, reopen_seen_ = 0;
  Sink& sink(uint16_t input, int dlt);
  Sink& sink_of(const rte_mbuf* m);
  void open_sink(Sink& s, bool append = false);
  void write_run(Sink& s, rte_mbuf* const* pkts, unsigned n);
  void reserve(Sink& s, size_t batch);
  int dlt_of(const rte_mbuf* m) const;
  uint32_t iface_of(Sink& s, int dlt);
  uint64_t record_bound(const rte_mbuf* m) const;
  // Records are pcapng (an output named .pcapng): each keeps its link type
  // in one file, an interface block per type.
  bool pcapng_ = false;
  std::vector<uint8_t> blocks_;  // interface blocks due before a run's records
  std::vector<pcapng::EpbHead> epbs_;
  std::vector<pcapng::Trailer> trailers_;
  bool nano_;
  int snaplen_, linktype_;
  std::vector<std::string> paths_;  // per input (one when not mirrored)
  std::vector<std::unique_ptr<Sink>> sinks_;
  std::map<uint32_t, Sink*> by_key_;
  uint32_t last_key_ = 0;
  Sink* last_ = nullptr;
  bool closed_ = false;
  std::string close_error_;
  std::vector<Rec> recs_;
  std::vector<iovec> iov_;
  std::vector<uint8_t> linear_;
  uint64_t packets_ = 0, bytes_ = 0;
};

// Asks every pcap output to reopen its file before its next record (SIGHUP,
// after logrotate moved the files away): a file that exists is appended to,
// a rotating output starts a new part. Async-signal-safe.
void pcap_request_reopen();

// The files a pcap output writes in the run's link type: out.spec, or one
// per input in the folder that mirrors them.
std::vector<std::string> pcap_output_paths(const PortSpec& out);

// Builds a (possibly chained) mbuf holding `plen` bytes of `prefix` followed
// by `len` bytes of `data`.
rte_mbuf* mbuf_from_bytes(rte_mempool* pool, const uint8_t* data, uint32_t len, const uint8_t* prefix = nullptr,
                          uint32_t plen = 0);

}  // namespace amon
