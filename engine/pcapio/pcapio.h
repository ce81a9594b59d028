// One way to read a capture, for every command that reads one (amon pcap,
// audit, whatif): a path or "-" (standard input), plain or gzip-compressed
// (recognised by its magic, not its name, and read as a stream), classic
// pcap (micro- or nanosecond, either byte order) or pcapng with any number of
// sections and interfaces of any link types. Timestamps come out in
// nanoseconds, exactly as the file has them; each record names the link type
// of its interface.
//
// Several captures are read as one stream in time order by Merge (a k-way
// merge holding one record per open input; an input is opened only once the
// merge reaches its first timestamp, so a folder of consecutive captures
// keeps one or two open at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <sys/types.h>
#include <vector>

namespace amon::pcapio {

// The input is not a capture that can be read at all: missing, unreadable, a
// directory, empty, or neither pcap nor pcapng. Commands exit 2 for it, as
// for any other bad input; an error inside a capture that started well is a
// runtime failure and is reported by next() instead.
struct BadInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Record {
  uint64_t ts_ns = 0;   // since the Unix epoch
  uint32_t caplen = 0;  // bytes at data
  uint32_t len = 0;     // on the wire (as the file says; may be below caplen in broken files)
  int linktype = 0;     // libpcap's DLT_* value of the record's interface
  uint32_t iface = 0;   // the interface's number in its file (pcapng; 0 in pcap), counted over all sections
  const uint8_t* data = nullptr;  // valid until the next call on the same reader
};

class Capture {
 public:
  // Opens and reads the capture's header; throws BadInput naming the file.
  explicit Capture(const std::string& path);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // 1: a record; 0: the end of the capture, or an error (then error() says
  // which; the records before it were delivered).
  int next(Record& r);
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }
  // The first interface's link type and snapshot length.
  int linktype() const { return linktype_; }
  uint32_t snaplen() const { return snaplen_; }
  // Whether any interface seen so far stamps finer than a microsecond (a
  // nanosecond pcap, or a pcapng if_tsresol below 1 us).
  bool nanosecond() const { return nano_; }
  bool gzip() const { return zs_ != nullptr; }
  // How far into the file (compressed bytes for gzip) the reading is.
  uint64_t bytes_read() const;
  // The file's size on disk, 0 for a pipe.
  uint64_t file_bytes() const { return file_bytes_; }
  // Every interface seen so far: link type per interface number.
  const std::vector<int>& interfaces() const { return ifaces_linktype_; }

 private:
  void release();  // the source and the gzip stream, once
  struct Iface {
    int linktype;
    uint32_t snaplen;
    uint64_t tsres_num, tsres_den;  // seconds per unit as a fraction: 1/den or 2^-k (den = 0: shift k in num)
    int64_t tsoffset;
  };
  size_t fill(size_t want);
  ssize_t read_some(uint8_t* to, size_t room);
  ssize_t inflate_some(uint8_t* to, size_t room);  // bytes available at pos_ after making `want` available if it can
  void open_source();
  void read_file_header();
  // pcapng: the next packet (true) or end/error (false); with until_iface,
  // also true after an interface block.
  bool read_block(Record& r, bool until_iface = false);
  bool parse_shb(const uint8_t* b, uint32_t len);
  void parse_idb(const uint8_t* b, uint32_t len);
  uint64_t to_ns(const Iface& f, uint64_t units) const;
  uint16_t r16(const uint8_t* p) const;
  uint32_t r32(const uint8_t* p) const;

  std::string path_, error_;
  int fd_ = -1;
  void* zs_ = nullptr;  // z_stream of a gzip input
  std::vector<uint8_t> zin_;  // its compressed bytes
  bool zdone_ = false;        // the current gzip member has ended
  std::vector<uint8_t> buf_;
  size_t pos_ = 0, end_ = 0;
  bool eof_ = false;
  uint64_t consumed_ = 0, file_bytes_ = 0;
  bool ng_ = false, swap_ = false, nano_ = false;
  uint32_t extra_ = 0;  // bytes after each classic record header (the "modified" pcap format)
  int linktype_ = 0;
  uint32_t snaplen_ = 0;
  std::vector<Iface> section_;  // pcapng: the current section's interfaces
  uint32_t section_base_ = 0;   // interfaces of earlier sections
  std::vector<int> ifaces_linktype_;
};

// Several captures as one stream in timestamp order (equal timestamps: the
// earlier input first). Records carry `input`, the index of the capture in
// the list given.
class Merge {
 public:
  // Reads each input's header and first timestamp (then closes it again);
  // throws BadInput for the first that cannot be read as a capture.
  explicit Merge(std::vector<std::string> paths);
  ~Merge();
  int next(Record& r, size_t& input);
  const std::string& error() const { return error_; }
  size_t size() const { return paths_.size(); }
  const std::string& path(size_t i) const { return paths_[i]; }
  int linktype() const { return linktype_; }
  uint32_t snaplen() const { return snaplen_; }
  bool nanosecond() const { return nano_; }
  uint64_t bytes_read() const;
  uint64_t total_bytes() const { return total_; }

 private:
  struct Open;
  // Heap order (std's heap keeps the largest first): later time, then later input.
  static bool later(const std::unique_ptr<Open>& a, const std::unique_ptr<Open>& b);
  void open_due(uint64_t until);
  std::vector<std::string> paths_;
  std::vector<uint64_t> first_ts_, done_bytes_;
  std::vector<size_t> order_;  // inputs by first timestamp, not yet opened
  size_t next_open_ = 0;
  std::vector<std::unique_ptr<Open>> open_;  // a min-heap on the held record's time
  std::string error_;
  int linktype_ = 0;
  uint32_t snaplen_ = 0;
  bool nano_ = false;
  uint64_t total_ = 0, finished_bytes_ = 0;
};

// One capture of a set: its path, and its path below the folder it was
// found in (its file name for a file given by name), which names its output
// when outputs mirror the inputs.
struct InputFile {
  std::string path, rel;
};

// The captures under `roots`: a file (or "-") is taken as it is and must be
// a capture; a directory is walked recursively in name order, keeping the
// files whose name matches `glob` (fnmatch; all files when empty). Files of
// a directory that cannot be read as captures are left out and described in
// `skipped` ("path: why"). Throws BadInput for a root that is missing or not
// a capture.
std::vector<InputFile> expand_inputs(const std::vector<std::string>& roots, const std::string& glob,
                                     std::vector<std::string>& skipped);

}  // namespace amon::pcapio
