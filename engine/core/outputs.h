// Checks of a run's inputs and outputs made before the first packet is read,
// shared by `amon pcap`, `amon run` and `amon check`: an output written by
// two consumers, an output that is (or is a hard link of) an input, a missing
// or unwritable directory, or a format amon does not write would otherwise
// surface only after start-up, or as a silently lost or destroyed file.
#pragma once

#include <string>
#include <vector>

#include "engine.h"

namespace amon {

// One message per problem ("consumer 'x': output a.pcap: ..."); empty: fine.
// With `where`, beside each message the place in the configuration of the
// output or input it is about ("" when not from a configuration). Touches
// no file: nothing is created or truncated.
std::vector<std::string> check_ports(const EngineConfig& cfg, std::vector<std::string>* where = nullptr);

// The files a vdev's devargs read and write (net_pcap's rx_pcap=/tx_pcap=,
// also rx_iface-less forms): for check_ports and `amon check`.
void vdev_files(const std::string& spec, std::vector<std::string>& reads, std::vector<std::string>& writes);

}  // namespace amon
