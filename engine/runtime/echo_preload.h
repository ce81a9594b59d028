// Offline, what the pre-pass learns for a consumer's echo table
// (EchoPreload, echo.h): from each packet's application parse, the bytes
// values of the fields its policy rewrites by the value alone
// (Program::echo_preload_rule), each with what its rule makes of it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "echo.h"
#include "runtime.h"

namespace amon {

struct ProtoOccs;
class RtAction;

class EchoCollector {
 public:
  explicit EchoCollector(const Program& p);
  ~EchoCollector();
  // Some field of the policy has such a rule, or its users' addresses are
  // preloaded (Program::echo_preload_addrs).
  bool wants() const { return wants_ || addrs_; }
  bool wants_values() const { return wants_; }
  bool wants_addrs() const { return addrs_; }
  // An address of a user of the policy (inside `clients`, or learnt by the
  // pre-pass), seen in an IP header.
  void user_addr(const uint8_t* a, unsigned alen) { out_->add_addr(a, alen); }
  // The occurrences of one complete parse of a packet's payload `pl`
  // (`avail` bytes captured).
  void occurrences(const ProtoOccs& O, const uint8_t* pl, uint32_t avail);
  // A name of an NBNS message (ProtocolPlugin::values of DNS on port 137):
  // its DNS field's rule, or, with none, the device host name's
  // (dhcp.hostname), as the DNS plugin decides the names of the local name
  // protocols; its host's name (its 15 characters) with it.
  void nbns_name(const ProtoOcc& o);
  std::shared_ptr<EchoPreload> take() {
    out_->seal();
    return std::move(out_);
  }

 private:
  std::vector<int> rule_;                          // by FieldId: Program::echo_preload_rule
  std::vector<std::unique_ptr<RtAction>> act_;     // by rule index, those rule_ names
  std::vector<uint8_t> named_;                     // by FieldId: 1 some rule names it, 2 name_dec_ holds its decision
  std::vector<names::Decision> name_dec_;          // by FieldId: Program::echo_preload_name
  bool host_ = false;                              // the device host name's rule decides every name alike
  names::Decision host_dec_;
  void name(std::string_view text, std::string_view shown, const names::Decision& d);
  std::shared_ptr<EchoPreload> out_ = std::make_shared<EchoPreload>();
  std::string old_, new_;
  bool wants_ = false;
  bool addrs_ = false;
};

}  // namespace amon
