#include "pcapio.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

namespace amon::pcapio {

namespace {

constexpr size_t kBuffer = size_t(256) << 10;
// A pcapng block larger than this is a corrupt length, not a packet.
constexpr uint32_t kMaxBlock = uint32_t(16) << 20;
constexpr uint32_t kShb = 0x0A0D0D0A, kIdb = 1, kPb = 2, kSpb = 3, kEpb = 6;
constexpr uint32_t kByteOrder = 0x1A2B3C4D;
// libpcap's DLT_RAW on Linux; the file format's LINKTYPE_RAW is 101.
constexpr int kDltRaw = 12, kLinktypeRaw = 101;

int dlt_of_linktype(uint32_t lt) {
  lt &= 0x03FFFFFF;  // the upper bits flag an FCS length, not the type
  return lt == uint32_t(kLinktypeRaw) ? kDltRaw : int(lt);
}

// libpcap's largest record per link type (max_snaplen_for_dlt): a longer
// one is a corrupt length. D-Bus, EBHSCR and USBPcap allow more.
uint32_t max_snaplen(int dlt) {
  switch (dlt) {
    case 231: return 128u << 20;
    case 279: return 8u << 20;
    case 249: return 1u << 20;
    default: return 262144;
  }
}

uint32_t adjust_snaplen(int dlt, uint32_t s) { return s == 0 || s > max_snaplen(dlt) ? max_snaplen(dlt) : s; }

uint32_t bswap(uint32_t v) { return __builtin_bswap32(v); }

uint32_t raw32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

uint16_t Capture::r16(const uint8_t* p) const {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return swap_ ? __builtin_bswap16(v) : v;
}

uint32_t Capture::r32(const uint8_t* p) const { return swap_ ? bswap(raw32(p)) : raw32(p); }

Capture::Capture(const std::string& path) : path_(path) {
  try {
    open_source();
    read_file_header();
  } catch (...) {
    release();  // a constructor that throws runs no destructor
    throw;
  }
}

Capture::~Capture() { release(); }

void Capture::release() {
  if (zs_) {
    inflateEnd(static_cast<z_stream*>(zs_));
    delete static_cast<z_stream*>(zs_);
    zs_ = nullptr;
  }
  if (fd_ >= 0) ::close(fd_), fd_ = -1;
}

void Capture::open_source() {
  const bool in = path_ == "-";
  fd_ = in ? ::dup(STDIN_FILENO) : ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw BadInput(path_ + ": " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd_, &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw BadInput(path_ + ": is a directory, not a capture");
    if (S_ISREG(st.st_mode)) {
      if (st.st_size == 0) throw BadInput(path_ + ": is empty, not a capture");
      file_bytes_ = uint64_t(st.st_size);
    }
  }
  buf_.resize(kBuffer);
  // gzip is known by its magic. The first two bytes are read as they come
  // (a pipe gives what it has: nothing waits for a buffer to fill).
  while (end_ < 2) {
    const ssize_t n = ::read(fd_, buf_.data() + end_, 2 - end_);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    end_ += size_t(n);
  }
  consumed_ = end_;
  if (end_ == 2 && buf_[0] == 0x1f && buf_[1] == 0x8b) {
    auto* z = new z_stream{};
    // 15 + 16: a gzip stream with the largest window.
    if (inflateInit2(z, 15 + 16) != Z_OK) {
      delete z;
      throw BadInput(path_ + ": cannot start zlib");
    }
    zs_ = z;
    zin_.resize(kBuffer);
    std::memcpy(zin_.data(), buf_.data(), 2);
    z->next_in = zin_.data();
    z->avail_in = 2;
    end_ = 0;
  }
}

uint64_t Capture::bytes_read() const { return consumed_; }

// Reads what the descriptor has (at most `room` bytes, at least one unless
// at its end): -1 on an error.
ssize_t Capture::read_some(uint8_t* to, size_t room) {
  for (;;) {
    const ssize_t n = ::read(fd_, to, room);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && error_.empty()) error_ = path_ + ": " + std::strerror(errno);
    if (n > 0) consumed_ += uint64_t(n);
    return n;
  }
}

// Inflates into `to` what the compressed input gives: bytes produced, 0 at
// the end of the stream, -1 on an error.
ssize_t Capture::inflate_some(uint8_t* to, size_t room) {
  auto* z = static_cast<z_stream*>(zs_);
  z->next_out = to;
  z->avail_out = unsigned(std::min<size_t>(room, UINT_MAX));
  while (z->avail_out == room) {
    if (zdone_ && z->avail_in) {  // another gzip member follows (as `cat a.gz b.gz` makes)
      inflateReset(z);
      zdone_ = false;
    }
    if (z->avail_in == 0) {
      const ssize_t n = read_some(zin_.data(), zin_.size());
      if (n < 0) return -1;
      if (n == 0) {
        if (!zdone_ && error_.empty()) error_ = path_ + ": gzip: the compressed stream is cut short";
        return zdone_ ? 0 : -1;
      }
      z->next_in = zin_.data();
      z->avail_in = unsigned(n);
      continue;
    }
    const int rc = inflate(z, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) zdone_ = true;
    else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      if (error_.empty()) error_ = path_ + ": gzip: " + (z->msg ? z->msg : "corrupt data");
      return -1;
    }
  }
  return ssize_t(room - z->avail_out);
}

