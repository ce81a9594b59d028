// Runtime of the built-in actions: one small object per (rule, worker).
#pragma once

#include <cstdint>
#include <memory>

#include "registry.h"
#include "runtime.h"

namespace amon {

enum class ActResult : uint8_t { Done, Drop, Cut };

// Per-packet context the actions see.
struct ApplyCtx {
  uint64_t ts_ns = 0;
  const Decoded* d = nullptr;
  const PacketMeta* m = nullptr;
  const uint8_t* client_addr = nullptr;  // original (clear) client address of the flow, addr_len bytes
  uint8_t family = 0;                    // 4 or 6
  FieldId field = kNoField;              // the field being rewritten
  bool is_server = false;                // the address being rewritten is the flow's server
  ConsumerCounters* counters = nullptr;
};

class RtAction {
 public:
  virtual ~RtAction() = default;
  bool modifies = true;
  bool cuts = false;  // removes the bytes (their old checksum sum is not needed)
  virtual ActResult mac(uint8_t* m, ApplyCtx& c) { return ActResult::Done; }
  virtual ActResult addr(uint8_t* a, ApplyCtx& c) { return ActResult::Done; }
  virtual ActResult bytes(uint8_t* p, uint32_t len, ApplyCtx& c) { return ActResult::Done; }
};

struct ZanonSlotInfo {
  int bit = -1;        // bit in FlowState masks
  int64_t z = 0, dt_ns = 0;
};

// Builds the runtime object of an action call. Throws std::runtime_error on
// a combination the checker should have refused.
std::unique_ptr<RtAction> make_rt_action(const ActionCall& call, const dsl::Policy& pol, SharedServices* svc,
                                         const ZanonSlotInfo* zslot);

}  // namespace amon
