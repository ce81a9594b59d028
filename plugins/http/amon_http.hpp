// HTTP/1.x message-head parser (pipelined requests, responses) over byte
// spans. Header names are classified with one Hyperscan scan per head.
// No allocation on the parse path, no exceptions. See README.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

struct hs_database;
struct hs_scratch;

namespace amon {
class Registry;
struct ProtocolPlugin;
}

namespace amon::http {

void register_fields(Registry& r);
// Whether `field` is one of the fields register_fields declares (each is
// located: by its occurrence kinds, http.body by body_spans).
bool locates(std::string_view field);
// HTTP as a protocol plugin (plugin.cpp), over TCP; and SSDP, HTTP over
// UDP 1900, whose packets carry the same fields.
const ProtocolPlugin& protocol_plugin();
const ProtocolPlugin& ssdp_plugin();

enum class Status : uint8_t { Ok, Truncated, Malformed };

enum class Error : uint8_t {
  None,
  NeedMore,        // Truncated: head incomplete or body continues past the buffer
  BareLf,          // line ended by LF without CR, or a stray CR
  RequestLine,
  StatusLine,
  HeaderName,      // empty / non-token name, or whitespace before ':'
  HeaderValue,     // control character in a value
  Fold,            // obs-fold before the first header
  HeadTooLarge,    // no end of head within kMaxHeadBytes
  ContentLength,   // not digits, too large, or conflicting
  TransferEncoding,// request with a final coding other than chunked
  Capacity,
  Scan,            // Hyperscan error
};

enum class Field : uint8_t {
  Other,
  Method, Uri, UriDomain,
  Host, HostDomain,
  UserAgent,
  Referer, RefererDomain,
  Cookie, Authorization,
  Xff, Forwarded,
  SetCookie,
  Location, LocationDomain,
  Server,
  ContentLength, TransferEncoding,
  Origin, ProxyAuthorization, XRealIp,
  From,
  // What meters classify content with; they name no person, site or page.
  ContentType, ContentEncoding, CacheControl, Date, Expires, Pragma,
  OtherHeader,  // the value of a header none of the kinds above names, framing headers aside
};
const char* field_name(Field f);  // "http.host", "http.referer.domain", ...

struct Span { uint32_t off = 0, len = 0; };

struct HeaderLine {
  Span name, value;  // value without surrounding OWS; with obs-fold it spans the CRLF+WSP of continuation lines
  Field kind;
  bool folded;
};

struct Message {
  bool request;
  uint8_t version_minor;      // HTTP/1.x
  uint16_t status;            // responses
  uint32_t off, head_len;     // head incl. the final CRLFCRLF
  Span method, uri, reason;
  uint16_t first_header, n_headers;
  bool has_content_length, chunked;
  bool body_unbounded;        // chunked or read-until-close: parsing stopped at body_off
  bool uri_has_space;         // request-target held raw spaces (accepted, see parse)
  uint64_t content_length;
  uint32_t body_off;          // first body byte (== off + head_len)
};

struct Occurrence {
  Field kind;
  uint16_t msg;               // index into messages
  uint16_t header;            // index into headers (0xffff for method/uri)
  Span span;
};

struct Result {
  static constexpr unsigned kMaxMsgs = 64, kMaxHeaders = 2048, kMaxOcc = 2048;
  static constexpr uint32_t kMaxHeadBytes = 80 * 1024;  // 64 KiB of headers plus start line
  Status status;
  Error error;
  bool overflow;
  uint32_t consumed;          // bytes of complete messages (heads + bodies present)
  bool more;                  // Ok but kMaxMsgs reached: call again at consumed
  uint64_t body_missing;      // Truncated inside a body: bytes still to come
  // A parse that ends the stream (parse's `ends`): where the last head's
  // incomplete line begins (its start line, or a header line the buffer
  // cuts); UINT32_MAX: every head was whole. Nothing from there on is a
  // located value: its name or its value may be cut anywhere.
  uint32_t partial_from;
  uint16_t n_msgs, n_headers, n_occ;
  Message msgs[kMaxMsgs];
  HeaderLine headers[kMaxHeaders];
  Occurrence occ[kMaxOcc];
};

enum class Direction : uint8_t { Request, Response, Auto };

// The compiled header-name patterns: build once at startup (not thread-safe
// to build; read-only afterwards and shared by all threads).
class Matcher {
 public:
  Matcher();
  ~Matcher();
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;
  const hs_database* db() const { return db_; }
 private:
  hs_database* db_ = nullptr;
};

// Hyperscan scratch: one per worker thread (a scratch must never be used by
// two threads at once). Allocated once, at thread start, never per packet.
class Scratch {
 public:
  explicit Scratch(const Matcher& m);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  hs_scratch* get() const { return s_; }
 private:
  hs_scratch* s_ = nullptr;
};

// `ends`: no byte after these will ever come (a head held until the end of
// its stream, a gap or a timeout): a last head cut short is parsed as far as
// its complete lines go, and ends at the buffer's end (Result::partial_from).
Status parse(const uint8_t* buf, size_t len, Direction dir, const Matcher& m, Scratch& s, Result& out,
             bool ends = false);

// Policy fields (fields.cpp). register_fields declares HTTP's fields in the
// registry; registry_field names the field whose value an occurrence kind
// holds (nullptr: a kind that is no field's value: domain sub-spans of
// Referer/Location/URI, framing headers); is_field_value says whether
// occurrence i of r is a field's value (a Host with a domain is represented
// by its HostDomain occurrence, not by the whole header).
inline constexpr unsigned kFieldKinds = 64;  // bound on Field's values
const char* registry_field(Field k);
bool is_field_value(const Result& r, unsigned i);

// The bytes of [from, to) of the parsed buffer that are no message head
// (bodies, chunk framing, anything after the last head the parse placed),
// in order, at most `max` spans (the last one then runs to `to`). Returns
// their number. http.body is these bytes.
unsigned body_spans(const Result& r, uint32_t from, uint32_t to, Span* out, unsigned max);

// Host part of an absolute URL or authority ("http://u@host:8080/x" -> host).
// Empty span for relative references and IP literals in brackets.
Span url_host(const uint8_t* buf, Span value);

}  // namespace amon::http