size_t Capture::fill(size_t want) {
  if (end_ - pos_ >= want || eof_) return end_ - pos_;
  if (pos_) {
    std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
    end_ -= pos_;
    pos_ = 0;
  }
  if (buf_.size() < want) buf_.resize(want);
  while (end_ < want && !eof_) {
    const size_t room = buf_.size() - end_;
    const ssize_t n = zs_ ? inflate_some(buf_.data() + end_, room) : read_some(buf_.data() + end_, room);
    if (n <= 0) {
      eof_ = true;
      break;
    }
    end_ += size_t(n);
  }
  return end_ - pos_;
}

void Capture::read_file_header() {
  const size_t have = fill(24);
  if (have == 0) throw BadInput(path_ + (error_.empty() ? ": is empty, not a capture" : ": " + error_));
  const uint8_t* p = buf_.data() + pos_;
  const uint32_t magic = have >= 4 ? raw32(p) : 0;
  if (magic == kShb) {
    ng_ = true;
    Record r;
    // The section header and the blocks up to the first interface, so that
    // the first interface's link type is known before any packet.
    // (A packet before any interface is refused by read_block.)
    while (section_.empty() && read_block(r, true)) {
    }
    if (section_.empty()) {
      std::string why = error_.empty() ? "a pcapng file with no interface" : error_;
      throw BadInput(why.rfind(path_, 0) == 0 ? why : path_ + ": " + why);
    }
    return;
  }
  uint32_t m = magic;
  const uint32_t kinds[] = {0xa1b2c3d4, 0xa1b23c4d, 0xa1b2cd34};
  bool known = false;
  for (uint32_t k : kinds) {
    if (m == k || m == bswap(k)) {
      swap_ = m != k;
      nano_ = k == 0xa1b23c4d;
      extra_ = k == 0xa1b2cd34 ? 8 : 0;  // ifindex, protocol, packet type, pad
      known = true;
    }
  }
  if (!known || have < 24) {
    const bool gz_data = zs_ != nullptr;
    throw BadInput(path_ + (gz_data ? ": gzip-compressed, but not a capture (neither pcap nor pcapng)"
                                    : ": not a capture (neither pcap nor pcapng)"));
  }
  if (r16(p + 4) != 2) throw BadInput(path_ + ": pcap version " + std::to_string(r16(p + 4)) + " (only 2 is known)");
  linktype_ = dlt_of_linktype(r32(p + 20));
  snaplen_ = adjust_snaplen(linktype_, r32(p + 16));
  ifaces_linktype_.push_back(linktype_);
  pos_ += 24;
}

