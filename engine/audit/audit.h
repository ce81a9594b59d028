// amon audit: does an anonymized capture give away what its policy protects?
//
// Independent of the rewrite path on purpose: the values a policy protects
// are collected from the ORIGINAL capture with the protocol parsers alone
// (l2l4 decode, DNS, TLS, HTTP), roles and z-anonymity releases are worked
// out again here (a brute-force count of distinct users, not engine/zanon),
// and every frame of the output is searched, at every offset, for every
// encoding of every protected value. A bug in the runtime therefore cannot
// hide itself from the audit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace amon::pcapio {
struct Record;
}

namespace amon::audit {

// A capture record as the engine's packet path sees it: Ethernet as it is;
// a link layer with fields of its own (802.11) reduced behind its stand-in
// header; another link type's rest behind the stand-in Ethernet header.
// `amon audit` reads the original and the anonymized capture so, and
// `amon whatif` its capture, so values are found where the engine finds them.
struct Frame {
  uint64_t ts;
  uint32_t wire;
  std::vector<uint8_t> bytes;
};
Frame as_engine_sees(const pcapio::Record& r);

struct Options {
  std::string policy, original, anonymized;
  bool json = false;
  // Leaks and possible hits listed in the report, per class (all are
  // counted): a class with few leaks is listed whole even behind thousands
  // of another's.
  unsigned max_listed = 200;
};

struct Hit {
  uint64_t frame = 0;     // 1-based frame number in the anonymized capture
  uint32_t offset = 0;    // byte offset of the match in that frame
  std::string cls;        // the protecting field: ip.client, dns.qname, eth.src, ...
  std::string value;      // the protected value, printable
  std::string encoding;   // binary, dotted-quad, in-addr.arpa (wire), ...
  std::string context;    // where the bytes sit: "ip.src", "icmp quote", "dns", "tcp payload (http)", ...
  std::string rule;       // file:line: the rule that protects the value
  // A possible hit's likely cause when it is chance, as tests/tools/leak_sweep.py
  // judges it: "low-entropy value" (two zero bytes, or one byte repeated:
  // counters, padding, fuzz fill) or "random-looking bytes" (the frame
  // above its first 42 bytes holds more than 6 bits per byte: compressed or
  // encrypted data). Empty: neither, a carrier the audit parses not.
  std::string chance;
};

struct ClassSummary {
  std::string cls;
  uint64_t protected_values = 0;  // distinct values this field protects somewhere in the original
  uint64_t found = 0;             // of those, found anywhere in the output (allowed or not)
  uint64_t leaks = 0;             // matches where the policy does not allow the value
  uint64_t possible = 0;          // 4-byte binary matches inside opaque bytes
};

struct Report {
  uint64_t original_frames = 0, anonymized_frames = 0, unmatched_frames = 0;
  uint64_t leaks = 0, possible = 0, allowed = 0;
  uint64_t inside_allowed = 0;    // of `allowed`: protected names found only inside an allowed name
  double possible_expected = 0;   // 4-byte matches expected by chance over the opaque bytes searched
  uint64_t opaque_bytes = 0;
  uint64_t possible_chance = 0;   // of `possible`: those with a `chance` cause
  // The original's heads split over TCP segments (split_heads.h): followed,
  // read whole, ended unfinished (read as far as they were whole), not
  // followed for lack of room; segments that came past a hole.
  uint64_t heads_followed = 0, heads_whole = 0, heads_unfinished = 0, heads_refused = 0, heads_out_of_order = 0;
  std::vector<ClassSummary> classes;
  std::vector<Hit> leak_list, possible_list;  // in frame order, the first Options::max_listed of each class
};

// Runs the audit; false with `err` set on a usage or input problem.
bool run(const Options& o, Report& r, std::string& err);
std::string render_text(const Options& o, const Report& r);
std::string render_json(const Options& o, const Report& r);

// `amon audit` (argv excludes the subcommand word). Exit 0 clean, 1 leaks, 2 usage.
int audit_main(int argc, char** argv);

}  // namespace amon::audit
