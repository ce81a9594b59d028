// ns per client Initial (1200 bytes, ClientHello with SNI): decrypt and
// locate (keys cached / derived anew), re-encrypting rewrite, key derivation.
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "amon_quic.hpp"
#include "l7_build.hpp"
#include "quic_build.hpp"

using namespace amon;
using Clock = std::chrono::steady_clock;

template <class F>
static double ns_per(const char* what, F&& f, unsigned iters) {
  for (unsigned i = 0; i < iters / 10 + 1; ++i) f(i);  // warm up
  const auto t0 = Clock::now();
  size_t sink = 0;
  for (unsigned i = 0; i < iters; ++i) sink += f(i);
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / double(iters);
  std::printf("%-52s %8.1f ns/Initial  (%zu)\n", what, ns, sink % 7);
  return ns;
}

int main() {
  quic::Crypto c;
  auto d = std::make_unique<quic::Datagram>();
  // A Chrome-sized hello: SNI, 300 bytes of other extensions, in one Initial.
  const auto h = l7test::client_hello_body(
      0x0303, {l7test::sni_ext({"www.example.com"}), {0x0033, std::vector<uint8_t>(300, 7)}});
  const auto frames = quictest::crypto_frame(0, h, 0, h.size());
  // 1024 connections (more than the 64 cached key sets) and one.
  std::vector<quictest::Bytes> pk;
  for (unsigned i = 0; i < 1024; ++i) {
    quictest::Bytes dcid{uint8_t(i >> 8), uint8_t(i), 1, 2, 3, 4, 5, 6};
    pk.push_back(quictest::initial(c, quic::kVersion1, dcid, 0, frames, 1162));
  }
  std::printf("Initial: %zu bytes, ClientHello %zu bytes\n", pk[0].size(), h.size());
  quic::FlowState st;
  ns_per("analyze (decrypt + locate SNI), keys cached", [&](unsigned) {
    st = {};
    return size_t(quic::analyze(pk[0].data(), pk[0].size(), 0, 1, c, st, *d));
  }, 200000);
  ns_per("analyze, keys derived (new DCID each time)", [&](unsigned i) {
    st = {};
    return size_t(quic::analyze(pk[i & 1023].data(), pk[i & 1023].size(), 0, 1, c, st, *d));
  }, 50000);
  st = {};
  quic::analyze(pk[0].data(), pk[0].size(), 0, 1, c, st, *d);
  auto w = pk[0];
  const names::Decision dec = names::Decision::redact();
  ns_per("rewrite (re-encrypt, tag, header protection)", [&](unsigned) {
    return size_t(quic::rewrite(w.data(), w.size(), *d, &dec, c));
  }, 200000);
  quic::Keys k{};
  const uint8_t dcid[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ns_per("key derivation alone (HKDF x5)", [&](unsigned i) {
    return size_t(c.initial_keys(*quic::version_info(1), dcid, 8, i & 1, k));
  }, 50000);
  return 0;
}