int Capture::next(Record& r) {
  if (ng_) return read_block(r) ? 1 : 0;
  const size_t hl = 16 + extra_;
  size_t have = fill(hl);
  if (have == 0) return 0;
  if (have < hl) {
    error_ = path_ + ": cut short inside a record header (" + std::to_string(have) + " of " + std::to_string(hl) + " bytes)";
    return 0;
  }
  const uint8_t* p = buf_.data() + pos_;
  const uint32_t sec = r32(p), frac = r32(p + 4), cap = r32(p + 8), len = r32(p + 12);
  if (cap > max_snaplen(linktype_)) {
    error_ = path_ + ": a record of " + std::to_string(cap) + " captured bytes, more than the " +
             std::to_string(max_snaplen(linktype_)) + " a record can have (a corrupt file)";
    return 0;
  }
  have = fill(hl + cap);
  if (have < hl + cap) {
    if (error_.empty())
      error_ = path_ + ": cut short inside a record (" + std::to_string(have - hl) + " of " + std::to_string(cap) + " bytes)";
    return 0;
  }
  p = buf_.data() + pos_;
  r.ts_ns = uint64_t(sec) * 1000000000ULL + uint64_t(frac) * (nano_ ? 1 : 1000);
  // Longer than the file's snapshot length: libpcap keeps the first snaplen bytes.
  r.caplen = std::min(cap, snaplen_);
  r.len = len;
  r.linktype = linktype_;
  r.iface = 0;
  r.data = p + hl;
  pos_ += hl + cap;
  return 1;
}

uint64_t Capture::to_ns(const Iface& f, uint64_t u) const {
  using u128 = unsigned __int128;
  u128 ns;
  if (f.tsres_den) {  // 10^-e seconds per unit; den = 10^e
    ns = f.tsres_den <= 1000000000ULL ? u128(u) * (1000000000ULL / f.tsres_den) : u128(u) / (f.tsres_den / 1000000000ULL);
  } else {  // 2^-k seconds per unit
    ns = (u128(u) * 1000000000ULL) >> f.tsres_num;
  }
  ns += u128(int64_t(f.tsoffset)) * 1000000000ULL;
  return uint64_t(ns);
}

bool Capture::parse_shb(const uint8_t* b, uint32_t len) {
  if (len < 28 || r16(b + 12) != 1) {
    error_ = path_ + ": a pcapng section header of an unknown version";
    return false;
  }
  section_base_ = uint32_t(ifaces_linktype_.size());
  section_.clear();
  return true;
}

void Capture::parse_idb(const uint8_t* b, uint32_t len) {
  Iface f{};
  f.linktype = dlt_of_linktype(r16(b + 8));
  f.snaplen = adjust_snaplen(f.linktype, r32(b + 12));
  f.tsres_den = 1000000;
  // Options: code, length, value padded to 4 bytes; code 0 ends them.
  for (uint32_t o = 16; o + 4 <= len - 4;) {
    const uint16_t code = r16(b + o), ol = r16(b + o + 2);
    if (code == 0 || o + 4 + ol > len - 4) break;
    const uint8_t* v = b + o + 4;
    if (code == 9 && ol >= 1) {  // if_tsresol
      if (v[0] & 0x80) f.tsres_num = std::min(v[0] & 0x7f, 63), f.tsres_den = 0;
      else {
        f.tsres_den = 1;
        for (int i = 0; i < std::min<int>(v[0], 19); ++i) f.tsres_den *= 10;
      }
    } else if (code == 14 && ol >= 8) {  // if_tsoffset, seconds
      uint64_t x;
      std::memcpy(&x, v, 8);
      f.tsoffset = int64_t(swap_ ? __builtin_bswap64(x) : x);
    }
    o += 4 + ((ol + 3u) & ~3u);
  }
  if (!(f.tsres_den && f.tsres_den <= 1000000)) nano_ = true;
  if (ifaces_linktype_.empty()) linktype_ = f.linktype, snaplen_ = f.snaplen;
  section_.push_back(f);
  ifaces_linktype_.push_back(f.linktype);
}

