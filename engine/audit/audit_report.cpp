// The report, as text or JSON, and the `amon audit` command line.
#include <cstdio>
#include <cstdlib>

#include "audit_impl.h"

namespace amon::audit {

std::string jstr(const std::string& s) {
  std::string r = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') r += '\\', r += char(c);
    else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      r += b;
    } else r += char(c);
  }
  return r + "\"";
}

std::string render_text(const Options& o, const Report& r) {
  std::string s;
  char b[512];
  std::snprintf(b, sizeof b, "amon audit: policy %s\n  original %s (%llu frames)\n  anonymized %s (%llu frames, %llu not tied to an original by time)\n",
                o.policy.c_str(), o.original.c_str(), (unsigned long long)r.original_frames, o.anonymized.c_str(),
                (unsigned long long)r.anonymized_frames, (unsigned long long)r.unmatched_frames);
  s += b;
  s += "  class                 protected      found      leaks   possible\n";
  for (auto& c : r.classes) {
    std::snprintf(b, sizeof b, "  %-20s %10llu %10llu %10llu %10llu\n", c.cls.c_str(),
                  (unsigned long long)c.protected_values, (unsigned long long)c.found, (unsigned long long)c.leaks,
                  (unsigned long long)c.possible);
    s += b;
  }
  for (auto& h : r.leak_list) {
    std::snprintf(b, sizeof b, "LEAK frame %llu offset %u: %s %s (%s) in %s; protected by %s\n",
                  (unsigned long long)h.frame, h.offset, h.cls.c_str(), h.value.c_str(), h.encoding.c_str(),
                  h.context.c_str(), h.rule.empty() ? "(no rule)" : h.rule.c_str());
    s += b;
  }
  if (r.leaks > r.leak_list.size()) s += "  ... " + std::to_string(r.leaks - r.leak_list.size()) + " more leaks\n";
  for (auto& h : r.possible_list) {
    std::snprintf(b, sizeof b, "possible frame %llu offset %u: %s %s (binary, in %s; %s)\n", (unsigned long long)h.frame,
                  h.offset, h.cls.c_str(), h.value.c_str(), h.context.c_str(),
                  h.chance.empty() ? "not chance by its look: a carrier no plugin parses?" : ("chance: " + h.chance).c_str());
    s += b;
  }
  std::snprintf(b, sizeof b,
                "%llu leaks; %llu possible (binary addresses or MACs in opaque bytes; %llu such bytes, %.2f 4-byte matches "
                "expected by chance; %llu of them low-entropy values or in random-looking bytes); "
                "%llu matches allowed by the policy (%llu of them protected names inside an allowed name)\n",
                (unsigned long long)r.leaks, (unsigned long long)r.possible, (unsigned long long)r.opaque_bytes,
                r.possible_expected, (unsigned long long)r.possible_chance, (unsigned long long)r.allowed,
                (unsigned long long)r.inside_allowed);
  s += b;
  std::snprintf(b, sizeof b,
                "TCP heads split over segments in the original: %llu followed, %llu read whole, %llu unfinished (read as "
                "far as whole), %llu not followed (no room); %llu segments past a hole\n",
                (unsigned long long)r.heads_followed, (unsigned long long)r.heads_whole,
                (unsigned long long)r.heads_unfinished, (unsigned long long)r.heads_refused,
                (unsigned long long)r.heads_out_of_order);
  s += b;
  return s;
}

std::string render_json(const Options& o, const Report& r) {
  auto hit = [](const Hit& h) {
    return "{\"frame\":" + std::to_string(h.frame) + ",\"offset\":" + std::to_string(h.offset) + ",\"class\":" +
           jstr(h.cls) + ",\"value\":" + jstr(h.value) + ",\"encoding\":" + jstr(h.encoding) + ",\"context\":" +
           jstr(h.context) + ",\"rule\":" + jstr(h.rule) + ",\"chance\":" + jstr(h.chance) + "}";
  };
  std::string s = "{\"policy\":" + jstr(o.policy) + ",\"original\":" + jstr(o.original) + ",\"anonymized\":" +
                  jstr(o.anonymized) + ",\"original_frames\":" + std::to_string(r.original_frames) +
                  ",\"anonymized_frames\":" + std::to_string(r.anonymized_frames) + ",\"unmatched_frames\":" +
                  std::to_string(r.unmatched_frames) + ",\"leaks\":" + std::to_string(r.leaks) + ",\"possible\":" +
                  std::to_string(r.possible) + ",\"possible_expected\":" + std::to_string(r.possible_expected) +
                  ",\"possible_chance\":" + std::to_string(r.possible_chance) +
                  ",\"opaque_bytes\":" + std::to_string(r.opaque_bytes) + ",\"allowed\":" + std::to_string(r.allowed) +
                  ",\"inside_allowed\":" + std::to_string(r.inside_allowed) + ",\"split_heads\":{\"followed\":" +
                  std::to_string(r.heads_followed) + ",\"whole\":" + std::to_string(r.heads_whole) +
                  ",\"unfinished\":" + std::to_string(r.heads_unfinished) + ",\"refused\":" +
                  std::to_string(r.heads_refused) + ",\"out_of_order\":" + std::to_string(r.heads_out_of_order) +
                  "},\"classes\":[";
  for (size_t i = 0; i < r.classes.size(); ++i) {
    auto& c = r.classes[i];
    s += (i ? "," : "") + std::string("{\"class\":") + jstr(c.cls) + ",\"protected\":" +
         std::to_string(c.protected_values) + ",\"found\":" + std::to_string(c.found) + ",\"leaks\":" +
         std::to_string(c.leaks) + ",\"possible\":" + std::to_string(c.possible) + "}";
  }
  s += "],\"leak_list\":[";
  for (size_t i = 0; i < r.leak_list.size(); ++i) s += (i ? "," : "") + hit(r.leak_list[i]);
  s += "],\"possible_list\":[";
  for (size_t i = 0; i < r.possible_list.size(); ++i) s += (i ? "," : "") + hit(r.possible_list[i]);
  return s + "]}\n";
}

int audit_main(int argc, char** argv) {
  Options o;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--policy" && v) o.policy = v, ++i;
    else if (a == "--original" && v) o.original = v, ++i;
    else if (a == "--anonymized" && v) o.anonymized = v, ++i;
    else if (a == "--format" && v && (std::string(v) == "json" || std::string(v) == "text")) o.json = std::string(v) == "json", ++i;
    else if (a == "--max-listed" && v) o.max_listed = unsigned(std::strtoul(v, nullptr, 10)), ++i;
    else {
      std::fprintf(stderr, "amon: unknown or incomplete option '%s' for audit\n(run 'amon --help' for usage)\n", a.c_str());
      return 2;
    }
  }
  if (o.policy.empty() || o.original.empty() || o.anonymized.empty()) {
    std::fprintf(stderr, "amon: audit needs --policy P.amon --original IN.pcap --anonymized OUT.pcap\n");
    return 2;
  }
  Report r;
  std::string err;
  if (!run(o, r, err)) {
    std::fprintf(stderr, "%s\n", err.c_str());
    return 2;
  }
  std::fputs((o.json ? render_json(o, r) : render_text(o, r)).c_str(), stdout);
  return r.leaks ? 1 : 0;
}


}  // namespace amon::audit
