// A capture's application values read with the protocol plugins' own
// parsers, off the packet path: `amon audit` collects what a policy
// protects from the original capture, `amon whatif` the names a z-anonymity
// rule would observe. Neither names a protocol: every registered plugin of
// the packet's transport is asked, through its parse and, for a plugin
// that rewrites its messages itself, its `values` hook (protocol.h).
//
// Each payload is read on its own, as the first of its flow. A head split
// over TCP segments (split_head) is for the caller to follow (SplitHeads,
// split_heads.h) and read again whole.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "protocol.h"

namespace amon {

class PayloadValues {
 public:
  // Which plugins read a datagram: every one of its transport, or only
  // those that recognise it (its ports at either end, or its content
  // probe). TCP segments go to every TCP plugin either way: a stream is
  // recognised by its first bytes, which one segment may not show.
  enum class Datagrams : uint8_t { Every, Recognised };

  explicit PayloadValues(Datagrams d = Datagrams::Every);
  ~PayloadValues();
  PayloadValues(const PayloadValues&) = delete;
  PayloadValues& operator=(const PayloadValues&) = delete;

  // Some plugin reads payloads of IP protocol l4 (its l4_proto).
  bool reads(uint8_t l4) const {
    for (const Reader& r : readers_)
      if (r.plugin->l4_proto == l4) return true;
    return false;
  }

  // Hands fn(plugin, occurrence) every value found in `payload` by each
  // plugin of transport l4 (6 TCP, 17 UDP, or the IP protocol a plugin
  // parses whole) whose parse says Parsed, in
  // plugin registration order. Payload occurrences (message bodies) are
  // not values and are left out. `from_initiator` says which side sent it
  // (a plugin reads a client's messages and a server's differently).
  // `ends`: no byte will follow these (a split head that never completed):
  // a plugin that tells a head's complete lines from the one cut reads the
  // first (ProtoPacket::ends).
  template <class F>
  void read(uint8_t l4, const uint8_t* payload, uint32_t len, uint16_t sport, uint16_t dport, bool from_initiator,
            F&& fn, bool ends = false) {
    for (Reader& r : readers_) {
      if (!wants(r, l4, payload, len, sport, dport)) continue;
      using Fn = std::remove_reference_t<F>;
      parse(r, payload, len, sport, dport, from_initiator, const_cast<void*>(static_cast<const void*>(&fn)),
            [](void* ctx, const ProtocolPlugin& p, const ProtoOcc& o) { (*static_cast<Fn*>(ctx))(p, o); }, ends);
    }
  }

  // A TCP payload that starts a head more bytes of its direction would
  // complete: a plugin that holds split heads (ProtocolPlugin::holds) and
  // recognises the payload as its own (one of its ports at either end; on
  // no TCP plugin's port, its message_start) parses it as Incomplete and
  // asks to hold it, as the packet path would hold the segment.
  bool split_head(const uint8_t* payload, uint32_t len, uint16_t sport, uint16_t dport, bool from_initiator);

 private:
  struct Reader {
    const ProtocolPlugin* plugin;
    void* state;
    std::unique_ptr<ProtoOccs> occs;
  };
  using Sink = void (*)(void* ctx, const ProtocolPlugin& p, const ProtoOcc& o);
  bool wants(const Reader& r, uint8_t l4, const uint8_t* payload, uint32_t len, uint16_t sport, uint16_t dport) const;
  void parse(Reader& r, const uint8_t* payload, uint32_t len, uint16_t sport, uint16_t dport, bool from_initiator,
             void* ctx, Sink sink, bool ends);

  Datagrams datagrams_;
  std::vector<Reader> readers_;
};

}  // namespace amon