bool Capture::read_block(Record& r, bool until_iface) {
  for (;;) {
    size_t have = fill(12);
    if (have == 0) return false;
    if (have < 12) {
      error_ = path_ + ": cut short inside a block header";
      return false;
    }
    const uint8_t* p = buf_.data() + pos_;
    const uint32_t raw_type = raw32(p);
    if (raw_type == kShb) {
      const uint32_t bom = raw32(p + 8);
      if (bom != kByteOrder && bom != bswap(kByteOrder)) {
        error_ = path_ + ": a pcapng section header with an unknown byte order";
        return false;
      }
      swap_ = bom != kByteOrder;
    }
    const uint32_t type = r32(p), len = r32(p + 4);
    if (len < 12 || len % 4 || len > kMaxBlock) {
      error_ = path_ + ": a pcapng block of " + std::to_string(len) + " bytes (a corrupt file)";
      return false;
    }
    have = fill(len);
    if (have < len) {
      if (error_.empty()) error_ = path_ + ": cut short inside a block";
      return false;
    }
    p = buf_.data() + pos_;
    if (r32(p + len - 4) != len) {
      error_ = path_ + ": a pcapng block whose two lengths differ (a corrupt file)";
      return false;
    }
    pos_ += len;
    const uint32_t body = len - 12;  // between the length fields
    if (type == kShb) {
      if (!parse_shb(p, len)) return false;
      continue;
    }
    if (type == kIdb) {
      if (body < 8) {
        error_ = path_ + ": an interface block too short";
        return false;
      }
      parse_idb(p, len);
      if (until_iface) return true;
      continue;
    }
    if (type != kEpb && type != kSpb && type != kPb) continue;  // names, statistics, comments, custom blocks
    uint32_t id = 0, cap = 0, wire = 0, hdr = 0;
    uint64_t units = 0;
    if (type == kEpb || type == kPb) {
      if (body < 20) {
        error_ = path_ + ": a packet block too short";
        return false;
      }
      id = type == kEpb ? r32(p + 8) : r16(p + 8);
      units = uint64_t(r32(p + 12)) << 32 | r32(p + 16);
      cap = r32(p + 20);
      wire = r32(p + 24);
      hdr = 28;
    } else {
      if (body < 4) {
        error_ = path_ + ": a packet block too short";
        return false;
      }
      wire = r32(p + 8);
      hdr = 12;
      cap = std::min(wire, body - 4);
    }
    if (id >= section_.size()) {
      error_ = path_ + ": a packet of interface " + std::to_string(id) + ", which was not described";
      return false;
    }
    if (cap > len - 4 - hdr) {
      error_ = path_ + ": a packet block whose captured length exceeds the block (a corrupt file)";
      return false;
    }
    const Iface& f = section_[id];
    r.caplen = std::min(cap, f.snaplen);
    r.len = wire;
    r.ts_ns = type == kSpb ? 0 : to_ns(f, units);
    r.linktype = f.linktype;
    r.iface = section_base_ + id;
    r.data = p + hdr;
    return true;
  }
}

// ---------------------------------------------------------------- Merge

struct Merge::Open {
  std::unique_ptr<Capture> cap;
  Record rec;
  size_t input;
};

Merge::Merge(std::vector<std::string> paths) : paths_(std::move(paths)) {
  first_ts_.assign(paths_.size(), 0);
  done_bytes_.assign(paths_.size(), 0);
  for (size_t i = 0; i < paths_.size(); ++i) {
    auto c = std::make_unique<Capture>(paths_[i]);
    if (i == 0) linktype_ = c->linktype();
    snaplen_ = std::max(snaplen_, c->snaplen());
    nano_ = nano_ || c->nanosecond();
    total_ += c->file_bytes();
    auto o = std::make_unique<Open>();
    o->input = i;
    const int rc = c->next(o->rec);
    first_ts_[i] = rc == 1 ? o->rec.ts_ns : 0;
    // A pipe cannot be opened twice, and one input needs no merge: kept open.
    if (paths_.size() == 1 || paths_[i] == "-") {
      if (rc != 1) {
        if (!c->error().empty()) error_ = c->error();
        continue;
      }
      o->cap = std::move(c);
      open_.push_back(std::move(o));
      std::push_heap(open_.begin(), open_.end(), later);
    } else {
      order_.push_back(i);
    }
  }
  std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) { return first_ts_[a] < first_ts_[b]; });
}

