// amon.yaml: ports, workers, consumers, table sizes (libyaml).
#pragma once

#include <string>

#include "engine.h"

namespace amon {

// Reads `path` into cfg (inputs, consumers, workers, eal, flows, zanon,
// stats). Relative policy and pcap paths are taken relative to the YAML
// file's folder. On error returns false with `err` = "file:line:col: message".
bool load_config(const std::string& path, EngineConfig& cfg, std::string& err);

// The `zanon.share` mapping alone, from its own file (amon pcap
// --share-config): the same keys and checks.
bool load_share_config(const std::string& path, share::Settings& s, std::string& err);

// "500ms", "2s", "1m" -> ns; false when not a duration.
bool parse_duration(const std::string& s, uint64_t& ns);

}  // namespace amon
