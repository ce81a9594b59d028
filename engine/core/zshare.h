// The engine's side of sharing the z-anonymity view with other boxes
// (engine/share): the deployment's keys for the store and the user hash,
// the client started before the ports, its telemetry.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "engine.h"
#include "share.h"

struct rte_tel_data;

namespace amon {

// The store key from the share key file; throws (a configuration error) when
// the file cannot be used. Returns true (the store is then shared).
bool load_share_keys(const share::Settings& s, share::Keys& out);
// The user hash key every box derives alike, so one client is one user
// whichever box sees it.
std::array<uint8_t, 16> share_user_key(const share::Settings& s);
// Connects and (by default) replays the stream's last dt before returning.
std::unique_ptr<share::Client> start_share(const EngineConfig& cfg, zanon::Store& store, uint64_t max_dt_ns,
                                           share::LogFn log);
// The sync state under /amon/zanon.
void add_share_telemetry(const share::Status& s, rte_tel_data* d);

}  // namespace amon