Merge::~Merge() = default;

bool Merge::later(const std::unique_ptr<Open>& a, const std::unique_ptr<Open>& b) {
  return a->rec.ts_ns != b->rec.ts_ns ? a->rec.ts_ns > b->rec.ts_ns : a->input > b->input;
}

void Merge::open_due(uint64_t until) {
  while (next_open_ < order_.size() && first_ts_[order_[next_open_]] <= until && error_.empty()) {
    const size_t i = order_[next_open_++];
    auto o = std::make_unique<Open>();
    o->input = i;
    try {
      o->cap = std::make_unique<Capture>(paths_[i]);
    } catch (const BadInput& e) {
      error_ = e.what();  // it was a capture when the run began
      return;
    }
    if (o->cap->next(o->rec) != 1) {
      if (!o->cap->error().empty()) error_ = o->cap->error();
      finished_bytes_ += o->cap->file_bytes();
      continue;
    }
    open_.push_back(std::move(o));
    std::push_heap(open_.begin(), open_.end(), later);
  }
}

int Merge::next(Record& r, size_t& input) {
  // The record handed out last is replaced by its input's next one only now:
  // its bytes stayed valid until this call.
  if (!open_.empty() && open_.back()->cap && !open_.back()->rec.data) {
    Open& o = *open_.back();
    if (o.cap->next(o.rec) == 1) {
      std::push_heap(open_.begin(), open_.end(), later);
    } else {
      if (!o.cap->error().empty() && error_.empty()) error_ = o.cap->error();
      finished_bytes_ += o.cap->file_bytes() ? o.cap->file_bytes() : o.cap->bytes_read();
      open_.pop_back();
    }
  }
  if (!error_.empty()) return 0;
  open_due(open_.empty() ? UINT64_MAX : open_.front()->rec.ts_ns);
  if (!error_.empty() || open_.empty()) return 0;
  std::pop_heap(open_.begin(), open_.end(), later);
  Open& o = *open_.back();
  r = o.rec;
  input = o.input;
  o.rec.data = nullptr;  // marks it handed out
  return 1;
}

uint64_t Merge::bytes_read() const {
  uint64_t b = finished_bytes_;
  for (const auto& o : open_) b += o->cap->bytes_read();
  return b;
}

// ---------------------------------------------------------------- inputs

std::vector<InputFile> expand_inputs(const std::vector<std::string>& roots, const std::string& glob,
                                     std::vector<std::string>& skipped) {
  namespace fs = std::filesystem;
  std::vector<InputFile> out;
  for (const auto& root : roots) {
    struct stat st{};
    if (root == "-" || (::stat(root.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))) {
      out.push_back({root, root == "-" ? root : fs::path(root).filename().string()});
      continue;
    }
    if (::stat(root.c_str(), &st) != 0) throw BadInput(root + ": " + std::strerror(errno));
    std::vector<fs::path> files;
    std::error_code ec;
    fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec), end;
    if (ec) throw BadInput(root + ": " + ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) break;
      if (!it->is_regular_file(ec)) continue;
      const std::string name = it->path().filename().string();
      if (!glob.empty() && fnmatch(glob.c_str(), name.c_str(), 0) != 0) continue;
      files.push_back(it->path());
    }
    if (ec) throw BadInput(root + ": " + ec.message());
    std::sort(files.begin(), files.end());
    const size_t before = out.size();
    for (const auto& f : files) {
      try {
        Capture probe(f.string());
      } catch (const BadInput& e) {
        skipped.push_back(e.what());
        continue;
      }
      out.push_back({f.string(), fs::relative(f, root, ec).string()});
    }
    if (out.size() == before) throw BadInput(root + ": a directory with no captures in it" + (glob.empty() ? "" : " matching " + glob));
  }
  return out;
}

}  // namespace amon::pcapio
