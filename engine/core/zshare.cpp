#include "zshare.h"

#include <rte_telemetry.h>

#include <stdexcept>

#include "zanon.h"

namespace amon {

bool load_share_keys(const share::Settings& s, share::Keys& out) {
  std::string err;
  if (!share::load_keys(s.key_file, out, err)) throw std::runtime_error("zanon.share.key: " + err);
  return true;
}

std::array<uint8_t, 16> share_user_key(const share::Settings& s) {
  share::Keys k;
  load_share_keys(s, k);
  return k.user;
}

std::unique_ptr<share::Client> start_share(const EngineConfig& cfg, zanon::Store& store, uint64_t max_dt_ns,
                                           share::LogFn log) {
  // Live, packet times are the wall clock; offline they are the capture's.
  auto c = std::make_unique<share::Client>(cfg.share, store, max_dt_ns, !cfg.offline, std::move(log));
  c->start();
  return c;
}

void add_share_telemetry(const share::Status& s, rte_tel_data* d) {
  rte_tel_data_add_dict_u64(d, "share_connected", s.connected);
  rte_tel_data_add_dict_u64(d, "share_replayed", s.replayed);
  rte_tel_data_add_dict_u64(d, "share_published", s.published);
  rte_tel_data_add_dict_u64(d, "share_received", s.received);
  rte_tel_data_add_dict_u64(d, "share_dropped", s.dropped);
  rte_tel_data_add_dict_u64(d, "share_outages", s.outages);
  rte_tel_data_add_dict_u64(d, "share_publish_errors", s.publish_errors);
  rte_tel_data_add_dict_u64(d, "share_lag_msgs", s.lag_msgs);
  rte_tel_data_add_dict_u64(d, "share_lag_ns", s.lag_ns);
}

}  // namespace amon
